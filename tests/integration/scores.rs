//! Both of Harbor's score conventions, held to Harbor's own code: its result models read our
//! files and its job aggregation (tests/helpers/harbor_scores.py, run with each version's
//! virtualenv) computes the mean, pass@k and `n_trials` from them; they must equal what terminus
//! wrote and printed. Harbor 0.25's numbers count every trial (no reward as 0), Harbor 0.26's
//! only the trials with a valid reward.
//!
//! One job runs for real: passing and failing trials, a sandbox error (a Dockerfile that fails),
//! a provider error (the model server answers 500 once), agent timeouts (made invalid by the
//! job's `override_error_policy`, which Harbor 0.26 reads back from each result) and a verifier
//! error (no reward file), three attempts each. Harbor-written results are scored too, without
//! Docker.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_core::result::TrialResult;
use terminus_core::stats::{JobStats, LiveCounts, ScoreConvention};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::BoundedCommand;
use crate::support::{
    containers_of_job, docker, harbor_required, harbor_runtime, heavy_lock, instructed_task, read_json, reply,
    repo_root, temp_dir, terminus_bin, trial_dirs, write_job,
};

const VERSIONS: [(&str, ScoreConvention); 2] =
    [("0.25.0", ScoreConvention::Harbor025), ("0.26.0", ScoreConvention::Harbor026)];

/// Each Harbor version's python. None (skipped) only when Harbor cannot be had and neither
/// Docker nor Harbor is required; `TERMINUS_REQUIRE_DOCKER=1` makes a missing Harbor a failure.
fn harbor_pythons() -> Option<Vec<(ScoreConvention, PathBuf)>> {
    let mut pythons = Vec::new();
    for (version, convention) in VERSIONS {
        match harbor_runtime(version) {
            Some(runtime) => pythons.push((convention, runtime.python)),
            None if std::env::var("TERMINUS_REQUIRE_DOCKER").is_ok_and(|v| v == "1") || harbor_required() => {
                panic!("Harbor {version}'s virtualenv is missing (tests/helpers/harbor_runtime.sh prepares it)")
            }
            None => return None,
        }
    }
    Some(pythons)
}

/// What Harbor computes from a job directory (see tests/helpers/harbor_scores.py).
fn harbor_scores(python: &Path, job_dir: &Path) -> Value {
    let out = std::process::Command::new(python)
        .arg(repo_root().join("tests/helpers/harbor_scores.py"))
        .arg(job_dir)
        .output_bounded()
        .expect("Harbor's python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Harbor could not score {}: {}{stdout}",
        job_dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn close(a: &Value, b: &Value) -> bool {
    matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if (x - y).abs() < 1e-9)
}

/// The k Harbor computes pass@k for: powers of 2 from 2, and multiples of 5.
fn harbors_k(k: u64) -> bool {
    (k >= 2 && k.is_power_of_two()) || (k > 0 && k.is_multiple_of(5))
}

/// Our figures of one group (`n_trials`, `metrics`, `pass_at_k`) against Harbor's: the same
/// counts and metrics, and pass@k equal at every k Harbor computes (we keep every k ≤ the
/// smallest attempt count; Harbor keeps the k it names).
fn assert_same(ours: &Value, harbor: &Value, what: &str) {
    assert_eq!(ours["n_trials"], harbor["n_trials"], "{what}: n_trials; ours {ours}, Harbor's {harbor}");
    let (our_metrics, their_metrics) = (ours["metrics"].as_array().unwrap(), harbor["metrics"].as_array().unwrap());
    assert_eq!(our_metrics.len(), their_metrics.len(), "{what}: metrics; ours {ours}, Harbor's {harbor}");
    for (a, b) in our_metrics.iter().zip(their_metrics) {
        let (a, b) = (a.as_object().unwrap(), b.as_object().unwrap());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{what}: metric keys");
        assert!(a.iter().all(|(k, v)| close(v, &b[k])), "{what}: metrics; ours {a:?}, Harbor's {b:?}");
    }
    let ours_pass = ours["pass_at_k"].as_object().unwrap();
    let their_pass = harbor["pass_at_k"].as_object().unwrap();
    let expected: BTreeSet<&String> = ours_pass.keys().filter(|k| k.parse().is_ok_and(harbors_k)).collect();
    assert_eq!(
        their_pass.keys().collect::<BTreeSet<_>>(),
        expected,
        "{what}: pass@k's k; ours {ours}, Harbor's {harbor}"
    );
    for (k, v) in their_pass {
        assert!(close(&ours_pass[k], v), "{what}: pass@{k}: ours {}, Harbor's {v}", ours_pass[k]);
    }
}

/// Scores Harbor-written results (the 0.26 fixture: an agent timeout with a reward, a
/// cancellation, package and local tasks, several groups) with our statistics, and compares
/// every group under both conventions with what each Harbor version computes from the same files.
#[test]
fn harbor_written_results_score_as_harbor_scores_them() {
    let Some(pythons) = harbor_pythons() else { return };
    let job_dir = repo_root().join("tests/fixtures/harbor-0.26-job/harbor-written");
    let results: Vec<TrialResult> = trial_dirs(&job_dir)
        .iter()
        .map(|dir| serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap())
        .collect();
    let stats = JobStats::compute(&results, LiveCounts::default(), &["mean"], ScoreConvention::Harbor025);
    for (convention, python) in &pythons {
        let harbor = harbor_scores(python, &job_dir);
        let groups = harbor["evals"].as_object().unwrap();
        assert_eq!(groups.len(), stats.evals.len(), "{harbor}");
        for (key, theirs) in groups {
            let ours = serde_json::to_value(stats.evals[key].scores.as_ref().unwrap().get(*convention)).unwrap();
            assert_same(&ours, theirs, &format!("{} {key}", convention.name()));
        }
    }
}

/// A task of the scored job: its marker is its instruction.
fn task(root: &Path, name: &str, toml: &str, test_sh: &str) -> PathBuf {
    instructed_task(root, name, &format!("SCORE-{}: do as told.", name.to_uppercase()), toml, "true", test_sh)
}

const WRITE_1: &str = "echo 1 > /logs/verifier/reward.txt";

fn done() -> Turn {
    reply(json!([]), true)
}

/// The scored job's replies: most tasks claim completion at once; the slow one sleeps past its
/// time limit; the flaky one's first request (whichever attempt sends it) gets a 500, the next
/// creates the file its test checks and the rest only claim completion, so of its three
/// attempts one fails with a provider error, one passes and one fails.
fn script() -> Script {
    let at_once = |name: &str| Conversation { when: format!("SCORE-{name}:"), turns: vec![done()] };
    Script {
        conversations: vec![
            at_once("PASS"),
            at_once("FAIL"),
            at_once("NOREWARD"),
            Conversation {
                when: "SCORE-SLOW:".into(),
                turns: vec![reply(json!([{"keystrokes": "sleep 30\n", "duration": 30.0}]), false)],
            },
        ],
        sequential: vec![Conversation {
            when: "SCORE-FLAKY:".into(),
            turns: vec![
                Turn { status: Some(500), ..Turn::default() },
                reply(json!([{"keystrokes": "touch /app/ok\n", "duration": 0.5}]), true),
                done(),
            ],
        }],
        ..Script::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_scores_are_harbor_025s_and_026s() {
    let Some(docker) = docker().await else { return };
    let Some(pythons) = harbor_pythons() else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("scores");
    let root = dir.path().join("tasks");
    let tasks = vec![
        task(&root, "pass", "", WRITE_1),
        task(&root, "fail", "", "echo 0 > /logs/verifier/reward.txt"),
        task(
            &root,
            "flaky",
            "",
            "[ -f /app/ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
        ),
        task(&root, "slow", "[agent]\ntimeout_sec = 3.0\n", WRITE_1),
        task(&root, "broken", "", WRITE_1),
        task(&root, "noreward", "", "echo no reward written"),
    ];
    std::fs::write(root.join("broken/environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN exit 3\n").unwrap();
    let server = MockServer::start(script(), 0).await.unwrap();
    let agent = format!(
        "  - name: terminus-2\n    model_name: openai/gpt-4o\n    llm:\n      max_attempts: 1\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n",
        server.api_base()
    );
    let extra = "n_attempts: 3\nn_concurrent_trials: 4\nscore_convention: harbor-0.26\noverride_error_policy:\n  AgentTimeoutError:\n    has_valid_reward: false\n";
    let config = write_job(dir.path(), "scores", extra, &agent, &tasks);
    let out = tokio::task::spawn_blocking(move || crate::support::run_terminus(&config, &[])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "some trials errored:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("scores");

    // Each trial: what it recorded, and Harbor 0.26's verdict on its reward beside ours.
    let harbor: BTreeMap<ScoreConvention, Value> =
        pythons.iter().map(|(convention, python)| (*convention, harbor_scores(python, &job_dir))).collect();
    let (harbor_025, harbor_026) = (&harbor[&ScoreConvention::Harbor025], &harbor[&ScoreConvention::Harbor026]);
    let mut by_task: BTreeMap<String, Vec<(Option<String>, Value, bool)>> = BTreeMap::new();
    for trial in trial_dirs(&job_dir) {
        let result = read_json(&trial.join("result.json"));
        let name = result["trial_name"].as_str().unwrap();
        let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
        assert_eq!((keys[0].as_str(), keys[keys.len() - 1].as_str()), ("schema_version", "reward_valid"), "{name}");
        let valid = result["reward_valid"].as_bool().unwrap();
        assert_eq!(harbor_026["reward_valid"][name], valid, "Harbor 0.26's reward_valid of {name}: {result}");
        let error = result["exception_info"]["exception_type"].as_str().map(str::to_string);
        if error.is_some() {
            assert!(result["exception_info"]["policy"]["has_valid_reward"].is_boolean(), "{result}");
        }
        let reward = result["verifier_result"]["rewards"]["reward"].clone();
        by_task.entry(result["task_name"].as_str().unwrap().to_string()).or_default().push((error, reward, valid));
    }
    let kinds = |task: &str| -> Vec<Option<String>> {
        let mut kinds: Vec<Option<String>> = by_task[task].iter().map(|(e, _, _)| e.clone()).collect();
        kinds.sort();
        kinds
    };
    let some = |name: &str| Some(name.to_string());
    assert_eq!(kinds("pass"), [None, None, None], "{by_task:?}");
    assert_eq!(kinds("broken"), [some("RuntimeError"), some("RuntimeError"), some("RuntimeError")]);
    assert_eq!(kinds("noreward"), vec![some("RewardFileNotFoundError"); 3]);
    assert_eq!(kinds("slow"), vec![some("AgentTimeoutError"); 3]);
    assert!(
        by_task["slow"].iter().all(|(_, reward, valid)| *reward == 1.0 && !valid),
        "graded, overridden: {by_task:?}"
    );
    assert_eq!(kinds("flaky"), [None, None, some("InternalServerError")]);
    let flaky: Vec<&Value> = by_task["flaky"].iter().filter(|(e, _, _)| e.is_none()).map(|(_, r, _)| r).collect();
    assert!(flaky.contains(&&json!(1.0)) && flaky.contains(&&json!(0.0)), "one passes, one fails: {flaky:?}");

    // The job's figures against each Harbor version's, computed from the same files.
    let job = read_json(&job_dir.join("result.json"));
    let key = "terminus-2__gpt-4o__adhoc";
    let ours = &job["stats"]["evals"][key];
    assert_eq!(job["stats"]["score_convention"], "harbor-0.26");
    for (convention, harbor) in &harbor {
        let name = convention.name();
        let theirs = &harbor["evals"][key];
        assert_eq!(ours["n_errors"], theirs["n_errors"], "{name}");
        assert_same(&ours["scores"][name], theirs, name);
        // Harbor's models read our job result as we wrote it; its own fields are the headline's.
        assert_eq!(harbor["job"]["n_total_trials"], 18);
        if *convention == ScoreConvention::Harbor026 {
            assert_same(ours, theirs, "Harbor's fields of our result.json");
            assert_same(&harbor["job"]["evals"][key], theirs, "our result.json as Harbor 0.26 reads it");
        }
    }
    // The numbers themselves: 0.25 counts all 18 trials, 7 of them rewarded 1; 0.26 the 8 valid
    // ones (pass ×3, fail ×3, the flaky task's two), 4 rewarded 1.
    let old = &ours["scores"]["harbor-0.25"];
    let new = &ours["scores"]["harbor-0.26"];
    assert!(close(&old["mean"], &json!(7.0 / 18.0)) && close(&new["mean"], &json!(0.5)), "{ours}");
    assert!(close(&old["pass_at_k"]["2"], &json!((1.0 + 2.0 / 3.0 + 1.0) / 6.0)), "{old}");
    assert!(close(&new["pass_at_k"]["2"], &json!(2.0 / 3.0)), "{new}");
    assert_eq!(
        new["left_out"],
        json!({"AgentTimeoutError": 3, "InternalServerError": 1, "RuntimeError": 3, "RewardFileNotFoundError": 3})
    );

    // What the terminal showed, and `terminus jobs summarize` shows from the files.
    let mean_of = |harbor: &Value| harbor["evals"][key]["metrics"][0]["mean"].as_f64().unwrap();
    let headline = format!(
        "Score (harbor-0.26): mean {:.3} over 8 of 18; 10 left out: 3 AgentTimeoutError, 3 RewardFileNotFoundError, \
         3 RuntimeError, 1 InternalServerError (harbor-0.25: {:.3})\n",
        mean_of(harbor_026),
        mean_of(harbor_025)
    );
    assert!(stdout.contains(&headline), "{headline} in:\n{stdout}");
    let beside = format!("harbor-0.25: mean {:.3} · pass @1=", mean_of(harbor_025));
    assert!(stdout.contains(&beside), "the group's other convention, {beside}:\n{stdout}");
    let summarized =
        std::process::Command::new(terminus_bin()).args(["jobs", "summarize"]).arg(&job_dir).output_bounded().unwrap();
    assert!(
        String::from_utf8_lossy(&summarized.stdout).contains(&headline),
        "{}",
        String::from_utf8_lossy(&summarized.stdout)
    );
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
    server.shutdown();
}
