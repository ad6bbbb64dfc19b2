//! Templates: build one from an image plus steps and wait for it, idempotent by a content hash
//! of what goes in (PROTOCOL.md §2.6); the E2B side of the core `Provider::prepare`. The
//! naming and the find-or-build policy are core's ([`content_name`], [`find_or_build`]); this
//! module holds E2B's calls for them ([`Templates`]).

use crate::api::Api;
use crate::config::PROVIDER;
use crate::wire::{TemplateBuildStart, TemplateCreate, TemplateStep};
use sandbox_sdk_core::fleet::{
    Builds, Found, PrepareSpec, Prepared, content_hash, content_name, find_or_build,
};
use sandbox_sdk_core::wait::Backoff;
use sandbox_sdk_core::{Error, ErrorKind, Result};
use serde::Serialize;

/// What a template is built from. Two specs with the same content give the same template.
///
/// ```
/// use sandbox_e2b::TemplateSpec;
///
/// let spec = TemplateSpec::from_image("ubuntu:24.04")
///     .run("apt-get update && apt-get install -y curl")
///     .cpu_count(2)
///     .memory_mb(2048);
/// assert_eq!(spec.content_hash(), spec.clone().content_hash());
/// assert!(spec.template_name().starts_with("sdk-"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateSpec {
    /// Base image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    /// Base template (instead of an image).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_template: Option<String>,
    /// Build steps, in order.
    pub steps: Vec<TemplateStep>,
    /// Command started when a sandbox starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    /// Command that says the sandbox is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
    /// CPUs of sandboxes made from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_count: Option<u32>,
    /// Memory in MiB of sandboxes made from it.
    #[serde(rename = "memoryMB", skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

impl TemplateSpec {
    /// A template built on `image`.
    pub fn from_image(image: impl Into<String>) -> Self {
        TemplateSpec {
            from_image: Some(image.into()),
            ..Self::default()
        }
    }

    /// A template built on another template.
    pub fn from_template(template: impl Into<String>) -> Self {
        TemplateSpec {
            from_template: Some(template.into()),
            ..Self::default()
        }
    }

    /// Adds a step of any type (`RUN`, `ENV`, `WORKDIR`, `USER`, ...).
    pub fn step(mut self, kind: impl Into<String>, args: Vec<String>) -> Self {
        self.steps.push(TemplateStep {
            kind: kind.into(),
            args,
            files_hash: None,
            force: None,
        });
        self
    }

    /// Adds a `RUN` step.
    pub fn run(self, command: impl Into<String>) -> Self {
        self.step("RUN", vec![command.into()])
    }

    /// Sets the start command.
    pub fn start_cmd(mut self, cmd: impl Into<String>) -> Self {
        self.start_cmd = Some(cmd.into());
        self
    }

    /// Sets the ready command.
    pub fn ready_cmd(mut self, cmd: impl Into<String>) -> Self {
        self.ready_cmd = Some(cmd.into());
        self
    }

    /// Sets the CPUs.
    pub fn cpu_count(mut self, cpus: u32) -> Self {
        self.cpu_count = Some(cpus);
        self
    }

    /// Sets the memory.
    pub fn memory_mb(mut self, mb: u64) -> Self {
        self.memory_mb = Some(mb);
        self
    }

    /// SHA-256 (hex) of everything that goes into the build ([`content_hash`]).
    pub fn content_hash(&self) -> String {
        content_hash(self)
    }

    /// The template's name: `sdk-` and the first 16 hex digits of the content hash
    /// ([`content_name`]).
    pub fn template_name(&self) -> String {
        content_name(self)
    }
}

/// Returns the id of a template built from `spec` under `name`, and whether an existing one was
/// used (nothing built by this call), by core's [`find_or_build`] over [`Templates`].
pub(crate) async fn prepare_named(
    api: &Api,
    name: &str,
    spec: &TemplateSpec,
) -> Result<(String, bool)> {
    if spec.from_image.is_none() == spec.from_template.is_none() {
        return Err(Error::validation(
            "a template needs exactly one of from_image and from_template",
        )
        .with_provider(PROVIDER)
        .with_operation("prepare"));
    }
    find_or_build(&Templates { api, spec }, name).await
}

/// E2B's calls for [`find_or_build`]: a build is a template id and a build id.
struct Templates<'a> {
    api: &'a Api,
    spec: &'a TemplateSpec,
}

#[async_trait::async_trait]
impl Builds for Templates<'_> {
    type Build = (String, String);

    /// The alias, then the template; its latest build (by creation time) tells the state.
    async fn find(&self, name: &str) -> Result<Found<Self::Build>> {
        let alias = match self.api.template_alias(name).await {
            Ok(alias) => alias,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(e),
        };
        let template = self.api.template(&alias.template_id).await?;
        let latest = template.builds.iter().max_by_key(|b| {
            b.created_at
                .as_deref()
                .and_then(sandbox_sdk_core::time::parse_rfc3339)
        });
        Ok(match latest {
            Some(b) if b.status == "ready" => Found::Ready(template.template_id),
            Some(b) if b.status == "building" || b.status == "waiting" => Found::Building(
                template.template_id.clone(),
                (template.template_id, b.build_id.clone()),
            ),
            Some(b) => Found::Unusable(b.status.clone()),
            None => Found::Unusable("none".to_owned()),
        })
    }

    /// `POST /v3/templates` (with a name that exists it starts a new build of that template,
    /// PROTOCOL.md §2.6: it answers the template id and a new build id), then the build start.
    async fn start(&self, name: &str) -> Result<(String, Self::Build)> {
        let spec = self.spec;
        let created = self
            .api
            .create_template(&TemplateCreate {
                name: name.to_owned(),
                cpu_count: spec.cpu_count,
                memory_mb: spec.memory_mb,
            })
            .await?;
        self.api
            .start_build(
                &created.template_id,
                &created.build_id,
                &TemplateBuildStart {
                    from_image: spec.from_image.clone(),
                    from_template: spec.from_template.clone(),
                    steps: spec.steps.clone(),
                    start_cmd: spec.start_cmd.clone(),
                    ready_cmd: spec.ready_cmd.clone(),
                },
            )
            .await?;
        Ok((
            created.template_id.clone(),
            (created.template_id, created.build_id),
        ))
    }

    async fn wait(&self, name: &str, (template_id, build_id): Self::Build) -> Result<()> {
        wait_build(self.api, name, &template_id, &build_id).await
    }
}

/// Polls the build's status (at once, then 25 ms doubling up to the poll interval, within the
/// build timeout) until `ready`; `error` fails with the reason.
async fn wait_build(api: &Api, name: &str, template_id: &str, build_id: &str) -> Result<()> {
    let mut backoff =
        Backoff::new(api.config.template_poll_interval).within(api.config.template_build_timeout);
    loop {
        let status = api.build_status(template_id, build_id).await?;
        match status.status.as_str() {
            "ready" => return Ok(()),
            "error" => {
                let reason = match status.reason {
                    Some(serde_json::Value::String(s)) => s,
                    Some(serde_json::Value::Object(o)) => o
                        .get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("no reason given")
                        .to_owned(),
                    _ => "no reason given".to_owned(),
                };
                return Err(Error::new(
                    ErrorKind::Provider,
                    format!("template {name} failed to build: {reason}"),
                )
                .with_provider(PROVIDER)
                .with_operation("prepare"));
            }
            _ => {}
        }
        if !backoff.pause().await {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "template {name} still building after {}ms",
                    backoff.elapsed().as_millis()
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("prepare"));
        }
    }
}

/// The core `Provider::prepare`: the template for `spec` under its content-hash name
/// ([`PrepareSpec::name`]), prepared by [`prepare_named`] from [`template_spec`].
pub(crate) async fn prepare(api: &Api, spec: &PrepareSpec) -> Result<Prepared> {
    let name = spec.name();
    let (template, reused) = prepare_named(api, &name, &template_spec(spec)).await?;
    Ok(Prepared {
        provider: PROVIDER.to_owned(),
        template,
        name,
        reused,
    })
}

/// The template a core [`PrepareSpec`] asks for: its image, a `USER root` step when there are
/// steps (E2B builds run as `user` otherwise, and the core model runs steps as root), each
/// step as a `RUN`, and the shape's CPUs and memory. Disk is not part of an E2B template (the
/// plan sets it), so the shape's disk is not sent.
pub(crate) fn template_spec(spec: &PrepareSpec) -> TemplateSpec {
    let mut template = TemplateSpec::from_image(&spec.image);
    if !spec.steps.is_empty() {
        template = template.step("USER", vec!["root".to_owned()]);
    }
    for step in &spec.steps {
        template = template.run(step);
    }
    if let Some(shape) = spec.shape {
        template = template
            .cpu_count(shape.cpus)
            .memory_mb(u64::from(shape.memory_gib) * 1024);
    }
    template
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_changes_with_any_input() {
        let a = TemplateSpec::from_image("ubuntu:24.04").run("echo 1");
        let b = TemplateSpec::from_image("ubuntu:24.04").run("echo 2");
        let c = a.clone().cpu_count(2);
        assert_ne!(a.content_hash(), b.content_hash());
        assert_ne!(a.content_hash(), c.content_hash());
        assert_eq!(a.content_hash().len(), 64);
        assert_eq!(a.template_name().len(), 4 + 16);
    }
}
