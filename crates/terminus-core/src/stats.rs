//! The figures a job's trials add up to, computed here only, so the job's `result.json`, the
//! reporters' lines and the viewer show the same ones: the job result and its statistics in
//! `job`, the summary a reporter prints in `summary`, interval estimates of rewards in
//! `intervals`, the oracle preflight's verdict in `preflight`.

mod intervals;
mod job;
mod preflight;
mod summary;

pub use intervals::{Interval, IntervalMethod, mean_interval, paired_bootstrap};
pub use job::{BudgetStatus, EvalStats, JobResult, JobStats, LiveCounts, PhaseTimes, pass_at_k};
pub use preflight::{FailedTask, PreflightReport};
pub use summary::{EvalLine, JobSummary, RewardCell, task_rewards};
