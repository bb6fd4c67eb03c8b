//! The job's `result.json` ([`JobResult`]): its counters and each group's statistics
//! ([`JobStats`], [`EvalStats`]), computed from finished trial results only, and its budget's
//! spend ([`BudgetStatus`]).
//!
//! Field names and nesting follow Harbor's `JobResult` and `JobStats` models, with terminus's
//! additions (cancellations, restarts, tokens, phase durations, both conventions' scores) beside
//! them. Harbor's own score fields (`n_trials`, `metrics`, `pass_at_k`, `reward_stats`) follow
//! the job's `score_convention`; `scores` holds both conventions' figures whatever it is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::score::{ScoreConvention, Scores};
use crate::result::{TimingInfo, TrialResult};
use crate::time::{Timestamp, serde_iso};

/// Percentiles of one phase's duration, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub n: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
}

impl PhaseTimes {
    fn of(mut seconds: Vec<f64>) -> Option<PhaseTimes> {
        if seconds.is_empty() {
            return None;
        }
        seconds.sort_by(f64::total_cmp);
        let n = seconds.len();
        // Nearest-rank percentiles.
        let rank = |p: f64| seconds[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(PhaseTimes {
            n: n as u64,
            mean: seconds.iter().sum::<f64>() / n as f64,
            p50: rank(0.5),
            p90: rank(0.9),
            max: seconds[n - 1],
        })
    }
}

/// Statistics of one (agent, model, dataset) group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalStats {
    /// Trials that produced rewards (under `harbor-0.26`: valid rewards).
    pub n_trials: u64,
    /// Trials that recorded an error.
    pub n_errors: u64,
    pub metrics: Vec<BTreeMap<String, f64>>,
    pub pass_at_k: BTreeMap<String, f64>,
    pub reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    pub exception_stats: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub n_input_tokens: u64,
    #[serde(default)]
    pub n_cache_tokens: u64,
    #[serde(default)]
    pub n_output_tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub n_retries: u64,
    #[serde(default)]
    pub n_restarts: u64,
    /// Duration percentiles of `environment_setup`, `agent_setup`, `agent_execution`, `verifier`.
    #[serde(default)]
    pub phase_seconds: BTreeMap<String, PhaseTimes>,
    /// The group's score under both conventions (absent from results written before them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Scores>,
}

/// The counters and groups in the job `result.json`.
///
/// At every moment `n_finished_trials + n_errored_trials + n_cancelled_trials +
/// n_pending_trials + n_running_trials == n_total_trials` (see [`JobStats::is_consistent`]);
/// `n_completed_trials` (Harbor's) is the first three together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobStats {
    pub n_completed_trials: u64,
    /// Completed without an error.
    #[serde(default)]
    pub n_finished_trials: u64,
    /// Completed with an error other than a cancellation.
    pub n_errored_trials: u64,
    pub n_running_trials: u64,
    pub n_pending_trials: u64,
    pub n_cancelled_trials: u64,
    pub n_retries: u64,
    #[serde(default)]
    pub n_restarts: u64,
    pub evals: BTreeMap<String, EvalStats>,
    pub n_input_tokens: Option<u64>,
    pub n_cache_tokens: Option<u64>,
    pub n_output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    /// Which convention Harbor's score fields of each group follow (the job's
    /// `score_convention`).
    #[serde(default)]
    pub score_convention: ScoreConvention,
    /// The score of every completed trial together, under both conventions (no pass@k: it is
    /// per group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Scores>,
}

/// The job `result.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub id: String,
    #[serde(with = "serde_iso")]
    pub started_at: Timestamp,
    #[serde(with = "serde_iso::option")]
    pub updated_at: Option<Timestamp>,
    #[serde(with = "serde_iso::option")]
    pub finished_at: Option<Timestamp>,
    pub n_total_trials: u64,
    pub stats: JobStats,
    /// The job's budget and what was spent against it (a job with `budget:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStatus>,
    /// What the oracle preflight found (a job with `preflight:`): the tasks it left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<super::preflight::PreflightReport>,
    /// The job this one regrades (`jobs regrade`): its directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade_of: Option<String>,
}

/// A budget and its spend: the job's, and each agent's that has its own.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    pub spent_cost_usd: f64,
    /// Input and output tokens of every call.
    pub spent_tokens: u64,
    /// Model calls counted.
    pub n_calls: u64,
    /// The budget is spent: no new model call starts.
    pub reached: bool,
    /// Trials left unstarted for the budget (`terminus resume` with a raised one runs them).
    #[serde(default)]
    pub n_not_run: u64,
    /// Agents with budgets of their own, by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agents: BTreeMap<String, BudgetStatus>,
}

/// What the live counters are, besides the finished results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    pub n_total: u64,
    pub n_running: u64,
    /// Queued, or waiting to be retried.
    pub n_pending: u64,
    /// Retries and restarts so far, including those of trials still pending or running.
    pub n_retries: u64,
    pub n_restarts: u64,
}

impl JobStats {
    /// Computes the statistics from the finished trials and the live counters; `metrics` names
    /// the aggregates of each group (`mean`, `sum`, `min`, `max`); Harbor's score fields follow
    /// `convention`.
    pub fn compute(
        finished: &[TrialResult],
        live: LiveCounts,
        metrics: &[&str],
        convention: ScoreConvention,
    ) -> JobStats {
        let mut stats = JobStats {
            score_convention: convention,
            n_completed_trials: finished.len() as u64,
            n_running_trials: live.n_running,
            n_pending_trials: live.n_pending,
            n_retries: live.n_retries,
            n_restarts: live.n_restarts,
            ..JobStats::default()
        };
        let mut groups: BTreeMap<String, Vec<&TrialResult>> = BTreeMap::new();
        for result in finished {
            match result.recorded_errors().next() {
                Some(_) if result.is_cancelled() => stats.n_cancelled_trials += 1,
                Some(_) => stats.n_errored_trials += 1,
                None => stats.n_finished_trials += 1,
            }
            for agent in result.agent_results() {
                add_opt(&mut stats.n_input_tokens, agent.n_input_tokens);
                add_opt(&mut stats.n_cache_tokens, agent.n_cache_tokens);
                add_opt(&mut stats.n_output_tokens, agent.n_output_tokens);
                if let Some(cost) = agent.cost_usd {
                    *stats.cost_usd.get_or_insert(0.0) += cost;
                }
            }
            groups.entry(result.evals_key()).or_default().push(result);
        }
        for (key, results) in groups {
            stats.evals.insert(key, EvalStats::compute(&results, metrics, convention));
        }
        let all: Vec<&TrialResult> = finished.iter().collect();
        stats.scores = Some(Scores::compute(&all, metrics, false));
        stats
    }

    /// The job's score under its own convention (None in a result written before `scores`).
    pub fn headline(&self) -> Option<&super::score::Score> {
        self.scores.as_ref().map(|s| s.get(self.score_convention))
    }

    /// The accounting invariant: every planned trial is in exactly one state.
    pub fn is_consistent(&self, n_total: u64) -> bool {
        self.n_finished_trials
            + self.n_errored_trials
            + self.n_cancelled_trials
            + self.n_pending_trials
            + self.n_running_trials
            == n_total
    }
}

fn add_opt(total: &mut Option<u64>, value: Option<u64>) {
    if let Some(value) = value {
        *total.get_or_insert(0) += value;
    }
}

impl EvalStats {
    /// Statistics of one group: Harbor's score fields by `convention`'s rule (under 0.25 an
    /// errored or unverified trial counts as reward 0, under 0.26 only valid rewards count),
    /// both conventions' in `scores`.
    pub fn compute(results: &[&TrialResult], metrics: &[&str], convention: ScoreConvention) -> EvalStats {
        let mut stats = EvalStats::default();
        let mut phases: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for result in results {
            let name = result.trial_name.to_string();
            let kinds: std::collections::BTreeSet<&str> =
                result.recorded_errors().map(|info| info.exception_type.as_str()).collect();
            if !kinds.is_empty() {
                stats.n_errors += 1;
            }
            for kind in kinds {
                stats.exception_stats.entry(kind.to_string()).or_default().push(name.clone());
            }
            let rewards = result.verifier_result.as_ref().and_then(|v| v.rewards.as_ref());
            let counted = match convention {
                ScoreConvention::Harbor025 => rewards,
                ScoreConvention::Harbor026 => rewards.filter(|_| result.reward_valid()),
            };
            if let Some(values) = counted {
                for (key, value) in values {
                    stats
                        .reward_stats
                        .entry(key.clone())
                        .or_default()
                        .entry(format_reward(*value))
                        .or_default()
                        .push(name.clone());
                }
            }
            for agent in result.agent_results() {
                stats.n_input_tokens += agent.n_input_tokens.unwrap_or(0);
                stats.n_cache_tokens += agent.n_cache_tokens.unwrap_or(0);
                stats.n_output_tokens += agent.n_output_tokens.unwrap_or(0);
                stats.cost_usd += agent.cost_usd.unwrap_or(0.0);
            }
            stats.n_retries += u64::from(result.retries);
            stats.n_restarts += u64::from(result.restarts);
            for (phase, timing) in [
                ("environment_setup", &result.environment_setup),
                ("agent_setup", &result.agent_setup),
                ("agent_execution", &result.agent_execution),
                ("verifier", &result.verifier),
            ] {
                if let Some(seconds) = timing.as_ref().and_then(TimingInfo::seconds) {
                    phases.entry(phase).or_default().push(seconds);
                }
            }
        }
        let scores = Scores::compute(results, metrics, true);
        let headline = scores.get(convention);
        (stats.n_trials, stats.metrics, stats.pass_at_k) =
            (headline.n_trials, headline.metrics.clone(), headline.pass_at_k.clone());
        stats.scores = Some(scores);
        stats.phase_seconds =
            phases.into_iter().filter_map(|(k, v)| PhaseTimes::of(v).map(|t| (k.to_string(), t))).collect();
        stats
    }
}

/// Writes a reward the way Python's `str(float)` would (`1.0`, `0.5`), for reward_stats keys.
fn format_reward(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e16 { format!("{value:.1}") } else { format!("{value}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TrialErrorKind;
    use crate::ids::TrialName;
    use crate::result::{AgentContext, AgentInfo, ModelInfo, StepResult, TaskIdRecord, TrialConfig, VerifierResult};

    fn result(task: &str, reward: Option<f64>, error: Option<&str>) -> TrialResult {
        let agent = AgentInfo {
            name: "terminus-2".into(),
            version: "2.0.0".into(),
            model_info: Some(ModelInfo::from_model_name("openai/gpt-4o")),
        };
        let task_id = TaskIdRecord { path: task.into(), git_url: None, git_commit_id: None };
        TrialResult {
            id: "x".into(),
            source: Some("tasks".into()),
            agent_result: Some(AgentContext { n_input_tokens: Some(10), ..Default::default() }),
            verifier_result: reward
                .map(|r| VerifierResult { rewards: Some(BTreeMap::from([("reward".to_string(), r)])) }),
            exception_info: error.map(|e| {
                let kind = TrialErrorKind::from_name(e).expect("a known kind");
                crate::error::TrialError::new(kind, "boom").to_exception_info()
            }),
            ..TrialResult::new(TrialName::generate(task), task.into(), task_id, TrialConfig::default(), agent)
        }
    }

    #[test]
    fn a_multi_step_trials_errors_and_usage_are_its_steps() {
        let mut multi = result("m", Some(0.5), None);
        multi.agent_result = None;
        let timeout = crate::error::TrialError::new(TrialErrorKind::AgentTimeout, "late").to_exception_info();
        multi.step_results = Some(vec![
            StepResult {
                step_name: "one".into(),
                agent_result: Some(AgentContext { n_input_tokens: Some(7), ..Default::default() }),
                exception_info: Some(timeout),
                ..StepResult::default()
            },
            StepResult {
                step_name: "two".into(),
                agent_result: Some(AgentContext { n_input_tokens: Some(5), ..Default::default() }),
                ..StepResult::default()
            },
        ]);
        assert_eq!(multi.error_kind(), Some(TrialErrorKind::AgentTimeout));
        let stats = JobStats::compute(
            &[multi],
            LiveCounts { n_total: 1, ..LiveCounts::default() },
            &["mean"],
            ScoreConvention::Harbor025,
        );
        assert_eq!((stats.n_errored_trials, stats.n_input_tokens), (1, Some(12)));
        let eval = stats.evals.values().next().unwrap();
        assert_eq!(eval.exception_stats["AgentTimeoutError"].len(), 1);
        assert_eq!(eval.n_input_tokens, 12);
    }

    #[test]
    fn stats_count_errors_as_zero_reward() {
        let results = vec![
            result("a", Some(1.0), None),
            result("a", Some(0.0), None),
            result("b", None, Some("RewardFileNotFoundError")),
            result("b", Some(1.0), None),
        ];
        let live = LiveCounts { n_total: 6, n_running: 1, n_pending: 1, n_retries: 2, n_restarts: 0 };
        let stats = JobStats::compute(&results, live, &["mean", "max"], ScoreConvention::Harbor025);
        assert_eq!(stats.n_completed_trials, 4);
        assert_eq!(stats.n_errored_trials, 1);
        assert_eq!(stats.n_finished_trials, 3);
        assert_eq!(stats.n_pending_trials, 1);
        assert!(stats.is_consistent(6));
        assert!(!stats.is_consistent(7));
        assert_eq!(stats.n_input_tokens, Some(40));
        let eval = &stats.evals["terminus-2__gpt-4o__tasks"];
        assert_eq!(eval.n_trials, 3);
        assert_eq!(eval.n_errors, 1);
        assert_eq!(eval.metrics[0]["mean"], 0.5);
        assert_eq!(eval.metrics[1]["max"], 1.0);
        assert_eq!(eval.n_input_tokens, 40);
        assert_eq!(eval.reward_stats["reward"]["1.0"].len(), 2);
        // Each task: n=2, c=1 → pass@1 = 0.5, pass@2 = 1.
        assert_eq!(eval.pass_at_k["1"], 0.5);
        assert_eq!(eval.pass_at_k["2"], 1.0);
        assert_eq!(stats.headline().and_then(|s| s.mean), Some(0.5));
    }

    /// Under `harbor-0.26` Harbor's fields hold 0.26's figures: the verifier error is left out
    /// of the mean, pass@k and reward_stats; `scores` holds both either way.
    #[test]
    fn harbors_fields_follow_the_convention() {
        let results = vec![
            result("a", Some(1.0), None),
            result("a", Some(0.0), None),
            result("b", None, Some("RewardFileNotFoundError")),
            result("b", Some(1.0), Some("RateLimitError")),
            result("b", Some(1.0), None),
        ];
        let live = LiveCounts { n_total: 5, ..LiveCounts::default() };
        let old = JobStats::compute(&results, live, &["mean"], ScoreConvention::Harbor025);
        let new = JobStats::compute(&results, live, &["mean"], ScoreConvention::Harbor026);
        let (old_eval, new_eval) = (&old.evals["terminus-2__gpt-4o__tasks"], &new.evals["terminus-2__gpt-4o__tasks"]);
        assert_eq!((old_eval.n_trials, new_eval.n_trials), (4, 3));
        assert_eq!(old_eval.metrics[0]["mean"], 3.0 / 5.0);
        assert!((new_eval.metrics[0]["mean"] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(new_eval.reward_stats["reward"]["1.0"].len(), 2, "the rate-limited trial's 1 is not counted");
        assert_eq!(old_eval.scores, new_eval.scores);
        assert_eq!(new.score_convention, ScoreConvention::Harbor026);
        let job = new.headline().unwrap();
        assert_eq!((job.n_counted, job.n_completed), (3, 5));
        assert_eq!(job.left_out, BTreeMap::from([("RateLimitError".into(), 1), ("RewardFileNotFoundError".into(), 1)]));
        assert!(job.pass_at_k.is_empty(), "pass@k is per group");
    }

    #[test]
    fn cancellations_are_their_own_bucket_and_phases_have_percentiles() {
        let mut a = result("a", Some(1.0), None);
        // One clock reading: two would differ by however long the machine took between them.
        let start = crate::time::now();
        a.agent_execution =
            Some(TimingInfo { started_at: Some(start), finished_at: Some(start + chrono::Duration::seconds(10)) });
        let b = result("a", None, Some("CancelledError"));
        let stats = JobStats::compute(
            &[a, b],
            LiveCounts { n_total: 2, ..LiveCounts::default() },
            &["mean"],
            ScoreConvention::Harbor025,
        );
        assert_eq!((stats.n_finished_trials, stats.n_cancelled_trials, stats.n_errored_trials), (1, 1, 0));
        assert!(stats.is_consistent(2));
        let phases = &stats.evals["terminus-2__gpt-4o__tasks"].phase_seconds;
        assert_eq!(phases["agent_execution"].n, 1);
        assert!((phases["agent_execution"].p90 - 10.0).abs() < 1e-6);
        let times = PhaseTimes::of((1..=10).map(f64::from).collect()).unwrap();
        assert_eq!((times.p50, times.p90, times.max, times.mean), (5.0, 9.0, 10.0, 5.5));
    }

    /// A job result Harbor 0.26 wrote (tests/fixtures/harbor-0.26-job, made with Harbor's models).
    #[test]
    fn harbor_written_job_results_are_read() {
        let job: JobResult = serde_json::from_str(include_str!(concat!(
            "../../../../tests/fixtures/harbor-0.26-job/harbor-written",
            "/result.json"
        )))
        .unwrap();
        assert_eq!((job.n_total_trials, job.stats.n_completed_trials, job.stats.n_retries), (8, 7, 1));
    }
}
