//! The one reqwest transport the adapters share (feature `http`). No reqwest type appears in its public API.
