//! Helpers shared by the integration tests: the Docker gate, running the CLI, reading results.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_mock_llm::{Turn, UsageSpec};

pub use crate::bounded::{BoundedChild, BoundedCommand, ReapOnDrop};

/// Serialises the tests that run jobs: they share two cores and one engine. An async mutex,
/// since each test holds it across awaits (it works across the tests' separate runtimes).
///
/// It serialises them within one process, as `cargo test` runs them. cargo-nextest runs each
/// test in a process of its own, where this lock holds nothing back: there the test group
/// `docker-heavy` of `.config/nextest.toml` (one test at a time) does the same, and
/// tests/tidy.rs checks that every test taking this lock is in that group.
pub async fn heavy_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The connected engine, or None (test skipped) when there is none and Docker is not required.
pub async fn docker() -> Option<bollard::Docker> {
    let required = std::env::var("TERMINUS_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
    let connected = async {
        let docker = bollard::Docker::connect_with_defaults().ok()?;
        let docker = docker.negotiate_version().await.ok()?;
        docker.ping().await.ok()?;
        docker.inspect_image("terminus-base:bookworm").await.ok()?;
        Some(docker)
    }
    .await;
    match connected {
        Some(docker) => Some(docker),
        None if required => panic!(
            "TERMINUS_REQUIRE_DOCKER=1 but the Docker engine or the base image is unavailable; run scripts/setup.sh"
        ),
        None => {
            skip("docker", "docker unavailable (set TERMINUS_REQUIRE_DOCKER=1 to fail instead)");
            None
        }
    }
}

/// Says that a test skips, and why, and appends `tier: reason` to the file named by
/// `TERMINUS_SKIP_LOG` when it is set: scripts/test.sh fails when a tier it requires shows up
/// there, whatever the test itself decided.
pub fn skip(tier: &str, reason: &str) {
    eprintln!("skipping ({tier}): {reason}");
    if let Ok(path) = std::env::var("TERMINUS_SKIP_LOG") {
        use std::io::Write;
        let line = format!("{tier}: {}\n", reason.replace('\n', " "));
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        appended.unwrap_or_else(|e| panic!("cannot append to TERMINUS_SKIP_LOG ({path}): {e}"));
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn terminus_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_terminus"))
}

/// Runs `terminus run -c <config>` with extra environment variables.
pub fn run_terminus(config: &Path, env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new(terminus_bin());
    command.arg("run").arg("-c").arg(config).current_dir(repo_root());
    for (key, value) in env {
        command.env(key, value);
    }
    command.output_bounded().expect("the terminus binary runs")
}

/// `terminus resume <job_dir>` with `args`, from the repository root.
pub fn resume_terminus(job_dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(terminus_bin())
        .arg("resume")
        .arg(job_dir)
        .args(args)
        .current_dir(repo_root())
        .output_bounded()
        .expect("terminus runs")
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The trial directories of a job (those with a result.json).
pub fn trial_dirs(job_dir: &Path) -> Vec<PathBuf> {
    // A job directory that does not exist yet has no trials.
    let Ok(entries) = std::fs::read_dir(job_dir) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("result.json").is_file()).collect();
    dirs.sort();
    dirs
}

/// Containers (any state) labelled with this job id.
pub async fn containers_of_job(docker: &bollard::Docker, job_id: &str) -> usize {
    let filters = std::collections::HashMap::from([("label".to_string(), vec![format!("terminus.job_id={job_id}")])]);
    let options =
        bollard::query_parameters::ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
    docker.list_containers(Some(options)).await.map(|l| l.len()).unwrap_or(usize::MAX)
}

/// What of a job is still on the engine: its labelled containers, networks (by name) and volumes.
pub struct Leftovers {
    pub containers: usize,
    pub networks: Vec<String>,
    pub volumes: usize,
}

pub async fn leftovers_of_job(docker: &bollard::Docker, job_id: &str) -> Leftovers {
    let labelled = std::collections::HashMap::from([("label".to_string(), vec![format!("terminus.job_id={job_id}")])]);
    let networks = docker
        .list_networks(Some(
            bollard::query_parameters::ListNetworksOptionsBuilder::default().filters(&labelled).build(),
        ))
        .await
        .unwrap();
    let volumes = docker
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptionsBuilder::default().filters(&labelled).build()))
        .await
        .unwrap();
    Leftovers {
        containers: containers_of_job(docker, job_id).await,
        networks: networks.into_iter().filter_map(|n| n.name).collect(),
        volumes: volumes.volumes.unwrap_or_default().len(),
    }
}

/// Every file below `dir`, recursively.
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() { stack.push(path) } else { out.push(path) }
        }
    }
    out
}

/// A task `root/name` built `FROM terminus-base:bookworm` (working directory `/app`) whose
/// instruction is its name (see [`instructed_task`]).
pub fn base_task(root: &Path, name: &str, toml: &str, solve: &str, test_sh: &str) -> PathBuf {
    instructed_task(root, name, name, toml, solve, test_sh)
}

/// A task `root/name` built `FROM terminus-base:bookworm` (working directory `/app`) with
/// `instruction`, `toml` after the version line, `solve` as its solution and `test_sh` as its
/// `tests/test.sh` (each script after a bash shebang line).
pub fn instructed_task(root: &Path, name: &str, instruction: &str, toml: &str, solve: &str, test_sh: &str) -> PathBuf {
    let dir = root.join(name);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("task.toml"), format!("version = \"1.0\"\n{toml}")).unwrap();
    std::fs::write(dir.join("instruction.md"), format!("{instruction}\n")).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), BASE_DOCKERFILE).unwrap();
    std::fs::write(dir.join("solution/solve.sh"), format!("#!/bin/bash\n{solve}\n")).unwrap();
    std::fs::write(dir.join("tests/test.sh"), format!("#!/bin/bash\n{test_sh}\n")).unwrap();
    dir
}

/// The Dockerfile of [`instructed_task`]'s tasks.
pub const BASE_DOCKERFILE: &str = "FROM terminus-base:bookworm\nRUN mkdir -p /app\nWORKDIR /app\n";

/// Copies the task (or any directory) `from` to `to`, every file of it.
pub fn copy_task(from: &Path, to: &Path) -> PathBuf {
    for file in all_files(from) {
        let target = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&file, &target).unwrap();
    }
    to.to_path_buf()
}

/// The example task `name` of `examples/tasks`.
pub fn example(name: &str) -> PathBuf {
    repo_root().join("examples/tasks").join(name)
}

/// The JSON a scripted model replies with: its analysis, plan, commands and completion claim.
pub fn reply_text(analysis: &str, plan: &str, commands: Value, complete: bool) -> String {
    json!({"analysis": analysis, "plan": plan, "commands": commands, "task_complete": complete}).to_string()
}

/// A scripted model's reply running `commands` (analysis `a`, plan `p`), with no usage and no
/// delay; a test that needs them adds them by struct update (`Turn { usage, ..reply(…) }`).
pub fn reply(commands: Value, complete: bool) -> Turn {
    Turn { content: reply_text("a", "p", commands, complete), ..Turn::default() }
}

/// One command for a reply: `keystrokes`, then a wait of `duration` seconds.
pub fn cmd(keystrokes: &str, duration: f64) -> Value {
    json!([{"keystrokes": keystrokes, "duration": duration}])
}

/// The usage a reply reports: `prompt` and `completion` tokens, none cached.
pub fn usage(prompt: u64, completion: u64) -> Option<UsageSpec> {
    Some(UsageSpec { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: 0 })
}

/// One Terminus 2 agent (a YAML list item) on the scripted model at `api_base`, not recording,
/// with `kwargs` (agent kwargs, six spaces in) added.
pub fn scripted_agent(api_base: &str, kwargs: &str) -> String {
    format!(
        "  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api_base}\n      record_terminal_session: false\n{kwargs}"
    )
}

/// Writes the job file `<dir>/<name>.yaml`, whose jobs directory is `dir`: `extra` (top-level
/// keys, `datasets` among them when `tasks` is empty), `agents` (YAML list items) and `tasks`.
/// Returns its path.
pub fn write_job(dir: &Path, name: &str, extra: &str, agents: &str, tasks: &[PathBuf]) -> PathBuf {
    let mut yaml = format!("jobs_dir: {}\njob_name: {name}\n{extra}agents:\n{agents}", dir.display());
    if !tasks.is_empty() {
        yaml.push_str("tasks:\n");
    }
    for task in tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// [`write_job`] with one [`scripted_agent`] on the model at `api_base`.
pub fn job_yaml(dir: &Path, name: &str, api_base: &str, extra: &str, tasks: &[PathBuf]) -> PathBuf {
    write_job(dir, name, extra, &scripted_agent(api_base, ""), tasks)
}

/// A timestamp of a result file (RFC 3339).
pub fn time_of(value: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    let text = value.as_str().unwrap_or_else(|| panic!("not a timestamp: {value}"));
    chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// How long a phase of a trial's result (`agent_execution`, `verifier`, …) lasted, in seconds.
pub fn phase_seconds(result: &Value, phase: &str) -> f64 {
    let timing = &result[phase];
    (time_of(&timing["finished_at"]) - time_of(&timing["started_at"])).num_milliseconds() as f64 / 1000.0
}

/// A job's id, from its result.json.
pub fn job_id(job_dir: &Path) -> String {
    read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string()
}

/// How often [`wait_until`] looks again.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// Waits until `check` holds, looking every 100 ms; fails naming `what` once `timeout` passed.
pub async fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let probe = || std::future::ready(if check() { Ok(()) } else { Err("not yet".to_string()) });
    poll(what, timeout, POLL_EVERY, probe).await
}

/// Waits until `probe` answers `Ok`, looking every `every`, and returns its value; once
/// `timeout` passed, fails naming `what` and the last `Err` (what was seen instead).
pub async fn poll<T, F: Future<Output = Result<T, String>>>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(seen) => assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}: {seen}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// A fresh temporary directory for a test's jobs (kept afterwards with `TERMINUS_TEST_KEEP=1`,
/// to look into a failure).
pub fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("terminus-test-{name}-"))
        .disable_cleanup(std::env::var("TERMINUS_TEST_KEEP").as_deref() == Ok("1"))
        .tempdir()
        .expect("temp dir")
}

/// Whether the tests that need Harbor (from PyPI) must fail rather than skip when it cannot be
/// had (`TERMINUS_REQUIRE_HARBOR=1`, which scripts/test.sh sets).
pub fn harbor_required() -> bool {
    std::env::var("TERMINUS_REQUIRE_HARBOR").is_ok_and(|v| v == "1")
}

/// The directory holding Harbor `version`'s unpacked wheel (for `PYTHONPATH`), from
/// tests/helpers/harbor_source.sh's cache; None, said on stderr, when PyPI cannot be reached
/// and Harbor is not required.
pub fn harbor_source(version: &str) -> Option<PathBuf> {
    let out = std::process::Command::new(repo_root().join("tests/helpers/harbor_source.sh"))
        .arg(version)
        .output_bounded()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())),
        Some(75) if !harbor_required() => {
            skip("harbor", &format!("Harbor {version} cannot be fetched: {}", stderr.trim()));
            None
        }
        _ => panic!("Harbor {version}'s source could not be had: {stderr}"),
    }
}

/// The Harbor versions whose models every file of a terminus job must satisfy.
pub const HARBOR_VERSIONS: [&str; 2] = ["0.25.0", "0.26.0"];

/// Runs tests/helpers/harbor_validate.sh (Harbor `version`'s own models, in a Debian trixie
/// root cached under target/harbor-models) with `args`. None, said on stderr, only when PyPI or
/// the Debian mirror cannot be reached to prepare them; else the validator's report, asserted
/// to be a success.
fn harbor_validate(version: &str, args: &[&std::ffi::OsStr]) -> Option<String> {
    let out = std::process::Command::new(repo_root().join("tests/helpers/harbor_validate.sh"))
        .arg(repo_root().join("target/harbor-models"))
        .arg(version)
        .args(args)
        .output_bounded()
        .expect("bash runs");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Some(report),
        Some(75) if !harbor_required() => {
            skip("harbor", &format!("validation with Harbor {version}'s models: {}", stderr.trim()));
            None
        }
        _ => panic!("Harbor {version}'s models rejected our files:\n{report}{stderr}"),
    }
}

/// Validates every file of a finished job — its trajectories included — with the models of
/// every Harbor version in [`HARBOR_VERSIONS`] (see [`validate_job_with_harbor`]).
pub fn validate_with_harbor(job_dir: &Path) {
    assert!(!trajectory_files(job_dir).is_empty(), "no trajectory to validate in {}", job_dir.display());
    for version in HARBOR_VERSIONS {
        validate_job_with_harbor(job_dir, version);
    }
}

/// Validates every file of a job directory Harbor's tools read — config.json (`JobConfig`),
/// result.json (`JobResult`), each trial's (and archived attempt's) config.json
/// (`TrialConfig`), result.json (`TrialResult`) and trajectories — with Harbor `version`'s
/// models and the viewer's own loader. Returns what `harbor view` lists for the job
/// (`{"agents", "models", "datasets"}`), or None when the models could not be fetched.
pub fn validate_job_with_harbor(job_dir: &Path, version: &str) -> Option<Value> {
    let report = harbor_validate(version, &["--job".as_ref(), job_dir.as_os_str()])?;
    let last = report.lines().last().unwrap_or_default();
    Some(serde_json::from_str(last).unwrap_or_else(|e| panic!("no summary line in the report ({e}):\n{report}")))
}

/// Every `trajectory*.json` below `dir`.
pub fn trajectory_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = all_files(dir)
        .into_iter()
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy().starts_with("trajectory") && n.to_string_lossy().ends_with(".json")
            })
        })
        .collect();
    files.sort();
    files
}

/// A runnable Harbor: its virtualenv's python and the `DOCKER_CONFIG` whose `cli-plugins/`
/// holds the `docker compose` v2 its Docker environment calls.
#[derive(Clone)]
pub struct HarborRuntime {
    pub python: PathBuf,
    pub docker_config: PathBuf,
}

/// Harbor `version` installed from PyPI by tests/helpers/harbor_runtime.sh (cached outside the
/// checkout); None, said on stderr, when PyPI or the mirror cannot be reached and Harbor is not
/// required.
pub fn harbor_runtime(version: &str) -> Option<HarborRuntime> {
    let out = std::process::Command::new(repo_root().join("tests/helpers/harbor_runtime.sh"))
        .arg(version)
        .output_bounded()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let mut lines = stdout.lines();
            let python = PathBuf::from(lines.next().expect("the python line"));
            let docker_config = PathBuf::from(lines.next().expect("the DOCKER_CONFIG line"));
            Some(HarborRuntime { python, docker_config })
        }
        Some(75) if !harbor_required() => {
            skip("harbor", &format!("Harbor {version} cannot be installed: {}", stderr.trim()));
            None
        }
        _ => panic!("Harbor {version} could not be installed: {stderr}"),
    }
}

impl HarborRuntime {
    /// `harbor run -c <config>` (LiteLLM kept offline), its output.
    /// Harbor's texts, written into `dir` by `terminus texts import-harbor` from this install.
    pub fn import_texts(&self, dir: &Path) -> PathBuf {
        let imported = std::process::Command::new(terminus_bin())
            .args(["texts", "import-harbor", "--python"])
            .arg(&self.python)
            .arg("-o")
            .arg(dir)
            .output_bounded()
            .expect("the terminus binary runs");
        assert!(imported.status.success(), "{}", String::from_utf8_lossy(&imported.stderr));
        dir.to_path_buf()
    }

    pub fn run(&self, config: &Path, env: &[(&str, &str)]) -> Output {
        let mut command = std::process::Command::new(self.python.with_file_name("harbor"));
        command
            .args(["run", "-c"])
            .arg(config)
            .env("DOCKER_CONFIG", &self.docker_config)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .current_dir(config.parent().unwrap_or(Path::new("/")));
        for (key, value) in env {
            command.env(key, value);
        }
        command.output_bounded().expect("Harbor's python runs")
    }
}
