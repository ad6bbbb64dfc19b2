#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use sandbox_sdk_core::*;

#[cfg(feature = "daytona")]
#[cfg_attr(docsrs, doc(cfg(feature = "daytona")))]
pub use sandbox_daytona as daytona;
#[cfg(feature = "e2b")]
#[cfg_attr(docsrs, doc(cfg(feature = "e2b")))]
pub use sandbox_e2b as e2b;
#[cfg(feature = "fly")]
#[cfg_attr(docsrs, doc(cfg(feature = "fly")))]
pub use sandbox_fly as fly;
#[cfg(feature = "vercel")]
#[cfg_attr(docsrs, doc(cfg(feature = "vercel")))]
pub use sandbox_vercel as vercel;

mod registry;

/// The workspace README's snippets, compiled as doc tests so they stay true.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct WorkspaceReadmeDoctests;
pub use registry::{
    ALL_PROVIDERS, capabilities_of, provider_from_env, provider_from_lookup, providers,
};

/// What a program using sandboxes needs in scope: the traits and their conveniences, the
/// command and create types, process events, errors and the drop guard.
pub mod prelude {
    pub use sandbox_sdk_core::{
        Command, CreateSpec, DestroyOnDrop, Error, ErrorKind, ProcessEvent, Provider, ProviderExt,
        Result, Sandbox, SandboxExt,
    };
}
