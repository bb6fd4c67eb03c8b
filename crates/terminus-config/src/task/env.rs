//! `${VAR}` in a task's environment values: resolved from the host only for the variables the
//! job lets through, and the host reads a task would make listed for `tasks check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::schema::{MAX_TOML_BYTES, TaskToml};
use crate::host_env::{self, HostEnv, HostRead};

/// A `${VAR}` of a task's environment that the host does not set and that has no default.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` = \"${{{var}}}\": the host environment has no `{var}` (give it a default with `${{{var}:-value}}`)")]
pub struct MissingVariable {
    /// The key's path, `environment.env.API_URL`.
    pub key: String,
    pub var: String,
}

/// Resolves Harbor's env templates: a value that is exactly `${VAR}` or `${VAR:-default}` takes
/// the host's `VAR` (else the default); any other value is literal. `section` names the table
/// for errors (`environment.env`).
pub fn resolve_env(
    section: &str,
    env: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, MissingVariable> {
    env.iter()
        .map(|(key, value)| {
            let resolved = match env_template(value) {
                Some((var, default)) => match (lookup(var), default) {
                    (Some(found), _) => found,
                    (None, Some(default)) => default.to_string(),
                    (None, None) => {
                        return Err(MissingVariable { key: format!("{section}.{key}"), var: var.to_string() });
                    }
                },
                None => value.clone(),
            };
            Ok((key.clone(), resolved))
        })
        .collect()
}

/// [`resolve_env`] against this process's environment, as far as the job passes it (a variable
/// not passed reads as unset: its default, else an error; [`HostEnv::refusal`] names those first).
pub fn resolve_host_env(
    section: &str,
    env: &BTreeMap<String, String>,
    host: &HostEnv,
) -> Result<BTreeMap<String, String>, MissingVariable> {
    resolve_env(section, env, |var| host.lookup(var))
}

/// `${VAR}` → (VAR, None); `${VAR:-x}` → (VAR, Some(x)); anything else → None. The name is
/// anything up to the first `}` or `:` (Harbor's pattern), the default anything after `:-`.
pub(super) fn env_template(value: &str) -> Option<(&str, Option<&str>)> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    let (name, default) = match inner.find(':') {
        Some(at) => (&inner[..at], Some(inner[at..].strip_prefix(":-")?)),
        None => (inner, None),
    };
    if name.is_empty() || name.contains('}') || default.is_none() && inner.contains('}') {
        return None;
    }
    Some((name, default))
}

/// The variables terminus gives a compose file itself (Harbor's): never read from the host.
pub(super) const COMPOSE_OWN_VARIABLES: [&str; 11] = [
    "CONTEXT_DIR",
    "MAIN_IMAGE_NAME",
    "PREBUILT_IMAGE_NAME",
    "CPUS",
    "MEMORY",
    "HOST_VERIFIER_LOGS_PATH",
    "HOST_AGENT_LOGS_PATH",
    "HOST_ARTIFACTS_PATH",
    "ENV_VERIFIER_LOGS_PATH",
    "ENV_AGENT_LOGS_PATH",
    "ENV_ARTIFACTS_PATH",
];

/// Every variable the task of `config` in `task_dir` reads from the host.
pub(super) fn host_reads(task_dir: &Path, config: &TaskToml) -> Vec<HostRead> {
    let mut reads = Vec::new();
    let mut table = |section: &str, env: &BTreeMap<String, String>| {
        for (key, value) in env {
            if let Some((var, default)) = env_template(value) {
                let key = format!("{section}.{key}");
                reads.push(HostRead { key, var: var.to_string(), has_default: default.is_some() });
            }
        }
    };
    table("environment.env", &config.environment.env);
    table("verifier.env", &config.verifier.env);
    table("solution.env", &config.solution.env);
    for step in config.steps.iter().flatten() {
        table(&format!("steps.{}.verifier.env", step.name), &step.verifier.env);
    }
    if let Some(env) = &config.verifier.environment {
        table("verifier.environment.env", &env.env);
    }
    let mut compose = |dir: PathBuf, own: &BTreeMap<String, String>| {
        let rel = format!("{}/docker-compose.yaml", dir.strip_prefix(task_dir).unwrap_or(&dir).display());
        let Ok(text) = terminus_core::tree::read_text(&dir, "docker-compose.yaml", MAX_TOML_BYTES) else { return };
        for (var, has_default) in host_env::compose_variables(&text) {
            // The task's own env table answers first, and terminus sets its own variables.
            if !own.contains_key(&var) && !COMPOSE_OWN_VARIABLES.contains(&var.as_str()) {
                reads.push(HostRead { key: rel.clone(), var, has_default });
            }
        }
    };
    let environment_dir = task_dir.join("environment");
    compose(environment_dir.clone(), &config.environment.env);
    if let Some(verifier) = config.verifier_environment(task_dir, None)
        && verifier.dir != environment_dir
    {
        compose(verifier.dir, &verifier.config.env);
    }
    reads
}
