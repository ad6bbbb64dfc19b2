//! `multipart/form-data` bodies, built without any reqwest type.

use crate::files::ByteStream;
use crate::http::StreamBody;
use bytes::Bytes;
use std::fmt;

/// A `multipart/form-data` body: text fields, in-memory files and streamed files, sent in the
/// order added. Streamed parts are read as they are sent, in constant memory.
///
/// ```
/// use sandbox_sdk_core::http::Multipart;
/// let form = Multipart::new()
///     .text("path", "/home/user/data.bin")
///     .bytes("file", "data.bin", "application/octet-stream", vec![0u8, 1, 2]);
/// assert_eq!(form.len(), 2);
/// ```
#[derive(Default)]
pub struct Multipart {
    pub(crate) parts: Vec<Part>,
}

pub(crate) struct Part {
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub body: PartBody,
}

pub(crate) enum PartBody {
    Text(String),
    Bytes(Bytes),
    Stream(StreamBody, Option<u64>),
}

impl Multipart {
    /// An empty form.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a text field.
    pub fn text(mut self, name: &str, value: impl Into<String>) -> Self {
        self.parts.push(Part {
            name: name.to_owned(),
            filename: None,
            content_type: None,
            body: PartBody::Text(value.into()),
        });
        self
    }

    /// Adds a file part held in memory.
    pub fn bytes(
        mut self,
        name: &str,
        filename: &str,
        content_type: &str,
        data: impl Into<Bytes>,
    ) -> Self {
        self.parts.push(Part {
            name: name.to_owned(),
            filename: Some(filename.to_owned()),
            content_type: Some(content_type.to_owned()),
            body: PartBody::Bytes(data.into()),
        });
        self
    }

    /// Adds a file part read from a [`ByteStream`] or an [`crate::UploadBody`] as it is sent.
    /// Without a length the part is sent with chunked encoding; with one the whole form gets a
    /// `Content-Length` when every part's length is known.
    pub fn stream(
        mut self,
        name: &str,
        filename: &str,
        content_type: &str,
        body: impl Into<StreamBody>,
        length: Option<u64>,
    ) -> Self {
        self.parts.push(Part {
            name: name.to_owned(),
            filename: Some(filename.to_owned()),
            content_type: Some(content_type.to_owned()),
            body: PartBody::Stream(body.into(), length),
        });
        self
    }

    /// Adds a file part read from a [`ByteStream`]; shorthand for [`Multipart::stream`].
    pub fn byte_stream(
        self,
        name: &str,
        filename: &str,
        content_type: &str,
        stream: ByteStream,
    ) -> Self {
        self.stream(name, filename, content_type, stream, None)
    }

    /// How many parts the form has.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether the form has no part.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Converts to reqwest's form. Fails on a content type reqwest cannot parse.
    /// Streamed parts count as progress for `progress`, the idle bound of their request.
    pub(crate) fn into_reqwest(
        self,
        progress: Option<super::Progress>,
    ) -> Result<reqwest::multipart::Form, String> {
        let mut form = reqwest::multipart::Form::new();
        for part in self.parts {
            let mut p = match part.body {
                PartBody::Text(text) => reqwest::multipart::Part::text(text),
                PartBody::Bytes(bytes) => reqwest::multipart::Part::stream_with_length(
                    reqwest::Body::from(bytes.clone()),
                    bytes.len() as u64,
                ),
                PartBody::Stream(body, Some(len)) => reqwest::multipart::Part::stream_with_length(
                    body.into_reqwest(progress.clone()),
                    len,
                ),
                PartBody::Stream(body, None) => {
                    reqwest::multipart::Part::stream(body.into_reqwest(progress.clone()))
                }
            };
            if let Some(filename) = part.filename {
                p = p.file_name(filename);
            }
            if let Some(ct) = part.content_type {
                p = p.mime_str(&ct).map_err(|_| {
                    format!(
                        "invalid content type {ct:?} for multipart part {:?}",
                        part.name
                    )
                })?;
            }
            form = form.part(part.name, p);
        }
        Ok(form)
    }
}

impl fmt::Debug for Multipart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.parts.iter().map(|p| {
                let kind = match &p.body {
                    PartBody::Text(_) => "text",
                    PartBody::Bytes(_) => "bytes",
                    PartBody::Stream(..) => "stream",
                };
                (p.name.as_str(), p.filename.as_deref(), kind)
            }))
            .finish()
    }
}
