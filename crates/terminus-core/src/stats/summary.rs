//! The figures a reporter shows ([`JobSummary`]): done, errors, mean reward (both conventions'),
//! pass@k, cost and each task's rewards. The Supervisor computes it from the same [`JobStats`] as the job's
//! result file, so a reporter keeps no statistics of its own.

use std::collections::BTreeMap;

use super::job::{BudgetStatus, JobStats};
use super::score::{ScoreConvention, Scores};
use crate::result::TrialResult;

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
    /// The headline mean over every completed trial (by `score_convention`).
    pub mean_reward: Option<f64>,
    /// Which convention is the headline.
    pub score_convention: ScoreConvention,
    /// Both conventions' scores over every completed trial.
    pub scores: Option<Scores>,
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
    pub budget: Option<BudgetStatus>,
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
            mean_reward: stats.headline().and_then(|score| score.mean),
            score_convention: stats.score_convention,
            scores: stats.scores.clone(),
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
                    mean_reward: match &eval.scores {
                        Some(scores) => scores.get(stats.score_convention).mean,
                        None => eval.metrics.iter().find_map(|m| m.get("mean").copied()),
                    },
                    pass_at_k: eval.pass_at_k.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    exceptions: eval.exception_stats.iter().map(|(k, v)| (k.clone(), v.len())).collect(),
                    scores: eval.scores.clone(),
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
    /// Both conventions' scores of the group.
    pub scores: Option<Scores>,
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
