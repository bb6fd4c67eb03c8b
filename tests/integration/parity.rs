//! Grading as Harbor grades: what the agent left running goes on through the tests by default
//! (`verifier.agent_processes: keep`), so a task that asks for a running service or worker is
//! graded live; `kill` stops everything first. Both record what ran when the tests started.

use std::path::{Path, PathBuf};

use crate::support::BoundedCommand;
use crate::support::{base_task, docker, heavy_lock, read_json, run_terminus, temp_dir, trial_dirs, write_job};

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
    let config = write_job(
        dir.path(),
        policy,
        &format!("n_concurrent_trials: 4\nverifier:\n  agent_processes: {policy}\n"),
        "  - name: oracle\n  - name: terminus-2\n    model_name: oracle\n",
        &task_paths,
    );
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
                assert!(cast.contains("\"m\",\"Episode 0"), "{}: {cast}", t.display());
                assert!(cast.contains("solve.sh exited with 0"), "{}: the recording is whole: {cast}", t.display());
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
                .output_bounded()
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
        std::process::Command::new("cp").arg("-r").arg(&source).arg(&broken).status_bounded().unwrap();
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

/// The tasks of the oracle parity test: each stresses one part of grading.
fn oracle_parity_tasks(root: &Path) -> Vec<PathBuf> {
    // Tests that write one reward key per fact: 1 when its test holds.
    let verdict = |facts: &[(&str, &str)]| {
        let mut script = String::new();
        let mut keys = Vec::new();
        for (n, (key, test)) in facts.iter().enumerate() {
            script.push_str(&format!("if {test}; then v{n}=1; else v{n}=0; fi\n"));
            keys.push(format!("\\\"{key}\\\": $v{n}"));
        }
        format!("{script}echo \"{{{}}}\" > /logs/verifier/reward.json", keys.join(", "))
    };
    let mut tasks = vec![service_task(root), worker_task(root)];
    // Several reward keys, and one that is not a verdict.
    tasks.push(base_task(
        root,
        "several-keys",
        "[agent]\ntimeout_sec = 120.0\n",
        "echo 42 > /app/answer.txt",
        "echo '{\"reward\": 0.5, \"accuracy\": 0.75, \"passed\": 3}' > /logs/verifier/reward.json",
    ));
    // The task's environment for the solution and for the tests, and the image's WORKDIR.
    let env = base_task(
        root,
        "env-and-workdir",
        "[agent]\ntimeout_sec = 120.0\n[solution.env]\nGREETING = \"hi-from-solution\"\n[verifier.env]\nEXPECTED = \"hi-from-solution\"\n",
        "echo \"$GREETING\" > out.txt; pwd > where.txt",
        &verdict(&[
            ("reward", "[ \"$(cat /srv/app/out.txt)\" = \"$EXPECTED\" ]"),
            ("solution_cwd", "[ \"$(cat /srv/app/where.txt)\" = /srv/app ]"),
            ("tests_cwd", "[ \"$(pwd)\" = /srv/app ]"),
            ("no_solution_env", "[ -z \"${GREETING:-}\" ]"),
        ]),
    );
    std::fs::write(
        env.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /srv/app\nWORKDIR /srv/app\n",
    )
    .unwrap();
    tasks.push(env);
    // An image that ships a helper in /tests, which the task's tests call: the tests are
    // uploaded over it, not in place of it.
    let helper = base_task(
        root,
        "image-tests-helper",
        "[agent]\ntimeout_sec = 120.0\n",
        "echo 42 > /app/answer.txt",
        "/tests/check-answer.sh && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    );
    std::fs::write(
        helper.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /app /tests && printf '#!/bin/bash\\ngrep -qx 42 /app/answer.txt\\n' > /tests/check-answer.sh && chmod +x /tests/check-answer.sh\nWORKDIR /app\n",
    )
    .unwrap();
    tasks.push(helper);
    // Both reward files: which one is read.
    tasks.push(base_task(
        root,
        "both-reward-files",
        "[agent]\ntimeout_sec = 120.0\n",
        "true",
        "echo 0.25 > /logs/verifier/reward.txt; echo '{\"reward\": 0.75}' > /logs/verifier/reward.json",
    ));
    // A reward.txt of blank lines: not empty, not a number.
    tasks.push(base_task(
        root,
        "blank-reward",
        "[agent]\ntimeout_sec = 120.0\n",
        "true",
        "printf ' \\n' > /logs/verifier/reward.txt",
    ));
    // A task the solution leaves undone.
    tasks.push(base_task(
        root,
        "undone",
        "[agent]\ntimeout_sec = 120.0\n",
        "echo 'not today'",
        "[ -f /app/done.txt ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    ));
    // A solution that outlives the agent's limit: graded after the timeout with what it left.
    tasks.push(base_task(
        root,
        "timeout",
        "[agent]\ntimeout_sec = 4.0\n",
        "echo partial > /app/partial.txt\nsleep 60\necho late > /app/late.txt",
        &verdict(&[("reward", "[ -f /app/partial.txt ]"), ("late", "[ -f /app/late.txt ]")]),
    ));
    // Two steps in one container: the second sees what the first left; each its own verdict.
    let steps = root.join("two-steps");
    for (step, solve, test) in [
        ("first", "echo one > /app/one.txt", "[ \"$(cat /app/one.txt)\" = one ]"),
        ("second", "cat /app/one.txt > /app/two.txt", "[ -f /app/two.txt ] && [ ! -f /app/three.txt ]"),
    ] {
        let dir = steps.join("steps").join(step);
        std::fs::create_dir_all(dir.join("solution")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("instruction.md"), format!("step {step}\n")).unwrap();
        std::fs::write(dir.join("solution/solve.sh"), format!("#!/bin/bash\n{solve}\n")).unwrap();
        std::fs::write(
            dir.join("tests/test.sh"),
            format!(
                "#!/bin/bash\n{test} && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
            ),
        )
        .unwrap();
    }
    std::fs::create_dir_all(steps.join("environment")).unwrap();
    std::fs::write(
        steps.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /app\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        steps.join("task.toml"),
        "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[[steps]]\nname = \"first\"\n[[steps]]\nname = \"second\"\n",
    )
    .unwrap();
    tasks.push(steps);
    tasks
}

/// What a trial's result says about its grading: the rewards (as numbers: Harbor keeps an
/// integer an integer, we write every reward as a float), each step's, the error kind.
fn grading(result: &serde_json::Value) -> serde_json::Value {
    let numbers = |rewards: &serde_json::Value| match rewards.as_object() {
        Some(map) => serde_json::json!(
            map.iter().map(|(k, v)| (k.clone(), v.as_f64())).collect::<std::collections::BTreeMap<_, _>>()
        ),
        None => rewards.clone(),
    };
    let steps: Vec<serde_json::Value> = result["step_results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| serde_json::json!({"step": s["step_name"], "rewards": numbers(&s["verifier_result"]["rewards"])}))
        .collect();
    serde_json::json!({
        "rewards": numbers(&result["verifier_result"]["rewards"]),
        "steps": steps,
        "exception": result["exception_info"]["exception_type"],
    })
}

/// The grading of each trial of a job directory, by task.
fn gradings(job_dir: &Path) -> std::collections::BTreeMap<String, serde_json::Value> {
    trial_dirs(job_dir)
        .iter()
        .map(|t| {
            let r = read_json(&t.join("result.json"));
            (r["task_name"].as_str().unwrap_or("").to_string(), grading(&r))
        })
        .collect()
}

/// Harbor 0.25's oracle agent and ours on the same tasks — a service and a worker the solution
/// leaves running, several reward keys, the task's solution and verifier environments and its
/// WORKDIR, an image's own helper in `/tests`, both reward files, a blank `reward.txt`, a task
/// left undone, a solution past the agent's limit, two steps — give every task
/// the same rewards, step rewards and error kind.
#[tokio::test(flavor = "multi_thread")]
async fn the_oracle_is_graded_as_harbor_grades_it() {
    let Some(_docker) = docker().await else { return };
    let Some(harbor) = crate::support::harbor_runtime("0.25.0") else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("oracle-parity");
    let tasks = oracle_parity_tasks(&dir.path().join("tasks"));
    let job = |name: &str| {
        let mut yaml = format!(
            "jobs_dir: {}\njob_name: {name}\nn_attempts: 1\nn_concurrent_trials: 4\nagents:\n  - name: oracle\ntasks:\n",
            dir.path().display()
        );
        for task in &tasks {
            yaml.push_str(&format!("  - path: {}\n", task.display()));
        }
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let (theirs_config, ours_config) = (job("harbor"), job("ours"));
    let out = tokio::task::spawn_blocking(move || harbor.run(&theirs_config, &[])).await.unwrap();
    assert!(
        out.status.success(),
        "Harbor: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokio::task::spawn_blocking(move || run_terminus(&ours_config, &[])).await.unwrap();
    // 1: finished, with trials that recorded an error (the timeout's).
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let theirs = gradings(&dir.path().join("harbor"));
    let ours = gradings(&dir.path().join("ours"));
    assert_eq!(theirs.len(), tasks.len(), "Harbor graded {theirs:?}");
    let mut report = String::new();
    for (task, graded) in &theirs {
        let same = ours.get(task) == Some(graded);
        report.push_str(&format!(
            "{} {task}: Harbor {graded}, terminus {}\n",
            if same { "=" } else { "≠" },
            ours.get(task).unwrap_or(&serde_json::Value::Null)
        ));
    }
    println!("{report}");
    assert_eq!(theirs, ours, "\n{report}");
    // The grading is not vacuous: live processes, a timeout and a failure are among the verdicts.
    assert_eq!(theirs["service"]["rewards"]["reward"], 1.0, "{report}");
    assert_eq!(theirs["undone"]["rewards"]["reward"], 0.0, "{report}");
    assert_eq!(theirs["timeout"]["exception"], "AgentTimeoutError", "{report}");
    assert_eq!(theirs["image-tests-helper"]["rewards"]["reward"], 1.0, "{report}");
    assert_eq!(theirs["both-reward-files"]["rewards"]["reward"], 0.75, "{report}");
    assert_eq!(theirs["blank-reward"]["exception"], "VerifierOutputParseError", "{report}");
}
