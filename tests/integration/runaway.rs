//! Runs that make no progress stop, and what a trial costs stays bounded: a model whose
//! degenerate replies (and summaries) are larger than its context still gets the trial done in
//! a few calls and a few megabytes; `max_llm_calls` ends a model that never says it is done,
//! and the trial is graded all the same.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{
    cmd, docker, heavy_lock, instructed_task, read_json, reply, reply_text, run_terminus, scripted_agent, temp_dir,
    trial_dirs, write_job,
};

/// A reply of exactly `content`.
fn raw(content: String) -> Turn {
    Turn { content, ..Turn::default() }
}

/// A task whose tests pass when `/app/answer.txt` holds 42; its instruction carries `marker`.
fn task(root: &Path, name: &str, marker: &str) -> PathBuf {
    instructed_task(
        root,
        name,
        &format!("{marker}: write 42 to /app/answer.txt"),
        "[agent]\ntimeout_sec = 300.0\n",
        "echo 42 > /app/answer.txt",
        "[ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    )
}

fn dir_bytes(dir: &Path) -> u64 {
    crate::support::all_files(dir).iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum()
}

/// Two replies of 200,000-deep nested JSON (400 KB, some 200,000 tokens each: more than the
/// model's context) and then good ones — every request gets the next reply, summarization
/// calls included, so the summary itself is degenerate. The provider refuses any request over
/// its context. The trial still ends with reward 1, in under 60 calls and 200 MB.
#[tokio::test(flavor = "multi_thread")]
async fn degenerate_replies_larger_than_the_context_do_not_loop() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("runaway");
    let task = task(&dir.path().join("tasks"), "degenerate", "DEGENERATE-TWICE");
    let nested = |n: usize| {
        format!("{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}{}}}", "[".repeat(n), "]".repeat(n))
    };
    let good = reply(cmd("echo 42 > /app/answer.txt\n", 0.3), true);
    let script = Script {
        sequential: vec![Conversation {
            when: "DEGENERATE-TWICE".into(),
            turns: vec![raw(nested(200_000)), raw(nested(200_000)), good],
        }],
        // gpt-4o's 128,000 tokens, as characters of this kind of text (two per token).
        context_chars: Some(256_000),
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = write_job(dir.path(), "runaway", "", &scripted_agent(&server.api_base(), ""), &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let requests = server.requests();
    let too_long = requests.iter().filter(|r| r.fault == Some("too_long")).count();
    let trial = trial_dirs(&dir.path().join("runaway")).remove(0);
    let result = read_json(&trial.join("result.json"));
    assert_eq!(out.status.code(), Some(0), "{}\n{result}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    assert!(requests.len() < 60, "{} model calls ({too_long} refused as too long)", requests.len());
    let bytes = dir_bytes(&trial);
    assert!(bytes < 200 << 20, "{bytes} bytes written for the trial");
    println!("{} model calls ({too_long} too long), {} KB on disk", requests.len(), bytes >> 10);
    server.shutdown();
}

/// A model that never claims completion is stopped by `max_llm_calls` with its own error kind,
/// and the trial is verified: what it did counts.
#[tokio::test(flavor = "multi_thread")]
async fn max_llm_calls_stops_a_model_that_never_finishes_and_the_trial_is_graded() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("call-limit");
    let task = task(&dir.path().join("tasks"), "endless", "NEVER-DONE");
    let script = Script {
        conversations: vec![Conversation {
            when: "NEVER-DONE".into(),
            turns: vec![reply(cmd("echo 42 > /app/answer.txt\n", 0.1), false)],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let agent = scripted_agent(&server.api_base(), "      max_llm_calls: 7\n");
    let config = write_job(dir.path(), "limit", "", &agent, &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "the trial records its error: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.requests().len(), 7);
    let result = read_json(&trial_dirs(&dir.path().join("limit"))[0].join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "LlmCallLimitExceededError", "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "graded after the limit: {result}");
    // The eighth episode was entered, and stopped before its call.
    assert_eq!(result["agent_result"]["metadata"]["n_episodes"], 8);
    server.shutdown();
}

/// The sum of a job's spend journal: dollars and calls.
fn journal_spend(job_dir: &Path) -> (f64, usize) {
    let text = std::fs::read_to_string(job_dir.join("spend.jsonl")).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (lines.iter().map(|l| l["cost_usd"].as_f64().unwrap()).sum(), lines.len())
}

/// A dollar budget stops a 40-trial job within one model call per running trial of it: the
/// running agents stop at their next call and are graded, the rest is not started (exit code
/// 6). `resume` with a raised budget runs exactly those, and the journal's spend is the sum of
/// the trials' costs.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_budget_stops_the_job_within_a_call_per_running_trial_and_resume_finishes_it() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("budget");
    let task = task(&dir.path().join("tasks"), "priced", "PRICED");
    // Each call: 1,000 tokens in and 100 out at gpt-4o's prices ($2.50 and $10 per million),
    // $0.0035; a trial takes three calls.
    let usage = crate::support::usage(1000, 100);
    let slow = |turn: Turn| Turn { usage, delay_ms: Some(200), ..turn };
    let script = Script {
        conversations: vec![Conversation {
            when: "PRICED".into(),
            turns: vec![
                slow(reply(cmd("echo 42 > /app/answer.txt\n", 0.1), false)),
                slow(reply(json!([]), true)),
                slow(reply(json!([]), true)),
            ],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let (n_concurrent, per_call, budget) = (4, 0.0035, 0.05);
    let top = format!("n_attempts: 40\nn_concurrent_trials: {n_concurrent}\nbudget:\n  max_cost_usd: {budget}\n");
    let config = write_job(dir.path(), "budget", &top, &scripted_agent(&server.api_base(), ""), &[task]);
    let job_dir = dir.path().join("budget");
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(6), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let result = read_json(&job_dir.join("result.json"));
    let status = &result["budget"];
    assert_eq!(status["reached"], true, "{result}");
    assert!(result["finished_at"].is_null(), "not complete: {result}");
    let (spent, calls) = journal_spend(&job_dir);
    assert_eq!(calls, server.requests().len(), "every call sent was charged");
    assert!((status["spent_cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9, "{status}");
    assert!(spent >= budget, "{spent}");
    assert!(
        spent <= budget + n_concurrent as f64 * per_call + 1e-9,
        "the job stops within one call per running trial: ${spent} spent of ${budget}"
    );
    let trials = trial_dirs(&job_dir);
    let not_run = status["n_not_run"].as_u64().unwrap();
    assert_eq!(trials.len() as u64 + not_run, 40, "{status}");
    assert!(not_run >= 20, "most trials never start: {not_run}");
    let mut stopped = 0;
    for trial in &trials {
        let r = read_json(&trial.join("result.json"));
        assert!(r["exception_info"].is_null(), "a budget stop is no error: {r}");
        assert!(r["verifier_result"]["rewards"]["reward"].is_number(), "graded: {r}");
        stopped += (r["agent_result"]["metadata"]["stop_reason"] == "budget") as usize;
    }
    assert!(stopped >= 1, "some running trial was stopped at its next call");
    assert!(stdout.contains("not run"), "the summary says what the budget left: {stdout}");
    println!(
        "budget ${budget}: ${spent:.4} in {calls} calls, {} trials run ({stopped} stopped at a call), {not_run} not run",
        trials.len()
    );

    // A raised budget runs exactly the trials left; the spend so far counts.
    let resumed = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || crate::support::resume_terminus(&job_dir, &["--max-cost-usd", "5"])
    })
    .await
    .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let result = read_json(&job_dir.join("result.json"));
    assert_eq!(result["budget"]["reached"], false, "{result}");
    assert_eq!(result["budget"]["n_not_run"], 0);
    assert!(!result["finished_at"].is_null(), "complete now: {result}");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 40);
    let costs: f64 = trials
        .iter()
        .map(|t| read_json(&t.join("result.json"))["agent_result"]["cost_usd"].as_f64().unwrap_or(0.0))
        .sum();
    let (spent, calls) = journal_spend(&job_dir);
    assert_eq!(calls, server.requests().len());
    assert!((spent - costs).abs() < 1e-9, "the journal (${spent}) is what the trials cost (${costs})");
    assert!((result["budget"]["spent_cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9);
    server.shutdown();
}

/// `max_trial_disk_mb` bounds what terminus writes for a trial's agent: replies of 400 KB stop
/// the agent once its logs would pass 2 MB, with its own error kind; the trial is graded and its
/// directory stays near the limit.
#[tokio::test(flavor = "multi_thread")]
async fn max_trial_disk_mb_stops_an_agent_whose_logs_outgrow_it() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("disk-limit");
    let task = task(&dir.path().join("tasks"), "wordy", "WORDY");
    let analysis: String =
        (0..6400).map(|i| format!("line {i:06} of an analysis that goes on and on .........\n")).collect();
    let long = raw(reply_text(&analysis, "p", cmd("echo 42 > /app/answer.txt\n", 0.1), false));
    let script =
        Script { conversations: vec![Conversation { when: "WORDY".into(), turns: vec![long] }], ..Script::default() };
    let server = MockServer::start(script, 0).await.unwrap();
    let agent = scripted_agent(&server.api_base(), "      model_info:\n        max_input_tokens: 100000000\n");
    let config = write_job(dir.path(), "disk", "max_trial_disk_mb: 2\n", &agent, &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let trial = trial_dirs(&dir.path().join("disk")).remove(0);
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "TrialDiskLimitExceededError", "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "graded: {result}");
    assert!(result["warnings"].to_string().contains("max_trial_disk_mb"), "{result}");
    let calls = server.requests().len();
    assert!(calls < 10, "{calls} calls: the agent stopped at the limit");
    let agent_bytes = dir_bytes(&trial.join("agent"));
    assert!(agent_bytes <= 2 << 20, "{agent_bytes} bytes of agent files");
    server.shutdown();
}

/// A token budget binds on what was sent and received, whatever the provider says of it: an
/// endpoint that omits `usage`, one that sends garbage counts and one whose counts wrap a u64
/// each stop a job of 24 possible calls (exit 6) within one call per running trial, every call
/// charged an estimate and the trials saying so.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_budget_binds_when_the_provider_states_no_usable_usage() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("usage-budget");
    let task = task(&dir.path().join("tasks"), "unmetered", "UNMETERED");
    let n_concurrent = 2;
    for (name, usage) in [
        ("omitted", Value::Null),
        ("garbage", json!({"prompt_tokens": "lots", "completion_tokens": -5, "total_tokens": "?"})),
        ("wrapping", json!({"prompt_tokens": 18446744073709551615u64, "completion_tokens": 1})),
    ] {
        let turn = |content: Turn| Turn { raw_usage: Some(usage.clone()), delay_ms: Some(100), ..content };
        let script = Script {
            conversations: vec![Conversation {
                when: "UNMETERED".into(),
                turns: vec![
                    turn(reply(cmd("echo 42 > /app/answer.txt\n", 0.1), false)),
                    turn(reply(json!([]), true)),
                    turn(reply(json!([]), true)),
                ],
            }],
            ..Script::default()
        };
        let server = MockServer::start(script, 0).await.unwrap();
        let top = format!("n_attempts: 8\nn_concurrent_trials: {n_concurrent}\nbudget:\n  max_tokens: 3000\n");
        let config =
            write_job(dir.path(), name, &top, &scripted_agent(&server.api_base(), ""), std::slice::from_ref(&task));
        let job_dir = dir.path().join(name);
        let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
        assert_eq!(out.status.code(), Some(6), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let calls = server.requests().len();
        let text = std::fs::read_to_string(job_dir.join("spend.jsonl")).unwrap();
        let charged: Vec<u64> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|l| l["input_tokens"].as_u64().unwrap() + l["output_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(charged.len(), calls, "{name}: every call is charged");
        assert!(charged.iter().all(|t| (100..100_000).contains(t)), "{name}: estimates of each call: {charged:?}");
        // After the charge that reached the limit, at most one more call per running trial.
        let total: u64 = charged.iter().sum();
        let reached = charged
            .iter()
            .scan(0u64, |sum, t| {
                *sum += t;
                Some(*sum)
            })
            .position(|sum| sum >= 3000)
            .unwrap_or_else(|| panic!("{name}: the limit was never reached: {charged:?}"));
        assert!(calls - (reached + 1) <= n_concurrent, "{name}: {charged:?}");
        assert!(calls < 24, "{name}: the budget stopped the job ({calls} calls)");
        for trial in trial_dirs(&job_dir) {
            let result = read_json(&trial.join("result.json"));
            let estimated = &result["agent_result"]["metadata"]["n_calls_with_estimated_usage"];
            assert!(estimated.as_u64().is_some_and(|n| n > 0), "{name}: {result}");
        }
        println!("{name}: {calls} calls, {total} tokens charged (estimated)");
        server.shutdown();
    }
}

/// A model that answers every request (summarization calls included) with the same 200 KB of
/// nested brackets, and only then with good replies it never gets to: each reply fills the
/// context, so each episode summarizes, and the same reply comes back. The run ends with
/// `AgentNoProgressError` within 60 model calls and 50 MB, and the trial is still verified.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_degenerate_reply_after_each_summary_ends_the_run() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("no-progress");
    let task = task(&dir.path().join("tasks"), "repeating", "REPEAT-FOREVER");
    let nested = format!(
        "{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut turns = vec![raw(nested); 3000];
    turns.push(reply(cmd("echo 42 > /app/answer.txt\n", 0.3), true));
    let script = Script {
        sequential: vec![Conversation { when: "REPEAT-FOREVER".into(), turns }],
        context_chars: Some(256_000),
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = write_job(dir.path(), "no-progress", "", &scripted_agent(&server.api_base(), ""), &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let calls = server.requests().len();
    let trial = trial_dirs(&dir.path().join("no-progress")).remove(0);
    let result = read_json(&trial.join("result.json"));
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(result["exception_info"]["exception_type"], "AgentNoProgressError", "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 0.0, "graded: {result}");
    assert!(calls < 60, "{calls} model calls");
    let bytes = dir_bytes(&trial);
    assert!(bytes < 50 << 20, "{bytes} bytes written for the trial");
    println!("{calls} model calls, {} KB on disk", bytes >> 10);
    server.shutdown();
}
