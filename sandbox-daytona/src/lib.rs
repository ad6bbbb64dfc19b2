//! # sandbox-daytona
//!
//! The [Daytona](https://www.daytona.io) adapter for `sandbox-sdk-core`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod capabilities;
mod demux;
mod error;
mod exec;
mod provider;
mod sandbox;
mod ssh;
mod state;
mod time;
mod wire;

pub use builder::{
    DEFAULT_API_URL, DEFAULT_SDK_VERSION, DaytonaBuilder, LogFollow, MIN_SDK_VERSION, SOURCE,
};
pub use capabilities::{CAPABILITIES, FLAGS};
pub use demux::{LogDemux, LogStream, MARKER_LEN, split_log};
pub use error::{is_state_change_in_progress, map_error};
pub use provider::{
    DaytonaCreate, DaytonaProvider, IDEMPOTENCY_LABEL, SandboxLimits, SnapshotSize, snapshot_name,
};
pub use sandbox::{
    DaytonaFileInfo, DaytonaSandbox, ExecuteResult, FileMatch, Session, SessionCommand, SessionExec,
};
pub use ssh::DEFAULT_SSH_HOST;
pub use state::{ALL_STATES, Phase, core_state, phase};
pub use wire::VolumeMount;
