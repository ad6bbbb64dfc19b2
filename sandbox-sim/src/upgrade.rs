//! A connection upgrade (a WebSocket) as a handler receives it, with the request's stream
//! fault applied to what the simulator writes after the `101`: `cut:BYTES` closes the
//! connection after BYTES bytes of frames, `silence` sends none, the same faults a streamed
//! HTTP body takes.

use crate::faults::Fault;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a fault does to the upgraded connection's outgoing bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outgoing {
    /// Sent as written.
    Sent,
    /// Sent until this many more bytes have gone, then the connection fails.
    CutAfter(usize),
    /// Accepted and never sent.
    Swallowed,
}

/// The upgrade of one request, taken once with [`SimRequest::take_upgrade`](crate::SimRequest::take_upgrade).
pub struct SimUpgrade {
    pending: OnUpgrade,
    outgoing: Outgoing,
}

impl SimUpgrade {
    pub(crate) fn new(pending: OnUpgrade) -> SimUpgrade {
        SimUpgrade {
            pending,
            outgoing: Outgoing::Sent,
        }
    }

    /// Applies `fault` to the connection: a cut or silence; other faults act on the answer
    /// before the upgrade, not on the connection.
    pub(crate) fn apply(&mut self, fault: &Fault) {
        match fault {
            Fault::Cut(n) => self.outgoing = Outgoing::CutAfter(*n),
            Fault::Silence => self.outgoing = Outgoing::Swallowed,
            _ => {}
        }
    }

    /// The upgraded connection, once the `101` has gone; `None` when the client left first.
    pub async fn connection(self) -> Option<SimConnection> {
        let upgraded = self.pending.await.ok()?;
        Some(SimConnection {
            inner: Some(TokioIo::new(upgraded)),
            outgoing: self.outgoing,
        })
    }
}

/// An upgraded connection whose outgoing bytes obey the request's fault.
pub struct SimConnection {
    /// `None` only while dropping.
    inner: Option<TokioIo<Upgraded>>,
    outgoing: Outgoing,
}

impl SimConnection {
    fn inner(&mut self) -> Pin<&mut TokioIo<Upgraded>> {
        Pin::new(
            self.inner
                .as_mut()
                .expect("the connection is only taken on drop"),
        )
    }
}

/// A silenced connection stays open when its handler lets go of it, until the client leaves:
/// the client must find out by its own idle bound, as with a silent HTTP body, not by the close
/// the handler would have sent.
impl Drop for SimConnection {
    fn drop(&mut self) {
        if self.outgoing != Outgoing::Swallowed {
            return;
        }
        let (Some(mut inner), Ok(runtime)) =
            (self.inner.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        runtime.spawn(async move {
            let mut sink = [0u8; 1024];
            while tokio::io::AsyncReadExt::read(&mut inner, &mut sink)
                .await
                .is_ok_and(|n| n > 0)
            {}
        });
    }
}

fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "cut by the simulator")
}

/// After a cut, reads fail too, so a handler waiting for the client notices the cut at once
/// even when it has nothing more to write.
impl AsyncRead for SimConnection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.outgoing == Outgoing::CutAfter(0) {
            return Poll::Ready(Err(cut()));
        }
        self.inner().poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConnection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.outgoing {
            Outgoing::Sent => self.inner().poll_write(cx, buf),
            Outgoing::Swallowed => Poll::Ready(Ok(buf.len())),
            Outgoing::CutAfter(0) => Poll::Ready(Err(cut())),
            Outgoing::CutAfter(left) => {
                let allowed = left.min(buf.len());
                let written = std::task::ready!(self.inner().poll_write(cx, &buf[..allowed]))?;
                self.outgoing = Outgoing::CutAfter(left - written);
                Poll::Ready(Ok(written))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.outgoing {
            Outgoing::Swallowed => Poll::Ready(Ok(())),
            _ => self.inner().poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.outgoing {
            // Silence sends no FIN either; the drop keeps the connection open.
            Outgoing::Swallowed => Poll::Ready(Ok(())),
            _ => self.inner().poll_shutdown(cx),
        }
    }
}
