//! The `hostile-tasks` case: task directories written by someone else, run with the oracle (no
//! model), and a job-level secret across a kill -9 and a resume.
//!
//! 1. One job of hostile tasks beside ordinary ones:
//!    - artifacts whose destination leaves the trial by an absolute and by a relative path;
//!    - a task reading `${OPENAI_API_KEY}` (the job passes `host_env: all`, which still keeps
//!      the model keys back) and one reading a variable the job does not pass;
//!    - compose sidecars running a fork bomb and a memory hog;
//!    - eight trials whose solutions run `kill -9 -1` as root, then solve the task.
//! 2. A task whose `task.toml` is a link to `/dev/zero`: refused at once, nothing read.
//! 3. A job-level secret (`environment.env.HF_TOKEN`), the job killed with -9 mid-way, then
//!    `terminus resume` without the variable (refused, exit 2) and with it (the resumed trials
//!    see the real value: their tests compare its hash).
//!
//! Then: no file was written outside the jobs directories, no secret is in any file under them,
//! no job was halted, every trial has a result.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use terminus_bench::{Tally, spawn_terminus, tally, trial_results};

use crate::case::{Case, Ctx, JOB_DEADLINE, wait_bounded};

/// What the model-key canary is (set as `OPENAI_API_KEY` for the job: no file may hold it).
const KEY_CANARY: &str = "sk-chaos-canary-7f3e1d29b8c4a6e05f";
/// The job's own secret (in its job file; stored redacted, given again on resume).
const HF_CANARY: &str = "hf_chaos_canary_42b9c7d1e8f3a6";

const HELLO_TESTS: &str = "#!/bin/bash\nif [ \"$(cat /app/hello.txt 2>/dev/null)\" = 'Hello, world!' ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

/// A task under `root`: `toml` after its header, `solve` its solution, `tests` its test.
fn task(root: &Path, name: &str, toml: &str, solve: &str, tests: &str) -> anyhow::Result<PathBuf> {
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(dir.join("task.toml"), format!("version = \"1.0\"\n{toml}[agent]\ntimeout_sec = 120.0\n"))?;
    std::fs::write(dir.join("instruction.md"), "Write Hello, world! to /app/hello.txt.\n")?;
    std::fs::write(dir.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nWORKDIR /app\n")?;
    std::fs::write(dir.join("solution/solve.sh"), format!("#!/bin/bash\n{solve}\n"))?;
    std::fs::write(dir.join("tests/test.sh"), tests)?;
    Ok(dir)
}

const SOLVE: &str = "printf 'Hello, world!\\n' > /app/hello.txt";

fn job_yaml(dir: &Path, name: &str, extra: &str, tasks: &[PathBuf]) -> anyhow::Result<PathBuf> {
    let mut yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_concurrent_trials: 4\n{extra}agents:\n  - name: oracle\ntasks:\n",
        dir.display()
    );
    for task in tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// Every file under `dir` that holds `needle`.
pub(crate) fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t)
                    if t.is_file()
                        && std::fs::read(&path)
                            .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes())) =>
                {
                    found.push(path);
                }
                _ => {}
            }
        }
    }
    found
}

fn error_of(result: &Value) -> String {
    result["exception_info"]["exception_type"].as_str().unwrap_or_default().to_string()
}

fn reward_of(result: &Value) -> Option<f64> {
    result["verifier_result"]["rewards"]["reward"].as_f64()
}

/// The result of the trial of `task` (by its directory name).
fn result_of<'a>(results: &'a [Value], task: &str) -> Vec<&'a Value> {
    results.iter().filter(|r| r["task_name"] == task).collect()
}

/// Whether every trial of task `name` was refused at load with a message holding `needle`.
fn refused(results: &[Value], name: &str, needle: &str) -> bool {
    result_of(results, name).iter().all(|r| {
        error_of(r) == "TaskLoadError"
            && r["exception_info"]["exception_message"].as_str().unwrap_or("").contains(needle)
    })
}

/// Whether task `name` ran `n` trials, each rewarded 1 without an error.
fn rewarded(results: &[Value], name: &str, n: usize) -> bool {
    let of = result_of(results, name);
    of.len() == n && of.iter().all(|r| reward_of(r) == Some(1.0) && error_of(r).is_empty())
}

/// Starts `terminus` with `args` in `dir`, its output in `log` (started afresh), and the
/// variable `var` set to `value`, or removed when `value` is None.
fn spawn_with_var(
    args: &[&str],
    dir: &Path,
    log: &Path,
    var: &str,
    value: Option<&str>,
) -> anyhow::Result<std::process::Child> {
    let mut command = std::process::Command::new(terminus_bench::terminus_bin());
    command.args(args).current_dir(dir);
    match value {
        Some(value) => command.env(var, value),
        None => command.env_remove(var),
    };
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(log)?)
        .stderr(std::fs::OpenOptions::new().append(true).open(log)?)
        .spawn()?;
    Ok(child)
}

/// What the case has gathered so far: its checks, the trials its jobs plan, and what their
/// tallies found.
#[derive(Default)]
struct Findings {
    checks: Vec<(String, bool)>,
    expected: usize,
    tally: Tally,
}

impl Findings {
    /// Adds a job's present, duplicated and leaked trials (the trials expected are counted apart).
    fn add(&mut self, t: Tally) {
        self.tally.present += t.present;
        self.tally.duplicated += t.duplicated;
        self.tally.leaked += t.leaked;
    }
}

/// The trials of the hostile job, and its directory.
struct HostileJob {
    results: Vec<Value>,
    job_dir: PathBuf,
}

pub async fn hostile_tasks(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("hostile-tasks")?;
    let mut found = Findings::default();

    // 1. The hostile job.
    let hostile = hostile_job(ctx, &dir, &mut found).await?;
    unlisted_job(ctx, &dir, &mut found).await?;
    kill_all_job(ctx, &dir, &mut found).await?;
    found.checks.push(("a fork bomb and a memory hog in sidecars, confined like main (pids.max 4096, no-new-privileges, as a sidecar reports): the trial still rewarded".into(), rewarded(&hostile.results, "sidecars", 1)));
    found.checks.push(("an ordinary task beside them rewarded".into(), rewarded(&hostile.results, "plain", 1)));

    // 2. task.toml → /dev/zero: refused at once, naming it.
    zero_task(&dir, &mut found).await?;

    // 3. A job-level secret across kill -9 and resume.
    let secret_dir = kill_secret_job(&dir, &mut found).await?;
    resume_secret_job(ctx, &dir, &secret_dir, &mut found).await?;

    check_no_secret(&hostile.job_dir, &secret_dir, &mut found);
    found.tally.expected = found.expected;
    Ok(Case {
        name: "hostile-tasks",
        tally: found.tally,
        checks: found.checks,
        figures: serde_json::json!({"trials": found.expected}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Writes the hostile tasks (artifacts that leave the trial, a task reading the model key,
/// sidecars that bomb and hog) beside an ordinary one, runs them in one job with `host_env:
/// all`, and checks the refusals.
async fn hostile_job(ctx: &Ctx, dir: &Path, found: &mut Findings) -> anyhow::Result<HostileJob> {
    let tasks_dir = dir.join("tasks");
    let outside = dir.join("outside");
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside)?;
    let escape_abs = outside.join("pwned-abs");
    let escape_rel = outside.join("pwned-rel");
    let rel_target = format!("../../../../../../../../../../..{}", escape_rel.display());
    // A third sidecar reports its own confinement into a volume `main` shares, for the tests.
    let sidecars = "services:\n  main:\n    volumes: [\"shared:/shared\"]\n  probe:\n    image: terminus-base:bookworm\n    volumes: [\"shared:/shared\"]\n    command: [\"bash\", \"-c\", \"{ cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max; grep NoNewPrivs /proc/self/status; } > /shared/probe; sleep infinity\"]\n  bomb:\n    image: terminus-base:bookworm\n    command: [\"bash\", \"-c\", \"f() { f | f & }; f; sleep infinity\"]\n  hog:\n    image: terminus-base:bookworm\n    command: [\"bash\", \"-c\", \"x=aaaaaaaaaa; while :; do x=$$x$$x; done\"]\nvolumes:\n  shared:\n";
    let probe_tests = "#!/bin/bash\nif grep -qx 4096 /shared/probe && grep -Eq 'NoNewPrivs:\\s+1' /shared/probe && [ \"$(cat /app/hello.txt)\" = 'Hello, world!' ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";
    let sidecar_task = task(&tasks_dir, "sidecars", "", SOLVE, probe_tests)?;
    std::fs::write(sidecar_task.join("environment/docker-compose.yaml"), sidecars)?;
    let listed = vec![
        task(&tasks_dir, "plain", "", SOLVE, HELLO_TESTS)?,
        task(
            &tasks_dir,
            "escape-abs",
            &format!("artifacts = [{{ source = \"/app/hello.txt\", destination = \"{}\" }}]\n", escape_abs.display()),
            SOLVE,
            HELLO_TESTS,
        )?,
        task(
            &tasks_dir,
            "escape-rel",
            &format!("artifacts = [{{ source = \"/app/hello.txt\", destination = \"{rel_target}\" }}]\n"),
            SOLVE,
            HELLO_TESTS,
        )?,
        task(&tasks_dir, "reads-key", "[verifier.env]\nK = \"${OPENAI_API_KEY}\"\n", SOLVE, HELLO_TESTS)?,
        sidecar_task,
    ];
    let config = job_yaml(dir, "hostile", "environment:\n  host_env: all\n", &listed)?;
    found.expected += listed.len();
    let job_dir = dir.join("hostile");
    let _ = std::fs::remove_dir_all(&job_dir);
    let log = dir.join("hostile.log");
    let child =
        spawn_with_var(&["run", "-q", "-c", &config.to_string_lossy()], dir, &log, "OPENAI_API_KEY", Some(KEY_CANARY))?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    // Exit 1: some trials errored (the refused ones); 4 would be a halted job.
    found.checks.push((format!("the hostile job ended by itself, not halted (exit {code:?})"), code == Some(1)));
    let results = trial_results(&job_dir);
    found.add(tally(&job_dir, listed.len(), &ctx.engine).await);
    let checks = &mut found.checks;
    checks.push((
        "an absolute artifact destination is refused at load".into(),
        refused(&results, "escape-abs", "destination"),
    ));
    checks.push((
        "a relative artifact destination that climbs out is refused".into(),
        refused(&results, "escape-rel", "destination"),
    ));
    checks
        .push(("no file was written outside the jobs directory".into(), !escape_abs.exists() && !escape_rel.exists()));
    checks.push((
        "a task reading OPENAI_API_KEY is refused, naming it".into(),
        refused(&results, "reads-key", "OPENAI_API_KEY"),
    ));
    Ok(HostileJob { results, job_dir })
}

/// A job without `host_env`: a task reading a variable the host sets is refused all the same.
async fn unlisted_job(ctx: &Ctx, dir: &Path, found: &mut Findings) -> anyhow::Result<()> {
    let tasks_dir = dir.join("tasks");
    let unlisted =
        task(&tasks_dir, "reads-unlisted", "[solution.env]\nS = \"${CHAOS_NOT_PASSED}\"\n", SOLVE, HELLO_TESTS)?;
    let unlisted_config = job_yaml(dir, "unlisted", "", &[unlisted])?;
    found.expected += 1;
    let unlisted_dir = dir.join("unlisted");
    let _ = std::fs::remove_dir_all(&unlisted_dir);
    let unlisted_log = dir.join("unlisted.log");
    let child = spawn_with_var(
        &["run", "-q", "-c", &unlisted_config.to_string_lossy()],
        dir,
        &unlisted_log,
        "CHAOS_NOT_PASSED",
        Some("set-on-the-host"),
    )?;
    wait_bounded(child, JOB_DEADLINE).await;
    let unlisted_results = trial_results(&unlisted_dir);
    found.checks.push((
        "a task reading a variable the host sets and the job does not pass is refused, naming it".into(),
        unlisted_results.len() == 1
            && error_of(&unlisted_results[0]) == "TaskLoadError"
            && unlisted_results[0]["exception_info"]["exception_message"]
                .as_str()
                .is_some_and(|m| m.contains("CHAOS_NOT_PASSED")),
    ));
    found.add(tally(&unlisted_dir, 1, &ctx.engine).await);
    Ok(())
}

/// Eight trials whose solutions `kill -9 -1` as root, four at a time: each is graded, none
/// restarts, the job is not halted.
async fn kill_all_job(ctx: &Ctx, dir: &Path, found: &mut Findings) -> anyhow::Result<()> {
    let kill_all = task(&dir.join("tasks"), "kill-all", "", &format!("kill -9 -1; {SOLVE}"), HELLO_TESTS)?;
    let kill_config = job_yaml(dir, "kill-all", "n_attempts: 8\n", &[kill_all])?;
    found.expected += 8;
    let kill_dir = dir.join("kill-all");
    let _ = std::fs::remove_dir_all(&kill_dir);
    let child = spawn_terminus(&["run", "-q", "-c", &kill_config.to_string_lossy()], dir, &dir.join("kill-all.log"))?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let kill_results = trial_results(&kill_dir);
    let restarts: u64 = kill_results.iter().map(|r| r["restarts"].as_u64().unwrap_or(0)).sum();
    found.checks.push((
        format!(
            "eight solutions that kill -9 -1 as root: each graded and rewarded, the job not halted (exit {code:?})"
        ),
        code == Some(0)
            && kill_results.len() == 8
            && kill_results.iter().all(|r| reward_of(r) == Some(1.0) && error_of(r).is_empty()),
    ));
    found.checks.push((format!("none of them restarted as a lost container ({restarts} restarts)"), restarts == 0));
    found.add(tally(&kill_dir, 8, &ctx.engine).await);
    Ok(())
}

/// A task whose `task.toml` is a link to `/dev/zero`: the run is refused at once, naming it.
async fn zero_task(dir: &Path, found: &mut Findings) -> anyhow::Result<()> {
    let zero = task(&dir.join("tasks"), "zero", "", SOLVE, HELLO_TESTS)?;
    std::fs::remove_file(zero.join("task.toml"))?;
    std::os::unix::fs::symlink("/dev/zero", zero.join("task.toml"))?;
    let zero_config = job_yaml(dir, "zero", "", &[zero])?;
    let zero_log = dir.join("zero.log");
    let child = spawn_terminus(&["run", "-q", "-c", &zero_config.to_string_lossy()], dir, &zero_log)?;
    let zero_started = Instant::now();
    let code = wait_bounded(child, Duration::from_secs(60)).await;
    let said = std::fs::read_to_string(&zero_log).unwrap_or_default();
    found.checks.push((
        format!(
            "task.toml → /dev/zero: refused in {:.1} s (exit {code:?}), naming task.toml",
            zero_started.elapsed().as_secs_f64()
        ),
        code == Some(2) && said.contains("task.toml"),
    ));
    Ok(())
}

/// Trials of the job with a job-level secret.
const N_SECRET: usize = 12;

/// Starts the job whose file holds a secret (`environment.env.HF_TOKEN`) and kills it with -9
/// once a few trials are done; returns its directory.
async fn kill_secret_job(dir: &Path, found: &mut Findings) -> anyhow::Result<PathBuf> {
    let secret_tests = format!(
        "#!/bin/bash\n[ \"$(printf %s \"$HF_TOKEN\" | sha256sum | cut -c1-64)\" = {} ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
        sha256_hex(HF_CANARY)
    );
    let secret_task = task(&dir.join("tasks"), "secret", "", "sleep 1", &secret_tests)?;
    let n_secret = N_SECRET;
    let secret_config = dir.join("secret.yaml");
    std::fs::write(
        &secret_config,
        format!(
            "jobs_dir: {}\njob_name: secret\nn_attempts: {n_secret}\nn_concurrent_trials: 2\nenvironment:\n  env:\n    HF_TOKEN: {HF_CANARY}\nagents:\n  - name: oracle\ntasks:\n  - path: {}\n",
            dir.display(),
            secret_task.display()
        ),
    )?;
    found.expected += n_secret;
    let secret_dir = dir.join("secret");
    let _ = std::fs::remove_dir_all(&secret_dir);
    let secret_log = dir.join("secret.log");
    let mut child = spawn_terminus(&["run", "-q", "-c", &secret_config.to_string_lossy()], dir, &secret_log)?;
    let deadline = Instant::now() + JOB_DEADLINE;
    while trial_results(&secret_dir).len() < 3 && Instant::now() < deadline && child.try_wait()?.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let killed = child.try_wait()?.is_none();
    child.kill()?;
    child.wait()?;
    found.checks.push((
        "the secret job was killed with -9 mid-way".into(),
        killed && trial_results(&secret_dir).len() < n_secret,
    ));
    Ok(secret_dir)
}

/// Resumes the killed secret job without `HF_TOKEN` (refused, naming it), then with it: every
/// trial, the resumed ones included, must have seen the real value.
async fn resume_secret_job(ctx: &Ctx, dir: &Path, secret_dir: &Path, found: &mut Findings) -> anyhow::Result<()> {
    let n_secret = N_SECRET;
    let job_arg = secret_dir.to_string_lossy().to_string();
    // Without the variable: refused, naming it.
    let refused_log = dir.join("resume-refused.log");
    let resume = spawn_with_var(&["resume", "-q", &job_arg], dir, &refused_log, "HF_TOKEN", None)?;
    let code = wait_bounded(resume, Duration::from_secs(60)).await;
    let said = std::fs::read_to_string(&refused_log).unwrap_or_default();
    found.checks.push((
        format!("a resume without HF_TOKEN is refused (exit {code:?}), naming it"),
        code == Some(2) && said.contains("HF_TOKEN"),
    ));
    let job_id = terminus_bench::job_id(secret_dir).unwrap_or_default();
    let left =
        ctx.engine.containers_with_label(terminus_sandbox::LABEL_JOB_ID, Some(&job_id)).await.map(|c| c.len()).ok();
    found.checks.push((
        format!("the refused resume reaped what the killed run left ({left:?} containers remain)"),
        left == Some(0) && !job_id.is_empty(),
    ));
    let resume_log = dir.join("resume.log");
    let resume = spawn_with_var(&["resume", "-q", &job_arg], dir, &resume_log, "HF_TOKEN", Some(HF_CANARY))?;
    let code = wait_bounded(resume, JOB_DEADLINE).await;
    found.checks.push((format!("the resume with HF_TOKEN ran to the end (exit {code:?})"), code == Some(0)));
    let secret_results = trial_results(secret_dir);
    found.checks.push((
        "every trial of the secret job, resumed ones included, saw the real secret (reward 1)".into(),
        secret_results.len() == n_secret && secret_results.iter().all(|r| reward_of(r) == Some(1.0)),
    ));
    found.add(tally(secret_dir, n_secret, &ctx.engine).await);
    Ok(())
}

/// Checks that no file of the hostile and the secret jobs holds a secret, naming the first
/// few that do.
fn check_no_secret(job_dir: &Path, secret_dir: &Path, found: &mut Findings) {
    let leaks: Vec<PathBuf> = [KEY_CANARY, HF_CANARY]
        .iter()
        .flat_map(|canary| files_holding(job_dir, canary).into_iter().chain(files_holding(secret_dir, canary)))
        .collect();
    found.checks.push((format!("no secret in any file of the jobs ({} holding one)", leaks.len()), leaks.is_empty()));
    for leak in leaks.iter().take(5) {
        println!("    leaked into {}", leak.display());
    }
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(text.as_bytes()))
}
