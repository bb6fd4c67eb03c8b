//! The figures a job's trials add up to, computed here only, so the job's `result.json`, the
//! reporters' lines and the viewer show the same ones: the job result and its statistics in
//! `job`, both of Harbor's score conventions in `score`, the summary a reporter prints in
//! `summary`, interval estimates of rewards in `intervals`, the oracle preflight's verdict in
//! `preflight`.

mod intervals;
mod job;
mod preflight;
mod score;
mod summary;

pub use intervals::{Interval, IntervalMethod, mean_interval, paired_bootstrap};
pub use job::{BudgetStatus, EvalStats, JobResult, JobStats, LiveCounts, PhaseTimes};
pub use preflight::{FailedTask, PreflightReport};
pub use score::{NO_REWARD, Score, ScoreConvention, Scores, counted_text, mean_text, pass_at_k, score_text};
pub use summary::{EvalLine, JobSummary, RewardCell, task_rewards};
