//! Replays and regrades: a recorded trial typed again in a fresh container from its model's
//! recorded replies (no model is asked), compared episode by episode with its recording, then
//! graded; a job regraded with changed tests reports the rewards that changed.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::json;
use terminus_mock_llm::{Conversation, MockServer, Script};

use crate::support::BoundedCommand;
use crate::support::{
    cmd, copy_task, docker, example, heavy_lock, job_yaml, read_json, reply, run_terminus, temp_dir, terminus_bin,
    trial_dirs,
};

const PRINTF: &str = "printf 'Hello, world!\\n' > hello.txt\n";

/// hello-world at `dir/name`, its image holding `/version.txt` with `version`.
fn versioned_task(dir: &Path, name: &str, version: &str) -> PathBuf {
    let task = copy_task(&example("hello-world"), &dir.join(name));
    set_version(&task, version);
    task
}

/// Names the task at `task` `declared` in its task.toml (`[task].name`), as Harbor's tasks are.
fn declare_name(task: &Path, declared: &str) {
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(task.join("task.toml"), format!("{toml}\n[task]\nname = \"{declared}\"\n")).unwrap();
}

fn set_version(task: &Path, version: &str) {
    let dockerfile = format!("FROM terminus-base:bookworm\nRUN echo {version} > /version.txt\nWORKDIR /app\n");
    std::fs::write(task.join("environment/Dockerfile"), dockerfile).unwrap();
}

/// What the agent also does: plants replies where terminus keeps the recorded ones, for a replay
/// to type as if its model had sent them.
const PLANT: &str = "mkdir -p /logs/agent/episode-00 /logs/agent/episode-9 && echo PLANTED | tee /logs/agent/episode-00/response.txt > /logs/agent/episode-9/response.txt\n";

/// A model that shows the version, writes the file (and plants replies), then claims
/// completion twice.
fn script() -> Script {
    Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                reply(cmd("cat /version.txt\n", 0.2), false),
                reply(json!([{"keystrokes": PRINTF, "duration": 0.2}, {"keystrokes": PLANT, "duration": 0.2}]), false),
                reply(json!([]), true),
                reply(json!([]), true),
            ],
        }],
        ..Script::default()
    }
}

/// Runs `terminus ARGS` without any model key in its environment.
async fn terminus(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(terminus_bin())
            .args(&args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_BASE")
            .current_dir(crate::support::repo_root())
            .output_bounded()
            .unwrap()
    })
    .await
    .unwrap()
}

/// The one job directory under `dir` and its one trial.
fn only_trial(dir: &Path) -> PathBuf {
    let jobs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let trials = trial_dirs(&jobs[0]);
    assert_eq!(trials.len(), 1, "{trials:?}");
    trials[0].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_matches_its_recording_until_the_environment_changes() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("replay");
    let task = versioned_task(&dir.path().join("tasks"), "hello-world", "v1");
    let server = MockServer::start(script(), 0).await.unwrap();
    let config = job_yaml(dir.path(), "recorded", &server.api_base(), "", std::slice::from_ref(&task));
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("OPENAI_API_KEY", "sk-test")])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let original = trial_dirs(&dir.path().join("recorded"))[0].clone();
    assert_eq!(read_json(&original.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    let asked = server.requests().len();
    assert_eq!(asked, 4);
    let probed = server.probes().len();
    // What the agent planted under the names terminus writes was not copied, and is named.
    for planted in ["episode-00", "episode-9"] {
        assert!(!original.join("agent").join(planted).exists(), "{planted} was copied");
    }
    let warnings = read_json(&original.join("result.json"))["warnings"].to_string();
    assert!(warnings.contains("/logs/agent/episode-00 in the container was not copied"), "{warnings}");

    // The same environment: every prompt matches, the same reward, and no model is asked.
    let replays = dir.path().join("same");
    let out = terminus(&["trials", "replay", s(&original), "-o", s(&replays)]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("prompts:  all 4 episodes match the recording"), "{stdout}");
    assert_eq!(server.requests().len(), asked, "a replay asks no model");
    assert_eq!(server.probes().len(), probed, "nor the model's server anything else");
    let replayed = only_trial(&replays);
    let result = read_json(&replayed.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(result["replay_of"], original.display().to_string());
    let report = read_json(&replayed.join("replay.json"));
    assert_eq!((report["n_episodes"].as_u64(), report["n_matching"].as_u64()), (Some(4), Some(4)));
    assert!(report["first_divergence"].is_null());
    assert!(
        original.join("result.json").is_file() && !original.join("replay.json").exists(),
        "the original is untouched"
    );

    // The image changed since: the episode that shows it is the first divergence.
    set_version(&task, "v2");
    let replays = dir.path().join("changed");
    let out = terminus(&["trials", "replay", s(&original), "-o", s(&replays)]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1 of 4 episodes match; the first divergence is at episode 1"), "{stdout}");
    let report = read_json(&only_trial(&replays).join("replay.json"));
    let divergence = &report["first_divergence"];
    assert_eq!(divergence["episode"], 1);
    assert!(divergence["recorded"].as_str().unwrap().contains("v1"), "{divergence}");
    assert!(divergence["replayed"].as_str().unwrap().contains("v2"), "{divergence}");
    assert_eq!(server.requests().len(), asked);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regrade_with_changed_tests_reports_exactly_the_flipped_rewards() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("regrade");
    let tasks = dir.path().join("tasks");
    // Named `org/name`, in directories named otherwise, as Harbor's datasets are.
    let kept = versioned_task(&tasks, "kept", "v1");
    let changed = versioned_task(&tasks, "changed", "v1");
    declare_name(&kept, "hbbench/hello-kept");
    declare_name(&changed, "hbbench/hello-changed");
    let server = MockServer::start(script(), 0).await.unwrap();
    let config =
        job_yaml(dir.path(), "graded", &server.api_base(), "n_attempts: 2\nn_concurrent_trials: 4\n", &[kept, changed]);
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("OPENAI_API_KEY", "sk-test")])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("graded");
    assert_eq!(trial_dirs(&job_dir).len(), 4);
    let asked = server.requests().len();

    // New tests for one task: they now fail what passed. The copy is laid out by name.
    let fixed = dir.path().join("fixed");
    copy_task(&tasks.join("kept"), &fixed.join("hbbench/hello-kept"));
    copy_task(&tasks.join("changed"), &fixed.join("hbbench/hello-changed"));
    std::fs::write(
        fixed.join("hbbench/hello-changed/tests/test.sh"),
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let new_job = dir.path().join("regraded");
    // A copy that lacks a task, or holds one twice, is refused before anything runs.
    let lacking = dir.path().join("lacking");
    copy_task(&tasks.join("kept"), &lacking.join("kept"));
    let twice = dir.path().join("twice");
    copy_task(&fixed, &twice.join("a"));
    copy_task(&tasks.join("changed"), &twice.join("b/changed"));
    for (copy, said) in [(&lacking, "no task named `hbbench/hello-changed`"), (&twice, "`hbbench/hello-changed` is in")]
    {
        let out = terminus(&["jobs", "regrade", s(&job_dir), "-o", s(&new_job), "--tasks-from", s(copy)]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
        assert!(!new_job.exists(), "nothing ran");
    }
    let out = terminus(&["jobs", "regrade", s(&job_dir), "-o", s(&new_job), "--tasks-from", s(&fixed)]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("2 of 4 rewards changed; 0 replays diverged"), "{stdout}");
    assert_eq!(server.requests().len(), asked, "a regrade asks no model");
    let report = read_json(&new_job.join("regrade.json"));
    assert_eq!(
        report["tasks"]["hbbench/hello-kept"],
        json!({"n_trials": 2, "n_up": 0, "n_down": 0, "n_errors": 0, "n_diverged": 0})
    );
    assert_eq!(
        report["tasks"]["hbbench/hello-changed"],
        json!({"n_trials": 2, "n_up": 0, "n_down": 2, "n_errors": 0, "n_diverged": 0})
    );
    let result = read_json(&new_job.join("result.json"));
    assert_eq!(result["regrade_of"], job_dir.display().to_string());
    assert_eq!(result["n_total_trials"], 4);
    // The viewer compares the two jobs as any two: the changed task went from pass to fail.
    let viewer = crate::view::start_viewer(dir.path());
    let compared = http_get_json(&viewer.url, "/api/compare/graded/regraded");
    assert_eq!(
        (compared["n_pass_to_fail"].as_u64(), compared["n_fail_to_pass"].as_u64()),
        (Some(1), Some(0)),
        "{compared}"
    );
    // Never into the job it regrades, nor into another job.
    for (target, said) in
        [(&job_dir, "names the job being regraded"), (&dir.path().join("tasks"), "is not a regrade of")]
    {
        let out = terminus(&["jobs", "regrade", s(&job_dir), "-o", s(target)]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
    // The original job is as it was.
    assert!(
        trial_dirs(&job_dir)
            .iter()
            .all(|t| read_json(&t.join("result.json"))["verifier_result"]["rewards"]["reward"] == 1.0)
    );
}

/// The JSON body of `GET path` on the HTTP server at `base` (`http://host:port/…`).
fn http_get_json(base: &str, path: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let authority = base.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let mut stream = std::net::TcpStream::connect(&authority).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// A path as a command-line argument.
fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}
