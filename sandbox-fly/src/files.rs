//! Files over `/exec` (Fly has no file API), through the core's
//! [`FilesOverExec`](sandbox_sdk_core::emulate::files::FilesOverExec): base64 through the exec
//! request's `stdin` for uploads and through its `stdout` for downloads, one chunk per call, so
//! a file of any size moves in constant memory.
//!
//! Chunk sizes: Fly documents no limit on an exec request or its stdin, and none on its output
//! (PROTOCOL.md §8), so the adapter keeps every exec body, request and answer, under its own cap
//! of 1 MiB and fills it ([`UPLOAD_CHUNK`], [`DOWNLOAD_CHUNK`]): every call costs a token of
//! the machine's exec rate, so each moves as many bytes as is safe.
//!
//! Throughput: Fly allows 1 exec per second per machine sustained, in bursts of 3 (PROTOCOL.md
//! §3). Transfers take three calls at once and then one per
//! [`crate::FlyBuilder::poll_interval`] (default 1 s), so a file moves at about 0.7 MiB/s
//! sustained whatever the network: 10 MiB takes about 12 s.

use crate::api::{Api, ScriptExec};
#[cfg(doc)]
use crate::config::{DOWNLOAD_CHUNK, UPLOAD_CHUNK};
use bytes::Bytes;
use sandbox_sdk_core::Result;
use sandbox_sdk_core::code::channel::MailboxWriter;
use sandbox_sdk_core::emulate::files::FilesOverExec;

/// The suffix of the partial file an upload writes beside its target.
const PART_SUFFIX: &str = ".sandbox-fly-upload";

/// The files of `machine`, moved in the builder's chunk sizes.
pub(crate) fn on(api: &Api, machine: &str) -> FilesOverExec<ScriptExec> {
    FilesOverExec::new(ScriptExec {
        api: api.clone(),
        machine: machine.to_owned(),
    })
    .chunks(api.settings.upload_chunk, api.settings.download_chunk)
    .part_suffix(PART_SUFFIX)
}

/// Where the emulated kernel's requests go on Fly: `/exec` takes stdin only whole, so each
/// request is a file the driver polls for (core's [`MailboxWriter`]), written as any upload is.
/// It holds the API and the machine id, not the sandbox handle that owns the kernels.
pub(crate) struct Mailbox {
    api: Api,
    machine: String,
}

impl Mailbox {
    pub(crate) fn new(api: &Api, machine: &str) -> Self {
        Mailbox {
            api: api.clone(),
            machine: machine.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl MailboxWriter for Mailbox {
    async fn write_file(&self, path: &str, data: Bytes) -> Result<()> {
        on(&self.api, &self.machine)
            .write_file(path, data)
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{DOWNLOAD_CHUNK, MAX_EXEC_BODY, UPLOAD_CHUNK};
    use sandbox_sdk_core::emulate::files::UPLOAD;

    #[test]
    fn chunks_fill_but_stay_under_the_exec_body_limit() {
        // Upload: base64 in one JSON string, plus the script, two 4 KiB paths and the JSON.
        let encoded = UPLOAD_CHUNK.div_ceil(3) * 4;
        let request = encoded + UPLOAD.len() + 2 * 4096 + 256;
        assert!(request < MAX_EXEC_BODY, "{request}");
        assert!(
            request + 3 * 1024 * 4 / 3 > MAX_EXEC_BODY,
            "3 KiB more would not fit"
        );
        // Download: base64 wrapped at 76 columns, each `\n` escaped as two characters.
        let encoded = (DOWNLOAD_CHUNK as usize).div_ceil(3) * 4;
        let answer = encoded + encoded.div_ceil(76) * 2 + 256;
        assert!(answer < MAX_EXEC_BODY, "{answer}");
        assert!(
            answer + 24 * 1024 * 4 / 3 > MAX_EXEC_BODY,
            "24 KiB more would not fit"
        );
    }
}
