//! Multi-step tasks (`[[steps]]`) against the real engine: one container and one
//! terminal through the steps, each step's instruction, set-up, tests and outputs its own, the
//! reward gate and both reward strategies, and the agent frozen while a step is graded.

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script};

use crate::support::BoundedCommand;
use crate::support::{
    cmd, containers_of_job, docker, heavy_lock, read_json, reply, run_terminus, scripted_agent, temp_dir, trial_dirs,
    write_job,
};

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A multi-step task: `toml` after the version line, then for each step its name, its
/// `task.toml` lines, its solution and the condition its test checks.
fn steps_task(
    root: &std::path::Path,
    name: &str,
    toml: &str,
    steps: &[(&str, &str, &str, &str)],
) -> std::path::PathBuf {
    let dir = root.join(name);
    write(&dir.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN mkdir -p /app\nWORKDIR /app\n");
    // Shared by every step's tests (Harbor uploads tests/ first, then the step's own over it).
    write(
        &dir.join("tests/lib.sh"),
        "verdict() { if \"$@\"; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; }\n",
    );
    let mut config = format!("version = \"1.0\"\n{toml}\n");
    for (step, step_toml, solve, test) in steps {
        config.push_str(&format!("[[steps]]\nname = \"{step}\"\n{step_toml}\n"));
        let step_dir = dir.join("steps").join(step);
        write(&step_dir.join("instruction.md"), &format!("STEP-{step}: do the {step} part\n"));
        write(&step_dir.join("solution/solve.sh"), &format!("#!/bin/bash\n{solve}\n"));
        write(&step_dir.join("tests/test.sh"), &format!("#!/bin/bash\nsource /tests/lib.sh\n{test}\n"));
    }
    write(&dir.join("task.toml"), &config);
    dir
}

fn step_rewards(result: &Value) -> Vec<Value> {
    result["step_results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["verifier_result"]["rewards"]["reward"].clone())
        .collect()
}

/// The oracle through three steps: step one's `workdir/` is staged in the working directory
/// and its `setup.sh` runs first; step two's agent leaves a process that forges a reward, which
/// is frozen while step two's tests run (so their own verdict, 0, stands) and killed before the
/// last step's; the last step sees what the first left (one container). The trial's reward is
/// the mean (`verifier.agent_processes: kill`; under `keep` the forger would run on, as in
/// Harbor). A second task gates on `min_reward`: its failed first step skips the second, and
/// `final` takes that step's verdict.
#[tokio::test(flavor = "multi_thread")]
async fn the_oracle_runs_each_step_in_one_container_and_a_gate_skips_the_rest() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("steps-oracle");
    let tasks = dir.path().join("tasks");
    let forge = "nohup bash -c 'while true; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done' \
                 >/dev/null 2>&1 &\necho started > /app/b.txt";
    let three = steps_task(
        &tasks,
        "three-steps",
        "",
        &[
            (
                "make",
                // A step's own collect hook runs before its artifacts are taken.
                "artifacts = [\"/app/hooked.txt\"]\n[[steps.verifier.collect]]\ncommand = \"echo hook > /app/hooked.txt\"",
                "cat seed.txt > /app/a.txt",
                "verdict [ \"$(cat /app/a.txt)\" = seeded ] && [ -f /app/setup-ran ]",
            ),
            ("forge", "", forge, "echo 0 > /logs/verifier/reward.txt; sleep 0.5"),
            (
                "last",
                "artifacts = [\"/app/last-hook.txt\"]\n[[steps.verifier.collect]]\ncommand = \"echo last > /app/last-hook.txt\"",
                "echo done > /app/c.txt",
                "verdict [ -f /app/a.txt ] && [ -f /app/c.txt ] && [ ! -f /tests/never ]",
            ),
        ],
    );
    write(&three.join("steps/make/workdir/seed.txt"), "seeded\n");
    write(&three.join("steps/make/workdir/setup.sh"), "touch /app/setup-ran\n");
    // A file only step one's tests have: each step gets its own tests, nothing of the last one's.
    write(&three.join("steps/make/tests/never"), "");
    let gated = steps_task(
        &tasks,
        "gated",
        "multi_step_reward_strategy = \"final\"",
        &[("first", "min_reward = 1.0", "true", "verdict false"), ("second", "", "touch /app/second", "verdict true")],
    );
    let config =
        write_job(dir.path(), "steps", "verifier:\n  agent_processes: kill\n", "  - name: oracle\n", &[three, gated]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let job_dir = dir.path().join("steps");
    let trial_of = |task: &str| {
        trial_dirs(&job_dir).into_iter().find(|t| read_json(&t.join("result.json"))["task_name"] == task).unwrap()
    };
    let trial = trial_of("three-steps");
    let result = read_json(&trial.join("result.json"));
    assert!(result["exception_info"].is_null(), "{}", result["exception_info"]);
    assert_eq!(step_rewards(&result), [json!(1.0), json!(0.0), json!(1.0)], "{result}");
    let artifact = |step: &str, file: &str| {
        std::fs::read_to_string(trial.join("steps").join(step).join("artifacts/app").join(file))
    };
    assert_eq!(artifact("make", "hooked.txt").unwrap(), "hook\n", "{:?}", crate::support::all_files(&trial));
    assert_eq!(artifact("last", "last-hook.txt").unwrap(), "last\n", "the last step's, at teardown");
    let mean = result["verifier_result"]["rewards"]["reward"].as_f64().unwrap();
    assert!((mean - 2.0 / 3.0).abs() < 1e-9, "the mean of the steps: {mean}");
    for step in ["make", "forge", "last"] {
        let verifier = trial.join("steps").join(step).join("verifier");
        assert!(verifier.join("reward.txt").is_file(), "{step}: {:?}", crate::support::all_files(&trial));
        assert!(trial.join("steps").join(step).join("agent/oracle.txt").is_file(), "{step}");
    }
    assert!(!trial.join("verifier/reward.txt").exists(), "a multi-step trial's verdicts are per step");

    let gated = read_json(&trial_of("gated").join("result.json"));
    assert_eq!(step_rewards(&gated), [json!(0.0)], "the gate skips step two: {gated}");
    assert_eq!(gated["verifier_result"]["rewards"]["reward"], 0.0, "`final`: step one's verdict");

    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
    for version in crate::support::HARBOR_VERSIONS {
        crate::support::validate_job_with_harbor(&job_dir, version);
    }
}

/// Terminus 2 through two steps: each gets a fresh chat with its own instruction (the mock
/// picks the conversation by it) on the terminal the last step left — a shell variable set in
/// step one is still set in step two — and writes its trajectory under `steps/<name>/agent/`;
/// the recording covers the whole trial, with both steps' episode markers. Under both
/// `verifier.agent_processes` policies: with `kill`, what step one's shell started in the
/// background is gone when its tests start, and the terminal itself goes on.
#[tokio::test(flavor = "multi_thread")]
async fn terminus_2_goes_on_in_the_same_terminal_with_a_fresh_chat_per_step() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    for policy in ["keep", "kill"] {
        two_steps_in_one_terminal(&docker, policy).await;
    }
}

async fn two_steps_in_one_terminal(docker: &bollard::Docker, policy: &str) {
    let dir = temp_dir(&format!("steps-t2-{policy}"));
    let tasks = dir.path().join("tasks");
    let task = steps_task(
        &tasks,
        "two-steps",
        "[agent]\ntimeout_sec = 120.0\n",
        &[
            ("one", "", "true", "verdict [ \"$(cat /app/one.txt)\" = one ]"),
            ("two", "", "true", "verdict [ \"$(cat /app/two.txt)\" = kept ]"),
        ],
    );
    let done = || reply(json!([]), true);
    let script = Script {
        conversations: vec![
            Conversation {
                when: "STEP-one".into(),
                turns: vec![
                    reply(cmd("export MARK=kept; echo one > /app/one.txt; sleep 1000 &\n", 0.3), false),
                    done(),
                    done(),
                ],
            },
            Conversation {
                when: "STEP-two".into(),
                turns: vec![reply(cmd("echo $MARK > /app/two.txt\n", 0.3), false), done(), done()],
            },
        ],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    // Recorded: the one recording of the trial is looked at below.
    let agent = scripted_agent(&server.api_base(), "")
        .replace("record_terminal_session: false", "record_terminal_session: true");
    let config = write_job(dir.path(), "t2", &format!("verifier:\n  agent_processes: {policy}\n"), &agent, &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{policy}: {}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("t2");
    let trial = trial_dirs(&job_dir).remove(0);
    let result = read_json(&trial.join("result.json"));
    assert_eq!(step_rewards(&result), [json!(1.0), json!(1.0)], "{policy}: {result}");
    let census = &result["step_results"][0]["agent_result"]["metadata"]["processes_at_verification"];
    assert_eq!(census["policy"], policy, "{census}");
    let sleeping = census["commands"].get("sleep").is_some();
    assert_eq!(sleeping, policy == "keep", "{policy}: step one's background sleep at its tests: {census}");
    assert!(census["commands"].get("tmux: server").is_some(), "{policy}: the terminal goes on: {census}");
    for (step, instruction) in [("one", "STEP-one"), ("two", "STEP-two")] {
        let trajectory = read_json(&trial.join("steps").join(step).join("agent/trajectory.json"));
        let first = trajectory["steps"][0]["message"].as_str().unwrap();
        assert!(first.contains(instruction), "{step}: {first}");
        let other = if step == "one" { "STEP-two" } else { "STEP-one" };
        assert!(!trajectory.to_string().contains(other), "{step}'s chat is its own");
        let agent = &result["step_results"][if step == "one" { 0 } else { 1 }]["agent_result"];
        assert_eq!(agent["metadata"]["n_episodes"], 3, "{step}'s own run: {agent}");
    }
    let cast = std::fs::read_to_string(trial.join("agent/recording.cast")).expect("one recording for the trial");
    // One marker per episode: three in each step (checked above), six in all.
    let markers = cast.lines().filter(|l| l.contains("\"m\"")).count();
    assert_eq!(markers, 6, "{policy}: both steps' episodes are marked, each once ({markers})");
    assert!(!trial.join("steps/one/agent/recording.cast").exists(), "no partial copy in a step");
    assert_eq!(containers_of_job(docker, read_json(&job_dir.join("result.json"))["id"].as_str().unwrap()).await, 0);
    crate::support::validate_with_harbor(&job_dir);
    server.shutdown();
    if policy == "keep" {
        // Replayed step by step, the model's server gone: step two's file holds what step one's
        // replayed keystrokes exported, so both steps score again. (Their prompts are compared
        // too, but a background job's PID may differ from run to run.)
        let replays = dir.path().join("replays");
        let out = tokio::task::spawn_blocking({
            let replays = replays.clone();
            move || {
                std::process::Command::new(crate::support::terminus_bin())
                    .args(["trials", "replay"])
                    .arg(&trial)
                    .arg("-o")
                    .arg(&replays)
                    .current_dir(crate::support::repo_root())
                    .output_bounded()
                    .unwrap()
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let job = std::fs::read_dir(&replays).unwrap().flatten().next().unwrap().path();
        let replayed = trial_dirs(&job).remove(0);
        let result = read_json(&replayed.join("result.json"));
        assert_eq!(step_rewards(&result), [json!(1.0), json!(1.0)], "{stdout}");
        let report = read_json(&replayed.join("replay.json"));
        assert_eq!(report["n_episodes"], 6, "both steps' episodes are compared: {report}");
        assert!(replayed.join("steps/two/agent/episode-0/prompt.txt").is_file());
    }
}
