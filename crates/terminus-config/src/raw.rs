//! The job file exactly as users write it (Harbor's `JobConfig` schema).
//!
//! Every field has Harbor's name; defaults come from the embedded `default.yaml`, layered under
//! the file. A few keys are our extensions (`llm`, `supervision`, `grace_period_sec`,
//! `stall_warning_sec`, `terminal_timeout_sec`, `score_convention`, …). Harbor 0.26 keys terminus does not act on have
//! no field here: `harbor_keys.rs` warns about (or refuses) each by name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawJob {
    /// Harbor's document version; only 1 exists.
    pub schema_version: Option<i64>,
    pub job_name: Option<String>,
    pub jobs_dir: Option<PathBuf>,
    pub n_attempts: Option<i64>,
    pub n_concurrent_trials: Option<RawConcurrency>,
    /// `fixed` (the default) or `adaptive`: trials admitted by measured host capacity, up to
    /// `n_concurrent_trials` (`n_concurrent_trials: auto` implies it).
    pub admission: Option<String>,
    /// Legacy block; its values apply only where the top-level keys are absent.
    pub orchestrator: Option<RawOrchestrator>,
    pub timeout_multiplier: Option<f64>,
    pub agent_timeout_multiplier: Option<f64>,
    pub verifier_timeout_multiplier: Option<f64>,
    pub agent_setup_timeout_multiplier: Option<f64>,
    pub environment_build_timeout_multiplier: Option<f64>,
    pub debug: Option<bool>,
    pub quiet: Option<bool>,
    pub environment: RawEnvironment,
    pub verifier: RawVerifier,
    pub agents: Option<Vec<RawAgent>>,
    pub datasets: Vec<RawDataset>,
    pub tasks: Vec<RawTask>,
    pub retry: Option<RawRetry>,
    /// Harbor 0.26's per-exception overrides of its error policy, by exception name.
    pub override_error_policy: Option<BTreeMap<String, RawErrorPolicyOverride>>,
    /// Files whose contents are appended to every task's instruction (before `extra_instructions`).
    pub extra_instruction_paths: Option<Vec<PathBuf>>,
    /// Text appended to every task's instruction.
    pub extra_instructions: Option<Vec<String>>,
    pub metrics: Option<Vec<RawMetric>>,
    /// Paths to copy out of the container after each trial: a path, or `{source, destination}`.
    pub artifacts: Option<Vec<Value>>,
    /// Limits and retries of model calls (our extension; per-agent `llm` blocks override it).
    pub llm: Option<RawLlm>,
    /// Restarts of crashed trials (our extension).
    pub supervision: Option<RawSupervision>,
    /// How long cancelled trials get to clean up after the first interrupt.
    pub grace_period_sec: Option<f64>,
    /// A running trial that reports nothing for this long is flagged as stalled.
    pub stall_warning_sec: Option<f64>,
    /// How long one request to a trial's terminal (type keys, capture the pane) may take.
    pub terminal_timeout_sec: Option<f64>,
    /// The job's spending limit (our extension; per-agent `budget` blocks add their own).
    pub budget: Option<RawBudget>,
    /// What terminus itself may write into one trial's directory (episode logs, trajectories),
    /// in MB (our extension).
    pub max_trial_disk_mb: Option<f64>,
    /// Start without checking the agents' API keys and endpoints first (Harbor's key; recorded
    /// only when given, as Harbor's models take no null for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_credential_checks: Option<bool>,
    /// `none`, `oracle` or `strict`: whether every task's own solution runs before the job,
    /// and what a failing one does (our extension; recorded only when given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preflight: Option<String>,
    /// `harbor-0.25` (the default) or `harbor-0.26`: whose rule makes the headline score (our
    /// extension; recorded only when given). The other is always shown beside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score_convention: Option<String>,
}

/// The `budget:` block: what the job's (or an agent's) model calls may spend in all.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawBudget {
    pub max_cost_usd: Option<f64>,
    pub max_tokens: Option<i64>,
}

/// Harbor's `RetryConfig`: which trial errors are retried, and how long to wait.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRetry {
    pub max_retries: Option<i64>,
    pub include_exceptions: Option<Vec<String>>,
    pub exclude_exceptions: Option<Vec<String>>,
    pub wait_multiplier: Option<f64>,
    pub min_wait_sec: Option<f64>,
    pub max_wait_sec: Option<f64>,
}

/// One entry of `override_error_policy` (Harbor's `ErrorPolicyOverride`, which forbids other keys).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawErrorPolicyOverride {
    pub should_retry: Option<bool>,
    pub should_grade: Option<bool>,
    pub has_valid_reward: Option<bool>,
}

/// One aggregate metric over a group's rewards.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawMetric {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub kwargs: Map<String, Value>,
}

/// Restarts of trials whose actor crashed or whose container died.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawSupervision {
    /// Restarts of one trial.
    pub max_restarts: Option<i64>,
    /// More than this many restarts in the window stops dispatching.
    pub intensity_max_restarts: Option<i64>,
    pub intensity_window_sec: Option<f64>,
    /// Slack the watchdog allows beyond a trial's own deadlines before it ends the trial.
    pub watchdog_margin_sec: Option<f64>,
}

/// The `llm:` block: shared limits and the retry policy of model calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLlm {
    pub max_concurrent_requests: Option<i64>,
    pub adaptive_concurrency: Option<bool>,
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
    pub max_attempts: Option<i64>,
    pub base_delay_sec: Option<f64>,
    pub max_delay_sec: Option<f64>,
    pub request_timeout_sec: Option<f64>,
    /// How long one model call, its retries included, may take before the trial gives up on it.
    pub call_timeout_sec: Option<f64>,
}

impl RawLlm {
    /// This block with `over`'s fields taking precedence.
    pub fn overlaid(&self, over: &RawLlm) -> RawLlm {
        RawLlm {
            max_concurrent_requests: over.max_concurrent_requests.or(self.max_concurrent_requests),
            adaptive_concurrency: over.adaptive_concurrency.or(self.adaptive_concurrency),
            requests_per_minute: over.requests_per_minute.or(self.requests_per_minute),
            tokens_per_minute: over.tokens_per_minute.or(self.tokens_per_minute),
            max_attempts: over.max_attempts.or(self.max_attempts),
            base_delay_sec: over.base_delay_sec.or(self.base_delay_sec),
            max_delay_sec: over.max_delay_sec.or(self.max_delay_sec),
            request_timeout_sec: over.request_timeout_sec.or(self.request_timeout_sec),
            call_timeout_sec: over.call_timeout_sec.or(self.call_timeout_sec),
        }
    }
}

/// `n_concurrent_trials`: a number, or a word (`auto`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RawConcurrency {
    Count(i64),
    Word(String),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawOrchestrator {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub n_concurrent_trials: Option<RawConcurrency>,
    pub quiet: Option<bool>,
    pub retry: Option<Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct RawEnvironment {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub force_build: bool,
    pub delete: bool,
    pub override_cpus: Option<f64>,
    pub override_memory_mb: Option<i64>,
    pub override_storage_mb: Option<i64>,
    pub override_gpus: Option<i64>,
    pub env: BTreeMap<String, String>,
    pub kwargs: Map<String, Value>,
    /// Harbor's run-specific allowlist hosts (`extra_allowed_hosts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_allowed_hosts: Vec<String>,
    // How trial containers are confined (our extensions; each has a safe default in code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_new_privileges: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap_drop: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap_add: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_opt: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_container_logs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolate_network: Option<bool>,
    /// What of a trial's `/logs` and artifacts may reach the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_log_mb: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_log_files: Option<i64>,
    /// What a task's image build may use: memory in MiB and CPUs (our extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_memory_mb: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_cpus: Option<f64>,
    /// With `type: swarm`: the cluster (our extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swarm: Option<RawSwarm>,
    /// The host variables tasks may read: a list of names, or `all` (our extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_env: Option<Value>,
}

/// `environment.swarm`: how to reach a Docker Swarm and where its trials may run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawSwarm {
    /// `unix:///path`, `tcp://host:port` or `ssh://user@host`.
    pub manager: Option<String>,
    /// A directory of client certificates for a `tcp://` manager: `ca.pem`, `cert.pem`,
    /// `key.pem` (Docker's `DOCKER_CERT_PATH` layout; a path, so no config dump masks it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<PathBuf>,
    /// The port of every node's daemon (default 2376 with TLS, else 2375).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_port: Option<u16>,
    /// The same for the nodes' daemons (default: the manager's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_tls: Option<PathBuf>,
    /// Reach the nodes' daemons on plain TCP, without TLS: anyone who reaches their port
    /// (a trial container included) controls the node. Refused unless set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_nodes: bool,
    /// `host:port` of a registry every node pulls from; without one, images are streamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Default for RawEnvironment {
    fn default() -> Self {
        RawEnvironment {
            kind: None,
            force_build: false,
            delete: true,
            override_cpus: None,
            override_memory_mb: None,
            override_storage_mb: None,
            override_gpus: None,
            env: BTreeMap::new(),
            kwargs: Map::new(),
            extra_allowed_hosts: Vec::new(),
            pids_limit: None,
            no_new_privileges: None,
            cap_drop: None,
            cap_add: None,
            runtime: None,
            security_opt: None,
            keep_container_logs: None,
            isolate_network: None,
            max_log_mb: None,
            build_memory_mb: None,
            build_cpus: None,
            max_log_files: None,
            swarm: None,
            host_env: None,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawVerifier {
    pub override_timeout_sec: Option<f64>,
    pub max_timeout_sec: Option<f64>,
    pub env: BTreeMap<String, String>,
    pub disable: bool,
    /// Harbor's run-specific allowlist hosts (`extra_allowed_hosts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_allowed_hosts: Vec<String>,
    /// What becomes of the agent's processes when the tests start (`keep`, `kill`).
    pub agent_processes: AgentProcesses,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawAgent {
    /// Harbor's run-specific allowlist hosts (`extra_allowed_hosts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_allowed_hosts: Vec<String>,
    pub name: Option<String>,
    pub import_path: Option<String>,
    pub model_name: Option<String>,
    /// Harbor 0.26: the inference endpoint (Terminus 2's `kwargs.api_base`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Harbor 0.26: the environment variable holding the API key (`kwargs.api_key_env`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_api_key_name: Option<String>,
    /// Harbor 0.26: the inference protocol (`openai_chat_completions`, `anthropic_messages`…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_api_format: Option<String>,
    pub override_timeout_sec: Option<f64>,
    pub override_setup_timeout_sec: Option<f64>,
    pub max_timeout_sec: Option<f64>,
    pub kwargs: Map<String, Value>,
    pub env: BTreeMap<String, String>,
    /// Overrides of the job's `llm:` block for this agent.
    pub llm: Option<RawLlm>,
    /// This agent's own spending limit, besides the job's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<RawBudget>,
    /// Harbor's `resume_trajectory`: continue the previous step's chat in a multi-step task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_trajectory: Option<bool>,
    /// Local skill directories uploaded into every trial's container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// MCP servers offered to the agent besides the task's (the agent's win by name).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<crate::task::McpServer>,
}

/// One `datasets` entry: a directory of tasks (`path`), or a dataset of a registry (`name`,
/// `version`, and `registry_path` or `registry_url`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawDataset {
    pub path: Option<PathBuf>,
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_path: Option<PathBuf>,
    /// Harbor's deprecated nested form of the two keys above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<RawRegistry>,
    /// A git repository whose `registry.json` (or `registry_path` in it) lists the dataset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    pub task_names: Option<Vec<String>>,
    pub exclude_task_names: Option<Vec<String>>,
    pub n_tasks: Option<i64>,
}

/// `datasets[].registry: {name, url, path}` (the name is a label).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRegistry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub url: Option<String>,
    pub path: Option<PathBuf>,
}

/// One `tasks` entry: a task directory (`path`), or a directory in a git repository (`path`
/// with `git_url` and `git_commit_id`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawTask {
    pub path: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit_id: Option<String>,
    pub name: Option<String>,
    pub source: Option<String>,
}

/// What happens to the processes the agent left running when its tests start
/// (`verifier.agent_processes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentProcesses {
    /// They run on through the tests, as in Harbor: a server or worker the task asked for is
    /// graded live.
    #[default]
    Keep,
    /// Everything the agent started is frozen, then killed, before the tests (and before a
    /// multi-step task's intermediate tests, the terminal's own commands included): no daemon
    /// can change the verdict. Tasks that grade a running service then fail.
    Kill,
}

impl AgentProcesses {
    pub fn name(self) -> &'static str {
        match self {
            AgentProcesses::Keep => "keep",
            AgentProcesses::Kill => "kill",
        }
    }
}
