//! `sbox reap`, `sbox shapes` and `sbox usage`: the fleet operations of `sandbox-sdk-core`
//! (`sandbox_sdk_core::fleet`) from the shell, printed as tables.

use crate::registry;
use sandbox_sdk_core::client::{Client, RetryPolicy};
use sandbox_sdk_core::fleet::{
    self, Owner, PriceTable, ReapPolicy, ReapReport, ShapeLimits, dollars,
};
use sandbox_sdk_core::text::escape_controls;
use sandbox_sdk_core::{ListFilter, Provider, ProviderExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The owner label prefix sbox uses by default: `sandbox_tools_owner`, the label `sbox create`
/// and the agent tools of `sbox mcp` put on their sandboxes.
pub const SBOX_PREFIX: &str = "sandbox_tools";

/// Parses a duration written as a whole number and a unit: `90s`, `30m`, `12h`, `7d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write it as 90s, 30m, 12h or 7d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?} has no unit: write it as 90s, 30m, 12h or 7d"
            ));
        }
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// The owner sbox acts for: `prefix` and `id` as given, by default the label sbox and its tools
/// create with (`sandbox_tools_owner` = the user running sbox, `u{uid}.{host}`: one user's
/// `sbox reap` never reaches another user's sandboxes unless `--owner` names them).
pub fn owner(prefix: Option<&str>, id: Option<&str>) -> Result<Owner, String> {
    let default_id = sandbox_tools::ToolConfig::default().owner;
    Owner::with_prefix(
        prefix.unwrap_or(SBOX_PREFIX),
        id.unwrap_or(default_id.as_str()),
    )
    .map_err(|e| e.to_string())
}

/// The shipped price table, with the providers `file` prices put over it.
pub fn prices(file: Option<&Path>) -> Result<PriceTable, String> {
    let builtin = PriceTable::builtin();
    let Some(file) = file else {
        return Ok(builtin);
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read prices from {}: {e}", file.display()))?;
    let theirs =
        PriceTable::from_json(&text).map_err(|e| format!("{}: {}", file.display(), e.message()))?;
    Ok(builtin.overridden_by(&theirs))
}

/// Rows printed with each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    // Cells hold provider text (ids, states, error messages): escaped, so none can hold a line
    // break that forges a row or an escape sequence that rewrites the terminal.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| escape_controls(cell).into_owned())
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The reap report as a table: every sandbox the owner's listing showed, what happened to it
/// (or, in a dry run, would) and why; then the summary line.
pub fn reap_table(report: &ReapReport) -> String {
    let mut rows = Vec::new();
    for doomed in &report.planned {
        let id = &doomed.info.id;
        let action = if report.dry_run {
            "would destroy".to_owned()
        } else if report.destroyed.contains(id) {
            "destroyed".to_owned()
        } else if let Some(f) = report.failed.iter().find(|f| &f.doomed.info.id == id) {
            format!("FAILED: {}", f.error)
        } else {
            // Gone before its destroy: it is among the skipped rows below.
            continue;
        };
        rows.push(vec![
            id.clone(),
            doomed.info.state.to_string(),
            action,
            doomed.reasons_text(),
        ]);
    }
    for skipped in &report.skipped {
        rows.push(vec![
            skipped.id.clone(),
            skipped.state.to_string(),
            "left alone".to_owned(),
            skipped.reason.to_string(),
        ]);
    }
    let mut out = table(&["ID", "STATE", "ACTION", "WHY"], &rows);
    out.push_str(&report.summary_line());
    out.push('\n');
    out
}

/// `sbox reap`.
pub async fn reap(
    provider: Arc<dyn Provider>,
    owner: &Owner,
    policy: &ReapPolicy,
) -> Result<(String, bool), String> {
    let client = Client::builder(provider)
        .retry(RetryPolicy::default())
        .build();
    let report = fleet::reap(&client, owner, policy)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = format!(
        "reap{} of {} sandboxes owned by {owner}\n",
        if policy.dry_run { " (dry run)" } else { "" },
        client.name()
    );
    out.push_str(&reap_table(&report));
    Ok((out, report.failed.is_empty()))
}

/// `sbox shapes`: the ladder within the provider's limits (its API's, where it reports them),
/// each shape's cost per hour running and stopped.
pub async fn shapes(name: &str, prices: &PriceTable) -> Result<String, String> {
    let Some(p) = prices.get(name) else {
        return Err(format!(
            "the price table has no prices for {name:?}; give them with --prices FILE (the format of sandbox-core/prices.json)"
        ));
    };
    let (limits, from) = match registry::shape_limits(name).await {
        Ok(Some(limits)) => (limits, "the provider's API"),
        Ok(None) => (ShapeLimits::default(), "its documentation"),
        Err(e) => {
            eprintln!(
                "sbox: warning: cannot read {name}'s limits ({e}); using the documented ones"
            );
            (ShapeLimits::default(), "its documentation")
        }
    };
    let offers = fleet::shapes(p, &limits);
    let rows: Vec<Vec<String>> = offers
        .iter()
        .map(|o| {
            let range = match (o.disk_min_gib, o.disk_max_gib) {
                (Some(min), Some(max)) => format!(" ({min}..{max})"),
                (None, Some(max)) => format!(" (..{max})"),
                (Some(min), None) => format!(" ({min}..)"),
                (None, None) => String::new(),
            };
            vec![
                format!("{}x{}", o.shape.cpus, o.shape.memory_gib),
                format!("{}{range}", o.shape.disk_gib),
                dollars(o.rate),
                dollars(o.held),
            ]
        })
        .collect();
    let mut out = format!(
        "shapes of {name}: limits from {from}; {} as of {}, from {}\n",
        p.currency, p.as_of, p.source
    );
    out.push_str(&table(
        &[
            "SHAPE (vCPU x GiB)",
            "DISK GiB",
            "RUNNING $/h",
            "STOPPED $/h",
        ],
        &rows,
    ));
    Ok(out)
}

/// `sbox usage`: what each of the owner's sandboxes ran and cost so far.
pub async fn usage(
    provider: Arc<dyn Provider>,
    owner: &Owner,
    prices: PriceTable,
) -> Result<String, String> {
    let client = Client::builder(provider)
        .retry(RetryPolicy::default())
        .owner(owner.clone())
        .prices(prices)
        .build();
    let infos = client
        .list_all(&ListFilter::new())
        .await
        .map_err(|e| e.to_string())?;
    let now = SystemTime::now();
    let mut rows = Vec::new();
    let mut total = 0.0;
    let mut all_priced = true;
    for info in &infos {
        let usage = client.usage(info, now).await.map_err(|e| e.to_string())?;
        match usage.cost_usd {
            Some(c) => total += c,
            None => all_priced = false,
        }
        rows.push(vec![
            info.id.clone(),
            info.state.to_string(),
            format_hours(usage.running),
            format_hours(usage.held),
            usage.cost_usd.map_or("-".to_owned(), dollars),
            if usage.estimated {
                "estimated".to_owned()
            } else {
                "metered".to_owned()
            },
        ]);
    }
    let mut out = format!("usage of {} sandboxes owned by {owner}\n", client.name());
    out.push_str(&table(
        &["ID", "STATE", "RUNNING", "HELD", "COST", "SOURCE"],
        &rows,
    ));
    out.push_str(&format!(
        "{} sandbox(es), {}{}\n",
        infos.len(),
        dollars(total),
        if all_priced {
            ""
        } else {
            " (some sandboxes could not be priced)"
        }
    ));
    Ok(out)
}

/// Hours with one decimal: `3.5h`.
fn format_hours(d: Duration) -> String {
    format!("{:.1}h", d.as_secs_f64() / 3600.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        for bad in ["", "12", "h", "1.5h", "-3h", "3w", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sbox_owns_with_the_label_its_create_and_tools_use() {
        let default = owner(None, None).unwrap();
        assert_eq!(default.label_key(), sandbox_tools::OWNER_LABEL);
        assert_eq!(default.id(), sandbox_tools::ToolConfig::default().owner);
        // The user running sbox, not a name every user shares.
        assert_eq!(default.id(), Owner::current_user_id());
        assert_eq!(
            owner(Some("acme"), Some("ci")).unwrap().to_string(),
            "acme_owner=ci"
        );
        assert!(owner(Some("Bad"), None).is_err());
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["ID", "WHY"],
            &[
                vec!["a".into(), "x".into()],
                vec!["long-id".into(), "y".into()],
            ],
        );
        assert_eq!(t, "ID       WHY\na        x\nlong-id  y\n");
    }

    #[test]
    fn a_cell_cannot_forge_a_row_or_reach_the_terminal_raw() {
        let t = table(
            &["ID", "WHY"],
            &[vec!["a\nforged  row".into(), "\u{1b}]0;x\u{7}".into()]],
        );
        assert_eq!(
            t,
            "ID              WHY\na\\nforged  row  \\u{1b}]0;x\\u{7}\n"
        );
    }
}
