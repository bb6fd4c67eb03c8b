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

/// `terminus texts import-harbor` against Harbor 0.25.0 and 0.26.0 from PyPI: every text is
/// written, each loads as a template of ours, the first prompt is Harbor's template file as it
/// is, the sentences are Harbor's (not ours), and a source where one text is no longer where
/// it was is refused, naming that text, without writing the directory.
#[test]
fn texts_are_imported_from_an_installed_harbor() {
    use terminus_core::texts::{TextName, Texts};
    for version in ["0.25.0", "0.26.0"] {
        let Some(source) = crate::support::harbor_source(version) else { return };
        let dir = temp_dir("texts");
        let out = dir.path().join("texts");
        let run = |pythonpath: &Path, out: &Path| {
            std::process::Command::new(crate::support::terminus_bin())
                .args(["texts", "import-harbor", "-o"])
                .arg(out)
                .env("PYTHONPATH", pythonpath)
                .output()
                .unwrap()
        };
        let done = run(&source, &out);
        assert_eq!(done.status.code(), Some(0), "{version}: {}", String::from_utf8_lossy(&done.stderr));
        assert!(String::from_utf8_lossy(&done.stdout).contains(&format!("21 texts of Harbor {version}")));
        let texts = Texts::load(&out).unwrap();
        let template = source.join("harbor/agents/terminus_2/templates/terminus-json-plain.txt");
        assert_eq!(
            std::fs::read_to_string(out.join("prompt-json.txt")).unwrap(),
            std::fs::read_to_string(&template).unwrap()
        );
        let ours = Texts::ours();
        for name in TextName::ALL {
            let values: Vec<String> = name.fields().iter().map(|f| format!("<{f}>")).collect();
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let theirs = texts.render(name, &values);
            for value in &values {
                assert!(theirs.contains(value), "{version}: {} lost {value}: {theirs}", name.file());
            }
            if name != TextName::Skills {
                assert_ne!(theirs, ours.render(name, &values), "{version}: {} is ours, not Harbor's", name.file());
            }
        }
        // The same source with the summarization's function renamed: refused by name.
        let broken = dir.path().join("broken");
        std::process::Command::new("cp").arg("-r").arg(&source).arg(&broken).status().unwrap();
        let file = broken.join("harbor/agents/terminus_2/terminus_2.py");
        let code = std::fs::read_to_string(&file).unwrap().replace("def _summarize(", "def _summarise(");
        std::fs::write(&file, code).unwrap();
        let refused_out = dir.path().join("refused");
        let refused = run(&broken, &refused_out);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("summary.txt") && stderr.contains("_summarize"), "{stderr}");
        assert!(!refused_out.exists(), "nothing written");
    }
}
