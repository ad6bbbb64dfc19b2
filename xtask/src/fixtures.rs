//! `cargo xtask fixtures`: checks every cassette in the workspace (`<crate>/tests/cassettes/**.json`).
//!
//! It fails on:
//! - anything that looks like a secret: provider API keys (`e2b_…`, `dtn_…`, Fly's `FlyV1 …` and
//!   `fm2_…`), `Bearer` tokens of 24+ characters, JWTs, AWS access key ids and signed-URL
//!   parameters, private keys, GitHub and Stripe-style tokens, written plainly, percent-encoded,
//!   inside base64 or split across the frames of a streamed answer (the message names the file,
//!   line, kind and form of secret, never the secret). The check is the conformance kit's own
//!   ([`sandbox_conformance::scrub::SecretCheck`]), the one the recorder scrubs and refuses
//!   with;
//! - a cassette that is not valid JSON or has no provenance (`kind` spec or recorded, a `date`,
//!   and for `spec` a `source`);
//! - when `../shared/specs` (beside the repository) exists: a JSON request or response body that
//!   does not validate against the provider's OpenAPI schema for that path, method and status
//!   (the message names the interaction and the field). The validator is pragmatic: it resolves
//!   local `$ref`s and checks `type` (with `nullable` and 3.1 type lists), `required` (skipped for
//!   requests matched as a subset), `properties`, `additionalProperties`, `items`, `enum`,
//!   `allOf`, `oneOf`/`anyOf` (any branch), and skips `{{any}}` wildcards; Swagger 2.0 documents
//!   (body parameters, a response's own `schema`) are read too. Paths the spec does not describe
//!   (Connect RPCs, toolbox paths missing from the file) are not checked; the summary prints, per
//!   provider, how many JSON bodies were validated (`XTASK_FIXTURES_VERBOSE=1` lists the rest).

use crate::args::Args;
use crate::{Result, shell};
use sandbox_conformance::scrub::SecretCheck;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Runs the check over the workspace.
pub fn run(args: Args) -> Result {
    args.finish()?;
    check()
}

/// The CI step.
pub fn check() -> Result {
    let root = shell::workspace_root();
    let specs = root.join("../shared/specs");
    let specs = specs.is_dir().then_some(specs);
    let files = cassette_files(&root);
    let mut coverage = Coverage::default();
    let problems = check_files_measured(&files, &root, specs.as_deref(), &mut coverage);
    if specs.is_some() {
        for line in coverage.lines() {
            println!("{line}");
        }
        for (provider, why) in WITHOUT_OPENAPI {
            println!("fixtures: {provider}: bodies not validated: {why}");
        }
        if std::env::var_os("XTASK_FIXTURES_VERBOSE").is_some() {
            for (name, p) in &coverage.providers {
                for what in &p.unvalidated {
                    println!("  {name}: not validated: {what}");
                }
            }
        }
    }
    println!(
        "fixtures: {} cassette(s) checked{}",
        files.len(),
        if specs.is_some() {
            ", bodies validated against ../shared/specs"
        } else {
            " (../shared/specs absent: schemas not checked)"
        }
    );
    if problems.is_empty() {
        Ok(())
    } else {
        for p in &problems {
            eprintln!("  {p}");
        }
        Err(format!("{} problem(s) in cassettes", problems.len()))
    }
}

/// Every `*.json` under a `tests/cassettes` directory of a workspace crate.
fn cassette_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    let mut crates: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    for krate in crates {
        walk(&krate.join("tests/cassettes"), &mut out);
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

/// Checks `files`; `root` only shortens the names shown.
/// How many JSON request and response bodies each provider's cassettes hold, and how many of
/// them were validated against a schema (the rest sit on paths, methods or statuses the spec
/// does not describe), with the unvalidated `METHOD path` pairs.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    pub(crate) providers: std::collections::BTreeMap<String, ProviderCoverage>,
}

#[derive(Debug, Default)]
pub(crate) struct ProviderCoverage {
    pub(crate) bodies: usize,
    pub(crate) validated: usize,
    pub(crate) unvalidated: std::collections::BTreeSet<String>,
}

impl Coverage {
    pub(crate) fn body(&mut self, provider: &str, what: String, validated: bool) {
        let p = self.providers.entry(provider.to_owned()).or_default();
        p.bodies += 1;
        if validated {
            p.validated += 1;
        } else {
            p.unvalidated.insert(what);
        }
    }

    /// One summary line per provider.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.providers
            .iter()
            .map(|(name, p)| {
                format!(
                    "fixtures: {name}: {} of {} JSON bodies validated against a schema ({} request/response kinds not described by the spec)",
                    p.validated,
                    p.bodies,
                    p.unvalidated.len()
                )
            })
            .collect()
    }
}

/// The problems of `files`; see [`check_files_measured`].
#[cfg(test)]
fn check_files(files: &[PathBuf], root: &Path, specs: Option<&Path>) -> Vec<String> {
    check_files_measured(files, root, specs, &mut Coverage::default())
}

/// The problems of `files`, counting the validated bodies into `coverage`.
fn check_files_measured(
    files: &[PathBuf],
    root: &Path,
    specs: Option<&Path>,
    coverage: &mut Coverage,
) -> Vec<String> {
    let secrets = SecretCheck::new();
    let mut specs_cache: Vec<(String, Vec<Value>)> = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{shown}: cannot read: {e}"));
                continue;
            }
        };
        for finding in secrets.cassette(&text) {
            problems.push(format!(
                "{shown}:{finding}; scrub it to a placeholder such as {{{{token}}}}"
            ));
        }
        let cassette: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{shown}: not valid JSON: {e}"));
                continue;
            }
        };
        if let Err(why) = check_provenance(&cassette) {
            problems.push(format!("{shown}: {why}"));
        }
        let (Some(specs), Some(provider)) = (specs, cassette["provider"].as_str()) else {
            continue;
        };
        if WITHOUT_OPENAPI.iter().any(|(p, _)| *p == provider) {
            continue;
        }
        let docs = match specs_cache.iter().find(|(p, _)| p == provider) {
            Some((_, docs)) => docs,
            None => {
                let docs = load_specs(&specs.join(provider));
                specs_cache.push((provider.to_owned(), docs));
                &specs_cache[specs_cache.len() - 1].1
            }
        };
        for problem in validate_cassette(&cassette, docs, coverage) {
            problems.push(format!("{shown}: {problem}"));
        }
    }
    problems
}

fn check_provenance(cassette: &Value) -> std::result::Result<(), String> {
    let p = &cassette["provenance"];
    if !p.is_object() {
        return Err("no provenance (\"provenance\": {\"kind\": \"spec\"|\"recorded\", \"date\", \"source\"})".into());
    }
    let kind = p["kind"].as_str().unwrap_or_default();
    if kind != "spec" && kind != "recorded" {
        return Err(format!(
            "provenance.kind is {:?}, expected \"spec\" or \"recorded\"",
            p["kind"]
        ));
    }
    if p["date"].as_str().is_none_or(|d| d.trim().is_empty()) {
        return Err("provenance.date is missing".into());
    }
    if kind == "spec" && p["source"].as_str().is_none_or(|s| s.trim().is_empty()) {
        return Err("a spec cassette must name its source (provenance.source)".into());
    }
    Ok(())
}

/// Every OpenAPI document (`.json`, `.yml`, `.yaml` with a `paths` object) in `dir`.
pub(crate) fn load_specs(dir: &Path) -> Vec<Value> {
    let mut files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        files = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            let doc: Value = match path.extension()?.to_str()? {
                "json" => serde_json::from_str(&text).ok()?,
                "yml" | "yaml" => serde_norway::from_str(&text).ok()?,
                _ => return None,
            };
            doc["paths"].is_object().then_some(doc)
        })
        .collect()
}

/// Providers with no OpenAPI file in `../shared/specs`, and why: their cassettes are checked for
/// secrets and provenance only, and the summary says their bodies were not validated.
pub(crate) const WITHOUT_OPENAPI: &[(&str, &str)] = &[(
    "vercel",
    "Vercel publishes no OpenAPI file for its Sandbox API in ../shared/specs; its cassettes follow sandbox-vercel/PROTOCOL.md",
)];

/// Fields where the live service knowingly differs from its published OpenAPI file, as
/// `specs/<provider>/PROTOCOL.md` records: `(provider, field pointer with indices as *, why)`.
/// A problem on such a field is not reported.
const KNOWN_DEVIATIONS: &[(&str, &str, &str)] = &[
    (
        "fly",
        "/config/services/*/autostop",
        "the API answers with booleans for \"off\"/\"stop\" (PROTOCOL.md; the schema's own description says so)",
    ),
    (
        "daytona",
        "/errorReason: expected string, got null",
        DAYTONA_NULLS,
    ),
    (
        "daytona",
        "/networkAllowList: expected string, got null",
        DAYTONA_NULLS,
    ),
    (
        "daytona",
        "/domainAllowList: expected string, got null",
        DAYTONA_NULLS,
    ),
];

const DAYTONA_NULLS: &str = "DB-nullable fields come back as JSON null although the schema types them as plain strings (PROTOCOL.md §1.2)";

pub(crate) fn is_known_deviation(provider: &str, problem: &str) -> bool {
    let pointer = problem.split(':').next().unwrap_or_default();
    let normalised: String = pointer
        .split('/')
        .map(|seg| {
            if !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()) {
                "*"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    let message = problem.split_once(':').map(|(_, m)| m).unwrap_or_default();
    let normalised_problem = format!("{normalised}:{message}");
    KNOWN_DEVIATIONS.iter().any(|(p, rule, _)| {
        *p == provider
            && if rule.contains(':') {
                normalised_problem.contains(rule)
            } else {
                normalised.ends_with(rule)
            }
    })
}

/// Schema problems of every JSON body of a cassette against the provider's OpenAPI documents.
pub(crate) fn validate_cassette(
    cassette: &Value,
    docs: &[Value],
    coverage: &mut Coverage,
) -> Vec<String> {
    let provider = cassette["provider"].as_str().unwrap_or_default();
    let mut problems = Vec::new();
    let Some(interactions) = cassette["interactions"].as_array() else {
        return problems;
    };
    for (i, interaction) in interactions.iter().enumerate() {
        let req = &interaction["request"];
        let method = req["method"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let path = req["path"].as_str().unwrap_or_default();
        let at = format!("interaction #{i} {} {path}", method.to_ascii_uppercase());
        let resp = &interaction["response"];
        let status = resp["status"].as_u64().unwrap_or(200).to_string();
        let what = |side: &str| format!("{side} {} {path}", method.to_ascii_uppercase());
        let Some((doc, op)) = find_operation(docs, provider, &method, path) else {
            if req["body"].get("json").is_some() {
                coverage.body(provider, what("request"), false);
            }
            if resp["body"].get("json").is_some() {
                coverage.body(provider, what(&format!("response {status}")), false);
            }
            continue;
        };
        if let Some(body) = req["body"].get("json") {
            let schema = json_schema(doc, &op["requestBody"]).or_else(|| swagger_body(doc, op));
            coverage.body(provider, what("request"), schema.is_some());
            if let Some(schema) = schema {
                let partial = req["match"].as_str() == Some("subset");
                let mut errs = Vec::new();
                validate(doc, schema, body, "", partial, &mut errs, 0);
                errs.retain(|e| !is_known_deviation(provider, e));
                problems.extend(errs.into_iter().map(|e| format!("{at}: request body {e}")));
            }
        }
        if let Some(body) = resp["body"].get("json") {
            let responses = &op["responses"];
            let wildcard = format!("{}XX", &status[..1]);
            let response = [status.as_str(), wildcard.as_str(), "default"]
                .iter()
                .map(|k| &responses[*k])
                .find(|r| !r.is_null());
            let schema = response.and_then(|r| json_schema(doc, r));
            coverage.body(
                provider,
                what(&format!("response {status}")),
                schema.is_some(),
            );
            if let Some(schema) = schema {
                let mut errs = Vec::new();
                validate(doc, schema, body, "", false, &mut errs, 0);
                errs.retain(|e| !is_known_deviation(provider, e));
                problems.extend(
                    errs.into_iter()
                        .map(|e| format!("{at}: response {status} body {e}")),
                );
            }
        }
    }
    problems
}

/// The operation for `method` on the path template matching `path` (segments in braces match
/// any one segment; the servers' base path may be left out).
pub(crate) fn find_operation<'a>(
    docs: &'a [Value],
    provider: &str,
    method: &str,
    path: &str,
) -> Option<(&'a Value, &'a Value)> {
    for doc in docs {
        let Some(paths) = doc["paths"].as_object() else {
            continue;
        };
        let mut prefixes = server_prefixes(doc);
        prefixes.extend(mount_prefixes(provider).iter().map(|p| (*p).to_owned()));
        for (template, item) in paths {
            let op = &item[method];
            if op.is_null() {
                continue;
            }
            let matches = prefixes.iter().any(|prefix| {
                let full = format!("{prefix}{template}");
                template_matches(&full, path)
            });
            if matches {
                return Some((doc, op));
            }
        }
    }
    None
}

/// Where a provider's real service mounts the paths of its spec files, when the files' `servers`
/// do not say (from PROTOCOL.md): Daytona's API lives under `/api` (NestJS global prefix) and its
/// toolbox under the proxy's `/toolbox/{sandboxId}`.
fn mount_prefixes(provider: &str) -> &'static [&'static str] {
    match provider {
        "daytona" => &["/api", "/toolbox/{sandboxId}"],
        _ => &[],
    }
}

fn server_prefixes(doc: &Value) -> Vec<String> {
    let mut out = vec![String::new()];
    for server in doc["servers"].as_array().into_iter().flatten() {
        if let Some(url) = server["url"].as_str() {
            let after_scheme = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
            let path = after_scheme
                .find('/')
                .map(|i| &after_scheme[i..])
                .unwrap_or("");
            let path = path.trim_end_matches('/');
            if !path.is_empty() && !path.contains('{') && !out.iter().any(|p| p == path) {
                out.push(path.to_owned());
            }
        }
    }
    out
}

fn template_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.trim_end_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}') && !p.is_empty()))
}

/// The JSON schema of a request body or response object (resolving a `$ref` to either). A
/// Swagger 2.0 response carries its `schema` directly.
pub(crate) fn json_schema<'a>(doc: &'a Value, holder: &'a Value) -> Option<&'a Value> {
    let holder = resolve(doc, holder)?;
    if !holder["schema"].is_null() && holder["content"].is_null() {
        return Some(&holder["schema"]);
    }
    let content = holder["content"].as_object()?;
    let media = content
        .iter()
        .find(|(k, _)| k.starts_with("application/json"))
        .or_else(|| content.iter().find(|(k, _)| k.contains("json")))?;
    let schema = &media.1["schema"];
    (!schema.is_null()).then_some(schema)
}

/// The schema of a Swagger 2.0 operation's `in: body` parameter.
fn swagger_body<'a>(doc: &'a Value, op: &'a Value) -> Option<&'a Value> {
    op["parameters"]
        .as_array()?
        .iter()
        .filter_map(|p| resolve(doc, p))
        .find(|p| p["in"] == "body")
        .map(|p| &p["schema"])
        .filter(|s| !s.is_null())
}

/// Follows local `$ref`s (`#/components/...`).
fn resolve<'a>(doc: &'a Value, mut value: &'a Value) -> Option<&'a Value> {
    for _ in 0..32 {
        let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
            return Some(value);
        };
        let pointer = reference.strip_prefix('#')?;
        value = doc.pointer(pointer)?;
    }
    None
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(want: &str, v: &Value) -> bool {
    match (want, type_name(v)) {
        (w, g) if w == g => true,
        ("number", "integer") => true,
        ("integer", "number") => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

/// Validates `value` against `schema`, pushing `"<pointer>: <problem>"` messages.
pub(crate) fn validate(
    doc: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    partial: bool,
    errs: &mut Vec<String>,
    depth: usize,
) {
    if depth > 64 || value.as_str() == Some("{{any}}") {
        return;
    }
    let Some(schema) = resolve(doc, schema) else {
        return;
    };
    let here = || {
        if at.is_empty() {
            "/".to_owned()
        } else {
            at.to_owned()
        }
    };
    if let Some(all) = schema["allOf"].as_array() {
        for s in all {
            validate(doc, s, value, at, partial, errs, depth + 1);
        }
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema[key].as_array() {
            let ok = branches.iter().any(|s| {
                let mut e = Vec::new();
                validate(doc, s, value, at, partial, &mut e, depth + 1);
                e.is_empty()
            });
            if !ok {
                errs.push(format!("{}: matches none of the {key} schemas", here()));
                return;
            }
        }
    }
    if value.is_null() && schema["nullable"].as_bool() == Some(true) {
        return;
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_ok(t, value)) {
        errs.push(format!(
            "{}: expected {}, got {} {}",
            here(),
            types.join(" or "),
            type_name(value),
            short(value)
        ));
        return;
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.contains(value)
    {
        let shown: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        errs.push(format!(
            "{}: {} is not one of [{}]",
            here(),
            short(value),
            shown.join(", ")
        ));
    }
    match value {
        Value::Object(map) => {
            let props = schema["properties"].as_object();
            if !partial {
                for name in schema["required"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if !map.contains_key(name) {
                        errs.push(format!("{at}/{name}: required field missing"));
                    }
                }
            }
            for (k, v) in map {
                let child = format!("{at}/{k}");
                match props.and_then(|p| p.get(k)) {
                    Some(s) => validate(doc, s, v, &child, partial, errs, depth + 1),
                    None => match &schema["additionalProperties"] {
                        Value::Bool(false) => {
                            errs.push(format!("{child}: field not in the schema"))
                        }
                        extra @ Value::Object(_) => {
                            validate(doc, extra, v, &child, partial, errs, depth + 1)
                        }
                        _ => {}
                    },
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (i, v) in items.iter().enumerate() {
                validate(
                    doc,
                    &schema["items"],
                    v,
                    &format!("{at}/{i}"),
                    partial,
                    errs,
                    depth + 1,
                );
            }
        }
        _ => {}
    }
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 60 {
        format!("{}…", text.chars().take(60).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cassette(provider: &str, request_body: Value, response_body: Value) -> Value {
        json!({
            "provider": provider,
            "scenario": "lifecycle",
            "provenance": {"kind": "spec", "date": "2026-12-01", "source": "test spec"},
            "interactions": [{
                "request": {"method": "POST", "path": "/sandboxes", "body": {"json": request_body}},
                "response": {"status": 201, "body": {"json": response_body}}
            }]
        })
    }

    const SPEC: &str = r##"
openapi: 3.0.0
servers:
  - url: https://api.example.test
paths:
  /sandboxes:
    post:
      requestBody:
        content:
          application/json:
            schema: { $ref: "#/components/schemas/NewSandbox" }
      responses:
        "201":
          content:
            application/json:
              schema: { $ref: "#/components/schemas/Sandbox" }
components:
  schemas:
    NewSandbox:
      type: object
      required: [templateID]
      properties:
        templateID: { type: string }
        timeout: { type: integer }
    Sandbox:
      type: object
      required: [sandboxID, state]
      properties:
        sandboxID: { type: string }
        state: { type: string, enum: [running, paused] }
        metadata: { type: object, additionalProperties: { type: string }, nullable: true }
"##;

    fn setup(files: &[(&str, Value)]) -> (tempfile::TempDir, Vec<PathBuf>, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let specs = dir.path().join("specs/demo");
        std::fs::create_dir_all(&specs).expect("mkdir");
        std::fs::write(specs.join("openapi.yml"), SPEC).expect("write spec");
        let cassettes = dir.path().join("demo/tests/cassettes");
        std::fs::create_dir_all(&cassettes).expect("mkdir");
        std::fs::write(dir.path().join("demo/Cargo.toml"), "").expect("write");
        for (name, value) in files {
            std::fs::write(
                cassettes.join(name),
                serde_json::to_string_pretty(value).expect("json"),
            )
            .expect("write cassette");
        }
        let found = cassette_files(dir.path());
        let specs_root = dir.path().join("specs");
        (dir, found, specs_root)
    }

    fn good() -> Value {
        cassette(
            "demo",
            json!({"templateID": "base", "timeout": 300}),
            json!({"sandboxID": "{{sandbox_id}}", "state": "running", "metadata": {"suite": "conformance"}}),
        )
    }

    #[test]
    fn coverage_counts_validated_and_undescribed_bodies() {
        let mut elsewhere = good();
        elsewhere["interactions"][0]["request"]["path"] = json!("/process.Process/Start");
        let (dir, files, specs) = setup(&[("a.json", good()), ("b.json", elsewhere)]);
        let mut coverage = Coverage::default();
        let problems = check_files_measured(&files, dir.path(), Some(&specs), &mut coverage);
        assert!(problems.is_empty(), "{problems:#?}");
        let demo = &coverage.providers["demo"];
        assert_eq!((demo.validated, demo.bodies), (2, 4));
        assert!(
            demo.unvalidated
                .contains("response 201 POST /process.Process/Start"),
            "{:?}",
            demo.unvalidated
        );
        assert_eq!(
            coverage.lines(),
            vec![
                "fixtures: demo: 2 of 4 JSON bodies validated against a schema (2 request/response kinds not described by the spec)"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn swagger_2_bodies_are_validated_too() {
        // Daytona's toolbox.json is Swagger 2.0: body parameters and `schema` on responses.
        let swagger = json!({
            "swagger": "2.0",
            "paths": {"/sandboxes": {"post": {
                "parameters": [{"in": "body", "name": "req", "schema": {"$ref": "#/definitions/New"}}],
                "responses": {"201": {"schema": {"$ref": "#/definitions/Sandbox"}}}
            }}},
            "definitions": {
                "New": {"type": "object", "required": ["templateID"],
                        "properties": {"templateID": {"type": "string"}}},
                "Sandbox": {"type": "object", "properties": {"state": {"type": "string"}}}
            }
        });
        let bad = cassette("demo", json!({"timeout": 1}), json!({"state": 3}));
        let (dir, files, specs) = setup(&[("a.json", bad)]);
        std::fs::remove_file(specs.join("demo/openapi.yml")).expect("rm");
        std::fs::write(specs.join("demo/toolbox.json"), swagger.to_string()).expect("write");
        let mut coverage = Coverage::default();
        let text = check_files_measured(&files, dir.path(), Some(&specs), &mut coverage).join("\n");
        assert!(
            text.contains("request body /templateID: required field missing"),
            "{text}"
        );
        assert!(
            text.contains("response 201 body /state: expected string, got integer 3"),
            "{text}"
        );
        assert_eq!(coverage.providers["demo"].validated, 2);
    }

    #[test]
    fn a_clean_cassette_passes() {
        let (dir, files, specs) = setup(&[("lifecycle.json", good())]);
        assert_eq!(files.len(), 1);
        let problems = check_files(&files, dir.path(), Some(&specs));
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn a_planted_token_is_caught_without_being_shown() {
        let token = format!("e2b_{}", "0123456789abcdef".repeat(2));
        let mut planted = good();
        planted["interactions"][0]["request"]["headers"] = json!({"x-api-key": token});
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        planted["interactions"][0]["response"]["headers"] =
            json!({"authorization": format!("Bearer {jwt}")});
        let (dir, files, specs) = setup(&[("lifecycle.json", planted)]);
        let problems = check_files(&files, dir.path(), Some(&specs));
        let text = problems.join("\n");
        assert!(text.contains("lifecycle.json:"), "{text}");
        assert!(text.contains("E2B API key"), "{text}");
        assert!(text.contains("JWT"), "{text}");
        assert!(text.contains("bearer token"), "{text}");
        assert!(
            !text.contains(&token) && !text.contains(jwt),
            "the secret is shown: {text}"
        );
    }

    #[test]
    fn secrets_are_caught_encoded_split_and_under_any_field_name() {
        let b64 = |s: &str| sandbox_conformance::cassette::encode_base64(s.as_bytes());
        let stripe = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";
        let (a, b) = stripe.split_at(14);
        let mut planted = good();
        planted["interactions"][0]["request"]["path"] =
            json!("/files/e2b_0123456789abcdef%300123456789abcdef");
        planted["interactions"][0]["response"]["body"] = json!({"json": {"exec_jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLWJ5dGVz"}});
        planted["interactions"].as_array_mut().expect("array").extend([
            json!({"request": {"method": "GET", "path": "/a"},
                   "response": {"body": {"base64": b64(&format!("key={stripe}"))}}}),
            json!({"request": {"method": "GET", "path": "/b"},
                   "response": {"frames": [{"text": format!("out {a}")}, {"text": format!("{b}\n")}]}}),
            json!({"request": {"method": "GET", "path": "/c", "headers": {"authorization": "FlyV1 fm2_lJPECAAAAAAAAAAAAxAQ"}}}),
        ]);
        let (dir, files, _) = setup(&[("planted.json", planted)]);
        let text = check_files(&files, dir.path(), None).join("\n");
        for expected in [
            "E2B API key, percent-encoded",
            "(JWT)",
            "secret key, base64-encoded",
            "secret key, split across frames",
            "(Fly token)",
        ] {
            assert!(text.contains(expected), "{expected}: {text}");
        }
        assert!(
            !text.contains(a) && !text.contains(b),
            "the secret is shown: {text}"
        );
    }

    #[test]
    fn placeholders_and_short_values_are_not_secrets() {
        let mut c = good();
        c["interactions"][0]["request"]["headers"] =
            json!({"authorization": "Bearer {{token}}", "x-fly": "FlyV1 {{token}}"});
        c["interactions"][0]["request"]["query"] = json!({"X-Amz-Signature": "{{signature}}"});
        let (dir, files, specs) = setup(&[("lifecycle.json", c)]);
        assert!(check_files(&files, dir.path(), Some(&specs)).is_empty());
    }

    #[test]
    fn a_planted_schema_violation_names_the_field() {
        let bad_response = cassette(
            "demo",
            json!({"templateID": "base"}),
            json!({"sandboxID": "x", "state": "runing", "metadata": {"suite": 3}}),
        );
        let bad_request = cassette(
            "demo",
            json!({"timeout": "300"}),
            json!({"sandboxID": "x", "state": "paused"}),
        );
        let (dir, files, specs) = setup(&[("a.json", bad_response), ("b.json", bad_request)]);
        let text = check_files(&files, dir.path(), Some(&specs)).join("\n");
        assert!(text.contains("a.json: interaction #0 POST /sandboxes: response 201 body /state: \"runing\" is not one of"), "{text}");
        assert!(
            text.contains("/metadata/suite: expected string, got integer 3"),
            "{text}"
        );
        assert!(text.contains("b.json: interaction #0 POST /sandboxes: request body /templateID: required field missing"), "{text}");
        assert!(
            text.contains("request body /timeout: expected integer, got string \"300\""),
            "{text}"
        );
        // Without specs the same cassettes pass the schema part.
        assert!(check_files(&files, dir.path(), None).is_empty());
    }

    #[test]
    fn a_cassette_without_provenance_fails() {
        let mut c = good();
        c.as_object_mut().expect("object").remove("provenance");
        let mut no_source = good();
        no_source["provenance"] = json!({"kind": "spec", "date": "2026-12-01"});
        let (dir, files, _) = setup(&[("a.json", c), ("b.json", no_source)]);
        let text = check_files(&files, dir.path(), None).join("\n");
        assert!(text.contains("a.json: no provenance"), "{text}");
        assert!(
            text.contains("b.json: a spec cassette must name its source"),
            "{text}"
        );
    }

    #[test]
    fn known_deviations_are_matched_by_provider_and_field() {
        assert!(is_known_deviation(
            "fly",
            "/config/services/0/autostop: expected string, got boolean false"
        ));
        assert!(is_known_deviation(
            "fly",
            "/3/config/services/12/autostop: expected string"
        ));
        assert!(!is_known_deviation(
            "e2b",
            "/config/services/0/autostop: expected string"
        ));
        assert!(!is_known_deviation(
            "fly",
            "/config/services/0/autostart: expected boolean"
        ));
        assert!(is_known_deviation(
            "daytona",
            "/items/3/errorReason: expected string, got null null"
        ));
        assert!(!is_known_deviation(
            "daytona",
            "/errorReason: expected string, got number 7"
        ));
    }

    #[test]
    fn templates_match_segments_and_server_prefixes() {
        assert!(template_matches(
            "/sandboxes/{id}/pause",
            "/sandboxes/{{sandbox_id}}/pause"
        ));
        assert!(!template_matches("/sandboxes/{id}", "/sandboxes"));
        let doc = json!({"servers": [{"url": "https://h.test/api/"}], "paths": {}});
        assert_eq!(
            server_prefixes(&doc),
            vec!["".to_owned(), "/api".to_owned()]
        );
    }

    #[test]
    fn daytona_paths_are_found_under_the_api_and_toolbox_mounts() {
        let doc = json!({"paths": {
            "/sandbox/{sandboxIdOrName}": {"get": {"operationId": "getSandbox"}},
            "/files/info": {"get": {"operationId": "getFileInfo"}},
        }});
        let docs = [doc];
        let found = |path| {
            find_operation(&docs, "daytona", "get", path).map(|(_, op)| op["operationId"].clone())
        };
        assert_eq!(
            found("/api/sandbox/{{sandbox_id}}"),
            Some(json!("getSandbox"))
        );
        assert_eq!(
            found("/toolbox/{{sandbox_id}}/files/info"),
            Some(json!("getFileInfo"))
        );
        assert_eq!(find_operation(&docs, "e2b", "get", "/api/sandbox/x"), None);
    }
}
