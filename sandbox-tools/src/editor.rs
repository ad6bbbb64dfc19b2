//! The text edits behind the editor tools, as pure functions over a file's text, with the
//! semantics of Anthropic's text-editor tool: `view` numbers lines (`cat -n` style) and takes a
//! 1-based inclusive range whose end may be `-1`; `str_replace` needs exactly one verbatim match
//! and says how many it found otherwise; `insert` puts text after line N (0 = the top).

use crate::result::ToolError;

/// The file's lines, each with its line ending.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// How many lines `text` has (a last line without a newline counts).
pub fn line_count(text: &str) -> usize {
    lines(text).len()
}

/// `text` with line numbers, the first line numbered `first`: `{n:>6}\t{line}`.
pub fn number_lines(text: &str, first: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in lines(text).into_iter().enumerate() {
        out.push_str(&format!("{:>6}\t", first + i));
        out.push_str(line.strip_suffix('\n').unwrap_or(line));
        out.push('\n');
    }
    out
}

/// The lines `start..=end` (1-based; `end` of `-1` or past the end means to the end), numbered.
/// Returns the numbered text and the range actually shown.
pub fn view(text: &str, range: Option<[i64; 2]>) -> Result<(String, usize, usize), ToolError> {
    let all = lines(text);
    let n = all.len();
    let (start, end) = match range {
        None => (1, n),
        Some([start, end]) => {
            if start < 1 || (n > 0 && start as usize > n) || (n == 0 && start > 1) {
                return Err(ToolError::invalid_input(
                    format!("view_range starts at line {start}, but the file has {n} lines"),
                    format!("use a start line from 1 to {}", n.max(1)),
                ));
            }
            if end != -1 && end < start {
                return Err(ToolError::invalid_input(
                    format!("view_range ends at line {end}, before its start {start}"),
                    "use an end line at or after the start, or -1 for the end of the file",
                ));
            }
            let end = if end == -1 { n } else { (end as usize).min(n) };
            (start as usize, end)
        }
    };
    if n == 0 {
        return Ok((String::new(), 0, 0));
    }
    let shown: String = all[start - 1..end].concat();
    Ok((number_lines(&shown, start), start, end))
}

/// The 1-based line on which byte `offset` lies.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Replaces the one occurrence of `old` with `new`. Fails, naming how many it found and on
/// which lines, unless `old` occurs exactly once. Returns the new text and the first changed line.
pub fn str_replace(
    text: &str,
    old: &str,
    new: &str,
    path: &str,
) -> Result<(String, usize), ToolError> {
    if old.is_empty() {
        return Err(ToolError::invalid_input(
            "old_str is empty",
            "pass the exact text to replace (use insert to add text without replacing any)",
        ));
    }
    let found: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    match found.as_slice() {
        [] => Err(ToolError::not_found(
            format!(
                "no replacement was made: old_str was found 0 times in {path}; it must appear verbatim exactly once"
            ),
            "view the file and copy the text exactly, including whitespace, indentation and line breaks",
        )),
        [at] => {
            let mut out = String::with_capacity(text.len() + new.len());
            out.push_str(&text[..*at]);
            out.push_str(new);
            out.push_str(&text[at + old.len()..]);
            Ok((out, line_of(text, *at)))
        }
        many => {
            let lines: Vec<String> = many
                .iter()
                .map(|at| line_of(text, *at).to_string())
                .collect();
            Err(ToolError::conflict(
                format!(
                    "no replacement was made: old_str was found {} times in {path} (on lines {}); it must appear exactly once",
                    many.len(),
                    lines.join(", ")
                ),
                "add surrounding lines to old_str so that it matches exactly one place",
            ))
        }
    }
}

/// Inserts `new` after line `after` (0 = before the first line). Returns the new text.
pub fn insert(text: &str, after: i64, new: &str) -> Result<String, ToolError> {
    let all = lines(text);
    let n = all.len();
    if after < 0 || after as usize > n {
        return Err(ToolError::invalid_input(
            format!("insert_line {after} is out of range: the file has {n} lines"),
            format!("use a line number from 0 (the top) to {n} (the end)"),
        ));
    }
    let after = after as usize;
    let offset: usize = all[..after].iter().map(|l| l.len()).sum();
    let mut out = String::with_capacity(text.len() + new.len() + 2);
    out.push_str(&text[..offset]);
    if offset > 0 && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(new);
    let rest = &text[offset..];
    if !rest.is_empty() && !new.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(rest);
    Ok(out)
}

/// A few numbered lines around `line` of `text`, to show the model what an edit did.
pub fn snippet(text: &str, line: usize, extra_lines: usize, context: usize) -> String {
    let all = lines(text);
    if all.is_empty() {
        return String::new();
    }
    let start = line.saturating_sub(context).max(1);
    let end = (line + extra_lines + context).min(all.len());
    if start > end {
        return String::new();
    }
    number_lines(&all[start - 1..end].concat(), start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_numbers_lines_and_takes_ranges() {
        let text = "a\nb\nc\n";
        assert_eq!(
            view(text, None).unwrap().0,
            "     1\ta\n     2\tb\n     3\tc\n"
        );
        assert_eq!(
            view(text, Some([2, -1])).unwrap().0,
            "     2\tb\n     3\tc\n"
        );
        assert_eq!(view(text, Some([2, 2])).unwrap().0, "     2\tb\n");
        assert_eq!(view(text, Some([3, 99])).unwrap().0, "     3\tc\n");
        assert!(view(text, Some([0, 1])).is_err());
        assert!(view(text, Some([4, -1])).is_err());
        assert!(view(text, Some([3, 2])).is_err());
        assert_eq!(view("x", None).unwrap().0, "     1\tx\n");
    }

    #[test]
    fn str_replace_needs_exactly_one_match() {
        let (out, line) = str_replace("a\nb\nc\n", "b\n", "B\nB2\n", "f").unwrap();
        assert_eq!(out, "a\nB\nB2\nc\n");
        assert_eq!(line, 2);
        let e = str_replace("x\ny\n", "z", "", "f").unwrap_err();
        assert_eq!(e.kind, "not_found");
        assert!(e.message.contains("found 0 times"), "{}", e.message);
        let e = str_replace("x\nx\ny\nx\n", "x", "", "f").unwrap_err();
        assert_eq!(e.kind, "conflict");
        assert!(e.message.contains("found 3 times"), "{}", e.message);
        assert!(e.message.contains("lines 1, 2, 4"), "{}", e.message);
        assert!(str_replace("x", "", "y", "f").is_err());
    }

    #[test]
    fn insert_after_line() {
        assert_eq!(insert("a\nb\n", 0, "x").unwrap(), "x\na\nb\n");
        assert_eq!(insert("a\nb\n", 1, "x\n").unwrap(), "a\nx\nb\n");
        assert_eq!(insert("a\nb\n", 2, "x").unwrap(), "a\nb\nx");
        assert_eq!(insert("a\nb", 2, "x\n").unwrap(), "a\nb\nx\n");
        assert_eq!(insert("", 0, "x\n").unwrap(), "x\n");
        assert!(insert("a\n", 2, "x").is_err());
        assert!(insert("a\n", -1, "x").is_err());
    }

    #[test]
    fn snippets_show_context() {
        let text = "1\n2\n3\n4\n5\n6\n";
        assert_eq!(snippet(text, 3, 0, 1), "     2\t2\n     3\t3\n     4\t4\n");
    }
}
