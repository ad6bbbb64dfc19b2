//! Secrets cut at an output edge (issue 23, item 5): a piece of a secret that ends the kept
//! head or starts the kept tail is redacted, not only whole secrets.

mod common;

use common::fixture_with;
use sandbox_tools::{Redactor, ToolConfig, ToolResult};
use serde_json::json;

const SECRET: &str = "canary-credential-0123456789";

/// Shorter pieces of a secret than this may show at a cut edge (see `redact::MIN_PARTIAL_LEN`).
const SHOWN_AT_MOST: usize = 3;

/// The 64-byte cap keeps the first 32 bytes of each stream and the last 32.
const CAP: usize = 64;
const HALF: usize = CAP / 2;

fn redacting(cap: usize) -> ToolConfig {
    ToolConfig {
        max_output_bytes: cap,
        redactor: Redactor::new().with_secret(SECRET),
        ..ToolConfig::default()
    }
}

/// No piece of the secret longer than [`SHOWN_AT_MOST`] bytes that starts or ends it shows in
/// the result's text or structured form.
fn assert_no_piece(r: &ToolResult, what: &str) {
    let structured = r.structured.to_string();
    for n in SHOWN_AT_MOST + 1..=SECRET.len() {
        for piece in [&SECRET[..n], &SECRET[SECRET.len() - n..]] {
            assert!(
                !r.text.contains(piece) && !structured.contains(piece),
                "{what}: {piece:?} shows in\n{}\n{structured}",
                r.text
            );
        }
    }
}

/// Output whose secret straddles the head's cut (`n` of its bytes before the cut) or the
/// tail's (`n` of its bytes after it).
fn straddling(n: usize, head: bool) -> String {
    if head {
        format!("{}{SECRET}{}", "a".repeat(HALF - n), "b".repeat(200))
    } else {
        format!("{}{SECRET}{}", "a".repeat(200), "b".repeat(HALF - n))
    }
}

#[tokio::test]
async fn a_secret_cut_at_either_edge_of_command_output_is_redacted() {
    let f = fixture_with("redact-edges", redacting(CAP), |b| {
        b.anthropic(true).openai(true)
    })
    .await;
    for head in [true, false] {
        for n in 1..SECRET.len() {
            let out = straddling(n, head);
            let line = format!("printf '%s' '{out}'; printf '%s' '{out}' >&2");
            let r = f.ok("sandbox_run_v1", json!({"command": line})).await;
            assert_eq!(r.structured["stdout"]["cut_bytes"], out.len() - CAP);
            assert_no_piece(&r, &format!("sandbox_run_v1 head={head} n={n}"));
            if n % 7 == 0 {
                let r = f.ok("bash", json!({"command": line})).await;
                assert_no_piece(&r, &format!("bash head={head} n={n}"));
                let r = f.ok("shell", json!({"commands": [line]})).await;
                assert_no_piece(&r, &format!("shell head={head} n={n}"));
            }
        }
    }
}

#[tokio::test]
async fn a_secret_cut_at_either_edge_of_a_file_view_is_redacted() {
    let f = fixture_with("redact-view", redacting(CAP), |b| b).await;
    // The view is `     1\t` and the line: 7 bytes before the line's own.
    for head in [true, false] {
        for n in [4, 9, 20, 25] {
            let line = if head {
                format!("{}{SECRET}{}", "a".repeat(HALF - 7 - n), "b".repeat(200))
            } else {
                // The view ends with the line's newline.
                format!("{}{SECRET}{}", "a".repeat(200), "b".repeat(HALF - 1 - n))
            };
            f.ok(
                "sandbox_file_write_v1",
                json!({"path": "v.txt", "content": format!("{line}\n")}),
            )
            .await;
            let r = f
                .ok(
                    "sandbox_editor_v1",
                    json!({"command": "view", "path": "v.txt"}),
                )
                .await;
            assert_eq!(r.structured["truncated"], true);
            assert_no_piece(&r, &format!("view head={head} n={n}"));
        }
    }
}

/// A file read stops at a line once the cap is reached; a secret running over several lines
/// (a key) and cut there is redacted too.
#[tokio::test]
async fn a_multi_line_secret_cut_by_a_file_read_is_redacted() {
    let key = "BEGIN-canary-key\nsecond-line-of-canary-key";
    let f = fixture_with(
        "redact-read",
        ToolConfig {
            max_output_bytes: CAP,
            redactor: Redactor::new().with_secret(key),
            ..ToolConfig::default()
        },
        |b| b,
    )
    .await;
    let content = format!("{}\n{key}\n{}\n", "x".repeat(40), "y".repeat(100));
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "k.txt", "content": content}),
    )
    .await;
    let r = f.ok("sandbox_file_read_v1", json!({"path": "k.txt"})).await;
    assert_eq!(r.structured["truncated"], true, "{}", r.text);
    for text in [r.text.clone(), r.structured.to_string()] {
        assert!(!text.contains("BEGIN-canary"), "{text}");
    }
    assert!(r.text.contains("[REDACTED]"), "{}", r.text);
}
