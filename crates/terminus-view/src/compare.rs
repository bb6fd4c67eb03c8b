//! Two jobs side by side, task by task: each task's mean reward in each, which tasks flipped,
//! and the difference in mean reward over the tasks both ran, with a paired bootstrap interval
//! (resampling tasks, so a task's attempts stay together and the task-to-task variation — the
//! larger part in agent benchmarks — is what the interval measures). The means follow the first
//! job's `score_convention`; the other convention's means are given beside them.

use std::collections::BTreeMap;

use serde::Serialize;
use terminus_core::stats::{self, Interval, ScoreConvention};

use crate::scan::{JobRow, TrialRow, TrialState};

/// Bootstrap resamples: enough for stable 2.5 % / 97.5 % percentiles.
const RESAMPLES: usize = 10_000;
/// A fixed seed, so a comparison reads the same each time it is opened.
const SEED: u64 = 0x7e57_ab1e;

/// A task's figures in one job.
#[derive(Clone, Debug, Serialize)]
pub struct TaskSide {
    /// The headline mean: under `harbor-0.25` over its completed trials, errors as 0; under
    /// `harbor-0.26` over those with a valid reward (None when it has none).
    pub mean: Option<f64>,
    /// The other convention's mean.
    pub mean_beside: Option<f64>,
    pub n: usize,
    pub rewards: Vec<Option<f64>>,
    /// Mean cost per trial, when trials recorded one.
    pub cost_usd: Option<f64>,
    pub trials: Vec<String>,
}

/// `pass_to_fail` / `fail_to_pass`: a task passes in a job when its mean reward is at least 0.5
/// (the majority of its attempts, for 0/1 rewards).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flip {
    PassToFail,
    FailToPass,
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskComparison {
    pub task: String,
    pub a: Option<TaskSide>,
    pub b: Option<TaskSide>,
    pub flip: Option<Flip>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub a: JobRow,
    pub b: JobRow,
    pub tasks: Vec<TaskComparison>,
    /// Whose rule makes the means (job `a`'s `score_convention`).
    pub score_convention: ScoreConvention,
    /// Tasks with a headline mean in both jobs.
    pub n_common: usize,
    /// Mean over the common tasks in each job.
    pub mean_a: Option<f64>,
    pub mean_b: Option<f64>,
    /// The same under the other convention (over the tasks with a mean in both under it).
    pub mean_a_beside: Option<f64>,
    pub mean_b_beside: Option<f64>,
    /// `b − a` over the common tasks, with its paired bootstrap 95 % interval.
    pub difference: Option<Interval>,
    pub n_fail_to_pass: usize,
    pub n_pass_to_fail: usize,
}

/// A task's mean under `convention`: 0.25 counts every completed trial (errors as 0), 0.26 the
/// ones with a valid reward.
fn task_mean(trials: &[&TrialRow], convention: ScoreConvention) -> Option<f64> {
    let counted: Vec<f64> = trials
        .iter()
        .filter(|t| convention == ScoreConvention::Harbor025 || t.reward_valid)
        .map(|t| t.reward.unwrap_or(0.0))
        .collect();
    (!counted.is_empty()).then(|| counted.iter().sum::<f64>() / counted.len() as f64)
}

fn sides(rows: &[TrialRow], convention: ScoreConvention) -> BTreeMap<String, TaskSide> {
    let mut by_task: BTreeMap<String, Vec<&TrialRow>> = BTreeMap::new();
    for row in rows {
        if matches!(row.state, TrialState::Finished | TrialState::Errored | TrialState::Cancelled) {
            by_task.entry(row.task.clone()).or_default().push(row);
        }
    }
    by_task
        .into_iter()
        .map(|(task, mut trials)| {
            trials.sort_by_key(|t| t.attempt);
            let n = trials.len();
            let costs: Vec<f64> = trials.iter().filter_map(|t| t.cost_usd).collect();
            let side = TaskSide {
                mean: task_mean(&trials, convention),
                mean_beside: task_mean(&trials, convention.other()),
                n,
                rewards: trials.iter().map(|t| t.reward).collect(),
                cost_usd: (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64),
                trials: trials.iter().map(|t| t.name.clone()).collect(),
            };
            (task, side)
        })
        .collect()
}

/// Compares job `a` with job `b` (`b − a`), by `a`'s `score_convention`.
pub fn compare(a: JobRow, a_rows: &[TrialRow], b: JobRow, b_rows: &[TrialRow]) -> Comparison {
    let convention = a.score_convention;
    let (mut a_sides, mut b_sides) = (sides(a_rows, convention), sides(b_rows, convention));
    let mut names: Vec<String> = a_sides.keys().chain(b_sides.keys()).cloned().collect();
    names.sort();
    names.dedup();
    let mut tasks = Vec::new();
    let (mut pairs, mut pairs_beside) = (Vec::new(), Vec::new());
    for task in names {
        let (sa, sb) = (a_sides.remove(&task), b_sides.remove(&task));
        if let (Some(x), Some(y)) = (sa.as_ref().and_then(|s| s.mean_beside), sb.as_ref().and_then(|s| s.mean_beside)) {
            pairs_beside.push((x, y));
        }
        let flip = match (sa.as_ref().and_then(|s| s.mean), sb.as_ref().and_then(|s| s.mean)) {
            (Some(x), Some(y)) => {
                pairs.push((x, y));
                match (x >= 0.5, y >= 0.5) {
                    (true, false) => Some(Flip::PassToFail),
                    (false, true) => Some(Flip::FailToPass),
                    _ => None,
                }
            }
            _ => None,
        };
        tasks.push(TaskComparison { task, a: sa, b: sb, flip });
    }
    let mean = |pairs: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        (!pairs.is_empty()).then(|| pairs.iter().map(f).sum::<f64>() / pairs.len() as f64)
    };
    Comparison {
        a,
        b,
        score_convention: convention,
        n_common: pairs.len(),
        mean_a: mean(&pairs, |p| p.0),
        mean_b: mean(&pairs, |p| p.1),
        mean_a_beside: mean(&pairs_beside, |p| p.0),
        mean_b_beside: mean(&pairs_beside, |p| p.1),
        difference: stats::paired_bootstrap(&pairs, RESAMPLES, SEED),
        n_fail_to_pass: tasks.iter().filter(|t| t.flip == Some(Flip::FailToPass)).count(),
        n_pass_to_fail: tasks.iter().filter(|t| t.flip == Some(Flip::PassToFail)).count(),
        tasks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{JobFiles, job_row};

    fn row(task: &str, attempt: u32, reward: f64, cost: f64) -> TrialRow {
        TrialRow {
            cost_usd: Some(cost),
            ..TrialRow::finished_for_test(&format!("{task}__{attempt}"), task, Some(attempt), Some(reward))
        }
    }

    #[test]
    fn flips_and_the_paired_difference_are_over_common_tasks() {
        let job = || job_row("j", &JobFiles::default(), false, std::time::SystemTime::now());
        let a =
            vec![row("t1", 1, 1.0, 0.1), row("t2", 1, 0.0, 0.2), row("t3", 1, 1.0, 0.1), row("only-a", 1, 1.0, 0.0)];
        let b =
            vec![row("t1", 1, 0.0, 0.3), row("t2", 1, 1.0, 0.4), row("t3", 1, 1.0, 0.2), row("only-b", 1, 0.0, 0.0)];
        let c = compare(job(), &a, job(), &b);
        assert_eq!(c.n_common, 3);
        assert_eq!((c.n_fail_to_pass, c.n_pass_to_fail), (1, 1));
        let d = c.difference.unwrap();
        assert_eq!(d.estimate, 0.0);
        assert!(d.low < 0.0 && d.high > 0.0, "{d:?}");
        let t1 = c.tasks.iter().find(|t| t.task == "t1").unwrap();
        assert_eq!(t1.flip, Some(Flip::PassToFail));
        assert_eq!(t1.b.as_ref().unwrap().cost_usd, Some(0.3));
        assert!(c.tasks.iter().any(|t| t.task == "only-a" && t.b.is_none() && t.flip.is_none()));
        assert_eq!((c.mean_a_beside, c.mean_b_beside), (c.mean_a, c.mean_b), "no trial is left out");
    }

    /// Under `harbor-0.26` a trial without a valid reward is left out of its task's mean (a task
    /// with none has no mean and is not common); 0.25's means are beside.
    #[test]
    fn the_first_jobs_convention_makes_the_means() {
        let mut a = job_row("a", &JobFiles::default(), false, std::time::SystemTime::now());
        a.score_convention = ScoreConvention::Harbor026;
        let b = job_row("b", &JobFiles::default(), false, std::time::SystemTime::now());
        let errored = |task: &str, attempt| TrialRow {
            state: TrialState::Errored,
            ..TrialRow::finished_for_test(&format!("{task}__{attempt}"), task, Some(attempt), None)
        };
        let a_rows = vec![row("t1", 1, 1.0, 0.0), errored("t1", 2), errored("t2", 1)];
        let b_rows = vec![row("t1", 1, 0.0, 0.0), row("t2", 1, 1.0, 0.0)];
        let c = compare(a, &a_rows, b, &b_rows);
        assert_eq!(c.score_convention, ScoreConvention::Harbor026);
        let t1 = &c.tasks[0];
        assert_eq!((t1.a.as_ref().unwrap().mean, t1.a.as_ref().unwrap().mean_beside), (Some(1.0), Some(0.5)));
        assert_eq!(c.n_common, 1, "t2 has no valid trial in a");
        assert_eq!((c.mean_a, c.mean_b), (Some(1.0), Some(0.0)));
        assert_eq!((c.mean_a_beside, c.mean_b_beside), (Some(0.25), Some(0.5)));
    }
}
