//! `sbox mcp --http ADDR`: the same server over MCP's streamable HTTP transport, with rmcp's
//! `StreamableHttpService` on a hyper HTTP/1.1 listener, at the path [`PATH`].
//!
//! Safety: there is no authentication, so anyone who can reach the address can run commands
//! through the tools. Bind loopback (`127.0.0.1:PORT`) unless the network around it is trusted.
//! Requests must name an allowed `Host` (the loopback names, the bound address, and any
//! `--allow-host`), and a request from a browser must come from an allowed origin, which keeps
//! web pages from reaching a local server by DNS rebinding.

use super::ToolServer;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// The hosts a request may name without `--allow-host`.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Binds `addr`, prints the endpoint's URL on stdout (one line, for scripts), and serves until
/// SIGINT or SIGTERM. `extra_hosts` are more `Host` values to accept (`name` or `name:port`).
pub async fn serve(
    server: ToolServer,
    addr: SocketAddr,
    extra_hosts: &[String],
) -> Result<(), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let hosts = allowed_hosts(bound, extra_hosts);
    if !bound.ip().is_loopback() {
        eprintln!(
            "sbox: warning: serving on {bound}, which is not loopback; there is no \
             authentication, so anyone who can reach it can run commands through the tools. \
             Accepted Host values: {}",
            hosts.join(", ")
        );
    }
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(allowed_origins(&hosts))
        .with_allowed_hosts(hosts)
        .with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(server.for_new_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    println!("{}", url(bound));
    let shutdown = shutdown_signal()?;
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // A connection that failed before it was accepted concerns only that client.
                Err(_) => continue,
            },
            _ = &mut shutdown => break,
        };
        let service = service.clone();
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                let service = service.clone();
                async move { Ok::<_, Infallible>(route(&service, request).await) }
            });
            // A connection's own errors (a client gone mid-request) end only that connection.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), handler)
                .await;
        });
    }
    stop.cancel();
    Ok(())
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// `PATH` goes to the MCP service; anything else is 404 naming the endpoint.
async fn route(
    service: &StreamableHttpService<ToolServer, LocalSessionManager>,
    request: Request<Incoming>,
) -> Response<Body> {
    if request.uri().path() == PATH {
        return service.handle(request).await;
    }
    let mut response = Response::new(
        Full::new(Bytes::from(format!(
            "Not Found: the MCP endpoint is {PATH}\n"
        )))
        .boxed(),
    );
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// The endpoint's URL for a bound address (`localhost`'s numeric form stays numeric).
pub fn url(bound: SocketAddr) -> String {
    format!("http://{bound}{PATH}")
}

/// The loopback names, the bound address unless it is the unspecified one, and `extra`.
fn allowed_hosts(bound: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    if !bound.ip().is_unspecified() && !bound.ip().is_loopback() {
        hosts.push(bound.ip().to_string());
    }
    for host in extra {
        if !hosts.contains(host) {
            hosts.push(host.clone());
        }
    }
    hosts
}

/// The browser origins allowed: each allowed host over http and https, on any port unless
/// the host names one.
fn allowed_origins(hosts: &[String]) -> Vec<String> {
    hosts
        .iter()
        .flat_map(|host| {
            let host = if host.contains(':') && !host.contains(']') && host.matches(':').count() > 1
            {
                format!("[{host}]")
            } else {
                host.clone()
            };
            let any_port = if host
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                ""
            } else {
                ":*"
            };
            ["http", "https"].map(|scheme| format!("{scheme}://{host}{any_port}"))
        })
        .collect()
}

/// Resolves at the first SIGINT or SIGTERM; the handlers are in place when this returns.
#[cfg(unix)]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = |kind| signal(kind).map_err(|e| format!("cannot listen for signals: {e}"));
    let (mut interrupt, mut terminate) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
    );
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Resolves at the first Ctrl-C.
#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_always_allowed_and_a_specific_address_is_added() {
        let hosts = allowed_hosts("127.0.0.1:0".parse().unwrap(), &[]);
        assert_eq!(hosts, ["localhost", "127.0.0.1", "::1"]);
        let hosts = allowed_hosts("10.1.2.3:80".parse().unwrap(), &["box.lan".to_owned()]);
        assert_eq!(
            hosts,
            ["localhost", "127.0.0.1", "::1", "10.1.2.3", "box.lan"]
        );
        let hosts = allowed_hosts("0.0.0.0:80".parse().unwrap(), &[]);
        assert_eq!(hosts, ["localhost", "127.0.0.1", "::1"]);
    }

    #[test]
    fn origins_follow_the_hosts() {
        let origins = allowed_origins(&["localhost".into(), "::1".into(), "box.lan:8080".into()]);
        assert_eq!(
            origins,
            [
                "http://localhost:*",
                "https://localhost:*",
                "http://[::1]:*",
                "https://[::1]:*",
                "http://box.lan:8080",
                "https://box.lan:8080",
            ]
        );
    }

    #[test]
    fn the_url_names_the_path() {
        assert_eq!(
            url("127.0.0.1:7000".parse().unwrap()),
            "http://127.0.0.1:7000/mcp"
        );
        assert_eq!(url("[::1]:7000".parse().unwrap()), "http://[::1]:7000/mcp");
    }
}
