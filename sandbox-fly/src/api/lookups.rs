//! Idempotency-key look-ups shared by concurrent keyed creates (single flight).
//!
//! A create with an idempotency key first lists the app's machines to look for its key, and Fly
//! paces that list per app (1/s after a burst of 3; PROTOCOL.md §1, §3), so a thousand keyed
//! creates, each with its own list, would take a thousand seconds. A look-up only needs a list
//! that reflects every machine existing when its create began, which any list whose request
//! was *sent after* that is. So look-ups gather into a batch until its request goes out: one
//! list is on the wire at a time, and every look-up that begins while it waits for its turn
//! (the previous list's answer, then the pace) joins the next one and shares its answer. A list
//! already sent when a look-up began is never used by it. A batch of one key asks for that
//! key's machines (the request a lone create always sent); a batch of several asks for all of
//! the adapter's machines, among which each create finds its own (the answer an unfiltered
//! `Provider::list` gets, under the transport's same 16 MiB cap).
//!
//! Nothing here is a task: the batch's request is a shared future its members poll, so when
//! every member is dropped the request is dropped with it.

use crate::wire::Machine;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use sandbox_sdk_core::{Error, Result};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What a batch's list asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The machines labelled with this one key.
    Key(String),
    /// Every machine the adapter made (several keys at once).
    All,
}

type Answer = Arc<Result<Vec<Machine>>>;
type Flight = BoxFuture<'static, Answer>;

/// The batch still gathering look-ups: its request has not been sent.
struct Open {
    id: u64,
    keys: Vec<String>,
    /// Weak, so a batch every member gave up on is not kept (nor joined).
    flight: WeakShared<Flight>,
}

/// The look-ups of one provider (shared by every handle, like the pace).
#[derive(Default)]
pub(crate) struct KeyLookups {
    open: Mutex<Option<Open>>,
    /// Held by the batch whose list is on the wire.
    wire: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for KeyLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyLookups")
    }
}

/// Handed to a batch's `send`: [`Gather::close`] ends the gathering as the request goes out.
pub(crate) struct Gather {
    lookups: Arc<KeyLookups>,
    id: u64,
    scope: OnceLock<Scope>,
}

impl Gather {
    /// Closes the batch (a look-up beginning from now on waits for the next one) and says what
    /// its list asks for. Call it right before each send of the request: the first call closes,
    /// later ones (a resend after a 429) answer the same.
    pub fn close(&self) -> Scope {
        self.scope
            .get_or_init(|| {
                let mut open = lock(&self.lookups.open);
                match open.take_if(|o| o.id == self.id) {
                    Some(batch) if batch.keys.len() == 1 => {
                        Scope::Key(batch.keys.into_iter().next().unwrap_or_default())
                    }
                    // Several keys (or, never expected, a batch no longer open: the widest
                    // list answers any key).
                    _ => Scope::All,
                }
            })
            .clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl KeyLookups {
    /// Looks `key` up in a list sent after this call began, shared with the look-ups that
    /// begin while it waits: joins the open batch, or opens one whose request `send` makes
    /// (`send` paces itself and calls [`Gather::close`] right before sending). `pick` gets the
    /// listed machines.
    pub async fn look_up<S, Fut, R>(
        self: &Arc<Self>,
        key: &str,
        send: S,
        pick: impl FnOnce(&[Machine]) -> R,
    ) -> Result<R>
    where
        S: FnOnce(Gather) -> Fut,
        Fut: Future<Output = Result<Vec<Machine>>> + Send + 'static,
    {
        let flight = self.join_or_open(key, send);
        match &*flight.await {
            Ok(machines) => Ok(pick(machines)),
            Err(e) => Err(copy(e)),
        }
    }

    fn join_or_open<S, Fut>(self: &Arc<Self>, key: &str, send: S) -> Shared<Flight>
    where
        S: FnOnce(Gather) -> Fut,
        Fut: Future<Output = Result<Vec<Machine>>> + Send + 'static,
    {
        let mut open = lock(&self.open);
        if let Some(batch) = open.as_mut()
            && let Some(flight) = batch.flight.upgrade()
        {
            batch.keys.push(key.to_owned());
            return flight;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let gather = Gather {
            lookups: self.clone(),
            id,
            scope: OnceLock::new(),
        };
        let lookups = self.clone();
        let request = send(gather);
        let flight: Shared<Flight> = async move {
            let _turn = lookups.wire.lock().await;
            Arc::new(request.await)
        }
        .boxed()
        .shared();
        *open = flight.downgrade().map(|weak| Open {
            id,
            keys: vec![key.to_owned()],
            flight: weak,
        });
        flight
    }
}

/// The shared answer's error for one member (an error is not `Clone`: its source stays with
/// the batch).
fn copy(e: &Error) -> Error {
    let mut out = Error::new(e.kind(), e.message())
        .with_retryable(e.is_retryable())
        .with_ambiguous(e.is_ambiguous());
    if let Some(provider) = e.provider() {
        out = out.with_provider(provider);
    }
    if let Some(operation) = e.operation() {
        out = out.with_operation(operation);
    }
    if let Some(status) = e.status() {
        out = out.with_status(status);
    }
    if let Some(request_id) = e.request_id() {
        out = out.with_request_id(request_id);
    }
    if let Some(delay) = e.retry_after() {
        out = out.with_retry_after(delay);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_sdk_core::ErrorKind;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    use tokio::sync::Notify;
    use tokio::time::Instant;

    fn machine(id: &str, key: &str) -> Machine {
        serde_json::from_value(serde_json::json!({
            "id": id,
            "state": "started",
            "config": {"metadata": {crate::config::IDEMPOTENCY_LABEL: key}}
        }))
        .unwrap()
    }

    fn key_of(m: &Machine) -> Option<String> {
        m.metadata().get(crate::config::IDEMPOTENCY_LABEL).cloned()
    }

    /// What a fake list server saw: each request's scope and when it was sent.
    #[derive(Default)]
    struct Server {
        sent: Mutex<Vec<(Scope, Instant)>>,
        machines: Mutex<Vec<Machine>>,
    }

    impl Server {
        /// A `send` that waits `pace` for its turn, closes the batch, then answers after `rtt`
        /// with the machines existing when the request was sent.
        fn send(
            self: &Arc<Self>,
            pace: Duration,
            rtt: Duration,
        ) -> impl FnOnce(Gather) -> BoxFuture<'static, Result<Vec<Machine>>> + use<> {
            let server = self.clone();
            move |gather: Gather| {
                async move {
                    tokio::time::sleep(pace).await;
                    let scope = gather.close();
                    let seen = lock(&server.machines).clone();
                    lock(&server.sent).push((scope.clone(), Instant::now()));
                    tokio::time::sleep(rtt).await;
                    Ok(seen
                        .into_iter()
                        .filter(|m| match &scope {
                            Scope::Key(k) => key_of(m).as_deref() == Some(k),
                            Scope::All => true,
                        })
                        .collect())
                }
                .boxed()
            }
        }

        fn sent(&self) -> Vec<(Scope, Instant)> {
            lock(&self.sent).clone()
        }
    }

    fn pick(key: &str) -> impl FnOnce(&[Machine]) -> Option<String> + '_ {
        move |machines| {
            machines
                .iter()
                .find(|m| key_of(m).as_deref() == Some(key))
                .map(|m| m.id.clone())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_look_up_asks_for_its_key_only() {
        let lookups = Arc::new(KeyLookups::default());
        let server = Arc::new(Server::default());
        lock(&server.machines).push(machine("m1", "job-1"));
        let found = lookups
            .look_up(
                "job-1",
                server.send(Duration::ZERO, Duration::ZERO),
                pick("job-1"),
            )
            .await
            .unwrap();
        assert_eq!(found.as_deref(), Some("m1"));
        let sent = server.sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].0, Scope::Key("job-1".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn look_ups_waiting_for_their_turn_share_one_list() {
        let lookups = Arc::new(KeyLookups::default());
        let server = Arc::new(Server::default());
        lock(&server.machines).push(machine("m7", "job-7"));
        // The first batch waits a second for its pace turn; everyone arriving meanwhile joins.
        let found = futures::future::join_all((0..50).map(|i| {
            let key = format!("job-{i}");
            let lookups = lookups.clone();
            let send = server.send(Duration::from_secs(1), Duration::from_millis(50));
            async move {
                lookups
                    .look_up(&key, send, |ms| {
                        ms.iter()
                            .find(|m| key_of(m).as_deref() == Some(&key))
                            .map(|m| m.id.clone())
                    })
                    .await
                    .unwrap()
            }
        }))
        .await;
        assert_eq!(server.sent().len(), 1);
        assert_eq!(server.sent()[0].0, Scope::All);
        assert_eq!(found[7].as_deref(), Some("m7"));
        assert_eq!(found.iter().flatten().count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_sent_before_a_look_up_began_is_not_used_by_it() {
        let lookups = Arc::new(KeyLookups::default());
        let server = Arc::new(Server::default());
        // The first look-up's list is sent at once and answered after 100 ms.
        let first = {
            let lookups = lookups.clone();
            let send = server.send(Duration::ZERO, Duration::from_millis(100));
            tokio::spawn(async move { lookups.look_up("job-a", send, pick("job-a")).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(server.sent().len(), 1);
        // A machine appears, then the second look-up begins while the first list is out: it
        // must not take that list's answer (which predates it), and it finds the machine.
        lock(&server.machines).push(machine("m-b", "job-b"));
        let began = Instant::now();
        let second = lookups
            .look_up(
                "job-b",
                server.send(Duration::ZERO, Duration::ZERO),
                pick("job-b"),
            )
            .await
            .unwrap();
        assert_eq!(second.as_deref(), Some("m-b"));
        assert_eq!(first.await.unwrap().unwrap(), None);
        let sent = server.sent();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[1].0, Scope::Key("job-b".into()));
        // Sent after the second began, and only once the first was answered (one on the wire).
        assert!(sent[1].1 >= began + Duration::from_millis(90), "{sent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_list_fails_every_member_with_its_kind() {
        let lookups = Arc::new(KeyLookups::default());
        let sends = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Notify::new());
        let send = |sends: Arc<AtomicUsize>, gate: Arc<Notify>| {
            move |gather: Gather| async move {
                gate.notified().await;
                gather.close();
                sends.fetch_add(1, Ordering::SeqCst);
                Err(Error::new(ErrorKind::Unauthorized, "bad token").with_status(401))
            }
        };
        let a = lookups.look_up("a", send(sends.clone(), gate.clone()), |_| ());
        let b = lookups.look_up("b", send(sends.clone(), gate.clone()), |_| ());
        let opener = gate.clone();
        let (a, b, ()) = tokio::join!(a, b, async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            opener.notify_one();
        });
        assert_eq!(sends.load(Ordering::SeqCst), 1);
        for e in [a.unwrap_err(), b.unwrap_err()] {
            assert_eq!(e.kind(), ErrorKind::Unauthorized);
            assert_eq!(e.status(), Some(401));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_every_member_dropped_is_not_joined() {
        let lookups = Arc::new(KeyLookups::default());
        let server = Arc::new(Server::default());
        let abandoned = lookups.look_up(
            "job-x",
            server.send(Duration::from_secs(5), Duration::ZERO),
            pick("job-x"),
        );
        // Polled once (the batch opens and waits for its turn), then given up.
        assert!(futures::poll!(Box::pin(abandoned)).is_pending());
        let found = lookups
            .look_up(
                "job-y",
                server.send(Duration::ZERO, Duration::ZERO),
                pick("job-y"),
            )
            .await
            .unwrap();
        assert_eq!(found, None);
        assert_eq!(
            server.sent(),
            vec![(Scope::Key("job-y".into()), Instant::now())]
        );
    }
}
