//! Each tool's contract (name, description, input schema, annotations, as MCP lists it) is
//! snapshotted, so a change to it is a reviewed diff. A change that breaks callers needs a new
//! versioned name (`_v2`), not an edited snapshot.

mod common;

use common::CapsProvider;
use sandbox_sdk_core::{Capabilities, Capability, Level};
use sandbox_tools::{ToolSet, catalogue_info};
use std::sync::Arc;

#[test]
fn every_tool_schema_is_snapshotted() {
    let (provider, _dir) = common::local();
    let mut caps = Capabilities::NONE;
    for c in Capability::ALL {
        caps.set(*c, Level::Native);
    }
    let tools = ToolSet::builder()
        .provider(Arc::new(CapsProvider {
            inner: provider,
            caps,
        }))
        .anthropic(true)
        .openai(true)
        .build()
        .unwrap();
    assert_eq!(tools.names().len(), catalogue_info().len());
    for spec in tools.specs() {
        let mut listed = spec.to_mcp();
        if let Some(native) = &spec.native_definition {
            listed["native_definition"] = native.clone();
        }
        insta::assert_json_snapshot!(format!("tool__{}", spec.name), listed);
    }
}

#[test]
fn standard_names_are_versioned() {
    for info in catalogue_info() {
        if info.family == sandbox_tools::Family::Standard {
            assert!(
                info.name.starts_with("sandbox_") && info.name.ends_with("_v1"),
                "{}",
                info.name
            );
        }
    }
}
