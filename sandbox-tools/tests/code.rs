//! `sandbox_run_code_v1` end to end on the `local` provider, whose emulated kernel runs the
//! cells with the machine's `python3`: state across calls, errors, images, new and restarted
//! contexts, timeouts.

mod common;

use base64::Engine;
use common::fixture;
use serde_json::json;

const TOOL: &str = "sandbox_run_code_v1";

/// A 1x1 PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[tokio::test]
async fn state_carries_over_and_errors_come_back_with_their_traceback() {
    let f = fixture("code-state").await;
    assert!(f.tools.get(TOOL).is_some(), "{:?}", f.tools.names());
    let first = f.ok(TOOL, json!({"code": "x = 20\nprint('set')"})).await;
    let context = first.structured["context_id"].as_str().unwrap().to_owned();
    assert_eq!(first.structured["stdout"]["text"], "set\n");
    assert_eq!(first.structured["emulated"], true);
    assert_eq!(first.structured["language"], "python");
    assert!(
        first.text.contains("--- stdout ---\nset\n"),
        "{}",
        first.text
    );

    let second = f.ok(TOOL, json!({"code": "x * 2 + 2"})).await;
    assert_eq!(second.structured["context_id"], context.as_str());
    assert_eq!(second.structured["results"][0]["text"], "42");
    assert_eq!(second.structured["results"][0]["is_main_result"], true);
    let (one, two) = (
        first.structured["execution_count"].as_u64().unwrap(),
        second.structured["execution_count"].as_u64().unwrap(),
    );
    assert_eq!(two, one + 1);
    assert!(second.text.contains("\n42\n"), "{}", second.text);
    assert!(
        second.text.contains(&format!("context: \"{context}\"")),
        "{}",
        second.text
    );

    // The same context, named.
    let named = f
        .ok(TOOL, json!({"code": "x + 1", "context": context}))
        .await;
    assert_eq!(named.structured["results"][0]["text"], "21");

    // A raised error is a result the model reads, not a failed call.
    let raised = f
        .ok(TOOL, json!({"code": "def f():\n    1 / 0\nf()"}))
        .await;
    assert_eq!(raised.structured["error"]["name"], "ZeroDivisionError");
    assert!(
        raised.structured["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("f()"),
        "{}",
        raised.structured["error"]
    );
    assert!(
        raised.text.contains("--- error: ZeroDivisionError: "),
        "{}",
        raised.text
    );
}

#[tokio::test]
async fn displayed_and_returned_pngs_come_back_as_images() {
    let f = fixture("code-png").await;
    let code = format!(
        "import base64\nclass Dot:\n    def _repr_png_(self):\n        return base64.b64decode('{PNG_1X1}')\n    def __repr__(self):\n        return 'a dot'\ndisplay(Dot())\nDot()"
    );
    let r = f.ok(TOOL, json!({"code": code})).await;
    assert_eq!(r.images.len(), 2, "{}", r.text);
    for image in &r.images {
        assert_eq!(image.mime_type, "image/png");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&image.data)
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
    assert!(
        r.text.contains("--- displayed 1 (formats: image/png, text/plain) ---\na dot\n[image 1 attached: image/png, "),
        "{}",
        r.text
    );
    assert_eq!(r.structured["results"][1]["image"], 1);
    let mcp = r.to_mcp();
    assert_eq!(mcp["content"][1]["type"], "image");
    assert_eq!(mcp["content"][1]["mimeType"], "image/png");
    let anthropic = r.to_anthropic("toolu_1");
    assert_eq!(anthropic["content"][2]["source"]["media_type"], "image/png");

    // Five images: four come back, the fifth is named as left out.
    let many = format!(
        "import base64\nclass Dot:\n    def _repr_png_(self):\n        return base64.b64decode('{PNG_1X1}')\nfor _ in range(5):\n    display(Dot())"
    );
    let r = f.ok(TOOL, json!({"code": many})).await;
    assert_eq!(r.images.len(), 4, "{}", r.text);
    assert!(
        r.text.contains("a result carries at most 4 images"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn new_and_restarted_contexts_keep_their_state_apart() {
    let f = fixture("code-contexts").await;
    f.ok(TOOL, json!({"code": "y = 'default'"})).await;
    let fresh = f
        .ok(TOOL, json!({"code": "y = 'fresh'\ny", "context": "new"}))
        .await;
    assert_eq!(fresh.structured["new_context"], true);
    let id = fresh.structured["context_id"].as_str().unwrap().to_owned();
    assert!(fresh.text.contains("ran in new context"), "{}", fresh.text);
    let default = f.ok(TOOL, json!({"code": "y"})).await;
    assert_eq!(default.structured["results"][0]["text"], "default");
    assert_ne!(default.structured["context_id"], id.as_str());

    let restarted = f
        .ok(
            TOOL,
            json!({"code": "'y' in dir()", "context": id, "restart": true}),
        )
        .await;
    assert_eq!(restarted.structured["restarted"], true);
    assert_eq!(restarted.structured["context_id"], id.as_str());
    assert_eq!(restarted.structured["results"][0]["text"], "False");

    f.err(TOOL, json!({"code": "1", "restart": true}), "invalid_input")
        .await;
    f.err(TOOL, json!({"code": "  "}), "invalid_input").await;
    f.err(
        TOOL,
        json!({"code": "1", "context": "ctx-none"}),
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn a_cell_past_its_timeout_is_interrupted_and_the_context_keeps_its_state() {
    let f = fixture("code-timeout").await;
    f.ok(TOOL, json!({"code": "kept = 7"})).await;
    let slow = f
        .ok(
            TOOL,
            json!({"code": "import time\nprint('before', flush=True)\ntime.sleep(30)", "timeout_secs": 1}),
        )
        .await;
    assert_eq!(slow.structured["timed_out"], true, "{}", slow.text);
    assert!(slow.text.contains("timed out after 1s"), "{}", slow.text);
    let after = f.ok(TOOL, json!({"code": "kept"})).await;
    assert_eq!(after.structured["results"][0]["text"], "7");
}
