//! The validated job: what runs, how many at once, where results go.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::ConfigError;
use crate::harbor_keys::{self, Verdict};
use crate::policy::{ArtifactSpec, ContainerPolicy, ErrorPolicySpec, MetricKind, RetrySpec, SupervisionSpec};
use crate::raw::{RawAgent, RawJob, RawLlm};

/// The built-in defaults, layered under every job file.
const DEFAULTS: &str = include_str!("../default.yaml");
use crate::task::{StepSection, Task};
use crate::terminus::{KwargError, Terminus2Options};

/// The agents this build can run.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentKind {
    /// The Terminus 2 loop against an LLM (or the offline `oracle` model).
    Terminus2(Box<Terminus2Options>),
    /// Runs the task's `solution/solve.sh` directly, without any agent loop.
    Oracle,
    /// Does nothing: checks that the tests fail on an untouched environment.
    Nop,
}

/// Limits and retries of model calls, validated. Plain data: the actors turn it into the LLM
/// layer's limiter and retry policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlmSettings {
    pub max_concurrent_requests: usize,
    pub adaptive_concurrency: bool,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    pub request_timeout: Duration,
    /// One call with its retries, end to end.
    pub call_timeout: Duration,
}

impl LlmSettings {
    fn from_raw(path: &Path, key: &str, raw: &RawLlm, n_concurrent_trials: usize) -> Result<LlmSettings, ConfigError> {
        let positive_int = |name: &str, value: Option<i64>| -> Result<Option<u64>, ConfigError> {
            match value {
                Some(v) if v < 1 => {
                    Err(ConfigError::invalid(path, format!("{key}.{name}"), format!("must be at least 1, got {v}")))
                }
                other => Ok(other.map(|v| v as u64)),
            }
        };
        let seconds = |name: &str, value: Option<f64>, default: f64| -> Result<Duration, ConfigError> {
            let v = value.unwrap_or(default);
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ConfigError::invalid(
                    path,
                    format!("{key}.{name}"),
                    format!("must be a non-negative number, got {v}"),
                ))
            }
        };
        Ok(LlmSettings {
            max_concurrent_requests: positive_int("max_concurrent_requests", raw.max_concurrent_requests)?
                .map_or(n_concurrent_trials.max(1), |v| v as usize),
            adaptive_concurrency: raw.adaptive_concurrency.unwrap_or(true),
            requests_per_minute: positive_int("requests_per_minute", raw.requests_per_minute)?
                .map(|v| v.min(u32::MAX as u64) as u32),
            tokens_per_minute: positive_int("tokens_per_minute", raw.tokens_per_minute)?,
            max_attempts: positive_int("max_attempts", raw.max_attempts)?.map_or(3, |v| v.min(100) as u32),
            base_delay: seconds("base_delay_sec", raw.base_delay_sec, 1.0)?,
            max_delay: seconds("max_delay_sec", raw.max_delay_sec, 60.0)?,
            request_timeout: seconds("request_timeout_sec", raw.request_timeout_sec, 600.0)?,
            call_timeout: seconds("call_timeout_sec", raw.call_timeout_sec, 1800.0)?,
        })
    }
}

/// One configured agent.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSpec {
    pub name: String,
    pub kind: AgentKind,
    pub model_name: Option<String>,
    pub override_timeout_sec: Option<f64>,
    pub override_setup_timeout_sec: Option<f64>,
    pub max_timeout_sec: Option<f64>,
    pub env: BTreeMap<String, String>,
    /// The kwargs as written, for config dumps (secrets redacted when written).
    pub kwargs: Map<String, Value>,
    /// The job's `llm:` block with this agent's overrides.
    pub llm: LlmSettings,
    /// Hosts this agent's phase may reach besides the task's (`extra_allowed_hosts`).
    pub extra_allowed_hosts: Vec<String>,
    /// This agent's own spending limit (`agents[].budget`), besides the job's.
    pub budget: crate::policy::BudgetSpec,
}

impl AgentSpec {
    /// The environment variable this agent's API key is read from, when the job names one
    /// (`model_api_key_name` or `kwargs.api_key_env`).
    pub fn key_variable(&self) -> Option<&str> {
        match &self.kind {
            AgentKind::Terminus2(opts) => opts.api_key_env.as_deref(),
            AgentKind::Oracle | AgentKind::Nop => None,
        }
    }

    pub fn version(&self) -> &'static str {
        match self.kind {
            AgentKind::Terminus2(_) => "2.0.0",
            AgentKind::Oracle | AgentKind::Nop => "1.0.0",
        }
    }
}

/// A task to run, before it is loaded (loading happens in the trial, so that a broken task
/// becomes that trial's error instead of stopping the job).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRef {
    pub path: PathBuf,
    /// The directory name; trial names are made from it.
    pub name: String,
    /// The dataset directory's name, or None for tasks given one by one.
    pub source: Option<String>,
}

/// Timeout multipliers per phase (each falls back to `timeout_multiplier`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Multipliers {
    pub agent: f64,
    pub verifier: f64,
    pub agent_setup: f64,
    pub environment_build: f64,
}

/// A validated job.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub job_name: String,
    pub jobs_dir: PathBuf,
    pub n_attempts: u32,
    pub n_concurrent_trials: usize,
    pub multipliers: Multipliers,
    pub force_build: bool,
    pub delete: bool,
    pub quiet: bool,
    pub debug: bool,
    pub verifier_disable: bool,
    pub verifier_override_timeout_sec: Option<f64>,
    pub verifier_max_timeout_sec: Option<f64>,
    /// What becomes of the agent's processes when the tests start.
    pub agent_processes: crate::policy::AgentProcesses,
    pub override_cpus: Option<f64>,
    pub override_memory_mb: Option<u64>,
    /// How trial containers are confined.
    pub containers: ContainerPolicy,
    /// Where trials run: the local engine or a swarm (`environment.type`).
    pub backend: crate::cluster::BackendSpec,
    pub agents: Vec<AgentSpec>,
    pub tasks: Vec<TaskRef>,
    pub retry: RetrySpec,
    /// `override_error_policy`: whether a trial is still graded after an error of a kind.
    pub error_policy: ErrorPolicySpec,
    /// `extra_instruction_paths` (their contents) then `extra_instructions`, appended to every
    /// task's instruction.
    pub extra_instructions: Vec<String>,
    pub supervision: SupervisionSpec,
    /// The job's spending limit (`budget:`, or `--max-cost-usd` / `--max-tokens`).
    pub budget: crate::policy::BudgetSpec,
    pub metrics: Vec<MetricKind>,
    pub artifacts: Vec<ArtifactSpec>,
    /// Environment of every process in the trial containers.
    pub environment_env: BTreeMap<String, String>,
    /// The host variables a task may read (`environment.host_env`), the model keys protected.
    pub host_env: crate::host_env::HostEnv,
    /// Environment of the tests, over the task's `[verifier].env`.
    pub verifier_env: BTreeMap<String, String>,
    /// `environment.extra_allowed_hosts` and `verifier.extra_allowed_hosts`, normalized (each
    /// agent's own are on its [`AgentSpec`]).
    pub extra_environment_hosts: Vec<String>,
    pub extra_verifier_hosts: Vec<String>,
    pub grace_period: Duration,
    pub stall_warning: Duration,
    /// How long one request to a trial's terminal may take.
    pub terminal_timeout: Duration,
    /// What terminus itself may write into one trial's directory (`max_trial_disk_mb`, default
    /// 1024): past it the agent stops with `TrialDiskLimitExceededError` and its logs stop.
    pub max_trial_disk_bytes: u64,
    /// The job file as read, with defaults filled in; written as `config.json`.
    pub raw: Value,
    /// Things worth telling the user that do not stop the job (unknown keys…).
    pub warnings: Vec<String>,
}

/// Puts back what a config dump redacted, under every secret-looking key of `value`: a
/// `${NAME}` template from the variable `NAME`, a mask (`****`, `sk****ef`) from the variable
/// named like its key. The first that cannot be is returned: (its key's path, the variable).
fn restore_secrets(
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
fn is_mask(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    text == "****" || chars.len() == 8 && chars[2..6].iter().all(|c| *c == '*')
}

fn unresolved_secret(var: &str) -> String {
    format!(
        "stored redacted, and `{var}` is not set: set it in the environment, or resume with the job file (`terminus resume JOB_DIR -c job.yaml`)"
    )
}

/// One trial to run: which task, which agent, which attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialPlan {
    pub task: TaskRef,
    pub agent_idx: usize,
    pub attempt: u32,
}

/// Command-line values that replace the file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub job_name: Option<String>,
    pub jobs_dir: Option<PathBuf>,
    pub n_concurrent_trials: Option<usize>,
    pub n_attempts: Option<u32>,
    pub quiet: Option<bool>,
    /// `-p`: task or dataset directories; they replace the file's `tasks` and `datasets`.
    pub paths: Vec<PathBuf>,
    /// `-t` / `-x`: task-name globs applied to every dataset.
    pub include_tasks: Vec<String>,
    pub exclude_tasks: Vec<String>,
    /// `-a`: replaces the agents (one per `-m` model, or one without a model).
    pub agent: Option<String>,
    /// `-m`: with `-a`, one agent per model; without, the model of every configured agent.
    pub models: Vec<String>,
    /// `--ak key=value`: merged into every agent's kwargs (values parsed as JSON when they can be).
    pub agent_kwargs: Vec<(String, Value)>,
    pub force_build: Option<bool>,
    pub delete: Option<bool>,
    /// `--max-cost-usd` / `--max-tokens`: the job's budget, in place of the file's.
    pub budget_cost_usd: Option<f64>,
    pub budget_tokens: Option<u64>,
}

impl Overrides {
    /// These overrides, with `jobs_dir` and `job_name` pointing at `job_dir`.
    pub fn placed_at(mut self, job_dir: &Path) -> Overrides {
        let abs = std::path::absolute(job_dir).unwrap_or_else(|_| job_dir.to_path_buf());
        self.job_name = abs.file_name().map(|n| n.to_string_lossy().into_owned());
        self.jobs_dir = abs.parent().map(Path::to_path_buf);
        self
    }

    /// Applies the command-line values to the file's.
    fn apply(&self, raw: &mut RawJob) {
        if !self.paths.is_empty() {
            raw.tasks.clear();
            raw.datasets.clear();
            for path in &self.paths {
                if Task::is_task_dir(path) {
                    raw.tasks.push(crate::raw::RawTask { path: Some(path.clone()), ..Default::default() });
                } else {
                    raw.datasets.push(crate::raw::RawDataset { path: Some(path.clone()), ..Default::default() });
                }
            }
        }
        for dataset in &mut raw.datasets {
            if !self.include_tasks.is_empty() {
                dataset.task_names = Some(self.include_tasks.clone());
            }
            if !self.exclude_tasks.is_empty() {
                dataset.exclude_task_names = Some(self.exclude_tasks.clone());
            }
        }
        if let Some(agent) = &self.agent {
            let models: Vec<Option<String>> =
                if self.models.is_empty() { vec![None] } else { self.models.iter().cloned().map(Some).collect() };
            raw.agents = Some(
                models
                    .into_iter()
                    .map(|model_name| RawAgent { name: Some(agent.clone()), model_name, ..RawAgent::default() })
                    .collect(),
            );
        } else if let Some(model) = self.models.first() {
            for agent in raw.agents.iter_mut().flatten() {
                agent.model_name = Some(model.clone());
            }
        }
        for agent in raw.agents.iter_mut().flatten() {
            for (key, value) in &self.agent_kwargs {
                agent.kwargs.insert(key.clone(), value.clone());
            }
        }
        if let Some(force_build) = self.force_build {
            raw.environment.force_build = force_build;
        }
        if let Some(delete) = self.delete {
            raw.environment.delete = delete;
        }
        if self.budget_cost_usd.is_some() || self.budget_tokens.is_some() {
            let budget = raw.budget.get_or_insert_with(Default::default);
            if let Some(cost) = self.budget_cost_usd {
                budget.max_cost_usd = Some(cost);
            }
            if let Some(tokens) = self.budget_tokens {
                budget.max_tokens = Some(tokens.min(i64::MAX as u64) as i64);
            }
        }
    }
}

impl JobSpec {
    /// The hosts `agent`'s trials add to their tasks' allowlists.
    pub fn extra_hosts(&self, agent: &AgentSpec) -> crate::task::ExtraHosts {
        crate::task::ExtraHosts {
            environment: self.extra_environment_hosts.clone(),
            agent: agent.extra_allowed_hosts.clone(),
            verifier: self.extra_verifier_hosts.clone(),
        }
    }

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
                Verdict::Unknown => warnings.push(format!("{}: unknown key, ignored", harbor_keys::display(segments))),
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

    fn from_raw(
        path: &Path,
        mut raw: RawJob,
        file_only: &Value,
        overrides: &Overrides,
        mut warnings: Vec<String>,
    ) -> Result<JobSpec, ConfigError> {
        let containers = ContainerPolicy::from_raw(path, &raw.environment)?;
        let mut host_env = crate::host_env::HostEnv::from_raw(path, raw.environment.host_env.as_ref())?;
        if raw.environment.override_gpus.is_some_and(|g| g > 0) {
            return Err(ConfigError::invalid(path, "environment.override_gpus", "the Docker environment has no GPUs"));
        }
        let backend = crate::cluster::BackendSpec::from_raw(path, &raw.environment)?;
        if let crate::cluster::BackendSpec::Swarm(swarm) = &backend
            && swarm.insecure_nodes
        {
            warnings.push(
                "environment.swarm.insecure_nodes: the nodes' daemons are reached on plain TCP, without TLS: whoever \
                 reaches their port, a trial container included, controls the node"
                    .to_string(),
            );
        }
        let orchestrator = raw.orchestrator.clone().unwrap_or_default();
        // The legacy block's retry applies only where the file has no top-level one (Harbor's rule).
        if let Some(legacy) = &orchestrator.retry
            && file_only.get("retry").is_none()
        {
            let parsed: crate::raw::RawRetry = serde_json::from_value(legacy.clone())
                .map_err(|e| ConfigError::invalid(path, "orchestrator.retry", e.to_string()))?;
            raw.retry = Some(parsed);
        }
        if let Some(version) = raw.schema_version.filter(|v| *v != 1) {
            return Err(ConfigError::invalid(
                path,
                "schema_version",
                format!("only version 1 exists (Harbor's, and the one terminus reads), got {version}"),
            ));
        }
        let mut retry = RetrySpec::from_raw(path, &raw.retry.clone().unwrap_or_default(), &mut warnings)?;
        let error_policy =
            ErrorPolicySpec::from_raw(raw.override_error_policy.as_ref().unwrap_or(&BTreeMap::new()), &mut warnings);
        // Harbor lets explicit exclusions win over the overrides: those of the file (top level or
        // the legacy block), not the built-in defaults layered under it.
        let explicit_exclusions = file_only.pointer("/retry/exclude_exceptions").is_some()
            || (file_only.get("retry").is_none()
                && file_only.pointer("/orchestrator/retry/exclude_exceptions").is_some());
        retry.apply_overrides(&error_policy, explicit_exclusions);
        let extra_instructions = extra_instructions(path, &raw)?;
        let supervision = SupervisionSpec::from_raw(path, &raw.supervision.clone().unwrap_or_default())?;
        let metrics = raw
            .metrics
            .iter()
            .flatten()
            .enumerate()
            .map(|(idx, m)| MetricKind::from_raw(path, idx, m))
            .collect::<Result<Vec<_>, _>>()?;
        let artifacts = raw
            .artifacts
            .iter()
            .flatten()
            .enumerate()
            .map(|(idx, a)| ArtifactSpec::from_raw(path, idx, a))
            .collect::<Result<Vec<_>, _>>()?;
        let seconds = |key: &str, value: Option<f64>, default: f64| -> Result<Duration, ConfigError> {
            let v = value.unwrap_or(default);
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ConfigError::invalid(path, key, format!("must be a non-negative number, got {v}")))
            }
        };
        let grace_period = seconds("grace_period_sec", raw.grace_period_sec, 30.0)?;
        let stall_warning = seconds("stall_warning_sec", raw.stall_warning_sec, 300.0)?;
        let terminal_timeout = seconds("terminal_timeout_sec", raw.terminal_timeout_sec, 60.0)?;
        let max_trial_disk_mb = raw.max_trial_disk_mb.unwrap_or(1024.0);
        if !(max_trial_disk_mb.is_finite() && max_trial_disk_mb > 0.0) {
            return Err(ConfigError::invalid(
                path,
                "max_trial_disk_mb",
                format!("must be a positive number, got {max_trial_disk_mb}"),
            ));
        }
        let max_trial_disk_bytes = (max_trial_disk_mb * 1024.0 * 1024.0) as u64;
        let n_concurrent = match overrides.n_concurrent_trials {
            Some(n) => n as i64,
            None => raw.n_concurrent_trials.or(orchestrator.n_concurrent_trials).unwrap_or(4),
        };
        let n_concurrent_key = if raw.n_concurrent_trials.is_some() || orchestrator.n_concurrent_trials.is_none() {
            "n_concurrent_trials"
        } else {
            "orchestrator.n_concurrent_trials"
        };
        if n_concurrent < 1 {
            return Err(ConfigError::invalid(
                path,
                n_concurrent_key,
                format!("must be at least 1, got {n_concurrent}"),
            ));
        }
        let n_attempts = match overrides.n_attempts {
            Some(n) => n as i64,
            None => raw.n_attempts.unwrap_or(1),
        };
        if n_attempts < 1 {
            return Err(ConfigError::invalid(path, "n_attempts", format!("must be at least 1, got {n_attempts}")));
        }
        let base = raw.timeout_multiplier.unwrap_or(1.0);
        let check_multiplier = |key: &str, value: Option<f64>| -> Result<f64, ConfigError> {
            let value = value.unwrap_or(base);
            if value.is_finite() && value > 0.0 {
                Ok(value)
            } else {
                Err(ConfigError::invalid(path, key, format!("must be a positive number, got {value}")))
            }
        };
        let multipliers = Multipliers {
            agent: check_multiplier("agent_timeout_multiplier", raw.agent_timeout_multiplier)?,
            verifier: check_multiplier("verifier_timeout_multiplier", raw.verifier_timeout_multiplier)?,
            agent_setup: check_multiplier("agent_setup_timeout_multiplier", raw.agent_setup_timeout_multiplier)?,
            environment_build: check_multiplier(
                "environment_build_timeout_multiplier",
                raw.environment_build_timeout_multiplier,
            )?,
        };
        check_multiplier("timeout_multiplier", raw.timeout_multiplier)?;

        let raw_agents =
            raw.agents.clone().unwrap_or_else(|| vec![RawAgent { name: Some("oracle".into()), ..RawAgent::default() }]);
        if raw_agents.is_empty() {
            return Err(ConfigError::invalid(path, "agents", "needs at least one agent"));
        }
        let job_llm = raw.llm.clone().unwrap_or_default();
        LlmSettings::from_raw(path, "llm", &job_llm, n_concurrent as usize)?;
        let mut agents = Vec::new();
        for (idx, agent) in raw_agents.iter().enumerate() {
            let merged = job_llm.overlaid(&agent.llm.clone().unwrap_or_default());
            let llm = LlmSettings::from_raw(path, &format!("agents[{idx}].llm"), &merged, n_concurrent as usize)?;
            agents.push(agent_spec(path, idx, agent, llm, &mut warnings)?);
        }

        // Spend in dollars is counted at the model's prices: a model without them could never
        // reach a dollar budget.
        let budget = crate::policy::BudgetSpec::from_raw(path, "budget", &raw.budget.clone().unwrap_or_default())?;
        for (idx, agent) in agents.iter().enumerate() {
            let dollars = budget.max_cost_usd.is_some() || agent.budget.max_cost_usd.is_some();
            if let (true, AgentKind::Terminus2(opts), Some(model)) = (dollars, &agent.kind, agent.model_name.as_deref())
            {
                let limits = opts.model_limits(model);
                if model != crate::terminus::ORACLE_MODEL
                    && (limits.input_cost_per_token.value.is_none() || limits.output_cost_per_token.value.is_none())
                {
                    return Err(ConfigError::invalid(
                        path,
                        format!("agents[{idx}].model_name"),
                        format!(
                            "a dollar budget needs the model's prices, and `{model}` has none in the price table: give them in kwargs.model_info (input_cost_per_token, output_cost_per_token), or budget with max_tokens"
                        ),
                    ));
                }
            }
        }

        let tasks = resolve_tasks(path, &raw)?;
        if tasks.is_empty() {
            return Err(ConfigError::invalid(
                path,
                "tasks",
                "either datasets or tasks must be provided (no task found)",
            ));
        }
        let job_name = overrides.job_name.clone().or(raw.job_name.clone()).unwrap_or_else(chrono_like_now);
        // The job's directory is `jobs_dir/job_name`: a name that is not one plain directory name
        // would put the job (and what a resume cleans up) somewhere else, even in `jobs_dir`.
        if job_name.is_empty() || job_name == "." || job_name == ".." || job_name.contains(['/', '\\', '\0']) {
            return Err(ConfigError::invalid(path, "job_name", format!("{job_name:?} cannot be a directory name")));
        }
        let jobs_dir = overrides.jobs_dir.clone().or(raw.jobs_dir.clone()).unwrap_or_else(|| PathBuf::from("jobs"));
        let quiet = overrides.quiet.or(raw.quiet).or(orchestrator.quiet).unwrap_or(false);

        // What config.json records: the file's values with the resolved ones filled in.
        raw.job_name = Some(job_name.clone());
        raw.jobs_dir = Some(jobs_dir.clone());
        raw.n_concurrent_trials = Some(n_concurrent);
        raw.n_attempts = Some(n_attempts);
        raw.agents = Some(raw_agents);
        // Harbor's `JobConfig` requires lists here (its defaults are empty lists): a null makes
        // its tools (`harbor view`) refuse the whole file. An empty list means the same to us.
        raw.metrics = Some(raw.metrics.take().unwrap_or_default());
        raw.artifacts = Some(raw.artifacts.take().unwrap_or_default());
        raw.schema_version = Some(1);
        raw.override_error_policy = Some(raw.override_error_policy.take().unwrap_or_default());
        raw.extra_instruction_paths =
            Some(raw.extra_instruction_paths.take().unwrap_or_default().iter().map(|p| absolute(p)).collect());
        raw.extra_instructions = Some(raw.extra_instructions.take().unwrap_or_default());
        // Absolute paths, so a resume from another directory finds the same tasks.
        for dataset in &mut raw.datasets {
            dataset.path = dataset.path.as_deref().map(absolute);
        }
        for task in &mut raw.tasks {
            task.path = task.path.as_deref().map(absolute);
        }
        let mut raw_value = serde_json::to_value(&raw).unwrap_or(Value::Null);
        terminus_core::secrets::redact_json(&mut raw_value);
        // The variable an agent's key is read from is a secret whatever its name (Harbor treats
        // `model_api_key_name`'s variable so too).
        for (idx, agent) in agents.iter().enumerate() {
            if let Some(name) = agent.key_variable()
                && let Some(Value::String(value)) = raw_value.pointer_mut(&format!("/agents/{idx}/env/{name}"))
            {
                *value = terminus_core::secrets::redact_value(name, value);
            }
        }
        host_env.protect(agents.iter().filter_map(AgentSpec::key_variable).map(str::to_string));

        Ok(JobSpec {
            job_name,
            jobs_dir,
            n_attempts: n_attempts as u32,
            n_concurrent_trials: n_concurrent as usize,
            multipliers,
            force_build: raw.environment.force_build,
            delete: raw.environment.delete,
            quiet,
            debug: raw.debug.unwrap_or(false),
            verifier_disable: raw.verifier.disable,
            verifier_override_timeout_sec: raw.verifier.override_timeout_sec,
            verifier_max_timeout_sec: raw.verifier.max_timeout_sec,
            agent_processes: raw.verifier.agent_processes,
            override_cpus: raw.environment.override_cpus,
            override_memory_mb: raw.environment.override_memory_mb.map(|m| m.max(4) as u64),
            containers,
            backend,
            agents,
            tasks,
            retry,
            error_policy,
            extra_instructions,
            supervision,
            budget,
            metrics: if metrics.is_empty() { vec![MetricKind::Mean] } else { metrics },
            artifacts,
            environment_env: raw.environment.env.clone(),
            host_env,
            verifier_env: raw.verifier.env.clone(),
            extra_environment_hosts: extra_hosts(
                path,
                "environment.extra_allowed_hosts",
                &raw.environment.extra_allowed_hosts,
            )?,
            extra_verifier_hosts: extra_hosts(path, "verifier.extra_allowed_hosts", &raw.verifier.extra_allowed_hosts)?,
            grace_period,
            stall_warning,
            terminal_timeout,
            max_trial_disk_bytes,
            raw: raw_value,
            warnings,
        })
    }

    /// The instruction the agent is given for a task: the task's own, then each extra
    /// instruction, separated by blank lines (Harbor's joining).
    pub fn instruction(&self, task_instruction: &str) -> String {
        let mut parts = vec![task_instruction];
        parts.extend(self.extra_instructions.iter().map(String::as_str));
        parts.join("\n\n")
    }

    /// The job directory: `jobs_dir/job_name`.
    pub fn job_dir(&self) -> PathBuf {
        self.jobs_dir.join(&self.job_name)
    }

    /// Expands the job into trials: attempts (outer) × tasks × agents (inner), Harbor's order,
    /// which interleaves model providers for rate limits.
    pub fn plan(&self) -> Vec<TrialPlan> {
        let mut plans = Vec::new();
        for attempt in 0..self.n_attempts {
            for task in &self.tasks {
                for agent_idx in 0..self.agents.len() {
                    plans.push(TrialPlan { task: task.clone(), agent_idx, attempt });
                }
            }
        }
        plans
    }

    /// The agent's time limit for a task: `min(override or task value, max) × multiplier`;
    /// None when neither the agent nor the task sets one.
    pub fn agent_timeout(&self, agent: &AgentSpec, task: &Task) -> Option<Duration> {
        self.agent_limit(agent, task.config.agent.timeout_sec)
    }

    /// The agent's time limit for one step of a multi-step task: the step's own
    /// `timeout_sec`, else the task's, then the same overrides, cap and multiplier.
    pub fn step_agent_timeout(&self, agent: &AgentSpec, task: &Task, step: &StepSection) -> Option<Duration> {
        self.agent_limit(agent, step.agent.timeout_sec.or(task.config.agent.timeout_sec))
    }

    fn agent_limit(&self, agent: &AgentSpec, task_sec: Option<f64>) -> Option<Duration> {
        let base = agent.override_timeout_sec.or(task_sec)?;
        let capped = agent.max_timeout_sec.map_or(base, |max| base.min(max));
        Some(Duration::from_secs_f64((capped * self.multipliers.agent).max(0.0)))
    }

    /// The verifier's time limit for a task.
    pub fn verifier_timeout(&self, task: &Task) -> Duration {
        self.verifier_limit(task.config.verifier.timeout_sec)
    }

    /// The verifier's time limit for one step: the step's `[steps.verifier].timeout_sec`, which
    /// has a default of its own (600 s) as in Harbor, so the task's is never inherited.
    pub fn step_verifier_timeout(&self, step: &StepSection) -> Duration {
        self.verifier_limit(step.verifier.timeout_sec)
    }

    fn verifier_limit(&self, task_sec: f64) -> Duration {
        let base = self.verifier_override_timeout_sec.unwrap_or(task_sec);
        let capped = self.verifier_max_timeout_sec.map_or(base, |max| base.min(max));
        Duration::from_secs_f64((capped * self.multipliers.verifier).max(0.0))
    }

    /// The time limit for setting the agent up (its terminal): `override_setup_timeout_sec`, else
    /// 360 s, × the multiplier.
    pub fn agent_setup_timeout(&self, agent: &AgentSpec) -> Duration {
        Duration::from_secs_f64(
            (agent.override_setup_timeout_sec.unwrap_or(360.0) * self.multipliers.agent_setup).max(0.0),
        )
    }

    /// How long a whole trial may take before the Supervisor's watchdog ends it: every phase's
    /// limit (build, agent set-up, agent, verifier), 10 % on top for the steps between them, plus
    /// `supervision.watchdog_margin_sec`. None when the agent has no time limit: such a trial may
    /// legitimately run for ever, and only its phases' own deadlines apply.
    pub fn trial_budget(&self, agent: &AgentSpec, task: &Task) -> Option<Duration> {
        // A separate verifier's environment is built and started within the same limit again.
        let separate = task.config.verifier_mode(None) == crate::task::VerifierMode::Separate;
        let builds = if separate { 2 } else { 1 };
        let mut phases = self.build_timeout(task) * builds + self.agent_setup_timeout(agent);
        if task.steps().is_empty() {
            phases += self.agent_timeout(agent, task)? + self.verifier_timeout(task);
        }
        // A multi-step task runs each step's agent and verifier in turn.
        for step in task.steps() {
            phases += self.step_agent_timeout(agent, task, step)? + self.step_verifier_timeout(step);
        }
        Some(phases + phases / 10 + self.supervision.watchdog_margin)
    }

    /// The time limit for building the image and starting the container.
    pub fn build_timeout(&self, task: &Task) -> Duration {
        Duration::from_secs_f64(
            (task.config.environment.build_timeout_sec * self.multipliers.environment_build).max(0.0),
        )
    }
}

fn agent_spec(
    path: &Path,
    idx: usize,
    agent: &RawAgent,
    llm: LlmSettings,
    warnings: &mut Vec<String>,
) -> Result<AgentSpec, ConfigError> {
    let key = |k: &str| format!("agents[{idx}].{k}");
    if agent.import_path.is_some() {
        return Err(ConfigError::invalid(
            path,
            key("import_path"),
            "custom agent classes are not supported; use name: terminus-2, oracle or nop",
        ));
    }
    let name = agent.name.clone().unwrap_or_else(|| "oracle".to_string());
    let kind = match name.as_str() {
        "terminus-2" | "terminus2" | "terminus" => {
            let mut local = Vec::new();
            let mut opts = Terminus2Options::from_kwargs(&agent.kwargs, &mut local).map_err(|e| match e {
                KwargError::Invalid { key: k, message } => {
                    ConfigError::invalid(path, key(&format!("kwargs.{k}")), message)
                }
                KwargError::PromptTemplate { file, problem } => ConfigError::PromptTemplate {
                    path: path.to_path_buf(),
                    key: key("kwargs.prompt_template"),
                    template: file,
                    problem: Box::new(problem),
                },
                KwargError::Texts(problem) => ConfigError::invalid(path, key("kwargs.texts"), problem.to_string()),
            })?;
            warnings.extend(local.into_iter().map(|w| format!("agents[{idx}].{w}")));
            connection_keys(path, idx, agent, &mut opts)?;
            if agent.model_name.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::invalid(path, key("model_name"), "model_name is required for Terminus 2"));
            }
            AgentKind::Terminus2(Box::new(opts))
        }
        "oracle" | "nop" => {
            // These agents call no model: a connection key is a slip worth pointing out.
            for (k, set) in [
                ("base_url", agent.base_url.is_some()),
                ("model_api_key_name", agent.model_api_key_name.is_some()),
                ("model_api_format", agent.model_api_format.is_some()),
            ] {
                if set {
                    warnings.push(format!("{}: the {name} agent calls no model, so this has no effect", key(k)));
                }
            }
            if name == "oracle" { AgentKind::Oracle } else { AgentKind::Nop }
        }
        other => {
            return Err(ConfigError::invalid(
                path,
                key("name"),
                format!("unknown agent {other:?}; this build runs terminus-2, oracle and nop"),
            ));
        }
    };
    let name = if matches!(kind, AgentKind::Terminus2(_)) { "terminus-2".to_string() } else { name };
    for (k, v) in [("override_timeout_sec", agent.override_timeout_sec), ("max_timeout_sec", agent.max_timeout_sec)] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(ConfigError::invalid(path, key(k), format!("must be a positive number, got {v}")));
        }
    }
    Ok(AgentSpec {
        name,
        kind,
        model_name: agent.model_name.clone(),
        override_timeout_sec: agent.override_timeout_sec,
        override_setup_timeout_sec: agent.override_setup_timeout_sec,
        max_timeout_sec: agent.max_timeout_sec,
        env: agent.env.clone(),
        kwargs: agent.kwargs.clone(),
        llm,
        extra_allowed_hosts: extra_hosts(path, &key("extra_allowed_hosts"), &agent.extra_allowed_hosts)?,
        budget: crate::policy::BudgetSpec::from_raw(path, &key("budget"), &agent.budget.clone().unwrap_or_default())?,
    })
}

/// Run-specific allowlist hosts, normalized as a task's `allowed_hosts` are (Harbor validates
/// them with the same rule); an entry that is no host, wildcard, address or range is refused.
fn extra_hosts(path: &Path, key: &str, hosts: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for host in hosts {
        let normal = crate::task::normalize_allowed_host(host).ok_or_else(|| {
            ConfigError::invalid(
                path,
                key,
                format!("{host:?} must be a host name, `*.suffix`, an IP address or a CIDR range"),
            )
        })?;
        if !out.contains(&normal) {
            out.push(normal);
        }
    }
    Ok(out)
}

/// The contents of `extra_instruction_paths` (read now, so a missing file stops the job before
/// any trial runs, naming its key), then `extra_instructions`.
fn extra_instructions(path: &Path, raw: &RawJob) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (idx, file) in raw.extra_instruction_paths.iter().flatten().enumerate() {
        let text = std::fs::read_to_string(file).map_err(|e| {
            ConfigError::invalid(path, format!("extra_instruction_paths[{idx}]"), format!("{}: {e}", file.display()))
        })?;
        out.push(text);
    }
    out.extend(raw.extra_instructions.iter().flatten().cloned());
    Ok(out)
}

/// Harbor 0.26's connection keys of an agent, applied to Terminus 2's options: `base_url` is its
/// `api_base`, `model_api_key_name` its `api_key_env`, `model_api_format` the protocol. A key
/// and the kwarg it stands for may both be given only with the same value.
fn connection_keys(path: &Path, idx: usize, agent: &RawAgent, opts: &mut Terminus2Options) -> Result<(), ConfigError> {
    let key = |k: &str| format!("agents[{idx}].{k}");
    let conflict = |k: &str, kwarg: &str| {
        ConfigError::invalid(path, key(k), format!("differs from agents[{idx}].kwargs.{kwarg}; give one of them"))
    };
    if let Some(base_url) = &agent.base_url {
        if opts.api_base.as_ref().is_some_and(|b| b != base_url) {
            return Err(conflict("base_url", "api_base"));
        }
        opts.api_base = Some(base_url.clone());
    }
    if let Some(name) = &agent.model_api_key_name {
        if !crate::terminus::is_variable_name(name) {
            return Err(ConfigError::invalid(path, key("model_api_key_name"), "must be an environment variable name"));
        }
        if opts.api_key_env.as_ref().is_some_and(|n| n != name) {
            return Err(conflict("model_api_key_name", "api_key_env"));
        }
        opts.api_key_env = Some(name.clone());
    }
    if let Some(format) = &agent.model_api_format {
        let format = crate::terminus::ModelApiFormat::from_harbor_name(format)
            .map_err(|message| ConfigError::invalid(path, key("model_api_format"), message))?;
        opts.api_format = Some(format);
    }
    Ok(())
}

fn resolve_tasks(path: &Path, raw: &RawJob) -> Result<Vec<TaskRef>, ConfigError> {
    let mut tasks = Vec::new();
    for (idx, task) in raw.tasks.iter().enumerate() {
        let key = format!("tasks[{idx}].path");
        let Some(task_path) = &task.path else {
            let what =
                if task.name.is_some() { "registry tasks are not supported; give a local path" } else { "is required" };
            return Err(ConfigError::invalid(path, key, what));
        };
        if !Task::is_task_dir(task_path) {
            return Err(ConfigError::invalid(
                path,
                key,
                format!(
                    "{} is not a task directory (it lacks {})",
                    task_path.display(),
                    Task::missing_parts(task_path).join(", ")
                ),
            ));
        }
        tasks.push(TaskRef { path: absolute(task_path), name: dir_name(task_path), source: task.source.clone() });
    }
    for (idx, dataset) in raw.datasets.iter().enumerate() {
        let key = |k: &str| format!("datasets[{idx}].{k}");
        let Some(dataset_path) = &dataset.path else {
            let what = if dataset.name.is_some() {
                "registry datasets are not supported; give a local path"
            } else {
                "is required"
            };
            return Err(ConfigError::invalid(path, key("path"), what));
        };
        let entries = std::fs::read_dir(dataset_path).map_err(|e| {
            ConfigError::invalid(path, key("path"), format!("cannot list {}: {e}", dataset_path.display()))
        })?;
        // Sorted, so that `n_tasks` picks the same subset on every machine.
        let mut dirs: Vec<PathBuf> =
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| Task::is_task_dir(p)).collect();
        dirs.sort();
        let include = dataset.task_names.clone().unwrap_or_default();
        let exclude = dataset.exclude_task_names.clone().unwrap_or_default();
        let available: Vec<String> = dirs.iter().map(|d| dir_name(d)).collect();
        dirs.retain(|d| {
            let name = dir_name(d);
            (include.is_empty() || include.iter().any(|p| crate::glob::matches(p, &name)))
                && !exclude.iter().any(|p| crate::glob::matches(p, &name))
        });
        if !include.is_empty() && dirs.is_empty() {
            let sample: Vec<&str> = available.iter().take(5).map(String::as_str).collect();
            return Err(ConfigError::invalid(
                path,
                key("task_names"),
                format!("matches no task; available: {}", sample.join(", ")),
            ));
        }
        if let Some(n) = dataset.n_tasks {
            if n < 0 {
                return Err(ConfigError::invalid(path, key("n_tasks"), "must not be negative"));
            }
            dirs.truncate(n as usize);
        }
        if dirs.is_empty() {
            // A directory that is almost a task was most likely meant as one: say what it lacks.
            let missing = Task::missing_parts(dataset_path);
            let hint = if missing.len() < 4 {
                format!(" and is not a task directory itself (it lacks {})", missing.join(", "))
            } else {
                String::new()
            };
            return Err(ConfigError::invalid(
                path,
                key("path"),
                format!("{} holds no task directory{hint}", dataset_path.display()),
            ));
        }
        let source = dir_name(&absolute(dataset_path));
        tasks.extend(dirs.iter().map(|d| TaskRef {
            path: absolute(d),
            name: dir_name(d),
            source: Some(source.clone()),
        }));
    }
    Ok(tasks)
}

fn dir_name(path: &Path) -> String {
    absolute(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `YYYY-MM-DD__HH-MM-SS` in UTC (Harbor uses local time; a machine-independent clock keeps
/// job names sortable across hosts).
fn chrono_like_now() -> String {
    terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S").to_string()
}

/// The merged layers (defaults, file, environment) through the `config` crate.
fn layered(path: &Path, text: &str) -> Result<Value, ConfigError> {
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
fn parse_yaml(path: &Path, text: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    build_mapping(path, config::Config::builder().add_source(config::File::from_str(text, config::FileFormat::Yaml)))
}

/// Builds the sources into JSON, whose top level must be a mapping; errors name `path`.
fn build_mapping(
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
fn display_path(path: &str) -> String {
    if path == "." { "(top level)".to_string() } else { path.to_string() }
}

/// Removes serde_json's "at line 1 column 2" suffixes, which point into our intermediate JSON,
/// not into the user's file.
fn strip_serde_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(idx) => message[..idx].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::error::TrialErrorKind;

    fn example_tasks() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks")
    }

    fn load(yaml: &str) -> Result<JobSpec, ConfigError> {
        JobSpec::from_yaml(Path::new("job.yaml"), yaml, &Overrides::default())
    }

    #[test]
    fn reads_a_harbor_job_with_the_legacy_orchestrator_block() {
        let yaml = format!(
            "jobs_dir: /tmp/jobs\nn_attempts: 2\norchestrator:\n  type: local\n  n_concurrent_trials: 3\nenvironment:\n  force_build: true\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: http://127.0.0.1:9/v1\n      max_turns: 7\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        assert_eq!(spec.n_concurrent_trials, 3);
        assert_eq!(spec.n_attempts, 2);
        assert!(spec.force_build);
        assert!(spec.tasks.len() >= 5);
        assert_eq!(spec.plan().len(), 2 * spec.tasks.len());
        let AgentKind::Terminus2(opts) = &spec.agents[0].kind else { panic!("not terminus") };
        assert_eq!(opts.max_turns, 7);
        assert_eq!(opts.api_base.as_deref(), Some("http://127.0.0.1:9/v1"));
        // Sorted task order.
        let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn wrong_type_names_the_key() {
        let err = load("n_concurrent_trials: lots\n").unwrap_err().to_string();
        assert!(err.contains("n_concurrent_trials"), "{err}");
        let err = load("agents:\n  - name: terminus-2\n    model_name: m\n    kwargs:\n      max_turns: many\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("agents[0].kwargs.max_turns"), "{err}");
        let err = load("agents:\n  - name: terminus-2\n").unwrap_err().to_string();
        assert!(err.contains("agents[0].model_name"), "{err}");
        let err = load("agents:\n  - name: claude-code\n").unwrap_err().to_string();
        assert!(err.contains("agents[0].name"), "{err}");
        let err = load("environment:\n  delete: maybe\n").unwrap_err().to_string();
        assert!(err.contains("environment.delete"), "{err}");
    }

    #[test]
    fn a_missing_prompt_template_names_the_kwarg_and_the_file() {
        let yaml = "agents:\n  - name: terminus-2\n    model_name: m\n    kwargs:\n      prompt_template: /nonexistent/t.txt\n";
        let err = load(yaml).unwrap_err();
        assert!(matches!(err, ConfigError::PromptTemplate { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("agents[0].kwargs.prompt_template") && text.contains("/nonexistent/t.txt"), "{text}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let tasks = example_tasks();
        let err = load(&format!("n_concurrent_trials: 0\ndatasets:\n  - path: {}\n", tasks.display()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("n_concurrent_trials") && err.contains("at least 1"), "{err}");
        let err = load("datasets:\n  - path: /nonexistent/dir\n").unwrap_err().to_string();
        assert!(err.contains("datasets[0].path"), "{err}");
        let err = load("tasks: []\n").unwrap_err().to_string();
        assert!(err.contains("no task"), "{err}");
        for name in [".", "..", "a/b", "a\\b", ""] {
            let yaml =
                format!("job_name: {name:?}\nagents:\n  - name: nop\ndatasets:\n  - path: {}\n", tasks.display());
            assert!(load(&yaml).unwrap_err().to_string().contains("job_name"), "{name:?} is refused");
        }
    }

    #[test]
    fn yaml_syntax_errors_name_the_file() {
        let err = load("agents: [\n").unwrap_err().to_string();
        assert!(err.contains("job.yaml") && err.contains("YAML"), "{err}");
    }

    #[test]
    fn unknown_keys_become_warnings_with_their_path() {
        let yaml =
            format!("colour: blue\nenvironment:\n  flavour: x\ndatasets:\n  - path: {}\n", example_tasks().display());
        let spec = load(&yaml).unwrap();
        assert!(spec.warnings.iter().any(|w| w.starts_with("colour")), "{:?}", spec.warnings);
        assert!(spec.warnings.iter().any(|w| w.starts_with("environment.flavour")), "{:?}", spec.warnings);
    }

    #[test]
    fn task_filters_and_caps_apply() {
        let yaml = format!("datasets:\n  - path: {}\n    task_names: [\"h*\"]\n", example_tasks().display());
        let spec = load(&yaml).unwrap();
        assert!(spec.tasks.iter().all(|t| t.name.starts_with('h')));
        let yaml = format!("datasets:\n  - path: {}\n    n_tasks: 2\n", example_tasks().display());
        assert_eq!(load(&yaml).unwrap().tasks.len(), 2);
        let yaml = format!("datasets:\n  - path: {}\n    task_names: [\"zzz*\"]\n", example_tasks().display());
        assert!(load(&yaml).unwrap_err().to_string().contains("datasets[0].task_names"));
    }

    /// Agent kwargs keep the file's order in config.json, run after run (the `config` crate's
    /// maps keep insertion order with its `preserve_order` feature).
    #[test]
    fn kwargs_keep_the_files_order() {
        let keys = ["zeta", "temperature", "model_info", "alpha", "max_turns", "mid"];
        let mut yaml = format!(
            "datasets:\n  - path: {}\nagents:\n  - name: terminus-2\n    model_name: oracle\n    kwargs:\n",
            example_tasks().display()
        );
        for key in keys {
            let value = if key == "model_info" {
                "\n        max_output_tokens: 1\n        max_input_tokens: 2".to_string()
            } else {
                " 1".to_string()
            };
            yaml.push_str(&format!("      {key}:{value}\n"));
        }
        let spec = load(&yaml).unwrap();
        let kwargs = spec.raw["agents"][0]["kwargs"].as_object().unwrap();
        assert_eq!(kwargs.keys().map(String::as_str).collect::<Vec<_>>(), keys);
        let inner: Vec<&String> = kwargs["model_info"].as_object().unwrap().keys().collect();
        assert_eq!(inner, ["max_output_tokens", "max_input_tokens"]);
    }

    #[test]
    fn defaults_layer_under_the_file_and_environment_over_it() {
        let yaml = format!("retry:\n  max_retries: 2\ndatasets:\n  - path: {}\n", example_tasks().display());
        let spec = load(&yaml).unwrap();
        assert_eq!(spec.retry.max_retries, 2);
        assert_eq!(spec.retry.exclude_exceptions.len(), 8, "the default exclusions stay");
        assert_eq!(spec.supervision.max_restarts, 1);
        assert_eq!(spec.metrics, vec![MetricKind::Mean]);
        assert_eq!(spec.raw["environment"]["delete"], true, "config.json records the defaults");
        assert_eq!(spec.raw["metrics"], serde_json::json!([]), "a list, as Harbor's JobConfig requires");
        assert_eq!(spec.raw["artifacts"], serde_json::json!([]));
        assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
        let legacy = format!(
            "orchestrator:\n  n_concurrent_trials: 2\n  retry:\n    max_retries: 4\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        let spec = load(&legacy).unwrap();
        assert_eq!((spec.n_concurrent_trials, spec.retry.max_retries), (2, 4));
        let err = load("retry:\n  max_retries: -1\n").unwrap_err().to_string();
        assert!(err.contains("retry.max_retries"), "{err}");
        let err = load("metrics:\n  - type: median\n").unwrap_err().to_string();
        assert!(err.contains("metrics[0].type"), "{err}");
    }

    #[test]
    fn the_watchdog_budget_sums_every_phase_with_slack() {
        let tasks = example_tasks();
        let yaml = format!(
            "supervision:\n  watchdog_margin_sec: 20\nagents:\n  - name: nop\n    override_timeout_sec: 100\n    override_setup_timeout_sec: 30\n  - name: nop\n    max_timeout_sec: 1\nverifier:\n  override_timeout_sec: 50\nenvironment_build_timeout_multiplier: 0.1\ntasks:\n  - path: {}\n",
            tasks.join("hello-world").display()
        );
        let spec = load(&yaml).unwrap();
        let task = Task::load(&tasks.join("hello-world")).unwrap();
        let build = task.config.environment.build_timeout_sec * 0.1;
        let phases = build + 30.0 + 100.0 + 50.0;
        let budget = spec.trial_budget(&spec.agents[0], &task).unwrap().as_secs_f64();
        assert!((budget - (phases * 1.1 + 20.0)).abs() < 1e-6, "{budget} vs {phases}");
        // hello-world's own agent limit capped at 1 s, and the default set-up limit.
        let capped = spec.trial_budget(&spec.agents[1], &task).unwrap().as_secs_f64();
        assert!((capped - ((build + 360.0 + 1.0 + 50.0) * 1.1 + 20.0)).abs() < 1e-6, "{capped}");
        let err = load("supervision:\n  watchdog_margin_sec: 0\n").unwrap_err().to_string();
        assert!(err.contains("supervision.watchdog_margin_sec"), "{err}");
    }

    #[test]
    fn the_llm_block_applies_with_agent_overrides() {
        let yaml = format!(
            "n_concurrent_trials: 8\nllm:\n  max_attempts: 7\n  requests_per_minute: 100\nagents:\n  - name: terminus-2\n    model_name: openai/x\n  - name: terminus-2\n    model_name: openai/y\n    llm:\n      max_attempts: 2\n      max_concurrent_requests: 3\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        assert_eq!(spec.agents[0].llm.max_attempts, 7);
        assert_eq!(spec.agents[0].llm.max_concurrent_requests, 8, "defaults to the trial concurrency");
        assert_eq!(spec.agents[0].llm.requests_per_minute, Some(100));
        assert_eq!(spec.agents[1].llm.max_attempts, 2);
        assert_eq!(spec.agents[1].llm.max_concurrent_requests, 3);
        assert_eq!(spec.agents[1].llm.requests_per_minute, Some(100), "inherited from the job");
        let err = load("llm:\n  max_attempts: 0\n").unwrap_err().to_string();
        assert!(err.contains("llm.max_attempts"), "{err}");
        let err = load("llm:\n  colour: red\n").unwrap_err().to_string();
        assert!(err.contains("llm") && err.contains("colour"), "{err}");
    }

    #[test]
    fn a_stored_secret_comes_back_from_the_environment_or_the_resume_is_refused() {
        let mut stored = serde_json::json!({
            "environment": {"env": {"HF_TOKEN": "****", "PLAIN": "****", "API_KEY": "${MY_KEY}"}},
            "agents": [{"kwargs": {"api_key": "sk****ef"}}]
        });
        let env = |name: &str| match name {
            "HF_TOKEN" => Some("hf_real".to_string()),
            "MY_KEY" => Some("k".to_string()),
            "api_key" => Some("sk-real".to_string()),
            _ => None,
        };
        restore_secrets(&mut stored, "", &env).unwrap();
        assert_eq!(stored["environment"]["env"]["HF_TOKEN"], "hf_real");
        assert_eq!(stored["environment"]["env"]["PLAIN"], "****", "not a secret's key: as stored");
        assert_eq!(stored["environment"]["env"]["API_KEY"], "k");
        assert_eq!(stored["agents"][0]["kwargs"]["api_key"], "sk-real");
        let mut missing = serde_json::json!({"verifier": {"env": {"GH_TOKEN": "${GH_TOKEN}"}}});
        let err = restore_secrets(&mut missing, "", &|_| None).unwrap_err();
        assert_eq!(err, ("verifier.env.GH_TOKEN".to_string(), "GH_TOKEN".to_string()));
        assert!(unresolved_secret("GH_TOKEN").contains("`GH_TOKEN` is not set"));
    }

    #[test]
    fn secrets_in_kwargs_are_redacted_in_the_dump() {
        let yaml = format!(
            "agents:\n  - name: terminus-2\n    model_name: openai/x\n    kwargs:\n      api_key: sk-secretsecretsecret\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        assert!(!spec.raw.to_string().contains("sk-secretsecretsecret"));
    }

    fn t2_opts(spec: &JobSpec, idx: usize) -> &Terminus2Options {
        let AgentKind::Terminus2(opts) = &spec.agents[idx].kind else { panic!("not terminus") };
        opts
    }

    #[test]
    fn harbor_026_job_keys_are_acted_on() {
        let yaml = format!(
            "schema_version: 1\noverride_error_policy:\n  AgentTimeoutError:\n    should_retry: true\n    should_grade: false\n  RateLimitError:\n    should_retry: false\n    should_grade: true\nextra_instructions:\n  - Be brief.\nagents:\n  - name: terminus-2\n    model_name: hosted_vllm/claude-proxy\n    base_url: http://127.0.0.1:9/v1\n    model_api_key_name: LLM_PASS\n    model_api_format: anthropic_messages\n    env:\n      LLM_PASS: plain-value-of-the-key-1234\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
        use TrialErrorKind as K;
        assert!(!spec.retry.exclude_exceptions.contains(&K::AgentTimeout), "should_retry: true un-excludes it");
        assert!(spec.retry.exclude_exceptions.contains(&K::RateLimit), "should_retry: false excludes it");
        assert!(!spec.error_policy.still_graded(K::AgentTimeout), "should_grade: false");
        assert!(spec.error_policy.still_graded(K::RateLimit), "should_grade: true");
        assert!(!spec.error_policy.still_graded(K::Runtime), "the default for the rest");
        assert_eq!(spec.instruction("Do it."), "Do it.\n\nBe brief.");
        let opts = t2_opts(&spec, 0);
        assert_eq!(opts.api_base.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(opts.api_key_env.as_deref(), Some("LLM_PASS"));
        assert_eq!(opts.api_format, Some(crate::ModelApiFormat::AnthropicMessages));
        // config.json records them (the variable's name kept, its value in env masked).
        assert_eq!(spec.raw["schema_version"], 1);
        assert_eq!(spec.raw["agents"][0]["base_url"], "http://127.0.0.1:9/v1");
        assert_eq!(spec.raw["agents"][0]["model_api_key_name"], "LLM_PASS");
        assert_eq!(spec.raw["override_error_policy"]["RateLimitError"]["should_grade"], true);
        assert!(!spec.raw.to_string().contains("plain-value-of-the-key-1234"), "{}", spec.raw);
        // Absent, they are written as Harbor's defaults (its JobConfig refuses nulls).
        let plain = load(&format!("datasets:\n  - path: {}\n", example_tasks().display())).unwrap();
        assert_eq!(plain.raw["override_error_policy"], serde_json::json!({}));
        assert_eq!(plain.raw["extra_instructions"], serde_json::json!([]));
        assert_eq!(plain.raw["extra_instruction_paths"], serde_json::json!([]));
        assert_eq!(plain.instruction("Do it."), "Do it.");
    }

    #[test]
    fn harbor_026_values_terminus_cannot_honour_name_their_key() {
        let tasks = example_tasks();
        let with = |extra: &str| format!("{extra}datasets:\n  - path: {}\n", tasks.display());
        let agent = |keys: &str| with(&format!("agents:\n  - name: terminus-2\n    model_name: openai/x\n{keys}"));
        for (yaml, key) in [
            (with("schema_version: 2\n"), "schema_version"),
            (agent("    model_api_format: openai_responses\n"), "agents[0].model_api_format"),
            (agent("    model_api_format: carrier_pigeon\n"), "agents[0].model_api_format"),
            (agent("    model_api_key_name: not a name\n"), "agents[0].model_api_key_name"),
            (agent("    base_url: http://a/v1\n    kwargs:\n      api_base: http://b/v1\n"), "agents[0].base_url"),
            (agent("    load_trajectory: /t.json\n"), "agents[0].load_trajectory"),
            (with("install_only: true\n"), "install_only"),
            (with("source_jobs:\n  - {action: regrade, type: local, path: /j}\n"), "source_jobs"),
            (with("environment:\n  mounts:\n    - {type: bind, source: /a, target: /b}\n"), "environment.mounts"),
            (with("environment:\n  import_path: my:Env\n"), "environment.import_path"),
            (with("verifier:\n  import_path: my:Verifier\n"), "verifier.import_path"),
            (with("override_error_policy:\n  AgentTimeoutError:\n    retry: true\n"), "override_error_policy"),
            (with("extra_instruction_paths:\n  - /nonexistent/extra.md\n"), "extra_instruction_paths[0]"),
        ] {
            let err = load(&yaml).unwrap_err().to_string();
            assert!(err.contains(&format!("key `{key}")), "{key}: {err}");
        }
        let err = format!("{:?}", load(&with("tasks:\n  - path: /x\n    git_url: https://g\n")).unwrap_err());
        assert!(err.contains("git_url"), "{err}");
    }

    #[test]
    fn harbor_026_keys_without_effect_are_warned_about_by_name() {
        let yaml = format!(
            "skip_credential_checks: true\noverride_error_policy:\n  NoSuchError:\n    should_retry: true\n  CancelledError:\n    should_retry: true\n  AgentTimeoutError:\n    has_valid_reward: false\nenvironment:\n  stream: true\n  cpu_enforcement_policy: limit\nverifier:\n  include_logs: [\"*.txt\"]\nagents:\n  - name: terminus-2\n    model_name: openai/x\n    skills: [\"./skills\"]\n    n_concurrent: 2\n    mcp_servers:\n      - {{name: m, transport: stdio, command: x}}\n  - name: oracle\n    base_url: http://x/v1\ndatasets:\n  - path: {}\n    version: \"2.0\"\n",
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        for key in [
            "skip_credential_checks:",
            "override_error_policy.NoSuchError:",
            "override_error_policy.CancelledError.should_retry:",
            "override_error_policy.AgentTimeoutError.has_valid_reward:",
            "environment.stream:",
            "environment.cpu_enforcement_policy:",
            "verifier.include_logs:",
            "agents[0].skills:",
            "agents[0].n_concurrent:",
            "agents[0].mcp_servers:",
            "agents[1].base_url:",
            "datasets[0].version:",
        ] {
            assert!(spec.warnings.iter().any(|w| w.starts_with(key)), "{key} in {:#?}", spec.warnings);
        }
        assert_eq!(spec.warnings.len(), 12, "{:#?}", spec.warnings);
        assert!(spec.warnings.iter().all(|w| !w.contains("unknown key")), "{:#?}", spec.warnings);
    }

    #[test]
    fn explicit_retry_exclusions_win_over_override_error_policy() {
        let yaml = format!(
            "retry:\n  exclude_exceptions: [RuntimeError]\noverride_error_policy:\n  AgentTimeoutError:\n    should_retry: false\ndatasets:\n  - path: {}\n",
            example_tasks().display()
        );
        assert_eq!(load(&yaml).unwrap().retry.exclude_exceptions, vec![TrialErrorKind::Runtime]);
    }

    #[test]
    fn extra_instruction_files_come_before_the_inline_ones() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("extra.md");
        std::fs::write(&file, "From the file.").unwrap();
        let yaml = format!(
            "extra_instruction_paths: [{}]\nextra_instructions: [Inline.]\ndatasets:\n  - path: {}\n",
            file.display(),
            example_tasks().display()
        );
        let spec = load(&yaml).unwrap();
        assert_eq!(spec.instruction("Task."), "Task.\n\nFrom the file.\n\nInline.");
    }

    /// Harbor 0.26's own `config.json` (the fixture tests/helpers/harbor_job_fixture.py wrote with
    /// Harbor's models: every key present, at its default) reads as a job file: no key is
    /// unknown, none at its default draws a warning; only the exception names Harbor's default
    /// retry exclusions hold that terminus never records are pointed out.
    #[test]
    fn a_harbor_026_config_json_reads_with_every_key_known() {
        let text = include_str!("../../../tests/fixtures/harbor-0.26-job/harbor-written/config.json");
        let mut config: Value = serde_json::from_str(text).unwrap();
        config["datasets"][0]["path"] = Value::String(example_tasks().display().to_string());
        // The second agent is a custom class (import_path), which terminus refuses by name.
        let err = load(&config.to_string()).unwrap_err().to_string();
        assert!(err.contains("agents[1].import_path"), "{err}");
        config["agents"].as_array_mut().unwrap().truncate(1);
        let spec = load(&config.to_string()).unwrap();
        let others: Vec<&String> =
            spec.warnings.iter().filter(|w| !w.starts_with("retry.exclude_exceptions[")).collect();
        assert!(others.is_empty(), "{others:#?}");
        assert_eq!(spec.n_concurrent_trials, 2);
        assert_eq!(t2_opts(&spec, 0).max_turns, 50);
    }
}
