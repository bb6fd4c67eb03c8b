//! The oracle preflight's verdict ([`PreflightReport`]): which tasks' own solutions do not score
//! 1, and why. A job with `preflight: oracle` leaves those tasks out and records the report in
//! its `result.json`; `tasks check --oracle` prints it.

use serde::{Deserialize, Serialize};

use crate::result::TrialResult;

/// What the oracle run before a job found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreflightReport {
    /// The oracle job's directory, where each task's trial (logs, rewards) stays.
    pub job_dir: String,
    /// Tasks whose solution ran.
    pub n_tasks: u64,
    /// Tasks whose solution did not score 1, by name: left out of the job.
    pub failed: Vec<FailedTask>,
}

/// One task whose solution did not score 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTask {
    pub task: String,
    pub reason: String,
}

impl PreflightReport {
    /// The verdict over `tasks` (every task the oracle was to run) from the oracle trials'
    /// `results`: a task passes when one of its trials ended without an error and with every
    /// reward at 1. A task without a result (its trial never finished) fails.
    pub fn judge(job_dir: &str, tasks: &[String], results: &[TrialResult]) -> PreflightReport {
        let failed = tasks
            .iter()
            .filter_map(|task| {
                let mine: Vec<&TrialResult> = results.iter().filter(|r| &r.task_name == task).collect();
                if mine.iter().any(|r| failure(r).is_none()) {
                    return None;
                }
                let reason = mine.first().and_then(|r| failure(r)).unwrap_or_else(|| "its trial did not finish".into());
                Some(FailedTask { task: task.clone(), reason })
            })
            .collect();
        PreflightReport { job_dir: job_dir.to_string(), n_tasks: tasks.len() as u64, failed }
    }

    /// The names of the tasks left out.
    pub fn excluded(&self) -> impl Iterator<Item = &str> {
        self.failed.iter().map(|f| f.task.as_str())
    }
}

/// Why one oracle trial does not count as a pass, or None when it scored 1.
fn failure(result: &TrialResult) -> Option<String> {
    if let Some(e) = result.recorded_errors().next() {
        let first_line = e.exception_message.lines().next().unwrap_or("").trim();
        return Some(if first_line.is_empty() {
            e.exception_type.clone()
        } else {
            format!("{}: {first_line}", e.exception_type)
        });
    }
    let rewards = result.verifier_result.as_ref().and_then(|v| v.rewards.as_ref());
    match rewards {
        None => Some("no reward was recorded".into()),
        Some(r) if r.is_empty() => Some("no reward was recorded".into()),
        Some(r) => {
            let below: Vec<String> = r.iter().filter(|(_, v)| **v != 1.0).map(|(k, v)| format!("{k} {v}")).collect();
            (!below.is_empty()).then(|| format!("scored {}", below.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ids::TrialName;
    use crate::result::{AgentInfo, ExceptionInfo, TaskIdRecord, TrialConfig, VerifierResult};

    fn result(task: &str, rewards: Option<&[(&str, f64)]>, error: Option<(&str, &str)>) -> TrialResult {
        let agent = AgentInfo { name: "oracle".into(), version: "1.0.0".into(), model_info: None };
        let task_id = TaskIdRecord { path: task.into(), git_url: None, git_commit_id: None };
        let mut r = TrialResult::new(TrialName::generate(task), task.into(), task_id, TrialConfig::default(), agent);
        r.verifier_result = rewards.map(|pairs| VerifierResult {
            rewards: Some(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>()),
        });
        r.exception_info = error.map(|(kind, message)| ExceptionInfo {
            exception_type: kind.into(),
            exception_message: message.into(),
            exception_traceback: String::new(),
            occurred_at: crate::time::now(),
            policy_override: None,
            kind: None,
        });
        r
    }

    #[test]
    fn tasks_whose_solution_does_not_score_1_are_named_with_their_reason() {
        let tasks: Vec<String> = ["ok", "zero", "partial", "timeout", "missing", "no-reward"].map(String::from).into();
        let results = [
            result("ok", Some(&[("reward", 1.0)]), None),
            result("zero", Some(&[("reward", 0.0)]), None),
            result("partial", Some(&[("a", 1.0), ("b", 0.5)]), None),
            result("timeout", None, Some(("AgentTimeoutError", "the agent ran past 120 s\ntraceback"))),
            result("no-reward", Some(&[]), None),
        ];
        let report = PreflightReport::judge("jobs/j__oracle-preflight", &tasks, &results);
        assert_eq!(report.n_tasks, 6);
        let got: Vec<(&str, &str)> = report.failed.iter().map(|f| (f.task.as_str(), f.reason.as_str())).collect();
        assert_eq!(
            got,
            [
                ("zero", "scored reward 0"),
                ("partial", "scored b 0.5"),
                ("timeout", "AgentTimeoutError: the agent ran past 120 s"),
                ("missing", "its trial did not finish"),
                ("no-reward", "no reward was recorded"),
            ]
        );
        assert_eq!(report.excluded().collect::<Vec<_>>(), ["zero", "partial", "timeout", "missing", "no-reward"]);
    }

    #[test]
    fn a_task_passes_when_any_of_its_trials_scored_1() {
        let tasks = vec!["flaky".to_string()];
        let results =
            [result("flaky", Some(&[("reward", 0.0)]), None), result("flaky", Some(&[("reward", 1.0)]), None)];
        assert!(PreflightReport::judge("j", &tasks, &results).failed.is_empty());
    }
}
