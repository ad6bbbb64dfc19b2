//! Snapshots made from an image by a content hash (PROTOCOL.md §4): found, activated, rebuilt
//! after a failed build, or created, then waited on until `active`.

use crate::api::client::Api;
use crate::config::{PROVIDER, backoff_until, deadline_after};
use crate::wire::{BuildInfo, CreateSnapshotBody, SnapshotDto};
use async_trait::async_trait;
use sandbox_sdk_core::fleet::{Builds, Found, PrepareSpec, Prepared, find_or_build};
use sandbox_sdk_core::{Error, ErrorKind, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::sync::Mutex;

/// The size of a snapshot made by [`DaytonaProvider::prepare`](crate::DaytonaProvider::prepare).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct SnapshotSize {
    /// CPU cores.
    pub cpu: u32,
    /// Memory in GB.
    pub memory_gb: u32,
    /// Disk in GB.
    pub disk_gb: u32,
}

/// The content-hash name [`DaytonaProvider::prepare`](crate::DaytonaProvider::prepare) gives a snapshot.
pub fn snapshot_name(
    image: &str,
    size: SnapshotSize,
    region: Option<&str>,
    sandbox_class: Option<&str>,
) -> String {
    let text = format!(
        "{image}|{}|{}|{}|{}|{}",
        size.cpu,
        size.memory_gb,
        size.disk_gb,
        region.unwrap_or(""),
        sandbox_class.unwrap_or("")
    );
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sdk-{hex}")
}

/// Makes sure a snapshot of `image` at `size` exists and is active, and returns its name.
///
/// The name is `sdk-` plus the first 16 hex digits of a SHA-256 over image, size, region and
/// class, so asking twice (from any process) finds the same snapshot instead of building a
/// second one. Transitional states are polled (bounded by the start timeout); `error` and
/// `build_failed` fail with the server's reason; `inactive` is re-activated.
pub(crate) async fn prepare_image(
    api: &Api,
    image: &str,
    size: SnapshotSize,
    region: Option<&str>,
    sandbox_class: Option<&str>,
) -> Result<String> {
    let body = CreateSnapshotBody {
        name: snapshot_name(image, size, region, sandbox_class),
        image_name: Some(image.to_owned()),
        cpu: Some(size.cpu),
        memory: Some(size.memory_gb),
        disk: Some(size.disk_gb),
        region_id: region.map(str::to_owned),
        sandbox_class: sandbox_class.map(str::to_owned),
        build_info: None,
    };
    Ok(prepare_snapshot(api, &body, false).await?.0)
}

/// Finds snapshot `body.name` or creates it from `body`, and waits until it is `active`
/// (`GET /snapshots/{name}`, `POST /snapshots`, PROTOCOL.md §4), by core's [`find_or_build`]
/// over [`Snapshots`]. Returns the name and whether an existing snapshot was used (nothing
/// created by this call).
async fn prepare_snapshot(
    api: &Api,
    body: &CreateSnapshotBody,
    rebuild_failed: bool,
) -> Result<(String, bool)> {
    let snapshots = Snapshots {
        api,
        body,
        rebuild_failed,
        failed_id: Mutex::new(None),
    };
    find_or_build(&snapshots, &body.name).await
}

/// Daytona's calls for [`find_or_build`]. A snapshot is known by its name (the template a
/// sandbox is made from); a build is the snapshot as last seen, if it was just looked at (so
/// the wait does not look again at once). `inactive` is activated once. One whose build failed
/// (`error`, `build_failed`) fails with its reason, or with `rebuild_failed` is deleted
/// (`DELETE /snapshots/{id}`, waiting until it is gone) and built again (a failed build is never
/// reused); a rebuild that fails too fails with its reason.
struct Snapshots<'a> {
    api: &'a Api,
    body: &'a CreateSnapshotBody,
    rebuild_failed: bool,
    /// The id of the failed snapshot [`find`](Builds::find) saw, for `start` to delete.
    failed_id: Mutex<Option<String>>,
}

#[async_trait]
impl Builds for Snapshots<'_> {
    type Build = Option<SnapshotDto>;

    async fn find(&self, name: &str) -> Result<Found<Self::Build>> {
        let snapshot = match self.api.get_snapshot(name).await {
            Ok(snapshot) => snapshot,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(e),
        };
        match state(&snapshot) {
            "active" => Ok(Found::Ready(name.to_owned())),
            "error" | "build_failed" if self.rebuild_failed => {
                let found = Found::Unusable(format!(
                    "{} ({})",
                    state(&snapshot),
                    snapshot
                        .error_reason
                        .as_deref()
                        .unwrap_or("no reason given")
                ));
                *lock(&self.failed_id) = Some(snapshot.id);
                Ok(found)
            }
            "error" | "build_failed" => Err(build_failed(name, &snapshot)),
            _ => Ok(Found::Building(name.to_owned(), Some(snapshot))),
        }
    }

    async fn start(&self, name: &str) -> Result<(String, Self::Build)> {
        let failed = lock(&self.failed_id).take();
        if let Some(id) = failed {
            self.api.delete_snapshot(&id).await?;
            let mut backoff = self.backoff();
            loop {
                match self.api.get_snapshot(name).await {
                    Err(e) if e.kind() == ErrorKind::NotFound => break,
                    Err(e) => return Err(e),
                    // Someone else built it again meanwhile: wait for theirs.
                    Ok(s) if state(&s) != "removing" => return Ok((name.to_owned(), Some(s))),
                    Ok(_) => {}
                }
                if !backoff.pause().await {
                    return Err(self.timed_out(name, "still being removed"));
                }
            }
        }
        match self.api.create_snapshot(self.body).await {
            // Another caller made it between our look and our create.
            Ok(_) => Ok((name.to_owned(), None)),
            Err(e) if e.kind() == ErrorKind::Conflict => Ok((name.to_owned(), None)),
            Err(e) => Err(e),
        }
    }

    async fn wait(&self, name: &str, mut seen: Self::Build) -> Result<()> {
        let mut backoff = self.backoff();
        let mut activated = false;
        loop {
            let snapshot = match seen.take() {
                Some(snapshot) => snapshot,
                None => self.api.get_snapshot(name).await?,
            };
            match state(&snapshot) {
                "active" => return Ok(()),
                "error" | "build_failed" => return Err(build_failed(name, &snapshot)),
                // Activate once; the state may read `inactive` for a while after that.
                "inactive" if !activated => {
                    activated = true;
                    self.api.activate_snapshot(&snapshot.id).await?;
                }
                _ => {}
            }
            if !backoff.pause().await {
                return Err(self.timed_out(name, "not active"));
            }
        }
    }
}

impl Snapshots<'_> {
    /// Looks back off up to the poll interval, within the start timeout.
    fn backoff(&self) -> sandbox_sdk_core::wait::Backoff {
        let config = &self.api.config;
        backoff_until(config.poll_interval, deadline_after(config.start_timeout))
    }

    fn timed_out(&self, name: &str, what: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "snapshot {name} is {what} after {:?}",
                self.api.config.start_timeout
            ),
        )
        .with_provider(PROVIDER)
        .with_operation("prepare")
    }
}

fn state(snapshot: &SnapshotDto) -> &str {
    snapshot.state.as_deref().unwrap_or("")
}

fn build_failed(name: &str, snapshot: &SnapshotDto) -> Error {
    Error::new(
        ErrorKind::Provider,
        format!(
            "snapshot {name} failed to build: {}",
            snapshot
                .error_reason
                .as_deref()
                .unwrap_or("no reason given")
        ),
    )
    .with_provider(PROVIDER)
    .with_operation("prepare")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The snapshot for `spec` under its content-hash name ([`PrepareSpec::name`]): from the
/// image alone when there are no steps (`imageName`), otherwise built from a Dockerfile of
/// the image and its steps (`buildInfo.dockerfileContent`), at the shape's size, in the
/// builder's target region. A ready one is reused, one whose build failed is deleted and
/// built again (see [`prepare_image`] for the rest).
pub(crate) async fn prepare(api: &Api, spec: &PrepareSpec) -> Result<Prepared> {
    let name = spec.name();
    let shape = spec.shape;
    let body = CreateSnapshotBody {
        name: name.clone(),
        image_name: spec.steps.is_empty().then(|| spec.image.clone()),
        cpu: shape.map(|s| s.cpus),
        memory: shape.map(|s| s.memory_gib),
        disk: shape.map(|s| s.disk_gib).filter(|d| *d > 0),
        region_id: api.config.target.clone(),
        sandbox_class: None,
        build_info: (!spec.steps.is_empty()).then(|| BuildInfo {
            dockerfile_content: spec.dockerfile(),
        }),
    };
    let (template, reused) = prepare_snapshot(api, &body, true).await?;
    Ok(Prepared {
        provider: PROVIDER.to_owned(),
        template,
        name,
        reused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_are_stable_and_differ_by_content() {
        let size = SnapshotSize {
            cpu: 2,
            memory_gb: 4,
            disk_gb: 10,
        };
        let a = snapshot_name("ubuntu:24.04", size, Some("us"), None);
        assert_eq!(a, snapshot_name("ubuntu:24.04", size, Some("us"), None));
        assert!(a.starts_with("sdk-") && a.len() == 20);
        assert_ne!(
            a,
            snapshot_name(
                "ubuntu:24.04",
                SnapshotSize { cpu: 4, ..size },
                Some("us"),
                None
            )
        );
        assert_ne!(a, snapshot_name("ubuntu:22.04", size, Some("us"), None));
    }
}
