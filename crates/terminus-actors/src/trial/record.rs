//! A trial's record while it runs, and what becomes of it on disk: the result (`result.json`),
//! the trial config (`config.json`), and the timings folded into `agent_result.metadata`.
//!
//! The record keeps its first error as a typed [`TrialError`]; Harbor's `exception_info` is made
//! from it only in [`TrialRecord::to_result`], when the result is written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_config::job::TrialPlan;
use terminus_config::{AgentKind, AgentSpec, JobSpec, Task};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::{JobId, TrialName};
use terminus_core::layout::TrialDir;
use terminus_core::models::ModelLimits;
use terminus_core::result::{
    AgentConfigRecord, AgentInfo, ConfinementRecord, EnvironmentConfigRecord, ModelInfo, TaskConfigRecord,
    TaskIdRecord, TimingInfo, TrialConfig, TrialResult, VerifierConfigRecord,
};

/// Who the trial is: its job, plan, agent, name and directory. Read-only.
#[derive(Clone, Debug)]
pub struct TrialSetup {
    pub spec: Arc<JobSpec>,
    pub job_id: JobId,
    pub plan: TrialPlan,
    pub agent: AgentSpec,
    pub name: TrialName,
    pub dir: TrialDir,
}

impl TrialSetup {
    pub fn new(spec: Arc<JobSpec>, job_id: JobId, plan: TrialPlan, name: TrialName, dir: TrialDir) -> TrialSetup {
        let agent = spec.agents[plan.agent_idx].clone();
        TrialSetup { spec, job_id, plan, agent, name, dir }
    }

    /// The oracles need the task's `solution/` in the container.
    pub fn needs_solution(&self) -> bool {
        let oracle_model = matches!(self.agent.kind, AgentKind::Terminus2(_))
            && self.agent.model_name.as_deref() == Some(terminus_llm::provider::ORACLE_MODEL);
        matches!(self.agent.kind, AgentKind::Oracle) || oracle_model
    }

    /// The user the agent runs as (`[agent].user` of the task).
    pub fn agent_user(task: &Task) -> Option<String> {
        task.config.agent.user.as_ref().map(ToString::to_string)
    }

    /// A new record for this trial.
    pub fn new_record(&self) -> TrialRecord {
        TrialRecord::new(&self.spec, self.job_id, &self.plan, &self.name, &self.dir)
    }
}

/// The result in progress and the trial's first error.
#[derive(Clone, Debug)]
pub struct TrialRecord {
    /// Everything but `exception_info`, which [`TrialRecord::to_result`] fills from `error`.
    pub result: TrialResult,
    pub error: Option<TrialError>,
    /// What terminus wrote into the trial's directory for the agent, and the most it may.
    pub disk: DiskMeter,
}

/// Bytes terminus writes for a trial's agent (episode logs, trajectories), against the job's
/// `max_trial_disk_mb`.
#[derive(Clone, Copy, Debug)]
pub struct DiskMeter {
    pub written: u64,
    pub limit: u64,
    /// A write was refused for the limit: the agent is to stop.
    pub exceeded: bool,
}

impl DiskMeter {
    /// Whether `bytes` more may be written (counted if so); a refusal is remembered.
    pub fn admit(&mut self, bytes: usize) -> bool {
        if self.exceeded || self.written.saturating_add(bytes as u64) > self.limit {
            self.exceeded = true;
            return false;
        }
        self.written += bytes as u64;
        true
    }
}

impl TrialRecord {
    /// The record as it stands before anything ran.
    pub fn new(spec: &JobSpec, job_id: JobId, plan: &TrialPlan, name: &TrialName, dir: &TrialDir) -> TrialRecord {
        let agent = &spec.agents[plan.agent_idx];
        let result = TrialResult {
            id: uuid::Uuid::new_v4().to_string(),
            task_name: plan.task.name.clone(),
            trial_name: name.clone(),
            trial_uri: format!("file://{}", dir.path().display()),
            task_id: TaskIdRecord { path: plan.task.path.display().to_string() },
            source: plan.task.source.clone(),
            task_checksum: None,
            config: trial_config(spec, job_id, dir, plan, agent, name),
            agent_info: AgentInfo {
                name: agent.name.clone(),
                version: agent.version().to_string(),
                model_info: agent.model_name.as_deref().map(ModelInfo::from_model_name),
            },
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
        };
        TrialRecord {
            result,
            error: None,
            disk: DiskMeter { written: 0, limit: spec.max_trial_disk_bytes, exceeded: false },
        }
    }

    /// Records an error unless one is already recorded (the first error is the one that counts,
    /// as in Harbor).
    pub fn record_error(&mut self, error: TrialError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    pub fn error_kind(&self) -> Option<TrialErrorKind> {
        self.error.as_ref().map(|e| e.kind)
    }

    /// The result as written, `exception_info` built from the error.
    pub fn to_result(&self) -> TrialResult {
        TrialResult { exception_info: self.error.as_ref().map(TrialError::to_exception_info), ..self.result.clone() }
    }

    /// Finishes the timing of a phase (no-op if it never started).
    pub fn finish(timing: &mut Option<TimingInfo>) {
        if let Some(timing) = timing.as_mut() {
            timing.finish();
        }
    }
}

/// The trial's `config.json` (Harbor's TrialConfig shape), secrets redacted.
pub fn trial_config(
    spec: &JobSpec,
    job_id: JobId,
    dir: &TrialDir,
    plan: &TrialPlan,
    agent: &AgentSpec,
    name: &TrialName,
) -> TrialConfig {
    let trials_dir = dir.path().parent().map(|p| p.display().to_string()).unwrap_or_default();
    TrialConfig {
        task: TaskConfigRecord { path: plan.task.path.display().to_string(), source: plan.task.source.clone() },
        trial_name: name.to_string(),
        trials_dir,
        agent_timeout_multiplier: spec.multipliers.agent,
        verifier_timeout_multiplier: spec.multipliers.verifier,
        agent_setup_timeout_multiplier: spec.multipliers.agent_setup,
        environment_build_timeout_multiplier: spec.multipliers.environment_build,
        agent: AgentConfigRecord {
            name: agent.name.clone(),
            model_name: agent.model_name.clone(),
            override_timeout_sec: agent.override_timeout_sec,
            max_timeout_sec: agent.max_timeout_sec,
            kwargs: agent.kwargs.clone(),
            env: agent.env.clone(),
            model_limits: model_limits(agent),
        },
        environment: EnvironmentConfigRecord {
            kind: "docker".to_string(),
            force_build: spec.force_build,
            delete: spec.delete,
            confinement: Some(confinement(spec)),
        },
        verifier: VerifierConfigRecord {
            disable: spec.verifier_disable,
            override_timeout_sec: spec.verifier_override_timeout_sec,
        },
        attempt: Some(plan.attempt),
        agent_index: Some(plan.agent_idx),
        job_id: job_id.to_string(),
    }
    .redacted()
    .with_secret_env(agent.key_variable())
}

/// The limits a Terminus 2 agent's model runs with and where each came from (None for agents,
/// and the offline oracle model, that need none).
fn model_limits(agent: &AgentSpec) -> Option<ModelLimits> {
    let AgentKind::Terminus2(opts) = &agent.kind else { return None };
    let model = agent.model_name.as_deref().unwrap_or_default();
    (model != terminus_llm::provider::ORACLE_MODEL).then(|| opts.model_limits(model))
}

/// How the job confines its trials' containers, as the trial's config records it. The network
/// and the storage limit are settled per task when the container starts; this says what the job
/// asked for.
fn confinement(spec: &JobSpec) -> ConfinementRecord {
    let policy = &spec.containers;
    ConfinementRecord {
        pids_limit: policy.pids_limit,
        no_new_privileges: policy.no_new_privileges,
        cap_drop: policy.cap_drop.clone(),
        cap_add: policy.cap_add.clone(),
        runtime: policy.runtime.clone(),
        security_opt: policy.security_opt.clone(),
        keep_container_logs: policy.keep_container_logs,
        network: if policy.isolate_network { "job" } else { "default" }.to_string(),
        storage_mb: policy.storage_mb,
    }
}

/// Where a trial's time goes, for `agent_result.metadata.timings` (the benchmark reads them).
#[derive(Debug, Default)]
pub struct Timings {
    /// When the last model reply arrived (None while a call or a summarization is in flight).
    pub reply_at: Option<Instant>,
    /// When the current command's wait began.
    pub wait_started: Option<Instant>,
    /// Time spent in command waits since the last reply.
    pub waited_since_reply: Duration,
    /// Per episode: from a model reply to the next request, minus the waits in between.
    pub loop_overhead_msec: Vec<f64>,
    pub tmux_send_keys_msec: Vec<f64>,
    pub tmux_capture_msec: Vec<f64>,
    pub requested_wait_sec: f64,
    pub waited_sec: f64,
}

impl Timings {
    pub fn end_wait(&mut self) {
        if let Some(started) = self.wait_started.take() {
            let waited = started.elapsed();
            self.waited_since_reply += waited;
            self.waited_sec += waited.as_secs_f64();
        }
    }

    /// A reply arrived: the next loop-overhead measurement starts now.
    pub fn replied(&mut self) {
        self.reply_at = Some(Instant::now());
        self.waited_since_reply = Duration::ZERO;
    }

    /// A request leaves: the loop overhead since the last reply, minus the waits, is recorded.
    pub fn querying(&mut self) {
        if let Some(reply_at) = self.reply_at.take() {
            let overhead = reply_at.elapsed().saturating_sub(std::mem::take(&mut self.waited_since_reply));
            self.loop_overhead_msec.push(overhead.as_secs_f64() * 1000.0);
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "loop_overhead_msec": self.loop_overhead_msec,
            "tmux_send_keys_msec": self.tmux_send_keys_msec,
            "tmux_capture_msec": self.tmux_capture_msec,
            "requested_wait_sec": self.requested_wait_sec,
            "waited_sec": self.waited_sec,
        })
    }
}

/// `Duration` as milliseconds, for the timing lists.
pub fn msec(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_counts_and_becomes_exception_info_only_in_the_result() {
        let spec = super::super::tests::spec("");
        let plan = spec.plan().remove(0);
        let name = TrialName::with_suffix("hello-world", "abcdefg");
        let dir = TrialDir::new("/jobs/j/hello-world__abcdefg");
        let mut record = TrialRecord::new(&spec, JobId::new(), &plan, &name, &dir);
        assert_eq!(record.result.config.trials_dir, "/jobs/j");
        assert_eq!(record.result.config.trial_key().unwrap().2, 0);
        record.record_error(TrialError::new(TrialErrorKind::AgentTimeout, "late"));
        record.record_error(TrialError::new(TrialErrorKind::RewardFileNotFound, "none"));
        assert!(record.result.exception_info.is_none());
        let result = record.to_result();
        assert_eq!(result.exception_info.unwrap().exception_type, "AgentTimeoutError");
    }
}
