//! Snapshots made from an image by a content hash (PROTOCOL.md §4): found, activated, rebuilt
//! after a failed build, or created, then waited on until `active`.

use crate::api::client::Api;
use crate::config::{PROVIDER, backoff_until, deadline_after};
use crate::wire::{BuildInfo, CreateSnapshotBody};
use sandbox_sdk_core::fleet::{PrepareSpec, Prepared};
use sandbox_sdk_core::{Error, ErrorKind, Result};
use serde::Serialize;
use sha2::{Digest, Sha256};

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
/// (`GET /snapshots/{name}`, `POST /snapshots`, PROTOCOL.md §4). `inactive` is activated
/// once. One whose build failed (`error`, `build_failed`) fails with its reason, or with
/// `rebuild_failed` is deleted (`DELETE /snapshots/{id}`) and built again once (a failed
/// build is never reused); a rebuild that fails too fails with its reason. Returns the name
/// and whether an existing snapshot was used (nothing created by this call).
async fn prepare_snapshot(
    api: &Api,
    body: &CreateSnapshotBody,
    rebuild_failed: bool,
) -> Result<(String, bool)> {
    let name = &body.name;
    let deadline = deadline_after(api.config.start_timeout);
    let mut backoff = backoff_until(api.config.poll_interval, deadline);
    let mut created = false;
    let mut deleted = false;
    let mut activated = false;
    loop {
        let found = api.get_snapshot(name).await;
        match found {
            Ok(snapshot) => match snapshot.state.as_deref().unwrap_or("") {
                "active" => return Ok((name.clone(), !created && !deleted)),
                "error" | "build_failed" if rebuild_failed && !created && !deleted => {
                    tracing::info!(
                        snapshot = %name,
                        reason = snapshot.error_reason.as_deref().unwrap_or("none given"),
                        "prepare: the snapshot's build failed; deleting it to build it again"
                    );
                    api.delete_snapshot(&snapshot.id).await?;
                    deleted = true;
                    continue;
                }
                "error" | "build_failed" => {
                    return Err(Error::new(
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
                    .with_operation("prepare"));
                }
                // Activate once; the state may read `inactive` for a while after that.
                "inactive" if !activated => {
                    activated = true;
                    api.activate_snapshot(&snapshot.id).await?;
                }
                _ => {}
            },
            Err(e) if e.kind() == ErrorKind::NotFound && !created => {
                match api.create_snapshot(body).await {
                    Ok(_) => {}
                    // Another caller made it between our look and our create.
                    Err(e) if e.kind() == ErrorKind::Conflict => {}
                    Err(e) => return Err(e),
                }
                created = true;
                continue;
            }
            Err(e) => return Err(e),
        }
        if !backoff.pause().await {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "snapshot {name} is not active after {:?}",
                    api.config.start_timeout
                ),
            )
            .with_provider(PROVIDER)
            .with_operation("prepare"));
        }
    }
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
