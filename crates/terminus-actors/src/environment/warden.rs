//! The verification's steps inside the container, each one exec of the warden (the host's own
//! program, mounted read-only and started by absolute path: see `terminus_sandbox::warden`):
//! the kill and reset before the tests ([`prepare`]), the tests' run with the verdict read the
//! instant they end ([`run`]), and the terminal let go again when the tests cannot run
//! ([`thaw`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use terminus_config::policy::AgentProcesses;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_sandbox::{Environment, ExecOptions};

/// What is killed in the container around the tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sweep {
    /// Nothing: what the agent left runs on through the tests, as in Harbor.
    Keep,
    /// Everything but the container's own idle command, before the tests and the instant they
    /// end.
    All,
    /// As `All`, but the terminal a later step goes on in, which is frozen from before the
    /// tests until their verdict is read. `ready_at`: when the terminal was handed to the agent
    /// (what started after that is the agent's).
    AllButTerminal { ready_at: TerminalReady },
}

/// When the terminal was handed to the agent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TerminalReady {
    /// By the container's clock (`/proc/uptime`, read in the terminal's own channel): exact.
    Uptime(f64),
    /// By the host's, when the container's could not be read: the exec's latency late.
    Host(Instant),
}

impl Sweep {
    fn args(self) -> Vec<String> {
        let (kill, ready) = match self {
            Sweep::Keep => ("none", None),
            Sweep::All => ("all", None),
            Sweep::AllButTerminal { ready_at } => ("terminal", Some(ready_at)),
        };
        let mut args = vec!["--kill".to_string(), kill.into()];
        match ready {
            Some(TerminalReady::Uptime(uptime)) => args.extend(["--ready-uptime".into(), format!("{uptime:.2}")]),
            Some(TerminalReady::Host(at)) => {
                args.extend(["--ready-ago".into(), format!("{:.3}", at.elapsed().as_secs_f64())]);
            }
            None => {}
        }
        args
    }
}

/// What is emptied before the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    /// Only the reward files: the tests are uploaded over what the image has in `/tests` (a
    /// helper it ships there stays), as Harbor's single-step verifier does.
    Rewards,
    /// `/tests` and `/logs/verifier` emptied: nothing the agent planted there (a `conftest.py`,
    /// a verdict) is seen by the tests (`agent_processes: kill`, and every step of a
    /// multi-step task, whose directories Harbor empties between steps). When the task's
    /// sidecars write in `/logs/verifier` too, what they wrote is the tests' input: only the
    /// reward files go from there.
    Everything,
}

/// As root, whatever the image's `USER`.
fn as_root(timeout: Duration, env: Vec<String>) -> ExecOptions {
    ExecOptions { user: Some("root".into()), env, timeout: Some(timeout), ..ExecOptions::default() }
}

/// The longest the warden waits for what it kills to be gone, each time it kills.
const KILL_WAIT: Duration = Duration::from_secs(30);

/// The processes alive when a trial's tests started, by command name (init, the container's
/// idle command and the warden left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessCensus {
    pub commands: BTreeMap<String, u32>,
}

impl ProcessCensus {
    pub fn count(&self) -> u32 {
        self.commands.values().sum()
    }

    /// As the result records it (`agent_result.metadata.processes_at_verification`).
    pub fn to_json(&self, policy: AgentProcesses) -> serde_json::Value {
        serde_json::json!({"policy": policy.name(), "count": self.count(), "commands": self.commands})
    }
}

/// What the warden is told of the host's on every `prepare`, `run` and `thaw`.
fn host_options() -> [String; 4] {
    ["--idle-mark".into(), terminus_sandbox::IDLE_MARK.into(), "--kill-wait".into(), KILL_WAIT.as_secs().to_string()]
}

/// Kills what `sweep` says, resets what `reset` says (`/logs/verifier` owned by `owner`, the
/// tests' user) and counts what still runs.
pub async fn prepare(
    container: &Environment,
    owner: Option<&str>,
    sweep: Sweep,
    reset: Reset,
) -> Result<ProcessCensus, TrialError> {
    let failed = |message: String| {
        TrialError::new(TrialErrorKind::AddTestsDir, format!("could not prepare the verification: {message}"))
    };
    let reset = match reset {
        Reset::Rewards => "rewards",
        Reset::Everything if container.shares_with_sidecars(terminus_core::layout::container::VERIFIER_LOGS) => {
            "shared"
        }
        Reset::Everything => "everything",
    };
    let mut args = vec!["prepare".to_string(), "--reset".into(), reset.into(), "--owner".into()];
    args.push(owner.unwrap_or("root").to_string());
    args.extend(sweep.args());
    args.extend(host_options());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out =
        container.exec_warden(&args, &as_root(KILL_WAIT * 2, Vec::new())).await.map_err(|e| failed(e.to_string()))?;
    if out.exit_code != Some(0) || !out.output.lines().any(|l| l == "ok") {
        return Err(failed(format!("exit code {:?}: {}", out.exit_code, tail(&out.output))));
    }
    Ok(read_census(&out.output))
}

/// The processes a `prepare` printed.
pub(super) fn read_census(output: &str) -> ProcessCensus {
    let mut commands = BTreeMap::new();
    for name in output.lines().filter_map(|l| l.strip_prefix("process:")) {
        *commands.entry(name.to_string()).or_insert(0) += 1;
    }
    ProcessCensus { commands }
}

/// Lets a terminal that `prepare` froze go on (when the tests will not run).
pub async fn thaw(container: &Environment, sweep: Sweep) {
    if !matches!(sweep, Sweep::AllButTerminal { .. }) {
        return;
    }
    let mut args = vec!["thaw".to_string()];
    args.extend(sweep.args());
    args.extend(host_options());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Err(e) = container.exec_warden(&args, &as_root(Duration::from_secs(60), Vec::new())).await {
        tracing::warn!(container = %container.name, error = %e, "could not let the terminal go on");
    }
}

/// How the tests' run ended, as the warden saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    Exit(i64),
    Signal(i64),
    TimedOut,
    /// They could not be started.
    Failed(String),
}

/// What the warden read the instant the tests ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub ended: Ended,
    /// Each reward file there was: its bytes, or why they were not read.
    pub files: BTreeMap<String, Result<Vec<u8>, String>>,
}

/// Runs `/tests/test.sh` as `user` with `env`, within `timeout`.
pub async fn run(
    container: &Environment,
    user: Option<&str>,
    env: Vec<String>,
    timeout: Duration,
    sweep: Sweep,
) -> Result<Verdict, TrialError> {
    let mut args = vec!["run".to_string(), "--user".into(), user.unwrap_or("root").to_string()];
    args.extend(["--timeout".to_string(), format!("{:.3}", timeout.as_secs_f64())]);
    args.extend(sweep.args());
    args.extend(host_options());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The warden keeps the tests' time itself; the exec's own limit only covers a hung engine.
    let limit = timeout + KILL_WAIT * 2 + Duration::from_secs(30);
    match container.exec_warden(&args, &as_root(limit, env)).await {
        Ok(out) => read_verdict(out.output.as_bytes()).ok_or_else(|| {
            TrialError::new(TrialErrorKind::Runtime, format!("running the tests failed: {}", tail(&out.output)))
        }),
        Err(terminus_sandbox::SandboxError::Timeout { .. }) => {
            Ok(Verdict { ended: Ended::TimedOut, files: BTreeMap::new() })
        }
        Err(e) => Err(TrialError::new(TrialErrorKind::Runtime, format!("running the tests failed: {e}"))),
    }
}

/// Reads the warden's report of a run (None: it is not one).
pub(super) fn read_verdict(mut report: &[u8]) -> Option<Verdict> {
    let mut ended = None;
    let mut files = BTreeMap::new();
    while !report.is_empty() {
        let end = report.iter().position(|b| *b == b'\n').unwrap_or(report.len());
        let line = String::from_utf8_lossy(&report[..end]).into_owned();
        report = report.get(end + 1..).unwrap_or_default();
        let mut words = line.splitn(3, ' ');
        match (words.next(), words.next(), words.next()) {
            (Some("tests"), Some("exit"), Some(code)) => ended = Some(Ended::Exit(code.parse().ok()?)),
            (Some("tests"), Some("signal"), Some(signal)) => ended = Some(Ended::Signal(signal.parse().ok()?)),
            (Some("tests"), Some("timeout"), None) => ended = Some(Ended::TimedOut),
            (Some("tests"), Some("failed"), why) => ended = Some(Ended::Failed(why.unwrap_or_default().to_string())),
            (Some("reward"), Some(name), Some(length)) => {
                let length: usize = length.parse().ok()?;
                let bytes = report.get(..length)?.to_vec();
                report = report.get(length + 1..).unwrap_or_default();
                files.insert(name.to_string(), Ok(bytes));
            }
            (Some("reward-refused"), Some(name), why) => {
                files.insert(name.to_string(), Err(why.unwrap_or_default().to_string()));
            }
            _ => return None,
        }
    }
    Some(Verdict { ended: ended?, files })
}

/// The end of a command's output, for an error message.
fn tail(output: &str) -> &str {
    let output = output.trim();
    let start = output.len().saturating_sub(2000);
    let start = (start..output.len()).find(|&i| output.is_char_boundary(i)).unwrap_or(output.len());
    &output[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_report_is_read_byte_for_byte() {
        let report = b"tests exit 1\nreward reward.txt 4\n1\n\n\n\nreward-refused reward.json not a regular file\n";
        let verdict = read_verdict(report).unwrap();
        assert_eq!(verdict.ended, Ended::Exit(1));
        assert_eq!(verdict.files["reward.txt"], Ok(b"1\n\n\n".to_vec()), "a file's own newlines are its");
        assert_eq!(verdict.files["reward.json"], Err("not a regular file".to_string()));
        assert_eq!(read_verdict(b"tests timeout\n").unwrap().ended, Ended::TimedOut);
        assert_eq!(read_verdict(b"reward reward.txt 1\n1\n"), None, "no outcome: not a report");
        assert_eq!(read_verdict(b"tests exit 0\nreward reward.txt 9\n1\n"), None, "cut short");
        assert_eq!(read_verdict(b"error no command\n"), None);
    }
}
