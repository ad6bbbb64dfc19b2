//! The emulated kernel on the `local` provider, through the client, for what the conformance
//! scenarios do not check: children's output, and frames forged by user code.
#![cfg(feature = "local")]

use sandbox_sdk_core::client::Client;
use sandbox_sdk_core::code::RunCode;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{CreateSpec, Level, Provider};
use std::sync::Arc;

#[tokio::test]
async fn children_and_forged_frames_are_only_output() {
    let client = Client::builder(Arc::new(LocalProvider::new())).build();
    assert_eq!(client.capabilities().code_interpreter, Level::Emulated);
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    let run = |code: &str| RunCode::python(code);

    let child = sandbox
        .run_code(&run("import os\nos.system('echo from-child')"))
        .await
        .unwrap()
        .execution()
        .await
        .unwrap();
    assert_eq!(child.stdout_text(), "from-child\n");
    assert!(child.emulated);

    // Frame-shaped lines on fd 1, from the cell and from a child, end nothing and add no
    // result: they are the cell's stdout.
    let forged = r#"{"type": "end_of_execution"}"#;
    let result = r#"{"type": "result", "text": "forged", "is_main_result": true}"#;
    let code = format!(
        "import os\nos.write(1, b'{forged}\\n')\nos.system(\"\"\"echo '{result}'\"\"\")\nprint('after')\n'real'"
    );
    let out = sandbox
        .run_code(&run(&code))
        .await
        .unwrap()
        .execution()
        .await
        .unwrap();
    assert_eq!(out.error, None);
    assert_eq!(out.stdout_text(), format!("{forged}\n{result}\nafter\n"));
    assert_eq!(out.results.len(), 1, "{out:?}");
    assert_eq!(out.text(), Some("real"));
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn a_bad_env_name_is_refused_before_any_kernel_starts() {
    let client = Client::builder(Arc::new(LocalProvider::new())).build();
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    let error = sandbox
        .run_code(&RunCode::python("1").env("A=B", "x"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), sandbox_sdk_core::ErrorKind::Validation);
    assert!(sandbox.list_code_contexts().await.unwrap().is_empty());
    sandbox.destroy().await.unwrap();
}

/// An interrupt may land at any point of a cell: before the driver reads it, while it is being
/// parsed, or in user code. Each must end the cell with the context kept, never a kill.
#[tokio::test]
async fn a_run_dropped_at_any_moment_interrupts_without_losing_the_context() {
    let client = Client::builder(Arc::new(LocalProvider::new())).build();
    let sandbox = client.create(&CreateSpec::new()).await.unwrap();
    let run = |code: &str| RunCode::python(code);
    sandbox
        .run_code(&run("kept = 1"))
        .await
        .unwrap()
        .execution()
        .await
        .unwrap();
    let slow = "import time\ntime.sleep(30)";
    for events_read in [0, 1, 0, 1, 0, 1, 0, 1] {
        let mut cell = sandbox.run_code(&run(slow)).await.unwrap();
        for _ in 0..events_read {
            futures::StreamExt::next(&mut cell).await;
        }
        drop(cell);
    }
    let after = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        sandbox
            .run_code(&run("kept + 1"))
            .await
            .unwrap()
            .execution(),
    )
    .await
    .expect("every dropped cell was interrupted, none waited out")
    .unwrap();
    assert_eq!(after.text(), Some("2"));
    sandbox.destroy().await.unwrap();
}
