//! Which of this process's environment variables a job lets its tasks read.
//!
//! A task may write `${VAR}` in its `[environment].env`, `[verifier].env`, `[solution].env` or
//! its compose file, and Harbor fills it from the host's environment. A task written by someone
//! else could then read the orchestrator's secrets (`${OPENAI_API_KEY}`) into a container the
//! agent controls. So a job passes only the variables it names in `environment.host_env`;
//! `host_env: all` passes every one (Harbor's behaviour) except the variables holding the job's
//! own model keys, which are passed only when listed by name.
//!
//! [`HostRead`]s are what a task asks of the host; [`HostEnv::refusal`] says, before anything
//! of the task runs, which of them the job does not allow.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::error::ConfigError;

/// The job's `environment.host_env`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostEnv {
    /// `all`: every variable not in `protected`.
    all: bool,
    /// Named in the list: passed whatever else holds.
    names: BTreeSet<String>,
    /// The job's model key variables: passed only when named.
    protected: BTreeSet<String>,
}

impl HostEnv {
    /// Every variable (Harbor's behaviour), the protected ones aside.
    pub fn all() -> HostEnv {
        HostEnv { all: true, ..HostEnv::default() }
    }

    /// Exactly these variables.
    pub fn listed<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> HostEnv {
        HostEnv { names: names.into_iter().map(Into::into).collect(), ..HostEnv::default() }
    }

    /// `environment.host_env`: a list of variable names, or `all`. Absent: none.
    pub(crate) fn from_raw(path: &Path, value: Option<&Value>) -> Result<HostEnv, ConfigError> {
        const KEY: &str = "environment.host_env";
        match value {
            None | Some(Value::Null) => Ok(HostEnv::default()),
            Some(Value::String(word)) if word == "all" => Ok(HostEnv::all()),
            Some(Value::Array(items)) => {
                let mut names = BTreeSet::new();
                for (idx, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(name) if valid_name(name) => {
                            names.insert(name.to_string());
                        }
                        _ => {
                            return Err(ConfigError::invalid(
                                path,
                                format!("{KEY}[{idx}]"),
                                format!("{item} is not an environment variable name"),
                            ));
                        }
                    }
                }
                Ok(HostEnv { names, ..HostEnv::default() })
            }
            Some(other) => {
                Err(ConfigError::invalid(path, KEY, format!("must be a list of variable names or `all`, got {other}")))
            }
        }
    }

    /// Marks variables that hold the job's model keys: with `all`, they are passed only when
    /// named too.
    pub fn protect<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, names: I) {
        self.protected.extend(names.into_iter().map(Into::into));
    }

    /// Whether a task may read `var` from the host.
    pub fn allows(&self, var: &str) -> bool {
        self.names.contains(var) || self.all && !self.protected.contains(var)
    }

    /// The host's `var`, when the job passes it and the host sets it.
    pub fn lookup(&self, var: &str) -> Option<String> {
        if self.allows(var) { std::env::var(var).ok() } else { None }
    }

    /// The first of `reads` the job does not allow and that has no default to fall back on.
    pub fn refusal<'a>(&self, reads: &'a [HostRead]) -> Option<&'a HostRead> {
        reads.iter().find(|read| !read.has_default && !self.allows(&read.var))
    }

    /// As `config.json` records it: `all`, or the names.
    pub fn to_value(&self) -> Value {
        if self.all { Value::from("all") } else { Value::from(self.names.iter().cloned().collect::<Vec<_>>()) }
    }
}

/// One variable a task reads from the host: where (`verifier.env.API_URL`, or the compose file),
/// which, and whether the task gives a default (`${VAR:-x}`) to use when it is not passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRead {
    pub key: String,
    pub var: String,
    pub has_default: bool,
}

impl std::fmt::Display for HostRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` reads the host's `{}`", self.key, self.var)
    }
}

/// Why a task cannot have the variable it asks for.
pub fn refusal_message(read: &HostRead) -> String {
    format!(
        "{read}, which the job does not pass to tasks: add `{}` to `environment.host_env` if this task may read it",
        read.var
    )
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The variables a compose file's text names (`$VAR`, `${VAR}`, `${VAR:-x}`, `${VAR-x}`; `$$` is
/// a literal `$`), in order of first use, each with whether every use has a default.
pub fn compose_variables(text: &str) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = Vec::new();
    let mut note = |name: &str, has_default: bool| match found.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 &= has_default,
        None => found.push((name.to_string(), has_default)),
    };
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else { break };
            let inner = &body[..end];
            let name_len = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(inner.len());
            let (name, modifier) = inner.split_at(name_len);
            if valid_name(name) {
                note(name, modifier.starts_with(":-") || modifier.starts_with('-'));
            }
            rest = &body[end + 1..];
        } else {
            let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            if valid_name(&after[..len]) {
                note(&after[..len], false);
            }
            rest = &after[len..];
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_passes_what_it_names_and_all_keeps_the_model_keys_back() {
        let none = HostEnv::default();
        assert!(!none.allows("HOME"));
        let mut all = HostEnv::all();
        all.protect(["OPENAI_API_KEY"]);
        assert!(all.allows("HOME") && !all.allows("OPENAI_API_KEY"));
        let mut named = HostEnv::listed(["OPENAI_API_KEY", "HF_TOKEN"]);
        named.protect(["OPENAI_API_KEY"]);
        assert!(named.allows("OPENAI_API_KEY") && named.allows("HF_TOKEN") && !named.allows("HOME"));
        let reads = [
            HostRead { key: "environment.env.X".into(), var: "HOME".into(), has_default: true },
            HostRead { key: "verifier.env.KEY".into(), var: "OPENAI_API_KEY".into(), has_default: false },
        ];
        assert_eq!(all.refusal(&reads).map(|r| r.key.as_str()), Some("verifier.env.KEY"));
        assert!(named.refusal(&reads).is_none(), "a default covers what is not passed");
        let message = refusal_message(&reads[1]);
        assert!(message.contains("`verifier.env.KEY`") && message.contains("`OPENAI_API_KEY`"), "{message}");
    }

    #[test]
    fn host_env_is_a_list_of_names_or_all() {
        let path = Path::new("job.yaml");
        assert_eq!(HostEnv::from_raw(path, None).unwrap(), HostEnv::default());
        assert_eq!(HostEnv::from_raw(path, Some(&Value::from("all"))).unwrap(), HostEnv::all());
        let listed = HostEnv::from_raw(path, Some(&serde_json::json!(["HF_TOKEN"]))).unwrap();
        assert!(listed.allows("HF_TOKEN"));
        let err = HostEnv::from_raw(path, Some(&serde_json::json!(["A B"]))).unwrap_err().to_string();
        assert!(err.contains("environment.host_env[0]"), "{err}");
        assert!(HostEnv::from_raw(path, Some(&Value::from("some"))).is_err());
    }

    #[test]
    fn compose_variables_are_found_with_their_defaults() {
        let text = "image: ${IMAGE}\nenv: [\"A=$TOKEN\", \"B=${PORT:-80}\", \"C=${PORT}\", \"D=$$NOT\", \"E=${X-y}\"]";
        assert_eq!(
            compose_variables(text),
            [("IMAGE".into(), false), ("TOKEN".into(), false), ("PORT".into(), false), ("X".into(), true)]
        );
    }
}
