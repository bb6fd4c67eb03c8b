//! A trial's record while it runs, and what becomes of it on disk: the result (`result.json`),
//! the trial config (`config.json`), and the timings folded into `agent_result.metadata`.
//!
//! The record keeps its first error as a typed [`TrialError`]; Harbor's `exception_info` is made
//! from it only in [`TrialRecord::to_result`], when the result is written.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_config::job::TrialPlan;
use terminus_config::trial::TrialBasis;
use terminus_config::{AgentKind, AgentSpec};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::{JobId, TrialName};
use terminus_core::layout::TrialDir;
use terminus_core::result::{AgentInfo, ModelInfo, TimingInfo, TrialConfig, TrialResult};

/// Who the trial is: its job, plan, agent, name and directory, and what the job says of it
/// before its task loads. Read-only.
#[derive(Clone, Debug)]
pub struct TrialSetup {
    pub job_id: JobId,
    pub plan: TrialPlan,
    pub agent: AgentSpec,
    pub name: TrialName,
    pub dir: TrialDir,
    /// The trial's `config.json`.
    pub config: TrialConfig,
    /// The most terminus writes into the trial's directory for its agent, in bytes.
    pub disk_limit: u64,
}

impl TrialSetup {
    pub fn new(basis: TrialBasis, job_id: JobId, plan: TrialPlan, name: TrialName, dir: TrialDir) -> TrialSetup {
        let TrialBasis { agent, config, disk_limit } = basis;
        TrialSetup { job_id, plan, agent, name, dir, config, disk_limit }
    }

    /// The oracles need the task's `solution/` in the container.
    pub fn needs_solution(&self) -> bool {
        let oracle_model = matches!(self.agent.kind, AgentKind::Terminus2(_))
            && self.agent.model_name.as_deref() == Some(terminus_llm::provider::ORACLE_MODEL);
        matches!(self.agent.kind, AgentKind::Oracle) || oracle_model
    }

    /// A new record for this trial.
    pub fn new_record(&self) -> TrialRecord {
        TrialRecord::new(self)
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
    pub fn new(setup: &TrialSetup) -> TrialRecord {
        let (plan, agent, dir) = (&setup.plan, &setup.agent, &setup.dir);
        let agent_info = AgentInfo {
            name: agent.name.clone(),
            version: agent.version().to_string(),
            model_info: agent.model_name.as_deref().map(ModelInfo::from_model_name),
        };
        let task_id = setup.config.task.task_id();
        let result = TrialResult {
            id: uuid::Uuid::new_v4().to_string(),
            trial_uri: format!("file://{}", dir.path().display()),
            source: plan.task.source.clone(),
            replay_of: plan.replay_of.as_ref().map(|p| p.display().to_string()),
            ..TrialResult::new(setup.name.clone(), plan.task.name.clone(), task_id, setup.config.clone(), agent_info)
        };
        TrialRecord { result, error: None, disk: DiskMeter { written: 0, limit: setup.disk_limit, exceeded: false } }
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

    /// The result as written, `exception_info` built from the error; each recorded error carries
    /// its `override_error_policy` entry.
    pub fn to_result(&self) -> TrialResult {
        let mut result = TrialResult {
            exception_info: self.error.as_ref().map(TrialError::to_exception_info),
            ..self.result.clone()
        };
        result.apply_policy_overrides();
        result
    }

    /// Finishes the timing of a phase (no-op if it never started).
    pub fn finish(timing: &mut Option<TimingInfo>) {
        if let Some(timing) = timing.as_mut() {
            timing.finish();
        }
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
        let job = super::super::tests::job("");
        let plan = job.trials[0].clone();
        let name = TrialName::with_suffix("hello-world", "abcdefg");
        let dir = TrialDir::new("/jobs/j/hello-world__abcdefg");
        let basis = job.basis("job", &plan, name.as_str(), "/jobs/j".into());
        let mut record = TrialRecord::new(&TrialSetup::new(basis, JobId::new(), plan, name, dir));
        assert_eq!(record.result.config.trials_dir, "/jobs/j");
        assert_eq!(record.result.config.trial_key().unwrap().2, 0);
        record.record_error(TrialError::new(TrialErrorKind::AgentTimeout, "late"));
        record.record_error(TrialError::new(TrialErrorKind::RewardFileNotFound, "none"));
        assert!(record.result.exception_info.is_none());
        let result = record.to_result();
        assert_eq!(result.exception_info.unwrap().exception_type, "AgentTimeoutError");
    }
}
