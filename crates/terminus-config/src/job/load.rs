//! Reading a job: a job file layered over the built-in defaults, a stored configuration
//! (resume), or flags alone; secrets a dump redacted put back from the environment.

use std::path::Path;

use serde_json::{Map, Value};

use super::overrides::Overrides;
use super::spec::*;
use super::typos;
use crate::error::ConfigError;
use crate::harbor_keys::{self, Verdict};
use crate::raw::RawJob;
use crate::serde_message::strip_serde_position;

/// The built-in defaults, layered under every job file.
pub(super) const DEFAULTS: &str = include_str!("../../default.yaml");

/// Puts back what a config dump redacted, under every secret-looking key of `value`: a
/// `${NAME}` template from the variable `NAME`, a mask (`****`, `sk****ef`) from the variable
/// named like its key. The first that cannot be is returned: (its key's path, the variable).
pub(super) fn restore_secrets(
    value: &mut Value,
    at: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), (String, String)> {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                match inner {
                    Value::String(text) if terminus_core::secrets::is_secret_key(key) => {
                        let var = match text.strip_prefix("${").and_then(|t| t.strip_suffix('}')) {
                            Some(name) => name.to_string(),
                            None if is_mask(text) => key.clone(),
                            None => continue,
                        };
                        *text = lookup(&var).ok_or((path, var))?;
                    }
                    _ => restore_secrets(inner, &path, lookup)?,
                }
            }
        }
        Value::Array(items) => {
            for (idx, item) in items.iter_mut().enumerate() {
                restore_secrets(item, &format!("{at}[{idx}]"), lookup)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// What [`terminus_core::secrets::mask`] leaves of a value.
pub(super) fn is_mask(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    text == "****" || chars.len() == 8 && chars[2..6].iter().all(|c| *c == '*')
}

pub(super) fn unresolved_secret(var: &str) -> String {
    format!(
        "stored redacted, and `{var}` is not set: set it in the environment, or resume with the job file (`terminus resume JOB_DIR -c job.yaml`)"
    )
}

impl JobSpec {
    /// Reads and validates a job file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<JobSpec, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        JobSpec::from_yaml(path, &text, overrides)
    }

    /// Validates YAML text; `path` is only used in messages. Layers: the built-in defaults, the
    /// text, then `TERMINUS__…` environment variables.
    pub fn from_yaml(path: &Path, text: &str, overrides: &Overrides) -> Result<JobSpec, ConfigError> {
        let file_only = parse_yaml(path, text)?;
        let value = layered(path, text)?;
        let mut ignored = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let mut raw: RawJob =
            serde_ignored::deserialize(serde_path_to_error::Deserializer::new(&value, &mut track), |p| {
                ignored.push(harbor_keys::segments(&p))
            })
            .map_err(|e| {
                ConfigError::invalid(
                    path,
                    display_path(&track.path().to_string()),
                    strip_serde_position(&e.to_string()),
                )
            })?;
        // Keys without a field: Harbor's are judged by name (harbor_keys.rs), the rest are typos.
        let mut warnings = Vec::new();
        for segments in &ignored {
            match harbor_keys::judge(segments, harbor_keys::lookup(&value, segments)) {
                Verdict::Accepted => {}
                Verdict::Warning(warning) => warnings.push(warning),
                Verdict::Refused(why) => return Err(ConfigError::invalid(path, harbor_keys::display(segments), why)),
                Verdict::Unknown => match typos::meant(segments) {
                    Some(meant) => {
                        let why = format!("unknown key; did you mean `{meant}`?");
                        return Err(ConfigError::invalid(path, harbor_keys::display(segments), why));
                    }
                    None => warnings.push(format!("{}: unknown key, ignored", harbor_keys::display(segments))),
                },
            }
        }
        overrides.apply(&mut raw);
        JobSpec::from_raw(path, raw, &file_only, overrides, warnings)
    }

    /// A job from the command line alone (`terminus run -p … -a … -m …`).
    pub fn from_flags(overrides: &Overrides) -> Result<JobSpec, ConfigError> {
        JobSpec::from_yaml(Path::new("(command line)"), "", overrides)
    }

    /// The job stored in a job directory's `config.json`, placed at that directory (whatever
    /// `jobs_dir` and `job_name` it records), with `overrides` applied.
    pub fn from_job_dir(job_dir: &Path, overrides: &Overrides) -> Result<JobSpec, ConfigError> {
        let path = terminus_core::layout::JobDir::new(job_dir).config_json();
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
        let overrides = Overrides { ..overrides.clone().placed_at(job_dir) };
        // Secrets were stored redacted: each comes back from this process's environment, or the
        // resume is refused (a trial run with `****` for a token would score 0 silently).
        let mut stored: Value = serde_json::from_str(&text)
            .map_err(|e| ConfigError::invalid(&path, "(file)", format!("not a stored configuration: {e}")))?;
        restore_secrets(&mut stored, "", &|name| std::env::var(name).ok())
            .map_err(|(key, var)| ConfigError::invalid(&path, key, unresolved_secret(&var)))?;
        // JSON is YAML: the stored configuration loads through the same path as a job file.
        JobSpec::from_yaml(&path, &stored.to_string(), &overrides)
    }
}

/// The merged layers (defaults, file, environment) through the `config` crate.
pub(super) fn layered(path: &Path, text: &str) -> Result<Value, ConfigError> {
    let mut builder = config::Config::builder().add_source(config::File::from_str(DEFAULTS, config::FileFormat::Yaml));
    if !text.trim().is_empty() {
        builder = builder.add_source(config::File::from_str(text, config::FileFormat::Yaml));
    }
    let builder = builder.add_source(
        config::Environment::with_prefix("TERMINUS").prefix_separator("__").separator("__").try_parsing(true),
    );
    build_mapping(path, builder)
}

/// Parses YAML through the `config` crate (the design card's configuration library) into JSON.
pub(super) fn parse_yaml(path: &Path, text: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    build_mapping(path, config::Config::builder().add_source(config::File::from_str(text, config::FileFormat::Yaml)))
}

/// Builds the sources into JSON, whose top level must be a mapping; errors name `path`.
pub(super) fn build_mapping(
    path: &Path,
    builder: config::ConfigBuilder<config::builder::DefaultState>,
) -> Result<Value, ConfigError> {
    let syntax = |message: String| ConfigError::Syntax { path: path.into(), message };
    let value: Value = builder.build().and_then(|built| built.try_deserialize()).map_err(|e| syntax(e.to_string()))?;
    if !value.is_object() {
        return Err(syntax("the top level must be a mapping".into()));
    }
    Ok(value)
}

/// serde_path_to_error writes `.` for the root; messages read better with the key alone.
pub(super) fn display_path(path: &str) -> String {
    if path == "." { "(top level)".to_string() } else { path.to_string() }
}
