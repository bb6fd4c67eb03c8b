//! The orchestrator's promises under failure: retries that free their slot, restarts after a
//! crash or a lost container, resume after kill -9, clean exits on SIGTERM, resumes that rerun
//! nothing when only runtime settings changed, and the maintenance commands.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    cmd, containers_of_job, docker, example, heavy_lock, instructed_task, job_id, job_yaml, poll, read_json, reply,
    repo_root, resume_terminus, run_terminus, temp_dir, terminus_bin, time_of, trial_dirs, usage, wait_until,
};

/// The hello-world script; each reply waits `delay_ms` (time for a test to act mid-run).
pub(crate) fn hello(delay_ms: u64) -> Script {
    let reply = |commands: serde_json::Value, complete: bool| Turn {
        usage: usage(10, 5),
        delay_ms: Some(delay_ms),
        ..reply(commands, complete)
    };
    Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                reply(cmd("printf 'Hello, world!\\n' > hello.txt\n", 0.1), false),
                reply(json!([]), true),
                reply(json!([]), true),
            ],
        }],
        ..Script::default()
    }
}

pub(crate) fn spawn_terminus(args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(terminus_bin());
    command.args(args).current_dir(repo_root()).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().expect("terminus starts")
}

/// A task under `dir/tasks` with `instruction`, tests that always pass, and `dockerfile`.
fn task_built_from(dir: &Path, name: &str, instruction: &str, dockerfile: &str) -> PathBuf {
    let task = instructed_task(&dir.join("tasks"), name, instruction, "", "", "echo 1 > /logs/verifier/reward.txt");
    std::fs::write(task.join("environment/Dockerfile"), dockerfile).unwrap();
    task
}

/// A task with a Dockerfile that never builds.
fn broken_task(dir: &Path) -> PathBuf {
    task_built_from(dir, "broken-build", "Nothing to do.", "FROM terminus-base:bookworm\nRUN exit 7\n")
}

/// The watchdog's lines in a job's log, each naming the budget it waited.
fn watchdog_lines(job_dir: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(job_dir.join("job.log")).unwrap();
    log.lines().filter(|l| l.contains("the watchdog ended it")).map(str::to_string).collect()
}

/// A failed trial waits out its backoff without a slot: with one slot, another trial runs
/// meanwhile; the failed attempt is kept under attempts/0 and counted.
#[tokio::test(flavor = "multi_thread")]
async fn retries_wait_without_holding_a_slot_and_keep_attempts() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("retries");
    let broken = broken_task(dir.path());
    let extra = "n_concurrent_trials: 1\nretry:\n  max_retries: 1\n  min_wait_sec: 4\n  max_wait_sec: 4\n";
    let config = job_yaml(dir.path(), "retries", &server.api_base(), extra, &[broken, example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("retries");
    let mut broken_result = None;
    let mut hello_result = None;
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2, "one trial per task");
    for trial in trials {
        let result = read_json(&trial.join("result.json"));
        if result["task_name"] == "broken-build" {
            assert!(trial.join("attempts/0/result.json").is_file(), "the failed attempt is kept");
            broken_result = Some((result, read_json(&trial.join("attempts/0/result.json"))));
        } else {
            hello_result = Some(result);
        }
    }
    let (broken, first_attempt) = broken_result.expect("the broken task has a result");
    let hello = hello_result.expect("hello-world has a result");
    assert_eq!(broken["exception_info"]["exception_type"], "RuntimeError", "Harbor's name for it");
    assert_eq!(broken["exception_info"]["kind"], "EnvironmentBuildError");
    assert_eq!(broken["retries"], 1);
    assert_eq!(hello["verifier_result"]["rewards"]["reward"], 1.0);
    // hello-world ran inside the backoff window, in the slot the failed trial gave up.
    let time = |v: &serde_json::Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    let failed_at = time(&first_attempt["finished_at"]);
    let retried_at = time(&broken["started_at"]);
    let hello_started = time(&hello["started_at"]);
    assert!(hello_started >= failed_at && hello_started < retried_at, "{failed_at} < {hello_started} < {retried_at}");
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(job["stats"]["n_retries"], 1);
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// A trial actor that panics is restarted in a fresh container, and the job completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_trial_is_restarted() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("panic");
    let config = job_yaml(dir.path(), "panic", &server.api_base(), "n_attempts: 2\n", &[example("hello-world")]);
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("TERMINUS_CHAOS_PANIC_TASK", "hello-world")]))
            .await
            .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("panic");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["restarts"], 1, "{result}");
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    }
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(job["stats"]["n_restarts"], 2);
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// A trial stuck past all its deadlines (here: a teardown that never returns, the test hook for
/// an engine call without a deadline) is ended by the Supervisor's watchdog: with a restart left
/// it runs again in a fresh container and is rewarded; without one its result is
/// `TrialOverdueError` and its container is gone before the job-end sweep looks.
#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_ends_a_trial_that_outlives_its_deadlines() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("watchdog");
    // Budget: build 600 s × 0.01 + set-up 5 + agent 6 + verifier 5 = 22 s, × 1.1, + 1 s.
    let limits = "environment_build_timeout_multiplier: 0.01\nverifier:\n  override_timeout_sec: 5\n";
    let agent = "    override_timeout_sec: 6\n    override_setup_timeout_sec: 5\n";
    let budget = 22.0 * 1.1 + 1.0;
    for (name, max_restarts) in [("restarted", 1), ("overdue", 0)] {
        let extra = format!("{limits}supervision:\n  max_restarts: {max_restarts}\n  watchdog_margin_sec: 1\n");
        let config = job_yaml(dir.path(), name, &server.api_base(), &extra, &[example("hello-world")]);
        let yaml = std::fs::read_to_string(&config).unwrap().replace("    kwargs:\n", &format!("{agent}    kwargs:\n"));
        std::fs::write(&config, yaml).unwrap();
        let started = Instant::now();
        let hook = [("TERMINUS_CHAOS_HANG_TASK", "hello-world")];
        let out = tokio::task::spawn_blocking(move || run_terminus(&config, &hook)).await.unwrap();
        let took = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let job_dir = dir.path().join(name);
        let trials = trial_dirs(&job_dir);
        assert_eq!(trials.len(), 1, "{name}: {stderr}");
        let result = read_json(&trials[0].join("result.json"));
        assert!(took > budget, "{name}: the watchdog waits for the whole budget ({took:.1} s)");
        // The watchdog fired once, for the stuck run, naming its budget.
        let fired = watchdog_lines(&job_dir);
        assert_eq!(fired.len(), 1, "{name}: {fired:?}");
        assert!(fired[0].contains(&format!("({budget:.0} s with the margin)")), "{name}: {}", fired[0]);
        let fired_at = time_of(&json!(fired[0].split_whitespace().next().unwrap()));
        if max_restarts == 1 {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(result["restarts"], 1, "{result}");
            assert!(result["exception_info"].is_null(), "{result}");
            assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
            // The result is the fresh run's, started once the watchdog had ended the stuck one,
            // each of its phases after the last.
            assert!(time_of(&result["started_at"]) >= fired_at, "{name}: {result}");
            assert_phases_in_order(&result);
        } else {
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            let error = &result["exception_info"];
            assert_eq!(error["exception_type"], "TrialOverdueError", "{result}");
            let said = format!("the trial was still running after {budget:.0} s");
            assert!(error["exception_message"].as_str().unwrap().starts_with(&said), "{result}");
            assert!(time_of(&error["occurred_at"]) >= fired_at, "{name}: {result}");
            // The job ended with that result recorded, and nothing of it still pending.
            let job = read_json(&job_dir.join("result.json"));
            assert!(time_of(&job["finished_at"]) >= time_of(&error["occurred_at"]), "{job}");
            assert_eq!(job["stats"]["n_errored_trials"], 1, "{job}");
            assert_eq!(job["stats"]["n_pending_trials"], 0, "{job}");
        }
        // The watchdog's own clean-up removed the stuck run's container: the sweep found none.
        assert!(!stderr.contains("removed containers the trials left behind"), "{stderr}");
        assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
    }
}

/// A trial whose container is killed through the engine's API mid-run is restarted in a fresh
/// container, and the job completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_trial_whose_container_dies_is_restarted() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(1500), 0).await.unwrap();
    let dir = temp_dir("killed");
    let config = job_yaml(dir.path(), "killed", &server.api_base(), "", &[example("hello-world")]);
    let mut child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    // Wait for the first model call (the container exists and the agent is running), then kill
    // the container behind the trial's back.
    wait_until("the first model call", Duration::from_secs(60), || !server.requests().is_empty()).await;
    let filters = std::collections::HashMap::from([("label".to_string(), vec!["terminus.trial_id".to_string()])]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filters).build();
    let containers = docker.list_containers(Some(options)).await.unwrap();
    let job_dir = dir.path().join("killed");
    let id = job_id(&job_dir);
    let victim = containers
        .iter()
        .find(|c| c.labels.as_ref().is_some_and(|l| l.get("terminus.job_id") == Some(&id)))
        .and_then(|c| c.id.clone())
        .expect("the trial's container");
    docker.kill_container(&victim, None::<bollard::query_parameters::KillContainerOptions>).await.unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait_bounded()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    let trial = &trial_dirs(&job_dir)[0];
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["restarts"], 1, "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(containers_of_job(&docker, &id).await, 0);
}

/// kill -9 of the CLI in the middle of a job, then `terminus resume`: every planned trial has
/// exactly one result, and no container of the job remains.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_then_resume_runs_every_trial_exactly_once() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(400), 0).await.unwrap();
    let dir = temp_dir("kill9");
    let config = job_yaml(
        dir.path(),
        "kill9",
        &server.api_base(),
        "n_attempts: 6\nn_concurrent_trials: 2\n",
        &[example("hello-world")],
    );
    let job_dir = dir.path().join("kill9");
    let mut child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("two finished trials", Duration::from_secs(120), || trial_dirs(&job_dir).len() >= 2).await;
    wait_until("trials in flight", Duration::from_secs(60), || trial_like_dirs(&job_dir) > trial_dirs(&job_dir).len())
        .await;
    child.kill().unwrap();
    child.wait_bounded().unwrap();
    let id = job_id(&job_dir);
    let finished_before = trial_dirs(&job_dir).len();
    assert!(finished_before < 6, "the kill came mid-job");
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The live figures count the trials the first run finished (they come from the same
    // statistics as result.json): every reward is 1, so the running mean is 1 throughout.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rfind(|l| l.starts_with("finished ")).expect("progress lines");
    assert!(last.contains("(6/6)") && last.ends_with("mean reward 1.000 (harbor-0.26: 1.000)"), "{last}");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 6);
    let mut keys = HashSet::new();
    for trial in &trials {
        let config = read_json(&trial.join("config.json"));
        assert!(keys.insert(config["attempt"].as_u64().unwrap()), "attempt {} ran twice", config["attempt"]);
        assert_eq!(read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    }
    assert_eq!(trial_like_dirs(&job_dir), 6, "unfinished directories were cleaned");
    assert!(!job_dir.join(".control").exists(), "the control socket's directory went with the job");
    assert_eq!(job_id(&job_dir), id, "the resumed job keeps its id");
    let job = read_json(&job_dir.join("result.json"));
    assert!(job["finished_at"].is_string());
    assert_eq!(job["stats"]["n_finished_trials"], 6);
    assert_eq!(containers_of_job(&docker, &id).await, 0);
}

/// The directories of a job that are not its own hidden ones (`.control`, `.orphaned`).
fn trial_like_dirs(job_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(job_dir) else { return 0 };
    entries.flatten().filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.')).count()
}

/// kill -9 of a job whose file holds a secret, then a `resume` without that secret: refused
/// (exit 2, naming the variable) before anything runs, and the containers the killed run left
/// are removed all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_resume_still_reaps_what_the_killed_run_left() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(30_000), 0).await.unwrap();
    let dir = temp_dir("refused-resume");
    let extra = "n_attempts: 2\nn_concurrent_trials: 2\nenvironment:\n  env:\n    HF_TOKEN: hf_refusedresumecanary\n";
    let config = job_yaml(dir.path(), "refused", &server.api_base(), extra, &[example("hello-world")]);
    let job_dir = dir.path().join("refused");
    let mut child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("the first model call", Duration::from_secs(120), || !server.requests().is_empty()).await;
    let id = job_id(&job_dir);
    assert!(containers_of_job(&docker, &id).await > 0, "the trials' containers run");
    child.kill().unwrap();
    child.wait_bounded().unwrap();
    assert!(containers_of_job(&docker, &id).await > 0, "a kill -9 leaves them");
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HF_TOKEN"), "{stderr}");
    assert_eq!(containers_of_job(&docker, &id).await, 0, "{stderr}");
    server.shutdown();
}

/// SIGTERM cancels running trials, removes their containers, records them as cancelled and
/// exits 130 well within the grace period.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_cleanly_within_the_grace_period() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(30_000), 0).await.unwrap();
    let dir = temp_dir("sigterm");
    let config = job_yaml(
        dir.path(),
        "sigterm",
        &server.api_base(),
        "n_attempts: 2\ngrace_period_sec: 20\n",
        &[example("hello-world")],
    );
    let child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("both trials calling the model", Duration::from_secs(60), || server.requests().len() >= 2).await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status_bounded().unwrap().success());
    assert_exited_within_the_grace_period(child).await;
    let job_dir = dir.path().join("sigterm");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2);
    for trial in &trials {
        assert_eq!(read_json(&trial.join("result.json"))["exception_info"]["exception_type"], "CancelledError");
    }
    let job = read_json(&job_dir.join("result.json"));
    assert!(job["finished_at"].is_null(), "an interrupted job is not finished");
    assert_eq!(job["stats"]["n_cancelled_trials"], 2);
    assert_eq!(job["stats"]["n_running_trials"], 0, "{job}");
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// A task whose image lacks tmux, and whose package manager hangs: the terminal's set-up (tool
/// installation) takes as long as it is allowed to.
fn slow_setup_task(dir: &Path) -> PathBuf {
    task_built_from(
        dir,
        "slow-setup",
        "Create hello.txt.",
        "FROM terminus-base:bookworm\nRUN rm -f /usr/bin/tmux && printf '#!/bin/sh\\nexec sleep 600\\n' > /usr/local/bin/apt-get && chmod +x /usr/local/bin/apt-get\n",
    )
}

/// Waits for a `terminus` sent SIGTERM: it exits 130 having cancelled its trials itself, not
/// because its grace period ran out (which it says, before it removes what is left and exits).
async fn assert_exited_within_the_grace_period(child: Child) {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output_bounded()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupt: cancelling running trials"), "{stderr}");
    assert!(!stderr.contains("the grace period is over"), "the trials outlasted the grace period: {stderr}");
}

/// A trial's phases, as its result records them: each ends after it starts and before the
/// next one starts, all within the trial's own start and end.
fn assert_phases_in_order(result: &serde_json::Value) {
    let mut last = time_of(&result["started_at"]);
    for phase in ["environment_setup", "agent_setup", "agent_execution", "verifier"] {
        let (started, finished) = (time_of(&result[phase]["started_at"]), time_of(&result[phase]["finished_at"]));
        assert!(last <= started && started <= finished, "{phase} out of order: {result}");
        last = finished;
    }
    assert!(last <= time_of(&result["finished_at"]), "the trial ended before its last phase: {result}");
}

/// SIGTERM while a trial's terminal is still being set up (tmux being installed): the trial is
/// cancelled at once — it does not wait for the set-up — so the job exits within its grace
/// period with the trial recorded as cancelled and its container gone.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_slow_terminal_set_up_records_the_cancel_within_the_grace_period() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("slow-setup");
    let task = slow_setup_task(dir.path());
    let config = job_yaml(dir.path(), "slow-setup", &server.api_base(), "grace_period_sec: 20\n", &[task]);
    let child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    let job_dir = dir.path().join("slow-setup");
    // Wait until the set-up is stuck in the package manager inside the trial's container.
    let stuck = async || {
        if !job_dir.join("result.json").is_file() {
            return Err("no job result yet".to_string());
        }
        let id = job_id(&job_dir);
        let filters = std::collections::HashMap::from([("label".to_string(), vec![format!("terminus.job_id={id}")])]);
        let options = bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filters).build();
        let Some(container) = docker.list_containers(Some(options)).await.unwrap().into_iter().find_map(|c| c.id)
        else {
            return Err("no container yet".to_string());
        };
        let top = docker.top_processes(&container, None).await;
        let installing = top
            .ok()
            .and_then(|t| t.processes)
            .is_some_and(|procs| procs.iter().any(|p| p.iter().any(|field| field.contains("sleep 600"))));
        if installing { Ok(container) } else { Err("not in the package manager yet".to_string()) }
    };
    let container =
        poll("the set-up to reach the package manager", Duration::from_secs(180), Duration::from_millis(200), stuck)
            .await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status_bounded().unwrap().success());
    assert_exited_within_the_grace_period(child).await;
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 1, "the trial wrote its result");
    let result = read_json(&trials[0].join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "CancelledError", "{result}");
    assert!(docker.inspect_container(&container, None).await.is_err(), "the trial's container is gone");
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// Running a finished job again with only the model server's port changed reruns nothing; a
/// real change is refused with the difference named.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_port_reruns_nothing_and_a_changed_job_is_refused() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let first = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("port");
    let config = job_yaml(dir.path(), "port", &first.api_base(), "", &[example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    first.shutdown();
    let second = MockServer::start(hello(0), 0).await.unwrap();
    let config =
        job_yaml(dir.path(), "port", &second.api_base(), "n_concurrent_trials: 8\n", &[example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(second.requests().is_empty(), "nothing was run again");
    assert_eq!(trial_dirs(&dir.path().join("port")).len(), 1);
    let changed = job_yaml(dir.path(), "port", &second.api_base(), "n_attempts: 3\n", &[example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&changed, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("n_attempts: 1 -> 3"), "{stderr}");
}

/// `resume --only errored` reruns exactly the errored trials.
#[tokio::test(flavor = "multi_thread")]
async fn resume_only_errored_reruns_exactly_those() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let mut script = hello(0);
    // The repaired broken task (instruction "Nothing to do.") is simply declared complete.
    script.default = Some(reply(json!([]), true));
    let server = MockServer::start(script, 0).await.unwrap();
    let dir = temp_dir("only");
    let broken = broken_task(dir.path());
    let config = job_yaml(dir.path(), "only", &server.api_base(), "", &[broken.clone(), example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let job_dir = dir.path().join("only");
    let hello_dir = trial_dirs(&job_dir)
        .into_iter()
        .find(|t| read_json(&t.join("result.json"))["task_name"] == "hello-world")
        .unwrap();
    let hello_before = std::fs::read_to_string(hello_dir.join("result.json")).unwrap();
    let hello_requests = |server: &MockServer| server.requests().iter().filter(|r| r.conversation == Some(0)).count();
    let requests_before = hello_requests(&server);
    // Repair the broken task, then rerun only the errored trial.
    std::fs::write(broken.join("environment/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &["--only", "errored"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(hello_dir.join("result.json")).unwrap(),
        hello_before,
        "the finished trial was not touched"
    );
    assert_eq!(hello_requests(&server), requests_before, "hello-world was not run again");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2);
    let broken_result =
        trials.iter().map(|t| read_json(&t.join("result.json"))).find(|r| r["task_name"] == "broken-build").unwrap();
    assert!(broken_result["exception_info"].is_null(), "{broken_result}");
}

/// `terminus gc` removes containers of jobs whose orchestrator is gone.
#[tokio::test(flavor = "multi_thread")]
async fn gc_removes_containers_of_dead_jobs() {
    let Some(docker) = docker().await else { return };
    let engine = terminus_sandbox::Engine::connect().await.unwrap();
    let spec = terminus_sandbox::ContainerSpec {
        gpus: 0,
        aliases: Vec::new(),
        binds: Vec::new(),
        image: "terminus-base:bookworm".into(),
        name: format!("terminus-gc-test-{}", std::process::id()),
        labels: [
            ("terminus.job_id".to_string(), "gc-test-job".to_string()),
            ("terminus.pid".to_string(), "999999999".to_string()),
        ]
        .into_iter()
        .collect(),
        no_network: true,
        ..Default::default()
    };
    engine.start_container(&spec).await.unwrap();
    assert_eq!(containers_of_job(&docker, "gc-test-job").await, 1);
    let out = Command::new(terminus_bin()).arg("gc").output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(containers_of_job(&docker, "gc-test-job").await, 0);
}

/// `terminus tasks check` and `terminus jobs summarize`.
#[tokio::test(flavor = "multi_thread")]
async fn task_checks_and_job_summaries() {
    let out = Command::new(terminus_bin())
        .args(["tasks", "check"])
        .arg(repo_root().join("examples/tasks"))
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("6 of 6 tasks valid"));
    let dir = temp_dir("check");
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(bad.join("environment")).unwrap();
    std::fs::write(bad.join("task.toml"), "[agent\n").unwrap();
    let out = Command::new(terminus_bin()).args(["tasks", "check"]).arg(&bad).output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("INVALID"));

    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let out = Command::new(terminus_bin())
        .args(["run", "-p"])
        .arg(example("sort-numbers"))
        .args(["-a", "oracle", "-k", "2", "--jobs-dir"])
        .arg(dir.path())
        .args(["--job-name", "flags"])
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(terminus_bin())
        .args(["jobs", "summarize"])
        .arg(dir.path().join("flags"))
        .output_bounded()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("oracle__sort-numbers") || text.contains("oracle__adhoc"), "{text}");
    assert!(text.contains("sort-numbers  0 0"), "{text}");
}

/// More restarts than the intensity limit allows within its window: the job stops dispatching,
/// finishes what runs, exits 4, and `terminus resume` completes it.
#[tokio::test(flavor = "multi_thread")]
async fn too_many_restarts_halt_the_job_resumably() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(0), 0).await.unwrap();
    let dir = temp_dir("halt");
    let extra = "n_attempts: 4\nn_concurrent_trials: 1\nsupervision:\n  max_restarts: 1\n  intensity_max_restarts: 1\n  intensity_window_sec: 600\n";
    let config = job_yaml(dir.path(), "halt", &server.api_base(), extra, &[example("hello-world")]);
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("TERMINUS_CHAOS_PANIC_TASK", "hello-world")]))
            .await
            .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("halt");
    let job = read_json(&job_dir.join("result.json"));
    assert!(job["finished_at"].is_null(), "a halted job is not finished");
    assert!(job["stats"]["n_pending_trials"].as_u64().unwrap() > 0, "{job}");
    let total = job["n_total_trials"].as_u64().unwrap();
    let stats: terminus_core::stats::JobStats = serde_json::from_value(job["stats"].clone()).unwrap();
    assert!(stats.is_consistent(total), "{job}");
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    assert!(matches!(out.status.code(), Some(0) | Some(1)), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(trial_dirs(&job_dir).len(), 4, "every trial has a result after the resume");
    let job = read_json(&job_dir.join("result.json"));
    assert!(job["finished_at"].is_string());
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// A second `terminus` on a job directory that a running one holds is refused with its own exit
/// code, naming the holder — instead of resuming it and deleting the first one's trials — and
/// the first finishes untouched.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_terminus_on_a_running_job_is_refused() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello(1500), 0).await.unwrap();
    let dir = temp_dir("busy");
    let config = job_yaml(dir.path(), "busy", &server.api_base(), "n_attempts: 2\n", &[example("hello-world")]);
    let job_dir = dir.path().join("busy");
    let mut first = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("the first run's trials", Duration::from_secs(60), || !server.requests().is_empty()).await;
    for args in [vec!["run", "-c", config.to_str().unwrap()], vec!["resume", job_dir.to_str().unwrap()]] {
        let out = Command::new(terminus_bin()).args(&args).current_dir(repo_root()).output_bounded().unwrap();
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("in use by another terminus") && stderr.contains(&format!("pid {}", first.id())),
            "{stderr}"
        );
    }
    let status = tokio::task::spawn_blocking(move || first.wait_bounded()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2);
    for trial in &trials {
        assert_eq!(read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    }
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// `terminus gc` judges a container's job by its directory's lock, not by a pid (which may be
/// gone while the job is alive elsewhere in the process tree, or reused by another program).
#[tokio::test(flavor = "multi_thread")]
async fn gc_asks_the_job_directorys_lock() {
    let Some(docker) = docker().await else { return };
    let engine = terminus_sandbox::Engine::connect().await.unwrap();
    let jobs = temp_dir("gc-lock");
    let job_dir = jobs.path().join("job");
    let lock = terminus_actors::lock::JobLock::acquire(&job_dir).unwrap();
    let spec = terminus_sandbox::ContainerSpec {
        gpus: 0,
        aliases: Vec::new(),
        binds: Vec::new(),
        image: "terminus-base:bookworm".into(),
        name: format!("terminus-gc-lock-test-{}", std::process::id()),
        labels: [
            ("terminus.job_id".to_string(), "gc-lock-test-job".to_string()),
            // A dead pid: the old judgment would remove the container of this live job.
            ("terminus.pid".to_string(), "999999999".to_string()),
            ("terminus.job_dir".to_string(), job_dir.display().to_string()),
            ("terminus.host".to_string(), terminus_actors::lock::host_identity()),
        ]
        .into_iter()
        .collect(),
        no_network: true,
        ..Default::default()
    };
    engine.start_container(&spec).await.unwrap();
    let out = Command::new(terminus_bin()).arg("gc").output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(containers_of_job(&docker, "gc-lock-test-job").await, 1, "the job holds its lock: kept");
    drop(lock);
    let out = Command::new(terminus_bin()).arg("gc").output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(containers_of_job(&docker, "gc-lock-test-job").await, 0, "nobody holds it: removed");
}

/// After a result file is renamed into place, its directory is fsynced too (or a power cut could
/// lose the rename): read from the system calls of a real run under `strace`.
#[tokio::test(flavor = "multi_thread")]
async fn renamed_results_are_followed_by_a_directory_fsync() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("fsync");
    let trace = dir.path().join("strace.out");
    let jobs = dir.path().join("jobs");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat,rename,renameat,renameat2,fsync", "-o"])
        .arg(&trace)
        .arg(terminus_bin())
        .args(["run", "-q", "-m", "oracle", "--job-name", "fsync", "--jobs-dir"])
        .arg(&jobs)
        .arg("-p")
        .arg(example("hello-world"))
        .current_dir(repo_root())
        .output_bounded()
        .expect("strace runs (scripts/setup.sh installs it)");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trial = trial_dirs(&jobs.join("fsync")).remove(0);
    let result = trial.join("result.json").display().to_string();
    let trial_dir = trial.display().to_string();
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Each line: `<pid> <call>(<args>) = <ret>`. The thread that renamed the result opens the
    // trial directory and fsyncs that descriptor afterwards.
    let renamed = lines
        .iter()
        .position(|l| l.contains("rename") && l.contains(&format!(", \"{result}\"")) && l.ends_with("= 0"))
        .unwrap_or_else(|| panic!("no rename onto {result} in the trace"));
    let pid = lines[renamed].split_whitespace().next().unwrap();
    let after: Vec<&str> =
        lines[renamed..].iter().copied().filter(|l| l.split_whitespace().next() == Some(pid)).collect();
    let opened = after
        .iter()
        .find(|l| l.contains("openat(") && l.contains(&format!("\"{trial_dir}\",")))
        .and_then(|l| l.rsplit("= ").next())
        .unwrap_or_else(|| panic!("{trial_dir} is not opened after the rename: {after:?}"));
    assert!(
        after.iter().any(|l| l.contains(&format!("fsync({opened})"))),
        "the trial directory (fd {opened}) is not fsynced after the rename: {after:?}"
    );
}

/// The port a server listens on.
pub(crate) fn port_of(server: &MockServer) -> u16 {
    server.api_base().rsplit(':').next().unwrap().trim_end_matches("/v1").parse().unwrap()
}

/// The hello-world server (no delay) on `port`, once the one that had it has let it go.
pub(crate) async fn restart_on(port: u16) -> MockServer {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match MockServer::start(hello(0), port).await {
            Ok(server) => return server,
            Err(e) if Instant::now() > deadline => panic!("port {port} stays taken: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// SIGTERM after the broken trials have failed and while the others wait on the model: exit
/// 130 with those cancelled. Returns once it has exited.
async fn interrupt_when_waiting(child: Child, server: &MockServer, calls: usize, job_dir: &Path) {
    wait_until("the hello trials calling the model", Duration::from_secs(120), || server.requests().len() >= calls)
        .await;
    wait_until("the broken trials' results", Duration::from_secs(120), || errored_results(job_dir).len() == 2).await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status_bounded().unwrap().success());
    assert_exited_within_the_grace_period(child).await;
}

/// The texts of the results that record an environment build error (the broken task's).
fn errored_results(job_dir: &Path) -> Vec<String> {
    trial_dirs(job_dir)
        .iter()
        .map(|t| std::fs::read_to_string(t.join("result.json")).unwrap())
        .filter(|text| text.contains("EnvironmentBuildError"))
        .collect()
}

/// The hello-world trials' results.
fn hello_results(job_dir: &Path) -> Vec<serde_json::Value> {
    let results = trial_dirs(job_dir).iter().map(|t| read_json(&t.join("result.json"))).collect::<Vec<_>>();
    results.into_iter().filter(|r| r["task_name"] == "hello-world").collect()
}

/// A job interrupted by SIGTERM keeps its cancelled trials to run again: `resume --only
/// cancelled` runs exactly those (the errored trials' results are not touched), and a plain
/// `resume` runs them too, to their reward, as Harbor's resume runs cancelled trials again.
#[tokio::test(flavor = "multi_thread")]
async fn cancelled_trials_run_again_on_resume_and_only_cancelled_selects_exactly_them() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let slow = MockServer::start(hello(120_000), 0).await.unwrap();
    let port = port_of(&slow);
    let dir = temp_dir("resume-cancelled");
    let tasks = [broken_task(dir.path()), example("hello-world")];
    let extra = "n_attempts: 2\ngrace_period_sec: 20\n";
    let config = job_yaml(dir.path(), "resume-cancelled", &slow.api_base(), extra, &tasks);
    let job_dir = dir.path().join("resume-cancelled");
    let child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    interrupt_when_waiting(child, &slow, 2, &job_dir).await;
    let cancelled = hello_results(&job_dir);
    assert_eq!(cancelled.len(), 2);
    assert!(cancelled.iter().all(|r| r["exception_info"]["exception_type"] == "CancelledError"), "{cancelled:?}");
    let errored = errored_results(&job_dir);

    // Only the cancelled ones run again: two more calls, and the errored results stay as they were.
    let child = spawn_terminus(&["resume", job_dir.to_str().unwrap(), "--only", "cancelled"], &[]);
    interrupt_when_waiting(child, &slow, 4, &job_dir).await;
    assert_eq!(errored_results(&job_dir), errored, "the errored trials were not run again");
    assert_eq!(trial_dirs(&job_dir).len(), 4);
    slow.shutdown();

    // A plain resume runs the cancelled trials to their end, and leaves the errored ones.
    let fast = restart_on(port).await;
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let rewarded = hello_results(&job_dir);
    assert_eq!(rewarded.len(), 2);
    for result in &rewarded {
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    }
    assert_eq!(errored_results(&job_dir), errored, "the errored trials were not run again");
    assert!(!fast.requests().is_empty());
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
}

/// A second SIGTERM while the first one's cancellation runs stops at once: the job's containers
/// are removed, it exits 130 saying so, and it can be resumed to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_removes_the_containers_and_exits_at_once() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let slow = MockServer::start(hello(120_000), 0).await.unwrap();
    let port = port_of(&slow);
    let dir = temp_dir("second-signal");
    // A long grace period: the job would wait it out for a trial that does not end on the first.
    let extra = "n_attempts: 2\ngrace_period_sec: 300\n";
    let config = job_yaml(dir.path(), "second-signal", &slow.api_base(), extra, &[example("hello-world")]);
    let job_dir = dir.path().join("second-signal");
    let child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("both trials calling the model", Duration::from_secs(120), || slow.requests().len() >= 2).await;
    let id = job_id(&job_dir);
    assert!(containers_of_job(&docker, &id).await > 0);
    let pid = child.id().to_string();
    let started = Instant::now();
    for _ in 0..2 {
        assert!(Command::new("kill").args(["-TERM", &pid]).status_bounded().unwrap().success());
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output_bounded()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("second interrupt: removing the job's containers and exiting"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(60), "it did not wait for the grace period");
    assert_eq!(containers_of_job(&docker, &id).await, 0, "{stderr}");
    slow.shutdown();
    let fast = restart_on(port).await;
    let out = tokio::task::spawn_blocking(move || resume_terminus(&job_dir, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!fast.requests().is_empty());
}

/// `gc --images` removes the task images no container uses once no job runs, and keeps them all
/// while one does (it may be about to start a container from any of them).
#[tokio::test(flavor = "multi_thread")]
async fn gc_images_removes_task_images_only_when_no_job_runs() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let slow = MockServer::start(hello(120_000), 0).await.unwrap();
    let dir = temp_dir("gc-images");
    let unique = format!(
        "gc-images-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    let task = task_built_from(
        dir.path(),
        "hello-gc",
        "Create hello.txt.",
        &format!("FROM terminus-base:bookworm\nRUN echo {unique} > /marker\nWORKDIR /app\n"),
    );
    let config = job_yaml(dir.path(), "gc-images", &slow.api_base(), "", &[task]);
    let job_dir = dir.path().join("gc-images");
    let child = spawn_terminus(&["run", "-c", config.to_str().unwrap()], &[]);
    wait_until("the trial calling the model", Duration::from_secs(120), || !slow.requests().is_empty()).await;
    let ours = |images: Vec<String>| {
        images.into_iter().filter(|t| t.starts_with("terminus-task-hello-gc:")).collect::<Vec<_>>()
    };
    let engine = terminus_sandbox::Engine::connect().await.unwrap();
    let tags = ours(engine.images_with_prefix("terminus-task-").await.unwrap());
    assert_eq!(tags.len(), 1, "{tags:?}");
    let gc = || Command::new(terminus_bin()).args(["gc", "--images"]).output_bounded().unwrap();
    let out = gc();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("kept task images: a job is running"), "{stdout}");
    assert_eq!(ours(engine.images_with_prefix("terminus-task-").await.unwrap()), tags);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status_bounded().unwrap().success());
    let _ = tokio::task::spawn_blocking(move || child.wait_with_output_bounded()).await.unwrap().unwrap();
    assert_eq!(containers_of_job(&docker, &job_id(&job_dir)).await, 0);
    let out = gc();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("task image(s)") && !stdout.contains("removed 0 task image(s)"), "{stdout}");
    assert!(ours(engine.images_with_prefix("terminus-task-").await.unwrap()).is_empty(), "{stdout}");
    assert!(docker.inspect_image("terminus-base:bookworm").await.is_ok(), "the base image is not a task image");
}

/// `trials start -p TASK_DIR` runs one trial of one task (the oracle unless `-a` says) into a
/// job directory under `--trials-dir` named after the task's directory and the time, and
/// prints its result; a directory that is not a task is refused with exit 2.
#[tokio::test(flavor = "multi_thread")]
async fn trials_start_runs_one_trial_of_one_task() {
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("trials-start");
    // A task named `org/name` in a directory named otherwise.
    let task = crate::support::copy_task(&example("hello-world"), &dir.path().join("checkout"));
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(task.join("task.toml"), format!("[task]\nname = \"acme/greeting\"\n\n{toml}")).unwrap();
    let trials = dir.path().join("trials");
    let out = Command::new(terminus_bin())
        .args(["trials", "start", "-p"])
        .arg(&task)
        .arg("--trials-dir")
        .arg(&trials)
        .current_dir(repo_root())
        .output_bounded()
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{printed}");
    let jobs: Vec<PathBuf> = std::fs::read_dir(&trials).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let name = jobs[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("checkout__20"), "named after the directory and the time: {name}");
    let results = trial_dirs(&jobs[0]);
    assert_eq!(results.len(), 1);
    let result = read_json(&results[0].join("result.json"));
    assert_eq!(result["task_name"], "acme/greeting", "{result}");
    assert_eq!(result["agent_info"]["name"], "oracle", "{result}");
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    assert!(printed.contains("1.000"), "the reward is printed: {printed}");
    assert_eq!(containers_of_job(&docker, &job_id(&jobs[0])).await, 0);
    let out = Command::new(terminus_bin())
        .args(["trials", "start", "-p"])
        .arg(dir.path())
        .arg("--trials-dir")
        .arg(&trials)
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a task directory"));
}

/// `tasks check --build` builds each task's image under the tag a trial uses; a task whose image does not build is INVALID with the build's error and
/// exit 2, its sibling still checked.
#[tokio::test(flavor = "multi_thread")]
async fn tasks_check_build_builds_what_trials_use_and_names_what_does_not_build() {
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("check-build");
    let unique = format!(
        "check-build-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    );
    let dockerfile = format!("FROM terminus-base:bookworm\nRUN echo {unique} > /marker\nWORKDIR /app\n");
    let good = task_built_from(dir.path(), "checked-good", "Create hello.txt.", &dockerfile);
    task_built_from(
        dir.path(),
        "broken",
        "Nothing to do.",
        "FROM terminus-base:bookworm\nRUN echo WILL-FAIL && exit 7\n",
    );
    let tasks = dir.path().join("tasks");
    let out = Command::new(terminus_bin()).args(["tasks", "check", "--build"]).arg(&tasks).output_bounded().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    let line =
        |name: &str| stdout.lines().find(|l| l.contains(&format!("tasks/{name}"))).unwrap_or_default().to_string();
    assert!(line("checked-good").starts_with("ok "), "{stdout}");
    assert!(line("broken").starts_with("INVALID "), "{stdout}");
    assert!(stdout.contains("returned a non-zero code: 7"), "the build's error: {stdout}");
    assert!(stdout.contains("1 of 2 tasks valid"), "{stdout}");
    let tag = line("checked-good").split_whitespace().last().unwrap().to_string();
    assert!(tag.starts_with("terminus-task-checked-good:"), "{stdout}");
    assert!(docker.inspect_image(&tag).await.is_ok(), "{tag}");
    // A trial of the task uses the image under that tag: no other tag of the task appears.
    let engine = terminus_sandbox::Engine::connect().await.unwrap();
    let out = Command::new(terminus_bin())
        .args(["run", "-p"])
        .arg(&good)
        .args(["-a", "oracle", "--jobs-dir"])
        .arg(dir.path())
        .args(["--job-name", "after-check"])
        .current_dir(repo_root())
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(engine.images_with_prefix("terminus-task-checked-good:").await.unwrap(), [tag]);
}
