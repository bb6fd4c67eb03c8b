//! The `adversary` case: hostile models, agents and tasks beside ordinary trials, and the
//! ways a job directory or an engine can be taken from under a job.
//!
//! 1. A mixed job: ordinary tasks next to a model that sends degenerate replies (a million `[`,
//!    deep nesting, an unterminated string), keystrokes that start with `-`, an agent that plants
//!    its reward and leaves a `setsid` survivor to keep planting it, a terminal flood of 2 M lines
//!    followed by quick commands (their turns are timed), 1.5 GB and 25 000 files under
//!    `/logs/agent`, a fork bomb, and task directories with links (outside the task: refused;
//!    two links to `.`: harmless). While it runs, a second `run` and a `resume` of the same
//!    directory must exit 5; the orchestrator's peak RSS and the host's process count are read
//!    from `/proc` throughout.
//! 2. A full disk: a small loop-mounted ext4 `jobs_dir` filled up mid-job (exit 4, nothing
//!    restarted), then space freed and `terminus resume` to the end.
//! 3. A stopped dockerd: `SIGSTOP` for 40 s (everything waits) and later for 150 s (longer than
//!    the terminal's deadline: trials wait for the engine instead of failing), then `SIGCONT`;
//!    the job ends with every trial rewarded and nothing hangs past its deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_bench::hostile::{
    FLOOD_MARKER, LOG_BOMB_MARKER, TESTS_42, conversation, done, flood, log_bomb, quick_turn_costs, raw, reply, run,
    write_task,
};
use terminus_bench::{
    JobFile, Tally, dir_bytes, hello_world_script, job_id, spawn_terminus, tally, terminus_bin, trial_results,
};
use terminus_mock_llm::{MockServer, Script};

use crate::case::{Case, Ctx, JOB_DEADLINE, wait_bounded};
use crate::faults::dockerd_pid;

/// The orchestrator's peak RSS must stay under this with 1.5 GB of agent logs.
const RSS_LIMIT_MIB: f64 = 600.0;

/// A 0.1 s command's turn (reply to next request, less the wait) after the flood.
const TURN_LIMIT_SEC: f64 = 0.5;

/// Quick commands timed after the flood.
const QUICK_TURNS: usize = 3;

/// What a trial of the mixed job must end with.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// No error, reward 1.
    Rewarded,
    /// An error or a reward of 0: never 1 (what it planted or faked does not count).
    Hostile,
    /// `TaskLoadError` whose message names this path and says it leaves the task.
    Refused(&'static str),
}

/// Peak resident memory of a process (VmHWM), in MiB; None once it is gone.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// The host's process count.
fn host_processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| dir.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok())).count())
        .unwrap_or(0)
}

/// Runs the CLI to its end (bounded) and returns its exit code and stderr.
async fn cli(args: &[&str], cwd: &Path) -> (Option<i32>, String) {
    let err = cwd.join(format!("cli-{}.err", rand::random::<u32>()));
    let Ok(file) = std::fs::File::create(&err) else { return (None, String::new()) };
    let child = Command::new(terminus_bin())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn();
    let Ok(child) = child else { return (None, String::new()) };
    let code = wait_bounded(child, Duration::from_secs(60)).await;
    (code, std::fs::read_to_string(&err).unwrap_or_default())
}

pub(super) async fn adversary(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("adversary")?;
    let mut checks = Vec::new();
    let mut figures = json!({});
    let mut total = Tally::default();

    let (tally, more, seen) = mixed_job(ctx, &dir).await?;
    add(&mut total, tally);
    checks.extend(more);
    figures["mixed"] = seen;

    let (tally, more, seen) = full_disk(ctx, &dir).await?;
    add(&mut total, tally);
    checks.extend(more);
    figures["full_disk"] = seen;

    let (tally, more, seen) = stopped_engine(ctx, &dir).await?;
    add(&mut total, tally);
    checks.extend(more);
    figures["stopped_engine"] = seen;

    Ok(Case { name: "adversary", tally: total, checks, figures, seconds: started.elapsed().as_secs_f64() })
}

fn add(total: &mut Tally, part: Tally) {
    total.expected += part.expected;
    total.present += part.present;
    total.duplicated += part.duplicated;
    total.leaked += part.leaked;
}

type Part = (Tally, Vec<(String, bool)>, Value);

/// Hostile and ordinary trials in one job.
async fn mixed_job(ctx: &Ctx, dir: &Path) -> anyhow::Result<Part> {
    let (tasks, leaky) = mixed_tasks(ctx, dir)?;
    let server = MockServer::start(mixed_script(), 0).await?;
    let mut yaml = format!(
        "jobs_dir: {}\njob_name: mixed\nn_concurrent_trials: 4\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      early_return: true\ntasks:\n",
        dir.display(),
        server.api_base()
    );
    for (task, _) in &tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let config = dir.join("mixed.yaml");
    std::fs::write(&config, yaml)?;
    let job_dir = dir.join("mixed");
    let _ = std::fs::remove_dir_all(&job_dir);
    let log = dir.join("mixed.log");
    let config_arg = config.to_string_lossy().to_string();
    let watched = watch_mixed_job(dir, &job_dir, &log, &config_arg).await?;
    let code = watched.code;
    let tally = tally(&job_dir, tasks.len(), &ctx.engine).await;

    let mut checks = Vec::new();
    checks.push((format!("the mixed job exited {code:?} (0 or 1, never a signal)"), matches!(code, Some(0 | 1))));
    let results = trial_results(&job_dir);
    let outcomes = check_trials(&tasks, &results, &mut checks);
    check_job_files(&job_dir, &results, &mut checks);
    check_host(&watched, &mut checks);
    let turns = check_turns(&server, &mut checks);
    check_second_runs(&watched, &mut checks);
    check_leaky_task(&leaky, &mut checks)?;
    server.shutdown();
    let seen = json!({
        "exit_code": code,
        "trials": outcomes,
        "peak_rss_mib": watched.peak_rss,
        "host_processes": {"baseline": watched.baseline_processes, "peak": watched.peak_processes},
        "flood_turn_sec": turns,
    });
    Ok((tally, checks, seen))
}

/// Writes the tasks of the mixed job and says what each must end with; returns them, and the
/// task whose environment links a host secret.
fn mixed_tasks(ctx: &Ctx, dir: &Path) -> anyhow::Result<(Vec<(PathBuf, Expect)>, PathBuf)> {
    let tasks_dir = dir.join("tasks");
    let mut tasks: Vec<(PathBuf, Expect)> = vec![(ctx.hello.clone(), Expect::Rewarded)];
    for name in ["honest-1", "honest-2"] {
        tasks.push((write_task(&tasks_dir, name, "WRITE-42", TESTS_42, "")?, Expect::Rewarded));
    }
    // Two links to `.` inside the task: kept as links, never followed, so harmless.
    let loops = write_task(&tasks_dir, "loops", "WRITE-42", TESTS_42, "")?;
    std::os::unix::fs::symlink(".", loops.join("environment/a"))?;
    std::os::unix::fs::symlink(".", loops.join("environment/b"))?;
    tasks.push((loops, Expect::Rewarded));
    // A link to a host secret, and one to a device that never ends.
    let secret = dir.join("id_ed25519");
    std::fs::write(&secret, "-----BEGIN OPENSSH PRIVATE KEY----- not for images\n")?;
    let leaky = write_task(&tasks_dir, "leaky", "WRITE-42", TESTS_42, "")?;
    std::os::unix::fs::symlink(&secret, leaky.join("environment/key"))?;
    std::fs::write(leaky.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nCOPY key /root/key\n")?;
    tasks.push((leaky.clone(), Expect::Refused("environment/key")));
    let zero = write_task(&tasks_dir, "zero", "WRITE-42", TESTS_42, "")?;
    std::os::unix::fs::symlink("/dev/zero", zero.join("environment/zero"))?;
    tasks.push((zero, Expect::Refused("environment/zero")));
    // Degenerate replies, then a plain claim of completion: graded 0, never a crash.
    let degenerate = write_task(&tasks_dir, "degenerate", "DEGENERATE", TESTS_42, "")?;
    tasks.push((degenerate, Expect::Hostile));
    // Keys that start with `-` are typed (they used to be read as tmux flags).
    let dash_tests = "#!/bin/bash\n[ \"$(cat /app/answer.txt)\" = '-la --help' ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n";
    tasks.push((write_task(&tasks_dir, "dashes", "TYPE-DASHES", dash_tests, "")?, Expect::Rewarded));
    // The honest verdict is 0; a planted /tests/planted.txt or reward.txt would make it 1.
    let planted_tests = "#!/bin/bash\nif [ -e /tests/planted.txt ]; then echo '{\"reward\": 1}'; else echo '{\"reward\": 0}'; fi > /logs/verifier/reward.json\n";
    tasks.push((write_task(&tasks_dir, "planted", "PLANT-A-REWARD", planted_tests, "")?, Expect::Hostile));
    tasks.push((write_task(&tasks_dir, "flood", FLOOD_MARKER, TESTS_42, "")?, Expect::Rewarded));
    tasks.push((write_task(&tasks_dir, "log-bomb", LOG_BOMB_MARKER, TESTS_42, "")?, Expect::Rewarded));
    // Half a core, so the bomb cannot starve its siblings; a short agent limit bounds it.
    let bomb_toml = "[environment]\ncpus = 0.5\n";
    let bomb = write_task(&tasks_dir, "z-fork-bomb", "FORK-BOMB", TESTS_42, bomb_toml)?;
    // Its tests may find no process slot left: their own limit bounds them too.
    let bomb_limits = "version = \"1.0\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n";
    std::fs::write(bomb.join("task.toml"), format!("{bomb_limits}{bomb_toml}"))?;
    tasks.push((bomb, Expect::Hostile));
    Ok((tasks, leaky))
}

/// The flood's conversation among the mock's conversations (see [`mixed_script`]).
const FLOOD_CONVERSATION: usize = 4;

/// What the mock model answers the mixed job's tasks: each marker's conversation, the
/// degenerate replies in order, plain prose for the rest.
fn mixed_script() -> Script {
    let plant = "mkdir -p /tests && touch /tests/planted.txt && echo 1 > /logs/verifier/reward.txt && \
                 (setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' </dev/null >/dev/null 2>&1 &) && \
                 (nohup sh -c 'kill -STOP $$; echo 1 > /logs/verifier/reward.txt' </dev/null >/dev/null 2>&1 &)\n";
    let dashes = json!([
        {"keystrokes": "echo ", "duration": 0.1},
        {"keystrokes": "-la", "duration": 0.1},
        {"keystrokes": " --help > /app/answer.txt", "duration": 0.1},
        {"keystrokes": "\n", "duration": 0.3}
    ]);
    let nested = format!(
        "{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    Script {
        conversations: vec![
            conversation("hello.txt", hello_world_script(0.3).conversations.remove(0).turns),
            conversation("WRITE-42", vec![run("echo 42 > /app/answer.txt\n", 0.3), done(), done()]),
            conversation("TYPE-DASHES", vec![reply(dashes, false), done(), done()]),
            conversation("PLANT-A-REWARD", vec![run(plant, 1.0), done(), done()]),
            flood(2_000_000, QUICK_TURNS),
            log_bomb(1536, 25_000),
            conversation(
                "FORK-BOMB",
                vec![run(":(){ :|:& };:\n", 5.0), run("echo 42 > /app/answer.txt\n", 0.5), done(), done()],
            ),
        ],
        // Each degenerate reply once, in order, then the claims: a summarization (the replies
        // fill the context) must not start them over.
        sequential: vec![conversation(
            "DEGENERATE",
            vec![
                raw("[".repeat(1_000_000)),
                raw(nested),
                raw("{\"analysis\": \"unterminated".to_string() + &"\\\"".repeat(50_000)),
                raw("\u{0}\u{1}{{{{<<<>>>".repeat(10_000)),
                done(),
                done(),
            ],
        )],
        // Summaries and anything unforeseen get plain prose.
        default: Some(raw("Nothing useful was done so far.".into())),
        ..Script::default()
    }
}

/// What was seen while the mixed job ran.
struct Watched {
    code: Option<i32>,
    peak_rss: f64,
    baseline_processes: usize,
    peak_processes: usize,
    /// The exit code and stderr of a second `run` of the job's file while it ran.
    second_run: Option<(Option<i32>, String)>,
    /// The same for a `resume` of its directory.
    second_resume: Option<(Option<i32>, String)>,
}

/// Runs the mixed job to its end (within its deadline), reading the orchestrator's peak RSS and
/// the host's process count throughout; once it is under way, runs it a second time and
/// resumes it, both of which must be refused.
async fn watch_mixed_job(dir: &Path, job_dir: &Path, log: &Path, config_arg: &str) -> anyhow::Result<Watched> {
    let baseline_processes = host_processes();
    let mut child = spawn_terminus(&["run", "-q", "-c", config_arg], dir, log)?;
    let pid = child.id();
    let (mut peak_rss, mut peak_processes) = (0.0f64, baseline_processes);
    let mut second_run = None;
    let mut second_resume = None;
    let deadline = Instant::now() + JOB_DEADLINE;
    let mut last_count = Instant::now();
    let code = loop {
        if let Some(rss) = peak_rss_mib(pid) {
            peak_rss = peak_rss.max(rss);
        }
        if last_count.elapsed() > Duration::from_millis(500) {
            peak_processes = peak_processes.max(host_processes());
            last_count = Instant::now();
        }
        // Once the job is under way: a second run and a resume of the same directory.
        if second_run.is_none() && job_id(job_dir).is_some() {
            second_run = Some(cli(&["run", "-q", "-c", config_arg], dir).await);
            second_resume = Some(cli(&["resume", "-q", &job_dir.to_string_lossy()], dir).await);
        }
        if let Some(status) = child.try_wait()? {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    Ok(Watched { code, peak_rss, baseline_processes, peak_processes, second_run, second_resume })
}

/// Checks each trial against what its task must end with; returns every trial's reward and
/// error by task.
fn check_trials(
    tasks: &[(PathBuf, Expect)],
    results: &[Value],
    checks: &mut Vec<(String, bool)>,
) -> serde_json::Map<String, Value> {
    let mut outcomes = serde_json::Map::new();
    for (task, expect) in tasks {
        let name = task.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let result = results.iter().find(|r| r["task_name"] == name);
        let reward = result.and_then(|r| r["verifier_result"]["rewards"]["reward"].as_f64());
        let error = result.and_then(|r| r["exception_info"]["exception_type"].as_str()).map(str::to_string);
        let message = result.and_then(|r| r["exception_info"]["exception_message"].as_str()).unwrap_or_default();
        let held = match expect {
            Expect::Rewarded => result.is_some() && error.is_none() && reward == Some(1.0),
            Expect::Hostile => result.is_some() && reward != Some(1.0),
            Expect::Refused(path) => {
                error.as_deref() == Some("TaskLoadError")
                    && message.contains(path)
                    && message.contains("outside the task")
            }
        };
        checks.push((format!("{name}: {expect:?} (reward {reward:?}, error {error:?})"), held));
        outcomes.insert(name.to_string(), json!({"reward": reward, "error": error}));
    }
    outcomes
}

/// Checks what reached the job's directory: not the planted reward file, and the log bomb
/// only up to the limits, with the cut named.
fn check_job_files(job_dir: &Path, results: &[Value], checks: &mut Vec<(String, bool)>) {
    // The planted reward file was removed before the tests, not copied back.
    let planted_file = std::fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("planted"))
        .any(|e| e.path().join("verifier/reward.txt").exists());
    checks.push(("the planted reward.txt did not reach the results".into(), !planted_file));
    // The log bomb was cut at the limits, and the cut is named.
    let bomb_warnings = results
        .iter()
        .find(|r| r["task_name"] == "log-bomb")
        .and_then(|r| r["warnings"].as_array().cloned())
        .unwrap_or_default();
    let named = bomb_warnings
        .iter()
        .any(|w| w.as_str().is_some_and(|w| w.contains("/logs/agent") && w.contains("were copied")));
    let copied: u64 = std::fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("log-bomb"))
        .map(|e| dir_bytes(&e.path().join("agent")))
        .sum();
    checks.push((
        format!(
            "the log bomb was cut at the limits ({} MiB copied) and the cut is named: {bomb_warnings:?}",
            copied >> 20
        ),
        named && copied <= (1024 + 1) << 20,
    ));
}

/// Checks the orchestrator's peak RSS and the processes the fork bomb added to the host.
fn check_host(watched: &Watched, checks: &mut Vec<(String, bool)>) {
    let peak_rss = watched.peak_rss;
    checks.push((
        format!("orchestrator peak RSS {peak_rss:.0} MiB with 1.5 GB of agent logs (< {RSS_LIMIT_MIB} MiB)"),
        peak_rss > 0.0 && peak_rss < RSS_LIMIT_MIB,
    ));
    // The fork bomb met its container's limit (4096) instead of the host's.
    let extra_processes = watched.peak_processes.saturating_sub(watched.baseline_processes);
    checks.push((
        format!("the fork bomb added at most {extra_processes} processes to the host (< 4096 + 1000)"),
        extra_processes < 5096,
    ));
}

/// Checks the turns of the quick commands after the flood; returns them.
fn check_turns(server: &MockServer, checks: &mut Vec<(String, bool)>) -> Vec<f64> {
    // Turn costs after the flood: from each `echo hi` reply to the next request, less its wait.
    let turns = quick_turn_costs(&server.requests(), FLOOD_CONVERSATION, QUICK_TURNS);
    let worst = turns.iter().copied().fold(f64::NAN, f64::max);
    checks.push((
        format!("after 2 M lines, a 0.1 s command's turn costs {worst:.3} s (< {TURN_LIMIT_SEC} s; turns {turns:.3?})"),
        turns.len() == QUICK_TURNS && worst < TURN_LIMIT_SEC,
    ));
    turns
}

/// Checks that the second run and the resume of the running job were refused, naming the holder.
fn check_second_runs(watched: &Watched, checks: &mut Vec<(String, bool)>) {
    for (what, outcome) in [("a second run", &watched.second_run), ("a resume", &watched.second_resume)] {
        let (code, stderr) = outcome.clone().unwrap_or((None, String::new()));
        checks.push((
            format!("{what} of the running job exited {code:?} (expected 5, naming the holder): {}", stderr.trim()),
            code == Some(5) && stderr.contains("in use by another terminus"),
        ));
    }
}

/// Checks that `tasks check` refuses the task whose environment links a host secret.
fn check_leaky_task(leaky: &Path, checks: &mut Vec<(String, bool)>) -> anyhow::Result<()> {
    let (check_code, check_out) = {
        let out = Command::new(terminus_bin()).args(["tasks", "check"]).arg(leaky).output()?;
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr))
    };
    checks.push((
        format!("`tasks check` of the leaky task exited {check_code:?} naming environment/key"),
        check_code == Some(2) && check_out.contains("environment/key"),
    ));
    Ok(())
}

/// A small ext4 image mounted on a loop device, unmounted (and its loop device freed) on drop.
struct LoopDisk {
    mount: PathBuf,
}

impl LoopDisk {
    fn mount(image: &Path, mount: &Path, size_mb: u32) -> anyhow::Result<LoopDisk> {
        // A mount an earlier, interrupted run left (usually none: the error is not shown).
        let _ = Command::new("umount").arg(mount).stderr(Stdio::null()).status();
        std::fs::create_dir_all(mount)?;
        let _ = std::fs::remove_file(image);
        let file = std::fs::File::create(image)?;
        file.set_len(u64::from(size_mb) * 1024 * 1024)?;
        // No blocks reserved for root (who runs this): "full" must mean full.
        let status = Command::new("mkfs.ext4").args(["-q", "-F", "-m", "0"]).arg(image).status()?;
        anyhow::ensure!(status.success(), "mkfs.ext4 failed on {}", image.display());
        let status = Command::new("mount").args(["-o", "loop"]).arg(image).arg(mount).status()?;
        anyhow::ensure!(status.success(), "cannot loop-mount {} (root is needed)", image.display());
        Ok(LoopDisk { mount: mount.to_path_buf() })
    }

    /// Fills the disk with a file until about `left_kb` KiB are free.
    fn fill(&self, left_kb: u64) -> anyhow::Result<PathBuf> {
        let filler = self.mount.join("filler");
        let free = free_kb(&self.mount)?;
        let size = free.saturating_sub(left_kb) * 1024;
        let status = Command::new("fallocate").args(["-l", &size.to_string()]).arg(&filler).status()?;
        anyhow::ensure!(status.success(), "fallocate failed");
        Ok(filler)
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

fn free_kb(path: &Path) -> anyhow::Result<u64> {
    let out = Command::new("df").args(["-k", "--output=avail"]).arg(path).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().nth(1).unwrap_or_default().trim().parse()?)
}

/// The disk under the jobs directory fills up mid-job: the job halts resumably (exit 4) and no
/// trial is restarted for it; once space is freed, `resume` finishes every trial.
async fn full_disk(ctx: &Ctx, dir: &Path) -> anyhow::Result<Part> {
    const TRIALS: usize = 8;
    let disk = LoopDisk::mount(&dir.join("small.ext4"), &dir.join("small"), 32)?;
    let server = MockServer::start(hello_world_script(0.2), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir: &disk.mount,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 2,
        kwargs: "      record_terminal_session: false\n",
        extra: "",
    }
    .write()?;
    // Room for the job's start and a few trials, not for all of them.
    let filler = disk.fill(120)?;
    let job_dir = disk.mount.join("job");
    let log = dir.join("full-disk.log");
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &log)?;
    let halted = wait_bounded(child, JOB_DEADLINE).await;
    let before = trial_results(&job_dir).len();
    std::fs::remove_file(&filler)?;
    let child = spawn_terminus(&["resume", "-q", &job_dir.to_string_lossy()], dir, &log)?;
    let resumed = wait_bounded(child, JOB_DEADLINE).await;
    server.shutdown();
    let tally = tally(&job_dir, TRIALS, &ctx.engine).await;
    let results = trial_results(&job_dir);
    let rewarded = results.iter().filter(|r| r["verifier_result"]["rewards"]["reward"] == 1.0).count();
    let restarted = results.iter().filter(|r| r["restarts"].as_u64().unwrap_or(0) > 0).count();
    let checks = vec![
        (
            format!("the full disk halted the job with exit {halted:?} (expected 4), {before} of {TRIALS} done"),
            halted == Some(4) && before < TRIALS,
        ),
        (format!("the resume exited {resumed:?} (expected 0)"), resumed == Some(0)),
        (
            format!("{rewarded} of {TRIALS} trials rewarded, {restarted} restarted for the disk"),
            rewarded == TRIALS && restarted == 0,
        ),
    ];
    let seen = json!({"halt_exit": halted, "done_at_halt": before, "resume_exit": resumed});
    Ok((tally, checks, seen))
}

fn signal(pid: i32, signal: libc::c_int) -> bool {
    #[expect(unsafe_code, reason = "a libc call with no safe wrapper in our dependencies")]
    // SAFETY: kill(2) with a pid we just read and a standard signal has no memory effects.
    let sent = unsafe { libc::kill(pid, signal) } == 0;
    sent
}

/// dockerd stopped (not killed) twice mid-job: for 40 s, less than any deadline, and for 150 s,
/// longer than a terminal request may take. The job waits for the engine either way.
async fn stopped_engine(ctx: &Ctx, dir: &Path) -> anyhow::Result<Part> {
    const TRIALS: usize = 8;
    let server = MockServer::start(hello_world_script(2.0), 0).await?;
    let api_base = server.api_base();
    let config = JobFile {
        dir,
        name: "stopped",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 4,
        kwargs: "      record_terminal_session: false\n",
        extra: "",
    }
    .write()?;
    let job_dir = dir.join("stopped");
    let _ = std::fs::remove_dir_all(&job_dir);
    let log = dir.join("stopped.log");
    let began = Instant::now();
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &log)?;
    let pid = dockerd_pid().ok_or_else(|| anyhow::anyhow!("no dockerd to stop"))?;
    let mut pauses = Vec::new();
    for (after_requests, pause) in [(2usize, 40u64), (10, 150)] {
        let wait_until = Instant::now() + Duration::from_secs(120);
        while server.requests().len() < after_requests && Instant::now() < wait_until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let done = trial_results(&job_dir).len();
        anyhow::ensure!(signal(pid, libc::SIGSTOP), "cannot stop dockerd (pid {pid})");
        tokio::time::sleep(Duration::from_secs(pause)).await;
        let resumed = signal(pid, libc::SIGCONT);
        pauses.push(json!({"sec": pause, "done_before": done, "resumed": resumed}));
        anyhow::ensure!(resumed, "cannot continue dockerd (pid {pid})");
    }
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let wall = began.elapsed().as_secs_f64();
    server.shutdown();
    let tally = tally(&job_dir, TRIALS, &ctx.engine).await;
    let results = trial_results(&job_dir);
    let rewarded = results.iter().filter(|r| r["verifier_result"]["rewards"]["reward"] == 1.0).count();
    let waited = std::fs::read_to_string(job_dir.join("job.log")).is_ok_and(|l| l.contains("does not answer"));
    let checks = vec![
        (format!("with dockerd stopped twice the job exited {code:?} (expected 0) in {wall:.0} s"), code == Some(0)),
        (format!("{rewarded} of {TRIALS} trials rewarded"), rewarded == TRIALS),
        ("the job waited for the stopped engine (job.log says so)".into(), waited),
    ];
    let seen = json!({"exit_code": code, "wall_sec": wall, "pauses": pauses});
    Ok((tally, checks, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(expected: usize, present: usize, duplicated: usize, leaked: usize) -> Tally {
        Tally { expected, present, duplicated, leaked }
    }

    #[test]
    fn the_parts_add_up_field_by_field() {
        let mut total = Tally::default();
        add(&mut total, tally(12, 12, 0, 0));
        add(&mut total, tally(6, 5, 1, 0));
        add(&mut total, tally(3, 3, 0, 2));
        assert_eq!(total, tally(21, 20, 1, 2));
        add(&mut total, Tally::default());
        assert_eq!(total, tally(21, 20, 1, 2), "an empty part changes nothing");
    }

    #[test]
    fn the_total_is_ok_only_when_every_part_is() {
        let ok = [tally(12, 12, 0, 0), tally(6, 6, 0, 0), tally(3, 3, 0, 0)];
        let mut total = Tally::default();
        for part in ok {
            add(&mut total, part);
        }
        assert!(total.ok(), "{total}");
        // One part short, one run twice, one container left: each makes the whole case fail.
        for bad in [tally(6, 5, 0, 0), tally(6, 6, 1, 0), tally(6, 6, 0, 1)] {
            let mut total = Tally::default();
            for part in [ok[0], bad, ok[2]] {
                add(&mut total, part);
            }
            assert!(!total.ok(), "{bad} hidden in {total}");
        }
    }
}
