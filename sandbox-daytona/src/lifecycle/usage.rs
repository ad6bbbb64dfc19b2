//! What sandboxes use and may use (PROTOCOL.md §4): metered periods from the analytics API,
//! [`Usage`] built from them (or estimated where there is no meter), and the organization's
//! per-sandbox limits.

use crate::api::client::Api;
use crate::config::PROVIDER;
use crate::wire::SandboxList;
use sandbox_sdk_core::fleet::Usage;
use sandbox_sdk_core::time::parse_rfc3339;
use sandbox_sdk_core::{Error, ErrorKind, Result, SandboxInfo};
use serde::Serialize;

/// One period of a sandbox's metered use, from Daytona's analytics API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsagePeriod {
    /// When the period started.
    pub start: Option<std::time::SystemTime>,
    /// When it ended (`None` while it runs).
    pub end: Option<std::time::SystemTime>,
    /// CPU cores billed (0 while the sandbox was stopped).
    pub cpu: f64,
    /// GPUs billed.
    pub gpu: f64,
    /// Memory billed, GB.
    pub memory_gb: f64,
    /// Disk billed, GB.
    pub disk_gb: f64,
    /// Price of the period, in US dollars, when reported.
    pub price: Option<f64>,
}

/// The organization's per-sandbox ceilings in one region and class, from the usage endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxLimits {
    /// Region id.
    pub region: String,
    /// Sandbox class (`container`, `linux-vm`, ...), when reported.
    pub sandbox_class: Option<String>,
    /// Most CPU cores one sandbox may have.
    pub max_cpu: Option<f64>,
    /// Most memory (GB) one sandbox may have.
    pub max_memory_gb: Option<f64>,
    /// Most disk (GB) one sandbox may have.
    pub max_disk_gb: Option<f64>,
    /// CPU quota of the organization in the region, and current use.
    pub cpu_quota: Option<f64>,
    /// CPU cores in use.
    pub cpu_used: Option<f64>,
    /// Memory quota (GB).
    pub memory_quota_gb: Option<f64>,
    /// Memory in use (GB).
    pub memory_used_gb: Option<f64>,
    /// Disk quota (GB).
    pub disk_quota_gb: Option<f64>,
    /// Disk in use (GB).
    pub disk_used_gb: Option<f64>,
}

/// The organization's per-sandbox limits and quota use in every region and class
/// (`GET /organizations/{orgId}/usage`). The organization id is the builder's, or read from
/// any sandbox of the organization when none was set.
pub(crate) async fn limits(api: &Api) -> Result<Vec<SandboxLimits>> {
    let org = organization_id(api).await?;
    let usage = api.organization_usage(&org).await?;
    Ok(usage
        .region_usage
        .into_iter()
        .map(|r| SandboxLimits {
            region: r.region_id,
            sandbox_class: r.sandbox_class,
            max_cpu: r.max_cpu_per_sandbox,
            max_memory_gb: r.max_memory_per_sandbox,
            max_disk_gb: r.max_disk_per_sandbox,
            cpu_quota: r.total_cpu_quota,
            cpu_used: r.current_cpu_usage,
            memory_quota_gb: r.total_memory_quota,
            memory_used_gb: r.current_memory_usage,
            disk_quota_gb: r.total_disk_quota,
            disk_used_gb: r.current_disk_usage,
        })
        .collect())
}

/// A sandbox's metered use between `from` and `to`, period by period, from the analytics API
/// whose URL `GET /config` publishes (`analyticsApiUrl`). An installation without one
/// answers `NotSupported`.
pub(crate) async fn sandbox_usage(
    api: &Api,
    sandbox_id: &str,
    from: std::time::SystemTime,
    to: std::time::SystemTime,
) -> Result<Vec<UsagePeriod>> {
    let config = api.public_config().await?;
    let Some(analytics) = config.analytics_api_url.filter(|u| !u.is_empty()) else {
        return Err(Error::not_supported(
            PROVIDER,
            "sandbox usage (no analytics API)",
        ));
    };
    // The key goes to this address.
    let analytics = api.checked_url(&analytics, "usage", sandbox_id)?;
    let org = organization_id(api).await?;
    let periods = api
        .analytics_usage(&analytics, &org, sandbox_id, from, to)
        .await?;
    Ok(periods
        .into_iter()
        .map(|p| UsagePeriod {
            start: p.start_at.as_deref().and_then(parse_rfc3339),
            end: p.end_at.as_deref().and_then(parse_rfc3339),
            cpu: p.cpu,
            gpu: p.gpu,
            memory_gb: p.ram_gb,
            disk_gb: p.disk_gb,
            price: p.price,
        })
        .collect())
}

async fn organization_id(api: &Api) -> Result<String> {
    if let Some(org) = &api.config.organization_id {
        return Ok(org.clone());
    }
    let list = api.list_sandboxes(None, 1, None, &[], "limits").await?;
    let items = match list {
        SandboxList::Page { items, .. } | SandboxList::Array(items) => items,
    };
    items
        .into_iter()
        .find_map(|s| s.organization_id)
        .ok_or_else(|| {
            Error::validation(
                "no organization id: set DAYTONA_ORGANIZATION_ID (there is no sandbox to read it from)",
            )
            .with_provider(PROVIDER)
            .with_operation("limits")
        })
}

/// Daytona's own meter: the usage periods of the analytics API since the sandbox was
/// created ([`sandbox_usage`]); periods with CPU are running time, the
/// rest is time held stopped, and the cost is the sum of the periods' prices. An
/// installation without an analytics API gets an estimate from the listing and the shipped
/// price table instead, marked `estimated`.
pub(crate) async fn usage(
    api: &Api,
    sandbox: &SandboxInfo,
    to: std::time::SystemTime,
) -> Result<Usage> {
    // The analytics API wants a window; a sandbox always has a creation time, so the
    // fallback start (2020, before Daytona sandboxes existed) only covers a listing
    // that lacks one.
    let from = sandbox.created_at.unwrap_or(
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_577_836_800),
    );
    match sandbox_usage(api, &sandbox.id, from, to).await {
        Ok(periods) => Ok(metered_usage(sandbox, from, to, &periods)),
        Err(e) if e.kind() == ErrorKind::NotSupported => {
            let prices = sandbox_sdk_core::fleet::PriceTable::builtin();
            let mut usage = sandbox_sdk_core::fleet::estimate(sandbox, to, prices.get(PROVIDER));
            usage.basis = format!("{} (this installation has no analytics API)", usage.basis);
            Ok(usage)
        }
        Err(e) => Err(e),
    }
}

/// Usage from Daytona's metered periods between `from` and `to`: a period with CPU billed is
/// running time, one without is time held (stopped, disk kept); an open period ends at `to`.
/// The cost is the sum of the periods' prices when every period has one.
pub(crate) fn metered_usage(
    sandbox: &SandboxInfo,
    from: std::time::SystemTime,
    to: std::time::SystemTime,
    periods: &[UsagePeriod],
) -> Usage {
    let mut running = std::time::Duration::ZERO;
    let mut held = std::time::Duration::ZERO;
    let mut cost = 0.0;
    let mut priced = 0;
    for p in periods {
        let (Some(start), end) = (p.start, p.end.unwrap_or(to)) else {
            continue;
        };
        let length = end.duration_since(start).unwrap_or_default();
        if p.cpu > 0.0 {
            running += length;
        } else {
            held += length;
        }
        if let Some(price) = p.price.filter(|p| p.is_finite()) {
            cost += price;
            priced += 1;
        }
    }
    let all_priced = priced == periods.len();
    Usage {
        sandbox_id: sandbox.id.clone(),
        provider: PROVIDER.to_owned(),
        from: Some(from),
        to,
        running,
        held,
        cost_usd: all_priced.then_some(cost),
        estimated: false,
        basis: format!(
            "Daytona's meter: {} usage period(s) from the analytics API{}",
            periods.len(),
            if all_priced {
                ""
            } else {
                ", not all of them priced, so no cost"
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn metered_periods_split_running_from_held_time_and_sum_their_prices() {
        let t = |m: u64| std::time::UNIX_EPOCH + Duration::from_secs(60 * m);
        let info = SandboxInfo::new("sb", PROVIDER, sandbox_sdk_core::SandboxState::Stopped);
        let period = |start: u64, end: Option<u64>, cpu: f64, price: Option<f64>| UsagePeriod {
            start: Some(t(start)),
            end: end.map(t),
            cpu,
            gpu: 0.0,
            memory_gb: cpu,
            disk_gb: 3.0,
            price,
        };
        let periods = [
            period(0, Some(30), 1.0, Some(0.0334)),
            // An open period (the sandbox is still stopped) ends at `to`.
            period(30, None, 0.0, Some(0.0002)),
        ];
        let usage = metered_usage(&info, t(0), t(60), &periods);
        assert_eq!(usage.running, Duration::from_secs(1800));
        assert_eq!(usage.held, Duration::from_secs(1800));
        assert!((usage.cost_usd.unwrap() - 0.0336).abs() < 1e-12);
        assert!(!usage.estimated);
        let unpriced = [period(0, Some(30), 1.0, None)];
        let usage = metered_usage(&info, t(0), t(60), &unpriced);
        assert_eq!(usage.cost_usd, None);
        assert!(usage.basis.contains("no cost"), "{}", usage.basis);
    }
}
