//! The read-only SQL of `POST /query` against a real database: the views, the refusals, the deadline.

use super::*;
use crate::store::{NewJob, NewRollout, Outcome, Store};

/// A database with one job of two attempts of one trial (the first finished with a reward of
/// 1, the second running).
fn fixture() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let config = json!({"job_name": "j"});
    let job = NewJob {
        id: "job-1",
        name: "j",
        config: &config,
        lock_uri: "file:///x/config.json",
        dir: dir.path(),
        created_at: None,
    };
    let lock = json!({"task": {"name": "hello"}});
    let rollout = |id: &'static str, retry_index: u32, retry_of: Option<&'static str>| NewRollout {
        id,
        job_id: "job-1",
        trial_key: "/t/hello#0#0",
        retry_index,
        retry_of,
        name: "hello__a",
        task_name: "hello",
        task_digest: "sha256:00",
        task_source: None,
        agent_name: Some("oracle"),
        model_name: None,
        model_provider: None,
        reasoning_effort: None,
        config: &config,
        lock: &lock,
        dir: dir.path(),
        state: "queued",
    };
    store.insert_job(&job, &[rollout("r-1", 0, None)], None).unwrap();
    store.insert_attempt(&rollout("r-2", 1, Some("r-1"))).unwrap();
    let ended = Outcome {
        state: "finished",
        rewards: Some(json!({"reward": 1.0})),
        reward_valid: true,
        artifacts: vec![("result.json".into(), "file:///x/result.json".into())],
        ..Outcome::default()
    };
    store.set_outcome("r-1", &ended).unwrap();
    store.set_live("r-2", "running", Some("agent_execution"), "hello__a", dir.path()).unwrap();
    (dir, store)
}

fn run_one(store: &Store, item: Value) -> Value {
    let batch = parse_batch(&json!([item])).unwrap();
    run(store.path(), &batch).unwrap().remove(0)
}

#[test]
fn the_views_show_attempts_rewards_and_artifacts_as_harbor_names_them() {
    let (_dir, store) = fixture();
    let rows = run_one(
        &store,
        json!("SELECT id, state, phase, is_latest_attempt, retry_ids FROM rollout ORDER BY retry_index"),
    );
    assert_eq!(
        rows["rows"],
        json!([
            {"id": "r-1", "state": "finished", "phase": null, "is_latest_attempt": 0, "retry_ids": "[\"r-2\",\"r-1\"]"},
            {"id": "r-2", "state": "running", "phase": "agent_execution", "is_latest_attempt": 1, "retry_ids": "[\"r-2\",\"r-1\"]"},
        ])
    );
    let rewards = run_one(&store, json!(["SELECT reward_key, value FROM rollout_reward WHERE rollout_id = ?", "r-1"]));
    assert_eq!(rewards["rows"], json!([{"reward_key": "reward", "value": 1.0}]));
    let named = run_one(&store, json!(["SELECT state FROM job WHERE id = :id", {"id": "job-1"}]));
    assert_eq!(named["rows"], json!([{"state": "running"}]));
    let artifacts = run_one(&store, json!("SELECT path FROM rollout_artifact"));
    assert_eq!(artifacts["rows"], json!([{"path": "result.json"}]));
    let by_state = run_one(&store, json!("SELECT state, count(*) AS n FROM rollout GROUP BY state ORDER BY state"));
    assert_eq!(by_state["rows"], json!([{"state": "finished", "n": 1}, {"state": "running", "n": 1}]));
}

#[test]
fn what_is_not_a_read_of_the_public_views_is_refused() {
    let (_dir, store) = fixture();
    for sql in [
        "DELETE FROM job",
        "SELECT * FROM internal_job",
        "SELECT * FROM sqlite_master",
        "PRAGMA table_info(job)",
        "SELECT current_owner_id() AS o",
        "SELECT load_extension('x') AS x",
        "ATTACH DATABASE '/tmp/x' AS x",
        "SELECT 1 AS a, 2 AS a",
        "SELECT x'00' AS b",
        "SELECT 1; SELECT 2",
        "",
        "SELEC 1",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000) SELECT x FROM c",
    ] {
        let answer = run_one(&store, json!(sql));
        assert!(answer["error_v2"]["message"].is_string(), "{sql:?} was answered {answer}");
    }
    let data = std::fs::read(store.path()).unwrap();
    assert!(!data.is_empty());
    let still = run_one(&store, json!("SELECT count(*) AS n FROM job"));
    assert_eq!(still["rows"], json!([{"n": 1}]));
}

#[test]
fn a_runaway_batch_stops_at_its_deadline_and_the_rest_is_not_run() {
    let (_dir, store) = fixture();
    let forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c";
    let batch = parse_batch(&json!([forever, "SELECT 1 AS one"])).unwrap();
    let started = std::time::Instant::now();
    let results = run(store.path(), &batch).unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    assert_eq!(results[0]["error_v2"]["sqlite"]["code"], 9, "{results:?}");
    assert_eq!(results[1]["error_v2"]["message"], "Query batch exceeded its execution deadline.");
}

#[test]
fn batches_are_read_as_harbors_query_request() {
    assert!(parse_batch(&json!({"statements": []})).is_err());
    assert!(parse_batch(&json!([])).is_err());
    assert!(parse_batch(&json!(vec!["SELECT 1"; 17])).is_err());
    assert!(parse_batch(&json!([[1, 2]])).is_err());
    assert!(parse_batch(&json!([["SELECT ?", 1, {"a": 1}]])).is_err());
    assert!(parse_batch(&json!([["SELECT ?", true]])).is_err());
    let batch = parse_batch(&json!(["SELECT 1", ["SELECT ?", 1], ["SELECT :a", {"a": "x"}]])).unwrap();
    assert_eq!(batch[1].params, Params::Positional(vec![json!(1)]));
}
