//! Head-and-tail truncation: long output keeps its beginning and its end, and says what was cut.
//!
//! [`CappedBuffer`] collects a stream of bytes in bounded memory (the first half of the cap and a
//! rolling last half), so a command that prints gigabytes costs at most the cap.
//!
//! Cutting and redaction go together: a secret cut in two at an edge would not be found whole
//! afterwards, and most of it would show. So every rendering takes the [`Redactor`]: whole
//! secrets are replaced in what is kept, and a piece of one that ends the head or starts the
//! tail is replaced too ([`Redactor::before_cut`], [`Redactor::after_cut`]). Where the whole
//! text is at hand ([`head_and_tail`]) it is redacted before it is cut.

use crate::redact::Redactor;
use std::collections::VecDeque;

/// Bytes collected in bounded memory: the first `cap / 2` bytes and the last `cap - cap / 2`,
/// with a count of everything seen.
#[derive(Debug, Clone)]
pub struct CappedBuffer {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl CappedBuffer {
    /// A buffer keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        CappedBuffer {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_cap = self.cap / 2;
        let tail_cap = self.cap - head_cap;
        if self.head.len() < head_cap {
            let take = (head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if tail_cap == 0 {
            return;
        }
        if bytes.len() >= tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Every byte seen so far, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The kept text, redacted by `redactor` (pieces of secrets at the cut edges too), with a
    /// note in the middle stating how much was cut from `label`.
    pub fn render(&self, label: &str, redactor: &Redactor) -> Truncated {
        let kept = self.head.len() as u64 + self.tail.len() as u64;
        let cut = self.total - kept;
        if cut == 0 {
            let mut all = self.head.clone();
            all.extend(self.tail.iter());
            return Truncated {
                text: redactor.text(&String::from_utf8_lossy(&all)),
                total_bytes: self.total,
                cut_bytes: 0,
            };
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let head = trim_head(&self.head);
        let tail = trim_tail(&tail);
        let cut_bytes = self.total - head.len() as u64 - tail.len() as u64;
        let text = format!(
            "{}\n[... {cut_bytes} bytes cut from the middle of {label} ({} bytes in all); the first {} and last {} bytes are shown ...]\n{}",
            redactor.before_cut(&String::from_utf8_lossy(head)),
            self.total,
            head.len(),
            tail.len(),
            redactor.after_cut(&String::from_utf8_lossy(tail)),
        );
        Truncated {
            text,
            total_bytes: self.total,
            cut_bytes,
        }
    }
}

/// Text after truncation, and what was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// The text as shown (with the cut note when something was cut).
    pub text: String,
    /// Bytes in the original.
    pub total_bytes: u64,
    /// Bytes not shown.
    pub cut_bytes: u64,
}

impl Truncated {
    /// Whether anything was cut.
    pub fn was_cut(&self) -> bool {
        self.cut_bytes > 0
    }
}

/// Truncates `text` to at most `cap` bytes of content, keeping the head and the tail, after
/// redacting it whole (so the counts are of the redacted text).
pub fn head_and_tail(text: &str, cap: usize, label: &str, redactor: &Redactor) -> Truncated {
    let mut buffer = CappedBuffer::new(cap);
    buffer.push(redactor.text(text).as_bytes());
    buffer.render(label, redactor)
}

/// Drops a partial UTF-8 character at the end of `head`.
fn trim_head(head: &[u8]) -> &[u8] {
    match std::str::from_utf8(head) {
        Ok(_) => head,
        Err(e) if e.error_len().is_none() => &head[..e.valid_up_to()],
        Err(_) => head,
    }
}

/// Drops continuation bytes of a character cut at the start of `tail`.
fn trim_tail(tail: &[u8]) -> &[u8] {
    let skip = tail
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count();
    &tail[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Redactor {
        Redactor::new()
    }

    #[test]
    fn short_output_is_untouched() {
        let t = head_and_tail("hello", 10, "stdout", &none());
        assert_eq!(t.text, "hello");
        assert!(!t.was_cut());
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_what_was_cut() {
        let data: String = (0..100u8).map(|i| char::from(b'a' + i % 26)).collect();
        let t = head_and_tail(&data, 10, "stdout", &none());
        assert!(t.text.starts_with("abcde\n"), "{}", t.text);
        assert!(t.text.ends_with("\nrstuv"), "{}", t.text);
        assert!(
            t.text
                .contains("90 bytes cut from the middle of stdout (100 bytes in all)")
        );
        assert_eq!(t.cut_bytes, 90);
    }

    #[test]
    fn pushes_in_pieces_equal_one_push() {
        let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
        let mut b = CappedBuffer::new(64);
        for chunk in data.chunks(7) {
            b.push(chunk);
        }
        let mut whole = CappedBuffer::new(64);
        whole.push(&data);
        assert_eq!(b.render("x", &none()), whole.render("x", &none()));
        assert_eq!(b.total(), 5000);
    }

    #[test]
    fn cuts_never_split_a_character() {
        let text = "é".repeat(50);
        let t = head_and_tail(&text, 11, "stdout", &none());
        assert!(!t.text.contains('\u{fffd}'), "{}", t.text);
    }

    /// A secret straddling either cut edge, whatever the split, shows no piece longer than
    /// [`MIN_PARTIAL_LEN`] minus one; in [`head_and_tail`] a secret is redacted before the cut.
    #[test]
    fn secrets_straddling_a_cut_edge_are_redacted() {
        use crate::redact::MIN_PARTIAL_LEN;
        let secret = "canary-secret-0123456789";
        let redactor = Redactor::new().with_secret(secret);
        let shows = |text: &str| {
            (MIN_PARTIAL_LEN..=secret.len())
                .any(|n| text.contains(&secret[..n]) || text.contains(&secret[secret.len() - n..]))
        };
        for n in 1..secret.len() {
            for output in [
                format!("{}{secret}{}", "a".repeat(32 - n), "b".repeat(100)),
                format!("{}{secret}{}", "a".repeat(100), "b".repeat(32 - n)),
            ] {
                let mut b = CappedBuffer::new(64);
                for chunk in output.as_bytes().chunks(5) {
                    b.push(chunk);
                }
                let t = b.render("stdout", &redactor);
                assert!(t.was_cut() && !shows(&t.text), "n={n}: {}", t.text);
                let t = head_and_tail(&output, 64, "stdout", &redactor);
                assert!(!shows(&t.text), "n={n}: {}", t.text);
            }
        }
        let t = head_and_tail(&format!("{secret}{}", "x".repeat(100)), 32, "f", &redactor);
        assert!(t.text.starts_with("[REDACTED]xxxx"), "{}", t.text);
    }
}
