//! Identifiers of jobs and trials.
//!
//! Trial names follow Harbor's scheme, `<task name, at most 32 chars>__<7 random chars>`, so that
//! tools written for Harbor job directories find what they expect.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The UUID of one job run, stamped on its result file and on every container it creates
/// (label `terminus.job_id`), so leaked containers can be found by job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub uuid::Uuid);

impl JobId {
    pub fn new() -> JobId {
        JobId(uuid::Uuid::new_v4())
    }
}

impl Default for JobId {
    fn default() -> Self {
        JobId::new()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The unique name of a trial inside its job; also its directory name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrialName(pub String);

impl TrialName {
    /// Builds a Harbor-style name from the task name and a random suffix.
    pub fn generate(task_name: &str) -> TrialName {
        TrialName::with_suffix(task_name, &random_suffix(7))
    }

    /// Builds the name from an explicit suffix (used by tests and by [`TrialName::generate`]).
    pub fn with_suffix(task_name: &str, suffix: &str) -> TrialName {
        let short = task_name.rsplit('/').next().unwrap_or(task_name);
        let prefix: String = short.chars().take(32).collect();
        let prefix = prefix.trim_end_matches(['_', '-']);
        TrialName(format!("{prefix}__{suffix}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TrialName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Random alphanumeric characters, drawn from a v4 UUID so this crate needs no RNG of its own.
fn random_suffix(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut out = String::with_capacity(len);
    while out.len() < len {
        for byte in uuid::Uuid::new_v4().as_bytes() {
            if out.len() == len {
                break;
            }
            out.push(ALPHABET[*byte as usize % ALPHABET.len()] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_name_truncates_and_strips_like_harbor() {
        let name = TrialName::with_suffix("org/a-very-long-task-name-that-goes-on-and-on", "AbC3xYz");
        assert_eq!(name.as_str(), "a-very-long-task-name-that-goes__AbC3xYz");
        let name = TrialName::with_suffix("hello_-", "x");
        assert_eq!(name.as_str(), "hello__x");
    }

    #[test]
    fn generated_names_differ() {
        let a = TrialName::generate("hello-world");
        let b = TrialName::generate("hello-world");
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("hello-world__"));
        assert_eq!(a.as_str().len(), "hello-world__".len() + 7);
    }
}
