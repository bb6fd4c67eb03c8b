//! Harbor 0.26 job keys terminus has no use for: each is named when a job file sets it.
//!
//! A job file written for Harbor may hold keys of features terminus lacks (skills, MCP servers,
//! run-specific allowlist hosts, regrades…). Left to the generic "unknown key" warning they would read
//! like typos; refused outright, a Harbor job file that merely restates a default (as Harbor's
//! own `config.json` does, with every key present) could not run. So each key is looked up in
//! one table: at its Harbor default (null, false, an empty list or map, or the default string)
//! it means what terminus does anyway and passes silently; set otherwise, it is a warning that
//! says what terminus does instead, or — where running without it would give results that
//! silently mean something else — an error naming the key.

use serde_json::Value;

/// Where a key lives in the job file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    Job,
    Environment,
    Verifier,
    Agent,
    Dataset,
    Task,
}

/// What a set (non-default) value leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Treatment {
    /// Accepted with a warning that says what terminus does instead.
    Warn(&'static str),
    /// Refused: the job would mean something else without it.
    Refuse(&'static str),
}

struct HarborKey {
    scope: Scope,
    name: &'static str,
    /// The default besides null, false, `[]` and `{}` (a string), if the key has one.
    default: Option<&'static str>,
    treatment: Treatment,
}

const fn key(scope: Scope, name: &'static str, treatment: Treatment) -> HarborKey {
    HarborKey { scope, name, default: None, treatment }
}

use Scope::{Agent, Dataset, Environment, Job, Task, Verifier};
use Treatment::{Refuse, Warn};

const ALL_LOGS: &str = "every log file is downloaded (within environment.max_log_mb and max_log_files)";
const PACKAGE_ONLY: &str =
    "has a meaning only for package datasets and tasks (the Harbor hub's), which terminus does not run";
const NEVER_OVERWRITTEN: &str =
    "tasks fetched from git are kept per commit and checked when fetched, so there is nothing to overwrite";
const CACHED: &str =
    "tasks fetched from git go to terminus's task cache (TERMINUS_CACHE_DIR, default ~/.cache/terminus)";

/// Every Harbor 0.26 `JobConfig` key (and key of its agent, environment, verifier, dataset and
/// task configs) that terminus does not read into a field.
const KEYS: &[HarborKey] = &[
    key(Job, "install_only", Refuse("terminus always runs the agent and the verifier; remove install_only")),
    key(Job, "user_agent", Refuse("simulated-user agents are not supported")),
    key(Job, "source_jobs", Refuse("regrade and diff jobs are not supported")),
    key(Job, "plugins", Warn("deprecated and ignored by Harbor too; terminus has no plugins")),
    key(Agent, "skip_model_parsing", Warn("terminus always reads the provider/ prefix of model_name")),
    key(
        Agent,
        "n_concurrent",
        Warn("per-agent concurrency caps are not supported; n_concurrent_trials and llm.max_concurrent_requests apply"),
    ),
    key(
        Agent,
        "concurrency_group",
        Warn("per-agent concurrency pools are not supported; n_concurrent_trials and llm limits apply"),
    ),
    key(Agent, "load_trajectory", Refuse("starting from a stored trajectory is not supported")),
    key(Agent, "include_logs", Warn(ALL_LOGS)),
    key(Agent, "exclude_logs", Warn(ALL_LOGS)),
    key(Environment, "import_path", Refuse("custom environment classes are not supported; only docker")),
    key(Environment, "stream", Warn("terminus does not stream the environment's output; ignored")),
    HarborKey {
        scope: Environment,
        name: "cpu_enforcement_policy",
        default: Some("auto"),
        treatment: Warn("override_cpus is always a hard Docker limit"),
    },
    HarborKey {
        scope: Environment,
        name: "memory_enforcement_policy",
        default: Some("auto"),
        treatment: Warn("override_memory_mb is always a hard Docker limit"),
    },
    key(Environment, "override_tpu", Refuse("the Docker environment has no TPUs")),
    key(Environment, "mounts", Refuse("extra mounts are not supported")),
    key(Environment, "mounts_json", Refuse("extra mounts are not supported")),
    key(Environment, "extra_docker_compose", Refuse("Docker Compose overlays are not supported")),
    key(Environment, "suppress_override_warnings", Warn("deprecated in Harbor, where it has no effect either")),
    key(Verifier, "import_path", Refuse("custom verifier classes are not supported")),
    key(Verifier, "kwargs", Warn("only a custom verifier (import_path) takes kwargs; ignored")),
    key(Verifier, "include_logs", Warn(ALL_LOGS)),
    key(Verifier, "exclude_logs", Warn(ALL_LOGS)),
    key(Dataset, "ref", Warn(PACKAGE_ONLY)),
    key(Dataset, "overwrite", Warn(NEVER_OVERWRITTEN)),
    key(Dataset, "download_dir", Warn(CACHED)),
    key(Task, "ref", Warn(PACKAGE_ONLY)),
    key(Task, "overwrite", Warn(NEVER_OVERWRITTEN)),
    key(Task, "download_dir", Warn(CACHED)),
];

/// One step of a key path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// The steps of a path serde_ignored reports (its `?` steps for `Option`s dropped).
pub(crate) fn segments(path: &serde_ignored::Path) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut at = Some(path);
    while let Some(path) = at {
        at = match path {
            serde_ignored::Path::Root => None,
            serde_ignored::Path::Seq { parent, index } => {
                out.push(Segment::Index(*index));
                Some(*parent)
            }
            serde_ignored::Path::Map { parent, key } => {
                out.push(Segment::Key(key.clone()));
                Some(*parent)
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => Some(*parent),
        };
    }
    out.reverse();
    out
}

/// A path as error messages write keys: `agents[0].skills`.
pub(crate) fn display(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Key(key) if out.is_empty() => out.push_str(key),
            Segment::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    if out.is_empty() { "(top level)".to_string() } else { out }
}

/// The value at `segments` in `root`.
pub(crate) fn lookup<'a>(root: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments.iter().try_fold(root, |value, segment| match segment {
        Segment::Key(key) => value.get(key.as_str()),
        Segment::Index(index) => value.get(*index),
    })
}

/// What a key terminus has no field for comes to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A Harbor key at its default: it means what terminus does.
    Accepted,
    /// A Harbor key that is set: the warning, which names it.
    Warning(String),
    /// A Harbor key terminus cannot honour: the message for an error on that key.
    Refused(String),
    /// Not a Harbor 0.26 key.
    Unknown,
}

/// The block of the job file the key at `segments` lives in (None: one without Harbor keys).
fn scope(segments: &[Segment]) -> Option<Scope> {
    Some(match segments {
        [Segment::Key(_)] => Job,
        [Segment::Key(block), Segment::Key(_)] if block == "environment" => Environment,
        [Segment::Key(block), Segment::Key(_)] if block == "verifier" => Verifier,
        [Segment::Key(list), Segment::Index(_), Segment::Key(_)] if list == "agents" => Agent,
        [Segment::Key(list), Segment::Index(_), Segment::Key(_)] if list == "datasets" => Dataset,
        [Segment::Key(list), Segment::Index(_), Segment::Key(_)] if list == "tasks" => Task,
        _ => return None,
    })
}

/// The Harbor keys of the block the key at `segments` lives in, and the names terminus reads
/// there (`own`, by block: job, environment, verifier, agent, dataset, task).
pub(crate) fn names_beside(segments: &[Segment], own: [&'static [&'static str]; 6]) -> Vec<&'static str> {
    let Some(scope) = scope(segments) else { return Vec::new() };
    let index = [Job, Environment, Verifier, Agent, Dataset, Task].iter().position(|s| *s == scope).unwrap_or(0);
    let harbor = KEYS.iter().filter(|k| k.scope == scope).map(|k| k.name);
    own[index].iter().copied().chain(harbor).collect()
}

/// Judges the key at `segments` whose value is `value`.
pub(crate) fn judge(segments: &[Segment], value: Option<&Value>) -> Verdict {
    let Some(scope) = scope(segments) else { return Verdict::Unknown };
    let Some(Segment::Key(name)) = segments.last() else { return Verdict::Unknown };
    let Some(entry) = KEYS.iter().find(|k| k.scope == scope && k.name == name) else { return Verdict::Unknown };
    let at_default = match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::Array(items)) => items.is_empty(),
        Some(Value::Object(map)) => map.is_empty(),
        Some(Value::String(text)) => entry.default == Some(text.as_str()),
        Some(_) => false,
    };
    match entry.treatment {
        _ if at_default => Verdict::Accepted,
        Warn(what) => Verdict::Warning(format!("{}: Harbor key not acted on by terminus: {what}", display(segments))),
        Refuse(why) => Verdict::Refused(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(text: &str) -> Vec<Segment> {
        text.split('.')
            .map(|s| match s.parse::<usize>() {
                Ok(i) => Segment::Index(i),
                Err(_) => Segment::Key(s.to_string()),
            })
            .collect()
    }

    #[test]
    fn defaults_pass_set_values_are_named_and_others_are_unknown() {
        assert_eq!(judge(&path("agents.0.include_logs"), Some(&json!([]))), Verdict::Accepted);
        let Verdict::Warning(w) = judge(&path("agents.1.include_logs"), Some(&json!(["s"]))) else { panic!() };
        assert!(w.starts_with("agents[1].include_logs: Harbor key"), "{w}");
        assert_eq!(judge(&path("environment.cpu_enforcement_policy"), Some(&json!("auto"))), Verdict::Accepted);
        assert!(matches!(
            judge(&path("environment.cpu_enforcement_policy"), Some(&json!("limit"))),
            Verdict::Warning(_)
        ));
        assert!(matches!(judge(&path("install_only"), Some(&json!(true))), Verdict::Refused(_)));
        assert_eq!(judge(&path("install_only"), Some(&json!(false))), Verdict::Accepted);
        assert!(matches!(judge(&path("datasets.0.ref"), Some(&json!("latest"))), Verdict::Warning(_)));
        assert_eq!(judge(&path("colour"), Some(&json!("blue"))), Verdict::Unknown);
        assert_eq!(judge(&path("agents.0.kwargs.skills"), Some(&json!(["s"]))), Verdict::Unknown, "not a Harbor key");
        assert_eq!(display(&path("agents.0.mcp_servers")), "agents[0].mcp_servers");
    }
}
