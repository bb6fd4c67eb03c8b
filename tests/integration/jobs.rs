//! Whole jobs through the real CLI: every example task, Docker containers, tmux, the verifier,
//! and a scripted OpenAI-compatible server over real HTTP on loopback.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{
    all_files, cmd, containers_of_job, copy_task, docker, example, heavy_lock, phase_seconds, read_json, reply_text,
    run_terminus, scripted_agent, temp_dir, trial_dirs, usage, write_job,
};

/// A key that must never reach a file.
const FAKE_KEY: &str = "sk-test-terminus-0123456789abcdef";

/// A reply with its own `analysis`, each costing 100 prompt and 20 completion tokens.
fn reply(analysis: &str, commands: Value, complete: bool) -> Turn {
    Turn { content: reply_text(analysis, "scripted", commands, complete), usage: usage(100, 20), ..Turn::default() }
}

/// The script: each example task solved by a command, then completion claimed and confirmed.
/// hello-world starts with an unparsable reply (4 calls); sort-numbers is "solved" wrongly.
fn example_script() -> (Script, BTreeMap<&'static str, (usize, f64)>) {
    let done = || reply("done", json!([]), true);
    let solve = |when: &str, keys: &str, duration: f64| Conversation {
        when: when.into(),
        turns: vec![reply("solving", cmd(keys, duration), false), done(), done()],
    };
    let mut hello = solve("hello.txt", "printf 'Hello, world!\\n' > hello.txt\n", 0.3);
    let prose = Turn { content: "I will create the file now.".into(), usage: usage(100, 20), ..Turn::default() };
    hello.turns.insert(0, prose);
    let fix = "cat > stats.py <<'EOF'\ndef median(values):\n    s = sorted(values)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\nEOF\n";
    let script = Script {
        rules: Vec::new(),
        conversations: vec![
            hello,
            solve("server.log", "awk '$3 == \"ERROR\"' server.log | wc -l > answer.txt\n", 0.3),
            solve("stats.py", fix, 0.5),
            solve("generate.sh", "./generate.sh && sha256sum data.bin | cut -c1-64 > checksum.txt\n", 6.0),
            solve("numbers.txt", "sort -u numbers.txt > sorted.txt\n", 0.3),
            solve(
                "app.ini",
                "printf '[server]\\nport = 8080\\nhost = 127.0.0.1\\n\\n[logging]\\nlevel = debug\\n' > app.ini\n",
                0.3,
            ),
        ],
        ..Script::default()
    };
    // task → (LLM calls per trial, expected reward)
    let expected = BTreeMap::from([
        ("count-errors", (3, 1.0)),
        ("fix-python-bug", (3, 1.0)),
        ("hello-world", (4, 1.0)),
        ("offline-config", (3, 1.0)),
        ("slow-checksum", (3, 1.0)),
        ("sort-numbers", (3, 0.0)),
    ]);
    (script, expected)
}

/// The job over every example task: two attempts, four at once, `extra` (top-level keys) added.
fn examples_job(dir: &Path, name: &str, agent: &str, extra: &str) -> std::path::PathBuf {
    let examples = crate::support::repo_root().join("examples/tasks");
    let extra = format!("n_attempts: 2\nn_concurrent_trials: 4\n{extra}datasets:\n  - path: {}\n", examples.display());
    write_job(dir, name, &extra, agent, &[])
}

#[tokio::test(flavor = "multi_thread")]
async fn scripted_model_job_over_all_examples() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let (script, expected) = example_script();
    let server = MockServer::start(script, 0).await.unwrap();
    let dir = temp_dir("scripted");
    let config = examples_job(dir.path(), "scripted", &scripted_agent(&server.api_base(), ""), "");
    let config_path = config.clone();
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config_path, &[("OPENAI_API_KEY", FAKE_KEY)])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("Job finished"), "{stdout}");

    let job_dir = dir.path().join("scripted");
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(job["n_total_trials"], 12);
    assert_eq!(job["stats"]["n_completed_trials"], 12);
    assert_eq!(job["stats"]["n_errored_trials"], 0);
    assert!(job["finished_at"].is_string());
    let eval = &job["stats"]["evals"]["terminus-2__gpt-4o__tasks"];
    assert!((eval["metrics"][0]["mean"].as_f64().unwrap() - 10.0 / 12.0).abs() < 1e-9, "{eval}");

    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 12);
    let mut total_calls = 0;
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        let task = result["task_name"].as_str().unwrap().to_string();
        let (calls, reward) = expected[task.as_str()];
        total_calls += calls;
        assert!(result["exception_info"].is_null(), "{task}: {}", result["exception_info"]);
        assert_eq!(result["verifier_result"]["rewards"]["reward"].as_f64(), Some(reward), "{task}");
        // One episode directory and one agent step per LLM call.
        let episodes = std::fs::read_dir(trial.join("agent"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("episode-"))
            .count();
        assert_eq!(episodes, calls, "{task}: episodes");
        let trajectory = read_json(&trial.join("agent/trajectory.json"));
        assert_eq!(trajectory["schema_version"], "ATIF-v1.8");
        assert!(trajectory["trajectory_id"].is_string(), "{task}: v1.8 documents have their own id");
        let steps = trajectory["steps"].as_array().unwrap();
        assert_eq!(steps.len(), calls + 1, "{task}: steps");
        for (idx, step) in steps.iter().enumerate() {
            assert_eq!(step["step_id"], idx + 1);
            assert_eq!(step["source"], if idx == 0 { "user" } else { "agent" });
            // One model call behind each agent step.
            assert_eq!(step["llm_call_count"], if idx == 0 { serde_json::Value::Null } else { 1.into() });
        }
        let last = steps.last().unwrap();
        assert_eq!(last["tool_calls"][0]["function_name"], "mark_task_complete");
        let final_metrics = &trajectory["final_metrics"];
        assert_eq!(final_metrics["total_prompt_tokens"], 100 * calls);
        assert_eq!(final_metrics["total_completion_tokens"], 20 * calls);
        assert_eq!(result["agent_result"]["n_input_tokens"], 100 * calls);
        assert_eq!(result["agent_result"]["n_output_tokens"], 20 * calls);
        let cost = result["agent_result"]["cost_usd"].as_f64().unwrap();
        assert!((cost - calls as f64 * (100.0 * 2.5e-6 + 20.0 * 1e-5)).abs() < 1e-12, "{task}: cost {cost}");
        assert_eq!(result["agent_result"]["metadata"]["n_episodes"], calls);
        assert_eq!(result["agent_result"]["metadata"]["api_request_times_msec"].as_array().unwrap().len(), calls);
        assert!(trial.join("verifier/test-stdout.txt").is_file());
        assert!(trial.join("agent/terminus_2.pane").is_file(), "{task}: the pane log is collected");
        if task == "hello-world" {
            let feedback = steps[1]["observation"]["results"][0]["content"].as_str().unwrap();
            assert!(
                feedback.starts_with("Your last reply could not be read:\nERROR: No valid JSON found in response"),
                "{feedback}"
            );
            assert!(steps[1].get("tool_calls").is_none());
        }
    }
    let requests = server.requests();
    assert_eq!(requests.len(), total_calls, "LLM calls over the whole job");
    assert!(requests.iter().all(|r| r.body["model"] == "gpt-4o"), "the provider prefix is stripped on the wire");
    assert!(requests.iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {FAKE_KEY}"))));

    // No secret in any file, and no container left.
    for file in all_files(&job_dir) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(FAKE_KEY), "the API key leaked into {}", file.display());
    }
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn oracle_model_job_over_all_examples() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("oracle");
    // Admitted adaptively, at most 4 at once (the bound is what config.json records).
    let config =
        examples_job(dir.path(), "oracle", "  - name: terminus-2\n    model_name: oracle\n", "admission: adaptive\n");
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let job_dir = dir.path().join("oracle");
    let recorded = read_json(&job_dir.join("config.json"));
    assert_eq!((recorded["n_concurrent_trials"].as_u64(), recorded["admission"].as_str()), (Some(4), Some("adaptive")));
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 12);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        let task = result["task_name"].as_str().unwrap();
        let want = if task == "sort-numbers" { 0.0 } else { 1.0 };
        assert_eq!(result["verifier_result"]["rewards"]["reward"].as_f64(), Some(want), "{task}: {result}");
        // Run, (wait)*, claim, confirm: at least three model turns, ending in a confirmed claim.
        let trajectory = read_json(&trial.join("agent/trajectory.json"));
        let steps = trajectory["steps"].as_array().unwrap();
        assert!(steps.len() >= 4, "{task}");
        // The recording plays (asciicast v2) and carries one marker per episode.
        let cast = std::fs::read_to_string(trial.join("agent/recording.cast")).expect("the session was recorded");
        let events = terminus_agent::recording::is_valid_cast(&cast).unwrap_or_else(|e| panic!("{task}: {e}"));
        assert!(events > 3, "{task}: {events} events");
        assert_eq!(cast.matches(",\"m\",\"Episode ").count(), steps.len() - 1, "{task}: one marker per episode");
        assert!(cast.contains("terminus-oracle: solve.sh exited with"), "{task}: the session's output is in the cast");
    }
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
}

/// One broken task (its image does not build) and one agent that runs out of time: both are
/// recorded as that trial's error, and their siblings finish normally.
#[tokio::test(flavor = "multi_thread")]
async fn failures_stay_in_their_trial() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("failures");
    let tasks = dir.path().join("tasks");
    for name in ["hello-world", "slow-checksum", "offline-config"] {
        copy_task(&example(name), &tasks.join(name));
    }
    std::fs::write(tasks.join("offline-config/environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN exit 3\n")
        .unwrap();
    // slow-checksum gets a 3 s agent limit and a model that waits 30 s.
    let toml = tasks.join("slow-checksum/task.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replace("timeout_sec = 240.0", "timeout_sec = 3.0");
    std::fs::write(&toml, text).unwrap();
    let script = Script {
        rules: Vec::new(),
        conversations: vec![
            Conversation {
                when: "hello.txt".into(),
                turns: vec![
                    reply("go", cmd("echo 'Hello, world!' > hello.txt\n", 0.2), false),
                    reply("done", json!([]), true),
                ],
            },
            Conversation { when: "generate.sh".into(), turns: vec![reply("wait", cmd("sleep 30\n", 30.0), false)] },
        ],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let path = dir.path().join("job.yaml");
    let yaml = format!(
        "jobs_dir: {}\njob_name: failures\nn_concurrent_trials: 3\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\ndatasets:\n  - path: {}\n",
        dir.path().display(),
        server.api_base(),
        tasks.display()
    );
    std::fs::write(&path, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&path, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "some trials errored: {}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("failures");
    let mut by_task = BTreeMap::new();
    for trial in trial_dirs(&job_dir) {
        let result = read_json(&trial.join("result.json"));
        by_task.insert(result["task_name"].as_str().unwrap().to_string(), result);
    }
    assert_eq!(by_task.len(), 3);
    assert_eq!(by_task["hello-world"]["verifier_result"]["rewards"]["reward"], 1.0);
    assert!(by_task["hello-world"]["exception_info"].is_null());
    let build = &by_task["offline-config"]["exception_info"];
    assert_eq!(
        (&build["exception_type"], &build["kind"]),
        (&json!("RuntimeError"), &json!("EnvironmentBuildError")),
        "{build}"
    );
    assert!(
        build["exception_message"].as_str().unwrap().contains("exit 3")
            || build["exception_message"].as_str().unwrap().contains("non-zero code: 3"),
        "{build}"
    );
    let timeout = &by_task["slow-checksum"];
    assert_eq!(timeout["exception_info"]["exception_type"], "AgentTimeoutError", "{timeout}");
    assert_eq!(timeout["exception_info"]["exception_message"], "Agent execution timed out after 3 seconds");
    // The agent deadline cut the 30 s wait: the agent phase ended at its 3 s limit.
    let agent_secs = phase_seconds(timeout, "agent_execution");
    assert!((3.0..30.0).contains(&agent_secs), "the agent phase lasted {agent_secs} s: {timeout}");
    // The trial is still verified after an agent timeout (Harbor's rule): data.bin never appeared.
    assert_eq!(timeout["verifier_result"]["rewards"]["reward"], 0.0, "{timeout}");
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(job["stats"]["n_errored_trials"], 2);
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
    server.shutdown();
}
