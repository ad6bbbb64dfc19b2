//! The one provider registry: a provider name to a provider, credentials from each provider's
//! usual environment variables.

use sandbox_sdk_core::fleet::ShapeLimits;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{Provider, Sandbox};
use std::sync::Arc;

/// The variable that moves the `local` provider's root (default: the system temp directory's
/// `sandbox-sdk-local-{uid}`).
pub const LOCAL_ROOT_VAR: &str = "SBOX_LOCAL_ROOT";

/// The names of the providers this build drives, in the registry's order, as help text shows
/// them: `local, e2b, daytona, fly, vercel, sprites`.
pub fn names() -> String {
    sandbox_sdk::providers().join(", ")
}

/// A provider from the registry.
#[derive(Debug, Clone)]
pub enum Registered {
    /// The embedded local provider, kept concrete so a later `sbox` process can reopen the
    /// directory of a sandbox an earlier one created.
    Local(Arc<LocalProvider>),
    /// A cloud provider.
    Remote(Arc<dyn Provider>),
}

impl Registered {
    /// The provider as a trait object.
    pub fn provider(&self) -> Arc<dyn Provider> {
        match self {
            Registered::Local(local) => local.clone(),
            Registered::Remote(remote) => remote.clone(),
        }
    }

    /// Connects to a sandbox by id. For `local`, one created by an earlier `sbox` process is
    /// found by its directory under the provider's root.
    pub async fn connect(&self, id: &str) -> Result<Arc<dyn Sandbox>, sandbox_sdk_core::Error> {
        match self {
            Registered::Local(local) => Ok(Arc::new(local.reopen_local(id).await?)),
            Registered::Remote(remote) => Ok(Arc::from(remote.connect(id).await?)),
        }
    }
}

/// Builds the provider named `name` from its usual environment variables through the SDK's
/// registry (`sandbox_sdk::provider_from_env`); `local` is kept concrete and its root moves with
/// [`LOCAL_ROOT_VAR`]. An unknown name or a provider that cannot be built from the environment is
/// an error saying what to set.
pub fn provider(name: &str) -> Result<Registered, String> {
    if name == "local" {
        let local = match std::env::var_os(LOCAL_ROOT_VAR).filter(|v| !v.is_empty()) {
            Some(root) => LocalProvider::with_root(root),
            None => LocalProvider::new(),
        };
        return Ok(Registered::Local(Arc::new(local)));
    }
    sandbox_sdk::provider_from_env(name)
        .map(Registered::Remote)
        .map_err(|e| match e.kind() {
            sandbox_sdk::ErrorKind::ProviderNotFound => e.to_string(),
            _ => format!("cannot set up provider {name:?}: {e}"),
        })
}

/// The capability map of the provider named `name`, without credentials.
pub fn capabilities(name: &str) -> Result<sandbox_sdk_core::Capabilities, String> {
    sandbox_sdk::capabilities_of(name).map_err(|e| e.to_string())
}

/// The per-sandbox limits the provider named `name` reports through its API, where it has such
/// an endpoint: Daytona's organization usage (`GET /organizations/{id}/usage`), for the region
/// `DAYTONA_TARGET` names (the first one reported otherwise). `Ok(None)` for providers that
/// report none (their documented limits in the price table apply).
pub async fn shape_limits(name: &str) -> Result<Option<ShapeLimits>, String> {
    if name != "daytona" {
        return Ok(None);
    }
    let provider = sandbox_sdk::daytona::DaytonaBuilder::from_env()
        .build()
        .map_err(|e| e.to_string())?;
    let regions = provider.limits().await.map_err(|e| e.to_string())?;
    let target = std::env::var("DAYTONA_TARGET")
        .ok()
        .filter(|t| !t.is_empty());
    let region = regions
        .iter()
        .find(|r| target.as_deref().is_none_or(|t| r.region == t))
        .or(regions.first());
    let whole = |v: Option<f64>| {
        v.filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.floor().min(f64::from(u32::MAX)) as u32)
    };
    Ok(region.map(|r| ShapeLimits {
        max_cpus: whole(r.max_cpu),
        max_memory_gib: whole(r.max_memory_gb),
        min_disk_gib: None,
        max_disk_gib: whole(r.max_disk_gb),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_provider_names_the_known_ones() {
        let err = provider("nope").unwrap_err();
        assert!(err.contains("no provider named \"nope\""), "{err}");
        assert!(err.contains("local, e2b, daytona, fly"), "{err}");
    }

    #[test]
    fn capabilities_need_no_credentials() {
        for name in sandbox_sdk::ALL_PROVIDERS {
            let caps = capabilities(name).unwrap();
            assert!(caps.to_json().is_object(), "{name}");
        }
        assert!(capabilities("nope").is_err());
    }

    #[test]
    fn local_is_always_there() {
        let registered = provider("local").unwrap();
        assert_eq!(registered.provider().name(), "local");
    }
}
