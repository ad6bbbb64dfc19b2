//! Prepare: the provider's reusable starting point for a shape, an image and build steps (an
//! E2B template, a Daytona snapshot), named by a hash of that content so that every process
//! asking for the same content finds the same one instead of building another.
//!
//! [`Provider::prepare`](crate::Provider::prepare) finds the template or snapshot by its
//! [`PrepareSpec::name`], reuses it when it is ready, waits for it when it is being built, builds
//! it again when its build failed (a failed build is never reused), and otherwise builds it and
//! waits; a build that fails is an error carrying the provider's own reason. The
//! [`Prepared::template`] goes into [`CreateSpec::template`](crate::CreateSpec::template).
//!
//! That policy is [`find_or_build`], over the provider's own calls ([`Builds`]); the naming is
//! [`content_name`], over any serialisable description of what goes in. An adapter keeps only
//! its protocol: how it looks a name up, starts a build and waits for one.

use super::prices::Shape;
use crate::error::Result;
use async_trait::async_trait;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// SHA-256 (lowercase hex) of `content` serialised as JSON.
pub fn content_hash(content: &impl Serialize) -> String {
    // Serialising plain strings, numbers and arrays cannot fail.
    let json = serde_json::to_vec(content).unwrap_or_default();
    Sha256::digest(&json)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The name a template or snapshot of `content` gets: `sdk-` and the first 16 hex digits of
/// its [`content_hash`] (lowercase letters, digits and `-`, valid on every provider).
pub fn content_name(content: &impl Serialize) -> String {
    format!("sdk-{}", &content_hash(content)[..16])
}

/// What a provider holds under a prepare name, as [`find_or_build`] needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found<B> {
    /// Nothing by that name.
    Missing,
    /// Built and usable: its id (what goes into [`Prepared::template`]).
    Ready(String),
    /// Being built: its id, and the build to [`wait`](Builds::wait) for.
    Building(String, B),
    /// Its latest build failed or cannot be used (never reused): that state, for the log.
    Unusable(String),
}

/// The provider's side of [`find_or_build`]: its own calls, one per step.
#[async_trait]
pub trait Builds: Send + Sync {
    /// What identifies one build while it runs (a build id, a snapshot name).
    type Build: Send;

    /// Looks `name` up.
    async fn find(&self, name: &str) -> Result<Found<Self::Build>>;

    /// Starts a build under `name` (a new one, or a new build of an unusable one): its id and
    /// the build.
    async fn start(&self, name: &str) -> Result<(String, Self::Build)>;

    /// Waits until `build` of `name` is ready; a failed build is an error carrying the
    /// provider's reason, one still running past the provider's bound a `Timeout`.
    async fn wait(&self, name: &str, build: Self::Build) -> Result<()>;
}

/// The prepare policy: the id of what `builds` holds under `name`, and whether it existed
/// already (nothing was built by this call). Reused when ready, waited for when being built,
/// built again when its latest build failed, built when missing; every build is waited for.
pub async fn find_or_build<B: Builds + ?Sized>(builds: &B, name: &str) -> Result<(String, bool)> {
    match builds.find(name).await? {
        Found::Ready(id) => return Ok((id, true)),
        Found::Building(id, build) => {
            builds.wait(name, build).await?;
            return Ok((id, true));
        }
        Found::Unusable(state) => tracing::info!(
            name,
            latest_build = %state,
            "prepare: the latest build is not usable; building it again"
        ),
        Found::Missing => {}
    }
    let (id, build) = builds.start(name).await?;
    builds.wait(name, build).await?;
    Ok((id, false))
}

/// What to prepare: a base image, shell commands run on it in order, and the shape sandboxes
/// made from it get. Two specs with the same content have the same [`name`](Self::name).
///
/// ```
/// use sandbox_sdk_core::fleet::{PrepareSpec, Shape};
///
/// let spec = PrepareSpec::new("ubuntu:24.04")
///     .step("apt-get update && apt-get install -y curl")
///     .shape(Shape::new(2, 4, 10));
/// assert_eq!(spec.name(), spec.clone().name());
/// assert!(spec.name().starts_with("sdk-") && spec.name().len() == 20);
/// assert_ne!(spec.name(), spec.clone().step("true").name());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PrepareSpec {
    /// The base image (`ubuntu:24.04`, `python:3.12-slim`, ...).
    pub image: String,
    /// Shell commands run on the image as root, in order, each as one build step (a Dockerfile
    /// `RUN`).
    pub steps: Vec<String>,
    /// The size of sandboxes made from it; `None` keeps the provider's default.
    pub shape: Option<Shape>,
}

impl PrepareSpec {
    /// The image with no steps and the provider's default size.
    pub fn new(image: impl Into<String>) -> Self {
        PrepareSpec {
            image: image.into(),
            steps: Vec::new(),
            shape: None,
        }
    }

    /// Adds a build step.
    pub fn step(mut self, command: impl Into<String>) -> Self {
        self.steps.push(command.into());
        self
    }

    /// Sets the shape.
    pub fn shape(mut self, shape: Shape) -> Self {
        self.shape = Some(shape);
        self
    }

    /// SHA-256 (lowercase hex) of the image, the steps and the shape, serialised as JSON
    /// ([`content_hash`]).
    pub fn content_hash(&self) -> String {
        content_hash(self)
    }

    /// The name the provider's template or snapshot gets ([`content_name`]).
    pub fn name(&self) -> String {
        content_name(self)
    }

    /// The steps as a Dockerfile: `FROM image`, then one `RUN` per step (a step spanning lines
    /// has its line breaks continued with `\`).
    pub fn dockerfile(&self) -> String {
        let mut out = format!("FROM {}\n", self.image);
        for step in &self.steps {
            out.push_str("RUN ");
            out.push_str(&step.replace('\n', " \\\n"));
            out.push('\n');
        }
        out
    }
}

/// A prepared template or snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prepared {
    /// The provider's name.
    pub provider: String,
    /// What to put in [`CreateSpec::template`](crate::CreateSpec::template) (a template id, a
    /// snapshot name).
    pub template: String,
    /// The content-hash name it was found or built under ([`PrepareSpec::name`]).
    pub name: String,
    /// Whether an existing, ready one was reused (nothing was built).
    pub reused: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_follows_every_part_of_the_content() {
        let base = PrepareSpec::new("ubuntu:24.04").step("echo a");
        let names = [
            base.name(),
            base.clone().step("echo b").name(),
            PrepareSpec::new("ubuntu:22.04").step("echo a").name(),
            base.clone().shape(Shape::new(2, 4, 10)).name(),
            base.clone().shape(Shape::new(2, 4, 20)).name(),
        ];
        let mut unique = names.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(base.content_hash().len(), 64);
        assert!(
            base.name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
    }

    /// A provider whose name lookup answers `found`, recording the calls made.
    struct Script {
        found: Found<u32>,
        calls: std::sync::Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Builds for Script {
        type Build = u32;
        async fn find(&self, name: &str) -> Result<Found<u32>> {
            self.calls.lock().unwrap().push(format!("find {name}"));
            Ok(self.found.clone())
        }
        async fn start(&self, name: &str) -> Result<(String, u32)> {
            self.calls.lock().unwrap().push(format!("start {name}"));
            Ok(("new-id".into(), 2))
        }
        async fn wait(&self, name: &str, build: u32) -> Result<()> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("wait {name} {build}"));
            Ok(())
        }
    }

    #[tokio::test]
    async fn ready_is_reused_building_waited_for_and_the_rest_built() {
        for (found, want, calls) in [
            (Found::Ready("t".into()), ("t", true), &["find n"][..]),
            (
                Found::Building("t".into(), 1),
                ("t", true),
                &["find n", "wait n 1"][..],
            ),
            (
                Found::Unusable("error".into()),
                ("new-id", false),
                &["find n", "start n", "wait n 2"][..],
            ),
            (
                Found::Missing,
                ("new-id", false),
                &["find n", "start n", "wait n 2"][..],
            ),
        ] {
            let script = Script {
                found,
                calls: Default::default(),
            };
            let (id, reused) = find_or_build(&script, "n").await.unwrap();
            assert_eq!((id.as_str(), reused), want);
            assert_eq!(*script.calls.lock().unwrap(), calls);
        }
    }

    #[test]
    fn the_dockerfile_runs_each_step() {
        let spec = PrepareSpec::new("python:3.12")
            .step("pip install x")
            .step("a &&\nb");
        assert_eq!(
            spec.dockerfile(),
            "FROM python:3.12\nRUN pip install x\nRUN a && \\\nb\n"
        );
    }
}
