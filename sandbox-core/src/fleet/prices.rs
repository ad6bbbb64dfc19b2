//! Shapes and prices: a ladder of sandbox sizes, a price table per provider shipped as data
//! (`prices.json` in this crate, with the date the prices are as of and where they come from),
//! and the hourly cost of a shape while it runs ([`Prices::rate`]) and while it is stopped
//! ([`Prices::held`]).
//!
//! Prices change; the table is data so that it can be replaced without a release:
//! [`PriceTable::from_json`] reads a table in the same format, and [`PriceTable::with`] puts
//! one provider's contract rates over the shipped ones.
//!
//! ```
//! use sandbox_sdk_core::fleet::{PriceTable, Shape};
//!
//! let table = PriceTable::builtin();
//! let e2b = table.get("e2b").expect("shipped");
//! let shape = Shape::new(2, 4, 10);
//! assert!((e2b.rate(&shape) - (2.0 * e2b.vcpu_hour + 4.0 * e2b.memory_gib_hour)).abs() < 1e-12);
//! assert_eq!(e2b.held(&shape), 0.0);
//! ```

use crate::error::{Error, ErrorKind, Result};
use crate::lifecycle::Resources;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The shipped price table, as JSON (see [`PriceTable`] for the format).
pub const BUILTIN_PRICES: &str = include_str!("../../prices.json");

/// The ladder of shapes offered, as (vCPUs, GiB of memory), smallest first; each provider's
/// [`shapes`] keeps those within its limits.
pub const LADDER: &[(u32, u32)] = &[(1, 2), (2, 4), (4, 8), (8, 16), (16, 32)];

/// Hours in the month the README's monthly column uses (365 × 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// A sandbox size: vCPUs, memory and disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape {
    /// Virtual CPUs.
    pub cpus: u32,
    /// Memory, GiB.
    pub memory_gib: u32,
    /// Disk, GiB.
    pub disk_gib: u32,
}

impl Shape {
    /// A shape of `cpus` vCPUs, `memory_gib` GiB of memory and `disk_gib` GiB of disk.
    pub const fn new(cpus: u32, memory_gib: u32, disk_gib: u32) -> Shape {
        Shape {
            cpus,
            memory_gib,
            disk_gib,
        }
    }

    /// The shape of reported resources: `None` unless both CPUs and memory are known. Memory is
    /// rounded up to whole GiB; unknown disk counts as 0 GiB.
    pub fn of(resources: &Resources) -> Option<Shape> {
        Some(Shape {
            cpus: resources.cpus?,
            memory_gib: u32::try_from(resources.memory_mb?.div_ceil(1024)).ok()?,
            disk_gib: resources
                .disk_gb
                .map_or(Some(0), |d| u32::try_from(d).ok())?,
        })
    }

    /// The shape as create-time [`Resources`] (memory in MiB).
    pub fn resources(&self) -> Resources {
        Resources {
            cpus: Some(self.cpus),
            memory_mb: Some(u64::from(self.memory_gib) * 1024),
            disk_gb: Some(u64::from(self.disk_gib)),
            gpus: None,
        }
    }
}

impl fmt::Display for Shape {
    /// `2x4` (vCPUs x GiB of memory) and the disk: `2x4, 10 GiB disk`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}, {} GiB disk",
            self.cpus, self.memory_gib, self.disk_gib
        )
    }
}

/// Per-sandbox ceilings: from the provider's API where it reports them, otherwise as its
/// documentation states them (the shipped table's `limits`). `None` means no known limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeLimits {
    /// Most vCPUs one sandbox may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpus: Option<u32>,
    /// Most memory one sandbox may have, GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_gib: Option<u32>,
    /// Least disk one sandbox gets, GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_disk_gib: Option<u32>,
    /// Most disk one sandbox may have, GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_disk_gib: Option<u32>,
}

impl ShapeLimits {
    /// Whether `shape` fits (its disk is not checked; see [`ShapeOffer`]'s disk range).
    pub fn fits(&self, cpus: u32, memory_gib: u32) -> bool {
        self.max_cpus.is_none_or(|max| cpus <= max)
            && self.max_memory_gib.is_none_or(|max| memory_gib <= max)
    }

    /// These limits, each replaced by `other`'s where `other` has one.
    pub fn overridden_by(&self, other: &ShapeLimits) -> ShapeLimits {
        ShapeLimits {
            max_cpus: other.max_cpus.or(self.max_cpus),
            max_memory_gib: other.max_memory_gib.or(self.max_memory_gib),
            min_disk_gib: other.min_disk_gib.or(self.min_disk_gib),
            max_disk_gib: other.max_disk_gib.or(self.max_disk_gib),
        }
    }
}

/// One provider's prices, per hour, with where they come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// The currency of every rate (`USD`).
    pub currency: String,
    /// Per vCPU-hour while running.
    pub vcpu_hour: f64,
    /// Per GiB-hour of memory while running.
    pub memory_gib_hour: f64,
    /// Per GiB-hour of disk while running.
    pub disk_gib_hour: f64,
    /// Per GiB-hour of disk while stopped or paused.
    pub stopped_disk_gib_hour: f64,
    /// The date (`YYYY-MM-DD`) these rates were read from `source`.
    pub as_of: String,
    /// Where they come from (the provider's pricing page).
    pub source: String,
    /// How they were derived and what they leave out.
    pub note: String,
    /// The provider's per-sandbox limits as documented (an API's answer overrides them).
    #[serde(default)]
    pub limits: ShapeLimits,
    /// The disk a sandbox gets when the caller names none, GiB.
    pub default_disk_gib: u32,
}

impl Prices {
    /// What `shape` costs per hour while it runs: vCPUs, memory and disk at their rates.
    pub fn rate(&self, shape: &Shape) -> f64 {
        f64::from(shape.cpus) * self.vcpu_hour
            + f64::from(shape.memory_gib) * self.memory_gib_hour
            + f64::from(shape.disk_gib) * self.disk_gib_hour
    }

    /// What `shape` costs per hour while it is stopped or paused: its disk.
    pub fn held(&self, shape: &Shape) -> f64 {
        f64::from(shape.disk_gib) * self.stopped_disk_gib_hour
    }

    fn check(&self, provider: &str) -> Result<()> {
        let rates = [
            ("vcpu_hour", self.vcpu_hour),
            ("memory_gib_hour", self.memory_gib_hour),
            ("disk_gib_hour", self.disk_gib_hour),
            ("stopped_disk_gib_hour", self.stopped_disk_gib_hour),
        ];
        for (name, rate) in rates {
            if !rate.is_finite() || rate < 0.0 {
                return Err(Error::validation(format!(
                    "price table: {provider}.{name} is {rate}, not a finite rate of 0 or more"
                )));
            }
        }
        if crate::time::parse_rfc3339(&format!("{}T00:00:00Z", self.as_of)).is_none() {
            return Err(Error::validation(format!(
                "price table: {provider}.as_of is {:?}, not a YYYY-MM-DD date",
                self.as_of
            )));
        }
        if self.source.is_empty() {
            return Err(Error::validation(format!(
                "price table: {provider}.source is empty: say where the prices come from"
            )));
        }
        Ok(())
    }
}

/// Prices per provider name.
///
/// The JSON format (that of the shipped [`BUILTIN_PRICES`]): an object keyed by provider name,
/// each value an object with `currency`, `vcpu_hour`, `memory_gib_hour`, `disk_gib_hour`,
/// `stopped_disk_gib_hour`, `as_of` (`YYYY-MM-DD`), `source`, `note`, `limits` (`max_cpus`,
/// `max_memory_gib`, `min_disk_gib`, `max_disk_gib`, each optional) and `default_disk_gib`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    providers: BTreeMap<String, Prices>,
}

impl PriceTable {
    /// The table shipped in this crate.
    pub fn builtin() -> PriceTable {
        // Proven by the unit test `the_shipped_table_parses`; an empty table is the only
        // fallback that cannot misprice anything.
        PriceTable::from_json(BUILTIN_PRICES).unwrap_or_default()
    }

    /// Reads a table in the shipped format. Anything malformed (unknown fields, a negative or
    /// non-finite rate, a date that is not `YYYY-MM-DD`, no source) is a `Validation` error
    /// naming it.
    pub fn from_json(json: &str) -> Result<PriceTable> {
        let table: PriceTable = serde_json::from_str(json).map_err(|e| {
            Error::new(ErrorKind::Validation, format!("price table: {e}")).with_source(e)
        })?;
        for (provider, prices) in &table.providers {
            prices.check(provider)?;
        }
        Ok(table)
    }

    /// This table with `provider`'s prices replaced by `prices` (or added).
    pub fn with(mut self, provider: impl Into<String>, prices: Prices) -> PriceTable {
        self.providers.insert(provider.into(), prices);
        self
    }

    /// This table with every provider `other` prices replaced by `other`'s entry.
    pub fn overridden_by(mut self, other: &PriceTable) -> PriceTable {
        for (name, prices) in &other.providers {
            self.providers.insert(name.clone(), prices.clone());
        }
        self
    }

    /// One provider's prices.
    pub fn get(&self, provider: &str) -> Option<&Prices> {
        self.providers.get(provider)
    }

    /// Every provider's prices, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Prices)> {
        self.providers.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// A shape a provider offers, with its disk range and its cost per hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShapeOffer {
    /// The shape, with the provider's default disk (within the range).
    pub shape: Shape,
    /// The least disk, GiB, when known.
    pub disk_min_gib: Option<u32>,
    /// The most disk, GiB, when known.
    pub disk_max_gib: Option<u32>,
    /// Cost per hour while running ([`Prices::rate`]).
    pub rate: f64,
    /// Cost per hour while stopped ([`Prices::held`]).
    pub held: f64,
}

/// The [`LADDER`] shapes within `limits` (the documented ones in `prices`, overridden by
/// `limits`), each with the default disk clamped to the disk range, priced by `prices`.
pub fn shapes(prices: &Prices, limits: &ShapeLimits) -> Vec<ShapeOffer> {
    let limits = prices.limits.overridden_by(limits);
    let mut disk = prices.default_disk_gib;
    if let Some(min) = limits.min_disk_gib {
        disk = disk.max(min);
    }
    if let Some(max) = limits.max_disk_gib {
        disk = disk.min(max);
    }
    LADDER
        .iter()
        .filter(|(cpus, memory)| limits.fits(*cpus, *memory))
        .map(|&(cpus, memory_gib)| {
            let shape = Shape::new(cpus, memory_gib, disk);
            ShapeOffer {
                shape,
                disk_min_gib: limits.min_disk_gib,
                disk_max_gib: limits.max_disk_gib,
                rate: prices.rate(&shape),
                held: prices.held(&shape),
            }
        })
        .collect()
}

/// A price in dollars as the tables show it: four decimals (`$0.1332`).
pub fn dollars(amount: f64) -> String {
    format!("${amount:.4}")
}

/// The cost table the README shows: per provider, every shape of its documented ladder with
/// its hourly rate running and stopped and its cost for a month of running, then each
/// provider's source and as-of date.
pub fn cost_markdown(table: &PriceTable) -> String {
    let mut out = String::from(
        "| provider | shape (vCPU x GiB, disk) | running $/h | stopped $/h | running $/month |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (name, prices) in table.iter() {
        for offer in shapes(prices, &ShapeLimits::default()) {
            let s = offer.shape;
            out.push_str(&format!(
                "| {name} | {}x{}, {} GiB | {} | {} | ${:.2} |\n",
                s.cpus,
                s.memory_gib,
                s.disk_gib,
                dollars(offer.rate),
                dollars(offer.held),
                offer.rate * HOURS_PER_MONTH,
            ));
        }
    }
    out.push('\n');
    for (name, prices) in table.iter() {
        out.push_str(&format!(
            "- **{name}**: {} as of {}, from <{}>. {}\n",
            prices.currency, prices.as_of, prices.source, prices.note
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_parses() {
        let table = PriceTable::from_json(BUILTIN_PRICES).unwrap();
        for name in ["e2b", "daytona", "fly"] {
            let prices = table.get(name).unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(prices.currency, "USD");
            assert!(prices.source.starts_with("https://"), "{name}");
        }
        assert_eq!(PriceTable::builtin(), table);
    }

    #[test]
    fn rate_and_held_follow_the_formula() {
        let p = PriceTable::builtin().get("daytona").unwrap().clone();
        let shape = Shape::new(4, 8, 10);
        let rate = 4.0 * p.vcpu_hour + 8.0 * p.memory_gib_hour + 10.0 * p.disk_gib_hour;
        assert!((p.rate(&shape) - rate).abs() < 1e-12);
        assert!((p.held(&shape) - 10.0 * p.stopped_disk_gib_hour).abs() < 1e-12);
        // E2B: 8 vCPU and 4 GiB is $0.468 an hour, the example its billing page gives.
        let e2b = PriceTable::builtin().get("e2b").unwrap().clone();
        assert!((e2b.rate(&Shape::new(8, 4, 0)) - 0.468).abs() < 1e-9);
    }

    #[test]
    fn the_ladder_stops_at_the_limits_and_the_api_overrides_the_documented_ones() {
        let e2b = PriceTable::builtin().get("e2b").unwrap().clone();
        let shown: Vec<(u32, u32)> = shapes(&e2b, &ShapeLimits::default())
            .iter()
            .map(|o| (o.shape.cpus, o.shape.memory_gib))
            .collect();
        assert_eq!(shown, [(1, 2), (2, 4), (4, 8)]);
        let daytona = PriceTable::builtin().get("daytona").unwrap().clone();
        assert_eq!(
            shapes(&daytona, &ShapeLimits::default()).len(),
            LADDER.len()
        );
        let org = ShapeLimits {
            max_cpus: Some(4),
            max_memory_gib: Some(8),
            min_disk_gib: None,
            max_disk_gib: Some(2),
        };
        let offers = shapes(&daytona, &org);
        assert_eq!(offers.len(), 3);
        assert!(offers.iter().all(|o| o.shape.disk_gib == 2), "{offers:?}");
    }

    #[test]
    fn overrides_replace_one_provider_and_bad_tables_are_named() {
        let mine = Prices {
            currency: "USD".into(),
            vcpu_hour: 1.0,
            memory_gib_hour: 0.0,
            disk_gib_hour: 0.0,
            stopped_disk_gib_hour: 0.0,
            as_of: "2027-01-01".into(),
            source: "contract".into(),
            note: String::new(),
            limits: ShapeLimits::default(),
            default_disk_gib: 0,
        };
        let table = PriceTable::builtin().with("fly", mine.clone());
        assert_eq!(table.get("fly"), Some(&mine));
        assert!(table.get("e2b").is_some());
        let json = serde_json::to_string(&PriceTable::default().with("x", mine)).unwrap();
        let read = PriceTable::from_json(&json).unwrap();
        assert_eq!(
            PriceTable::builtin()
                .overridden_by(&read)
                .get("x")
                .unwrap()
                .vcpu_hour,
            1.0
        );
        for (bad, says) in [
            (
                json.replace("\"vcpu_hour\":1.0", "\"vcpu_hour\":-1.0"),
                "x.vcpu_hour",
            ),
            (json.replace("2027-01-01", "Jan 2027"), "x.as_of"),
            (json.replace("\"contract\"", "\"\""), "x.source"),
            (json.replace("\"note\"", "\"notes\""), "unknown field"),
        ] {
            let e = PriceTable::from_json(&bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Validation);
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn shapes_of_reported_resources() {
        let r = Resources {
            cpus: Some(2),
            memory_mb: Some(4000),
            disk_gb: None,
            gpus: None,
        };
        assert_eq!(Shape::of(&r), Some(Shape::new(2, 4, 0)));
        assert_eq!(Shape::of(&Resources::default()), None);
        assert_eq!(
            Shape::of(&Shape::new(1, 2, 3).resources()),
            Some(Shape::new(1, 2, 3))
        );
    }

    #[test]
    fn the_markdown_names_every_provider_with_its_date_and_source() {
        let md = cost_markdown(&PriceTable::builtin());
        assert!(md.starts_with("| provider |"));
        assert!(
            md.contains("| e2b | 2x4, 10 GiB | $0.1656 | $0.0000 | $120.89 |"),
            "{md}"
        );
        for name in ["e2b", "daytona", "fly"] {
            assert!(
                md.contains(&format!("- **{name}**: USD as of 2026-12-01")),
                "{md}"
            );
        }
    }
}
