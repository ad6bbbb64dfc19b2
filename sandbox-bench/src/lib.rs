//! The workspace's benchmarks live in `benches/sdk/` (run them with `cargo xtask bench`); this
//! crate has no library code of its own. It is not published.
