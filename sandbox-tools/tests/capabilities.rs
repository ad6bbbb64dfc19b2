//! Each tool is present when every capability it needs is native or emulated, and absent when
//! one is unsupported; read-only mode offers only read-only tools.

mod common;

use common::{CapsProvider, local};
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{Capabilities, Capability, Level};
use sandbox_tools::{ToolConfig, ToolSet, catalogue_info};
use std::sync::Arc;

fn set(caps: Capabilities, config: ToolConfig) -> ToolSet {
    // Nothing is created, so the root is never made.
    let provider = Arc::new(LocalProvider::with_root(
        std::env::temp_dir().join("sandbox-tools-never-created"),
    ));
    ToolSet::builder()
        .provider(Arc::new(CapsProvider {
            inner: provider,
            caps,
        }))
        .config(config)
        .anthropic(true)
        .openai(true)
        .build()
        .unwrap()
}

fn all(level: Level) -> Capabilities {
    let mut caps = Capabilities::NONE;
    for c in Capability::ALL {
        caps.set(*c, level);
    }
    caps
}

#[test]
fn every_tool_is_present_when_its_capabilities_are_native() {
    let tools = set(all(Level::Native), ToolConfig::default());
    let names: Vec<&str> = catalogue_info().iter().map(|t| t.name).collect();
    assert_eq!(tools.names(), names);
}

#[test]
fn every_tool_is_present_when_its_capabilities_are_emulated() {
    let tools = set(all(Level::Emulated), ToolConfig::default());
    assert_eq!(tools.names().len(), catalogue_info().len());
}

#[test]
fn each_tool_follows_each_capability_it_needs_at_every_level() {
    for info in catalogue_info() {
        for needed in info.requires {
            for level in [Level::Native, Level::Emulated, Level::Unsupported] {
                // Everything else available, only this capability at `level`.
                let mut caps = all(Level::Native);
                caps.set(*needed, level);
                let tools = set(caps, ToolConfig::default());
                assert_eq!(
                    tools.get(info.name).is_some(),
                    level.is_available(),
                    "{} with {needed} {}",
                    info.name,
                    level.as_str()
                );
            }
        }
    }
}

#[test]
fn tools_without_capability_needs_are_offered_by_a_provider_that_can_do_nothing() {
    let tools = set(Capabilities::NONE, ToolConfig::default());
    let expected: Vec<&str> = catalogue_info()
        .iter()
        .filter(|t| t.requires.is_empty())
        .map(|t| t.name)
        .collect();
    assert_eq!(tools.names(), expected);
    assert!(expected.contains(&"sandbox_run_v1"));
    assert!(expected.contains(&"sandbox_create_v1"));
    assert!(!expected.contains(&"sandbox_file_read_v1"));
}

#[test]
fn the_named_requirements_are_the_ones_documented() {
    let needs = |name: &str| {
        catalogue_info()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap()
            .requires
    };
    assert_eq!(needs("sandbox_list_v1"), [Capability::List]);
    assert_eq!(needs("sandbox_process_start_v1"), [Capability::Background]);
    assert_eq!(needs("sandbox_process_output_v1"), [Capability::Background]);
    assert_eq!(needs("sandbox_process_kill_v1"), [Capability::KillProcess]);
    assert_eq!(needs("sandbox_file_read_v1"), [Capability::FilesUpload]);
    assert_eq!(needs("sandbox_editor_v1"), [Capability::FilesUpload]);
    assert_eq!(needs("sandbox_apply_patch_v1"), [Capability::FilesUpload]);
    assert_eq!(needs("apply_patch"), [Capability::FilesUpload]);
    assert_eq!(needs("sandbox_preview_link_v1"), [Capability::ExposePort]);
    assert_eq!(needs("sandbox_run_code_v1"), [Capability::CodeInterpreter]);
    assert!(needs("sandbox_run_v1").is_empty());
    assert!(needs("bash").is_empty());
    assert!(needs("shell").is_empty());
}

#[test]
fn read_only_mode_offers_only_read_only_tools() {
    let tools = set(
        all(Level::Native),
        ToolConfig {
            read_only: true,
            ..ToolConfig::default()
        },
    );
    assert_eq!(
        tools.names(),
        [
            "sandbox_list_v1",
            "sandbox_connect_v1",
            "sandbox_process_output_v1",
            "sandbox_file_read_v1",
            "sandbox_file_list_v1",
            "sandbox_file_stat_v1",
            "sandbox_preview_link_v1",
        ]
    );
    for spec in tools.specs() {
        assert!(spec.annotations.read_only && !spec.annotations.destructive);
    }
}

#[test]
fn destructive_tools_are_marked() {
    let tools = set(all(Level::Native), ToolConfig::default());
    let destructive: Vec<&str> = tools
        .specs()
        .into_iter()
        .filter(|s| s.annotations.destructive)
        .map(|s| s.name.as_str())
        .collect();
    for name in [
        "sandbox_destroy_v1",
        "sandbox_run_v1",
        "sandbox_run_code_v1",
        "sandbox_process_kill_v1",
        "sandbox_file_write_v1",
        "sandbox_file_move_v1",
        "sandbox_file_remove_v1",
        "sandbox_editor_v1",
        "sandbox_apply_patch_v1",
        "bash",
        "shell",
        "apply_patch",
        "str_replace_based_edit_tool",
    ] {
        assert!(destructive.contains(&name), "{name}");
    }
    for spec in tools.specs() {
        assert!(
            !(spec.annotations.read_only && spec.annotations.destructive),
            "{}",
            spec.name
        );
    }
}

#[test]
fn families_can_be_chosen() {
    let (provider, _dir) = local();
    let tools = ToolSet::builder()
        .provider(provider)
        .standard(false)
        .anthropic(true)
        .build()
        .unwrap();
    assert_eq!(tools.names(), ["bash", "str_replace_based_edit_tool"]);
    assert!(ToolSet::builder().build().is_err());
}

#[tokio::test]
async fn lifecycle_tools_follow_the_providers_map_and_the_rest_the_sandboxs() {
    use sandbox_sdk_core::prelude::*;
    let (local_provider, _dir) = local();
    let sandbox: Arc<dyn Sandbox> = Arc::from(
        local_provider
            .create(&sandbox_sdk_core::CreateSpec::new())
            .await
            .unwrap(),
    );
    // The provider says it cannot list and has no files; the sandbox (local) has both.
    let mut caps = sandbox_sdk_core::local::CAPABILITIES;
    caps.list = Level::Unsupported;
    caps.files_upload = Level::Unsupported;
    let tools = ToolSet::builder()
        .provider(Arc::new(CapsProvider {
            inner: local_provider.clone(),
            caps,
        }))
        .sandbox(sandbox.clone())
        .build()
        .unwrap();
    assert!(tools.get("sandbox_list_v1").is_none());
    assert!(tools.get("sandbox_create_v1").is_some());
    assert!(tools.get("sandbox_file_read_v1").is_some());
    sandbox.destroy().await.unwrap();
}
