//! The two conventions' figures over hand-made results.

use super::*;
use crate::error::{TrialError, TrialErrorKind};
use crate::error_policy::PolicyOverride;
use crate::ids::TrialName;
use crate::result::{AgentInfo, StepResult, TaskIdRecord, TrialConfig, VerifierResult};

fn result(task: &str, rewards: &[(&str, f64)], error: Option<TrialErrorKind>) -> TrialResult {
    let agent = AgentInfo { name: "terminus-2".into(), version: "2.0.0".into(), model_info: None };
    let task_id = TaskIdRecord { path: task.into(), git_url: None, git_commit_id: None };
    TrialResult {
        verifier_result: (!rewards.is_empty())
            .then(|| VerifierResult { rewards: Some(rewards.iter().map(|(k, v)| (k.to_string(), *v)).collect()) }),
        exception_info: error.map(|kind| TrialError::new(kind, "boom").to_exception_info()),
        ..TrialResult::new(TrialName::generate(task), task.into(), task_id, TrialConfig::default(), agent)
    }
}

fn scores(results: &[TrialResult]) -> Scores {
    let refs: Vec<&TrialResult> = results.iter().collect();
    Scores::compute(&refs, &["mean", "sum"], true)
}

#[test]
fn pass_at_k_matches_the_unbiased_estimator() {
    // n=5, c=2, k=2: 1 - (3/5)(2/4) = 0.7
    assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
    assert_eq!(pass_at_k(3, 0, 1), 0.0);
    assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
    assert_eq!(pass_at_k(4, 3, 2), 1.0);
    assert!(pass_at_k(2, 1, 3).is_nan(), "k above n has no estimate");
}

#[test]
fn pass_at_k_covers_every_k_and_needs_binary_single_rewards() {
    let results: Vec<TrialResult> =
        (0..3).map(|i| result("a", &[("reward", if i == 0 { 1.0 } else { 0.0 })], None)).collect();
    let p = scores(&results).harbor_025.pass_at_k;
    assert_eq!(p.keys().cloned().collect::<Vec<_>>(), ["1", "2", "3"]);
    assert!((p["1"] - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(p["3"], 1.0);
    assert!(scores(&[result("a", &[("reward", 0.5)], None)]).harbor_025.pass_at_k.is_empty());
    let two_keys = result("a", &[("x", 1.0), ("y", 0.0)], None);
    assert!(scores(&[two_keys]).harbor_026.pass_at_k.is_empty(), "several reward keys: no pass@k");
    let named = result("a", &[("score", 1.0)], None);
    assert_eq!(scores(&[named]).harbor_025.pass_at_k["1"], 1.0, "the single key counts whatever its name");
}

/// Eight trials of two tasks: the 0.25 mean counts all eight, the missing rewards as 0; 0.26
/// counts the six valid ones, leaving out the rate-limited trial (whose 1 does not count) and
/// the one without a reward; a task without a valid trial leaves 0.26's pass@k.
#[test]
fn both_conventions_over_the_same_trials() {
    let results = vec![
        result("a", &[("reward", 1.0)], None),
        result("a", &[("reward", 1.0)], None),
        result("a", &[("reward", 0.0)], Some(TrialErrorKind::AgentTimeout)),
        result("a", &[("reward", 1.0)], Some(TrialErrorKind::RateLimit)),
        result("b", &[("reward", 1.0)], None),
        result("b", &[("reward", 0.0)], None),
        result("b", &[("reward", 1.0)], None),
        result("b", &[], None),
    ];
    let s = scores(&results);
    let (old, new) = (&s.harbor_025, &s.harbor_026);
    assert_eq!((old.n_trials, old.n_counted, old.n_completed), (7, 8, 8));
    assert_eq!((new.n_trials, new.n_counted, new.n_completed), (6, 6, 8));
    assert_eq!(old.mean, Some(5.0 / 8.0));
    assert!((new.mean.unwrap() - 4.0 / 6.0).abs() < 1e-12);
    assert_eq!(old.metrics, vec![BTreeMap::from([("mean".into(), 5.0 / 8.0)]), BTreeMap::from([("sum".into(), 5.0)])]);
    assert_eq!(new.metrics[1]["sum"], 4.0);
    assert_eq!(new.left_out, BTreeMap::from([("RateLimitError".into(), 1), (NO_REWARD.into(), 1)]));
    assert!(old.left_out.is_empty());
    // 0.25: a n=4 c=3, b n=4 c=2; 0.26: a n=3 c=2, b n=3 c=2.
    assert!((old.pass_at_k["1"] - (0.75 + 0.5) / 2.0).abs() < 1e-12);
    assert!((new.pass_at_k["1"] - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(new.pass_at_k.len(), 3);
    assert_eq!(
        s.describe(ScoreConvention::Harbor025),
        "mean 0.625 (harbor-0.26: 0.667 over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward)"
    );
    assert_eq!(
        s.describe(ScoreConvention::Harbor026),
        "mean 0.667 over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward (harbor-0.25: 0.625)"
    );
    assert_eq!(s.brief(ScoreConvention::Harbor026), "0.667 (harbor-0.25: 0.625)");
    assert_eq!(Scores::default().describe(ScoreConvention::Harbor025), "mean - (harbor-0.26: -)");
}

#[test]
fn several_reward_keys_are_aggregated_key_by_key() {
    let results = vec![result("a", &[("x", 1.0), ("y", 0.5)], None), result("a", &[("x", 0.0)], None)];
    let s = scores(&results);
    assert_eq!(s.harbor_025.metrics[0], BTreeMap::from([("x".into(), 0.5), ("y".into(), 0.25)]));
    assert_eq!(s.harbor_025.mean, None, "no single mean without a `reward` key");
}

/// The job's `override_error_policy` stored on the error decides as Harbor 0.26 does; an error
/// of a step counts like the trial's own.
#[test]
fn overrides_and_steps_decide_validity() {
    let mut timeout = result("a", &[("reward", 1.0)], Some(TrialErrorKind::AgentTimeout));
    assert!(timeout.reward_valid());
    timeout.config.override_error_policy = BTreeMap::from([(
        "AgentTimeoutError".to_string(),
        PolicyOverride { has_valid_reward: Some(false), ..PolicyOverride::default() },
    )]);
    timeout.apply_policy_overrides();
    assert!(!timeout.reward_valid());
    let text = serde_json::to_value(&timeout).unwrap();
    assert_eq!(text["exception_info"]["policy"]["has_valid_reward"], false);
    assert_eq!(text["exception_info"]["policy_override"]["has_valid_reward"], false);
    assert_eq!(text["reward_valid"], false);
    assert_eq!(text.as_object().unwrap().keys().next().map(String::as_str), Some("schema_version"));
    assert_eq!(text.as_object().unwrap().keys().next_back().map(String::as_str), Some("reward_valid"));
    let back: TrialResult = serde_json::from_value(text.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), text, "what is written reads back the same");

    let mut stepped = result("b", &[("reward", 1.0)], None);
    stepped.step_results = Some(vec![StepResult {
        step_name: "one".into(),
        exception_info: Some(TrialError::new(TrialErrorKind::VerifierTimeout, "slow").to_exception_info()),
        ..StepResult::default()
    }]);
    assert!(!stepped.reward_valid());
    let s = scores(&[timeout, stepped]);
    assert_eq!(
        s.harbor_026.left_out,
        BTreeMap::from([("AgentTimeoutError".into(), 1), ("VerifierTimeoutError".into(), 1)])
    );
    assert_eq!((s.harbor_026.metrics.len(), s.harbor_026.mean), (0, None), "nothing counted, no metric");
}

#[test]
fn conventions_are_named() {
    for convention in ScoreConvention::ALL {
        assert_eq!(ScoreConvention::parse(convention.name()), Some(convention));
        assert_eq!(serde_json::to_value(convention).unwrap(), convention.name());
        assert_ne!(convention.other(), convention);
    }
    assert_eq!(ScoreConvention::parse("harbor-0.27"), None);
}
