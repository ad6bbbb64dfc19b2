//! The patch tool: a whole V4A patch (`*** Begin Patch` ... `*** End Patch`) applied to the
//! sandbox's files, all or nothing as far as checking goes.

use super::{Def, call_timeout, make, ok};
use crate::patch::{self, Applied, Fuzz, Hunk, MatchLimits, PatchOp};
use crate::result::{ToolError, ToolResult};
use crate::session::Session;
use crate::tool::{Annotations, Family};
use bytes::Bytes;
use sandbox_sdk_core::{Capability, Sandbox};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub(super) fn defs() -> Vec<Def> {
    vec![Def {
        name: "sandbox_apply_patch_v1",
        title: "Apply a patch",
        description: "Add, update, move and delete files in the sandbox with one patch in the V4A format:\n*** Begin Patch\n*** Add File: path/new.txt\n+first line\n+second line\n*** Update File: path/old.py\n*** Move to: path/renamed.py   (optional)\n@@ def greet():\n-    print(\"Hi\")\n+    print(\"Hello\")\n*** Delete File: path/gone.txt\n*** End Patch\nIn an update, each hunk starts with @@ (optionally followed by a line of the file to find first, such as a function signature); its lines start with a space (unchanged context), - (removed) or + (added). Give about 3 lines of context around each change. Hunks apply in file order. Every hunk is checked before anything is written: if one does not match, nothing changes and the error names the hunk. Add refuses an existing file and Move to refuses an existing destination.",
        annotations: Annotations::DESTRUCTIVE,
        family: Family::Standard,
        requires: &[Capability::FilesUpload],
        needs_provider: false,
        native: None,
        build: |def, s| make::<PatchInput>(def, s, |s, i| Box::pin(apply(s, i)), call_timeout),
    }]
}

/// Input of `sandbox_apply_patch_v1`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchInput {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    patch: String,
    /// The sandbox; omit for the current sandbox.
    #[serde(default)]
    sandbox_id: Option<String>,
}

/// A file's planned state: new contents, or removed.
#[derive(Debug)]
struct Plan {
    /// Path → `Some(contents)` to write or `None` to remove, in first-touched order.
    order: Vec<String>,
    after: BTreeMap<String, Option<String>>,
    /// Whether each touched path existed before the patch.
    existed: BTreeMap<String, bool>,
    summary: Vec<String>,
    fuzz: Fuzz,
}

impl Plan {
    async fn current(
        &mut self,
        s: &Session,
        sandbox: &dyn Sandbox,
        path: &str,
    ) -> Result<Option<String>, ToolError> {
        if let Some(state) = self.after.get(path) {
            return Ok(state.clone());
        }
        let exists = s.exists(sandbox, path).await?;
        self.existed.insert(path.to_owned(), exists);
        if exists {
            Ok(Some(s.read_text(sandbox, path).await?))
        } else {
            Ok(None)
        }
    }

    async fn exists(
        &mut self,
        s: &Session,
        sandbox: &dyn Sandbox,
        path: &str,
    ) -> Result<bool, ToolError> {
        if let Some(state) = self.after.get(path) {
            return Ok(state.is_some());
        }
        let exists = s.exists(sandbox, path).await?;
        self.existed.insert(path.to_owned(), exists);
        Ok(exists)
    }

    fn set(&mut self, path: &str, state: Option<String>) {
        if !self.order.iter().any(|p| p == path) {
            self.order.push(path.to_owned());
        }
        self.after.insert(path.to_owned(), state);
    }
}

/// Sets its flag when dropped: when the call's future is dropped (its timeout fired), the
/// matching running on a blocking thread sees the flag and stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Applies `hunks` to `contents` on a blocking thread, so the runtime (and the call's timeout)
/// keeps running while it works; dropping the returned future stops the work soon after.
async fn apply_off_runtime(
    contents: String,
    hunks: Vec<Hunk>,
    path: String,
) -> Result<Applied, ToolError> {
    let cancel = Arc::new(AtomicBool::new(false));
    let _stop_when_dropped = CancelOnDrop(cancel.clone());
    tokio::task::spawn_blocking(move || {
        let limits = MatchLimits {
            cancel: Some(&cancel),
            ..MatchLimits::default()
        };
        patch::apply_hunks_with(&contents, &hunks, &path, limits)
    })
    .await
    .unwrap_or_else(|_| {
        Err(ToolError::new(
            "internal",
            "applying the patch failed unexpectedly",
            "this is a bug in the tool; try another way, and tell the user",
        ))
    })
}

/// Plans the operations against the sandbox's files; writes nothing.
async fn plan(s: &Session, sandbox: &dyn Sandbox, ops: Vec<PatchOp>) -> Result<Plan, ToolError> {
    let mut plan = Plan {
        order: Vec::new(),
        after: BTreeMap::new(),
        existed: BTreeMap::new(),
        summary: Vec::new(),
        fuzz: Fuzz::Exact,
    };
    for op in ops {
        match op {
            PatchOp::Add { path, contents } => {
                let path = s.path(&path)?;
                if plan.exists(s, sandbox, &path).await? {
                    return Err(ToolError::conflict(
                        format!(
                            "*** Add File: {path}: the file already exists; nothing was changed"
                        ),
                        "use *** Update File: to change it, or *** Delete File: it first",
                    ));
                }
                plan.set(&path, Some(contents));
                plan.summary.push(format!("A {path}"));
            }
            PatchOp::Delete { path } => {
                let path = s.path(&path)?;
                if !plan.exists(s, sandbox, &path).await? {
                    return Err(ToolError::not_found(
                        format!("*** Delete File: {path}: no such file; nothing was changed"),
                        "check the path (list the directory) and fix the patch",
                    ));
                }
                plan.set(&path, None);
                plan.summary.push(format!("D {path}"));
            }
            PatchOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let path = s.path(&path)?;
                let Some(current) = plan.current(s, sandbox, &path).await? else {
                    return Err(ToolError::not_found(
                        format!("*** Update File: {path}: no such file; nothing was changed"),
                        "check the path, or use *** Add File: to create it",
                    ));
                };
                let applied = apply_off_runtime(current, hunks, path.clone()).await?;
                plan.fuzz = plan.fuzz.max(applied.fuzz);
                match move_to {
                    Some(target) => {
                        let target = s.path(&target)?;
                        if target != path && plan.exists(s, sandbox, &target).await? {
                            return Err(ToolError::conflict(
                                format!(
                                    "*** Move to: {target}: the destination already exists; nothing was changed"
                                ),
                                "move to a new path, or delete the destination first",
                            ));
                        }
                        plan.set(&path, None);
                        plan.set(&target, Some(applied.contents));
                        plan.summary.push(format!("R {path} -> {target}"));
                    }
                    None => {
                        plan.set(&path, Some(applied.contents));
                        plan.summary.push(format!("M {path}"));
                    }
                }
            }
        }
    }
    Ok(plan)
}

/// Writes a plan; stops at the first failure and says what was already written.
async fn commit(sandbox: &dyn Sandbox, plan: &Plan) -> Result<(), ToolError> {
    let mut done = Vec::new();
    // Writes first, removals after: a move whose write fails leaves the source in place.
    let writes = plan.order.iter().filter(|p| plan.after[*p].is_some());
    let removals = plan.order.iter().filter(|p| plan.after[*p].is_none());
    for path in writes.chain(removals) {
        let result = match &plan.after[path] {
            Some(contents) => sandbox
                .write_file(path, Bytes::from(contents.clone()))
                .await
                .map(|_| ()),
            None if plan.existed.get(path).copied().unwrap_or(false) => sandbox.remove(path).await,
            None => Ok(()),
        };
        if let Err(e) = result {
            let mut error = ToolError::from(e);
            error.message = format!(
                "writing {path} failed after the patch had changed {}: {}",
                if done.is_empty() {
                    "nothing".to_owned()
                } else {
                    done.join(", ")
                },
                error.message
            );
            error.hint = "check the files named and apply the rest of the patch again".into();
            return Err(error);
        }
        done.push(path.clone());
    }
    Ok(())
}

/// Plans and writes parsed operations; the shared core of the patch tools.
pub(crate) async fn apply_ops(
    s: &Session,
    sandbox: &dyn Sandbox,
    ops: Vec<PatchOp>,
) -> Result<ToolResult, ToolError> {
    let plan = plan(s, sandbox, ops).await?;
    commit(sandbox, &plan).await?;
    let mut text = format!("patch applied:\n{}", plan.summary.join("\n"));
    if plan.fuzz != Fuzz::Exact {
        text.push_str("\n(some lines matched only after ignoring whitespace differences)");
    }
    Ok(ok(
        text,
        json!({
            "changes": plan.summary,
            "exact": plan.fuzz == Fuzz::Exact,
        }),
    ))
}

async fn apply(s: Arc<Session>, input: PatchInput) -> Result<ToolResult, ToolError> {
    let sandbox = s.sandbox(input.sandbox_id.as_deref()).await?;
    let ops = patch::parse(&input.patch)?;
    apply_ops(&s, &*sandbox, ops).await
}
