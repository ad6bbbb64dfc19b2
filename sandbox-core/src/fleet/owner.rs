//! Ownership: the label every sandbox made through an owned client carries, and the filter that
//! finds those sandboxes again.
//!
//! An [`Owner`] is a label key (`{prefix}_owner`, by default `sandbox_sdk_owner`) and a value
//! (the owner id). The key and value use only characters every provider takes as a label or
//! metadata key and value (E2B metadata, Daytona labels, Fly machine metadata), so the same
//! owner finds its sandboxes on every provider with the provider's own list filter. Nothing is
//! kept anywhere but in those labels: any number of processes on any number of machines that
//! use the same owner see the same fleet.

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

    /// `spec` with this owner's label added. A spec that already sets the owner label to
    /// another value is a `Validation` error: a sandbox has one owner.
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
        Ok(labelled)
    }
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
