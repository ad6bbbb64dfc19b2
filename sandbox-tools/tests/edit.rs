//! The editor and the V4A patch tool end to end, with their edge cases.

mod common;

use common::fixture;
use serde_json::json;

const FILE: &str = "fn main() {\n    let x = 1;\n    let y = 1;\n    println!(\"{x} {y}\");\n}\n";

async fn read(f: &common::Fixture, path: &str) -> String {
    f.ok("sandbox_file_read_v1", json!({"path": path}))
        .await
        .structured["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn editor_create_view_replace_insert() {
    let f = fixture("editor").await;
    let ed = "sandbox_editor_v1";
    f.ok(
        ed,
        json!({"command": "create", "path": "src/main.rs", "file_text": FILE}),
    )
    .await;
    let r = f
        .err(
            ed,
            json!({"command": "create", "path": "src/main.rs", "file_text": "x"}),
            "conflict",
        )
        .await;
    assert!(r.text.contains("does not overwrite"), "{}", r.text);

    let v = f
        .ok(ed, json!({"command": "view", "path": "src/main.rs"}))
        .await;
    assert!(
        v.text
            .starts_with("     1\tfn main() {\n     2\t    let x = 1;\n"),
        "{}",
        v.text
    );
    let v = f
        .ok(
            ed,
            json!({"command": "view", "path": "src/main.rs", "view_range": [2, 3]}),
        )
        .await;
    assert_eq!(v.text, "     2\t    let x = 1;\n     3\t    let y = 1;\n");
    f.err(
        ed,
        json!({"command": "view", "path": "src/main.rs", "view_range": [9, -1]}),
        "invalid_input",
    )
    .await;

    // No match and several matches change nothing and say how many were found.
    let r = f
        .err(
            ed,
            json!({"command": "str_replace", "path": "src/main.rs", "old_str": "let z", "new_str": "q"}),
            "not_found",
        )
        .await;
    assert!(r.text.contains("found 0 times"), "{}", r.text);
    let r = f
        .err(
            ed,
            json!({"command": "str_replace", "path": "src/main.rs", "old_str": " = 1;", "new_str": " = 2;"}),
            "conflict",
        )
        .await;
    assert!(r.text.contains("found 2 times"), "{}", r.text);
    assert!(r.text.contains("lines 2, 3"), "{}", r.text);
    assert_eq!(read(&f, "src/main.rs").await, FILE);

    let r = f
        .ok(
            ed,
            json!({"command": "str_replace", "path": "src/main.rs", "old_str": "let y = 1;", "new_str": "let y = 2;"}),
        )
        .await;
    assert!(r.text.contains("     3\t    let y = 2;"), "{}", r.text);
    f.ok(
        ed,
        json!({"command": "insert", "path": "src/main.rs", "insert_line": 1, "new_str": "    // hi"}),
    )
    .await;
    // Anthropic's newer name for the inserted text is accepted too.
    f.ok(
        ed,
        json!({"command": "insert", "path": "src/main.rs", "insert_line": 0, "insert_text": "// top\n"}),
    )
    .await;
    assert_eq!(
        read(&f, "src/main.rs").await,
        "// top\nfn main() {\n    // hi\n    let x = 1;\n    let y = 2;\n    println!(\"{x} {y}\");\n}\n"
    );
    f.err(
        ed,
        json!({"command": "insert", "path": "src/main.rs", "insert_line": 99, "new_str": "x"}),
        "invalid_input",
    )
    .await;
    f.err(
        ed,
        json!({"command": "str_replace", "path": "src/main.rs"}),
        "invalid_input",
    )
    .await;
    f.err(
        ed,
        json!({"command": "undo_edit", "path": "src/main.rs"}),
        "not_supported",
    )
    .await;
    f.err(
        ed,
        json!({"command": "view", "path": "src/missing.rs"}),
        "not_found",
    )
    .await;

    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "src/.hidden/x", "content": ""}),
    )
    .await;
    let v = f.ok(ed, json!({"command": "view", "path": "src"})).await;
    assert!(v.text.contains("src/main.rs\n"), "{}", v.text);
    assert!(!v.text.contains(".hidden"), "{}", v.text);
}

#[tokio::test]
async fn patch_adds_updates_moves_and_deletes() {
    let f = fixture("patch").await;
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "app.rs", "content": FILE}),
    )
    .await;
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "old.txt", "content": "bye\n"}),
    )
    .await;
    let patch = concat!(
        "*** Begin Patch\n",
        "*** Add File: docs/new.md\n",
        "+# New\n",
        "+text\n",
        "*** Update File: app.rs\n",
        "*** Move to: src/main.rs\n",
        "@@ fn main() {\n",
        "     let x = 1;\n",
        "-    let y = 1;\n",
        "+    let y = 2;\n",
        "*** Delete File: old.txt\n",
        "*** End Patch\n",
    );
    let r = f
        .ok("sandbox_apply_patch_v1", json!({"patch": patch}))
        .await;
    assert_eq!(
        r.structured["changes"],
        json!(["A docs/new.md", "R app.rs -> src/main.rs", "D old.txt"])
    );
    assert_eq!(read(&f, "docs/new.md").await, "# New\ntext\n");
    assert_eq!(
        read(&f, "src/main.rs").await,
        FILE.replace("y = 1", "y = 2")
    );
    for gone in ["app.rs", "old.txt"] {
        let s = f.ok("sandbox_file_stat_v1", json!({"path": gone})).await;
        assert_eq!(s.structured["exists"], false, "{gone}");
    }
}

#[tokio::test]
async fn a_failing_patch_changes_nothing() {
    let f = fixture("patch-fail").await;
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "a.rs", "content": FILE}),
    )
    .await;
    // The first section is fine, the second's context is not in the file.
    let patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: a.rs\n@@\n-    let z = 1;\n+    let z = 2;\n*** End Patch";
    let r = f
        .err(
            "sandbox_apply_patch_v1",
            json!({"patch": patch}),
            "not_found",
        )
        .await;
    assert!(r.text.contains("hunk 1 of a.rs"), "{}", r.text);
    assert!(r.text.contains("|    let z = 1;"), "{}", r.text);
    assert!(r.text.contains("nothing was changed"), "{}", r.text);
    let s = f.ok("sandbox_file_stat_v1", json!({"path": "b.txt"})).await;
    assert_eq!(s.structured["exists"], false);
    assert_eq!(read(&f, "a.rs").await, FILE);

    let add_existing = "*** Begin Patch\n*** Add File: a.rs\n+x\n*** End Patch";
    f.err(
        "sandbox_apply_patch_v1",
        json!({"patch": add_existing}),
        "conflict",
    )
    .await;
    let delete_missing = "*** Begin Patch\n*** Delete File: nope\n*** End Patch";
    f.err(
        "sandbox_apply_patch_v1",
        json!({"patch": delete_missing}),
        "not_found",
    )
    .await;
    let update_missing = "*** Begin Patch\n*** Update File: nope\n@@\n-a\n+b\n*** End Patch";
    f.err(
        "sandbox_apply_patch_v1",
        json!({"patch": update_missing}),
        "not_found",
    )
    .await;
    f.ok(
        "sandbox_file_write_v1",
        json!({"path": "c.rs", "content": "c\n"}),
    )
    .await;
    let move_onto = "*** Begin Patch\n*** Update File: a.rs\n*** Move to: c.rs\n*** End Patch";
    f.err(
        "sandbox_apply_patch_v1",
        json!({"patch": move_onto}),
        "conflict",
    )
    .await;
    let garbage = "--- a/a.rs\n+++ b/a.rs\n@@ -1 +1 @@\n-x\n+y\n";
    let r = f
        .err(
            "sandbox_apply_patch_v1",
            json!({"patch": garbage}),
            "invalid_input",
        )
        .await;
    assert!(r.text.contains("*** Begin Patch"), "{}", r.text);
    assert_eq!(read(&f, "a.rs").await, FILE);
    assert_eq!(read(&f, "c.rs").await, "c\n");
}

#[tokio::test]
async fn sections_on_one_file_compose_in_order() {
    let f = fixture("patch-compose").await;
    let patch = "*** Begin Patch\n*** Add File: n.txt\n+a\n+b\n*** Update File: n.txt\n@@\n a\n-b\n+c\n*** End Patch";
    let r = f
        .ok("sandbox_apply_patch_v1", json!({"patch": patch}))
        .await;
    assert_eq!(r.structured["changes"], json!(["A n.txt", "M n.txt"]));
    assert_eq!(read(&f, "n.txt").await, "a\nc\n");
}
