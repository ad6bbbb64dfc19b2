//! `cargo xtask bench`: runs the `sdk` benchmark of the unpublished `sandbox-bench` crate in
//! release mode and writes its measurements to `BENCHMARKS.md`.
//!
//! The benchmark (`sandbox-bench/benches/sdk/`) measures each SDK path and a raw baseline in the
//! same run, on loopback only, and prints one JSON line per measurement on stdout; this task
//! collects those lines, adds what machine they were taken on, and renders the table. Not part of
//! `cargo xtask ci`: timings belong here, never in tests.

use crate::args::Args;
use crate::{Result, shell};
use serde_json::Value;
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The file this task writes, relative to the workspace root.
const OUTPUT: &str = "BENCHMARKS.md";

/// The cargo command that runs the benchmark (`-- --quick` appended for a quick run).
const BENCH_ARGS: &[&str] = &["bench", "-p", "sandbox-bench", "--bench", "sdk"];

/// `cargo xtask bench [--quick]`: `--quick` uses small sizes and prints the table without writing
/// `BENCHMARKS.md`.
pub fn run(mut args: Args) -> Result {
    let quick = args.flag("--quick");
    let groups = args.rest()?;
    let machine = Machine::detect();
    let mut cargo_args: Vec<&str> = BENCH_ARGS.to_vec();
    cargo_args.push("--");
    if quick {
        cargo_args.push("--quick");
    }
    cargo_args.extend(groups.iter().map(String::as_str));
    eprintln!("running: cargo {}", cargo_args.join(" "));
    let output = shell::cargo_command()
        .args(&cargo_args)
        .current_dir(shell::workspace_root())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo {}` failed ({})",
            cargo_args.join(" "),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows = parse_rows(&stdout)?;
    let path = shell::workspace_root().join(OUTPUT);
    let markdown = if groups.is_empty() || quick {
        render(&rows, &machine, quick)
    } else {
        let current = std::fs::read_to_string(&path)
            .map_err(|e| format!("could not read {}: {e}", path.display()))?;
        splice(&current, &rows, &machine)
    };
    if quick {
        println!("{markdown}");
        eprintln!("(--quick: {OUTPUT} left unchanged)");
    } else {
        std::fs::write(&path, markdown)
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
        eprintln!("wrote {} ({} measurements)", path.display(), rows.len());
    }
    Ok(())
}

/// `current` with the sections of the groups in `rows` replaced by (or, when new, added as)
/// fresh ones, and a line under Machine saying when and under what load they were re-run.
fn splice(current: &str, rows: &[Row], machine: &Machine) -> String {
    let tail_at = current
        .find("## How these are measured")
        .unwrap_or(current.len());
    let (head, tail) = current.split_at(tail_at);
    let mut sections: Vec<String> = sections(head).into_iter().map(str::to_owned).collect();
    let rerun = groups_of(rows);
    for group in &rerun {
        let fresh = render_group(rows, group);
        let title = format!("## {group}\n");
        match sections.iter().position(|s| s.starts_with(&title)) {
            Some(i) => sections[i] = fresh,
            None => sections.push(fresh),
        }
    }
    let note = format!(
        "- Re-run alone on {} (load average {}): {}\n",
        machine.date,
        machine.load,
        rerun
            .iter()
            .map(|g| format!("`{g}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(machine_section) = sections.iter_mut().find(|s| s.starts_with("## Machine\n")) {
        let body = machine_section.trim_end().to_owned();
        let kept: Vec<&str> = body
            .lines()
            .filter(|l| {
                !(l.starts_with("- Re-run alone on ")
                    && rerun.iter().any(|g| l.ends_with(&format!("`{g}`"))))
            })
            .collect();
        *machine_section = format!("{}\n{note}\n", kept.join("\n"));
    }
    format!("{}{tail}", sections.concat())
}

/// Markdown cut before each `## ` heading (the first part is what precedes the first one).
fn sections(text: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = text.match_indices("\n## ").map(|(i, _)| i + 1).collect();
    starts.insert(0, 0);
    starts.push(text.len());
    starts
        .windows(2)
        .map(|w| &text[w[0]..w[1]])
        .filter(|s| !s.is_empty())
        .collect()
}

/// The groups of `rows`, in order of first appearance.
fn groups_of(rows: &[Row]) -> Vec<&str> {
    let mut groups: Vec<&str> = Vec::new();
    for row in rows {
        if !groups.contains(&row.group.as_str()) {
            groups.push(&row.group);
        }
    }
    groups
}

/// One measurement, as the benchmark printed it.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    group: String,
    name: String,
    baseline_name: String,
    unit: String,
    sdk: f64,
    baseline: f64,
    /// `None` when the baseline is zero (nothing to divide by).
    ratio: Option<f64>,
    iterations: u64,
    /// The interquartile range of the runs, in percent of the median.
    iqr_percent: f64,
    notes: String,
}

fn field<'a>(line: &'a Value, key: &str) -> Result<&'a Value> {
    line.get(key)
        .ok_or_else(|| format!("benchmark output line has no `{key}`: {line}"))
}

fn text(line: &Value, key: &str) -> Result<String> {
    field(line, key)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("benchmark output `{key}` is not a string: {line}"))
}

fn number(line: &Value, key: &str) -> Result<f64> {
    field(line, key)?
        .as_f64()
        .ok_or_else(|| format!("benchmark output `{key}` is not a number: {line}"))
}

/// The measurements in the benchmark's stdout: every line that starts with `{`.
fn parse_rows(stdout: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for line in stdout.lines().filter(|l| l.trim_start().starts_with('{')) {
        let value: Value = serde_json::from_str(line)
            .map_err(|e| format!("benchmark printed a line that is not JSON ({e}): {line}"))?;
        let baseline = number(&value, "baseline")?;
        rows.push(Row {
            group: text(&value, "group")?,
            name: text(&value, "name")?,
            baseline_name: text(&value, "baseline_name")?,
            unit: text(&value, "unit")?,
            sdk: number(&value, "sdk")?,
            baseline,
            ratio: (baseline != 0.0)
                .then(|| number(&value, "ratio"))
                .transpose()?,
            iterations: number(&value, "iterations")? as u64,
            iqr_percent: number(&value, "iqr_percent")?,
            notes: text(&value, "notes")?,
        });
    }
    if rows.is_empty() {
        return Err("the benchmark printed no measurements".to_owned());
    }
    Ok(rows)
}

/// Where and when the numbers were taken.
#[derive(Debug, Clone, PartialEq)]
struct Machine {
    date: String,
    cpus: usize,
    cpu_model: String,
    kernel: String,
    rustc: String,
    load: String,
}

impl Machine {
    fn detect() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, model)| model.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned()))
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let first_line = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|s| s.lines().next().map(str::to_owned))
                .unwrap_or_else(|| "unknown".to_owned())
        };
        let load = first_line("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        Machine {
            date: utc_date(SystemTime::now()),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel: first_line("/proc/sys/kernel/osrelease"),
            rustc,
            load,
        }
    }
}

/// `YYYY-MM-DD HH:MM UTC` for a time after the epoch.
fn utc_date(time: SystemTime) -> String {
    let text = sandbox_sdk_core::time::format_rfc3339(time);
    format!("{} {} UTC", &text[..10], &text[11..16])
}

/// A number with about three significant digits.
fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Pipes would end a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The whole of `BENCHMARKS.md`.
/// One group's section: its heading and table.
fn render_group(rows: &[Row], group: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## {group}\n");
    let _ = writeln!(
        out,
        "| Benchmark | SDK | Baseline | Ratio | Runs (IQR) | Notes |\n\
         |---|---:|---:|---:|---:|---|"
    );
    for row in rows.iter().filter(|r| r.group == group) {
        let ratio = row
            .ratio
            .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.2}x"));
        let runs = if row.iterations > 1 {
            format!("{} ({:.0}%)", row.iterations, row.iqr_percent)
        } else {
            "1".to_owned()
        };
        let _ = writeln!(
            out,
            "| {} | {} {} | {} {} ({}) | {} | {} | {} |",
            cell(&row.name),
            num(row.sdk),
            row.unit,
            num(row.baseline),
            row.unit,
            cell(&row.baseline_name),
            ratio,
            runs,
            cell(&row.notes)
        );
    }
    let _ = writeln!(out);
    out
}

fn render(rows: &[Row], machine: &Machine, quick: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Benchmarks\n\n\
         <!-- Generated by `cargo xtask bench`; do not edit by hand. -->\n\n\
         Speed and memory of the SDK's hot paths, each measured against a raw baseline (plain\n\
         `reqwest`, `tokio::process`, `tokio::fs`) **in the same run on the same machine**, on\n\
         loopback only. Absolute numbers depend on the machine and its load; the ratios are what\n\
         to compare across runs.\n\n\
         **Ratio** = the SDK's cost divided by the baseline's: time for time, 1/throughput for\n\
         throughput, bytes for memory. `1.00x` means as fast (or as small) as the raw baseline;\n\
         above 1 the SDK is slower (or bigger), below 1 it came out ahead (within noise).\n"
    );
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "- Date: {}", machine.date);
    let _ = writeln!(out, "- CPUs (`nproc`): {}", machine.cpus);
    let _ = writeln!(out, "- CPU: {}", machine.cpu_model);
    let _ = writeln!(out, "- Kernel: Linux {}", machine.kernel);
    let _ = writeln!(out, "- Compiler: {}", machine.rustc);
    let _ = writeln!(
        out,
        "- Load average when the run started: {} (the machine may be shared; medians and \
         interleaved runs damp that; the IQR column shows what is left)",
        machine.load
    );
    if quick {
        let _ = writeln!(out, "- Mode: `--quick` (small sizes, few iterations)");
    }
    let _ = writeln!(out);
    for group in groups_of(rows) {
        out.push_str(&render_group(rows, group));
    }
    let _ = writeln!(
        out,
        "## How these are measured\n\n\
         - Timed rows: warm-up runs of both paths, then several runs of each, alternating which\n\
         \x20 goes first; the table shows the median. Throughput is bytes moved per second of wall\n\
         \x20 time; latency is wall time per operation in a round of sequential operations.\n\
         \x20 \"IQR\" is the interquartile range of the runs (the larger of SDK and baseline) as a\n\
         \x20 percentage of the median: how far apart the middle half of the runs lie.\n\
         - Memory rows: each path runs several times, each run in a fresh process; the peak\n\
         \x20 resident set (`VmHWM`) is reset to the current one through `/proc/self/clear_refs`\n\
         \x20 just before the transfer, and the row shows the median of how far the peak rose\n\
         \x20 above the resident set before it.\n\
         - HTTP rows use a small hand-written HTTP/1.1 server on `127.0.0.1` that streams zeros\n\
         \x20 from one static buffer (it holds no body in memory), with keep-alive.\n\
         - Local rows use a `LocalProvider` sandbox in a private temporary directory.\n\
         - Adapter rows (`e2b`, `daytona`, `fly`, `vercel`) and `load` run against the project's provider\n\
         \x20 simulators (`sandbox_sim`: real processes and files, real delays between\n\
         \x20 state transitions, Daytona's lingering log WebSocket, Fly's exec rate limit), each\n\
         \x20 served from a child process so a measured client's memory is its own; each raw\n\
         \x20 baseline speaks the same protocol to the same simulator in the same run.\n\n\
         ## Reproduce\n\n\
         ```sh\n\
         cargo xtask bench            # runs everything in release mode and rewrites BENCHMARKS.md\n\
         cargo xtask bench --quick    # small sizes, prints the table, leaves BENCHMARKS.md alone\n\
         cargo xtask bench load       # re-runs the named groups and replaces their sections only\n\
         # or the benchmark alone (JSON lines on stdout, a summary on stderr):\n\
         cargo bench -p sandbox-bench --bench sdk -- [--quick] [http] [local] [e2b] [daytona] [fly] [vercel] [load]\n\
         ```\n\n\
         The benchmark's source is `sandbox-bench/benches/sdk/`; this file is written by\n\
         `xtask/src/bench.rs`."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_rerun_alone_replaces_its_section_and_says_when() {
        let machine = Machine {
            date: "2026-12-01 20:00 UTC".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            kernel: "k".into(),
            rustc: "rustc".into(),
            load: "1.00 1.00 1.00".into(),
        };
        let old_row = parse_rows(LINE).unwrap();
        let current = render(&old_row, &machine, false);
        let fresh = parse_rows(
            &LINE
                .replace("\"HTTP\"", "\"load\"")
                .replace("900.0", "12.5"),
        )
        .unwrap();
        let spliced = splice(&current, &fresh, &machine);
        assert!(spliced.contains("## HTTP\n"), "the other group stays");
        assert!(spliced.contains("## load\n"), "the new group is added");
        assert!(spliced.contains(
            "- Re-run alone on 2026-12-01 20:00 UTC (load average 1.00 1.00 1.00): `load`"
        ));
        assert!(
            spliced.find("## load").unwrap() < spliced.find("## How these are measured").unwrap()
        );
        let again = splice(&spliced, &fresh, &machine);
        assert_eq!(
            again, spliced,
            "re-running the same group again replaces, not repeats"
        );
    }

    const LINE: &str = r#"{"group":"HTTP","name":"download 64 MiB","baseline_name":"raw reqwest","unit":"MiB/s","higher_is_better":true,"sdk":900.0,"baseline":1000.0,"ratio":1.1111,"iterations":9,"iqr_percent":4.2,"notes":"a | b"}"#;

    fn machine() -> Machine {
        Machine {
            date: "2026-12-01 04:00 UTC".into(),
            cpus: 2,
            cpu_model: "cpu".into(),
            kernel: "6.1".into(),
            rustc: "rustc 1.95.0".into(),
            load: "0.1 0.2 0.3".into(),
        }
    }

    #[test]
    fn rows_come_from_json_lines_only() {
        let out = format!("noise\n{LINE}\n  more noise\n");
        let rows = parse_rows(&out).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "download 64 MiB");
        assert_eq!(rows[0].ratio, Some(1.1111));
        assert_eq!(rows[0].iterations, 9);
    }

    #[test]
    fn a_zero_baseline_has_no_ratio() {
        let line = LINE
            .replace(r#""baseline":1000.0"#, r#""baseline":0.0"#)
            .replace(r#""ratio":1.1111"#, r#""ratio":0.0"#);
        let rows = parse_rows(&line).unwrap();
        assert_eq!(rows[0].ratio, None);
        assert!(render(&rows, &machine(), false).contains("| n/a |"));
    }

    #[test]
    fn bad_output_is_an_error_that_says_why() {
        assert!(
            parse_rows("nothing here")
                .unwrap_err()
                .contains("no measurements")
        );
        let missing = LINE.replace(r#""unit":"MiB/s","#, "");
        assert!(parse_rows(&missing).unwrap_err().contains("`unit`"));
        assert!(parse_rows("{not json").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn the_table_shows_numbers_ratio_machine_and_escapes_pipes() {
        let rows = parse_rows(LINE).unwrap();
        let md = render(&rows, &machine(), false);
        assert!(md.contains("## HTTP"), "{md}");
        assert!(
            md.contains(
                "| download 64 MiB | 900 MiB/s | 1000 MiB/s (raw reqwest) | 1.11x | 9 (4%) | a \\| b |"
            ),
            "{md}"
        );
        assert!(md.contains("CPUs (`nproc`): 2"));
        assert!(md.contains("rustc 1.95.0"));
        assert!(!md.contains("--quick` (small"));
        assert!(render(&rows, &machine(), true).contains("--quick` (small"));
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc_date(std::time::UNIX_EPOCH), "1970-01-01 00:00 UTC");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_709_210_096); // leap day 2024
        assert_eq!(utc_date(t), "2024-02-29 12:34 UTC");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_798_761_599);
        assert_eq!(utc_date(t), "2026-12-31 23:59 UTC");
    }

    #[test]
    fn numbers_keep_about_three_digits() {
        assert_eq!(num(2644.28), "2644");
        assert_eq!(num(53.84), "53.8");
        assert_eq!(num(0.6914), "0.69");
    }
}
