//! Generates the scenario lists of `conformance_tests!` and `sim_conformance_tests!` from the
//! scenario tables themselves (`SCENARIOS` in `src/scenarios.rs`, `SIM_SCENARIOS` in
//! `src/simulated.rs`), so a scenario is registered by adding it to its table, nowhere else.

use std::path::Path;

fn main() {
    let scenarios = names("src/scenarios.rs", "scenario!(\"");
    let sim = names("src/simulated.rs", "name: \"sim_");
    let load = "sim_thousand_sandboxes";
    assert!(
        sim.iter().any(|s| s == load),
        "src/simulated.rs no longer names the load scenario {load}"
    );
    let sim_listed: Vec<String> = sim.into_iter().filter(|s| s != load).collect();
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let text = format!(
        "/// Every scenario of `SCENARIOS`, in order, for `conformance_tests!`.\n\
         #[doc(hidden)]\n#[macro_export]\nmacro_rules! __every_scenario {{\n    \
         ($suite:expr) => {{ $crate::__conformance_tests!($suite; {}); }};\n}}\n\n\
         /// Every scenario and then the simulator-only ones but the load scenario, for\n\
         /// `sim_conformance_tests!`.\n\
         #[doc(hidden)]\n#[macro_export]\nmacro_rules! __every_sim_scenario {{\n    \
         ($suite:expr) => {{ $crate::__conformance_tests!($suite; {} {}); }};\n}}\n",
        scenarios.join(" "),
        scenarios.join(" "),
        sim_listed.join(" "),
    );
    std::fs::write(Path::new(&out).join("scenario_lists.rs"), text).expect("write OUT_DIR");
    println!("cargo::rerun-if-changed=src/scenarios.rs");
    println!("cargo::rerun-if-changed=src/simulated.rs");
}

/// The quoted names following `marker` (which ends inside the opening quote) in `file`.
fn names(file: &str, marker: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {file}: {e}"));
    let keep = marker.rfind('"').map_or(marker.len(), |q| q + 1);
    text.match_indices(marker)
        .map(|(at, _)| {
            let start = at + keep;
            let len = text[start..].find('"').expect("a closing quote");
            text[start..start + len].to_owned()
        })
        .collect()
}
