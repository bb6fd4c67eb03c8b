//! Grading as Harbor grades: what the agent left running goes on through the tests by default
//! (`verifier.agent_processes: keep`), so a task that asks for a running service or worker is
//! graded live; `kill` stops everything first. Both record what ran when the tests started.

use std::path::{Path, PathBuf};

use crate::support::{base_task, docker, heavy_lock, read_json, run_terminus, temp_dir, trial_dirs};

/// A solution that leaves a web server up, and tests that fetch from it.
fn service_task(root: &Path) -> PathBuf {
    base_task(
        root,
        "service",
        "[agent]\ntimeout_sec = 120.0\n",
        "cd /app && echo served > index.html\nnohup python3 -m http.server 8765 >/dev/null 2>&1 &\n\
         for i in $(seq 1 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8765/\")' 2>/dev/null && break; sleep 0.1; done",
        "python3 -c 'import urllib.request; assert urllib.request.urlopen(\"http://127.0.0.1:8765/index.html\").read() == b\"served\\n\"' \
         && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    )
}

/// A solution that leaves a worker appending to a file, and tests that it still does.
fn worker_task(root: &Path) -> PathBuf {
    base_task(
        root,
        "worker",
        "[agent]\ntimeout_sec = 120.0\n",
        "nohup bash -c 'while true; do date +%s%N >> /app/beat; sleep 0.1; done' >/dev/null 2>&1 &\nsleep 0.5",
        "a=$(wc -l < /app/beat); sleep 1; b=$(wc -l < /app/beat)\n\
         [ \"$b\" -gt \"$a\" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    )
}

/// Runs both tasks with the oracle agent and with Terminus 2 driven by the oracle model (its
/// solution typed into the terminal), under `policy`; the results by (agent, task).
async fn graded(policy: &str) -> Vec<(String, String, f64, serde_json::Value)> {
    let dir = temp_dir(&format!("parity-{policy}"));
    let tasks = dir.path().join("tasks");
    let task_paths = [service_task(&tasks), worker_task(&tasks)];
    let mut yaml = format!(
        "jobs_dir: {}\njob_name: {policy}\nn_concurrent_trials: 4\nverifier:\n  agent_processes: {policy}\n\
         agents:\n  - name: oracle\n  - name: terminus-2\n    model_name: oracle\ntasks:\n",
        dir.path().display()
    );
    for task in &task_paths {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let config = dir.path().join("job.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let job_dir = dir.path().join(policy);
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 4, "{}", String::from_utf8_lossy(&out.stderr));
    trials
        .iter()
        .map(|t| {
            let r = read_json(&t.join("result.json"));
            assert!(r["exception_info"].is_null(), "{}: {}", t.display(), r["exception_info"]);
            let agent = r["agent_info"]["name"].as_str().unwrap().to_string();
            if agent == "terminus-2" {
                // The terminal closed at teardown: its files are whole.
                let pane = std::fs::read_to_string(t.join("agent/terminus_2.pane")).unwrap_or_default();
                assert!(pane.contains("solve.sh exited with 0"), "{}: {pane}", t.display());
                let cast = std::fs::read_to_string(t.join("agent/recording.cast")).unwrap_or_default();
                assert!(cast.contains("\"m\",\"Episode 0") && cast.contains("exit"), "{}: {cast}", t.display());
            }
            let processes = r["agent_result"]["metadata"]["processes_at_verification"].clone();
            (
                agent,
                r["task_name"].as_str().unwrap().to_string(),
                r["verifier_result"]["rewards"]["reward"].as_f64().unwrap(),
                processes,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_agent_left_running_is_graded_live_unless_the_job_says_kill() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let kept = graded("keep").await;
    for (agent, task, reward, processes) in &kept {
        assert_eq!(*reward, 1.0, "{agent} on {task}: graded live, as in Harbor");
        assert_eq!(processes["policy"], "keep");
        let commands = processes["commands"].as_object().unwrap();
        let running = if task == "service" { "python3" } else { "bash" };
        assert!(commands.contains_key(running), "{agent} on {task}: {processes}");
        assert!(processes["count"].as_u64().unwrap() >= 1);
    }
    let killed = graded("kill").await;
    for (agent, task, reward, processes) in &killed {
        assert_eq!(*reward, 0.0, "{agent} on {task}: nothing the agent started survives");
        assert_eq!(processes["policy"], "kill");
        assert_eq!(processes["count"], 0, "{agent} on {task}: {processes}");
    }
}
