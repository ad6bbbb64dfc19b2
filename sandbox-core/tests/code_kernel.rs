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

/// Writes mailbox files through a second handle on the same local sandbox, as an adapter's
/// writer would through its API.
struct LocalWriter(Box<dyn sandbox_sdk_core::Sandbox>);

#[async_trait::async_trait]
impl sandbox_sdk_core::code::channel::MailboxWriter for LocalWriter {
    async fn write_file(&self, path: &str, data: bytes::Bytes) -> sandbox_sdk_core::Result<()> {
        self.0.write_file(path, data).await.map(|_| ())
    }
}

/// The mailbox transport (for providers whose stdin does not stream): state, an interrupt that
/// keeps it, no key left on disk, and a driver that ends when its kernels are dropped.
#[tokio::test]
async fn a_mailbox_kernel_keeps_state_leaves_no_key_and_ends_with_its_handle() {
    use sandbox_sdk_core::code::kernel::EmulatedKernels;
    let provider = LocalProvider::new();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let writer = LocalWriter(provider.connect(sandbox.id()).await.unwrap());
    let kernels = EmulatedKernels::new().with_mailbox(Arc::new(writer));
    let run = |code: &str| RunCode::python(code);
    let cell = |code: &'static str| {
        let kernels = kernels.clone();
        let sandbox = &sandbox;
        async move {
            kernels
                .run_code(&**sandbox, &run(code))
                .await
                .unwrap()
                .execution()
                .await
                .unwrap()
        }
    };
    assert_eq!(
        cell("import os\nx = 41\nos.getpid()").await.results.len(),
        1
    );
    let pid = cell("os.getpid()").await.text().unwrap().to_string();
    // An interrupted cell keeps the context.
    let timed_out = kernels
        .run_code(
            &*sandbox,
            &run("import time\ntime.sleep(30)").timeout(std::time::Duration::from_millis(300)),
        )
        .await
        .unwrap()
        .execution()
        .await
        .unwrap_err();
    assert_eq!(timed_out.kind(), sandbox_sdk_core::ErrorKind::Timeout);
    assert_eq!(cell("x + 1").await.text(), Some("42"));
    // Every request was read and removed, the hello with the key first.
    let left = cell("import glob\nsorted(glob.glob('.sbox/mbox-*/*'))").await;
    assert_eq!(left.text(), Some("[]"));

    drop(kernels);
    let alive = format!("while kill -0 {pid} 2>/dev/null; do sleep 0.05; done");
    let gone = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        sandbox.exec(&sandbox_sdk_core::Command::new("sh").arg("-c").arg(alive)),
    )
    .await;
    assert!(gone.is_ok(), "the driver outlived its handle");
    sandbox.destroy().await.unwrap();
}
