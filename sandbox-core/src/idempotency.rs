//! Creates that may have happened: look before sending again.
//!
//! A create whose answer never arrived (a timeout, a connection lost after the request was sent, a
//! gateway error; see [`Error::is_ambiguous`]) may still have made a sandbox, and the provider may
//! go on making it for a while after the client gave up. Sending it again at once makes a second
//! sandbox: the look-up before the retry runs before the first one is visible. So an adapter
//! creates through [`create_once`]: with an idempotency key it looks the key up first, sends the
//! create once, and after an ambiguous failure keeps looking the key up for the provider's
//! [`CreateLookup::window`] (checking at once, then backing off). Only when the window passes
//! with no match does the error go back to the caller (or the retry layer), which may then send
//! the create again.
//!
//! A failure that proves nothing was made (a refused connection, 429, 503, a 4xx) returns at
//! once, as does any failure of a create without a key: there is nothing to look up.
//!
//! # Adopting only what this create made
//!
//! A key's label or derived name is no proof of who made a sandbox: anyone with access to the
//! account can make one carrying them first (by mistake, or to have someone else's agent adopt
//! it). So a keyed create also labels its sandbox with a [`create_fingerprint`]
//! ([`FINGERPRINT_LABEL`]), a hash over the (owner-scoped) key and the spec, and every adapter's
//! look-up hands what it found to [`check_adoption`] before adopting it: a sandbox without this
//! create's fingerprint, or without every label the spec asks for (its owner label among them),
//! is a `Conflict` naming the key. It is never adopted nor destroyed, and nothing is created in
//! its place.

use crate::error::{Error, ErrorKind, Result};
use crate::lifecycle::CreateSpec;
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// The label a keyed create carries its [`create_fingerprint`] under. Lowercase letters and
/// `_` (like the owner label `sandbox_sdk_owner`), and the value 32 lowercase hex digits: a key
/// and value every provider takes (E2B metadata, Daytona labels, Fly machine metadata).
pub const FINGERPRINT_LABEL: &str = "sandbox_sdk_create_fingerprint";

/// What the fingerprint hashes: what the create asks the sandbox to be, in a fixed order.
#[derive(Serialize)]
struct Fingerprinted<'a> {
    /// Bumped if what is hashed ever changes.
    v: u32,
    key: &'a str,
    template: Option<&'a str>,
    name: Option<&'a str>,
    metadata: BTreeMap<&'a str, &'a str>,
    env_names: Vec<&'a str>,
    cpus: Option<u32>,
    memory_mb: Option<u64>,
    disk_gb: Option<u64>,
    gpus: Option<u32>,
    region: Option<&'a str>,
}

/// The fingerprint of a keyed create of `spec`, kept on the sandbox as [`FINGERPRINT_LABEL`]:
/// the first 32 hex digits (128 bits) of the SHA-256 of the idempotency key (as the spec
/// carries it: scoped to the owner by [`Owner::label`](crate::fleet::Owner::label)), the
/// template, name, metadata labels (but the fingerprint label itself), the *names* of the env
/// variables, the resources and the region. `None` without a key.
///
/// Env values are left out because they may be secrets and the label is readable by anyone
/// who can list the account's sandboxes (a hash of a guessable secret would confirm a guess);
/// the time to live is left out because it is not part of what the sandbox is (a create that
/// adopts reapplies it, and `set_timeout` changes it anyway).
pub fn create_fingerprint(spec: &CreateSpec) -> Option<String> {
    let key = spec.idempotency_key.as_deref()?;
    let content = Fingerprinted {
        v: 1,
        key,
        template: spec.template.as_deref(),
        name: spec.name.as_deref(),
        metadata: spec
            .metadata
            .iter()
            .filter(|(k, _)| k.as_str() != FINGERPRINT_LABEL)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        env_names: spec.env.keys().map(String::as_str).collect(),
        cpus: spec.resources.cpus,
        memory_mb: spec.resources.memory_mb,
        disk_gb: spec.resources.disk_gb,
        gpus: spec.resources.gpus,
        region: spec.region.as_deref(),
    };
    Some(crate::fleet::content_hash(&content)[..32].to_owned())
}

/// Whether a sandbox carrying `labels`, found under `spec`'s idempotency key, was made by a
/// create of `spec`: it carries `spec`'s [`create_fingerprint`] and every label `spec` asks for
/// with the same value (so the owner label too, whatever its prefix). `false` for a spec
/// without a key.
pub fn made_by(spec: &CreateSpec, labels: &BTreeMap<String, String>) -> bool {
    let Some(fingerprint) = create_fingerprint(spec) else {
        return false;
    };
    labels.get(FINGERPRINT_LABEL) == Some(&fingerprint)
        && spec
            .metadata
            .iter()
            .filter(|(k, _)| k.as_str() != FINGERPRINT_LABEL)
            .all(|(k, v)| labels.get(k) == Some(v))
}

/// The check every adapter's keyed look-up makes before adopting sandbox `id` (carrying
/// `labels`) found under `spec`'s idempotency key: `Ok` when [`made_by`] says this create made
/// it, else a `Conflict` (not retryable) naming the key and the sandbox, and which of the
/// expected labels it lacks (by name: their values are not quoted).
pub fn check_adoption(
    spec: &CreateSpec,
    id: &str,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    if made_by(spec, labels) {
        return Ok(());
    }
    let key = spec.idempotency_key.as_deref().unwrap_or_default();
    let expected = create_fingerprint(spec);
    let mut lacking: Vec<&str> = Vec::new();
    if expected.is_none() || labels.get(FINGERPRINT_LABEL) != expected.as_ref() {
        lacking.push(FINGERPRINT_LABEL);
    }
    lacking.extend(
        spec.metadata
            .iter()
            .filter(|(k, v)| k.as_str() != FINGERPRINT_LABEL && labels.get(*k) != Some(*v))
            .map(|(k, _)| k.as_str()),
    );
    Err(Error::new(
        ErrorKind::Conflict,
        format!(
            "sandbox {id} exists under idempotency key {key:?} but was not made by this create              (it does not carry this create's {}): it is neither adopted nor touched, and nothing is              created in its place; use another key, or remove that sandbox if it is yours",
            lacking.join(", ")
        ),
    )
    .with_operation("create")
    .with_sandbox_id(id)
    .with_retryable(false))
}

/// How long and how often to look for the sandbox an ambiguous create may have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateLookup {
    /// How long after the failure the provider may still be making the sandbox. Zero looks once.
    pub window: Duration,
    /// The pause after the first look-up; it doubles after each one, up to `max_interval`.
    pub first_interval: Duration,
    /// The longest pause between look-ups.
    pub max_interval: Duration,
}

impl CreateLookup {
    /// Looks for `window`, starting 25 ms apart and doubling up to 1 s.
    pub const fn new(window: Duration) -> Self {
        CreateLookup {
            window,
            first_interval: Duration::from_millis(25),
            max_interval: Duration::from_secs(1),
        }
    }

    /// Sets the first and the longest pause between look-ups.
    pub const fn intervals(mut self, first: Duration, max: Duration) -> Self {
        self.first_interval = first;
        self.max_interval = max;
        self
    }
}

/// The process-wide lock of idempotency key `key` (entries of keys no create holds are pruned).
fn key_lock(key: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock, Weak};
    static LOCKS: OnceLock<Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(lock) = locks.get(key).and_then(Weak::upgrade) {
        return lock;
    }
    locks.retain(|_, lock| lock.strong_count() > 0);
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    locks.insert(key.to_owned(), Arc::downgrade(&lock));
    lock
}

/// Creates at most once per call, settling an ambiguous failure by looking `key` up.
///
/// With a `key`: `lookup` runs first and a sandbox it finds is returned without sending
/// anything; otherwise `send` runs once, and if it fails ambiguously `lookup` runs at once and
/// then with backoff until it finds the sandbox (returned as the create's answer) or
/// `settings.window` passes (the error is returned, noting the look-up). A look-up that fails
/// counts as "not found yet". Without a key, `send` runs once and its result is returned.
/// Calls with one key in this process run one at a time, so concurrent creates with a key
/// make one sandbox even where the provider has no idempotency of its own.
pub async fn create_once<T, S, SF, L, LF>(
    key: Option<&str>,
    settings: &CreateLookup,
    send: S,
    mut lookup: L,
) -> Result<T>
where
    S: FnOnce() -> SF,
    SF: Future<Output = Result<T>>,
    L: FnMut() -> LF,
    LF: Future<Output = Result<Option<T>>>,
{
    // Creates with one key in this process go one at a time: the second looks up after the
    // first has made its sandbox, instead of both finding nothing and both sending.
    let _turn = match key {
        Some(k) => Some(key_lock(k).lock_owned().await),
        None => None,
    };
    if key.is_some()
        && let Some(existing) = lookup().await?
    {
        tracing::debug!("create: adopting the sandbox already made under this idempotency key");
        return Ok(existing);
    }
    let error = match send().await {
        Ok(created) => return Ok(created),
        Err(error) if key.is_none() || !error.is_ambiguous() => return Err(error),
        Err(error) => error,
    };
    tracing::warn!(
        error = %error,
        window_ms = settings.window.as_millis() as u64,
        "create may have happened: looking the idempotency key up before anything is sent again"
    );
    let started = tokio::time::Instant::now();
    match look_up_within(settings, lookup).await {
        Some(found) => {
            tracing::info!(
                waited_ms = started.elapsed().as_millis() as u64,
                "create: the ambiguous create made a sandbox; adopting it"
            );
            Ok(found)
        }
        None => Err(note_window(error, settings.window)),
    }
}

/// Runs `lookup` at once and then with backoff (the first pause `settings.first_interval`,
/// doubling up to `settings.max_interval`) until it finds something or `settings.window` has
/// passed, the last look falling right at the window's end. A look-up that fails counts as
/// "not found yet". Used by [`create_once`] after an ambiguous create, and by the fallback
/// layer to find the sandbox a provider it fell back from may still make.
pub async fn look_up_within<T, L, LF>(settings: &CreateLookup, mut lookup: L) -> Option<T>
where
    L: FnMut() -> LF,
    LF: Future<Output = Result<Option<T>>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = settings.first_interval;
    loop {
        match lookup().await {
            Ok(Some(found)) => return Some(found),
            Ok(None) => {}
            Err(lookup_error) => {
                tracing::debug!(error = %lookup_error, "look-up failed; trying again");
            }
        }
        let left = settings.window.saturating_sub(started.elapsed());
        if left.is_zero() {
            return None;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = pause.saturating_mul(2).min(settings.max_interval);
    }
}

fn note_window(error: Error, window: Duration) -> Error {
    error.with_note(format!(
        "no sandbox appeared under the idempotency key within {window:?} of looking"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn ambiguous() -> Error {
        Error::new(ErrorKind::Timeout, "timed out").with_ambiguous(true)
    }

    /// A look-up that finds the sandbox on its `visible_at`-th call.
    fn lookup_visible_at(
        visible_at: usize,
        calls: Arc<AtomicUsize>,
    ) -> impl FnMut() -> std::future::Ready<Result<Option<&'static str>>> {
        move || {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            std::future::ready(Ok((n >= visible_at).then_some("sb-1")))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_ambiguous_failure_waits_for_the_sandbox_instead_of_sending_again() {
        let calls = Arc::new(AtomicUsize::new(0));
        let sends = AtomicUsize::new(0);
        let settings = CreateLookup::new(Duration::from_secs(30));
        let found = create_once(
            Some("job-1"),
            &settings,
            || async {
                sends.fetch_add(1, Ordering::SeqCst);
                Err::<&str, _>(ambiguous())
            },
            // Not there before the send, nor at the first two look-ups after it.
            lookup_visible_at(4, calls.clone()),
        )
        .await
        .unwrap();
        assert_eq!(found, "sb-1");
        assert_eq!(sends.load(Ordering::SeqCst), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_is_bounded_and_the_error_says_so() {
        let calls = Arc::new(AtomicUsize::new(0));
        let settings = CreateLookup::new(Duration::from_secs(2));
        let started = tokio::time::Instant::now();
        let error = create_once(
            Some("job-1"),
            &settings,
            || async { Err::<&str, _>(ambiguous()) },
            lookup_visible_at(usize::MAX, calls.clone()),
        )
        .await
        .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout);
        assert!(error.to_string().contains("within 2s"), "{error}");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // 1 before sending, then at 0, 25, 75, 175, 375, 775, 1775 ms and at the window's end.
        assert_eq!(calls.load(Ordering::SeqCst), 9);
    }

    #[tokio::test(start_paused = true)]
    async fn an_existing_sandbox_is_adopted_and_nothing_is_sent() {
        let calls = Arc::new(AtomicUsize::new(0));
        let found = create_once(
            Some("job-1"),
            &CreateLookup::new(Duration::from_secs(30)),
            || async { panic!("sent") },
            lookup_visible_at(1, calls),
        )
        .await
        .unwrap();
        assert_eq!(found, "sb-1");
    }

    fn keyed() -> CreateSpec {
        CreateSpec::new()
            .template("base")
            .metadata("sandbox_sdk_owner", "me")
            .env("TOKEN", "canary-secret")
            .idempotency_key("sandbox_sdk:me/job-1")
    }

    #[test]
    fn the_fingerprint_covers_the_key_and_what_the_sandbox_is_but_not_secrets_or_ttl() {
        let spec = keyed();
        let fp = create_fingerprint(&spec).unwrap();
        assert_eq!(fp.len(), 32);
        assert!(
            fp.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(
            create_fingerprint(&spec.clone()),
            Some(fp.clone()),
            "stable"
        );
        assert_eq!(
            create_fingerprint(&CreateSpec::new()),
            None,
            "no key, no fingerprint"
        );
        for other in [
            spec.clone().idempotency_key("sandbox_sdk:them/job-1"),
            spec.clone().template("other"),
            spec.clone().metadata("sandbox_sdk_owner", "them"),
            spec.clone().env("OTHER", "x"),
            spec.clone().name("n"),
            spec.clone().region("eu"),
        ] {
            assert_ne!(create_fingerprint(&other).as_ref(), Some(&fp), "{other:?}");
        }
        for same in [
            spec.clone().env("TOKEN", "another-secret"),
            spec.clone().timeout(Duration::from_secs(60)),
            spec.clone().metadata(FINGERPRINT_LABEL, "forged"),
        ] {
            assert_eq!(create_fingerprint(&same).as_ref(), Some(&fp), "{same:?}");
        }
    }

    #[test]
    fn the_fingerprint_of_a_spec_never_changes() {
        // Sandboxes made by earlier versions carry it: changing what is hashed (bump `v`)
        // makes every existing keyed sandbox a Conflict. The conformance cassettes of keyed
        // creates carry this value.
        let spec = CreateSpec::new()
            .metadata("suite", "conformance")
            .timeout(Duration::from_secs(300))
            .idempotency_key("conformance-key-1");
        assert_eq!(
            create_fingerprint(&spec).as_deref(),
            Some("42ac5b017438856e46833c3ceb2d7378")
        );
    }

    #[test]
    fn only_a_sandbox_with_the_fingerprint_and_the_specs_labels_is_adopted() {
        let spec = keyed();
        let mut labels = spec.metadata.clone();
        labels.insert(FINGERPRINT_LABEL.into(), create_fingerprint(&spec).unwrap());
        labels.insert("added-by-the-provider".into(), "x".into());
        assert!(made_by(&spec, &labels));
        check_adoption(&spec, "sb-1", &labels).unwrap();

        // A squatter: the key's labels but no fingerprint, or another owner's label.
        let mut squatter = spec.metadata.clone();
        squatter.insert(FINGERPRINT_LABEL.into(), "0".repeat(32));
        let mut other_owner = labels.clone();
        other_owner.insert("sandbox_sdk_owner".into(), "them".into());
        for theirs in [
            BTreeMap::new(),
            spec.metadata.clone(),
            squatter,
            other_owner,
        ] {
            assert!(!made_by(&spec, &theirs), "{theirs:?}");
            let e = check_adoption(&spec, "sb-2", &theirs).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Conflict);
            assert!(!e.is_retryable());
            assert_eq!(e.sandbox_id(), Some("sb-2"));
            let text = e.to_string();
            assert!(text.contains("\"sandbox_sdk:me/job-1\""), "{text}");
            assert!(
                !text.contains("canary-secret") && !text.contains("them"),
                "{text}"
            );
        }
        assert!(
            !made_by(&CreateSpec::new(), &labels),
            "no key: nothing to adopt"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_that_prove_nothing_was_made_return_at_once() {
        for (key, error) in [
            (Some("job-1"), Error::new(ErrorKind::Transport, "refused")),
            (Some("job-1"), Error::new(ErrorKind::QuotaExceeded, "429")),
            (None, ambiguous()),
        ] {
            let calls = Arc::new(AtomicUsize::new(0));
            let started = tokio::time::Instant::now();
            let kind = error.kind();
            let result = create_once(
                key,
                &CreateLookup::new(Duration::from_secs(30)),
                || async { Err::<&str, _>(error) },
                lookup_visible_at(usize::MAX, calls.clone()),
            )
            .await;
            assert_eq!(result.unwrap_err().kind(), kind);
            assert_eq!(started.elapsed(), Duration::ZERO);
            assert_eq!(calls.load(Ordering::SeqCst), usize::from(key.is_some()));
        }
    }
}
