//! Sandboxes on the control plane: create ([`create`]), list ([`list`]), lifecycle calls
//! ([`calls`]) and the waits behind them ([`wait`]), states ([`state`]), snapshots
//! ([`snapshots`]), usage and limits ([`usage`]), preview links ([`preview`]).

pub(crate) mod calls;
pub(crate) mod create;
pub(crate) mod list;
pub(crate) mod preview;
pub(crate) mod snapshots;
pub(crate) mod state;
pub(crate) mod usage;
pub(crate) mod wait;
