//! Ownership: the label every sandbox made through an owned client carries, and the filter that
//! finds those sandboxes again.
//!
//! An [`Owner`] is a label key (`{prefix}_owner`, by default `sandbox_sdk_owner`) and a value
//! (the owner id). The key and value use only characters every provider takes as a label or
//! metadata key and value (E2B metadata, Daytona labels, Fly machine metadata), so the same
//! owner finds its sandboxes on every provider with the provider's own list filter. Nothing is
//! kept anywhere but in those labels: any number of processes on any number of machines that
//! use the same owner see the same fleet.
//!
//! An owner also scopes idempotency keys ([`Owner::scoped_key`]): the same key under two
//! owners is two keys on the provider, so one owner's keyed create never finds (adopts, or has
//! the fallback layer destroy) another owner's sandbox. The default owner of the tools is the
//! user running them ([`Owner::for_current_user`]), not a name every user shares.

use crate::error::{Error, Result};
use crate::lifecycle::{CreateSpec, ListFilter, SandboxInfo};
use std::fmt;

/// The label prefix of [`Owner::new`]: the label key is `sandbox_sdk_owner`.
pub const DEFAULT_PREFIX: &str = "sandbox_sdk";

/// The longest prefix: 32 characters.
const MAX_PREFIX: usize = 32;
/// The longest owner id: 63 characters (what Kubernetes-style label values allow, and well
/// inside every provider's limits).
const MAX_ID: usize = 63;

/// Who a sandbox belongs to: the label `{prefix}_owner = {id}` put on every sandbox created
/// through a client with this owner, and the filter that lists them.
///
/// ```
/// use sandbox_sdk_core::fleet::Owner;
/// use sandbox_sdk_core::CreateSpec;
///
/// let owner = Owner::new("ci-runner-7")?;
/// assert_eq!(owner.label_key(), "sandbox_sdk_owner");
/// let spec = owner.label(&CreateSpec::new())?;
/// assert_eq!(spec.metadata["sandbox_sdk_owner"], "ci-runner-7");
/// assert_eq!(owner.filter().metadata["sandbox_sdk_owner"], "ci-runner-7");
/// # Ok::<(), sandbox_sdk_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    prefix: String,
    id: String,
    key: String,
}

impl Owner {
    /// An owner with the default prefix ([`DEFAULT_PREFIX`]). The id is 1 to 63 characters of
    /// ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit; anything else is
    /// a `Validation` error naming what is wrong.
    pub fn new(id: impl Into<String>) -> Result<Owner> {
        Owner::with_prefix(DEFAULT_PREFIX, id)
    }

    /// An owner whose label key is `{prefix}_owner`. The prefix is 1 to 32 characters of
    /// lowercase ASCII letters, digits and `_`, starting with a letter; the id as in
    /// [`Owner::new`].
    pub fn with_prefix(prefix: impl Into<String>, id: impl Into<String>) -> Result<Owner> {
        let prefix = prefix.into();
        let id = id.into();
        check_prefix(&prefix)?;
        check_id(&id)?;
        Ok(Owner {
            key: format!("{prefix}_owner"),
            prefix,
            id,
        })
    }

    /// The owner id (the label's value).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The label prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The label key: `{prefix}_owner`.
    pub fn label_key(&self) -> &str {
        &self.key
    }

    /// Whether `info` carries this owner's label.
    pub fn owns(&self, info: &SandboxInfo) -> bool {
        info.metadata.get(&self.key).map(String::as_str) == Some(self.id.as_str())
    }

    /// A list filter matching this owner's sandboxes.
    pub fn filter(&self) -> ListFilter {
        self.scope(&ListFilter::new())
    }

    /// `filter`, narrowed to this owner's sandboxes. A filter that already asks for another
    /// value of the owner label is narrowed to this owner all the same (it then matches
    /// nothing the provider would list for the other value).
    pub fn scope(&self, filter: &ListFilter) -> ListFilter {
        let mut scoped = filter.clone();
        scoped.metadata.insert(self.key.clone(), self.id.clone());
        scoped
    }

    /// The owner id of the user running this process: `u{uid}.{host name}` (the real user id
    /// and the host name, each character outside the id's alphabet replaced by `-`, cut to 63
    /// characters; `u{uid}` alone when the host name cannot be read). Two users of one host,
    /// or one user id on two hosts, get two owners; the same user on the same host always
    /// gets the same one, from any process. Tools default to it, so users sharing an account
    /// do not share (adopt, list, reap) each other's sandboxes unless they name one owner.
    pub fn current_user_id() -> String {
        let (uid, host) = current_user();
        user_owner_id(&uid, host.as_deref())
    }

    /// An owner with the default prefix for the user running this process
    /// ([`Owner::current_user_id`]).
    pub fn for_current_user() -> Owner {
        let id = Owner::current_user_id();
        Owner {
            key: format!("{DEFAULT_PREFIX}_owner"),
            prefix: DEFAULT_PREFIX.to_owned(),
            id,
        }
    }

    /// `key` scoped to this owner: `{prefix}:{id}/{key}` (a prefix cannot contain `:` nor an
    /// id `/`, so no two owners scope any keys alike). A key already scoped to this owner is
    /// returned as it is, so scoping twice is scoping once.
    pub fn scoped_key(&self, key: &str) -> String {
        let scope = format!("{}:{}/", self.prefix, self.id);
        if key.starts_with(&scope) {
            key.to_owned()
        } else {
            format!("{scope}{key}")
        }
    }

    /// `spec` with this owner's label added and its idempotency key, if any, scoped to this
    /// owner ([`Owner::scoped_key`]), so the provider-side key, name or label a keyed create
    /// derives differs between owners. A spec that already sets the owner label to another
    /// value is a `Validation` error: a sandbox has one owner. Labelling a labelled spec
    /// changes nothing.
    pub fn label(&self, spec: &CreateSpec) -> Result<CreateSpec> {
        if let Some(other) = spec.metadata.get(&self.key)
            && other != &self.id
        {
            return Err(Error::validation(format!(
                "the spec's metadata sets {} to {other:?}, but this client creates for owner {:?}",
                self.key, self.id
            )));
        }
        let mut labelled = spec.clone();
        labelled.metadata.insert(self.key.clone(), self.id.clone());
        labelled.idempotency_key = spec.idempotency_key.as_deref().map(|k| self.scoped_key(k));
        Ok(labelled)
    }
}

/// The real user id and the host name of this process (`None` when it cannot be read).
#[cfg(unix)]
fn current_user() -> (String, Option<String>) {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let host = nix::unistd::gethostname()
        .ok()
        .map(|h| h.to_string_lossy().into_owned());
    (uid, host)
}

/// The user and computer names Windows sets for every process.
#[cfg(not(unix))]
fn current_user() -> (String, Option<String>) {
    let user = std::env::var("USERNAME").unwrap_or_default();
    (user, std::env::var("COMPUTERNAME").ok())
}

/// `u{uid}.{host}` within the id alphabet and [`MAX_ID`] characters (see
/// [`Owner::current_user_id`]).
fn user_owner_id(uid: &str, host: Option<&str>) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    let mut id = format!("u{}", clean(uid));
    if let Some(host) = host.map(clean).filter(|h| !h.is_empty()) {
        id.push('.');
        id.push_str(&host);
    }
    // ASCII only by now, so any byte is a char boundary.
    id.truncate(MAX_ID);
    id
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.id)
    }
}

fn check_prefix(prefix: &str) -> Result<()> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "owner label prefix {prefix:?} is not 1 to {MAX_PREFIX} characters of a-z, 0-9 and _ starting with a letter"
        )))
    }
}

fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::validation(format!(
            "owner id {id:?} is not 1 to {MAX_ID} characters of A-Z, a-z, 0-9, '.', '_' and '-' starting with a letter or digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::lifecycle::SandboxState;

    #[test]
    fn the_label_is_prefix_owner_and_the_filter_finds_it() {
        let owner = Owner::with_prefix("acme", "team-a").unwrap();
        assert_eq!(owner.label_key(), "acme_owner");
        assert_eq!(owner.to_string(), "acme_owner=team-a");
        let mut info = SandboxInfo::new("sb", "p", SandboxState::Running);
        assert!(!owner.owns(&info));
        info.metadata.insert("acme_owner".into(), "team-b".into());
        assert!(!owner.owns(&info));
        assert!(!owner.filter().matches(&info));
        info.metadata.insert("acme_owner".into(), "team-a".into());
        assert!(owner.owns(&info));
        assert!(owner.filter().matches(&info));
        let scoped = owner.scope(&ListFilter::new().state(SandboxState::Paused));
        assert!(
            !scoped.matches(&info),
            "the given filter's states still apply"
        );
    }

    #[test]
    fn labelling_keeps_the_spec_and_refuses_a_second_owner() {
        let owner = Owner::new("me").unwrap();
        let spec = CreateSpec::new().metadata("team", "x");
        let labelled = owner.label(&spec).unwrap();
        assert_eq!(labelled.metadata["team"], "x");
        assert_eq!(labelled.metadata["sandbox_sdk_owner"], "me");
        assert_eq!(owner.label(&labelled).unwrap(), labelled);
        let theirs = CreateSpec::new().metadata("sandbox_sdk_owner", "them");
        let e = owner.label(&theirs).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Validation);
        assert!(e.to_string().contains("\"them\""), "{e}");
    }

    #[test]
    fn labelling_scopes_the_idempotency_key_to_the_owner_once() {
        let spec = CreateSpec::new().idempotency_key("job-1");
        let a = Owner::new("alice").unwrap().label(&spec).unwrap();
        let b = Owner::new("bob").unwrap().label(&spec).unwrap();
        let other_prefix = Owner::with_prefix("acme", "alice")
            .unwrap()
            .label(&spec)
            .unwrap();
        assert_eq!(
            a.idempotency_key.as_deref(),
            Some("sandbox_sdk:alice/job-1")
        );
        assert_eq!(b.idempotency_key.as_deref(), Some("sandbox_sdk:bob/job-1"));
        assert_eq!(
            other_prefix.idempotency_key.as_deref(),
            Some("acme:alice/job-1")
        );
        let alice = Owner::new("alice").unwrap();
        assert_eq!(
            alice.label(&a).unwrap(),
            a,
            "labelling twice is labelling once"
        );
        assert_eq!(
            alice.scoped_key("sandbox_sdk:bob/job-1"),
            "sandbox_sdk:alice/sandbox_sdk:bob/job-1"
        );
        assert_eq!(
            alice.label(&CreateSpec::new()).unwrap().idempotency_key,
            None
        );
    }

    #[test]
    fn the_current_users_owner_is_the_uid_and_host_within_the_id_rules() {
        assert_eq!(user_owner_id("1000", Some("myhost")), "u1000.myhost");
        assert_eq!(user_owner_id("1000", Some("")), "u1000");
        assert_eq!(user_owner_id("0", None), "u0");
        assert_ne!(
            user_owner_id("1000", Some("myhost")),
            user_owner_id("1001", Some("myhost"))
        );
        assert_ne!(
            user_owner_id("1000", Some("a")),
            user_owner_id("1000", Some("b"))
        );
        let odd = user_owner_id("1000", Some(&format!("héte/ 1{}", "x".repeat(100))));
        assert_eq!(odd.len(), 63);
        assert!(odd.starts_with("u1000.h-te--1x"), "{odd}");
        assert!(Owner::new(odd).is_ok());
        let mine = Owner::for_current_user();
        assert_eq!(mine.label_key(), "sandbox_sdk_owner");
        assert_eq!(mine.id(), Owner::current_user_id());
        assert!(Owner::new(mine.id()).is_ok(), "{mine}");
        assert!(mine.id().starts_with('u'), "{mine}");
    }

    #[test]
    fn prefixes_and_ids_are_checked() {
        for bad in ["", "Upper", "1x", "a-b", "a.b", &"p".repeat(33)] {
            assert!(Owner::with_prefix(bad, "id").is_err(), "{bad:?}");
        }
        for bad in ["", "-x", ".x", "a b", "a/b", "a=b", "ü", &"i".repeat(64)] {
            let e = Owner::new(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Validation, "{bad:?}");
        }
        for good in ["a", "A1", "team.a_b-c", &"i".repeat(63)] {
            assert_eq!(Owner::new(good).unwrap().id(), good);
        }
        assert!(Owner::with_prefix("p_2", "x").is_ok());
    }
}
