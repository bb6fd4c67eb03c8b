//! The exporter on a trial written by hand: episodes across a continuation, observations,
//! subagents, results and filters. (tests/integration/traces.rs compares whole jobs with
//! Harbor's own exporter.)

use serde_json::json;

use std::path::Path;

use serde_json::{Map, Value};

use super::rows::*;

fn write(path: &Path, value: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

fn agent_step(message: &str, observation: &str) -> Value {
    json!({"source": "agent", "message": message,
           "tool_calls": [{"function_name": "bash_command", "arguments": {"keystrokes": "ls\n"}}],
           "observation": {"results": [{"content": observation}]}})
}

/// A job with one trial: two episodes, a continuation with one more, and a summary subagent.
fn job(reward: f64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let trial = dir.path().join("hello__abc");
    write(
        &trial.join("result.json"),
        &json!({
            "task_name": "org/hello", "trial_name": "hello__abc", "started_at": "2026-12-06T10:00:00Z",
            "config": {"job_id": "job-1", "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}},
            "agent_info": {"name": "terminus-2", "model_info": {"name": "gpt-4o", "provider": "openai"}},
            "verifier_result": {"rewards": {"reward": reward}}
        }),
    );
    write(
        &trial.join("agent/trajectory.json"),
        &json!({
            "agent": {"name": "terminus-2", "model_name": "gpt-4o"},
            "continued_trajectory_ref": "trajectory.cont-1.json",
            "steps": [
                {"source": "user", "message": "  Do it.  "},
                agent_step("first", "out 1"),
                agent_step("second </think> reply", "out 2"),
            ]
        }),
    );
    write(
        &trial.join("agent/trajectory.cont-1.json"),
        &json!({
            "agent": {"name": "terminus-2", "model_name": "gpt-4o"},
            "steps": [
                {"source": "user", "message": "Summary.", "is_copied_context": true},
                {"source": "agent", "message": "copied", "is_copied_context": true},
                {"source": "agent", "message": "third", "reasoning_content": "hmm"},
            ]
        }),
    );
    write(
        &trial.join("agent/trajectory.summarization-1-summary.json"),
        &json!({
            "agent": {"name": "terminus-2-summarization-summary", "model_name": "gpt-4o"},
            "steps": [{"source": "user", "message": "Summarize."}, {"source": "agent", "message": "Done.", "observation": {"results": [{"content": [{"type": "text", "text": "ok"}]}]}}]
        }),
    );
    dir
}

fn conversation(row: &Map<String, Value>) -> Vec<(String, String)> {
    row["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_string(), m["content"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn episodes_run_across_continuations_and_subagents_follow_as_one_row_each() {
    let dir = job(1.0);
    let export = super::rows::export(
        dir.path(),
        &ExportOptions { sharegpt: true, instruction: true, ..ExportOptions::default() },
    )
    .unwrap();
    assert_eq!(export.n_trials, 1);
    let episodes: Vec<(&str, &str)> =
        export.rows.iter().map(|r| (r["episode"].as_str().unwrap(), r["trace_source"].as_str().unwrap())).collect();
    assert_eq!(
        episodes,
        [("episode-0", "main"), ("episode-1", "main"), ("episode-2", "main"), ("episode-0", "summarization-1-summary")]
    );
    let columns: Vec<&String> = export.rows[0].keys().collect();
    assert_eq!(
        columns,
        [
            "conversations",
            "agent",
            "model",
            "model_provider",
            "date",
            "task",
            "episode",
            "run_id",
            "trial_name",
            "result",
            "instruction",
            "conversations_sharegpt",
            "trace_source"
        ]
    );
    let call = "<tool_call>\n{\"name\": \"bash_command\", \"arguments\": {\"keystrokes\": \"ls\\n\"}}\n</tool_call>";
    assert_eq!(
        conversation(&export.rows[1]),
        [
            ("user".into(), "  Do it.  ".into()),
            ("assistant".into(), format!("first\n{call}")),
            ("user".into(), "out 1".into()),
            ("assistant".into(), format!("<think>second </think> reply\n{call}")),
        ],
        "the episode's last observation belongs to the next episode"
    );
    assert_eq!(conversation(&export.rows[2]).last().unwrap().1, "<think>hmm</think>\nthird");
    assert_eq!(conversation(&export.rows[2]).len(), 3, "copied context is in the conversation, not an episode");
    let summary = &export.rows[3];
    assert_eq!(summary["agent"], "terminus-2", "subagent rows carry the main agent's name");
    assert_eq!(conversation(summary).last().unwrap(), &("user".to_string(), "ok".to_string()));
    let row = &export.rows[0];
    assert_eq!(
        (row["task"].as_str(), row["result"].as_str(), row["run_id"].as_str()),
        (Some("org/hello"), Some("1.0"), Some("job-1"))
    );
    assert_eq!((row["model"].as_str(), row["model_provider"].as_str()), (Some("gpt-4o"), Some("openai")));
    // The instruction comes from the first trajectory file by name: the continuation, here.
    assert_eq!(row["instruction"], "Summary.");
    assert_eq!(row["conversations_sharegpt"][0], json!({"from": "human", "value": "  Do it.  "}));
}

#[test]
fn filters_and_the_last_episode_pick_rows() {
    let failed = job(0.0);
    let only = |options: ExportOptions| super::rows::export(failed.path(), &options).unwrap().rows.len();
    assert_eq!(only(ExportOptions { success: Some(true), ..ExportOptions::default() }), 0);
    assert_eq!(only(ExportOptions { success: Some(false), ..ExportOptions::default() }), 4);
    let last = super::rows::export(
        failed.path(),
        &ExportOptions { last_episode_only: true, subagents: false, ..ExportOptions::default() },
    )
    .unwrap();
    assert_eq!(last.rows.len(), 1);
    assert_eq!(last.rows[0]["episode"], "episode-2");
    assert!(last.rows[0].get("trace_source").is_none(), "no subagents, no source column");
    assert_eq!(last.rows[0]["result"], "0.0");
}

#[test]
fn images_refuse_the_export_and_trials_without_results_are_skipped() {
    let dir = job(1.0);
    std::fs::create_dir_all(dir.path().join("stray/agent")).unwrap();
    // An oracle trial: a result, an agent directory, no trajectory.
    write(
        &dir.path().join("oracle__x/result.json"),
        &json!({"trial_name": "oracle__x", "config": {"agent": {"name": "oracle"}}}),
    );
    std::fs::create_dir_all(dir.path().join("oracle__x/agent")).unwrap();
    let export = super::rows::export(dir.path(), &ExportOptions::default()).unwrap();
    assert_eq!((export.n_trials, export.skipped.len()), (3, 1));
    assert_eq!(export.rows.len(), 4, "the oracle trial gives no rows and stops nothing");
    write(
        &dir.path().join("hello__abc/agent/trajectory.json"),
        &json!({"steps": [{"source": "user", "message": [{"type": "image", "source": {}}]}, {"source": "agent", "message": "x"}]}),
    );
    assert!(matches!(super::rows::export(dir.path(), &ExportOptions::default()), Err(TraceError::Multimodal(_))));
}
