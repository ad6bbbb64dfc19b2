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
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

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
    if text.len() > MAX_PATCH_BYTES {
        return Err(too_big(text.len()));
    }
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
    let bytes = lines.iter().map(|l| l.len() + 1).sum::<usize>();
    if bytes > MAX_PATCH_BYTES + 1 {
        return Err(too_big(bytes - 1));
    }
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
    if diff.len() > MAX_PATCH_BYTES {
        return Err(too_big(diff.len()));
    }
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

impl Fuzz {
    const ALL: [Fuzz; 3] = [Fuzz::Exact, Fuzz::TrailingWhitespace, Fuzz::Whitespace];

    /// What of a line counts at this level: two lines match when these are equal.
    fn normal(self, line: &str) -> &str {
        match self {
            Fuzz::Exact => line,
            Fuzz::TrailingWhitespace => line.trim_end(),
            Fuzz::Whitespace => line.trim(),
        }
    }
}

/// The file's lines as numbers at one fuzz level: equal numbers for lines that match there.
struct Level<'a> {
    ids: HashMap<&'a str, u32>,
    lines: Vec<u32>,
}

/// The work matching has done, and what stops it: every line numbered and every number
/// compared is a unit; past [`MatchLimits::max_work`] the patch is refused, and the cancel flag
/// is looked at every [`CHECK_EVERY`] units.
struct Budget<'a> {
    work: u64,
    max_work: u64,
    next_check: u64,
    cancel: Option<&'a AtomicBool>,
    path: &'a str,
}

/// How often (in units of work) matching looks at its cancel flag.
const CHECK_EVERY: u64 = 1 << 14;

impl Budget<'_> {
    fn spend(&mut self, units: u64) -> Result<(), ToolError> {
        self.work += units;
        if self.work > self.max_work {
            return Err(ToolError::invalid_input(
                format!(
                    "matching the patch against {} needs more than {} steps; nothing was changed",
                    self.path, self.max_work
                ),
                "split the patch into smaller ones, and give each hunk context lines that occur once in the file (an @@ line naming the function helps)",
            ));
        }
        if self.work >= self.next_check {
            self.next_check = self.work + CHECK_EVERY;
            if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(ToolError::new(
                    "cancelled",
                    format!(
                        "matching the patch against {} was stopped; nothing was changed",
                        self.path
                    ),
                    "the call ran out of time: split the patch into smaller ones and call again",
                ));
            }
        }
        Ok(())
    }
}

/// Finds hunks in a file's lines in time linear in the lines searched and the hunk: the lines
/// are numbered once per fuzz level, and a hunk is searched for as a sequence of numbers with
/// Knuth-Morris-Pratt, never compared again at every position.
struct Matcher<'a> {
    lines: &'a [String],
    levels: [Option<Level<'a>>; 3],
    budget: Budget<'a>,
}

impl<'a> Matcher<'a> {
    fn new(lines: &'a [String], path: &'a str, limits: MatchLimits<'a>) -> Self {
        Matcher {
            lines,
            levels: [None, None, None],
            budget: Budget {
                work: 0,
                max_work: limits.max_work,
                next_check: 0,
                cancel: limits.cancel,
                path,
            },
        }
    }

    /// Numbers the file's lines at `fuzz`, once.
    fn number(&mut self, fuzz: Fuzz) -> Result<(), ToolError> {
        let at = fuzz as usize;
        if self.levels[at].is_none() {
            self.budget.spend(self.lines.len() as u64)?;
            let mut ids = HashMap::new();
            let lines = self
                .lines
                .iter()
                .map(|line| {
                    let next = ids.len() as u32;
                    *ids.entry(fuzz.normal(line)).or_insert(next)
                })
                .collect();
            self.levels[at] = Some(Level { ids, lines });
        }
        Ok(())
    }

    /// Where `pattern` first matches at or after `from` (first at the end of the file when
    /// `at_end`), trying each fuzz level in turn: the same answer as comparing the pattern at
    /// every position, level by level.
    fn seek(
        &mut self,
        pattern: &[String],
        from: usize,
        at_end: bool,
    ) -> Result<Option<(usize, Fuzz)>, ToolError> {
        let n = self.lines.len();
        if pattern.len() > n {
            return Ok(None);
        }
        let last_start = n - pattern.len();
        if pattern.is_empty() {
            let at = if at_end { last_start } else { from };
            return Ok((from <= last_start).then_some((at, Fuzz::Exact)));
        }
        for fuzz in Fuzz::ALL {
            self.number(fuzz)?;
            self.budget.spend(pattern.len() as u64)?;
            let level = self.levels[fuzz as usize].as_ref().expect("numbered above");
            // A pattern line found nowhere in the file cannot match at this level.
            let Some(wanted) = pattern
                .iter()
                .map(|line| level.ids.get(fuzz.normal(line)).copied())
                .collect::<Option<Vec<u32>>>()
            else {
                continue;
            };
            if at_end && last_start >= from && level.lines[last_start..] == wanted[..] {
                return Ok(Some((last_start, fuzz)));
            }
            if from > last_start {
                continue;
            }
            if let Some(at) = find(&level.lines, &wanted, from, &mut self.budget)? {
                return Ok(Some((at, fuzz)));
            }
        }
        Ok(None)
    }
}

/// Knuth-Morris-Pratt: the first index at or after `from` where `wanted` (not empty) starts in
/// `lines`, in at most `2 * (lines - from) + 2 * wanted` comparisons.
fn find(
    lines: &[u32],
    wanted: &[u32],
    from: usize,
    budget: &mut Budget<'_>,
) -> Result<Option<usize>, ToolError> {
    let m = wanted.len();
    // border[i]: the longest proper border of wanted[..=i].
    let mut border = vec![0usize; m];
    let mut k = 0;
    for i in 1..m {
        while k > 0 && wanted[i] != wanted[k] {
            k = border[k - 1];
        }
        if wanted[i] == wanted[k] {
            k += 1;
        }
        border[i] = k;
    }
    budget.spend(2 * m as u64)?;
    let mut matched = 0;
    let mut steps = 0u64;
    for (i, &line) in lines.iter().enumerate().skip(from) {
        while matched > 0 && line != wanted[matched] {
            matched = border[matched - 1];
            steps += 1;
        }
        steps += 1;
        if line == wanted[matched] {
            matched += 1;
            if matched == m {
                budget.spend(steps)?;
                return Ok(Some(i + 1 - m));
            }
        }
        if steps >= CHECK_EVERY {
            budget.spend(steps)?;
            steps = 0;
        }
    }
    budget.spend(steps)?;
    Ok(None)
}

/// The largest patch (or OpenAI diff) the patch tools take, in bytes.
pub const MAX_PATCH_BYTES: usize = 1 << 20;

/// The most units of work (lines numbered, numbers compared) matching one file's hunks may
/// take: far more than any patch of sensible hunks needs (matching is linear in the lines
/// searched), and a bound of well under a second on one core for one that is not.
pub const MAX_MATCH_WORK: u64 = 1 << 28;

fn too_big(bytes: usize) -> ToolError {
    ToolError::invalid_input(
        format!(
            "the patch is {bytes} bytes, more than the {MAX_PATCH_BYTES} bytes one call takes; nothing was changed"
        ),
        "split it into several smaller patches (a few files or hunks each) and apply them one by one",
    )
}

/// The result of applying hunks to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The new contents.
    pub contents: String,
    /// The loosest match any hunk needed.
    pub fuzz: Fuzz,
    /// The units of work matching took (lines numbered, numbers compared).
    pub work: u64,
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

/// What bounds the matching of one file's hunks.
#[derive(Debug, Clone, Copy)]
pub struct MatchLimits<'a> {
    /// The most units of work (lines numbered, numbers compared); past it the patch is refused
    /// with an `invalid_input` error. Default [`MAX_MATCH_WORK`].
    pub max_work: u64,
    /// Once set, matching stops with a `cancelled` error within a few thousand units.
    pub cancel: Option<&'a AtomicBool>,
}

impl Default for MatchLimits<'_> {
    fn default() -> Self {
        MatchLimits {
            max_work: MAX_MATCH_WORK,
            cancel: None,
        }
    }
}

/// Applies `hunks` to `contents` (the current text of `path`, for messages).
pub fn apply_hunks(contents: &str, hunks: &[Hunk], path: &str) -> Result<Applied, ToolError> {
    apply_hunks_with(contents, hunks, path, MatchLimits::default())
}

/// [`apply_hunks`] within `limits` (the patch tools set the cancel flag when their call's
/// timeout fires).
pub fn apply_hunks_with(
    contents: &str,
    hunks: &[Hunk],
    path: &str,
    limits: MatchLimits<'_>,
) -> Result<Applied, ToolError> {
    let crlf = contents.contains("\r\n");
    let newline = if crlf { "\r\n" } else { "\n" };
    let final_newline = contents.is_empty() || contents.ends_with('\n');
    let mut lines: Vec<String> = contents.split(newline).map(str::to_owned).collect();
    if final_newline {
        lines.pop();
    }
    let mut matcher = Matcher::new(&lines, path, limits);
    let mut cursor = 0;
    let mut worst = Fuzz::Exact;
    // Sorted and apart: each hunk is searched for from where the previous one ended.
    let mut edits: Vec<(usize, usize, &[String])> = Vec::new();
    for (n, hunk) in hunks.iter().enumerate() {
        let n = n + 1;
        for anchor in &hunk.anchors {
            let pattern = [anchor.clone()];
            match matcher.seek(&pattern, cursor, false)? {
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
            edits.push((at, 0, &hunk.new));
            cursor = at;
            continue;
        }
        let mut old = &hunk.old[..];
        let mut new = &hunk.new[..];
        let mut found = matcher.seek(old, cursor, hunk.end_of_file)?;
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = matcher.seek(old, cursor, hunk.end_of_file)?;
        }
        let Some((at, fuzz)) = found else {
            return Err(context_not_found(path, n, "its context", &hunk.old));
        };
        worst = worst.max(fuzz);
        edits.push((at, old.len(), new));
        cursor = at + old.len();
    }
    let work = matcher.budget.work;
    // One pass over the file: the lines before each edit, then its new lines.
    let mut out_lines: Vec<&str> = Vec::with_capacity(lines.len());
    let mut next = 0;
    for (at, len, new) in edits {
        out_lines.extend(lines[next..at].iter().map(String::as_str));
        out_lines.extend(new.iter().map(String::as_str));
        next = at + len;
    }
    out_lines.extend(lines[next..].iter().map(String::as_str));
    let mut out = out_lines.join(newline);
    if final_newline && !out_lines.is_empty() {
        out.push_str(newline);
    }
    Ok(Applied {
        contents: out,
        fuzz: worst,
        work,
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

    /// A file of one repeated line and a hunk of many of them that matches only at the end:
    /// a search comparing the hunk at every position does `lines x hunk` comparisons; the
    /// matching here stays within a small multiple of `lines + hunk`, at every fuzz level.
    #[test]
    fn matching_work_is_linear_in_the_file_and_the_patch() {
        let (n, m) = (4000, 200);
        for (file_line, hunk_line, fuzz) in [
            ("x", "x", Fuzz::Exact),
            ("x  ", "x", Fuzz::TrailingWhitespace),
            ("  x", "x", Fuzz::Whitespace),
        ] {
            let mut file = format!("{file_line}\n").repeat(n);
            file.push_str("y\n");
            let mut hunk = vec!["@@".to_owned()];
            hunk.extend(std::iter::repeat_n(format!(" {hunk_line}"), m));
            hunk.push("-y".into());
            hunk.push("+z".into());
            let lines: Vec<&str> = hunk.iter().map(String::as_str).collect();
            let applied = apply_hunks(&file, &parse_hunks(&lines, 1).unwrap(), "f").unwrap();
            assert_eq!(applied.fuzz, fuzz);
            assert!(applied.contents.ends_with("z\n"));
            let bound = 16 * (n + m) as u64;
            assert!(
                applied.work <= bound,
                "{fuzz:?}: {} work units for {n} lines and a {m}-line hunk (bound {bound})",
                applied.work
            );
        }
    }

    /// Matching stops when its cancel flag is set, and past its work limit the patch is
    /// refused, in both cases before the work is done.
    #[test]
    fn matching_stops_when_cancelled_or_over_its_limit() {
        let file = "x\n".repeat(100_000) + "y\n";
        let hunks = parse_hunks(&["@@", " x", "-y", "+z"], 1).unwrap();
        let cancel = AtomicBool::new(true);
        let limits = MatchLimits {
            cancel: Some(&cancel),
            ..MatchLimits::default()
        };
        let e = apply_hunks_with(&file, &hunks, "f", limits).unwrap_err();
        assert_eq!(e.kind, "cancelled", "{}", e.message);
        let limits = MatchLimits {
            max_work: 50_000,
            cancel: None,
        };
        let e = apply_hunks_with(&file, &hunks, "f", limits).unwrap_err();
        assert_eq!(e.kind, "invalid_input", "{}", e.message);
        assert!(e.message.contains("50000 steps"), "{}", e.message);
        assert!(
            apply_hunks(&file, &hunks, "f")
                .unwrap()
                .contents
                .ends_with("x\nz\n")
        );
    }

    /// The reference: compare the pattern at every position, level by level (the matching
    /// before it was made linear).
    fn naive_seek(
        lines: &[String],
        pattern: &[String],
        from: usize,
        at_end: bool,
    ) -> Option<(usize, Fuzz)> {
        if pattern.len() > lines.len() {
            return None;
        }
        let last_start = lines.len() - pattern.len();
        for fuzz in Fuzz::ALL {
            let matches_at = |i: usize| {
                (0..pattern.len()).all(|k| fuzz.normal(&lines[i + k]) == fuzz.normal(&pattern[k]))
            };
            if at_end && last_start >= from && matches_at(last_start) {
                return Some((last_start, fuzz));
            }
            if let Some(i) = (from..=last_start).find(|i| matches_at(*i)) {
                return Some((i, fuzz));
            }
        }
        None
    }

    /// The linear matcher answers exactly as the reference on many small files and patterns
    /// drawn from a few lines and their whitespace variants.
    #[test]
    fn linear_matching_finds_what_comparing_everywhere_finds() {
        let words = ["a", "a ", " a", "b", "b\t", "", " "];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        for _ in 0..20_000 {
            let lines: Vec<String> = (0..next(12))
                .map(|_| words[next(words.len())].to_owned())
                .collect();
            let pattern: Vec<String> = (0..next(4))
                .map(|_| words[next(words.len())].to_owned())
                .collect();
            let from = next(lines.len() + 2);
            let at_end = next(2) == 0;
            let mut matcher = Matcher::new(&lines, "f", MatchLimits::default());
            assert_eq!(
                matcher.seek(&pattern, from, at_end).unwrap(),
                naive_seek(&lines, &pattern, from, at_end),
                "{lines:?} {pattern:?} from {from} at_end {at_end}"
            );
        }
    }

    #[test]
    fn oversized_patches_and_diffs_are_refused() {
        let body = "+x\n".repeat(MAX_PATCH_BYTES / 3 + 1);
        let e = parse(&format!(
            "*** Begin Patch\n*** Add File: a\n{body}*** End Patch\n"
        ))
        .unwrap_err();
        assert_eq!(e.kind, "invalid_input");
        assert!(e.message.contains("bytes"), "{}", e.message);
        assert!(parse_create(&body).is_err());
        let lines: Vec<&str> = body.lines().collect();
        assert!(parse_hunks(&lines, 1).is_err());
        let fits = "+x\n".repeat(MAX_PATCH_BYTES / 3 - 100);
        assert!(parse_create(&fits).is_ok());
    }

    #[test]
    fn create_diffs_need_plus_lines() {
        assert_eq!(parse_create("+a\n+b\n").unwrap(), "a\nb\n");
        assert!(parse_create("+a\nb\n").is_err());
    }
}
