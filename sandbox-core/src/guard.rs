//! [`DestroyOnDrop`]: an opt-in guard that destroys a sandbox when it goes out of scope, so an
//! early return or a panic does not leave a VM running (and billing).

use crate::error::Result;
use crate::provider::Sandbox;
use std::ops::Deref;

/// Owns a sandbox and destroys it when dropped, unless [`keep`](DestroyOnDrop::keep) takes it
/// back. Derefs to the sandbox.
///
/// Prefer ending with [`destroy`](DestroyOnDrop::destroy)`.await`, which reports the result.
/// A drop can only start the destroy: it spawns it on the current tokio runtime and logs a
/// failure at `warn`; a runtime that shuts down at once (the end of `main`) may cut it short,
/// and with no runtime at all the sandbox is left running and a warning names it.
///
/// ```
/// use sandbox_sdk_core::local::LocalProvider;
/// use sandbox_sdk_core::{CreateSpec, DestroyOnDrop, Provider, SandboxExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> sandbox_sdk_core::Result<()> {
/// let provider = LocalProvider::new();
/// let sandbox = DestroyOnDrop::new(provider.create(&CreateSpec::new()).await?);
/// let out = sandbox.run_shell("echo hi").await?; // `?` here would still destroy it
/// assert_eq!(out.stdout_lossy().trim(), "hi");
/// sandbox.destroy().await
/// # }
/// ```
pub struct DestroyOnDrop {
    sandbox: Option<Box<dyn Sandbox>>,
}

impl DestroyOnDrop {
    /// Guards `sandbox`.
    pub fn new(sandbox: Box<dyn Sandbox>) -> DestroyOnDrop {
        DestroyOnDrop {
            sandbox: Some(sandbox),
        }
    }

    /// Disarms the guard and gives the sandbox back, still running.
    pub fn keep(mut self) -> Box<dyn Sandbox> {
        self.sandbox
            .take()
            .expect("the guard holds its sandbox until dropped")
    }

    /// Destroys the sandbox now and reports the result.
    pub async fn destroy(mut self) -> Result<()> {
        let sandbox = self
            .sandbox
            .take()
            .expect("the guard holds its sandbox until dropped");
        sandbox.destroy().await
    }
}

impl Deref for DestroyOnDrop {
    type Target = dyn Sandbox;

    fn deref(&self) -> &Self::Target {
        self.sandbox
            .as_deref()
            .expect("the guard holds its sandbox until dropped")
    }
}

impl std::fmt::Debug for DestroyOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DestroyOnDrop")
            .field("sandbox", &self.sandbox.as_ref().map(|s| s.id()))
            .finish()
    }
}

impl Drop for DestroyOnDrop {
    fn drop(&mut self) {
        let Some(sandbox) = self.sandbox.take() else {
            return;
        };
        let id = sandbox.id().to_owned();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = sandbox.destroy().await {
                        tracing::warn!(sandbox = %id, error = %e, "destroy on drop failed");
                    }
                });
            }
            Err(_) => tracing::warn!(
                sandbox = %id,
                "dropped outside a tokio runtime: the sandbox is left running"
            ),
        }
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::*;
    use crate::local::LocalProvider;
    use crate::{CreateSpec, ErrorKind, Provider};

    #[tokio::test]
    async fn a_dropped_guard_destroys_and_a_kept_sandbox_stays() {
        let root = tempfile::tempdir().unwrap();
        let provider = LocalProvider::with_root(root.path());
        let dropped = provider.create(&CreateSpec::new()).await.unwrap();
        let id = dropped.id().to_owned();
        {
            let _guard = DestroyOnDrop::new(dropped);
        }
        // The destroy runs on this runtime: poll until it has (no sleep, a bounded number of
        // yields).
        let mut gone = false;
        for _ in 0..10_000 {
            tokio::task::yield_now().await;
            if provider
                .connect(&id)
                .await
                .is_err_and(|e| e.kind() == ErrorKind::NotFound)
            {
                gone = true;
                break;
            }
        }
        assert!(gone, "the dropped guard destroyed {id}");

        let kept = DestroyOnDrop::new(provider.create(&CreateSpec::new()).await.unwrap()).keep();
        tokio::task::yield_now().await;
        assert!(provider.connect(kept.id()).await.is_ok());
        DestroyOnDrop::new(kept).destroy().await.unwrap();
    }
}
