//! Prepare: the provider's reusable starting point for a shape, an image and build steps (an
//! E2B template, a Daytona snapshot), named by a hash of that content so that every process
//! asking for the same content finds the same one instead of building another.
//!
//! [`Provider::prepare`](crate::Provider::prepare) finds the template or snapshot by its
//! [`PrepareSpec::name`], reuses it when it is ready, waits for it when it is being built, builds
//! it again when its build failed (a failed build is never reused), and otherwise builds it and
//! waits; a build that fails is an error carrying the provider's own reason. The
//! [`Prepared::template`] goes into [`CreateSpec::template`](crate::CreateSpec::template).

use super::prices::Shape;
use serde::Serialize;
use sha2::{Digest, Sha256};

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

    /// SHA-256 (lowercase hex) of the image, the steps and the shape, serialised as JSON.
    pub fn content_hash(&self) -> String {
        // Serialising plain strings, numbers and arrays cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        Sha256::digest(&json)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The name the provider's template or snapshot gets: `sdk-` and the first 16 hex digits
    /// of the content hash (lowercase letters, digits and `-`, valid on every provider).
    pub fn name(&self) -> String {
        format!("sdk-{}", &self.content_hash()[..16])
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
