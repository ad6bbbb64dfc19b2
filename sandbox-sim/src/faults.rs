//! Faults and latency as inputs: rules matched against each request's operation name.
//!
//! A fault plan is written as text (`cargo xtask sim --faults SPEC`) or built in code. SPEC is
//! rules separated by `;`, each `OPERATION=FAULT[@SKIP][#TIMES]`:
//!
//! | fault | what the simulator does |
//! | --- | --- |
//! | `500`, `503`, … | answers that status with the provider's error body, without acting |
//! | `429:SECS` | answers 429 with `Retry-After: SECS`, without acting |
//! | `reset` | closes the connection before acting or answering |
//! | `reset-after` | acts, then closes the connection without answering (the ambiguous case) |
//! | `delay:MS` | acts, then answers MS milliseconds later (a create answered late) |
//! | `stall:MS` | waits MS milliseconds, then acts and answers (a slow operation) |
//! | `cut:BYTES` | acts, answers, and closes the connection after BYTES bytes of body (of frames, on a WebSocket) |
//! | `silence` | acts, sends the head, then never sends a body byte (nor a frame, on a WebSocket) |
//! | `malformed` | acts, answers its status with a body that is not valid JSON |
//!
//! `OPERATION` is the name the simulator gives the request (its docs list them) or `*` for any.
//! `@SKIP` lets the first SKIP matching requests through; `#TIMES` applies the fault that many
//! times, then the rule is spent (without it the rule never runs out). The first live rule that
//! matches wins. Example: `create=delay:3000#1;exec=429:1@2`.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a simulator does to one request instead of (or around) answering it normally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answers this status with the provider's error body, without acting.
    Status {
        /// The HTTP status.
        code: u16,
        /// The `Retry-After` header, in seconds.
        retry_after: Option<u64>,
    },
    /// Closes the connection before acting or answering.
    Reset,
    /// Acts, then closes the connection without answering.
    ResetAfter,
    /// Acts, then answers this much later.
    Delay(Duration),
    /// Waits this long, then acts and answers.
    Stall(Duration),
    /// Acts and answers, closing the connection after this many body bytes.
    Cut(usize),
    /// Acts and sends the head, then never a body byte.
    Silence,
    /// Acts and answers its status with a body that is not valid JSON.
    Malformed,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Status {
                code,
                retry_after: Some(secs),
            } => write!(f, "{code}:{secs}"),
            Fault::Status { code, .. } => write!(f, "{code}"),
            Fault::Reset => f.write_str("reset"),
            Fault::ResetAfter => f.write_str("reset-after"),
            Fault::Delay(d) => write!(f, "delay:{}", d.as_millis()),
            Fault::Stall(d) => write!(f, "stall:{}", d.as_millis()),
            Fault::Cut(n) => write!(f, "cut:{n}"),
            Fault::Silence => f.write_str("silence"),
            Fault::Malformed => f.write_str("malformed"),
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> Result<Fault, String> {
        let (name, arg) = match text.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (text, None),
        };
        let number = |what: &str| -> Result<u64, String> {
            arg.ok_or_else(|| format!("fault {text:?} needs {what} after ':'"))?
                .parse()
                .map_err(|_| format!("fault {text:?}: {what} must be a whole number"))
        };
        let no_arg = |fault: Fault| match arg {
            None => Ok(fault),
            Some(_) => Err(format!("fault {name:?} takes no argument")),
        };
        match name {
            "reset" => no_arg(Fault::Reset),
            "reset-after" => no_arg(Fault::ResetAfter),
            "silence" => no_arg(Fault::Silence),
            "malformed" => no_arg(Fault::Malformed),
            "delay" => Ok(Fault::Delay(Duration::from_millis(number("milliseconds")?))),
            "stall" => Ok(Fault::Stall(Duration::from_millis(number("milliseconds")?))),
            "cut" => Ok(Fault::Cut(number("a byte count")? as usize)),
            code => match code.parse::<u16>() {
                Ok(code) if (400..=599).contains(&code) => Ok(Fault::Status {
                    code,
                    retry_after: arg.map(|_| number("seconds")).transpose()?,
                }),
                _ => Err(format!(
                    "unknown fault {text:?}: expected a status 400-599 (429:SECS for Retry-After), \
                     reset, reset-after, delay:MS, stall:MS, cut:BYTES, silence or malformed"
                )),
            },
        }
    }
}

/// One rule of a [`FaultPlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// The operation it applies to, or `*` for any.
    pub operation: String,
    /// What to do.
    pub fault: Fault,
    /// Matching requests let through before the fault applies.
    pub skip: u32,
    /// How many times it applies; `None` for every time.
    pub times: Option<u32>,
}

impl FaultRule {
    /// A rule applying `fault` to every request of `operation` (`*` for any).
    pub fn new(operation: impl Into<String>, fault: Fault) -> FaultRule {
        FaultRule {
            operation: operation.into(),
            fault,
            skip: 0,
            times: None,
        }
    }

    /// Lets the first `n` matching requests through.
    pub fn skip(mut self, n: u32) -> FaultRule {
        self.skip = n;
        self
    }

    /// Applies the fault `n` times only.
    pub fn times(mut self, n: u32) -> FaultRule {
        self.times = Some(n);
        self
    }
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.operation, self.fault)?;
        if self.skip > 0 {
            write!(f, "@{}", self.skip)?;
        }
        if let Some(n) = self.times {
            write!(f, "#{n}")?;
        }
        Ok(())
    }
}

impl FromStr for FaultRule {
    type Err = String;

    fn from_str(text: &str) -> Result<FaultRule, String> {
        let (operation, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("fault rule {text:?} is not OPERATION=FAULT"))?;
        let operation = operation.trim();
        if operation.is_empty() {
            return Err(format!("fault rule {text:?} names no operation"));
        }
        let (rest, times) = match rest.split_once('#') {
            Some((r, n)) => (
                r,
                Some(
                    n.trim()
                        .parse()
                        .map_err(|_| format!("fault rule {text:?}: #TIMES must be a number"))?,
                ),
            ),
            None => (rest, None),
        };
        let (fault, skip) = match rest.split_once('@') {
            Some((f, n)) => (
                f,
                n.trim()
                    .parse()
                    .map_err(|_| format!("fault rule {text:?}: @SKIP must be a number"))?,
            ),
            None => (rest, 0),
        };
        Ok(FaultRule {
            operation: operation.to_owned(),
            fault: fault.trim().parse()?,
            skip,
            times,
        })
    }
}

#[derive(Debug)]
struct Live {
    rule: FaultRule,
    seen: u32,
    applied: u32,
}

/// The faults a running simulator applies; shared, so a test can change them while it runs.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    rules: Arc<Mutex<Vec<Live>>>,
}

impl FaultPlan {
    /// A plan with no faults.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    /// Parses SPEC (see the [module docs](self)).
    pub fn parse(spec: &str) -> Result<FaultPlan, String> {
        let plan = FaultPlan::new();
        for rule in spec.split(';').map(str::trim).filter(|r| !r.is_empty()) {
            plan.add(rule.parse()?);
        }
        Ok(plan)
    }

    /// Adds a rule after the existing ones.
    pub fn add(&self, rule: FaultRule) -> &FaultPlan {
        self.lock().push(Live {
            rule,
            seen: 0,
            applied: 0,
        });
        self
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The fault for the next request of `operation`, counting it against the rules.
    pub fn next(&self, operation: &str) -> Option<Fault> {
        let mut rules = self.lock();
        for live in rules.iter_mut() {
            let rule = &live.rule;
            if rule.operation != "*" && rule.operation != operation {
                continue;
            }
            if rule.times.is_some_and(|n| live.applied >= n) {
                continue;
            }
            live.seen += 1;
            if live.seen <= rule.skip {
                continue;
            }
            live.applied += 1;
            return Some(rule.fault.clone());
        }
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Live>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules = self.lock();
        let text: Vec<String> = rules.iter().map(|l| l.rule.to_string()).collect();
        f.write_str(&text.join(";"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_round_trips_through_text() {
        let spec = "create=delay:3000#1;exec=429:1@2;*=reset-after;files.read=cut:100;list=503";
        let plan = FaultPlan::parse(spec).unwrap();
        assert_eq!(plan.to_string(), spec);
    }

    #[test]
    fn skip_and_times_count_matching_requests_only() {
        let plan = FaultPlan::parse("exec=500@1#2").unwrap();
        assert_eq!(plan.next("list"), None);
        assert_eq!(plan.next("exec"), None);
        let fault = Some(Fault::Status {
            code: 500,
            retry_after: None,
        });
        assert_eq!(plan.next("exec"), fault);
        assert_eq!(plan.next("exec"), fault);
        assert_eq!(plan.next("exec"), None);
    }

    #[test]
    fn the_first_live_rule_wins_and_star_matches_any() {
        let plan = FaultPlan::parse("create=silence#1;*=stall:5").unwrap();
        assert_eq!(plan.next("create"), Some(Fault::Silence));
        assert_eq!(
            plan.next("create"),
            Some(Fault::Stall(Duration::from_millis(5)))
        );
        assert_eq!(
            plan.next("kill"),
            Some(Fault::Stall(Duration::from_millis(5)))
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (spec, says) in [
            ("create", "OPERATION=FAULT"),
            ("=reset", "names no operation"),
            ("create=teapot", "unknown fault"),
            ("create=200", "unknown fault"),
            ("create=delay", "needs milliseconds"),
            ("create=delay:soon", "whole number"),
            ("create=reset:1", "takes no argument"),
            ("create=reset#x", "#TIMES"),
            ("create=reset@x", "@SKIP"),
        ] {
            let err = FaultPlan::parse(spec).unwrap_err();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }
}
