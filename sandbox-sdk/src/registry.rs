//! The provider registry: a provider's name to a provider built from its usual environment
//! variables, for programs that choose the provider at run time.

use sandbox_sdk_core::{Error, ErrorKind, Provider, Result};
use std::sync::Arc;

/// Every provider name the registry knows, compiled in or not.
pub const ALL_PROVIDERS: &[&str] = &["local", "e2b", "daytona", "fly", "vercel", "sprites"];

/// The provider names compiled into this build (each behind its feature).
pub fn providers() -> Vec<&'static str> {
    ALL_PROVIDERS
        .iter()
        .copied()
        .filter(|name| compiled_in(name))
        .collect()
}

fn compiled_in(name: &str) -> bool {
    const FEATURES: [(&str, bool); 6] = [
        ("local", cfg!(feature = "local")),
        ("e2b", cfg!(feature = "e2b")),
        ("daytona", cfg!(feature = "daytona")),
        ("fly", cfg!(feature = "fly")),
        ("vercel", cfg!(feature = "vercel")),
        ("sprites", cfg!(feature = "sprites")),
    ];
    FEATURES.iter().any(|(n, on)| *n == name && *on)
}

/// Builds the provider named `name` from the process environment: `local` needs nothing; `e2b`
/// reads `E2B_API_KEY` (and `E2B_DOMAIN`, …), `daytona` `DAYTONA_API_KEY` (and
/// `DAYTONA_API_URL`, …), `fly` `FLY_API_TOKEN` and `FLY_APP_NAME` (and `FLY_REGION`, …),
/// `vercel` `VERCEL_TOKEN` with `VERCEL_TEAM_ID` and `VERCEL_PROJECT_ID`, or
/// `VERCEL_OIDC_TOKEN` (and `VERCEL_API_URL`, …), `sprites` `SPRITES_TOKEN` (and
/// `SPRITES_API_URL`), as each adapter's `from_env` documents.
///
/// An unknown name, or a provider whose feature is off, fails with
/// [`ErrorKind::ProviderNotFound`] naming the choices; missing credentials fail with the
/// adapter's own error naming the variable.
///
/// ```
/// use sandbox_sdk::{ErrorKind, provider_from_env};
/// assert_eq!(provider_from_env("local").unwrap().name(), "local");
/// let err = provider_from_env("nimbus").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::ProviderNotFound);
/// ```
pub fn provider_from_env(name: &str) -> Result<Arc<dyn Provider>> {
    provider_from_lookup(name, |var| std::env::var(var).ok())
}

/// Like [`provider_from_env`], reading variables through `lookup` (for tests and for
/// configuration that does not live in the environment).
pub fn provider_from_lookup(
    name: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Provider>> {
    let _ = &lookup;
    match name {
        #[cfg(feature = "local")]
        "local" => Ok(Arc::new(sandbox_sdk_core::local::LocalProvider::new())),
        #[cfg(feature = "e2b")]
        "e2b" => Ok(Arc::new(
            sandbox_e2b::E2bBuilder::from_lookup(lookup).build()?,
        )),
        #[cfg(feature = "daytona")]
        "daytona" => Ok(Arc::new(
            sandbox_daytona::DaytonaBuilder::from_lookup(lookup).build()?,
        )),
        #[cfg(feature = "fly")]
        "fly" => Ok(Arc::new(
            sandbox_fly::FlyBuilder::from_lookup(lookup).build()?,
        )),
        #[cfg(feature = "vercel")]
        "vercel" => Ok(Arc::new(
            sandbox_vercel::VercelBuilder::from_lookup(lookup).build()?,
        )),
        #[cfg(feature = "sprites")]
        "sprites" => Ok(Arc::new(
            sandbox_sprites::SpritesBuilder::from_lookup(lookup).build()?,
        )),
        other => Err(not_found(other)),
    }
}

/// The capability map the provider named `name` publishes, without credentials (Daytona's
/// varies by sandbox class; this is its default map). Unknown or disabled names fail as in
/// [`provider_from_env`].
pub fn capabilities_of(name: &str) -> Result<sandbox_sdk_core::Capabilities> {
    match name {
        #[cfg(feature = "local")]
        "local" => Ok(sandbox_sdk_core::local::LocalProvider::new().capabilities()),
        #[cfg(feature = "e2b")]
        "e2b" => Ok(sandbox_e2b::CAPABILITIES),
        #[cfg(feature = "daytona")]
        "daytona" => Ok(sandbox_daytona::CAPABILITIES),
        #[cfg(feature = "fly")]
        "fly" => Ok(sandbox_fly::CAPABILITIES),
        #[cfg(feature = "vercel")]
        "vercel" => Ok(sandbox_vercel::CAPABILITIES),
        #[cfg(feature = "sprites")]
        "sprites" => Ok(sandbox_sprites::CAPABILITIES),
        other => Err(not_found(other)),
    }
}

fn not_found(name: &str) -> Error {
    let built = providers().join(", ");
    let message = if ALL_PROVIDERS.contains(&name) {
        format!(
            "provider {name:?} is not compiled in: enable the sandbox-sdk feature \"{name}\" \
             (compiled in: {built})"
        )
    } else {
        format!(
            "no provider named {name:?}: known providers are {} (compiled in: {built})",
            ALL_PROVIDERS.join(", ")
        )
    };
    Error::new(ErrorKind::ProviderNotFound, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_disabled_names_are_provider_not_found() {
        let err = provider_from_lookup("nimbus", |_| None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ProviderNotFound);
        assert!(
            err.to_string()
                .contains("known providers are local, e2b, daytona, fly, vercel, sprites"),
            "{err}"
        );
        for name in ALL_PROVIDERS.iter().filter(|n| !compiled_in(n)) {
            let err = provider_from_lookup(name, |_| None).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ProviderNotFound);
            assert!(
                err.to_string().contains(&format!("feature \"{name}\"")),
                "{err}"
            );
        }
    }

    #[test]
    fn every_compiled_in_provider_publishes_capabilities_without_credentials() {
        for name in providers() {
            assert!(capabilities_of(name).is_ok(), "{name}");
        }
        let err = capabilities_of("nimbus").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ProviderNotFound);
    }

    #[cfg(feature = "e2b")]
    #[test]
    fn a_compiled_in_provider_without_credentials_names_the_variable() {
        let err = provider_from_lookup("e2b", |_| None).unwrap_err();
        assert_ne!(err.kind(), ErrorKind::ProviderNotFound);
        assert!(err.to_string().contains("E2B_API_KEY"), "{err}");
    }

    #[cfg(feature = "fly")]
    #[test]
    fn lookup_values_reach_the_adapter() {
        let vars = |v: &str| match v {
            "FLY_API_TOKEN" => Some("fo1_test".to_owned()),
            "FLY_APP_NAME" => Some("my-app".to_owned()),
            _ => None,
        };
        let fly = provider_from_lookup("fly", vars).unwrap();
        assert_eq!(fly.name(), "fly");
    }

    #[cfg(feature = "vercel")]
    #[test]
    fn vercel_is_built_from_its_variables() {
        let err = provider_from_lookup("vercel", |_| None).unwrap_err();
        assert!(err.to_string().contains("VERCEL_TOKEN"), "{err}");
        let vars = |v: &str| match v {
            "VERCEL_TOKEN" => Some("tok".to_owned()),
            "VERCEL_TEAM_ID" => Some("team_1".to_owned()),
            "VERCEL_PROJECT_ID" => Some("prj_1".to_owned()),
            _ => None,
        };
        assert_eq!(
            provider_from_lookup("vercel", vars).unwrap().name(),
            "vercel"
        );
        assert!(capabilities_of("vercel").unwrap().snapshot.is_available());
    }

    #[cfg(feature = "sprites")]
    #[test]
    fn sprites_is_built_from_its_variables() {
        let err = provider_from_lookup("sprites", |_| None).unwrap_err();
        assert!(err.to_string().contains("SPRITES_TOKEN"), "{err}");
        let vars = |name: &str| (name == "SPRITES_TOKEN").then(|| "tok".to_owned());
        assert_eq!(
            provider_from_lookup("sprites", vars).unwrap().name(),
            "sprites"
        );
        assert!(capabilities_of("sprites").unwrap().stdin.is_available());
    }
}
