//! Job-level policies: which failed trials are retried and when, how crashed trials are
//! restarted, which metrics summarise a group, and which artifacts are collected.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use terminus_core::error::TrialErrorKind;
use terminus_core::error_policy::PolicyOverride;

use std::collections::BTreeMap;

use crate::error::ConfigError;
use crate::raw::{RawErrorPolicyOverride, RawMetric, RawRetry, RawSupervision};

pub use crate::raw::AgentProcesses;

/// Harbor's retry policy, with real exponential backoff (docs/DIFFERENCES.md).
#[derive(Clone, Debug, PartialEq)]
pub struct RetrySpec {
    pub max_retries: u32,
    /// When set, only these kinds are retried.
    pub include_exceptions: Option<Vec<TrialErrorKind>>,
    /// Never retried; wins over `include_exceptions`.
    pub exclude_exceptions: Vec<TrialErrorKind>,
    pub wait_multiplier: f64,
    pub min_wait: Duration,
    pub max_wait: Duration,
}

impl Default for RetrySpec {
    fn default() -> Self {
        RetrySpec {
            max_retries: 0,
            include_exceptions: None,
            // Harbor's default exclusions; a cancellation is never retried anyway.
            exclude_exceptions: TrialErrorKind::ALL
                .into_iter()
                .filter(|kind| !kind.is_retryable_by_default() && kind.is_retryable())
                .collect(),
            wait_multiplier: 2.0,
            min_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
        }
    }
}

impl RetrySpec {
    /// Validates the `retry:` block. Exception names terminus never produces (Harbor has more)
    /// cannot match anything: each becomes a warning.
    pub(crate) fn from_raw(path: &Path, raw: &RawRetry, warnings: &mut Vec<String>) -> Result<RetrySpec, ConfigError> {
        let defaults = RetrySpec::default();
        // A name means its kind, or every kind whose failures Harbor writes under that name.
        let mut kinds = |key: &str, names: &[String]| -> Vec<TrialErrorKind> {
            let mut kinds = Vec::new();
            for (idx, name) in names.iter().enumerate() {
                let matching = TrialErrorKind::matching(name);
                if matching.is_empty() {
                    warnings.push(format!(
                        "retry.{key}[{idx}]: {name:?} is not an error terminus records, so it never matches"
                    ));
                }
                for kind in matching {
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
            }
            kinds
        };
        let include_exceptions = raw
            .include_exceptions
            .as_deref()
            .filter(|list| !list.is_empty())
            .map(|list| kinds("include_exceptions", list));
        let exclude_exceptions = match raw.exclude_exceptions.as_deref() {
            Some(list) => kinds("exclude_exceptions", list),
            None => defaults.exclude_exceptions.clone(),
        };
        let max_retries = raw.max_retries.unwrap_or(0);
        if !(0..=1000).contains(&max_retries) {
            return Err(ConfigError::invalid(
                path,
                "retry.max_retries",
                format!("must be between 0 and 1000, got {max_retries}"),
            ));
        }
        let seconds = |key: &str, value: Option<f64>, default: Duration| -> Result<Duration, ConfigError> {
            match value {
                None => Ok(default),
                Some(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v)),
                Some(v) => Err(ConfigError::invalid(
                    path,
                    format!("retry.{key}"),
                    format!("must be a non-negative number, got {v}"),
                )),
            }
        };
        let wait_multiplier = raw.wait_multiplier.unwrap_or(defaults.wait_multiplier);
        if !(wait_multiplier.is_finite() && wait_multiplier >= 1.0) {
            return Err(ConfigError::invalid(
                path,
                "retry.wait_multiplier",
                format!("must be at least 1, got {wait_multiplier}"),
            ));
        }
        Ok(RetrySpec {
            max_retries: max_retries as u32,
            include_exceptions,
            exclude_exceptions,
            wait_multiplier,
            min_wait: seconds("min_wait_sec", raw.min_wait_sec, defaults.min_wait)?,
            max_wait: seconds("max_wait_sec", raw.max_wait_sec, defaults.max_wait)?,
        })
    }

    /// Applies `override_error_policy`'s `should_retry`s to the exclusions, as Harbor 0.26 does:
    /// `true` takes a kind out of them, `false` adds it — unless the job file lists
    /// `retry.exclude_exceptions` itself, which then wins (Harbor's rule).
    pub(crate) fn apply_overrides(&mut self, policy: &ErrorPolicySpec, explicit_exclusions: bool) {
        if explicit_exclusions {
            return;
        }
        for (kind, retry) in &policy.should_retry {
            self.exclude_exceptions.retain(|k| k != kind);
            if !retry {
                self.exclude_exceptions.push(*kind);
            }
        }
        self.exclude_exceptions.sort();
    }

    /// Whether a trial that failed with `kind` on attempt `attempt` (0-based) is tried again.
    /// Cancellations never are; exclusions win over inclusions.
    pub fn should_retry(&self, kind: TrialErrorKind, attempt: u32) -> bool {
        if attempt >= self.max_retries || !kind.is_retryable() {
            return false;
        }
        if self.exclude_exceptions.contains(&kind) {
            return false;
        }
        match &self.include_exceptions {
            Some(include) => include.contains(&kind),
            None => true,
        }
    }

    /// The upper bound of the wait before retry `attempt + 1`: `min_wait × multiplier^attempt`,
    /// capped at `max_wait`. The actual wait is drawn in [bound / 2, bound] (jitter).
    pub fn backoff_bound(&self, attempt: u32) -> Duration {
        let factor = self.wait_multiplier.powi(attempt.min(64) as i32);
        self.min_wait.mul_f64(factor).min(self.max_wait)
    }

    /// A jittered wait, given a uniform draw in [0, 1).
    pub fn backoff(&self, attempt: u32, unit: f64) -> Duration {
        let bound = self.backoff_bound(attempt);
        bound.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
    }
}

/// Harbor 0.26's `override_error_policy`, read into what terminus acts on: `should_retry`
/// edits the retry exclusions (see [`RetrySpec::apply_overrides`]), `should_grade` says whether
/// a trial is still verified after the error, `has_valid_reward` whether its reward counts in
/// Harbor 0.26's score (each trial's config carries the entries, each recorded error its own).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ErrorPolicySpec {
    /// Per kind: whether to verify after it; kinds not here follow [`TrialErrorKind::still_graded`].
    pub should_grade: BTreeMap<TrialErrorKind, bool>,
    /// Per kind, the `should_retry` overrides, for [`RetrySpec::apply_overrides`].
    pub should_retry: BTreeMap<TrialErrorKind, bool>,
    /// Every entry as written, by exception name (what each trial's config records).
    pub overrides: BTreeMap<String, PolicyOverride>,
}

impl ErrorPolicySpec {
    /// Reads the overrides; a name terminus never records, or a value it cannot honour, is a
    /// warning naming the key.
    pub(crate) fn from_raw(
        raw: &BTreeMap<String, RawErrorPolicyOverride>,
        warnings: &mut Vec<String>,
    ) -> ErrorPolicySpec {
        let mut spec = ErrorPolicySpec::default();
        // Harbor's coarser names (`RuntimeError`) first, so that an entry naming a kind exactly
        // (`TmuxSessionError`) wins over them.
        let mut entries: Vec<(&String, &RawErrorPolicyOverride)> = raw.iter().collect();
        entries.sort_by_key(|(name, _)| TrialErrorKind::from_name(name).is_some());
        for (name, entry) in entries {
            spec.overrides.insert(
                name.clone(),
                PolicyOverride {
                    should_retry: entry.should_retry,
                    should_grade: entry.should_grade,
                    has_valid_reward: entry.has_valid_reward,
                },
            );
            let key = format!("override_error_policy.{name}");
            let kinds = TrialErrorKind::matching(name);
            if kinds.is_empty() {
                warnings.push(format!("{key}: {name:?} is not an error terminus records, so it never matches"));
                continue;
            }
            if entry.should_retry == Some(true) && kinds.iter().any(|kind| !kind.is_retryable()) {
                warnings.push(format!("{key}.should_retry: a {name} is never retried"));
            }
            for kind in kinds {
                if let Some(retry) = entry.should_retry {
                    spec.should_retry.insert(kind, retry);
                }
                if let Some(grade) = entry.should_grade {
                    spec.should_grade.insert(kind, grade);
                }
            }
        }
        spec
    }

    /// Whether a trial whose agent phase ended with `kind` is still verified and graded.
    pub fn still_graded(&self, kind: TrialErrorKind) -> bool {
        self.should_grade.get(&kind).copied().unwrap_or_else(|| kind.still_graded())
    }
}

/// A spending limit (`budget:` of the job or of one agent): dollars at the model's prices,
/// tokens (input and output), or both. Once one is reached, no new model call starts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BudgetSpec {
    pub max_cost_usd: Option<f64>,
    pub max_tokens: Option<u64>,
}

impl BudgetSpec {
    pub fn is_set(&self) -> bool {
        self.max_cost_usd.is_some() || self.max_tokens.is_some()
    }

    pub(crate) fn from_raw(path: &Path, key: &str, raw: &crate::raw::RawBudget) -> Result<BudgetSpec, ConfigError> {
        if let Some(cost) = raw.max_cost_usd.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(ConfigError::invalid(
                path,
                format!("{key}.max_cost_usd"),
                format!("must be a positive number, got {cost}"),
            ));
        }
        if let Some(tokens) = raw.max_tokens.filter(|t| *t <= 0) {
            return Err(ConfigError::invalid(
                path,
                format!("{key}.max_tokens"),
                format!("must be a positive integer, got {tokens}"),
            ));
        }
        Ok(BudgetSpec { max_cost_usd: raw.max_cost_usd, max_tokens: raw.max_tokens.map(|t| t as u64) })
    }
}

/// Restart policy for crashed trials, with an OTP-style intensity limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SupervisionSpec {
    pub max_restarts: u32,
    pub intensity_max_restarts: u32,
    pub intensity_window: Duration,
    /// The watchdog's slack beyond a trial's deadlines (see `TrialLimits::watchdog`).
    pub watchdog_margin: Duration,
}

impl Default for SupervisionSpec {
    fn default() -> Self {
        SupervisionSpec {
            max_restarts: 1,
            intensity_max_restarts: 10,
            intensity_window: Duration::from_secs(60),
            watchdog_margin: Duration::from_secs(300),
        }
    }
}

impl SupervisionSpec {
    pub(crate) fn from_raw(path: &Path, raw: &RawSupervision) -> Result<SupervisionSpec, ConfigError> {
        let defaults = SupervisionSpec::default();
        let count = |key: &str, value: Option<i64>, default: u32| -> Result<u32, ConfigError> {
            match value {
                None => Ok(default),
                Some(v) if (0..=10_000).contains(&v) => Ok(v as u32),
                Some(v) => Err(ConfigError::invalid(
                    path,
                    format!("supervision.{key}"),
                    format!("must be between 0 and 10000, got {v}"),
                )),
            }
        };
        let positive = |key: &str, value: Option<f64>, default: Duration| match value {
            None => Ok(default),
            Some(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
            Some(v) => {
                Err(ConfigError::invalid(path, format!("supervision.{key}"), format!("must be positive, got {v}")))
            }
        };
        let window = positive("intensity_window_sec", raw.intensity_window_sec, defaults.intensity_window)?;
        let watchdog_margin = positive("watchdog_margin_sec", raw.watchdog_margin_sec, defaults.watchdog_margin)?;
        Ok(SupervisionSpec {
            max_restarts: count("max_restarts", raw.max_restarts, defaults.max_restarts)?,
            intensity_max_restarts: count(
                "intensity_max_restarts",
                raw.intensity_max_restarts,
                defaults.intensity_max_restarts,
            )?,
            intensity_window: window,
            watchdog_margin,
        })
    }
}

/// How a group's rewards are summarised (errored or unverified trials count as 0, as in Harbor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Mean,
    Sum,
    Min,
    Max,
}

impl MetricKind {
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Mean => "mean",
            MetricKind::Sum => "sum",
            MetricKind::Min => "min",
            MetricKind::Max => "max",
        }
    }

    pub(crate) fn from_raw(path: &Path, idx: usize, raw: &RawMetric) -> Result<MetricKind, ConfigError> {
        match raw.kind.as_deref().unwrap_or("mean") {
            "mean" => Ok(MetricKind::Mean),
            "sum" => Ok(MetricKind::Sum),
            "min" => Ok(MetricKind::Min),
            "max" => Ok(MetricKind::Max),
            "uv-script" => Err(ConfigError::invalid(
                path,
                format!("metrics[{idx}].type"),
                "uv-script metrics are not supported; use mean, sum, min or max",
            )),
            other => Err(ConfigError::invalid(
                path,
                format!("metrics[{idx}].type"),
                format!("unknown metric {other:?}; use mean, sum, min or max"),
            )),
        }
    }
}

pub use terminus_core::confinement::{Confinement, DEFAULT_CAP_DROP, DEFAULT_PIDS_LIMIT};

/// How trial containers are confined: safe by default, loosened key by key in the job file's
/// `environment` block.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerPolicy {
    /// The job's confinement of every trial container (`pids_limit: 0` is None; its
    /// `storage_mb` is `override_storage_mb`, applied where the storage driver can).
    pub confinement: Confinement,
    /// Trials that may use the internet share a job bridge without inter-container traffic.
    pub isolate_network: bool,
    /// The most of a trial's `/logs` (and of each artifact) copied to the host, in MiB and files.
    pub max_log_mb: u64,
    pub max_log_files: u64,
    /// What a task's image build may use.
    pub build: BuildLimits,
}

/// The limits of an image build's `RUN` steps (`environment.build_memory_mb`, `build_cpus`):
/// a third-party Dockerfile that forks or allocates without end fails its own build.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BuildLimits {
    /// Memory, swap included, in MiB (default and most: [`BuildLimits::MAX_MEMORY_MB`]).
    pub memory_mb: u64,
    /// CPUs (default: all the host's but one, at least one).
    pub cpus: f64,
}

impl Default for BuildLimits {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        BuildLimits { memory_mb: BuildLimits::MAX_MEMORY_MB, cpus: cores.saturating_sub(1).max(1) as f64 }
    }
}

impl BuildLimits {
    /// The most the engine client can ask for (its build options hold the byte count in 32 bits).
    pub const MAX_MEMORY_MB: u64 = 2047;
}

impl Default for ContainerPolicy {
    fn default() -> Self {
        ContainerPolicy {
            confinement: Confinement::default(),
            isolate_network: true,
            max_log_mb: 1024,
            max_log_files: 20_000,
            build: BuildLimits::default(),
        }
    }
}

impl ContainerPolicy {
    pub(crate) fn from_raw(path: &Path, raw: &crate::raw::RawEnvironment) -> Result<ContainerPolicy, ConfigError> {
        let defaults = ContainerPolicy::default();
        let pids_limit = match raw.pids_limit {
            None => defaults.confinement.pids_limit,
            Some(0) => None,
            Some(n) if n > 0 => Some(n),
            Some(n) => {
                return Err(ConfigError::invalid(
                    path,
                    "environment.pids_limit",
                    format!("must be 0 (no limit) or more, got {n}"),
                ));
            }
        };
        let caps = |key: &str, list: &Option<Vec<String>>, default: Vec<String>| -> Result<Vec<String>, ConfigError> {
            let Some(list) = list else { return Ok(default) };
            list.iter()
                .enumerate()
                .map(|(idx, cap)| {
                    let name = cap.trim().trim_start_matches("CAP_").to_ascii_uppercase();
                    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        Err(ConfigError::invalid(
                            path,
                            format!("environment.{key}[{idx}]"),
                            format!("{cap:?} is not a capability name"),
                        ))
                    } else {
                        Ok(name)
                    }
                })
                .collect()
        };
        let storage_mb = match raw.override_storage_mb {
            None => None,
            Some(mb) if mb > 0 => Some(mb as u64),
            Some(mb) => {
                return Err(ConfigError::invalid(
                    path,
                    "environment.override_storage_mb",
                    format!("must be positive, got {mb}"),
                ));
            }
        };
        let positive = |key: &str, value: Option<i64>, default: u64| -> Result<u64, ConfigError> {
            match value {
                None => Ok(default),
                Some(v) if v > 0 => Ok(v as u64),
                Some(v) => {
                    Err(ConfigError::invalid(path, format!("environment.{key}"), format!("must be positive, got {v}")))
                }
            }
        };
        Ok(ContainerPolicy {
            max_log_mb: positive("max_log_mb", raw.max_log_mb, defaults.max_log_mb)?,
            max_log_files: positive("max_log_files", raw.max_log_files, defaults.max_log_files)?,
            build: BuildLimits {
                memory_mb: match positive("build_memory_mb", raw.build_memory_mb, defaults.build.memory_mb)? {
                    mb if mb > BuildLimits::MAX_MEMORY_MB => {
                        return Err(ConfigError::invalid(
                            path,
                            "environment.build_memory_mb",
                            format!(
                                "{mb} is more than the {} MiB an image build can be given",
                                BuildLimits::MAX_MEMORY_MB
                            ),
                        ));
                    }
                    mb => mb,
                },
                cpus: match raw.build_cpus {
                    None => defaults.build.cpus,
                    Some(cpus) if cpus.is_finite() && cpus > 0.0 => cpus,
                    Some(cpus) => {
                        return Err(ConfigError::invalid(
                            path,
                            "environment.build_cpus",
                            format!("must be a positive number of CPUs, got {cpus}"),
                        ));
                    }
                },
            },
            confinement: Confinement {
                pids_limit,
                no_new_privileges: raw.no_new_privileges.unwrap_or(defaults.confinement.no_new_privileges),
                cap_drop: caps("cap_drop", &raw.cap_drop, defaults.confinement.cap_drop)?,
                cap_add: caps("cap_add", &raw.cap_add, Vec::new())?,
                runtime: raw.runtime.clone().filter(|r| !r.trim().is_empty()),
                security_opt: raw.security_opt.clone().unwrap_or_default(),
                keep_container_logs: raw.keep_container_logs.unwrap_or(false),
                storage_mb,
            },
            isolate_network: raw.isolate_network.unwrap_or(true),
        })
    }
}

/// A path to copy out of the container after each trial, into `artifacts/<destination>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArtifactSpec {
    pub source: String,
    pub destination: String,
    /// `tar --exclude` patterns for a directory (a task's artifacts).
    pub exclude: Vec<String>,
    /// The compose service it is taken from (None: `main`).
    pub service: Option<String>,
}

impl ArtifactSpec {
    pub(crate) fn from_raw(path: &Path, idx: usize, raw: &Value) -> Result<ArtifactSpec, ConfigError> {
        let key = format!("artifacts[{idx}]");
        let (source, destination) = match raw {
            Value::String(source) => (source.clone(), None),
            Value::Object(map) => {
                let source = map
                    .get("source")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ConfigError::invalid(path, format!("{key}.source"), "is required"))?;
                (source.to_string(), map.get("destination").and_then(Value::as_str).map(str::to_string))
            }
            _ => return Err(ConfigError::invalid(path, key, "must be a path or {source, destination}")),
        };
        if !source.starts_with('/') {
            return Err(ConfigError::invalid(
                path,
                key,
                format!("{source:?} must be an absolute path in the container"),
            ));
        }
        let destination = destination
            .unwrap_or_else(|| source.trim_end_matches('/').rsplit('/').next().unwrap_or("artifact").to_string());
        if destination.is_empty() || destination.contains("..") || destination.starts_with('/') {
            return Err(ConfigError::invalid(
                path,
                key,
                format!("destination {destination:?} must be a relative name"),
            ));
        }
        Ok(ArtifactSpec { source, destination, ..ArtifactSpec::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(max: u32) -> RetrySpec {
        RetrySpec { max_retries: max, ..RetrySpec::default() }
    }

    #[test]
    fn retry_decisions_by_error_kind_and_policy() {
        use TrialErrorKind as K;
        let retry = spec(2);
        assert!(retry.should_retry(K::EnvironmentStart, 0));
        assert!(retry.should_retry(K::Runtime, 1));
        assert!(!retry.should_retry(K::Runtime, 2), "attempts are bounded");
        for excluded in
            [K::AgentTimeout, K::VerifierTimeout, K::RewardFileNotFound, K::RewardFileEmpty, K::VerifierOutputParse]
        {
            assert!(!retry.should_retry(excluded, 0), "{excluded} is excluded by default");
        }
        assert!(!retry.should_retry(K::Cancelled, 0), "a cancellation is never retried");
        assert!(!spec(0).should_retry(K::Runtime, 0), "retries are off by default");
        let include = RetrySpec { include_exceptions: Some(vec![K::ApiConnection, K::AgentTimeout]), ..spec(3) };
        assert!(include.should_retry(K::ApiConnection, 0));
        assert!(!include.should_retry(K::Runtime, 0), "not included");
        assert!(!include.should_retry(K::AgentTimeout, 0), "exclusion wins over inclusion");
        let nothing_excluded = RetrySpec { exclude_exceptions: Vec::new(), ..spec(1) };
        assert!(nothing_excluded.should_retry(K::AgentTimeout, 0));
        assert!(!RetrySpec { exclude_exceptions: Vec::new(), ..spec(1) }.should_retry(K::Cancelled, 0));
    }

    #[test]
    fn retry_lists_are_read_as_kinds_and_unknown_names_warned() {
        let raw = RawRetry {
            max_retries: Some(2),
            include_exceptions: Some(vec!["TmuxSessionError".into(), "NonZeroAgentExitCodeError".into()]),
            exclude_exceptions: Some(vec!["AgentTimeoutError".into(), "ServiceUnavailableError".into()]),
            ..RawRetry::default()
        };
        let mut warnings = Vec::new();
        let retry = RetrySpec::from_raw(Path::new("job.yaml"), &raw, &mut warnings).unwrap();
        assert_eq!(retry.include_exceptions, Some(vec![TrialErrorKind::TmuxSession]), "our finer kind's own name");
        // Harbor's (LiteLLM's) name for a provider's 503 means the kind it is among.
        assert_eq!(retry.exclude_exceptions, vec![TrialErrorKind::AgentTimeout, TrialErrorKind::ApiConnection]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("retry.include_exceptions[1]"), "{warnings:?}");
    }

    #[test]
    fn the_default_exclusions_in_default_yaml_are_the_kinds_not_retried_by_default() {
        let yaml: serde_yaml::Value = serde_yaml::from_str(include_str!("../default.yaml")).unwrap();
        let names: Vec<&str> =
            yaml["retry"]["exclude_exceptions"].as_sequence().unwrap().iter().filter_map(|v| v.as_str()).collect();
        let mut from_yaml: Vec<TrialErrorKind> = names.iter().map(|n| TrialErrorKind::from_name(n).unwrap()).collect();
        from_yaml.sort();
        assert_eq!(from_yaml, RetrySpec::default().exclude_exceptions);
    }

    #[test]
    fn backoff_grows_and_is_capped_with_jitter() {
        let retry = RetrySpec { min_wait: Duration::from_secs(1), max_wait: Duration::from_secs(10), ..spec(9) };
        assert_eq!(retry.backoff_bound(0), Duration::from_secs(1));
        assert_eq!(retry.backoff_bound(1), Duration::from_secs(2));
        assert_eq!(retry.backoff_bound(3), Duration::from_secs(8));
        assert_eq!(retry.backoff_bound(4), Duration::from_secs(10));
        assert_eq!(retry.backoff_bound(60), Duration::from_secs(10));
        assert_eq!(retry.backoff(2, 0.0), Duration::from_secs(2));
        assert_eq!(retry.backoff(2, 1.0), Duration::from_secs(4));
    }

    #[test]
    fn artifacts_and_metrics_are_validated() {
        let path = Path::new("job.yaml");
        assert_eq!(
            ArtifactSpec::from_raw(path, 0, &serde_json::json!("/app/out.log")).unwrap(),
            ArtifactSpec { source: "/app/out.log".into(), destination: "out.log".into(), ..ArtifactSpec::default() }
        );
        assert!(ArtifactSpec::from_raw(path, 0, &serde_json::json!("relative")).is_err());
        assert!(
            ArtifactSpec::from_raw(path, 1, &serde_json::json!({"source": "/a", "destination": "../x"}))
                .unwrap_err()
                .to_string()
                .contains("artifacts[1]")
        );
        let metric = RawMetric { kind: Some("median".into()), ..RawMetric::default() };
        assert!(MetricKind::from_raw(path, 2, &metric).unwrap_err().to_string().contains("metrics[2].type"));
    }
}
