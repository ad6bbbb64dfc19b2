//! The loop harness: warm-up, interleaved iterations, medians, one JSON line per measurement,
//! and peak-memory probes run in a fresh child process.

use std::time::{Duration, Instant};

/// A boxed error, enough for a benchmark that stops at the first failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// What every benchmark step returns.
pub type Result<T = ()> = std::result::Result<T, BoxError>;

/// How much work each measurement does.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Untimed runs of each path before measuring.
    pub warmup: usize,
    /// Timed runs of each path (the median is reported).
    pub iterations: usize,
    /// Body and output size of the throughput benchmarks.
    pub big: u64,
    /// The larger body of the memory probe, to show growth does not follow body size.
    pub bigger: u64,
    /// Requests per latency round.
    pub requests: usize,
    /// Processes per spawn round.
    pub spawns: usize,
}

impl Config {
    /// The sizes used for `BENCHMARKS.md`, or small ones for a quick look.
    pub fn new(quick: bool) -> Config {
        if quick {
            Config {
                warmup: 1,
                iterations: 3,
                big: 8 << 20,
                bigger: 32 << 20,
                requests: 200,
                spawns: 20,
            }
        } else {
            Config {
                warmup: 3,
                iterations: 15,
                big: 64 << 20,
                bigger: 256 << 20,
                requests: 2000,
                spawns: 200,
            }
        }
    }
}

/// `n` bytes as a short label: `64 MiB`.
pub fn size_label(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} B")
    }
}

/// The timings of both paths of one measurement, in seconds per run.
#[derive(Debug, Default)]
pub struct Timings {
    /// The SDK path.
    pub sdk: Vec<f64>,
    /// The raw baseline.
    pub baseline: Vec<f64>,
}

/// Runs both paths `config.warmup` times untimed, then `config.iterations` times each, alternating
/// which goes first so slow drift on a shared machine hits both alike.
pub async fn interleaved(
    config: &Config,
    sdk: impl AsyncFnMut() -> Result,
    baseline: impl AsyncFnMut() -> Result,
) -> Result<Timings> {
    rested(config, Duration::ZERO, sdk, baseline).await
}

/// Like [`interleaved`], with an untimed `rest` before every run (for a server whose rate limit
/// must refill between runs).
pub async fn rested(
    config: &Config,
    rest: Duration,
    mut sdk: impl AsyncFnMut() -> Result,
    mut baseline: impl AsyncFnMut() -> Result,
) -> Result<Timings> {
    let mut timings = Timings::default();
    for i in 0..config.warmup + config.iterations {
        for sdk_turn in [i % 2 == 0, i % 2 == 1] {
            if !rest.is_zero() {
                tokio::time::sleep(rest).await;
            }
            let seconds = if sdk_turn {
                timed(&mut sdk).await?
            } else {
                timed(&mut baseline).await?
            };
            if i >= config.warmup {
                if sdk_turn {
                    timings.sdk.push(seconds);
                } else {
                    timings.baseline.push(seconds);
                }
            }
        }
    }
    Ok(timings)
}

async fn timed(f: &mut impl AsyncFnMut() -> Result) -> Result<f64> {
    let started = Instant::now();
    f().await?;
    Ok(started.elapsed().as_secs_f64())
}

/// The median of `values` (the mean of the middle two for an even count); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The `q` quantile (0..=1) of sorted values, interpolated linearly; 0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// The interquartile range of `values` as a percentage of their median: how far apart the
/// middle half of the runs lie.
pub fn iqr_percent(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let m = median(&sorted);
    if m == 0.0 {
        return 0.0;
    }
    (quantile(&sorted, 0.75) - quantile(&sorted, 0.25)) / m * 100.0
}

/// One row of `BENCHMARKS.md`, printed on stdout as one JSON line.
pub struct Record<'a> {
    /// The table section: `HTTP`, `local exec`, `local files`.
    pub group: &'a str,
    /// What was measured.
    pub name: String,
    /// What the baseline is.
    pub baseline_name: &'a str,
    /// The unit of `sdk` and `baseline`.
    pub unit: &'a str,
    /// Whether a bigger number is better (throughput) or worse (time, memory).
    pub higher_is_better: bool,
    /// The SDK's number.
    pub sdk: f64,
    /// The baseline's number.
    pub baseline: f64,
    /// How many timed runs each number is the median of (1 for a one-shot probe).
    pub iterations: usize,
    /// The larger interquartile range of the SDK's and the baseline's runs, in percent of the
    /// median.
    pub iqr_percent: f64,
    /// What to know to read the row.
    pub notes: String,
}

impl Record<'_> {
    /// The SDK's cost relative to the baseline's: time for time, 1/throughput for throughput,
    /// bytes for memory. 1.0 is "as fast as raw"; above 1.0 the SDK is slower or bigger.
    pub fn ratio(&self) -> f64 {
        let (sdk, baseline) = if self.higher_is_better {
            (self.baseline, self.sdk)
        } else {
            (self.sdk, self.baseline)
        };
        if baseline == 0.0 { 0.0 } else { sdk / baseline }
    }

    /// Prints the record as one JSON line on stdout (for `cargo xtask bench`) and a readable
    /// line on stderr.
    pub fn emit(&self) {
        let ratio = self.ratio();
        eprintln!(
            "  {:<11} {:<52} sdk {:>10.2} {:<6} baseline {:>10.2} {:<6} ratio {:.2}x",
            self.group, self.name, self.sdk, self.unit, self.baseline, self.unit, ratio
        );
        let line = serde_json::json!({
            "group": self.group,
            "name": self.name,
            "baseline_name": self.baseline_name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "sdk": self.sdk,
            "baseline": self.baseline,
            "ratio": ratio,
            "iterations": self.iterations,
            "iqr_percent": self.iqr_percent,
            "notes": self.notes,
        });
        println!("{line}");
    }
}

/// Throughput in MiB/s of moving `bytes` in `seconds`.
pub fn mib_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds == 0.0 {
        0.0
    } else {
        bytes as f64 / (1 << 20) as f64 / seconds
    }
}

/// A throughput record from timings of moving `bytes` per run.
pub fn throughput_record<'a>(
    group: &'a str,
    name: String,
    baseline_name: &'a str,
    bytes: u64,
    timings: &Timings,
    notes: String,
) -> Record<'a> {
    let rates = |t: &[f64]| t.iter().map(|s| mib_per_s(bytes, *s)).collect::<Vec<_>>();
    let (sdk, baseline) = (rates(&timings.sdk), rates(&timings.baseline));
    Record {
        group,
        name,
        baseline_name,
        unit: "MiB/s",
        higher_is_better: true,
        sdk: median(&sdk),
        baseline: median(&baseline),
        iterations: timings.sdk.len(),
        iqr_percent: iqr_percent(&sdk).max(iqr_percent(&baseline)),
        notes,
    }
}

/// A per-operation latency record (µs) from timings of rounds of `ops` operations each.
pub fn latency_record<'a>(
    group: &'a str,
    name: String,
    baseline_name: &'a str,
    ops: usize,
    timings: &Timings,
    notes: String,
) -> Record<'a> {
    let per_op = |t: &[f64]| t.iter().map(|s| s / ops as f64 * 1e6).collect::<Vec<_>>();
    let (sdk, baseline) = (per_op(&timings.sdk), per_op(&timings.baseline));
    let (sdk_median, baseline_median) = (median(&sdk), median(&baseline));
    Record {
        group,
        name,
        baseline_name,
        unit: "µs/op",
        higher_is_better: false,
        sdk: sdk_median,
        baseline: baseline_median,
        iterations: timings.sdk.len(),
        iqr_percent: iqr_percent(&sdk).max(iqr_percent(&baseline)),
        notes: format!(
            "{:+.1} µs per operation against the baseline; {notes}",
            sdk_median - baseline_median
        ),
    }
}

/// Two per-operation latency rows, median and p95, from timings of one operation per run.
pub fn latency_rows(group: &str, name: &str, baseline_name: &str, timings: &Timings, notes: &str) {
    let us = |t: &[f64]| {
        let mut v: Vec<f64> = t.iter().map(|s| s * 1e6).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (sdk, baseline) = (us(&timings.sdk), us(&timings.baseline));
    for (label, q) in [("median", 0.5), ("p95", 0.95)] {
        let (a, b) = (quantile(&sdk, q), quantile(&baseline, q));
        Record {
            group,
            name: format!("{name}: {label}"),
            baseline_name,
            unit: "µs/op",
            higher_is_better: false,
            sdk: a,
            baseline: b,
            iterations: sdk.len(),
            iqr_percent: iqr_percent(&sdk).max(iqr_percent(&baseline)),
            notes: format!("{:+.1} µs against the baseline; {notes}", a - b),
        }
        .emit();
    }
}

/// Writes `n` bytes of real data (not a sparse file, which reads faster) to `path`.
pub fn write_file(path: &std::path::Path, n: u64) -> Result {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let block = [7u8; 64 * 1024];
    for _ in 0..n / block.len() as u64 {
        file.write_all(&block)?;
    }
    file.write_all(&block[..(n % block.len() as u64) as usize])?;
    file.flush()?;
    Ok(())
}

/// Reads a `kB` field (`VmRSS`, `VmHWM`) of `/proc/self/status`, in bytes.
pub fn status_field(name: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))
        .ok_or_else(|| format!("no {name} in /proc/self/status"))?;
    let kb: u64 = line[name.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kb * 1024)
}

/// Runs `work` and returns by how much the process's peak resident set grew over its resident
/// set just before: the peak (`VmHWM`) is reset to the current RSS first by writing `5` to
/// `/proc/self/clear_refs`. Meant for a fresh probe process, where freed memory of earlier work
/// cannot hide growth.
pub async fn peak_growth(work: impl AsyncFnOnce() -> Result) -> Result<u64> {
    let before = status_field("VmRSS")?;
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|e| format!("cannot reset the peak RSS (/proc/self/clear_refs): {e}"))?;
    work().await?;
    let peak = status_field("VmHWM")?;
    Ok(peak.saturating_sub(before))
}

/// The marker that makes the bench binary run one memory probe and print its result.
pub const PROBE_FLAG: &str = "--probe";

/// Runs `--probe CASE BYTES` in a fresh copy of this binary, with `env` added to its
/// environment, and returns the peak growth it printed, in bytes.
pub fn probe_in_child(case: &str, bytes: u64, env: &[(String, String)]) -> Result<u64> {
    let exe = std::env::current_exe()?;
    let output = std::process::Command::new(exe)
        .args([PROBE_FLAG, case, &bytes.to_string()])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("memory probe {case} failed: {}", output.status).into());
    }
    let text = String::from_utf8(output.stdout)?;
    Ok(text
        .trim()
        .parse()
        .map_err(|e| format!("memory probe {case} printed {text:?}: {e}"))?)
}

/// Runs the probe `case` in `runs` fresh processes (with `env` added); returns every growth in
/// MiB.
pub fn probe_runs(
    case: &str,
    bytes: u64,
    runs: usize,
    env: &[(String, String)],
) -> Result<Vec<f64>> {
    (0..runs)
        .map(|_| probe_in_child(case, bytes, env).map(mib))
        .collect()
}

/// How many fresh processes each memory row is the median of.
pub fn memory_runs(config: &Config) -> usize {
    config.iterations.min(5)
}

/// A peak-memory record (MiB) from probe runs of both paths.
pub fn memory_record<'a>(
    group: &'a str,
    name: String,
    baseline_name: &'a str,
    sdk: &[f64],
    baseline: &[f64],
    notes: String,
) -> Record<'a> {
    Record {
        group,
        name,
        baseline_name,
        unit: "MiB",
        higher_is_better: false,
        sdk: median(sdk),
        baseline: median(baseline),
        iterations: sdk.len(),
        iqr_percent: iqr_percent(sdk).max(iqr_percent(baseline)),
        notes,
    }
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
