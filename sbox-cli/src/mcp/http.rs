//! `sbox mcp --http ADDR`: the same server over MCP's streamable HTTP transport, with rmcp's
//! `StreamableHttpService` on a hyper HTTP/1.1 listener, at the path [`PATH`].
//!
//! Safety, in the order a request meets it:
//!
//! 1. **A bearer token** ([`Auth`]). Every request to [`PATH`] must carry
//!    `Authorization: Bearer <token>`; otherwise the answer is 401 with
//!    `WWW-Authenticate: Bearer` and the request goes no further (no session, no tool). The
//!    token is read from `--token-file` (a private file) or made at start from the operating
//!    system's CSPRNG (32 bytes, printed once on stderr), and compared in constant time. Without
//!    it, any account on this machine could run commands through the tools (on `local`, as the
//!    user running sbox). `--no-auth` turns this off, only on a loopback address, with a warning.
//! 2. **`Host` and `Origin`** (rmcp's checks). `Host` must be a loopback name, the bound
//!    address, or an `--allow-host` value, which keeps web pages from reaching a local server by
//!    DNS rebinding; a browser's `Origin` must be this server itself (a loopback name or the
//!    bound address, with the bound port) or an allowed host.

use super::ToolServer;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// The hosts a request may name without `--allow-host`.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The fewest characters a token from `--token-file` may have.
const MIN_TOKEN_LEN: usize = 32;

/// The most bytes read from `--token-file`.
const MAX_TOKEN_FILE: u64 = 4096;

/// A bearer token. Shown nowhere: its `Debug` is redacted.
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A fresh token: 32 bytes from the operating system's CSPRNG, in lowercase hex.
    pub fn generate() -> Result<Token, String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| format!("cannot make a token: the system's random source failed: {e}"))?;
        Ok(Token(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token in `path`: one word of visible ASCII of at least [`MIN_TOKEN_LEN`]
    /// characters (surrounding whitespace, such as a final newline, is dropped), in a file
    /// that neither its group nor others may read or write. Errors name the file, never what
    /// it holds.
    pub fn from_file(path: &Path) -> Result<Token, String> {
        use std::io::Read;
        let shown = path.display();
        let fail = |problem: String| format!("cannot use {shown} as the token file: {problem}");
        let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file
                .metadata()
                .map_err(|e| fail(e.to_string()))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(fail(format!(
                    "its group or others may read or write it (mode {:o}); whoever reads it can \
                     run commands through the tools. Make it private: chmod 600 {shown}",
                    mode & 0o7777
                )));
            }
        }
        let mut raw = Vec::new();
        file.take(MAX_TOKEN_FILE + 1)
            .read_to_end(&mut raw)
            .map_err(|e| fail(e.to_string()))?;
        if raw.len() as u64 > MAX_TOKEN_FILE {
            return Err(fail(format!("it is longer than {MAX_TOKEN_FILE} bytes")));
        }
        let token = raw.trim_ascii();
        if token.is_empty() {
            return Err(fail("it is empty".to_owned()));
        }
        if !token.iter().all(u8::is_ascii_graphic) {
            return Err(fail(
                "a token is one word of visible ASCII characters (no spaces or control \
                 characters), as an Authorization header carries it"
                    .to_owned(),
            ));
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(fail(format!(
                "a token needs at least {MIN_TOKEN_LEN} characters (this one has {}); make one \
                 with `openssl rand -hex 32`",
                token.len()
            )));
        }
        let token = String::from_utf8(token.to_vec()).map_err(|e| fail(e.to_string()))?;
        Ok(Token(token))
    }

    /// Whether `given` is this token, in time that depends only on the lengths.
    fn matches(&self, given: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(given).into()
    }
}

/// How requests are authenticated.
#[derive(Debug)]
pub enum Auth {
    /// Each request must carry `Authorization: Bearer <token>`.
    Bearer {
        /// The token.
        token: Token,
        /// Print the token on stderr at start (it was made here, so no one else knows it).
        announce: bool,
    },
    /// No authentication (`--no-auth`): loopback only.
    None,
}

impl Auth {
    /// Whether a request with these headers may go on: exactly one `Authorization` header,
    /// scheme `Bearer` (any case), and the token.
    fn allows(&self, headers: &hyper::HeaderMap) -> bool {
        let Auth::Bearer { token, .. } = self else {
            return true;
        };
        let mut values = headers.get_all(hyper::header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let value = value.as_bytes();
        let Some(space) = value.iter().position(|b| *b == b' ') else {
            return false;
        };
        let (scheme, given) = value.split_at(space);
        scheme.eq_ignore_ascii_case(b"bearer") && token.matches(given.trim_ascii())
    }
}

/// Binds `addr`, prints the endpoint's URL on stdout (one line, for scripts), and serves until
/// SIGINT or SIGTERM. `extra_hosts` are more `Host` values to accept (`name` or `name:port`).
/// [`Auth::None`] is refused unless `addr` is a loopback address.
pub async fn serve(
    server: ToolServer,
    addr: SocketAddr,
    extra_hosts: &[String],
    auth: Auth,
) -> Result<(), String> {
    if matches!(auth, Auth::None) && !addr.ip().is_loopback() {
        return Err(format!(
            "refusing --no-auth on {addr}: without a token, serve only on a loopback address \
             (127.0.0.1 or [::1]); anywhere else, drop --no-auth and give clients the token"
        ));
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    let hosts = allowed_hosts(bound, extra_hosts);
    if !bound.ip().is_loopback() {
        eprintln!(
            "sbox: warning: serving on {bound}, which is not loopback: anyone who can reach it \
             and has the token can run commands through the tools, and the token crosses the \
             network in clear text (plain HTTP). Accepted Host values: {}",
            hosts.join(", ")
        );
    }
    match &auth {
        Auth::Bearer {
            token,
            announce: true,
        } => eprintln!(
            "sbox: MCP clients must send this header (the token is shown only now; use \
             --token-file to choose it):\nsbox:   Authorization: Bearer {}",
            token.0
        ),
        Auth::Bearer { .. } => {}
        Auth::None => eprintln!(
            "sbox: WARNING: --no-auth: no authentication. Every account and every program on \
             this machine can connect to {bound} and run commands through the tools (on \
             provider local: as you, on this machine; on the others: with your credentials)."
        ),
    }
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_origins(allowed_origins(bound, &hosts, extra_hosts))
        .with_allowed_hosts(hosts)
        .with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(server.for_new_session()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let auth = Arc::new(auth);
    crate::out::line(url(bound))?;
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
        let (service, auth) = (service.clone(), auth.clone());
        tokio::spawn(async move {
            let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (service, auth) = (service.clone(), auth.clone());
                async move { Ok::<_, Infallible>(route(&service, &auth, request).await) }
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

/// `PATH` goes to the MCP service once `auth` allows the request (else 401 asking for a
/// bearer token); anything else is 404 naming the endpoint.
async fn route(
    service: &StreamableHttpService<ToolServer, LocalSessionManager>,
    auth: &Auth,
    request: Request<Incoming>,
) -> Response<Body> {
    if request.uri().path() != PATH {
        return text(
            StatusCode::NOT_FOUND,
            format!("Not Found: the MCP endpoint is {PATH}\n"),
        );
    }
    if !auth.allows(request.headers()) {
        let mut response = text(
            StatusCode::UNAUTHORIZED,
            "Unauthorized: send `Authorization: Bearer <token>` with the token sbox printed at \
             start or read from its --token-file\n"
                .to_owned(),
        );
        response.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer realm=\"sbox mcp\""),
        );
        return response;
    }
    service.handle(request).await
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
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

/// The browser origins allowed: this server itself (each loopback name and the bound address,
/// over http, with the bound port), and each `--allow-host` value over http and https, on any
/// port unless it names one (it may be reached through a proxy).
fn allowed_origins(bound: SocketAddr, hosts: &[String], extra: &[String]) -> Vec<String> {
    let port = bound.port();
    let own = hosts
        .iter()
        .filter(|host| !extra.contains(host))
        .map(|host| {
            if host.contains(':') {
                format!("http://[{host}]:{port}")
            } else {
                format!("http://{host}:{port}")
            }
        });
    let explicit = extra.iter().flat_map(|host| {
        let host = if host.contains(':') && !host.contains(']') && host.matches(':').count() > 1 {
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
    });
    own.chain(explicit).collect()
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
    fn origins_are_this_server_and_the_allowed_hosts() {
        let bound = "127.0.0.1:7000".parse().unwrap();
        let extra = ["box.lan:8080".to_owned(), "proxy.lan".to_owned()];
        let hosts = allowed_hosts(bound, &extra);
        assert_eq!(
            allowed_origins(bound, &hosts, &extra),
            [
                "http://localhost:7000",
                "http://127.0.0.1:7000",
                "http://[::1]:7000",
                "http://box.lan:8080",
                "https://box.lan:8080",
                "http://proxy.lan:*",
                "https://proxy.lan:*",
            ]
        );
    }

    #[test]
    fn only_the_bearer_token_passes() {
        let auth = Auth::Bearer {
            token: Token("a".repeat(40)),
            announce: false,
        };
        let with = |values: &[&str]| {
            let mut headers = hyper::HeaderMap::new();
            for v in values {
                headers.append(
                    hyper::header::AUTHORIZATION,
                    hyper::header::HeaderValue::from_str(v).unwrap(),
                );
            }
            auth.allows(&headers)
        };
        let good = format!("Bearer {}", "a".repeat(40));
        assert!(with(&[&good]));
        assert!(with(&[&good.replace("Bearer", "bEaReR")]));
        assert!(with(&[&good.replace(' ', "   ")]));
        assert!(!with(&[]));
        assert!(!with(&[&good, &good]));
        assert!(!with(&[&format!("{good}a")]));
        assert!(!with(&[&good[..good.len() - 1]]));
        assert!(!with(&[&good.replace("Bearer", "Basic")]));
        assert!(!with(&[&"a".repeat(40)]));
        assert!(!with(&["Bearer"]));
        assert!(Auth::None.allows(&hyper::HeaderMap::new()));
    }

    #[test]
    fn generated_tokens_are_64_hex_digits_and_differ() {
        let (a, b) = (Token::generate().unwrap(), Token::generate().unwrap());
        assert_eq!(a.0.len(), 64);
        assert!(a.0.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.0, b.0);
        assert_eq!(format!("{a:?}"), "Token(<redacted>)");
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
