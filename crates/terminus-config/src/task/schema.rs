//! The `task.toml` schema: every key of Harbor 0.26's task model, so that a task Harbor accepts
//! loads here too. What the orchestrator does not act on is reported by name
//! ([`super::TaskNotice`]); keys Harbor does not know either are accepted with a notice, as
//! Harbor's model ignores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The largest `task.toml` read.
pub const MAX_TOML_BYTES: u64 = 1 << 20;

/// `task.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskToml {
    /// The legacy spelling of `schema_version`.
    pub version: Option<String>,
    pub schema_version: Option<String>,
    pub task: Option<TaskSection>,
    /// Free-form; kept, never acted on (Harbor's model does the same).
    pub metadata: BTreeMap<String, toml::Value>,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    pub environment: EnvironmentSection,
    pub solution: SolutionSection,
    pub source: Option<String>,
    pub multi_step_reward_strategy: Option<RewardStrategy>,
    /// `[[steps]]`: a multi-step task (instructions under `steps/<name>/`).
    pub steps: Option<Vec<StepSection>>,
    pub artifacts: Vec<ArtifactSpec>,
}

/// `[task]`: the package's identity.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskSection {
    pub name: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    pub authors: Vec<Author>,
    pub keywords: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Author {
    pub name: String,
    #[serde(default)]
    pub email: Option<String>,
}

/// How much network a phase gets (Harbor's `network_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    NoNetwork,
    #[default]
    Public,
    /// Only `allowed_hosts`.
    Allowlist,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::NoNetwork => "no-network",
            NetworkMode::Public => "public",
            NetworkMode::Allowlist => "allowlist",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct AgentSection {
    /// None means the agent has no time limit (Harbor's default).
    pub timeout_sec: Option<f64>,
    pub user: Option<UserSpec>,
    /// An override of the environment's network policy while the agent runs.
    pub network_mode: Option<NetworkMode>,
    pub allowed_hosts: Option<Vec<String>>,
}

/// Where the verifier runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifierMode {
    Shared,
    Separate,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct VerifierSection {
    pub timeout_sec: f64,
    pub env: BTreeMap<String, String>,
    pub user: Option<UserSpec>,
    pub network_mode: Option<NetworkMode>,
    pub allowed_hosts: Option<Vec<String>>,
    pub environment_mode: Option<VerifierMode>,
    /// The separate verifier's own environment.
    pub environment: Option<Box<EnvironmentSection>>,
    /// `[[verifier.collect]]`: commands run in compose services before artifacts are taken.
    pub collect: Vec<CollectSpec>,
}

impl Default for VerifierSection {
    fn default() -> Self {
        VerifierSection {
            timeout_sec: 600.0,
            env: BTreeMap::new(),
            user: None,
            network_mode: None,
            allowed_hosts: None,
            environment_mode: None,
            environment: None,
            collect: Vec::new(),
        }
    }
}

impl VerifierSection {
    /// Harbor's rule: `separate` when asked, or when the verifier has its own environment.
    pub fn is_separate(&self) -> bool {
        match self.environment_mode {
            Some(mode) => mode == VerifierMode::Separate,
            None => self.environment.is_some(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct CollectSpec {
    pub command: String,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub timeout_sec: Option<f64>,
    #[serde(default)]
    pub user: Option<UserSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SolutionSection {
    pub env: BTreeMap<String, String>,
}

/// A readiness check run after the environment starts (Docker HEALTHCHECK's options).
#[derive(Clone, Debug, Deserialize)]
pub struct Healthcheck {
    pub command: String,
    #[serde(default = "Healthcheck::default_interval")]
    pub interval_sec: f64,
    #[serde(default = "Healthcheck::default_timeout")]
    pub timeout_sec: f64,
    #[serde(default)]
    pub start_period_sec: f64,
    #[serde(default = "Healthcheck::default_interval")]
    pub start_interval_sec: f64,
    #[serde(default = "Healthcheck::default_retries")]
    pub retries: u32,
}

impl Healthcheck {
    fn default_interval() -> f64 {
        5.0
    }
    fn default_timeout() -> f64 {
        30.0
    }
    fn default_retries() -> u32 {
        3
    }
}

/// An MCP server the agent may use (a task's, or an agent's in the job file).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct McpServer {
    pub name: String,
    #[serde(default = "McpServer::default_transport")]
    pub transport: String,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl McpServer {
    fn default_transport() -> String {
        "sse".to_string()
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct TpuSpec {
    #[serde(rename = "type")]
    pub kind: String,
    pub topology: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct EnvironmentSection {
    pub build_timeout_sec: f64,
    pub docker_image: Option<String>,
    pub os: String,
    pub cpus: f64,
    pub memory_mb: Option<u64>,
    /// Deprecated form of `memory_mb`, e.g. `"2G"`.
    pub memory: Option<String>,
    pub storage_mb: Option<u64>,
    /// Deprecated form of `storage_mb`.
    pub storage: Option<String>,
    pub gpus: u32,
    pub gpu_types: Option<Vec<String>>,
    pub tpu: Option<TpuSpec>,
    pub mcp_servers: Vec<McpServer>,
    /// Values may be `${VAR}` or `${VAR:-default}`: resolved from the host when the trial starts.
    pub env: BTreeMap<String, String>,
    pub skills_dir: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    pub workdir: Option<String>,
    /// Deprecated form of `network_mode` (`false` is `no-network`).
    pub allow_internet: Option<bool>,
    pub network_mode: Option<NetworkMode>,
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        EnvironmentSection {
            build_timeout_sec: 600.0,
            docker_image: None,
            os: "linux".to_string(),
            cpus: 1.0,
            memory_mb: None,
            memory: None,
            storage_mb: None,
            storage: None,
            gpus: 0,
            gpu_types: None,
            tpu: None,
            mcp_servers: Vec::new(),
            env: BTreeMap::new(),
            skills_dir: None,
            healthcheck: None,
            workdir: None,
            allow_internet: None,
            network_mode: None,
            allowed_hosts: None,
        }
    }
}

impl EnvironmentSection {
    /// Memory limit in MiB: `memory_mb`, else the deprecated `memory` string, else 2048.
    pub fn memory_mb(&self) -> Result<u64, String> {
        if let Some(mb) = self.memory_mb {
            return Ok(mb);
        }
        match &self.memory {
            Some(text) => parse_size_mb(text).ok_or_else(|| format!("environment.memory: cannot read size {text:?}")),
            None => Ok(2048),
        }
    }

    /// The storage limit in MiB: `storage_mb`, else the deprecated `storage` string.
    pub fn storage_mb(&self) -> Option<u64> {
        self.storage_mb.or_else(|| self.storage.as_deref().and_then(parse_size_mb))
    }

    /// The environment's own network policy: `network_mode`, else the deprecated
    /// `allow_internet` (only when neither `network_mode` nor `allowed_hosts` is given, as
    /// Harbor migrates it), else public.
    pub fn baseline_network(&self) -> NetworkMode {
        match (self.network_mode, self.allow_internet) {
            (Some(mode), _) => mode,
            (None, Some(false)) if self.allowed_hosts.is_none() => NetworkMode::NoNetwork,
            _ => NetworkMode::Public,
        }
    }
}

/// `[[steps]]`.
#[derive(Clone, Debug, Deserialize)]
pub struct StepSection {
    pub name: String,
    #[serde(default)]
    pub agent: AgentSection,
    #[serde(default)]
    pub verifier: VerifierSection,
    #[serde(default)]
    pub min_reward: Option<MinReward>,
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    #[serde(default)]
    pub artifacts: Vec<ArtifactSpec>,
}

/// A step's gate: on `reward`, or on each named key.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum MinReward {
    Reward(f64),
    Keys(BTreeMap<String, f64>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewardStrategy {
    Mean,
    Final,
}

/// A file or directory taken from the container after verification.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ArtifactSpec {
    Path(String),
    Detailed {
        source: String,
        #[serde(default)]
        destination: Option<String>,
        #[serde(default)]
        exclude: Vec<String>,
        #[serde(default)]
        service: Option<String>,
    },
}

impl ArtifactSpec {
    pub fn source(&self) -> &str {
        match self {
            ArtifactSpec::Path(source) | ArtifactSpec::Detailed { source, .. } => source,
        }
    }
}

/// A user given as a name or a numeric id.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum UserSpec {
    Name(String),
    Id(i64),
}

impl std::fmt::Display for UserSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserSpec::Name(name) => f.write_str(name),
            UserSpec::Id(id) => write!(f, "{id}"),
        }
    }
}

/// Parses "2G", "512M", "1024" (MiB) into MiB.
pub(super) fn parse_size_mb(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_uppercase();
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len()));
    let value: f64 = digits.parse().ok()?;
    let factor = match unit.trim_end_matches('B').trim() {
        "" | "M" => 1.0,
        "G" => 1024.0,
        "K" => 1.0 / 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((value * factor).round() as u64)
}
