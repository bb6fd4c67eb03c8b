//! Events the Supervisor emits for reporters (progress bars, plain log lines, tests).
//!
//! They echo the actor messages but drop any detail a reporter has no use for. The Supervisor is
//! the only producer, and every figure a reporter shows (done, errors, mean reward, pass@k, cost)
//! comes from the [`JobSummary`] it computes here, from the same [`JobStats`] as the job's
//! result file — a reporter keeps no statistics of its own.

use std::collections::BTreeMap;

use crate::ids::TrialName;
use crate::result::{JobStats, TrialResult};

/// The phase a running trial is in, as shown on its progress line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrialPhase {
    /// Loading the task and building (or finding) its image.
    Preparing,
    /// Creating and starting the container.
    StartingEnvironment,
    /// The agent loop is running.
    RunningAgent,
    /// The task's tests are running.
    Verifying,
    /// Collecting logs and removing the container.
    TearingDown,
}

impl TrialPhase {
    pub fn label(self) -> &'static str {
        match self {
            TrialPhase::Preparing => "preparing",
            TrialPhase::StartingEnvironment => "starting environment",
            TrialPhase::RunningAgent => "running agent",
            TrialPhase::Verifying => "verifying",
            TrialPhase::TearingDown => "tearing down",
        }
    }
}

/// Tokens and cost of a trial so far, for its progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProgressUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// What happened, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    JobStarted {
        job_name: String,
        job_dir: String,
        n_total: u64,
        n_already_done: u64,
        /// The figures so far (a resumed job's earlier trials included).
        summary: Box<JobSummary>,
    },
    TrialStarted {
        trial_name: TrialName,
        task_name: String,
    },
    TrialProgress {
        trial_name: TrialName,
        phase: TrialPhase,
        episode: Option<u32>,
        usage: Option<ProgressUsage>,
    },
    /// The cluster holds the trial in its queue (`reason`: the scheduler's own words), or
    /// (`None`) has placed it: its container runs, and its deadlines start.
    TrialQueued {
        trial_name: TrialName,
        reason: Option<String>,
    },
    /// A model call of the trial failed and will be retried after `wait_sec`.
    TrialRetrying {
        trial_name: TrialName,
        attempt: u32,
        wait_sec: f64,
        reason: String,
    },
    /// The whole trial failed and will run again after `wait_sec` (it holds no slot meanwhile).
    TrialWillRetry {
        trial_name: TrialName,
        retry: u32,
        wait_sec: f64,
        reason: String,
    },
    /// The trial crashed or lost its container and starts again in a fresh one.
    TrialRestarting {
        trial_name: TrialName,
        restart: u32,
        reason: String,
    },
    TrialFinished {
        trial_name: TrialName,
        task_name: String,
        reward: Option<f64>,
        error: Option<String>,
        /// The job's figures with this trial counted.
        summary: Box<JobSummary>,
    },
    /// The Docker engine stopped answering: no trial starts until it answers again.
    EngineWaiting {
        reason: String,
    },
    /// Too many restarts in too short a time: no new trials start; the job can be resumed.
    JobHalted {
        reason: String,
    },
    /// A budget is spent: no new model call starts (running agents stop at their next one and
    /// are graded) and trials of its agents are not started.
    BudgetReached {
        reason: String,
    },
    JobFinished {
        summary: JobSummary,
    },
}

impl JobSummary {
    /// The summary of `stats` over `results` (what a job's `result.json` and trial results
    /// hold); the wall time and the cancelled/halted flags are the caller's to set.
    pub fn from_stats(job_dir: &str, n_total: u64, stats: &JobStats, results: &[TrialResult]) -> JobSummary {
        JobSummary {
            job_dir: job_dir.to_string(),
            n_total,
            n_finished: stats.n_finished_trials,
            n_errored: stats.n_errored_trials,
            n_cancelled: stats.n_cancelled_trials,
            n_pending: stats.n_pending_trials,
            n_retries: stats.n_retries,
            n_restarts: stats.n_restarts,
            mean_reward: (!results.is_empty())
                .then(|| results.iter().map(|r| r.reward().unwrap_or(0.0)).sum::<f64>() / results.len() as f64),
            n_input_tokens: stats.n_input_tokens.unwrap_or(0),
            n_output_tokens: stats.n_output_tokens.unwrap_or(0),
            cost_usd: stats.cost_usd,
            wall_seconds: 0.0,
            evals: stats
                .evals
                .iter()
                .map(|(key, eval)| EvalLine {
                    key: key.clone(),
                    n_trials: eval.n_trials,
                    n_errors: eval.n_errors,
                    mean_reward: eval.metrics.iter().find_map(|m| m.get("mean").copied()),
                    pass_at_k: eval.pass_at_k.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    exceptions: eval.exception_stats.iter().map(|(k, v)| (k.clone(), v.len())).collect(),
                })
                .collect(),
            task_rewards: task_rewards(results),
            n_model_retries: 0,
            cancelled: false,
            halted: false,
            budget: None,
        }
    }
}

/// One trial's cell in the per-task reward table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RewardCell {
    /// The trial recorded an error.
    Error,
    Reward(f64),
    /// Finished without an error and without a reward.
    Missing,
}

/// The reward cells of each task, in the order the results are given.
pub fn task_rewards(results: &[TrialResult]) -> BTreeMap<String, Vec<RewardCell>> {
    let mut cells: BTreeMap<String, Vec<RewardCell>> = BTreeMap::new();
    for result in results {
        let cell = match (&result.exception_info, result.reward()) {
            (Some(_), _) => RewardCell::Error,
            (None, Some(reward)) => RewardCell::Reward(reward),
            (None, None) => RewardCell::Missing,
        };
        cells.entry(result.task_name.clone()).or_default().push(cell);
    }
    cells
}

/// One line of the end-of-job table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EvalLine {
    /// `agent__model__dataset`.
    pub key: String,
    pub n_trials: u64,
    pub n_errors: u64,
    pub mean_reward: Option<f64>,
    pub pass_at_k: Vec<(String, f64)>,
    pub exceptions: Vec<(String, usize)>,
}

/// The end-of-job figures a reporter prints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobSummary {
    pub job_dir: String,
    pub n_total: u64,
    pub n_finished: u64,
    pub n_errored: u64,
    pub n_cancelled: u64,
    pub n_pending: u64,
    pub n_retries: u64,
    pub n_restarts: u64,
    pub mean_reward: Option<f64>,
    pub n_input_tokens: u64,
    pub n_output_tokens: u64,
    pub cost_usd: Option<f64>,
    pub wall_seconds: f64,
    pub evals: Vec<EvalLine>,
    /// Per task, one cell per finished trial.
    pub task_rewards: BTreeMap<String, Vec<RewardCell>>,
    /// Model calls retried so far (live; not part of the job's result file).
    pub n_model_retries: u64,
    /// The job was interrupted.
    pub cancelled: bool,
    /// The job stopped dispatching after too many restarts.
    pub halted: bool,
    /// The job's budget and its spend (a job with `budget:`).
    pub budget: Option<crate::result::BudgetStatus>,
}
