//! Live control of a running job from the command line: `terminus jobs status|pause|resume|set`
//! and `terminus trials cancel|retry`, over the job's control socket, against a real job.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use terminus_mock_llm::MockServer;

use crate::orchestrator::{hello, port_of, restart_on, spawn_terminus};
use crate::support::{BoundedChild, BoundedCommand, ReapOnDrop};
use crate::support::{
    containers_of_job, docker, example, heavy_lock, job_id, job_yaml, read_json, resume_terminus, temp_dir,
    terminus_bin, wait_until,
};

/// `terminus <args>` (as `user`, when given), bounded.
fn terminus_as(user: Option<&str>, args: &[&str]) -> Output {
    let mut command = match user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(terminus_bin());
            command
        }
        None => Command::new(terminus_bin()),
    };
    command.args(args).output_bounded().expect("terminus runs")
}

fn terminus(args: &[&str]) -> Output {
    terminus_as(None, args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `terminus jobs status --json`, which must succeed.
fn status(job_dir: &Path) -> Value {
    let out = terminus(&["jobs", "status", "--json", job_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("the status is JSON")
}

/// The trials of a status in `state`.
fn in_state(status: &Value, state: &str) -> Vec<String> {
    let trials = status["trials"].as_array().unwrap();
    trials.iter().filter(|t| t["state"] == state).map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A job of three hello-world trials, one at a time, on a model that takes two minutes to
/// answer: paused with one trial at the model, that trial is cancelled (its container goes,
/// nothing else starts), a queued one is cancelled (it never starts), the first is retried (its
/// cancelled attempt kept under attempts/0), the limit raised, the job resumed on a quick model:
/// it ends with the retried and the untouched trial solved and the queued one cancelled. What
/// is refused is refused by kind, a job that ended answers "not running", and another user can
/// neither read nor steer it.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_job_is_paused_resumed_and_its_trials_cancelled_and_retried_from_the_command_line() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let slow = MockServer::start(hello(120_000), 0).await.unwrap();
    let port = port_of(&slow);
    let dir = temp_dir("live-control");
    let extra = "n_attempts: 3\nn_concurrent_trials: 1\n";
    let config = job_yaml(dir.path(), "live", &slow.api_base(), extra, &[example("hello-world")]);
    let job_dir = dir.path().join("live");
    let job = path_str(&job_dir).to_string();
    let child = ReapOnDrop::new(spawn_terminus(&["run", "-c", path_str(&config)], &[]));
    wait_until("the first trial calling the model", Duration::from_secs(120), || !slow.requests().is_empty()).await;
    let id = job_id(&job_dir);

    let out = terminus(&["jobs", "pause", &job]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("paused"));
    let paused = status(&job_dir);
    assert_eq!(paused["paused"], true);
    assert_eq!((paused["n_running"].as_u64(), paused["n_pending"].as_u64()), (Some(1), Some(2)));
    let running = in_state(&paused, "running").pop().expect("one trial runs");
    let queued = in_state(&paused, "queued");
    assert_eq!(queued.len(), 2);

    // Another user (when the suite runs as root, as CI does): the job directory is readable to
    // them, the control directory is not.
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
    if root {
        other_user_is_refused(dir.path(), &job_dir);
    }

    // The running trial, cancelled: its result says so, its container goes, nothing starts.
    let running_dir = job_dir.join(&running);
    let out = terminus(&["trials", "cancel", path_str(&running_dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    wait_until("the cancelled trial's result", Duration::from_secs(60), || running_dir.join("result.json").is_file())
        .await;
    let result = read_json(&running_dir.join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "CancelledError", "{result}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while containers_of_job(&docker, &id).await > 0 {
        assert!(Instant::now() < deadline, "the cancelled trial's container stays");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = status(&job_dir);
    assert_eq!((after["n_running"].as_u64(), in_state(&after, "queued").len()), (Some(0), 2), "paused: {after}");
    assert_eq!(in_state(&after, "cancelled"), std::slice::from_ref(&running));
    assert_eq!(slow.requests().len(), 1, "no trial started while paused");

    // A queued trial, cancelled: it never starts.
    let never = job_dir.join(&queued[0]);
    let out = terminus(&["trials", "cancel", path_str(&never)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let result = read_json(&never.join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "CancelledError");
    assert!(result["agent_execution"].is_null(), "it never ran: {result}");

    // Refusals, by kind, with the trial named.
    let refused = |args: &[&str], says: &str| {
        let out = terminus(args);
        assert_eq!(out.status.code(), Some(9), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    };
    refused(&["trials", "cancel", path_str(&running_dir)], "has finished: retry it instead");
    refused(&["trials", "retry", path_str(&job_dir.join(&queued[1]))], "has not finished");
    refused(
        &["trials", "retry", path_str(&job_dir.join("hello-world__nobody"))],
        "no trial named `hello-world__nobody`",
    );
    refused(&["jobs", "set", &job, "--max-cost-usd", "1"], "runs without a budget");
    let out = terminus(&["jobs", "set", &job]);
    assert_eq!(out.status.code(), Some(2), "nothing to set: {}", stderr(&out));

    // The cancelled running trial, retried: its attempt is kept, it goes first in line.
    let out = terminus(&["trials", "retry", path_str(&running_dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let attempt = running_dir.join("attempts/0/result.json");
    wait_until("the retried trial's attempt archived", Duration::from_secs(30), || attempt.is_file()).await;
    assert_eq!(read_json(&attempt)["exception_info"]["exception_type"], "CancelledError");
    let retried = status(&job_dir);
    assert_eq!(in_state(&retried, "queued").len(), 2, "{retried}");

    slow.shutdown();
    let fast = restart_on(port).await;
    let out = terminus(&["jobs", "set", &job, "-n", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(status(&job_dir)["n_concurrent"], 2);
    let out = terminus(&["jobs", "resume", &job]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let child = child.take();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output_bounded()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(1), "one trial stays cancelled: {}", stderr(&out));
    assert!(!fast.requests().is_empty(), "the resumed trials asked the quick model");
    let rewards =
        |name: &str| read_json(&job_dir.join(name).join("result.json"))["verifier_result"]["rewards"]["reward"].clone();
    assert_eq!(rewards(&running), 1.0, "the retried trial ran to its end");
    assert_eq!(read_json(&running_dir.join("result.json"))["retries"], 1);
    assert_eq!(rewards(&queued[1]), 1.0, "the untouched trial ran");
    assert_eq!(read_json(&never.join("result.json"))["exception_info"]["exception_type"], "CancelledError");
    assert_eq!(containers_of_job(&docker, &id).await, 0);
    assert!(!job_dir.join(".control/socket").exists(), "the socket goes with the job");

    let out = terminus(&["jobs", "status", &job]);
    assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
    assert!(stderr(&out).contains("no terminus runs the job"), "{}", stderr(&out));

    // The trial cancelled before it started is a trial of the job to `resume`: it runs.
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &["--only", "cancelled"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // It ran under a new name (a rerun trial is a new directory), and every trial is solved.
    let trials = crate::support::trial_dirs(&job_dir);
    assert_eq!(trials.len(), 3, "{trials:?}");
    assert!(!never.exists(), "the cancelled trial's directory made way for its rerun");
    for trial in &trials {
        let reward = read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"].clone();
        assert_eq!(reward, 1.0, "{}", trial.display());
    }
    assert!(!job_dir.join(".orphaned").exists(), "no trial directory was set aside");
    assert_eq!(containers_of_job(&docker, &id).await, 0);
    let out = terminus(&["jobs", "pause", path_str(&PathBuf::from(dir.path()).join("no-such-job"))]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `nobody` can neither reach the paused job's socket through its directory, nor, with the
/// directory and socket opened to everyone, get an answer from it: the job stays paused.
fn other_user_is_refused(tmp: &Path, job_dir: &Path) {
    let job = path_str(job_dir);
    for path in [tmp, job_dir] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = terminus_as(Some("nobody"), &["jobs", "resume", job]);
    assert_eq!(out.status.code(), Some(8), "another user reached the job: {}", stderr(&out));
    for path in [job_dir.join(".control"), job_dir.join(".control/socket")] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let out = terminus_as(Some("nobody"), &["jobs", "resume", job]);
    assert_eq!(out.status.code(), Some(8), "another user reached the job: {}", stderr(&out));
    assert_eq!(status(job_dir)["paused"], true, "another user's resume changed nothing");
}
