//! Stateful code against the E2B simulator: native on `code-interpreter-v1` (the simulator runs
//! the interpreter server there), emulated over envd on `base`.

use futures::StreamExt;
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::code::RunCode;
use sandbox_sdk_core::{CreateSpec, ErrorKind, Provider, Sandbox};
use sandbox_sim::e2b::E2bSim;
use std::time::Duration;

async fn sandbox(sim: &E2bSim, template: &str) -> Box<dyn Sandbox> {
    let provider = E2bBuilder::new()
        .api_key(sim.api_key())
        .api_url(sim.url())
        .sandbox_url(sim.url())
        .build()
        .unwrap();
    provider
        .create(&CreateSpec::new().template(template))
        .await
        .unwrap()
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

#[tokio::test]
async fn the_interpreter_template_runs_natively() {
    let sim = E2bSim::start().await.unwrap();
    let sb = sandbox(&sim, "code-interpreter-v1").await;
    let run = sb.run_code(&RunCode::python("x = 2")).await.unwrap();
    assert!(!run.is_emulated());
    let done = run.execution().await.unwrap();
    assert!(!done.emulated && done.execution_count.is_some(), "{done:?}");

    let image = format!(
        "import base64\nclass Dot:\n    def _repr_png_(self):\n        return base64.b64decode('{PNG}')\ndisplay(Dot())\nx * 21"
    );
    let shown = sb
        .run_code(&RunCode::python(image))
        .await
        .unwrap()
        .execution()
        .await
        .unwrap();
    assert_eq!(shown.results.len(), 2);
    assert!(
        shown.results[0]
            .png()
            .is_some_and(|png| png.starts_with(b"\x89PNG"))
    );
    assert_eq!(shown.text(), Some("42"));

    // A value E2B would paste into the cell unescaped is refused, naming only the variable.
    let quoted = sb
        .run_code(&RunCode::python("1").env("TOKEN", "it's-secret"))
        .await
        .unwrap_err();
    assert_eq!(quoted.kind(), ErrorKind::Validation);
    assert!(quoted.to_string().contains("TOKEN") && !quoted.to_string().contains("secret"));
    let plain = sb
        .run_code(
            &RunCode::python("import os\nos.environ['GREETING']").env("GREETING", "hello world"),
        )
        .await
        .unwrap()
        .execution()
        .await
        .unwrap();
    assert_eq!(plain.text(), Some("hello world"));

    // Dropping a run closes its connection: the server interrupts the cell and keeps the state.
    let mut dropped = sb
        .run_code(&RunCode::python(
            "import time\nprint('go', flush=True)\ntime.sleep(30)",
        ))
        .await
        .unwrap();
    dropped.next().await.unwrap().unwrap();
    drop(dropped);
    let after = tokio::time::timeout(
        Duration::from_secs(20),
        sb.run_code(&RunCode::python("x"))
            .await
            .unwrap()
            .execution(),
    )
    .await
    .expect("the dropped cell was interrupted")
    .unwrap();
    assert_eq!(after.text(), Some("2"));
    sb.destroy().await.unwrap();
}

#[tokio::test]
async fn the_base_template_runs_the_emulated_kernel() {
    let sim = E2bSim::start().await.unwrap();
    let sb = sandbox(&sim, "base").await;
    let run = sb.run_code(&RunCode::python("6 * 7")).await.unwrap();
    assert!(run.is_emulated());
    let done = run.execution().await.unwrap();
    assert!(done.emulated);
    assert_eq!(done.text(), Some("42"));
    sb.destroy().await.unwrap();
}
