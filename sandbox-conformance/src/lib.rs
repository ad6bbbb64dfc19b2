//! Placeholder crate root; filled by the conformance issue.
