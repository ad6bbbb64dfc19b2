//! The patch tools' bounds (issue 23, item 7): an oversized patch is refused before any work.

mod common;

use common::fixture_with;
use sandbox_tools::ToolConfig;
use serde_json::json;

#[tokio::test]
async fn an_oversized_patch_is_refused_before_any_work() {
    let f = fixture_with("patch-cap", ToolConfig::default(), |b| b.openai(true)).await;
    let cap = sandbox_tools::patch::MAX_PATCH_BYTES;
    let body = "+x\n".repeat(cap / 3 + 1);
    let patch = format!("*** Begin Patch\n*** Add File: big.txt\n{body}*** End Patch\n");
    let r = f
        .err(
            "sandbox_apply_patch_v1",
            json!({"patch": patch}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("bytes"), "{}", r.text);
    let r = f
        .err(
            "apply_patch",
            json!({"type": "create_file", "path": "big.txt", "diff": body}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("bytes"), "{}", r.text);
    let s = f
        .ok("sandbox_file_stat_v1", json!({"path": "big.txt"}))
        .await;
    assert_eq!(s.structured["exists"], false);
}
