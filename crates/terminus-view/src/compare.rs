//! Two jobs side by side, task by task: each task's mean reward in each, which tasks flipped,
//! and the difference in mean reward over the tasks both ran, with a paired bootstrap interval
//! (resampling tasks, so a task's attempts stay together and the task-to-task variation — the
//! larger part in agent benchmarks — is what the interval measures).

use std::collections::BTreeMap;

use serde::Serialize;
use terminus_core::stats::{self, Interval};

use crate::scan::{JobRow, TrialRow, TrialState};

/// Bootstrap resamples: enough for stable 2.5 % / 97.5 % percentiles.
const RESAMPLES: usize = 10_000;
/// A fixed seed, so a comparison reads the same each time it is opened.
const SEED: u64 = 0x7e57_ab1e;

/// A task's figures in one job.
#[derive(Clone, Debug, Serialize)]
pub struct TaskSide {
    /// Mean over its completed trials, errors as 0.
    pub mean: f64,
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
    pub n_common: usize,
    /// Mean over the common tasks in each job.
    pub mean_a: Option<f64>,
    pub mean_b: Option<f64>,
    /// `b − a` over the common tasks, with its paired bootstrap 95 % interval.
    pub difference: Option<Interval>,
    pub n_fail_to_pass: usize,
    pub n_pass_to_fail: usize,
}

fn sides(rows: &[TrialRow]) -> BTreeMap<String, TaskSide> {
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
            let mean = trials.iter().map(|t| t.reward.unwrap_or(0.0)).sum::<f64>() / n as f64;
            let costs: Vec<f64> = trials.iter().filter_map(|t| t.cost_usd).collect();
            let side = TaskSide {
                mean,
                n,
                rewards: trials.iter().map(|t| t.reward).collect(),
                cost_usd: (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64),
                trials: trials.iter().map(|t| t.name.clone()).collect(),
            };
            (task, side)
        })
        .collect()
}

/// Compares job `a` with job `b` (`b − a`).
pub fn compare(a: JobRow, a_rows: &[TrialRow], b: JobRow, b_rows: &[TrialRow]) -> Comparison {
    let (mut a_sides, mut b_sides) = (sides(a_rows), sides(b_rows));
    let mut names: Vec<String> = a_sides.keys().chain(b_sides.keys()).cloned().collect();
    names.sort();
    names.dedup();
    let mut tasks = Vec::new();
    let mut pairs = Vec::new();
    for task in names {
        let (sa, sb) = (a_sides.remove(&task), b_sides.remove(&task));
        let flip = match (&sa, &sb) {
            (Some(x), Some(y)) => {
                pairs.push((x.mean, y.mean));
                match (x.mean >= 0.5, y.mean >= 0.5) {
                    (true, false) => Some(Flip::PassToFail),
                    (false, true) => Some(Flip::FailToPass),
                    _ => None,
                }
            }
            _ => None,
        };
        tasks.push(TaskComparison { task, a: sa, b: sb, flip });
    }
    let mean =
        |f: fn(&(f64, f64)) -> f64| (!pairs.is_empty()).then(|| pairs.iter().map(f).sum::<f64>() / pairs.len() as f64);
    Comparison {
        a,
        b,
        n_common: pairs.len(),
        mean_a: mean(|p| p.0),
        mean_b: mean(|p| p.1),
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
    }
}
