//! envd traffic over HTTP/1.1 (issue 9 item 3).
//!
//! E2B's sandbox proxy pads responses with an empty HTTP/2 DATA frame about every 32 KiB.
//! hyper's `h2` closes a connection with `ENHANCE_YOUR_CALM` after 100 empty DATA frames over
//! its lifetime, so over HTTP/2 a download past ~3 MiB fails (PROTOCOL.md §3.4). This server
//! offers h2 by ALPN like the proxy does and pads the same way; the adapter must download 16 MiB intact, which it only can over HTTP/1.1.

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sandbox_e2b::E2bBuilder;
use sandbox_sdk_core::prelude::*;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_rustls::rustls;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SB: &str = "ilxb3ba8bnc0gpyx3i8ax";
const FILE_LEN: usize = 16 << 20;
const PAD_EVERY: usize = 32 << 10;

/// A test CA (PEM) and a `localhost` certificate it signed, with its key.
fn certificates() -> (String, rustls::pki_types::CertificateDer<'static>, Vec<u8>) {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    (ca.pem(), leaf.der().clone(), leaf_key.serialize_der())
}

/// The byte at `offset` of the served file: a pattern no shifted or dropped chunk keeps.
fn byte_at(offset: usize) -> u8 {
    (offset % 251) as u8
}

/// A TLS server on loopback offering `h2` and `http/1.1` by ALPN. `GET /files` answers
/// [`FILE_LEN`] bytes in 32 KiB chunks, each followed by an empty DATA frame over HTTP/2 (an
/// empty chunk over HTTP/1.1 is not written at all). Returns its URL, the CA to trust and the
/// HTTP versions of the requests it served.
async fn padding_proxy() -> (String, String, Arc<Mutex<Vec<hyper::Version>>>) {
    let (ca_pem, cert, key) = certificates();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let versions = Arc::new(Mutex::new(Vec::new()));
    let seen = versions.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
                    seen.lock().unwrap().push(request.version());
                    async move {
                        assert_eq!(request.uri().path(), "/files");
                        let frames =
                            futures::stream::iter((0..FILE_LEN / PAD_EVERY).flat_map(|i| {
                                let chunk: Vec<u8> =
                                    (i * PAD_EVERY..(i + 1) * PAD_EVERY).map(byte_at).collect();
                                [Bytes::from(chunk), Bytes::new()]
                            }))
                            .map(|data| Ok::<_, Infallible>(Frame::data(data)));
                        Ok::<_, Infallible>(hyper::Response::new(StreamBody::new(frames)))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (url, ca_pem, versions)
}

/// Downloads the file, checking every byte; returns how many arrived.
async fn read_all(sandbox: &sandbox_e2b::E2bSandbox) -> sandbox_sdk_core::Result<usize> {
    let mut stream = sandbox.download("/home/user/big.bin").await?.into_stream();
    let mut offset = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        for (i, byte) in chunk.iter().enumerate() {
            assert_eq!(*byte, byte_at(offset + i), "byte {}", offset + i);
        }
        offset += chunk.len();
    }
    Ok(offset)
}

#[tokio::test]
async fn a_16_mib_download_through_a_padding_h2_proxy_arrives_intact() {
    let (envd_url, ca_pem, versions) = padding_proxy().await;
    let control = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("/v2/sandboxes/{SB}/connect")))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "envdAccessToken": "tok_envd_123",
            "envdVersion": "0.6.13",
            "sandboxID": SB,
            "templateID": "rki5dems9wqfm4r03t7g"
        })))
        .mount(&control)
        .await;
    let sandbox = E2bBuilder::new()
        .api_key("e2b_0123456789abcdef0123456789abcdef01234567")
        .api_url(control.uri())
        .sandbox_url(&envd_url)
        .root_certificate_pem(ca_pem.as_bytes())
        .build()
        .unwrap()
        .connect_sandbox(SB, None)
        .await
        .unwrap();
    let received = tokio::time::timeout(Duration::from_secs(60), read_all(&sandbox))
        .await
        .expect("the download hung")
        .unwrap_or_else(|e| panic!("the download failed: {e}"));
    assert_eq!(received, FILE_LEN);
    assert_eq!(*versions.lock().unwrap(), [hyper::Version::HTTP_11]);
}
