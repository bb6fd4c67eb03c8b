//! The job as the orchestrator runs it: [`JobPlan`], made once from the validated job before
//! anything starts. The Supervisor reads its job-level settings (concurrency, retries,
//! supervision, budget, metrics) and its trials; each trial's own plan comes from it, as a
//! [`TrialBasis`] before the task loads and a [`ResolvedTrial`] after. Nothing outside this
//! crate reads the job's validated form while the job runs.

use std::path::{Path, PathBuf};

use serde_json::Value;
use terminus_core::stats::PreflightReport;

use crate::cluster::BackendSpec;
use crate::error::ConfigError;
use crate::job::{AgentSpec, JobSpec, Overrides, TrialPlan};
use crate::policy::{BudgetSpec, MetricKind, RetrySpec, SupervisionSpec};
use crate::task::Task;
use crate::trial::{ResolvedTrial, TrialBasis};

/// One job, planned: its trials and the settings the orchestrator runs them by.
#[derive(Clone, Debug)]
pub struct JobPlan {
    job: JobSpec,
    /// Every trial of the job, attempts (outer) × tasks × agents (inner).
    pub trials: Vec<TrialPlan>,
    /// What the oracle preflight found, for a job that ran one (the tasks it left out are
    /// already out of `trials`).
    preflight: Option<PreflightReport>,
    /// The job a regrade replays (its trials' `replay_of` name its trials).
    regrade_of: Option<PathBuf>,
}

impl JobPlan {
    pub fn new(job: JobSpec) -> JobPlan {
        JobPlan { trials: job.plan(), job, preflight: None, regrade_of: None }
    }

    /// The job without the tasks the oracle preflight failed, its report kept for `result.json`.
    pub fn after_preflight(mut job: JobSpec, report: PreflightReport) -> JobPlan {
        job.leave_out(report.excluded());
        JobPlan { trials: job.plan(), job, preflight: Some(report), regrade_of: None }
    }

    /// Marks the job as a regrade of `original` (its `result.json` names it).
    pub fn regrading(mut self, original: PathBuf) -> JobPlan {
        self.regrade_of = Some(original);
        self
    }

    pub fn regrade_of(&self) -> Option<&Path> {
        self.regrade_of.as_deref()
    }

    /// Whether the job's trials replay recorded ones (no model is asked, so no model's limits).
    pub fn replays(&self) -> bool {
        self.trials.iter().any(|t| t.replay_of.is_some())
    }

    /// The oracle preflight's report, for a job that ran one.
    pub fn preflight(&self) -> Option<&PreflightReport> {
        self.preflight.as_ref()
    }

    /// The job a job file's `text` describes (named `path` in errors), planned.
    pub fn from_yaml(path: &Path, text: &str, overrides: &Overrides) -> Result<JobPlan, ConfigError> {
        JobSpec::from_yaml(path, text, overrides).map(JobPlan::new)
    }

    /// The job's name (its directory's).
    pub fn name(&self) -> &str {
        &self.job.job_name
    }

    /// The job directory: `jobs_dir/job_name`.
    pub fn dir(&self) -> PathBuf {
        self.job.job_dir()
    }

    /// The job's `config.json`, as the user wrote it (secrets redacted).
    pub fn record(&self) -> &Value {
        &self.job.raw
    }

    /// Where the trials run.
    pub fn backend(&self) -> &BackendSpec {
        &self.job.backend
    }

    pub fn agents(&self) -> &[AgentSpec] {
        &self.job.agents
    }

    /// The agents, to settle what their models' servers say before any trial starts.
    pub fn agents_mut(&mut self) -> &mut [AgentSpec] {
        &mut self.job.agents
    }

    /// Keeps the host variables `names` from every task unless the job names them itself.
    pub fn protect_host_variables<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, names: I) {
        self.job.host_env.protect(names);
    }

    /// How many trials run at once.
    /// How many trials run at once (with adaptive admission: at most).
    pub fn n_concurrent(&self) -> usize {
        self.job.n_concurrent_trials
    }

    pub fn admission(&self) -> crate::job::AdmissionMode {
        self.job.admission
    }

    pub fn retry(&self) -> &RetrySpec {
        &self.job.retry
    }

    pub fn supervision(&self) -> SupervisionSpec {
        self.job.supervision
    }

    /// The job's own spending limit (each agent's is in its [`AgentSpec`]).
    pub fn budget(&self) -> BudgetSpec {
        self.job.budget
    }

    /// The metrics the job's statistics report.
    pub fn metrics(&self) -> &[MetricKind] {
        &self.job.metrics
    }

    /// Whose rule makes the job's headline score.
    pub fn score_convention(&self) -> terminus_core::stats::ScoreConvention {
        self.job.score_convention
    }

    /// What a task's image build may use.
    pub fn build_limits(&self) -> crate::policy::BuildLimits {
        self.job.containers.build
    }

    /// Whether trials that may use the internet get a bridge network of the job's own.
    pub fn isolate_network(&self) -> bool {
        self.job.containers.isolate_network
    }

    /// What the job says of trial `plan`, named `trial_name`, before its task loads.
    pub fn basis(&self, job_id: &str, plan: &TrialPlan, trial_name: &str, trials_dir: String) -> TrialBasis {
        TrialBasis::new(&self.job, job_id, plan, trial_name, trials_dir)
    }

    /// The trial of agent `agent_idx` on the loaded `task`, resolved.
    pub fn resolve(&self, agent_idx: usize, task: Task) -> ResolvedTrial {
        ResolvedTrial::new(&self.job, agent_idx, task)
    }
}

impl From<JobSpec> for JobPlan {
    fn from(job: JobSpec) -> JobPlan {
        JobPlan::new(job)
    }
}
