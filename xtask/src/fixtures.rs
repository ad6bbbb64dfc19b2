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
use sandbox_conformance::openapi::{Coverage, load_specs, validate_cassette};
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

/// Providers with no OpenAPI file in `../shared/specs`, and why: their cassettes are checked for
/// secrets and provenance only, and the summary says their bodies were not validated.
pub(crate) const WITHOUT_OPENAPI: &[(&str, &str)] = &[
    (
        "vercel",
        "Vercel publishes no OpenAPI file for its Sandbox API in ../shared/specs; its cassettes follow sandbox-vercel/PROTOCOL.md",
    ),
    (
        "sprites",
        "no Sprites OpenAPI file is in ../shared/specs (none was found published as a file); its cassettes follow sandbox-sprites/PROTOCOL.md",
    ),
];

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
}
