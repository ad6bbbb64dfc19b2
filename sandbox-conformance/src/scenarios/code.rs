//! The code-interpreter scenarios: state across cells, errors, results, timeouts, contexts,
//! bounded output and a lost kernel. They run on whatever kernel the provider has, native or
//! core's emulated one.

use super::{At, Check, Ctx, within};
use futures::StreamExt;
use sandbox_sdk_core::code::{CodeEvent, ContextSpec, Execution, Language, RunCode};
use sandbox_sdk_core::{ErrorKind, Sandbox};
use std::time::Duration;

/// Bytes of stdout the output scenario asks for: more than any kernel's per-cell cap here.
const FLOOD: usize = 6 << 20;

async fn execute(sb: &dyn Sandbox, request: &RunCode) -> Check<Execution> {
    let step = format!("run_code({:?})", request.code);
    let run = within(&step, sb.run_code(request)).await?.at(&step)?;
    within(&step, run.execution()).await?.at(&step)
}

fn python(code: &str) -> RunCode {
    RunCode::python(code)
}

pub(super) async fn code_state(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let sb = sb.as_ref();
    let first = execute(sb, &python("x = 41\nprint('hi')")).await?;
    ensure!(
        first.stdout_text() == "hi\n" && first.error.is_none(),
        "the first cell: expected stdout \"hi\\n\" and no error, got {first:?}"
    );
    ensure!(
        first.results.is_empty(),
        "an assignment gave results: {first:?}"
    );
    let second = execute(sb, &python("x + 1")).await?;
    ensure!(
        second.text() == Some("42"),
        "state across cells: `x + 1` gave {:?}, expected \"42\"",
        second.text()
    );
    if let (Some(a), Some(b)) = (first.execution_count, second.execution_count) {
        ensure!(b > a, "execution count went from {a} to {b}");
    }
    let failed = execute(sb, &python("1/0")).await?;
    let error = failed
        .error
        .ok_or("`1/0` raised no error in the execution")?;
    ensure!(
        error.name == "ZeroDivisionError" && !error.traceback.is_empty(),
        "`1/0`: expected a ZeroDivisionError with a traceback, got {error:?}"
    );
    let shown = execute(sb, &python("display({'a': 1})\nx")).await?;
    ensure!(
        shown.results.len() == 2 && !shown.results[0].is_main_result && shown.text() == Some("41"),
        "display() and the last expression: expected a display result then the main result \
         \"41\" (the error kept the state), got {:?}",
        shown.results
    );
    Ok(())
}

pub(super) async fn code_timeout(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let sb = sb.as_ref();
    execute(sb, &python("y = 7")).await?;
    let slow = python("import time\ntime.sleep(30)").timeout(Duration::from_millis(500));
    // The deadline covers the whole cell, so it may end the call that starts it or its stream.
    let outcome = match within("run_code(sleep 30, timeout 500ms)", sb.run_code(&slow)).await? {
        Ok(run) => within("the timed-out cell", run.execution()).await?,
        Err(e) => Err(e),
    };
    match outcome {
        Err(e) if e.kind() == ErrorKind::Timeout => {}
        Err(e) => return Err(format!("expected Timeout, got {:?}: {e}", e.kind())),
        Ok(done) => return Err(format!("sleep(30) with a 500 ms timeout ended: {done:?}")),
    }
    let kept = execute(sb, &python("y")).await?;
    ensure!(
        kept.text() == Some("7"),
        "after the timeout the context lost its state: `y` gave {kept:?}"
    );
    // Dropping a run interrupts its cell: the next cell runs, and the state is kept.
    let mut dropped = sb
        .run_code(&python(
            "import time\nprint('started', flush=True)\ntime.sleep(30)",
        ))
        .await
        .at("run_code(sleep 30, to drop)")?;
    within("the first event of the cell to drop", dropped.next()).await?;
    drop(dropped);
    let after = execute(sb, &python("y + 1")).await?;
    ensure!(
        after.text() == Some("8"),
        "after a dropped run: `y + 1` gave {after:?}"
    );
    Ok(())
}

pub(super) async fn code_contexts(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let sb = sb.as_ref();
    let spec = ContextSpec::new(Language::Python);
    let one = sb
        .create_code_context(&spec)
        .await
        .at("create_code_context")?;
    let two = sb
        .create_code_context(&spec)
        .await
        .at("create_code_context")?;
    ensure!(one.id != two.id, "two contexts share the id {}", one.id);
    execute(sb, &python("a = 1").context(&one.id)).await?;
    let apart = execute(sb, &python("a").context(&two.id)).await?;
    ensure!(
        apart.error.as_ref().is_some_and(|e| e.name == "NameError"),
        "a name set in one context is seen in another: {apart:?}"
    );
    let listed = sb.list_code_contexts().await.at("list_code_contexts")?;
    for id in [&one.id, &two.id] {
        ensure!(
            listed.iter().any(|c| &c.id == id),
            "list_code_contexts lacks {id}: {listed:?}"
        );
    }
    sb.restart_code_context(&one.id)
        .await
        .at("restart_code_context")?;
    let cleared = execute(sb, &python("a").context(&one.id)).await?;
    ensure!(
        cleared
            .error
            .as_ref()
            .is_some_and(|e| e.name == "NameError"),
        "a restarted context kept its state: {cleared:?}"
    );
    sb.remove_code_context(&two.id)
        .await
        .at("remove_code_context")?;
    let listed = sb.list_code_contexts().await.at("list_code_contexts")?;
    ensure!(
        !listed.iter().any(|c| c.id == two.id),
        "a removed context is still listed: {listed:?}"
    );
    let gone = sb.run_code(&python("1").context(&two.id)).await;
    ensure!(
        matches!(&gone, Err(e) if e.kind() == ErrorKind::NotFound),
        "run_code in a removed context: expected NotFound, got {:?}",
        gone.map(|_| ()).map_err(|e| e.kind())
    );
    sb.remove_code_context(&one.id)
        .await
        .at("remove_code_context")?;
    Ok(())
}

pub(super) async fn code_output_bounded(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let sb = sb.as_ref();
    let code = format!(
        "import sys\nfor _ in range({}):\n    sys.stdout.write('x' * 1024)",
        FLOOD / 1024
    );
    let step = "run_code(6 MiB of stdout)";
    let mut run = within(step, sb.run_code(&python(&code))).await?.at(step)?;
    let (mut kept, mut truncated) = (0usize, false);
    while let Some(event) = within(step, run.next()).await? {
        match event.at(step)? {
            CodeEvent::Stdout(text) => kept += text.len(),
            CodeEvent::Truncated { dropped } => truncated = dropped > 0,
            _ => {}
        }
    }
    ensure!(
        truncated && kept < FLOOD,
        "6 MiB of stdout: expected it cut and reported, got {kept} bytes, truncated: {truncated}"
    );
    // A string's text is the string itself, as E2B's server gives it.
    let after = execute(sb, &python("'still here'")).await?;
    ensure!(
        after.text() == Some("still here"),
        "after a flood: {after:?}"
    );
    Ok(())
}

pub(super) async fn code_lost(ctx: &Ctx) -> Check {
    let sb = ctx.connect().await?;
    let sb = sb.as_ref();
    let context = sb
        .create_code_context(&ContextSpec::new(Language::Python))
        .await
        .at("create_code_context")?;
    execute(sb, &python("z = 1").context(&context.id)).await?;
    let kill =
        python("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)").context(&context.id);
    let killed = match within("run_code(kill the kernel)", sb.run_code(&kill)).await? {
        Ok(run) => within("the killing cell", run.execution())
            .await?
            .map(|_| ()),
        Err(e) => Err(e),
    };
    ensure!(
        matches!(&killed, Err(e) if e.kind() == ErrorKind::ContextLost),
        "a cell that killed its kernel: expected ContextLost, got {:?}",
        killed.map_err(|e| e.kind())
    );
    let next = sb.run_code(&python("z").context(&context.id)).await;
    ensure!(
        matches!(&next, Err(e) if e.kind() == ErrorKind::ContextLost),
        "the next cell in a lost context: expected ContextLost (never a silent fresh kernel), \
         got {:?}",
        next.map(|_| ()).map_err(|e| e.kind())
    );
    sb.restart_code_context(&context.id)
        .await
        .at("restart_code_context")?;
    // A stateful kernel alone (no rich results) is enough: stdout says it works again.
    let fresh = execute(sb, &python("print('back')").context(&context.id)).await?;
    ensure!(
        fresh.stdout_text() == "back\n",
        "after a restart: {fresh:?}"
    );
    sb.remove_code_context(&context.id)
        .await
        .at("remove_code_context")?;
    Ok(())
}
