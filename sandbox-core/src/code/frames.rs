//! The NDJSON vocabulary of a cell's stream: E2B's `/execute` lines (`number_of_executions`,
//! `stdout`, `stderr`, `result`, `error`, `keepalive`, `end_of_execution`), which the emulated
//! kernel's driver speaks too, so one parser serves both. The driver adds `ready`,
//! `truncated`, an `id` naming the request, `status` on the end, and `spilled` on results.
//!
//! Lines come from core's one [`LineReader`](crate::lines::LineReader), re-exported here.

use super::{CodeEvent, CodeResult, ExecutionError, SpilledOutput, mime};
use serde_json::{Map, Value};

pub use crate::lines::{Line, LineReader};

/// How a cell ended, from an `end_of_execution` line (`ok` when the line says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndStatus {
    /// It ran to its end.
    Ok,
    /// It raised.
    Error,
    /// It was interrupted.
    Interrupted,
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// An event of the cell.
    Event(CodeEvent),
    /// The cell ended.
    End(EndStatus),
    /// A keep-alive line (ignored by readers).
    Keepalive,
    /// The emulated driver is up: its `ready` line, kept whole.
    Ready(Map<String, Value>),
    /// A type nobody here knows (ignored by readers, as E2B's SDKs do).
    Unknown(String),
}

/// A line that is not one JSON object with a string `type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine(pub String);

/// Parses one line (without its `\n`). `emulated` marks the results it makes.
pub fn parse_line(line: &[u8], emulated: bool) -> Result<(Option<String>, Frame), BadLine> {
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| BadLine(format!("a stream line is not JSON ({e})")))?;
    let Value::Object(mut object) = value else {
        return Err(BadLine("a stream line is not a JSON object".into()));
    };
    let id = match object.remove("id") {
        Some(Value::String(id)) => Some(id),
        _ => None,
    };
    let kind = match object.remove("type") {
        Some(Value::String(kind)) => kind,
        _ => return Err(BadLine("a stream line has no string `type`".into())),
    };
    let text = |object: &Map<String, Value>, key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let frame = match kind.as_str() {
        "number_of_executions" => Frame::Event(CodeEvent::ExecutionCount(
            object
                .get("execution_count")
                .and_then(Value::as_u64)
                .unwrap_or_default(),
        )),
        "stdout" => Frame::Event(CodeEvent::Stdout(text(&object, "text"))),
        "stderr" => Frame::Event(CodeEvent::Stderr(text(&object, "text"))),
        "error" => Frame::Event(CodeEvent::Error(ExecutionError {
            name: text(&object, "name"),
            value: text(&object, "value"),
            traceback: match object.get("traceback") {
                Some(Value::Array(lines)) => lines
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
                Some(Value::String(text)) => text.clone(),
                _ => String::new(),
            },
        })),
        "result" => Frame::Event(CodeEvent::Result(result_from_wire(object, emulated))),
        "truncated" => Frame::Event(CodeEvent::Truncated {
            dropped: object
                .get("dropped")
                .and_then(Value::as_u64)
                .unwrap_or_default(),
        }),
        "keepalive" => Frame::Keepalive,
        "ready" => Frame::Ready(object),
        "end_of_execution" => Frame::End(match object.get("status").and_then(Value::as_str) {
            Some("error") => EndStatus::Error,
            Some("interrupted") => EndStatus::Interrupted,
            _ => EndStatus::Ok,
        }),
        _ => Frame::Unknown(kind),
    };
    Ok((id, frame))
}

/// A `result` line's fields as a [`CodeResult`]: E2B's field names become MIME types, `extra`
/// is spread under its own MIME types, and `spilled` lists formats left in files.
pub fn result_from_wire(mut object: Map<String, Value>, emulated: bool) -> CodeResult {
    let is_main_result = object
        .remove("is_main_result")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let spilled = object
        .remove("spilled")
        .and_then(|v| serde_json::from_value::<Vec<SpilledOutput>>(v).ok())
        .unwrap_or_default();
    let mut data = std::collections::BTreeMap::new();
    if let Some(Value::Object(extra)) = object.remove("extra") {
        data.extend(extra);
    }
    for (field, mime_type) in mime::E2B_FIELDS {
        if let Some(value) = object.remove(field)
            && !value.is_null()
        {
            data.insert(mime_type.to_string(), value);
        }
    }
    CodeResult {
        is_main_result,
        data,
        spilled,
        emulated,
    }
}

/// A [`CodeResult`] as E2B's `result` line fields (the inverse of [`result_from_wire`]), for
/// servers that speak E2B's wire.
pub fn result_to_wire(result: &CodeResult) -> Map<String, Value> {
    let mut object = Map::new();
    object.insert("type".into(), "result".into());
    let mut extra = Map::new();
    for (mime_type, value) in &result.data {
        match mime::E2B_FIELDS.iter().find(|(_, m)| m == mime_type) {
            Some((field, _)) => {
                object.insert((*field).to_string(), value.clone());
            }
            None => {
                extra.insert(mime_type.clone(), value.clone());
            }
        }
    }
    if !extra.is_empty() {
        object.insert("extra".into(), Value::Object(extra));
    }
    object.insert("is_main_result".into(), result.is_main_result.into());
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_lines_parse_into_events() {
        let (_, frame) = parse_line(
            br#"{"type":"result","text":"42","png":"iVBO","extra":{"application/vnd.plotly.v1+json":{"a":1}},"is_main_result":true}"#,
            false,
        )
        .unwrap();
        let Frame::Event(CodeEvent::Result(result)) = frame else {
            panic!("{frame:?}")
        };
        assert!(result.is_main_result);
        assert_eq!(result.text(), Some("42"));
        assert_eq!(result.get_str(mime::PNG), Some("iVBO"));
        assert!(result.get("application/vnd.plotly.v1+json").is_some());
        let back = result_to_wire(&result);
        assert_eq!(back["text"], "42");
        assert_eq!(back["extra"]["application/vnd.plotly.v1+json"]["a"], 1);

        let (_, end) = parse_line(br#"{"type": "end_of_execution"}"#, false).unwrap();
        assert_eq!(end, Frame::End(EndStatus::Ok));
        let (_, keep) = parse_line(br#"{"type":"keepalive"}"#, false).unwrap();
        assert_eq!(keep, Frame::Keepalive);
        let (_, other) = parse_line(br#"{"type":"shiny"}"#, false).unwrap();
        assert_eq!(other, Frame::Unknown("shiny".into()));
        assert!(parse_line(b"not json", false).is_err());
        let (id, count) = parse_line(
            br#"{"type":"number_of_executions","execution_count":3,"id":"c1"}"#,
            false,
        )
        .unwrap();
        assert_eq!(id.as_deref(), Some("c1"));
        assert_eq!(count, Frame::Event(CodeEvent::ExecutionCount(3)));
    }
}
