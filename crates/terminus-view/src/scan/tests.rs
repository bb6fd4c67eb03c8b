//! Unit tests of the jobs scan: job directories written to temporary directories and summarised.

use super::*;

fn files(result: Value) -> JobFiles {
    JobFiles { config: None, result: Some(result), problem: None }
}

#[test]
fn the_mean_and_its_interval_come_from_the_job_result_alone() {
    let result = serde_json::json!({
        "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:01:40Z", "n_total_trials": 4,
        "stats": {"n_completed_trials": 4, "n_errored_trials": 1, "n_running_trials": 0, "n_pending_trials": 0,
            "evals": {"terminus-2__gpt-4o__tasks": {"n_trials": 3, "n_errors": 1, "metrics": [{"mean": 0.5}],
                "pass_at_k": {"1": 0.5},
                "reward_stats": {"reward": {"1.0": ["a", "b"], "0.0": ["c"]}}}}}
    });
    let row = job_row("j", &files(result), false, SystemTime::now());
    assert_eq!(row.state, JobState::Finished);
    assert_eq!(row.duration_sec, Some(100.0));
    let mean = row.mean_reward.unwrap();
    // Two rewards of 1, one of 0, and the errored trial's 0: 2 of 4.
    assert_eq!((mean.estimate, mean.n), (0.5, 4));
    assert!(mean.low < 0.5 && mean.high > 0.5);
    assert_eq!(row.agents, ["terminus-2"]);
    assert_eq!(row.models, ["gpt-4o"]);
    assert_eq!(row.datasets, ["tasks"]);
    assert_eq!((row.score_convention, row.beside.as_deref()), (ScoreConvention::Harbor025, None));
}

/// A result with both conventions' scores: under `harbor-0.26` the headline's interval is over
/// the valid rewards `reward_stats` names (no zeros added), and 0.25's figures are beside.
#[test]
fn the_headline_follows_the_jobs_convention_with_the_other_beside() {
    let scores = serde_json::json!({
        "harbor-0.25": {"n_trials": 3, "metrics": [{"mean": 0.5}], "pass_at_k": {"1": 0.5}, "mean": 0.5,
            "n_counted": 4, "n_completed": 4},
        "harbor-0.26": {"n_trials": 2, "metrics": [{"mean": 1.0}], "pass_at_k": {"1": 1.0}, "mean": 1.0,
            "n_counted": 2, "n_completed": 4, "left_out": {"RateLimitError": 1, "no reward": 1}}});
    let result = serde_json::json!({
        "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:01:40Z", "n_total_trials": 4,
        "stats": {"n_completed_trials": 4, "n_errored_trials": 1, "n_running_trials": 0, "n_pending_trials": 0,
            "score_convention": "harbor-0.26", "scores": scores,
            "evals": {"terminus-2__gpt-4o__tasks": {"n_trials": 2, "n_errors": 1, "metrics": [{"mean": 1.0}],
                "pass_at_k": {"1": 1.0}, "scores": scores,
                "reward_stats": {"reward": {"1.0": ["a", "b"]}}}}}
    });
    let row = job_row("j", &files(result), false, SystemTime::now());
    assert_eq!(row.score_convention, ScoreConvention::Harbor026);
    assert_eq!(row.mean_reward.map(|m| (m.estimate, m.n)), Some((1.0, 2)));
    let left_out = "over 2 of 4; 2 left out: 1 RateLimitError, 1 no reward";
    assert_eq!(row.beside, Some(format!("{left_out} · harbor-0.25: 0.500")));
    assert_eq!(row.evals[0].beside, Some(format!("{left_out} · harbor-0.25: 0.500; pass @1 0.50")));
    let new = row.scores.as_ref().unwrap().get(ScoreConvention::Harbor026);
    assert_eq!(new.left_out.len(), 2);
}

#[test]
fn the_grids_means_follow_the_convention() {
    let valid = trial("t1__a", "t1", Some(1), Some(1.0), "2026-01-01T00:00:01Z");
    let errored = TrialRow {
        state: TrialState::Errored,
        reward_valid: false,
        ..trial("t1__b", "t1", Some(2), None, "2026-01-01T00:00:02Z")
    };
    let rows = vec![valid, errored];
    let (_, old) = grid(&rows, ScoreConvention::Harbor025);
    let (_, new) = grid(&rows, ScoreConvention::Harbor026);
    assert_eq!((old[0].mean, old[0].mean_beside), (Some(0.5), Some(1.0)));
    assert_eq!((new[0].mean, new[0].mean_beside), (Some(1.0), Some(0.5)));
    assert_eq!(new[0].pass_at_k.len(), 1, "one valid trial: pass@1 only");
}

#[test]
fn states_follow_the_lock_and_the_counts() {
    let base = |running: u64, pending: u64, cancelled: u64| {
        serde_json::json!({"started_at": "2026-01-01T00:00:00Z", "n_total_trials": 4, "stats": {
                "n_completed_trials": 1, "n_running_trials": running, "n_pending_trials": pending,
                "n_cancelled_trials": cancelled}})
    };
    let state = |v: Value, held: bool| job_row("j", &files(v), held, SystemTime::now()).state;
    assert_eq!(state(base(2, 1, 0), true), JobState::Running);
    assert_eq!(state(base(2, 1, 0), false), JobState::Interrupted, "killed with trials running");
    assert_eq!(state(base(0, 3, 0), false), JobState::Halted);
    assert_eq!(state(base(0, 2, 1), false), JobState::Interrupted, "cancelled");
    assert_eq!(job_row("j", &JobFiles::default(), false, SystemTime::now()).state, JobState::Unknown);
}

#[test]
fn eval_keys_split_as_harbor_joins_them() {
    assert_eq!(split_eval_key("oracle__adhoc"), ("oracle".into(), None, "adhoc".into()));
    assert_eq!(
        split_eval_key("terminus-2__claude__x__harbor/pkg"),
        ("terminus-2".into(), Some("claude__x".into()), "harbor/pkg".into())
    );
}

fn trial(name: &str, task: &str, attempt: Option<u32>, reward: Option<f64>, started: &str) -> TrialRow {
    TrialRow { started_at: Some(started.into()), ..TrialRow::finished_for_test(name, task, attempt, reward) }
}

#[test]
fn the_grid_numbers_harbor_attempts_and_gives_pass_at_k_per_task() {
    let mut rows = vec![
        trial("t1__b", "t1", None, Some(0.0), "2026-01-01T00:00:02Z"),
        trial("t1__a", "t1", None, Some(1.0), "2026-01-01T00:00:01Z"),
        trial("t2__a", "t2", None, Some(0.5), "2026-01-01T00:00:01Z"),
    ];
    number_attempts(&mut rows);
    assert_eq!(rows[1].attempt, Some(1));
    assert_eq!(rows[0].attempt, Some(2));
    let (n, grid) = grid(&rows, ScoreConvention::Harbor025);
    assert_eq!(n, 2);
    assert_eq!(grid[0].task, "t1");
    assert_eq!(grid[0].cells[0].as_ref().unwrap().trial, "t1__a");
    assert_eq!(grid[0].pass_at_k.get("1"), Some(&0.5));
    assert_eq!(grid[0].pass_at_k.get("2"), Some(&1.0));
    assert!(grid[1].pass_at_k.is_empty(), "a fractional reward has no pass@k");
    assert_eq!(grid[1].cells[1].as_ref().map(|c| c.trial.clone()), None);
}
