//! The job's data once validated: its agents, tasks, multipliers and settings, and the trials
//! it expands into.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use terminus_core::llm::{LimitSettings, RetryPolicy};
use terminus_core::result::TaskConfigRecord;
pub use terminus_core::stats::ScoreConvention;

use super::paths::{absolute, dir_name};
use crate::error::ConfigError;
use crate::policy::{ArtifactSpec, ContainerPolicy, ErrorPolicySpec, MetricKind, RetrySpec, SupervisionSpec};
use crate::raw::RawLlm;
use crate::registry::{GitSource, TaskCache};
use crate::terminus::Terminus2Options;

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
    pub limits: LimitSettings,
    pub retry: RetryPolicy,
    pub request_timeout: Duration,
    /// One call with its retries, end to end.
    pub call_timeout: Duration,
}

impl LlmSettings {
    pub(super) fn from_raw(
        path: &Path,
        key: &str,
        raw: &RawLlm,
        n_concurrent_trials: usize,
    ) -> Result<LlmSettings, ConfigError> {
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
            limits: LimitSettings {
                max_concurrent: positive_int("max_concurrent_requests", raw.max_concurrent_requests)?
                    .map_or(n_concurrent_trials.max(1), |v| v as usize),
                adaptive: raw.adaptive_concurrency.unwrap_or(true),
                requests_per_minute: positive_int("requests_per_minute", raw.requests_per_minute)?
                    .map(|v| v.min(u32::MAX as u64) as u32),
                tokens_per_minute: positive_int("tokens_per_minute", raw.tokens_per_minute)?,
            },
            retry: RetryPolicy {
                max_attempts: positive_int("max_attempts", raw.max_attempts)?.map_or(3, |v| v.min(100) as u32),
                base_delay: seconds("base_delay_sec", raw.base_delay_sec, 1.0)?,
                max_delay: seconds("max_delay_sec", raw.max_delay_sec, 60.0)?,
            },
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
    /// `agents[].mcp_servers`: merged with the task's by name, this agent's winning.
    pub mcp_servers: Vec<crate::task::McpServer>,
    /// `agents[].skills`: uploaded into every trial's skills directory before the agent starts.
    pub skills: Vec<crate::skills::InjectedSkill>,
}

impl AgentSpec {
    /// The MCP servers of a trial of `task_servers`' task: the task's in their order, each
    /// replaced in place by this agent's server of the same name, then the agent's others in
    /// theirs (a by-name merge, as Harbor's trial does it).
    pub fn merged_mcp_servers<'a>(
        &'a self,
        task_servers: &'a [crate::task::McpServer],
    ) -> Vec<&'a crate::task::McpServer> {
        let mut merged: Vec<&crate::task::McpServer> = Vec::new();
        for server in task_servers.iter().chain(&self.mcp_servers) {
            match merged.iter_mut().find(|s| s.name == server.name) {
                Some(slot) => *slot = server,
                None => merged.push(server),
            }
        }
        merged
    }
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
    /// Where the task is read from: its directory, or for a git task its entry in the task
    /// cache (which the command line fills before the job starts).
    pub path: PathBuf,
    /// The directory name; trial names are made from it.
    pub name: String,
    /// The dataset's name (a dataset directory's, or a registry dataset's), or None for tasks
    /// given one by one.
    pub source: Option<String>,
    /// The repository, commit and path a fetched task comes from.
    pub git: Option<GitSource>,
    /// The registry dataset's version, for a task listed in one.
    pub dataset_version: Option<String>,
}

impl TaskRef {
    /// A task in a local directory.
    pub fn local(path: &Path, source: Option<String>) -> TaskRef {
        TaskRef { path: absolute(path), name: dir_name(path), source, git: None, dataset_version: None }
    }

    /// A task fetched from git, read from its entry in `cache`.
    pub fn fetched(cache: &TaskCache, git: GitSource, source: Option<String>) -> TaskRef {
        TaskRef { path: cache.entry(&git), name: git.name().to_string(), source, git: Some(git), dataset_version: None }
    }

    /// The task as a trial's `config.json` records it: a git task by its path in the repository,
    /// its `git_url` and `git_commit_id` (Harbor's way).
    pub fn record(&self) -> TaskConfigRecord {
        let (path, git_url, git_commit_id) = match &self.git {
            Some(git) => (git.path.clone(), Some(git.git_url.clone()), Some(git.commit.clone())),
            None => (self.path.display().to_string(), None, None),
        };
        TaskConfigRecord {
            path,
            git_url,
            git_commit_id,
            source: self.source.clone(),
            dataset_version: self.dataset_version.clone(),
        }
    }
}

/// Timeout multipliers per phase (each falls back to `timeout_multiplier`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Multipliers {
    pub agent: f64,
    pub verifier: f64,
    pub agent_setup: f64,
    pub environment_build: f64,
}

/// How trials are admitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionMode {
    /// `n_concurrent_trials` at once, always.
    #[default]
    Fixed,
    /// As many as the host's measured health allows, up to `n_concurrent_trials`.
    Adaptive,
}

/// The bound of `n_concurrent_trials: auto`.
pub const AUTO_CONCURRENCY: usize = 256;

/// A validated job.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub job_name: String,
    pub jobs_dir: PathBuf,
    pub n_attempts: u32,
    /// How many trials run at once: exactly, or (adaptive admission) at most.
    pub n_concurrent_trials: usize,
    pub admission: AdmissionMode,
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
    /// Whose rule makes the headline score (`score_convention`); the other is shown beside it.
    pub score_convention: ScoreConvention,
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
    /// Whether the agents' keys and endpoints go unchecked before the job starts.
    pub skip_credential_checks: bool,
    /// Whether the tasks' own solutions run before the job (`preflight:`).
    pub preflight: PreflightMode,
    /// The job file as read, with defaults filled in; written as `config.json`.
    pub raw: Value,
    /// Things worth telling the user that do not stop the job (unknown keys…).
    pub warnings: Vec<String>,
}

/// One trial to run: which task, which agent, which attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialPlan {
    pub task: TaskRef,
    pub agent_idx: usize,
    pub attempt: u32,
    /// The recorded trial this one replays: its model's replies are read from there instead of
    /// asking the model (`trials replay`, `jobs regrade`).
    pub replay_of: Option<PathBuf>,
}

impl TrialPlan {
    /// What identifies the trial across runs of its job, as its `config.json`'s
    /// `TrialConfig::trial_key` gives it back: the task's identity, agent index, attempt.
    pub fn key(&self) -> (String, usize, u32) {
        (self.task.record().identity(), self.agent_idx, self.attempt)
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

    /// The instruction the agent is given for a task: the task's own, then each extra
    /// instruction, separated by blank lines (Harbor's joining).
    pub fn instruction(&self, task_instruction: &str) -> String {
        let mut parts = vec![task_instruction];
        parts.extend(self.extra_instructions.iter().map(String::as_str));
        parts.join("\n\n")
    }

    /// The same job in the directory `job_dir` (`jobs_dir/job_name` become its parent and
    /// name), its record too.
    pub fn relocate(&mut self, job_dir: &Path) {
        let abs = absolute(job_dir);
        self.job_name = abs.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.jobs_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
        if let Value::Object(raw) = &mut self.raw {
            raw.insert("job_name".into(), Value::String(self.job_name.clone()));
            raw.insert("jobs_dir".into(), Value::String(self.jobs_dir.display().to_string()));
        }
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
                    plans.push(TrialPlan { task: task.clone(), agent_idx, attempt, replay_of: None });
                }
            }
        }
        plans
    }
}

/// `preflight:` in the job file, `run --preflight[=strict]` on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreflightMode {
    /// No preflight (the default).
    #[default]
    None,
    /// Tasks whose solution fails are left out of the job, named on the terminal and in its
    /// `result.json`.
    Oracle,
    /// A task whose solution fails refuses the job.
    Strict,
}

impl PreflightMode {
    pub const NAMES: [&'static str; 3] = ["none", "oracle", "strict"];

    pub fn name(self) -> &'static str {
        match self {
            PreflightMode::None => "none",
            PreflightMode::Oracle => "oracle",
            PreflightMode::Strict => "strict",
        }
    }

    pub(super) fn parse(path: &Path, value: Option<&str>) -> Result<PreflightMode, ConfigError> {
        match value {
            None | Some("none") => Ok(PreflightMode::None),
            Some("oracle") => Ok(PreflightMode::Oracle),
            Some("strict") => Ok(PreflightMode::Strict),
            Some(other) => Err(ConfigError::invalid(
                path,
                "preflight",
                format!("{other:?} is not one of {}", PreflightMode::NAMES.join(", ")),
            )),
        }
    }
}
