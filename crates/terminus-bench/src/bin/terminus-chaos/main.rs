//! `terminus-chaos`: breaks things on purpose and counts what survives.
//!
//! Every case drives the real `terminus` binary against the real engine with the mock model on
//! loopback, then prints expected / present / duplicated / leaked:
//!
//! - `kill9`: kill -9 of the orchestrator at random moments of a 100-trial job, then
//!   `terminus resume`, ten times, and a last resume to the end;
//! - `container-kills`: the engine's API kills a random running trial container, 20 times in one job;
//! - `llm-faults`: the mock model answers with 429 + Retry-After, 500, garbage bodies and dropped
//!   connections; token totals must equal what the server sent;
//! - `dockerd-restart`: dockerd is stopped and started again in the middle of a job (trials may
//!   error or restart; none may be lost or run twice);
//! - `bad-inputs`: 20 malformed job files and 20 malformed tasks, each a clear error with the
//!   documented exit code and nothing written outside the job directory;
//! - `adversary`: hostile models, agents and tasks beside ordinary trials (degenerate replies,
//!   dash-led keys, planted rewards and survivors, a terminal flood, a log and file-count bomb,
//!   a fork bomb, task links), two runs of one job directory, a full loop-mounted disk, and a
//!   stopped dockerd (see [`adversary`]);
//! - `lost-lines`: 48 trials at 24 at once, then 100 at once, whose terminals print numbered
//!   lines at random delays while the agent looks: every line of each pane log must be in the
//!   trial's observations, in order (see [`lost_lines`]);
//! - `runaway`: degenerate replies, summaries larger than the context, a model that never says
//!   done, a budget reached mid-job, each a job that must end by itself with bounded calls,
//!   disk and orchestrator memory (see [`runaway`]).
//!
//! For a trial job, "present" counts the planned trials that have a result and "leaked" the
//! job's containers left on the engine. For `bad-inputs`, "present" counts the inputs answered
//! with the expected exit code and a message naming the culprit, and "leaked" counts files
//! written outside the job directory plus containers left.
//!
//! Run with: `scripts/chaos.sh [CASE...]`

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use rand::Rng;
use serde_json::{Value, json};
use terminus_bench::{
    JobFile, Tally, hello_world_script, job_id, job_result, repo_root, spawn_terminus, tally, terminus_bin,
    trial_results,
};
use terminus_mock_llm::{Faults, MockServer};
use terminus_sandbox::{Engine, LABEL_JOB_ID};

mod adversary;
mod hostile_tasks;
mod lost_lines;
mod node_loss;
mod runaway;

const CASES: [&str; 10] = [
    "kill9",
    "container-kills",
    "llm-faults",
    "dockerd-restart",
    "bad-inputs",
    "adversary",
    "lost-lines",
    "runaway",
    "hostile-tasks",
    "node-loss",
];

/// How long one job of a case may take before the case fails (the suite must stay bounded).
const JOB_DEADLINE: Duration = Duration::from_secs(600);

struct Case {
    name: &'static str,
    tally: Tally,
    /// Further conditions of the case (exit codes, token totals, …) that held or not.
    checks: Vec<(String, bool)>,
    figures: Value,
    seconds: f64,
}

impl Case {
    fn ok(&self) -> bool {
        self.tally.ok() && self.checks.iter().all(|(_, ok)| *ok)
    }
}

/// Where a case keeps its files: `target/chaos/<run>/<case>/`.
struct Ctx {
    engine: Engine,
    root: PathBuf,
    hello: PathBuf,
}

impl Ctx {
    fn case_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// Waits for a child at most `deadline`; a child that overstays is killed and counts as failed.
async fn wait_bounded(mut child: Child, deadline: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code(),
            Ok(None) if started.elapsed() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

fn job_stat(job_dir: &Path, key: &str) -> Value {
    job_result(job_dir).map(|v| v["stats"][key].clone()).unwrap_or(Value::Null)
}

fn errored(job_dir: &Path) -> usize {
    trial_results(job_dir).iter().filter(|r| !r["exception_info"].is_null()).count()
}

/// kill -9 at random moments, resume, ten times; then a last resume to the end.
async fn kill9(ctx: &Ctx) -> anyhow::Result<Case> {
    const TRIALS: usize = 100;
    let started = Instant::now();
    let dir = ctx.case_dir("kill9")?;
    let server = MockServer::start(hello_world_script(0.3), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
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
    let mut targets: Vec<usize> = (0..10).map(|_| rng.random_range(2..TRIALS - 5)).collect();
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
    let tally = tally(&job_dir, TRIALS, &ctx.engine).await;
    let errors = errored(&job_dir);
    Ok(Case {
        name: "kill9",
        tally,
        checks: vec![
            (format!("{kills} kills landed mid-job"), kills == 10),
            (format!("the last resume exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
        ],
        figures: json!({"kills": kills, "results_at_each_kill": finished_at_kill, "exit_code": code}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The engine's API kills a random running container of the job, 20 times.
async fn container_kills(ctx: &Ctx) -> anyhow::Result<Case> {
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
async fn llm_faults(ctx: &Ctx) -> anyhow::Result<Case> {
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
fn dockerd_pid() -> Option<i32> {
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
async fn restart_dockerd(log: &Path) -> anyhow::Result<f64> {
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
async fn dockerd_restart(ctx: &Ctx) -> anyhow::Result<Case> {
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
fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
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
fn changed(
    before: &BTreeMap<PathBuf, (u64, SystemTime)>,
    after: &BTreeMap<PathBuf, (u64, SystemTime)>,
) -> Vec<PathBuf> {
    let keys: HashSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    let mut out: Vec<PathBuf> =
        keys.into_iter().filter(|k| before.get(*k) != after.get(*k)).map(|k| k.to_path_buf()).collect();
    out.sort();
    out
}

/// Malformed job files: (file stem, YAML, words the error must contain besides the file name).
fn bad_job_files(task: &Path, api_base: &str) -> Vec<(&'static str, String, Vec<&'static str>)> {
    let task = task.display();
    let head = |jobs: &str| format!("jobs_dir: {jobs}\njob_name: bad\n");
    let agent = format!(
        "agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api_base}\n"
    );
    let tasks = format!("tasks:\n  - path: {task}\n");
    let ok = |extra: &str| format!("{}{extra}{agent}{tasks}", head("jobs"));
    vec![
        ("not-yaml", "agents: [\n  - name: {{\n".to_string(), vec![]),
        ("empty", String::new(), vec!["tasks"]),
        ("a-list", "- one\n- two\n".to_string(), vec![]),
        ("attempts-negative", ok("n_attempts: -1\n"), vec!["n_attempts"]),
        ("attempts-word", ok("n_attempts: three\n"), vec!["n_attempts"]),
        ("concurrency-zero", ok("n_concurrent_trials: 0\n"), vec!["n_concurrent_trials"]),
        ("no-agents", format!("{}agents: []\n{tasks}", head("jobs")), vec!["agents"]),
        (
            "kwargs-not-a-map",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs: fast\n{tasks}",
                head("jobs")
            ),
            vec!["kwargs"],
        ),
        (
            "unknown-agent",
            format!("{}agents:\n  - name: terminus-9\n    model_name: openai/gpt-4o\n{tasks}", head("jobs")),
            vec!["terminus-9"],
        ),
        (
            "missing-task",
            format!("{}{agent}tasks:\n  - path: /nonexistent/task-dir\n", head("jobs")),
            vec!["/nonexistent/task-dir"],
        ),
        ("no-tasks", format!("{}{agent}", head("jobs")), vec!["tasks"]),
        ("retries-negative", ok("retry:\n  max_retries: -3\n"), vec!["retry.max_retries"]),
        ("window-zero", ok("supervision:\n  intensity_window_sec: 0\n"), vec!["supervision.intensity_window_sec"]),
        ("metric-median", ok("metrics:\n  - type: median\n"), vec!["metrics[0].type"]),
        ("artifact-relative", ok("artifacts:\n  - logs/out.txt\n"), vec!["artifacts[0]"]),
        (
            "temperature-word",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      temperature: hot\n{tasks}",
                head("jobs")
            ),
            vec!["temperature"],
        ),
        (
            "parser-yaml",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      parser_name: yaml\n{tasks}",
                head("jobs")
            ),
            vec!["parser_name"],
        ),
        ("llm-zero-requests", ok("llm:\n  max_concurrent_requests: 0\n"), vec!["max_concurrent_requests"]),
        ("timeout-multiplier-negative", ok("timeout_multiplier: -1\n"), vec!["timeout_multiplier"]),
        ("job-name-escapes", format!("jobs_dir: jobs\njob_name: ../../escaped\n{agent}{tasks}"), vec!["job_name"]),
    ]
}

/// A malformed task: (name, how to break a copy of hello-world, expected exit code of `run`,
/// words its error must contain).
type Breaker = fn(&Path) -> std::io::Result<()>;

fn write(path: PathBuf, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

fn append_toml(dir: &Path, text: &str) -> std::io::Result<()> {
    let mut toml = std::fs::read_to_string(dir.join("task.toml"))?;
    toml.push_str(text);
    std::fs::write(dir.join("task.toml"), toml)
}

fn set_section(dir: &Path, section: &str, line: &str) -> std::io::Result<()> {
    let toml = std::fs::read_to_string(dir.join("task.toml"))?;
    let header = format!("[{section}]\n");
    let toml = toml.replacen(&header, &format!("{header}{line}\n"), 1);
    // Later keys of the same name would win in TOML's eyes (and be an error): drop the originals.
    let mut seen = false;
    let key = line.split('=').next().unwrap_or_default().trim().to_string();
    let mut out = String::new();
    let mut in_section = false;
    for l in toml.lines() {
        if l.starts_with('[') {
            in_section = l == format!("[{section}]");
        }
        if in_section && l.split('=').next().unwrap_or_default().trim() == key {
            if seen {
                continue;
            }
            seen = true;
        }
        out.push_str(l);
        out.push('\n');
    }
    std::fs::write(dir.join("task.toml"), out)
}

fn bad_tasks() -> Vec<(&'static str, Breaker, u8, Vec<&'static str>)> {
    vec![
        ("no-task-toml", |d| std::fs::remove_file(d.join("task.toml")), 2, vec!["lacks task.toml"]),
        ("no-instruction", |d| std::fs::remove_file(d.join("instruction.md")), 2, vec!["lacks instruction.md"]),
        ("no-environment", |d| std::fs::remove_dir_all(d.join("environment")), 2, vec!["lacks environment/"]),
        ("no-test-sh", |d| std::fs::remove_file(d.join("tests/test.sh")), 2, vec!["lacks tests/test.sh"]),
        ("toml-syntax", |d| append_toml(d, "[agent\ntimeout_sec = \n"), 1, vec!["task.toml"]),
        (
            "toml-wrong-type",
            |d| set_section(d, "agent", "timeout_sec = \"soon\""),
            1,
            vec!["task.toml", "agent.timeout_sec"],
        ),
        ("windows", |d| set_section(d, "environment", "os = \"windows\""), 1, vec!["linux"]),
        ("gpus", |d| set_section(d, "environment", "gpus = 2"), 1, vec!["gpus"]),
        ("memory-word", |d| set_section(d, "environment", "memory = \"lots\""), 1, vec!["environment.memory"]),
        (
            "negative-timeout",
            |d| set_section(d, "agent", "timeout_sec = -5.0"),
            1,
            vec!["agent.timeout_sec", "positive"],
        ),
        ("no-dockerfile", |d| std::fs::remove_file(d.join("environment/Dockerfile")), 1, vec!["Dockerfile"]),
        (
            "dockerfile-syntax",
            |d| write(d.join("environment/Dockerfile"), "FROMM terminus-base:bookworm\n"),
            1,
            vec!["FROMM"],
        ),
        (
            "dockerfile-no-image",
            |d| write(d.join("environment/Dockerfile"), "FROM terminus-nonexistent:none\n"),
            1,
            vec!["terminus-nonexistent"],
        ),
        (
            "dockerfile-run-fails",
            |d| write(d.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN exit 3\n"),
            1,
            vec!["exit 3"],
        ),
        (
            "no-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho checked\n"),
            1,
            vec!["RewardFileNotFoundError"],
        ),
        (
            "empty-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\n: > /logs/verifier/reward.txt\n"),
            1,
            vec!["RewardFileEmptyError"],
        ),
        (
            "word-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho yes > /logs/verifier/reward.txt\n"),
            1,
            vec!["VerifierOutputParseError"],
        ),
        (
            "broken-reward-json",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho '{\"reward\": ' > /logs/verifier/reward.json\n"),
            1,
            vec!["VerifierOutputParseError"],
        ),
        (
            "verifier-hangs",
            |d| {
                write(d.join("tests/test.sh"), "#!/bin/bash\nsleep 600\n")?;
                set_section(d, "verifier", "timeout_sec = 2.0")
            },
            1,
            vec!["VerifierTimeoutError"],
        ),
        (
            "bad-shebang",
            |d| write(d.join("tests/test.sh"), "#!/nonexistent/interpreter\necho 1 > /logs/verifier/reward.txt\n"),
            1,
            vec!["RewardFileNotFoundError"],
        ),
    ]
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// 20 malformed job files and 20 malformed tasks.
async fn bad_inputs(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("bad-inputs")?;
    // The jobs directory exists beforehand, so that any file under it counts as written.
    let _ = std::fs::remove_dir_all(dir.join("jobs"));
    std::fs::create_dir_all(dir.join("jobs"))?;
    let server = MockServer::start(hello_world_script(0.1), 0).await?;
    let api_base = server.api_base();
    let log = dir.join("terminus.log");
    let mut failures = Vec::new();
    let mut answered = 0;
    let mut stray = 0;
    let mut inputs = 0;

    // Job files: refused before anything runs, exit 2, the file and the key named.
    for (stem, yaml, words) in bad_job_files(&ctx.hello, &api_base) {
        inputs += 1;
        let file = dir.join(format!("bad-{stem}.yaml"));
        std::fs::write(&file, yaml)?;
        let before = snapshot(&dir, &log);
        let output = Command::new(terminus_bin())
            .args(["run", "-q", "-c"])
            .arg(&file)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()?;
        let after = snapshot(&dir, &log);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        let named = stderr.contains(&format!("bad-{stem}.yaml")) && words.iter().all(|w| stderr.contains(w));
        let written = changed(&before, &after);
        stray += written.len();
        if code == Some(2) && named {
            answered += 1;
        } else {
            failures.push(format!("job file {stem}: exit {code:?}, stderr: {}", stderr.trim()));
        }
        if !written.is_empty() {
            failures.push(format!("job file {stem} wrote {written:?}"));
        }
    }

    // Tasks: one job holding every broken task that loads as a task, plus hello-world. Each
    // broken trial errors with its own message, hello-world still passes, the job exits 1.
    let tasks_dir = dir.join("tasks");
    let _ = std::fs::remove_dir_all(&tasks_dir);
    let mut in_job = Vec::new();
    for (name, breaker, exit, words) in bad_tasks() {
        inputs += 1;
        let task = tasks_dir.join(name);
        copy_dir(&ctx.hello, &task)?;
        breaker(&task)?;
        if exit == 2 {
            // Not a task directory: `run -p` refuses it and names it.
            let before = snapshot(&dir, &log);
            let output = Command::new(terminus_bin())
                .args(["run", "-q", "--jobs-dir", "jobs", "--job-name", name, "-m", "oracle", "-p"])
                .arg(&task)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .output()?;
            let after = snapshot(&dir, &log);
            let stderr = String::from_utf8_lossy(&output.stderr);
            let code = output.status.code();
            let written = changed(&before, &after);
            stray += written.len();
            if code == Some(2) && stderr.contains(name) && words.iter().all(|w| stderr.contains(w)) {
                answered += 1;
            } else {
                failures.push(format!("task {name}: exit {code:?}, stderr: {}", stderr.trim()));
            }
            if !written.is_empty() {
                failures.push(format!("task {name} wrote {written:?}"));
            }
        } else {
            in_job.push((name, words));
        }
    }
    let mut yaml = format!(
        "jobs_dir: jobs\njob_name: broken-tasks\nn_concurrent_trials: 4\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api_base}\ntasks:\n  - path: {}\n",
        ctx.hello.display()
    );
    for (name, _) in &in_job {
        yaml.push_str(&format!("  - path: tasks/{name}\n"));
    }
    let job_file = dir.join("broken-tasks.yaml");
    std::fs::write(&job_file, yaml)?;
    let job_dir = dir.join("jobs/broken-tasks");
    let before = snapshot(&dir, &job_dir);
    let child = spawn_terminus(&["run", "-q", "-c", "broken-tasks.yaml"], &dir, &log)?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let after = snapshot(&dir, &job_dir);
    server.shutdown();
    let written: Vec<PathBuf> = changed(&before, &after).into_iter().filter(|p| p != &log).collect();
    stray += written.len();
    if !written.is_empty() {
        failures.push(format!("the broken-tasks job wrote outside its directory: {written:?}"));
    }
    let results = trial_results(&job_dir);
    let by_task: BTreeMap<String, &Value> =
        results.iter().map(|r| (r["task_name"].as_str().unwrap_or_default().to_string(), r)).collect();
    for (name, words) in &in_job {
        let Some(result) = by_task.get(*name) else {
            failures.push(format!("task {name}: no trial result"));
            continue;
        };
        let error = result["exception_info"].to_string();
        if code == Some(1) && words.iter().all(|w| error.contains(w)) {
            answered += 1;
        } else {
            failures.push(format!("task {name}: job exit {code:?}, error {error}"));
        }
    }
    let hello_reward = by_task.get("hello-world").map(|r| r["verifier_result"]["rewards"]["reward"].clone());
    let leaked_containers = match job_id(&job_dir) {
        Some(id) => ctx.engine.containers_with_label(LABEL_JOB_ID, Some(&id)).await.map(|c| c.len()).unwrap_or(0),
        None => 0,
    };
    for failure in &failures {
        println!("    {failure}");
    }
    Ok(Case {
        name: "bad-inputs",
        tally: Tally { expected: inputs, present: answered, duplicated: 0, leaked: stray + leaked_containers },
        checks: vec![(
            format!("the sibling hello-world trial still passed (reward {hello_reward:?})"),
            hello_reward == Some(json!(1.0)),
        )],
        figures: json!({"job_files": 20, "tasks": 20, "failures": failures}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut selected: Vec<String> = std::env::args().skip(1).collect();
    if selected.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: terminus-chaos [CASE...]   cases: {}", CASES.join(", "));
        return Ok(());
    }
    if let Some(unknown) = selected.iter().find(|a| !CASES.contains(&a.as_str())) {
        anyhow::bail!("unknown case {unknown:?}; cases: {}", CASES.join(", "));
    }
    if selected.is_empty() {
        selected = CASES.iter().map(|c| c.to_string()).collect();
    }
    let engine = Engine::connect().await?;
    let engine_version = engine.version().await?;
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string();
    let ctx = Ctx {
        engine,
        root: repo_root().join("target/chaos").join(&stamp),
        hello: repo_root().join("examples/tasks/hello-world"),
    };
    let ctx = Ctx { hello: ctx.hello.canonicalize()?, ..ctx };
    println!(
        "chaos suite: {} cores, engine {engine_version}; files under {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        ctx.root.display()
    );
    let mut reports = Vec::new();
    let mut all_ok = true;
    for name in &selected {
        println!("case {name}");
        let outcome = match name.as_str() {
            "kill9" => kill9(&ctx).await,
            "container-kills" => container_kills(&ctx).await,
            "llm-faults" => llm_faults(&ctx).await,
            "dockerd-restart" => dockerd_restart(&ctx).await,
            "adversary" => adversary::adversary(&ctx).await,
            "lost-lines" => lost_lines::lost_lines(&ctx).await,
            "runaway" => runaway::runaway(&ctx).await,
            "hostile-tasks" => hostile_tasks::hostile_tasks(&ctx).await,
            "node-loss" => node_loss::node_loss(&ctx).await,
            _ => bad_inputs(&ctx).await,
        };
        match outcome {
            Ok(case) => {
                let ok = case.ok();
                all_ok &= ok;
                println!("  {} — {} ({:.0} s)", if ok { "ok" } else { "FAILED" }, case.tally, case.seconds);
                for (check, held) in &case.checks {
                    println!("    [{}] {check}", if *held { "x" } else { " " });
                }
                reports.push(json!({
                    "case": case.name,
                    "ok": ok,
                    "expected": case.tally.expected,
                    "present": case.tally.present,
                    "duplicated": case.tally.duplicated,
                    "leaked": case.tally.leaked,
                    "checks": case.checks.iter().map(|(c, ok)| json!({"check": c, "ok": ok})).collect::<Vec<_>>(),
                    "figures": case.figures,
                    "seconds": case.seconds,
                }));
            }
            Err(e) => {
                all_ok = false;
                println!("  FAILED — {e:#}");
                reports.push(json!({"case": name, "ok": false, "error": format!("{e:#}")}));
            }
        }
    }
    let report = json!({
        "date": chrono::Utc::now().to_rfc3339(),
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "engine": engine_version},
        "cases": reports,
    });
    std::fs::create_dir_all(&ctx.root)?;
    let out = ctx.root.join("chaos.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    println!("report written to {}", out.display());
    if !all_ok {
        anyhow::bail!("some chaos cases failed");
    }
    Ok(())
}
