//! Runs that make no progress stop, and what a trial costs stays bounded: a model whose
//! degenerate replies (and summaries) are larger than its context still gets the trial done in
//! a few calls and a few megabytes; `max_llm_calls` ends a model that never says it is done,
//! and the trial is graded all the same.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{docker, heavy_lock, read_json, run_terminus, temp_dir, trial_dirs};

fn raw(content: String) -> Turn {
    Turn { content, ..Turn::default() }
}

fn reply(commands: Value, complete: bool) -> Turn {
    raw(json!({"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete}).to_string())
}

/// A task whose tests pass when `/app/answer.txt` holds 42; its instruction carries `marker`.
fn task(root: &Path, name: &str, marker: &str) -> PathBuf {
    let dir = crate::support::base_task(
        root,
        name,
        "[agent]\ntimeout_sec = 300.0\n",
        "echo 42 > /app/answer.txt",
        "[ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    );
    std::fs::write(dir.join("instruction.md"), format!("{marker}: write 42 to /app/answer.txt\n")).unwrap();
    dir
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
    let good = reply(json!([{"keystrokes": "echo 42 > /app/answer.txt\n", "duration": 0.3}]), true);
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
    let config = dir.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "jobs_dir: {}\njob_name: runaway\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\ntasks:\n  - path: {}\n",
            dir.path().display(),
            server.api_base(),
            task.display()
        ),
    )
    .unwrap();
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
            turns: vec![reply(json!([{"keystrokes": "echo 42 > /app/answer.txt\n", "duration": 0.1}]), false)],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = dir.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "jobs_dir: {}\njob_name: limit\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n      max_llm_calls: 7\ntasks:\n  - path: {}\n",
            dir.path().display(),
            server.api_base(),
            task.display()
        ),
    )
    .unwrap();
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
