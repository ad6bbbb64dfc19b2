//! A tiny argument parser: a task takes the flags it knows and [`Args::finish`] rejects the rest.

use crate::Result;

/// The command-line arguments after `cargo xtask`.
#[derive(Debug)]
pub struct Args {
    rest: Vec<String>,
}

impl Args {
    /// The process's arguments, without the program name.
    pub fn from_env() -> Args {
        Args::new(std::env::args().skip(1))
    }

    /// Arguments from any list (for tests).
    pub fn new<I, S>(args: I) -> Args
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Args {
            rest: args.into_iter().map(Into::into).collect(),
        }
    }

    /// Takes the first argument when it is not a flag: the task's name.
    pub fn subcommand(&mut self) -> Option<String> {
        match self.rest.first() {
            Some(first) if !first.starts_with('-') => Some(self.rest.remove(0)),
            Some(first) if matches!(first.as_str(), "-h" | "--help") => Some(self.rest.remove(0)),
            _ => None,
        }
    }

    /// Takes a boolean flag such as `--json`; true when it was given.
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|arg| arg != name);
        self.rest.len() != before
    }

    /// Takes `--name VALUE` or `--name=VALUE`; an error when the value is missing.
    #[allow(
        dead_code,
        reason = "for tasks that take options, such as `--provider NAME`"
    )]
    pub fn value(&mut self, name: &str) -> Result<Option<String>> {
        let prefix = format!("{name}=");
        if let Some(i) = self.rest.iter().position(|arg| arg.starts_with(&prefix)) {
            let arg = self.rest.remove(i);
            return Ok(Some(arg[prefix.len()..].to_owned()));
        }
        let Some(i) = self.rest.iter().position(|arg| arg == name) else {
            return Ok(None);
        };
        if i + 1 >= self.rest.len() {
            return Err(format!("{name} needs a value"));
        }
        let value = self.rest.remove(i + 1);
        self.rest.remove(i);
        Ok(Some(value))
    }

    /// Takes every remaining argument that is not a flag (names such as fuzz targets); fails on
    /// a flag the task did not take.
    pub fn rest(self) -> Result<Vec<String>> {
        if let Some(flag) = self.rest.iter().find(|a| a.starts_with('-')) {
            return Err(format!(
                "unexpected argument {flag} (see `cargo xtask help`)"
            ));
        }
        Ok(self.rest)
    }

    /// Every remaining argument, flags included, for a task that hands them to another program.
    pub fn passthrough(self) -> Vec<String> {
        self.rest
    }

    /// Fails when any argument was not taken by the task.
    pub fn finish(self) -> Result {
        match self.rest.as_slice() {
            [] => Ok(()),
            unknown => Err(format!(
                "unexpected argument(s): {} (see `cargo xtask help`)",
                unknown.join(" ")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_subcommand_flags_and_values() {
        let mut args = Args::new(["capabilities", "--json", "--out=x", "--mode", "fast"]);
        assert_eq!(args.subcommand().as_deref(), Some("capabilities"));
        assert!(args.flag("--json"));
        assert!(!args.flag("--json"));
        assert_eq!(args.value("--out").unwrap().as_deref(), Some("x"));
        assert_eq!(args.value("--mode").unwrap().as_deref(), Some("fast"));
        assert_eq!(args.value("--absent").unwrap(), None);
        args.finish().unwrap();
    }

    #[test]
    fn a_flag_is_not_a_subcommand() {
        let mut args = Args::new(["--json"]);
        assert_eq!(args.subcommand(), None);
        assert!(Args::new(Vec::<String>::new()).subcommand().is_none());
    }

    #[test]
    fn leftover_arguments_are_an_error_that_names_them() {
        let mut args = Args::new(["ci", "--jsno"]);
        args.subcommand();
        let err = args.finish().unwrap_err();
        assert!(err.contains("--jsno"), "{err}");
    }

    #[test]
    fn a_value_flag_without_value_is_an_error() {
        let mut args = Args::new(["--mode"]);
        assert!(args.value("--mode").unwrap_err().contains("--mode"));
    }
}
