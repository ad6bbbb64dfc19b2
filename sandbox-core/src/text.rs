//! Text from outside (provider answers, sandbox names, command output quoted in a message) made
//! safe to show a person: control characters written as escapes, so a name holding an ESC
//! sequence cannot move a terminal's cursor, rewrite its title or hide what came before it.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal raw: the C0 and C1 controls (ESC, CSI, BEL, NUL,
/// CR, LF, TAB, ...) and the Unicode bidirectional overrides and isolates, which reorder how
/// the rest of a line is shown.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character (and bidirectional override) written as its Rust escape
/// (`\n`, `\t`, `\u{1b}`, `\u{202e}`): one field, shown on one line.
///
/// ```
/// use sandbox_sdk_core::text::escape_controls;
/// assert_eq!(escape_controls("box\u{1b}[2J\n"), "box\\u{1b}[2J\\n");
/// assert_eq!(escape_controls("plain"), "plain");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    escape_where(text, is_unsafe)
}

/// `text` as [`escape_controls`] writes it, but with its line breaks and tabs kept: for a
/// block (a table, a message) whose own layout uses them.
///
/// ```
/// use sandbox_sdk_core::text::escape_controls_in_lines;
/// assert_eq!(escape_controls_in_lines("a\tb\n\u{1b}]0;x\u{7}\n"), "a\tb\n\\u{1b}]0;x\\u{7}\n");
/// ```
pub fn escape_controls_in_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && is_unsafe(c))
}

fn escape_where(text: &str, escape: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn c1_controls_and_bidi_overrides_are_escaped() {
        assert_eq!(escape_controls("a\u{9b}2Jb"), "a\\u{9b}2Jb");
        assert_eq!(escape_controls("x\u{202e}gpj.exe"), "x\\u{202e}gpj.exe");
        assert_eq!(escape_controls_in_lines("\r\n"), "\\r\n");
    }

    proptest! {
        #[test]
        fn nothing_unsafe_is_left(text in any::<String>()) {
            let field = escape_controls(&text);
            prop_assert!(!field.chars().any(is_unsafe));
            let block = escape_controls_in_lines(&text);
            prop_assert!(!block.chars().any(|c| c != '\n' && c != '\t' && is_unsafe(c)));
            prop_assert_eq!(block.matches('\n').count(), text.matches('\n').count());
        }
    }
}
