//! Chaos cases that break the run from outside: kill -9 of the orchestrator then resume,
//! containers killed under running trials, model faults, and a restarted Docker engine.

use crate::case::*;
use rand::Rng;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};
use terminus_bench::{JobFile, hello_world_script, job_id, repo_root, spawn_terminus, tally, trial_results};
use terminus_mock_llm::{Faults, MockServer};
use terminus_sandbox::{Engine, LABEL_JOB_ID};

/// kill -9 at random moments, resume, ten times; then a last resume to the end.
pub(super) async fn kill9(ctx: &Ctx) -> anyhow::Result<Case> {
    // TERMINUS_CHAOS_SMOKE=1 (scripts/test.sh): a short run of the same case.
    let smoke = std::env::var("TERMINUS_CHAOS_SMOKE").is_ok_and(|v| v == "1");
    let (trials, n_kills) = if smoke { (24, 3) } else { (100, 10) };
    let started = Instant::now();
    let dir = ctx.case_dir("kill9")?;
    let server = MockServer::start(hello_world_script(0.3), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: trials,
        concurrency: 8,
        kwargs: "",
        extra: "",
    }
    .write()?;
    let job_dir = dir.join("job");
    let log = dir.join("terminus.log");
    let mut rng = rand::rng();
    let mut child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
    // Ten kill points spread over the job: after a random number of finished trials, plus a
    // random fraction of a trial so the kill lands mid-trial, not between trials.
    // The last kill point leaves more than one wave of trials to run (concurrency 8), so the
    // jitter below cannot outlast the job and the kill always meets a live process.
    let mut targets: Vec<usize> = (0..n_kills).map(|_| rng.random_range(2..trials - 10)).collect();
    targets.sort_unstable();
    let mut kills = 0;
    let mut finished_at_kill = Vec::new();
    let deadline = Instant::now() + JOB_DEADLINE;
    for target in targets {
        while trial_results(&job_dir).len() < target && Instant::now() < deadline && child.try_wait()?.is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs_f64(rng.random_range(0.0..1.5))).await;
        if child.try_wait()?.is_some() {
            break;
        }
        child.kill()?;
        child.wait()?;
        kills += 1;
        finished_at_kill.push(trial_results(&job_dir).len());
        child = spawn_terminus(&["resume", "-q", job_dir.to_str().unwrap_or_default()], &dir, &log)?;
    }
    let code = wait_bounded(child, JOB_DEADLINE).await;
    server.shutdown();
    let tally = tally(&job_dir, trials, &ctx.engine).await;
    let errors = errored(&job_dir);
    Ok(Case {
        name: "kill9",
        tally,
        checks: vec![
            (format!("{kills} kills landed mid-job"), kills == n_kills),
            (format!("the last resume exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
        ],
        figures: json!({"kills": kills, "results_at_each_kill": finished_at_kill, "exit_code": code}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The engine's API kills a random running container of the job, 20 times.
pub(super) async fn container_kills(ctx: &Ctx) -> anyhow::Result<Case> {
    const TRIALS: usize = 40;
    const KILLS: usize = 20;
    let started = Instant::now();
    let dir = ctx.case_dir("container-kills")?;
    let server = MockServer::start(hello_world_script(1.5), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 8,
        kwargs: "",
        extra: "supervision:\n  max_restarts: 5\n  intensity_max_restarts: 100\n",
    }
    .write()?;
    let job_dir = dir.join("job");
    let log = dir.join("terminus.log");
    let mut child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
    let mut kills = 0;
    let mut rng = rand::rng();
    let deadline = Instant::now() + JOB_DEADLINE;
    while kills < KILLS && Instant::now() < deadline && child.try_wait()?.is_none() {
        tokio::time::sleep(Duration::from_secs_f64(rng.random_range(0.3..1.2))).await;
        let Some(id) = job_id(&job_dir) else { continue };
        let running = ctx.engine.running_with_label(&format!("{LABEL_JOB_ID}={id}")).await.unwrap_or_default();
        if running.is_empty() {
            continue;
        }
        let victim = &running[rng.random_range(0..running.len())];
        if ctx.engine.kill_container(victim).await.is_ok() {
            kills += 1;
        }
    }
    let code = wait_bounded(child, JOB_DEADLINE).await;
    server.shutdown();
    let tally = tally(&job_dir, TRIALS, &ctx.engine).await;
    let errors = errored(&job_dir);
    let restarts = job_stat(&job_dir, "n_restarts");
    Ok(Case {
        name: "container-kills",
        tally,
        checks: vec![
            (format!("{kills} containers killed (wanted {KILLS})"), kills == KILLS),
            (format!("the job exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
            (format!("{restarts} restarts"), restarts.as_u64().unwrap_or(0) > 0),
        ],
        figures: json!({"kills": kills, "restarts": restarts, "exit_code": code}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// 429s with Retry-After, 500s, garbage bodies and dropped connections from the model server.
pub(super) async fn llm_faults(ctx: &Ctx) -> anyhow::Result<Case> {
    const TRIALS: usize = 40;
    let started = Instant::now();
    let dir = ctx.case_dir("llm-faults")?;
    let mut script = hello_world_script(0.1);
    script.faults = Some(Faults {
        seed: 7,
        rate_limited: 0.15,
        retry_after_sec: Some(0.2),
        server_error: 0.1,
        dropped: 0.05,
        malformed: 0.05,
    });
    let server = MockServer::start(script, 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 8,
        kwargs: "",
        extra: "llm:\n  max_attempts: 12\n  base_delay_sec: 0.05\n  max_delay_sec: 0.5\n",
    }
    .write()?;
    let job_dir = dir.join("job");
    let log = dir.join("terminus.log");
    let child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let tally = tally(&job_dir, TRIALS, &ctx.engine).await;
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    for request in server.requests() {
        if let Some(fault) = request.fault {
            *faults.entry(fault).or_default() += 1;
        }
    }
    let served = server.served_usage();
    server.shutdown();
    let results = trial_results(&job_dir);
    let sum = |key: &str| results.iter().filter_map(|r| r["agent_result"][key].as_u64()).sum::<u64>();
    let retries: u64 = results.iter().filter_map(|r| r["agent_result"]["metadata"]["llm_retries"].as_u64()).sum();
    let injected: usize = faults.values().sum();
    let (input, output) = (sum("n_input_tokens"), sum("n_output_tokens"));
    let errors = errored(&job_dir);
    Ok(Case {
        name: "llm-faults",
        tally,
        checks: vec![
            (format!("the job exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
            (
                format!("{injected} faults injected, {retries} retries counted"),
                injected > 0 && retries == injected as u64,
            ),
            (
                format!(
                    "tokens in results {input}/{output} = served {}/{}",
                    served.prompt_tokens, served.completion_tokens
                ),
                (input, output) == (served.prompt_tokens, served.completion_tokens),
            ),
        ],
        figures: json!({"faults": faults, "retries": retries, "exit_code": code}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The pid of the running dockerd, if any.
pub(super) fn dockerd_pid() -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // A zombie is not an engine.
        let state = stat.rsplit(')').next()?.split_whitespace().next()?.to_string();
        (comm.trim() == "dockerd" && state != "Z").then_some(pid)
    })
}

/// Stops dockerd (SIGTERM, as a service manager would) and starts it again with `scripts/setup.sh`.
pub(super) async fn restart_dockerd(log: &Path) -> anyhow::Result<f64> {
    let started = Instant::now();
    let pid = dockerd_pid().ok_or_else(|| anyhow::anyhow!("no dockerd process to restart"))?;
    #[expect(unsafe_code, reason = "a libc call with no safe wrapper in our dependencies")]
    // SAFETY: kill(2) with a pid we just read and a standard signal has no memory effects.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) } == 0;
    anyhow::ensure!(sent, "cannot signal dockerd (pid {pid})");
    let deadline = Instant::now() + Duration::from_secs(60);
    while dockerd_pid() == Some(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let status = Command::new(repo_root().join("scripts/setup.sh")).stdout(file.try_clone()?).stderr(file).status()?;
    anyhow::ensure!(status.success(), "scripts/setup.sh could not start dockerd again (see {})", log.display());
    Ok(started.elapsed().as_secs_f64())
}

/// dockerd stopped and started again mid-job.
pub(super) async fn dockerd_restart(ctx: &Ctx) -> anyhow::Result<Case> {
    const TRIALS: usize = 40;
    let started = Instant::now();
    let dir = ctx.case_dir("dockerd-restart")?;
    let server = MockServer::start(hello_world_script(1.0), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 8,
        kwargs: "",
        // The default policies (no retries, one restart per trial): an engine restart must not
        // cost a user's job anything even when they configured nothing.
        extra: "",
    }
    .write()?;
    let job_dir = dir.join("job");
    let log = dir.join("terminus.log");
    let child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
    let deadline = Instant::now() + JOB_DEADLINE;
    while trial_results(&job_dir).len() < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let finished_before = trial_results(&job_dir).len();
    let downtime = restart_dockerd(&dir.join("dockerd-restart.log")).await;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    server.shutdown();
    // The engine was restarted: connect again.
    let engine = Engine::connect().await?;
    let tally = tally(&job_dir, TRIALS, &engine).await;
    let errors = errored(&job_dir);
    let restarts = job_stat(&job_dir, "n_restarts");
    let retries = job_stat(&job_dir, "n_retries");
    Ok(Case {
        name: "dockerd-restart",
        tally,
        checks: vec![
            (format!("dockerd restarted: {downtime:.1?} s"), downtime.is_ok()),
            (format!("the restart came mid-job ({finished_before} of {TRIALS} done)"), finished_before < TRIALS),
            (format!("the job exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
        ],
        figures: json!({
            "restart_sec": downtime.as_ref().ok(),
            "finished_before_restart": finished_before,
            "errored": errors,
            "restarts": restarts,
            "retries": retries,
            "exit_code": code,
        }),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Every file under `root` (path → size and mtime), leaving out `skip`.
pub(super) fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.starts_with(skip) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                // A directory counts by its existence: its mtime moves with every child.
                stack.push(path.clone());
                files.insert(path, (0, SystemTime::UNIX_EPOCH));
            } else {
                files.insert(path, (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
            }
        }
    }
    files
}

/// How many entries differ between two snapshots.
pub(super) fn changed(
    before: &BTreeMap<PathBuf, (u64, SystemTime)>,
    after: &BTreeMap<PathBuf, (u64, SystemTime)>,
) -> Vec<PathBuf> {
    let keys: HashSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let mut out: Vec<PathBuf> =
        keys.into_iter().filter(|k| before.get(*k) != after.get(*k)).map(|k| k.to_path_buf()).collect();
    out.sort();
    out
}
