//! Shared pieces of the benchmark and the chaos suite: running the `terminus` binary as a child
//! process with its resource usage, the mock model, reading a finished job back, percentiles.
//!
//! Both tools drive the real binary against the real engine, with the mock model on loopback,
//! so what they measure is what users run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use terminus_core::layout::{JobDir, TrialDir};
use terminus_core::result::TrialConfig;

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, Script, Turn, UsageSpec};

pub mod hostile;

/// The repository root (the tools run from it, like the scripts).
pub fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The `terminus` binary next to this one (both are built by `cargo build --release`).
pub fn terminus_bin() -> PathBuf {
    let me = std::env::current_exe().expect("the current executable");
    me.with_file_name("terminus")
}

/// Bytes and count of the regular files under `dir` (links not followed).
pub fn dir_size(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(entry.path()),
                Ok(t) if t.is_file() => {
                    bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
                    files += 1;
                }
                _ => {}
            }
        }
    }
    (bytes, files)
}

/// Bytes of the regular files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    dir_size(dir).0
}

/// Resource usage of a finished child.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub exit_code: Option<i32>,
    pub wall: Duration,
    pub cpu_seconds: f64,
    pub max_rss_mib: f64,
}

/// Starts `terminus` with `args` in `cwd`; stdout and stderr go to `log` (appended).
pub fn spawn_terminus(args: &[&str], cwd: &Path, log: &Path) -> anyhow::Result<Child> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut command = Command::new(terminus_bin());
    command.args(args).current_dir(cwd).stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    Ok(command.spawn()?)
}

/// Waits for a child and reads its CPU time (`wait4`) and peak memory.
///
/// The peak is the child's own `VmHWM`, read every 50 ms while it runs. `wait4`'s `ru_maxrss`
/// would not do: a child started by posix_spawn execs from this process's address space, and
/// the kernel keeps that space's peak as the child's, so it reports the bench's own size.
pub fn wait_with_usage(child: Child, started: Instant) -> Usage {
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    let mut peak_kib = 0u64;
    let rusage = loop {
        // Read before the check: what is read last is at most 50 ms older than the end.
        if let Some(kib) = vm_hwm_kib(pid) {
            peak_kib = peak_kib.max(kib);
        }
        #[expect(unsafe_code, reason = "a libc call with no safe wrapper in our dependencies")]
        // SAFETY: wait4 fills the two out-parameters we own; the pid is our own child, reaped once.
        let (reaped, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            (libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage), usage)
        };
        if reaped != 0 {
            break usage;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The Child handle must not reap again.
    std::mem::forget(child);
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let exit_code = if libc::WIFEXITED(status) { Some(libc::WEXITSTATUS(status)) } else { None };
    Usage {
        exit_code,
        wall: started.elapsed(),
        cpu_seconds: tv(rusage.ru_utime) + tv(rusage.ru_stime),
        max_rss_mib: peak_kib as f64 / 1024.0,
    }
}

/// A running process's peak resident set (`VmHWM` in `/proc/PID/status`), in KiB.
fn vm_hwm_kib(pid: libc::pid_t) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A script for the mock model that solves `examples/tasks/hello-world` in three calls (command,
/// claim, confirm) and answers at once.
pub fn hello_world_script(duration: f64) -> Script {
    let reply = |commands: Value, complete: bool| Turn {
        usage: Some(UsageSpec { prompt_tokens: 700, completion_tokens: 40, cached_tokens: 0 }),
        ..hostile::reply(commands, complete)
    };
    Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                reply(json!([{"keystrokes": "printf 'Hello, world!\\n' > hello.txt\n", "duration": duration}]), false),
                reply(json!([]), true),
                reply(json!([]), true),
            ],
        }],
        ..Script::default()
    }
}

/// A job file for `attempts` attempts of one task against the mock model.
pub struct JobFile<'a> {
    pub dir: &'a Path,
    pub name: &'a str,
    pub api_base: &'a str,
    pub task: &'a Path,
    pub attempts: usize,
    pub concurrency: usize,
    /// Extra agent kwargs, as YAML lines indented by six spaces.
    pub kwargs: &'a str,
    /// Extra top-level YAML (e.g. `llm:` or `supervision:` blocks).
    pub extra: &'a str,
}

impl JobFile<'_> {
    /// Writes `<dir>/<name>.yaml` and returns its path; the job itself goes to `<dir>/<name>/`.
    pub fn write(&self) -> anyhow::Result<PathBuf> {
        let yaml = format!(
            "jobs_dir: {}\njob_name: {}\nn_attempts: {}\nn_concurrent_trials: {}\n{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n{}tasks:\n  - path: {}\n",
            self.dir.display(),
            self.name,
            self.attempts,
            self.concurrency,
            self.extra,
            self.api_base,
            self.kwargs,
            self.task.display()
        );
        let path = self.dir.join(format!("{}.yaml", self.name));
        std::fs::write(&path, yaml)?;
        Ok(path)
    }
}

/// The job's own `result.json`, once it has one.
pub fn job_result(job_dir: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(JobDir::new(job_dir).result_json()).ok()?).ok()
}

/// The job's id, from its `result.json`.
pub fn job_id(job_dir: &Path) -> Option<String> {
    job_result(job_dir)?.get("id").and_then(Value::as_str).map(str::to_string)
}

/// The `result.json` of every trial directory of a job.
pub fn trial_results(job_dir: &Path) -> Vec<Value> {
    let mut results = Vec::new();
    for entry in std::fs::read_dir(job_dir).into_iter().flatten().flatten() {
        if let Some(value) = std::fs::read_to_string(TrialDir::new(entry.path()).result_json())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            results.push(value);
        }
    }
    results
}

/// Counts for the chaos suite: how many trials a job should have, has, has twice, and how many
/// of its containers outlived it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub expected: usize,
    pub present: usize,
    pub duplicated: usize,
    pub leaked: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "expected {} · present {} · duplicated {} · leaked {}",
            self.expected, self.present, self.duplicated, self.leaked
        )
    }
}

impl Tally {
    pub fn ok(&self) -> bool {
        self.present == self.expected && self.duplicated == 0 && self.leaked == 0
    }
}

/// Tallies a finished job: trials are keyed by (task path, agent index, attempt).
pub async fn tally(job_dir: &Path, expected: usize, engine: &terminus_sandbox::Engine) -> Tally {
    let (present, duplicated) = finished_trials(job_dir);
    let job_id = job_id(job_dir).unwrap_or_default();
    let leaked = engine
        .containers_with_label(terminus_sandbox::LABEL_JOB_ID, Some(&job_id))
        .await
        .map(|c| c.len())
        .unwrap_or(usize::MAX);
    Tally { expected, present, duplicated, leaked }
}

/// The planned trials of a job directory that have a result, and how many results beyond one
/// a planned trial has (a trial run twice), by the key in each `config.json`. A directory
/// without a result or a key is not counted.
fn finished_trials(job_dir: &Path) -> (usize, usize) {
    let mut seen: HashMap<(String, usize, u32), usize> = HashMap::new();
    for entry in std::fs::read_dir(job_dir).into_iter().flatten().flatten() {
        let trial = TrialDir::new(entry.path());
        if !trial.result_json().is_file() {
            continue;
        }
        let config: Option<TrialConfig> =
            std::fs::read_to_string(trial.config_json()).ok().and_then(|t| serde_json::from_str(&t).ok());
        let Some(key) = config.as_ref().and_then(TrialConfig::trial_key) else { continue };
        *seen.entry(key).or_default() += 1;
    }
    (seen.len(), seen.values().map(|n| n - 1).sum())
}

/// Median and 90th percentile (nearest rank) of a sample.
pub fn median_p90(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    (rank(0.5), rank(0.9))
}

/// The RSS of the running `dockerd`, in MiB (0 when it cannot be read).
pub fn dockerd_rss_mib() -> f64 {
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let path = entry.path();
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "dockerd") {
            let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
            if let Some(kb) = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
            {
                return kb / 1024.0;
            }
        }
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a trial directory `name` whose config has (`task`, agent 0, `attempt`), with a
    /// result when `finished`.
    fn trial(job: &Path, name: &str, task: &str, attempt: Option<u32>, finished: bool) {
        let dir = job.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut config = TrialConfig { attempt, agent_index: Some(0), ..TrialConfig::default() };
        config.task.path = task.into();
        std::fs::write(dir.join("config.json"), serde_json::to_string(&config).unwrap()).unwrap();
        if finished {
            std::fs::write(dir.join("result.json"), "{}").unwrap();
        }
    }

    #[test]
    fn finished_trials_are_counted_once_and_a_repeat_is_a_duplicate() {
        let job = tempfile::tempdir().unwrap();
        trial(job.path(), "a__1", "tasks/a", Some(0), true);
        trial(job.path(), "a__2", "tasks/a", Some(1), true);
        trial(job.path(), "b__1", "tasks/b", Some(0), true);
        // The same planned trial again (a restart that left a second directory): a duplicate.
        trial(job.path(), "b__2", "tasks/b", Some(0), true);
        // Not finished, or not terminus's (no attempt): not counted.
        trial(job.path(), "c__1", "tasks/c", Some(0), false);
        trial(job.path(), "d__1", "tasks/d", None, true);
        std::fs::write(job.path().join("result.json"), "{}").unwrap();
        assert_eq!(finished_trials(job.path()), (3, 1));
        assert_eq!(finished_trials(&job.path().join("missing")), (0, 0));
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(median_p90(&values), (5.0, 9.0));
        assert!(median_p90(&[]).0.is_nan());
    }
}
