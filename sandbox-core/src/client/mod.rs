//! The client layer: wrappers around any provider, each doing one thing (retry, fallback, hooks, tracing, capability gating, emulation).
