//! Checking JSON bodies against a provider's OpenAPI documents: the validator behind `cargo
//! xtask fixtures` (every cassette's bodies) and the adapters' simulator checks (every body of a
//! live run), for a provider author's own checks too.
//!
//! The validator is pragmatic: it resolves local `$ref`s and checks `type` (with `nullable` and
//! 3.1 type lists), `required` (skipped for requests matched as a subset), `properties`,
//! `additionalProperties`, `items`, `enum`, `allOf`, `oneOf`/`anyOf` (any branch), and skips
//! `{{any}}` wildcards; Swagger 2.0 documents (body parameters, a response's own `schema`) are
//! read too. Paths a document does not describe are not checked: [`Coverage`] counts them.
//! Fields where a live service knowingly differs from its published file are listed in
//! [`KNOWN_DEVIATIONS`] and not reported.

use serde_json::Value;
use std::path::Path;

/// How many JSON request and response bodies each provider's cassettes hold, and how many of
/// them were validated against a schema (the rest sit on paths, methods or statuses the spec
/// does not describe), with the unvalidated `METHOD path` pairs.
#[derive(Debug, Default)]
pub struct Coverage {
    /// Per provider name.
    pub providers: std::collections::BTreeMap<String, ProviderCoverage>,
}

/// One provider's part of [`Coverage`].
#[derive(Debug, Default)]
pub struct ProviderCoverage {
    /// JSON bodies seen.
    pub bodies: usize,
    /// Those validated against a schema.
    pub validated: usize,
    /// The `METHOD path` (and status) of the bodies no schema describes.
    pub unvalidated: std::collections::BTreeSet<String>,
}

impl Coverage {
    /// Counts one body of `provider`: `what` names it when it was not `validated`.
    pub fn body(&mut self, provider: &str, what: String, validated: bool) {
        let p = self.providers.entry(provider.to_owned()).or_default();
        p.bodies += 1;
        if validated {
            p.validated += 1;
        } else {
            p.unvalidated.insert(what);
        }
    }

    /// One summary line per provider.
    pub fn lines(&self) -> Vec<String> {
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

/// Every OpenAPI document (`.json`, `.yml`, `.yaml` with a `paths` object) in `dir`.
pub fn load_specs(dir: &Path) -> Vec<Value> {
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

/// Fields where the live service knowingly differs from its published OpenAPI file, as
/// `specs/<provider>/PROTOCOL.md` records: `(provider, field pointer with indices as *, why)`.
/// A problem on such a field is not reported.
pub const KNOWN_DEVIATIONS: &[(&str, &str, &str)] = &[
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

/// Whether `problem` (a validator message, `pointer: text`) is on a field of `provider` listed
/// in [`KNOWN_DEVIATIONS`] (array indices in the pointer match `*`).
pub fn is_known_deviation(provider: &str, problem: &str) -> bool {
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
pub fn validate_cassette(cassette: &Value, docs: &[Value], coverage: &mut Coverage) -> Vec<String> {
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
pub fn find_operation<'a>(
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

/// The problems of `value` against `schema` (a schema of `doc`, or a `$ref` into it), each
/// `pointer: what`; none when it validates.
pub fn problems(doc: &Value, schema: &Value, value: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    validate(doc, schema, value, "", false, &mut errs, 0);
    errs
}

/// The JSON schema of a request body or response object (resolving a `$ref` to either). A
/// Swagger 2.0 response carries its `schema` directly.
pub fn json_schema<'a>(doc: &'a Value, holder: &'a Value) -> Option<&'a Value> {
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
fn validate(
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
