//! Placeholder crate root; filled by its adapter issue.
