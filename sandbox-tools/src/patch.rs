//! The V4A patch format of OpenAI's `apply_patch` tool, parsed and applied as pure functions.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: hello.txt
//! +Hello, world!
//! *** Update File: src/app.py
//! *** Move to: src/main.py
//! @@ def greet():
//! -print("Hi")
//! +print("Hello")
//! *** Delete File: obsolete.txt
//! *** End Patch
//! ```
//!
//! An update is a list of hunks. Each hunk starts with `@@`, optionally followed by an anchor
//! line (a line of the file, such as a function's signature, to find first; several `@@ anchor`
//! lines narrow the search step by step). Its lines start with a space (context, kept), `-`
//! (removed) or `+` (added); a hunk may end with `*** End of File` to match at the end of the
//! file. Hunks apply in order, each searching from where the previous one ended. Lines are
//! matched exactly first, then ignoring trailing whitespace, then ignoring surrounding
//! whitespace; a hunk whose lines are not found fails the whole patch and nothing is written.
//! Line endings (LF or CRLF) and a missing final newline are preserved.

use crate::result::ToolError;

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// `*** Add File:` a new file with these contents.
    Add {
        /// Where.
        path: String,
        /// The whole file.
        contents: String,
    },
    /// `*** Delete File:` remove a file.
    Delete {
        /// Which.
        path: String,
    },
    /// `*** Update File:` change a file in place, and maybe move it.
    Update {
        /// Which.
        path: String,
        /// `*** Move to:` its new path.
        move_to: Option<String>,
        /// The hunks, in file order.
        hunks: Vec<Hunk>,
    },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hunk {
    /// Lines to find, in order, before the hunk's own lines (`@@ anchor`).
    pub anchors: Vec<String>,
    /// The lines the hunk expects: context and removed lines.
    pub old: Vec<String>,
    /// The lines that replace them: context and added lines.
    pub new: Vec<String>,
    /// `*** End of File`: the hunk matches at the end of the file.
    pub end_of_file: bool,
}

impl Hunk {
    fn is_empty(&self) -> bool {
        self.old.is_empty() && self.new.is_empty()
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARK: &str = "*** End of File";

fn bad(line: usize, message: impl Into<String>) -> ToolError {
    ToolError::invalid_input(
        format!("patch line {line}: {}", message.into()),
        "fix the patch: it must be `*** Begin Patch`, then `*** Add File: P` (+ lines), `*** Update File: P` (optional `*** Move to: Q`, then `@@` hunks of ' ', '-', '+' lines) or `*** Delete File: P` sections, then `*** End Patch`",
    )
}

/// Parses a whole patch, `*** Begin Patch` to `*** End Patch`.
pub fn parse(text: &str) -> Result<Vec<PatchOp>, ToolError> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return Err(bad(1, "the patch is empty"));
    };
    if lines[first].trim() != BEGIN {
        return Err(bad(
            first + 1,
            format!("the patch must start with `{BEGIN}`"),
        ));
    }
    if last == first || lines[last].trim() != END {
        return Err(bad(last + 1, format!("the patch must end with `{END}`")));
    }
    let body = &lines[first + 1..last];
    let number = |i: usize| first + 2 + i;
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        if let Some(path) = line.strip_prefix(ADD) {
            let path = header_path(path, number(i))?;
            i += 1;
            let mut contents = String::new();
            while i < body.len() && !body[i].starts_with("*** ") {
                match body[i].strip_prefix('+') {
                    Some(text) => {
                        contents.push_str(text);
                        contents.push('\n');
                    }
                    None => {
                        return Err(bad(
                            number(i),
                            "every line of an added file must start with `+`",
                        ));
                    }
                }
                i += 1;
            }
            ops.push(PatchOp::Add { path, contents });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            ops.push(PatchOp::Delete {
                path: header_path(path, number(i))?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = header_path(path, number(i))?;
            let header_line = number(i);
            i += 1;
            let mut move_to = None;
            if let Some(target) = body.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                move_to = Some(header_path(target, number(i))?);
                i += 1;
            }
            let start = i;
            while i < body.len() && !is_file_header(body[i]) {
                i += 1;
            }
            let hunks = parse_hunks(&body[start..i], number(start))?;
            if hunks.is_empty() && move_to.is_none() {
                return Err(bad(
                    header_line,
                    format!("`*** Update File: {path}` has no hunks"),
                ));
            }
            ops.push(PatchOp::Update {
                path,
                move_to,
                hunks,
            });
        } else {
            return Err(bad(
                number(i),
                format!(
                    "expected `*** Add File:`, `*** Update File:` or `*** Delete File:`, found {line:?}"
                ),
            ));
        }
    }
    if ops.is_empty() {
        return Err(bad(first + 1, "the patch changes no file"));
    }
    Ok(ops)
}

fn is_file_header(line: &str) -> bool {
    line.starts_with(ADD) || line.starts_with(DELETE) || line.starts_with(UPDATE)
}

fn header_path(path: &str, line: usize) -> Result<String, ToolError> {
    let path = path.trim();
    if path.is_empty() {
        return Err(bad(line, "the file header names no path"));
    }
    Ok(path.to_owned())
}

/// Parses the hunks of one update: the lines after `*** Update File:` (and `*** Move to:`), or a
/// headerless V4A diff such as OpenAI's `update_file` operation carries. `first_line` numbers
/// the first of them in messages.
pub fn parse_hunks(lines: &[&str], first_line: usize) -> Result<Vec<Hunk>, ToolError> {
    let mut hunks = Vec::new();
    let mut hunk = Hunk::default();
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(anchor) = line.strip_prefix("@@") {
            if !hunk.is_empty() || hunk.end_of_file {
                hunks.push(std::mem::take(&mut hunk));
            }
            let anchor = anchor.trim();
            // `@@ -1,3 +1,4 @@` (a unified-diff header) is not an anchor.
            let unified_header = anchor.starts_with('-') && anchor.ends_with("@@");
            if !anchor.is_empty() && !unified_header {
                hunk.anchors.push(anchor.to_owned());
            }
        } else if line == EOF_MARK {
            hunk.end_of_file = true;
            hunks.push(std::mem::take(&mut hunk));
        } else if let Some(text) = line.strip_prefix('+') {
            hunk.new.push(text.to_owned());
        } else if let Some(text) = line.strip_prefix('-') {
            hunk.old.push(text.to_owned());
        } else if let Some(text) = line.strip_prefix(' ') {
            hunk.old.push(text.to_owned());
            hunk.new.push(text.to_owned());
        } else if line.is_empty() {
            hunk.old.push(String::new());
            hunk.new.push(String::new());
        } else {
            return Err(bad(
                first_line + i,
                format!("a hunk line must start with ' ', '-', '+' or '@@', found {line:?}"),
            ));
        }
    }
    if !hunk.is_empty() {
        hunks.push(hunk);
    }
    Ok(hunks)
}

/// The contents of a file made by OpenAI's `create_file` operation: every line starts with `+`.
pub fn parse_create(diff: &str) -> Result<String, ToolError> {
    let mut contents = String::new();
    for (i, line) in diff.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        match line.strip_prefix('+') {
            Some(text) => {
                contents.push_str(text);
                contents.push('\n');
            }
            None if line.is_empty() && i + 1 == diff.lines().count() => {}
            None => {
                return Err(bad(
                    i + 1,
                    "every line of a created file must start with `+`",
                ));
            }
        }
    }
    Ok(contents)
}

/// How closely a hunk matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fuzz {
    /// Byte for byte.
    Exact,
    /// Ignoring trailing whitespace.
    TrailingWhitespace,
    /// Ignoring leading and trailing whitespace.
    Whitespace,
}

fn same(a: &str, b: &str, fuzz: Fuzz) -> bool {
    match fuzz {
        Fuzz::Exact => a == b,
        Fuzz::TrailingWhitespace => a.trim_end() == b.trim_end(),
        Fuzz::Whitespace => a.trim() == b.trim(),
    }
}

fn seek(lines: &[String], pattern: &[String], from: usize, at_end: bool) -> Option<(usize, Fuzz)> {
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    for fuzz in [Fuzz::Exact, Fuzz::TrailingWhitespace, Fuzz::Whitespace] {
        let matches_at =
            |i: usize| (0..pattern.len()).all(|k| same(&lines[i + k], &pattern[k], fuzz));
        if at_end && last_start >= from && matches_at(last_start) {
            return Some((last_start, fuzz));
        }
        if let Some(i) = (from..=last_start).find(|i| matches_at(*i)) {
            return Some((i, fuzz));
        }
    }
    None
}

/// The result of applying hunks to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new contents.
    pub contents: String,
    /// The loosest match any hunk needed.
    pub fuzz: Fuzz,
}

fn context_not_found(path: &str, n: usize, what: &str, lines: &[String]) -> ToolError {
    let shown: Vec<String> = lines.iter().take(8).map(|l| format!("  |{l}")).collect();
    let more = if lines.len() > 8 { "\n  |..." } else { "" };
    ToolError::not_found(
        format!(
            "hunk {n} of {path}: {what} not found (after the previous hunk's position); expected:\n{}{more}",
            shown.join("\n")
        ),
        "nothing was changed: read the file again and rebuild the hunk from its current text (context and '-' lines must match the file)",
    )
}

/// Applies `hunks` to `contents` (the current text of `path`, for messages).
pub fn apply_hunks(contents: &str, hunks: &[Hunk], path: &str) -> Result<Applied, ToolError> {
    let crlf = contents.contains("\r\n");
    let newline = if crlf { "\r\n" } else { "\n" };
    let final_newline = contents.is_empty() || contents.ends_with('\n');
    let mut lines: Vec<String> = contents.split(newline).map(str::to_owned).collect();
    if final_newline {
        lines.pop();
    }
    let mut cursor = 0;
    let mut worst = Fuzz::Exact;
    let mut edits: Vec<(usize, usize, Vec<String>)> = Vec::new();
    for (n, hunk) in hunks.iter().enumerate() {
        let n = n + 1;
        for anchor in &hunk.anchors {
            let pattern = [anchor.clone()];
            match seek(&lines, &pattern, cursor, false) {
                Some((at, fuzz)) => {
                    worst = worst.max(fuzz);
                    cursor = at + 1;
                }
                None => {
                    return Err(context_not_found(
                        path,
                        n,
                        &format!("the `@@ {anchor}` line"),
                        &pattern,
                    ));
                }
            }
        }
        if hunk.old.is_empty() {
            let at = if hunk.end_of_file || hunk.anchors.is_empty() {
                lines.len()
            } else {
                cursor
            };
            edits.push((at, 0, hunk.new.clone()));
            cursor = at;
            continue;
        }
        let mut old = &hunk.old[..];
        let mut new = &hunk.new[..];
        let mut found = seek(&lines, old, cursor, hunk.end_of_file);
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, cursor, hunk.end_of_file);
        }
        let Some((at, fuzz)) = found else {
            return Err(context_not_found(path, n, "its context", &hunk.old));
        };
        worst = worst.max(fuzz);
        edits.push((at, old.len(), new.to_vec()));
        cursor = at + old.len();
    }
    for (at, len, new) in edits.into_iter().rev() {
        lines.splice(at..at + len, new);
    }
    let mut out = lines.join(newline);
    if final_newline && !lines.is_empty() {
        out.push_str(newline);
    }
    Ok(Applied {
        contents: out,
        fuzz: worst,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(diff: &str, contents: &str) -> Result<String, ToolError> {
        let lines: Vec<&str> = diff.lines().collect();
        let hunks = parse_hunks(&lines, 1)?;
        apply_hunks(contents, &hunks, "f").map(|a| a.contents)
    }

    #[test]
    fn parses_every_section_kind() {
        let ops = parse(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Update File: b.txt\n*** Move to: c.txt\n@@ fn main\n-x\n+y\n*** Delete File: d.txt\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            ops[0],
            PatchOp::Add {
                path: "a.txt".into(),
                contents: "one\ntwo\n".into()
            }
        );
        let PatchOp::Update {
            path,
            move_to,
            hunks,
        } = &ops[1]
        else {
            panic!()
        };
        assert_eq!(path, "b.txt");
        assert_eq!(move_to.as_deref(), Some("c.txt"));
        assert_eq!(hunks[0].anchors, ["fn main"]);
        assert_eq!(hunks[0].old, ["x"]);
        assert_eq!(hunks[0].new, ["y"]);
        assert_eq!(
            ops[2],
            PatchOp::Delete {
                path: "d.txt".into()
            }
        );
    }

    #[test]
    fn malformed_patches_say_where() {
        let e = parse("*** Update File: a\n*** End Patch").unwrap_err();
        assert!(e.message.contains("line 1"), "{}", e.message);
        let e = parse("*** Begin Patch\n*** Add File: a\n+x\n").unwrap_err();
        assert!(e.message.contains("End Patch"), "{}", e.message);
        let e = parse("*** Begin Patch\n*** Add File: a\nx\n*** End Patch").unwrap_err();
        assert!(e.message.contains("line 3"), "{}", e.message);
        let e = parse("*** Begin Patch\n*** Update File: a\n*** End Patch").unwrap_err();
        assert!(e.message.contains("no hunks"), "{}", e.message);
        let e = parse("*** Begin Patch\n*** Update File: a\n@@\n?x\n*** End Patch").unwrap_err();
        assert!(e.message.contains("line 4"), "{}", e.message);
        assert!(parse("*** Begin Patch\n*** End Patch").is_err());
    }

    #[test]
    fn hunks_apply_in_order_with_anchors() {
        let file = "fn a() {\n    x\n}\nfn b() {\n    x\n}\n";
        let out = update("@@ fn b() {\n-    x\n+    y\n", file).unwrap();
        assert_eq!(out, "fn a() {\n    x\n}\nfn b() {\n    y\n}\n");
        let out = update(
            "@@\n fn a() {\n-    x\n+    z\n@@\n fn b() {\n-    x\n+    w\n",
            file,
        )
        .unwrap();
        assert_eq!(out, "fn a() {\n    z\n}\nfn b() {\n    w\n}\n");
    }

    #[test]
    fn context_not_found_fails_and_names_the_hunk() {
        let e = update("@@\n-nope\n+x\n", "a\nb\n").unwrap_err();
        assert_eq!(e.kind, "not_found");
        assert!(e.message.contains("hunk 1 of f"), "{}", e.message);
        assert!(e.message.contains("|nope"), "{}", e.message);
        let e = update("@@ missing anchor\n-a\n+x\n", "a\nb\n").unwrap_err();
        assert!(e.message.contains("`@@ missing anchor`"), "{}", e.message);
    }

    #[test]
    fn whitespace_fuzz_and_end_of_file() {
        let a = apply_hunks(
            "a  \nb\n",
            &parse_hunks(&["@@", "-a", "+A"], 1).unwrap(),
            "f",
        )
        .unwrap();
        assert_eq!(a.contents, "A\nb\n");
        assert_eq!(a.fuzz, Fuzz::TrailingWhitespace);
        let out = update("@@\n x\n-y\n+z\n*** End of File\n", "x\ny\nq\nx\ny\n").unwrap();
        assert_eq!(out, "x\ny\nq\nx\nz\n");
    }

    #[test]
    fn pure_additions_go_after_the_anchor_or_at_the_end() {
        assert_eq!(update("@@ a\n+x\n", "a\nb\n").unwrap(), "a\nx\nb\n");
        assert_eq!(update("@@\n+x\n", "a\nb\n").unwrap(), "a\nb\nx\n");
        assert_eq!(update("@@\n+x\n", "").unwrap(), "x\n");
    }

    #[test]
    fn line_endings_and_missing_final_newline_are_kept() {
        assert_eq!(update("@@\n-b\n+c\n", "a\r\nb\r\n").unwrap(), "a\r\nc\r\n");
        assert_eq!(update("@@\n-b\n+c\n", "a\nb").unwrap(), "a\nc");
    }

    #[test]
    fn create_diffs_need_plus_lines() {
        assert_eq!(parse_create("+a\n+b\n").unwrap(), "a\nb\n");
        assert!(parse_create("+a\nb\n").is_err());
    }
}
