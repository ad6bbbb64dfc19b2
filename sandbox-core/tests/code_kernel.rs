//! The emulated kernel live on the `local` provider: state across cells, errors, results, timeouts.
#![cfg(feature = "local")]

use sandbox_sdk_core::code::RunCode;
use sandbox_sdk_core::code::kernel::EmulatedKernels;
use sandbox_sdk_core::local::LocalProvider;
use sandbox_sdk_core::{CreateSpec, ErrorKind, Provider};
use std::time::Duration;

#[tokio::test]
async fn state_errors_results_and_timeouts_on_local() {
    let provider = LocalProvider::new();
    let sandbox = provider.create(&CreateSpec::new()).await.unwrap();
    let kernels = EmulatedKernels::new();
    let host = sandbox.as_ref();

    let run = |code: &str| RunCode::python(code);
    let first = kernels
        .run_code(host, &run("x = 20\nprint('hi')"))
        .await
        .unwrap();
    let first = first.execution().await.unwrap();
    assert_eq!(first.stdout_text(), "hi\n");
    assert!(first.emulated);

    let second = kernels.run_code(host, &run("x * 2 + 2")).await.unwrap();
    assert_eq!(second.execution().await.unwrap().text(), Some("42"));

    let error = kernels.run_code(host, &run("1/0")).await.unwrap();
    let error = error.execution().await.unwrap().error.unwrap();
    assert_eq!(error.name, "ZeroDivisionError");
    assert!(error.traceback.contains("1/0"), "{}", error.traceback);

    let child = kernels
        .run_code(
            host,
            &run("import os\nos.system('echo from-child')\ndisplay({'a': 1})"),
        )
        .await
        .unwrap();
    let child = child.execution().await.unwrap();
    assert!(child.stdout_text().contains("from-child"), "{child:?}");
    assert_eq!(child.results.len(), 1);
    assert!(!child.results[0].is_main_result);

    let slow = kernels
        .run_code(
            host,
            &run("import time\ntime.sleep(30)").timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    assert_eq!(
        slow.execution().await.unwrap_err().kind(),
        ErrorKind::Timeout
    );
    let kept = kernels.run_code(host, &run("x")).await.unwrap();
    assert_eq!(kept.execution().await.unwrap().text(), Some("20"));
    sandbox.destroy().await.unwrap();
}
