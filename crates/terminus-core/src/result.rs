//! Harbor-compatible trial records: a trial's `result.json` ([`TrialResult`]) and its
//! `config.json` ([`TrialConfig`]).
//!
//! Field names and nesting follow Harbor's `TrialResult` and `TrialConfig` models so that
//! existing viewers and analysis scripts read our job directories unchanged. The job's
//! `result.json`, the figures its trials add up to, lives in [`crate::stats`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{TrialError, TrialErrorKind};
use crate::error_policy::{ErrorPolicy, PolicyOverride};
use crate::ids::TrialName;
use crate::models::ModelLimits;
use crate::secrets::{is_secret_key, redact_json, redact_value};
use crate::time::{Timestamp, serde_iso};

/// When a phase of a trial started and finished.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingInfo {
    #[serde(with = "serde_iso::option")]
    pub started_at: Option<Timestamp>,
    #[serde(with = "serde_iso::option")]
    pub finished_at: Option<Timestamp>,
}

impl TimingInfo {
    /// A timing block that starts now.
    pub fn started() -> TimingInfo {
        TimingInfo { started_at: Some(crate::time::now()), finished_at: None }
    }

    /// Marks the phase finished now (keeps the first finish time).
    pub fn finish(&mut self) {
        if self.finished_at.is_none() {
            self.finished_at = Some(crate::time::now());
        }
    }

    /// Seconds between start and finish, when both are known.
    pub fn seconds(&self) -> Option<f64> {
        let (start, end) = (self.started_at?, self.finished_at?);
        Some((end - start).num_microseconds()? as f64 / 1e6)
    }
}

/// The model an agent used, split as Harbor splits `provider/name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub name: String,
    pub provider: Option<String>,
}

impl ModelInfo {
    /// Splits `openai/gpt-4o` into provider `openai` and name `gpt-4o`.
    pub fn from_model_name(model_name: &str) -> ModelInfo {
        match model_name.split_once('/') {
            Some((provider, name)) => ModelInfo { name: name.to_string(), provider: Some(provider.to_string()) },
            None => ModelInfo { name: model_name.to_string(), provider: None },
        }
    }
}

/// Which agent ran a trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub name: String,
    pub version: String,
    pub model_info: Option<ModelInfo>,
}

/// What the agent reports about its run (Harbor's `AgentContext`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentContext {
    pub n_input_tokens: Option<u64>,
    pub n_cache_tokens: Option<u64>,
    pub n_output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub rollout_details: Option<Vec<Value>>,
    pub metadata: Option<Map<String, Value>>,
}

/// Rewards read from the verifier's `reward.txt` (as `{"reward": x}`) or `reward.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifierResult {
    pub rewards: Option<BTreeMap<String, f64>>,
}

/// The first error a trial met. Harbor keeps only the first one, and so do we.
///
/// Written with `policy` last: what Harbor 0.26 makes of the name with `policy_override`
/// applied ([`ExceptionInfo::policy`]); it is computed on every write, never read back.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ExceptionInfo {
    pub exception_type: String,
    pub exception_message: String,
    pub exception_traceback: String,
    #[serde(with = "serde_iso")]
    pub occurred_at: Timestamp,
    /// The job's `override_error_policy` entry for this name, when it has one (left out then).
    #[serde(default)]
    pub policy_override: Option<PolicyOverride>,
    /// terminus's kind of the failure ([`TrialErrorKind::name`]), finer than Harbor's name in
    /// `exception_type` (absent from Harbor's records and older ones).
    #[serde(default)]
    pub kind: Option<String>,
}

impl Serialize for ExceptionInfo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct OnDisk<'a> {
            exception_type: &'a str,
            exception_message: &'a str,
            exception_traceback: &'a str,
            occurred_at: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            policy_override: Option<&'a PolicyOverride>,
            policy: ErrorPolicy,
            #[serde(skip_serializing_if = "Option::is_none")]
            kind: Option<&'a str>,
        }
        let ExceptionInfo {
            exception_type,
            exception_message,
            exception_traceback,
            occurred_at,
            policy_override,
            kind,
        } = self;
        OnDisk {
            exception_type,
            exception_message,
            exception_traceback,
            occurred_at: crate::time::iso(occurred_at),
            policy_override: policy_override.as_ref(),
            policy: self.policy(),
            kind: kind.as_deref(),
        }
        .serialize(s)
    }
}

impl TrialError {
    /// The record Harbor's `exception_info` holds (built only when a result is written).
    pub fn to_exception_info(&self) -> ExceptionInfo {
        ExceptionInfo {
            exception_type: self.exception_type().to_string(),
            exception_message: self.message.clone(),
            exception_traceback: self.message.clone(),
            occurred_at: self.occurred_at,
            policy_override: None,
            kind: Some(self.kind.name().to_string()),
        }
    }
}

impl ExceptionInfo {
    /// The kind this record names; None for a name terminus does not produce (a Harbor-written
    /// result may hold one). Records are built from a [`TrialError`](crate::error::TrialError).
    pub fn kind(&self) -> Option<TrialErrorKind> {
        match &self.kind {
            Some(name) => TrialErrorKind::from_name(name),
            None => TrialErrorKind::from_name(&self.exception_type),
        }
    }

    /// Harbor 0.26's policy for this error: its name's, with its override applied.
    pub fn policy(&self) -> ErrorPolicy {
        ErrorPolicy::of(&self.exception_type, self.policy_override.as_ref())
    }
}

/// Where a trial's task came from (Harbor's `LocalTaskId`, or `GitTaskId` with the git keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskIdRecord {
    /// Empty for a Harbor package task (`{org, name, ref}`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit_id: Option<String>,
}

/// The task of a trial's config. A task fetched from a git repository records Harbor's way:
/// `path` inside the repository, `git_url`, `git_commit_id`; the dataset's name is `source`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskConfigRecord {
    /// Empty for a Harbor task that is a package (`name`, no `path`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit_id: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    /// The version of the registry dataset the task was listed in (ours; Harbor records it only
    /// in the job's `datasets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_version: Option<String>,
}

impl TaskConfigRecord {
    /// What tells this task from every other of a job: its path, and for a git task also the
    /// repository and commit (two datasets may hold the same path at different commits).
    pub fn identity(&self) -> String {
        match (&self.git_url, &self.git_commit_id) {
            (Some(url), commit) => format!("{url}@{}:{}", commit.as_deref().unwrap_or(""), self.path),
            (None, _) => self.path.clone(),
        }
    }

    /// The task's id as a trial's `result.json` records it.
    pub fn task_id(&self) -> TaskIdRecord {
        TaskIdRecord {
            path: self.path.clone(),
            git_url: self.git_url.clone(),
            git_commit_id: self.git_commit_id.clone(),
        }
    }
}

/// The agent of a trial's config.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentConfigRecord {
    /// Harbor leaves it null for an agent given by `import_path`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default)]
    pub model_name: Option<String>,
    #[serde(default)]
    pub override_timeout_sec: Option<f64>,
    #[serde(default)]
    pub max_timeout_sec: Option<f64>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub kwargs: Map<String, Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: BTreeMap<String, String>,
    /// The model's limits and prices as this trial used them, each with its source (terminus's;
    /// Harbor's `AgentConfig` ignores the key). None for agents that call no model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_limits: Option<ModelLimits>,
}

/// The environment of a trial's config, with how its container was confined.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentConfigRecord {
    /// Harbor leaves it null for an environment given by `import_path`.
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub kind: String,
    #[serde(default)]
    pub force_build: bool,
    #[serde(default)]
    pub delete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<ConfinementRecord>,
}

/// The confinement of a trial's container (terminus's; Harbor has no such record).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfinementRecord {
    #[serde(flatten)]
    pub confinement: crate::confinement::Confinement,
    /// `job` (the job's own bridge, no traffic between trials), `default` (the engine's bridge),
    /// or `none` (the task allows no internet).
    pub network: String,
}

/// The verifier of a trial's config.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifierConfigRecord {
    #[serde(default)]
    pub disable: bool,
    #[serde(default)]
    pub override_timeout_sec: Option<f64>,
}

/// A trial's `config.json` (Harbor's `TrialConfig` shape, plus the attempt and agent index that
/// identify the trial across runs of its job). Read leniently: Harbor-written configs, which
/// lack the last two, still parse.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialConfig {
    pub task: TaskConfigRecord,
    pub trial_name: String,
    #[serde(default)]
    pub trials_dir: String,
    // Harbor writes null for a phase that uses `timeout_multiplier`; terminus writes each
    // phase's resolved value.
    #[serde(default = "one", deserialize_with = "null_as_one")]
    pub agent_timeout_multiplier: f64,
    #[serde(default = "one", deserialize_with = "null_as_one")]
    pub verifier_timeout_multiplier: f64,
    #[serde(default = "one", deserialize_with = "null_as_one")]
    pub agent_setup_timeout_multiplier: f64,
    #[serde(default = "one", deserialize_with = "null_as_one")]
    pub environment_build_timeout_multiplier: f64,
    pub agent: AgentConfigRecord,
    #[serde(default)]
    pub environment: EnvironmentConfigRecord,
    #[serde(default)]
    pub verifier: VerifierConfigRecord,
    /// The job's `override_error_policy`, as Harbor 0.26 copies it into each trial's config (left
    /// out when empty).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub override_error_policy: BTreeMap<String, PolicyOverride>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_index: Option<usize>,
    /// Harbor writes null for a trial run on its own (`harbor trials start`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub job_id: String,
}

fn one() -> f64 {
    1.0
}

fn null_as_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(1.0))
}

/// Reads null as the type's default: Harbor writes null where terminus always has a value.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// An optional string written as `""` when absent (and `""` or null read as absent).
mod empty_as_none {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.filter(|v| !v.is_empty()))
    }
}

impl TrialConfig {
    /// The same config with every secret-looking value in the agent's kwargs and env redacted
    /// (the form that reaches disk).
    pub fn redacted(mut self) -> TrialConfig {
        let mut kwargs = Value::Object(std::mem::take(&mut self.agent.kwargs));
        redact_json(&mut kwargs);
        if let Value::Object(map) = kwargs {
            self.agent.kwargs = map;
        }
        for (key, value) in self.agent.env.iter_mut() {
            if is_secret_key(key) {
                *value = redact_value(key, value);
            }
        }
        self
    }

    /// The same config with the agent's env entry `name` (the variable its API key is read
    /// from, whatever it is called) redacted too.
    pub fn with_secret_env(mut self, name: Option<&str>) -> TrialConfig {
        if let Some(value) = name.and_then(|name| self.agent.env.get_mut(name)) {
            *value = redact_value(name.unwrap_or_default(), value);
        }
        self
    }

    /// The key that identifies the trial across runs of its job: (the task's
    /// [`identity`](TaskConfigRecord::identity), agent index, attempt); None for configs that
    /// lack them (not written by terminus).
    pub fn trial_key(&self) -> Option<(String, usize, u32)> {
        Some((self.task.identity(), self.agent_index?, self.attempt?))
    }
}

/// One trial's `result.json`.
///
/// Written as Harbor 0.26 writes it: `schema_version` first and `reward_valid` last, computed on
/// every write ([`TrialResult::reward_valid`]) and never read back (see the `Serialize` impl).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct TrialResult {
    pub id: String,
    pub task_name: String,
    pub trial_name: TrialName,
    pub trial_uri: String,
    pub task_id: TaskIdRecord,
    pub source: Option<String>,
    /// None until the task was read (a trial whose task cannot be loaded never has one). Written
    /// as `""` then: Harbor's `TrialResult` requires a string here.
    #[serde(deserialize_with = "empty_as_none::deserialize")]
    pub task_checksum: Option<String>,
    pub config: TrialConfig,
    pub agent_info: AgentInfo,
    pub agent_result: Option<AgentContext>,
    pub verifier_result: Option<VerifierResult>,
    pub exception_info: Option<ExceptionInfo>,
    #[serde(with = "serde_iso::option")]
    pub started_at: Option<Timestamp>,
    #[serde(with = "serde_iso::option")]
    pub finished_at: Option<Timestamp>,
    pub environment_setup: Option<TimingInfo>,
    pub agent_setup: Option<TimingInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    /// Earlier attempts of this trial that failed and were retried (kept under `attempts/`).
    #[serde(default)]
    pub retries: u32,
    /// Times the trial was restarted in a fresh container after a crash.
    #[serde(default)]
    pub restarts: u32,
    /// What did not go as it should without being an error: logs cut at their limit, say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The cluster node that ran the trial's environment (its hostname), on a swarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// A multi-step task's steps, in the order they ran. Their errors are recorded on them, not
    /// on the trial (Harbor's rule); the trial's reward is derived from theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_results: Option<Vec<StepResult>>,
    /// The trial this one replays (`trials replay`, `jobs regrade`): its directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
}

/// One step of a multi-step trial (Harbor's `StepResult`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    pub step_name: String,
    pub agent_result: Option<AgentContext>,
    pub verifier_result: Option<VerifierResult>,
    pub exception_info: Option<ExceptionInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
}

impl Serialize for TrialResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct OnDisk<'a> {
            schema_version: u8,
            id: &'a str,
            task_name: &'a str,
            trial_name: &'a TrialName,
            trial_uri: &'a str,
            task_id: &'a TaskIdRecord,
            source: &'a Option<String>,
            task_checksum: &'a str,
            config: &'a TrialConfig,
            agent_info: &'a AgentInfo,
            agent_result: &'a Option<AgentContext>,
            verifier_result: &'a Option<VerifierResult>,
            exception_info: &'a Option<ExceptionInfo>,
            started_at: Option<String>,
            finished_at: Option<String>,
            environment_setup: &'a Option<TimingInfo>,
            agent_setup: &'a Option<TimingInfo>,
            agent_execution: &'a Option<TimingInfo>,
            verifier: &'a Option<TimingInfo>,
            retries: u32,
            restarts: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            warnings: Option<&'a Vec<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            host: Option<&'a String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            step_results: Option<&'a Vec<StepResult>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            replay_of: Option<&'a String>,
            reward_valid: bool,
        }
        // Every field named: a new one does not compile until it is written here too.
        let TrialResult {
            id,
            task_name,
            trial_name,
            trial_uri,
            task_id,
            source,
            task_checksum,
            config,
            agent_info,
            agent_result,
            verifier_result,
            exception_info,
            started_at,
            finished_at,
            environment_setup,
            agent_setup,
            agent_execution,
            verifier,
            retries,
            restarts,
            warnings,
            host,
            step_results,
            replay_of,
        } = self;
        OnDisk {
            schema_version: 1,
            id,
            task_name,
            trial_name,
            trial_uri,
            task_id,
            source,
            task_checksum: task_checksum.as_deref().unwrap_or(""),
            config,
            agent_info,
            agent_result,
            verifier_result,
            exception_info,
            started_at: started_at.as_ref().map(crate::time::iso),
            finished_at: finished_at.as_ref().map(crate::time::iso),
            environment_setup,
            agent_setup,
            agent_execution,
            verifier,
            retries: *retries,
            restarts: *restarts,
            warnings: (!warnings.is_empty()).then_some(warnings),
            host: host.as_ref(),
            step_results: step_results.as_ref(),
            replay_of: replay_of.as_ref(),
            reward_valid: self.reward_valid(),
        }
        .serialize(s)
    }
}

impl TrialResult {
    /// A trial's result before anything ran: who and what, and nothing recorded yet.
    pub fn new(
        trial_name: TrialName,
        task_name: String,
        task_id: TaskIdRecord,
        config: TrialConfig,
        agent_info: AgentInfo,
    ) -> TrialResult {
        TrialResult {
            id: String::new(),
            task_name,
            trial_name,
            trial_uri: String::new(),
            task_id,
            source: None,
            task_checksum: None,
            config,
            agent_info,
            agent_result: None,
            verifier_result: None,
            exception_info: None,
            started_at: None,
            finished_at: None,
            environment_setup: None,
            agent_setup: None,
            agent_execution: None,
            verifier: None,
            retries: 0,
            restarts: 0,
            warnings: Vec::new(),
            host: None,
            step_results: None,
            replay_of: None,
        }
    }

    /// The scalar reward, when the verifier produced one under the key `reward`.
    pub fn reward(&self) -> Option<f64> {
        self.verifier_result.as_ref()?.rewards.as_ref()?.get("reward").copied()
    }

    /// Every recorded error: the trial's first, then its steps' in step order (Harbor's
    /// `recorded_exceptions`).
    pub fn recorded_errors(&self) -> impl Iterator<Item = &ExceptionInfo> {
        let steps = self.step_results.iter().flatten().filter_map(|step| step.exception_info.as_ref());
        self.exception_info.iter().chain(steps)
    }

    /// Harbor 0.26's `reward_valid`: the verifier gave at least one reward, and no recorded error
    /// is one whose policy ([`ExceptionInfo::policy`]) spoils the reward.
    pub fn reward_valid(&self) -> bool {
        let rewarded = self.verifier_result.as_ref().and_then(|v| v.rewards.as_ref()).is_some_and(|r| !r.is_empty());
        rewarded && self.recorded_errors().all(|info| info.policy().has_valid_reward)
    }

    /// Gives each recorded error that has none the override its name has in the trial's config
    /// (`config.override_error_policy`), as Harbor 0.26 stores it when the error is recorded.
    pub fn apply_policy_overrides(&mut self) {
        let overrides = &self.config.override_error_policy;
        let steps = self.step_results.iter_mut().flatten().filter_map(|step| step.exception_info.as_mut());
        for info in self.exception_info.iter_mut().chain(steps) {
            if info.policy_override.is_none() {
                info.policy_override = overrides.get(&info.exception_type).copied();
                // An entry named after terminus's finer kind applies too.
                if info.policy_override.is_none()
                    && let Some(kind) = &info.kind
                {
                    info.policy_override = overrides.get(kind).copied();
                }
            }
        }
    }

    /// The kind of the first recorded error, if there is one (see [`ExceptionInfo::kind`]).
    pub fn error_kind(&self) -> Option<TrialErrorKind> {
        self.recorded_errors().next().and_then(ExceptionInfo::kind)
    }

    /// What the agent reported: the trial's `agent_result`, or for a multi-step trial (which
    /// has none) each step's.
    pub fn agent_results(&self) -> impl Iterator<Item = &AgentContext> {
        let steps = self.step_results.iter().flatten().filter_map(|step| step.agent_result.as_ref());
        self.agent_result.iter().chain(steps)
    }

    /// Whether the trial was cancelled (it ends in its own bucket, and a resume runs it again).
    pub fn is_cancelled(&self) -> bool {
        self.error_kind() == Some(TrialErrorKind::Cancelled)
    }

    /// The key under which Harbor groups results: `agent__model__dataset` (model omitted when
    /// there is none; dataset `adhoc` for tasks given one by one).
    pub fn evals_key(&self) -> String {
        let dataset = self.source.clone().unwrap_or_else(|| "adhoc".to_string());
        match &self.agent_info.model_info {
            Some(model) => format!("{}__{}__{}", self.agent_info.name, model.name, dataset),
            None => format!("{}__{}", self.agent_info.name, dataset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_configs_keep_harbors_order_redact_secrets_and_read_harbors() {
        let config = TrialConfig {
            task: TaskConfigRecord { path: "/t/a".into(), ..TaskConfigRecord::default() },
            trial_name: "a__x".into(),
            agent: AgentConfigRecord {
                name: "terminus-2".into(),
                kwargs: serde_json::from_value(
                    serde_json::json!({"api_key": "sk-1234567890abcdef", "api_base": "https://me:hunter22@host/v1"}),
                )
                .unwrap(),
                env: BTreeMap::from([("MY_TOKEN".to_string(), "tok-1234567890".to_string())]),
                ..AgentConfigRecord::default()
            },
            attempt: Some(2),
            agent_index: Some(0),
            ..TrialConfig::default()
        }
        .redacted();
        let text = serde_json::to_string(&config).unwrap();
        assert!(!text.contains("sk-1234567890abcdef") && !text.contains("tok-1234567890"), "{text}");
        assert!(!text.contains("hunter22"), "credentials in a URL are dropped: {text}");
        let keys: Vec<String> = serde_json::to_value(&config).unwrap().as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.first().map(String::as_str), Some("task"));
        assert_eq!(&keys[keys.len() - 3..], ["attempt", "agent_index", "job_id"]);
        assert_eq!(config.trial_key(), Some(("/t/a".to_string(), 0, 2)));
        assert!(!text.contains("git_url") && !text.contains("dataset_version"), "a local task has no git keys: {text}");
        let git = TaskConfigRecord {
            path: "tasks/a".into(),
            git_url: Some("https://example.com/r.git".into()),
            git_commit_id: Some("abc".into()),
            ..TaskConfigRecord::default()
        };
        assert_eq!(git.identity(), "https://example.com/r.git@abc:tasks/a", "the same path elsewhere is another task");
        assert_eq!(git.task_id().git_commit_id.as_deref(), Some("abc"));
        let harbor = r#"{"task": {"path": "/t/a", "git_url": null}, "trial_name": "a__x", "agent": {"name": "x", "import_path": null}, "timeout_multiplier": 1.0}"#;
        let read: TrialConfig = serde_json::from_str(harbor).unwrap();
        assert_eq!(read.trial_key(), None, "Harbor's configs do not identify attempts");
    }

    /// Results Harbor 0.26 wrote (tests/fixtures/harbor-0.26-job, made with Harbor's models):
    /// a package task (no path), an agent given by import_path (no name), null multipliers.
    #[test]
    fn harbor_written_results_are_read() {
        let package: TrialResult = serde_json::from_str(include_str!(concat!(
            "../../../tests/fixtures/harbor-0.26-job/harbor-written",
            "/fix-bug__h000004/result.json"
        )))
        .unwrap();
        assert_eq!(package.task_name, "harbor/fix-bug");
        assert_eq!(package.config.task.path, "", "a package task has no path");
        assert_eq!(package.config.agent.name, "", "an import_path agent has no name");
        assert_eq!(package.config.agent_timeout_multiplier, 1.0, "null: the job's multiplier");
        assert_eq!(package.error_kind(), Some(TrialErrorKind::AgentTimeout));
        assert_eq!(package.reward(), Some(1.0));
        assert_eq!(package.evals_key(), "Custom__gpt-5__harbor/pkg-set");
        let cancelled: TrialResult = serde_json::from_str(include_str!(concat!(
            "../../../tests/fixtures/harbor-0.26-job/harbor-written",
            "/hello-world__h000006/result.json"
        )))
        .unwrap();
        assert!(cancelled.is_cancelled());
    }

    #[test]
    fn model_names_split_like_harbor() {
        let info = ModelInfo::from_model_name("openai/gpt-4o");
        assert_eq!(info.provider.as_deref(), Some("openai"));
        assert_eq!(info.name, "gpt-4o");
        assert_eq!(ModelInfo::from_model_name("oracle").provider, None);
    }
}
