//! Verification in the agent's container: the task's tests uploaded, the container prepared
//! (the agent's processes stopped or kept, `/tests` and `/logs/verifier` reset), the tests run
//! as the verifier's user with its environment, and the rewards read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::collect::{CopyLimits, fetch, fetch_agent_logs};
use super::warden::{self, ProcessCensus, Reset, Sweep};
use terminus_config::Task;
use terminus_config::policy::AgentProcesses;
use terminus_config::task::StepSection;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::layout::{TrialDir, container as paths, names};
use terminus_sandbox::{Container, Environment, ExecOptions, archive, blocking};

/// Puts the task's `tests/` at `/tests` in the container; for a step, the step's
/// `steps/<name>/tests/` over them (its `test.sh` wins over the task's, as in Harbor).
pub async fn upload_tests(task: &Task, step: Option<&StepSection>, container: &Container) -> Result<(), TrialError> {
    let mut dirs = vec![task.tests_dir()];
    dirs.extend(step.map(|step| task.step_dir(step).join("tests")));
    dirs.retain(|dir| step.is_none() || dir.is_dir());
    upload_test_dirs(&dirs, container).await
}

/// Puts the contents of `dirs` at `/tests` in the container, in order (a later file wins: a
/// step's tests over the task's).
pub async fn upload_test_dirs(dirs: &[PathBuf], container: &Container) -> Result<(), TrialError> {
    let error = |e: &dyn std::fmt::Display| TrialError::new(TrialErrorKind::AddTestsDir, e.to_string());
    for dir in dirs {
        let dir = dir.clone();
        let tests = blocking(move || archive::tar_dir(&dir, "tests")).await.map_err(|e| error(&e))?;
        container.upload_tar("/", tests).await.map_err(|e| error(&e))?;
    }
    Ok(())
}

/// Runs `tests/test.sh` (uploaded by [`upload_tests`]) and reads the reward; copies
/// `/logs/agent` out too with `agent_logs` (without: teardown copies them, with the terminal's
/// final files — one archive copy fewer per trial, each a helper process of the engine's).
/// `notes` gets what was cut from the copied logs.
pub async fn verify_task(
    grading: &Grading<'_>,
    container: &Environment,
    trial_dir: &TrialDir,
    limits: CopyLimits,
    agent_logs: bool,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    let Grading { task, step, timeout, job_env, host, sweep } = *grading;
    // The task's `[verifier].env`, a step's own over it (Harbor merges, then resolves).
    let mut raw = task.config.verifier.env.clone();
    raw.extend(step.map(|s| s.verifier.env.clone()).unwrap_or_default());
    // An allowlisted verifier's HTTP clients go through the proxy; the task and the job may
    // still say otherwise.
    let mut env = task.phase_plan(step).verifier.proxy_env();
    env.extend(verifier_env(task, &raw, job_env, host)?);
    let run = TestRun { user: task.verifier_user(step), env, timeout, agent_logs, sweep };
    if let Err(error) = check_tampering(container, task, step, sweep, notes).await {
        warden::thaw(container, sweep).await;
        return Err(error);
    }
    run_tests(container, &run, trial_dir, limits, notes).await
}

/// Looks for tamper evidence ([`super::tamper`]) before the tests run. With the agent's
/// processes killed it is an error (the tests do not run: their verdict could not be trusted);
/// when they are kept, as in Harbor, the result's notes say what was found and the tests run.
async fn check_tampering(
    container: &Environment,
    task: &Task,
    step: Option<&StepSection>,
    sweep: Sweep,
    notes: &mut Vec<String>,
) -> Result<(), TrialError> {
    let step_script = step.map(|s| task.step_dir(s).join("tests").join("test.sh")).filter(|p| p.is_file());
    let script = step_script.unwrap_or_else(|| task.tests_dir().join("test.sh"));
    let test_sh = crate::files::read_capped(&script, MAX_REWARD_FILE_BYTES * 4).unwrap_or_default();
    let strict = sweep != Sweep::Keep;
    match super::tamper::evidence(container, &test_sh).await {
        Ok(evidence) if evidence.is_empty() => Ok(()),
        Ok(evidence) if strict => Err(TrialError::new(
            TrialErrorKind::VerifierTampered,
            format!(
                "the agent changed what the verification runs, so its verdict is not taken: {}",
                evidence.join("; ")
            ),
        )),
        Ok(evidence) => {
            notes.push(format!("tamper evidence (graded anyway: agent_processes is keep): {}", evidence.join("; ")));
            Ok(())
        }
        Err(e) if strict => Err(TrialError::new(TrialErrorKind::Runtime, format!("could not look for tampering: {e}"))),
        Err(e) => {
            notes.push(format!("could not look for tampering: {e}"));
            Ok(())
        }
    }
}

/// How the tests run.
#[derive(Clone, Debug)]
pub struct TestRun {
    /// The verifier's user (None: the image's default user).
    pub user: Option<String>,
    /// `KEY=VALUE`, resolved ([`verifier_env`]).
    pub env: Vec<String>,
    pub timeout: Duration,
    /// Also copy `/logs/agent` out (the tests run where the agent ran).
    pub agent_logs: bool,
    /// What is killed around the tests.
    pub sweep: Sweep,
}

/// The tests' environment: `verifier_env` (the task's `[verifier].env`, or a step's over it;
/// its `${VAR}`s from the host), then the job's `verifier.env`.
pub fn verifier_env(
    task: &Task,
    verifier_env: &BTreeMap<String, String>,
    job_env: &BTreeMap<String, String>,
    host: &terminus_config::host_env::HostEnv,
) -> Result<Vec<String>, TrialError> {
    let task_env = terminus_config::task::resolve_host_env("verifier.env", verifier_env, host)
        .map_err(|e| TrialError::new(TrialErrorKind::InvalidValue, format!("task `{}`: {e}", task.name)))?;
    Ok(task_env.iter().chain(job_env.iter()).map(|(k, v)| format!("{k}={v}")).collect())
}

/// Runs `/tests/test.sh` in `container` as `run` says, copies `/logs/verifier` out (and
/// `/logs/agent`, with `agent_logs`) and grades the reward files as the warden read them the
/// instant the tests ended (what is in the copy under those names is replaced by that).
pub async fn run_tests(
    container: &Environment,
    run: &TestRun,
    trial_dir: &TrialDir,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    let verdict = match warden::run(container, run.user.as_deref(), run.env.clone(), run.timeout, run.sweep).await {
        Ok(verdict) => verdict,
        Err(error) => {
            warden::thaw(container, run.sweep).await;
            return Err(error);
        }
    };
    // The verifier's files first and on their own, so that however much the agent left in
    // /logs/agent (it may be cut at the copy limits) the verdict always arrives; then the agent's
    // (the terminal is closed by now), so teardown need not fetch them again.
    let verifier_dir = trial_dir.verifier_dir();
    let download = || {
        let verifier = verifier_dir.clone();
        fetch(container, paths::VERIFIER_LOGS, trial_dir.path(), limits, move |file, limits| {
            archive::unpack_stripped(file, &verifier, false, limits)
        })
    };
    // The copy is idempotent, and a busy engine may time one out (seen at a load of 15 on two
    // cores): once more before the verdict is lost.
    let note = match download().await {
        Ok(note) => note,
        Err(first) => {
            tracing::warn!(container = %container.name, error = %first, "copying /logs/verifier failed; trying once more");
            tokio::time::sleep(Duration::from_secs(1)).await;
            download().await.map_err(|e| TrialError::new(TrialErrorKind::DownloadVerifierDir, e))?
        }
    };
    notes.extend(note);
    if run.agent_logs {
        fetch_agent_logs(container, trial_dir, limits, notes).await;
    }
    match &verdict.ended {
        warden::Ended::TimedOut => {
            return Err(TrialError::new(
                TrialErrorKind::VerifierTimeout,
                format!("Verifier execution timed out after {} seconds", run.timeout.as_secs_f64()),
            ));
        }
        warden::Ended::Failed(why) => tracing::warn!(container = %container.name, why, "the tests could not start"),
        warden::Ended::Exit(_) | warden::Ended::Signal(_) => {}
    }
    place_verdict(&verifier_dir, &verdict)?;
    read_rewards(&verifier_dir)
}

/// Puts the reward files the warden read in `verifier_dir`, in place of what the copy brought
/// under those names. A file it would not read is an error when it is the one graded
/// (`reward.json`, else `reward.txt`).
fn place_verdict(verifier_dir: &Path, verdict: &warden::Verdict) -> Result<(), TrialError> {
    let parse_error = |message: String| TrialError::new(TrialErrorKind::VerifierOutputParse, message);
    let write_error = |e: std::io::Error| TrialError::new(TrialErrorKind::DownloadVerifierDir, e.to_string());
    for name in [names::REWARD_JSON, names::REWARD_TXT] {
        let path = verifier_dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            std::fs::remove_file(&path).map_err(write_error)?;
        }
        match verdict.files.get(name) {
            Some(Ok(bytes)) => std::fs::write(&path, bytes).map_err(write_error)?,
            Some(Err(why)) if name == names::REWARD_JSON || !verdict.files.contains_key(names::REWARD_JSON) => {
                return Err(parse_error(format!("{name} was not read: {why}")));
            }
            _ => {}
        }
    }
    Ok(())
}

/// What is graded: the task, or one of its steps, with the time limit and the job's
/// `verifier.env`.
#[derive(Clone, Copy)]
pub struct Grading<'a> {
    pub task: &'a Task,
    pub step: Option<&'a StepSection>,
    pub timeout: Duration,
    pub job_env: &'a BTreeMap<String, String>,
    /// The host variables the job passes to tasks.
    pub host: &'a terminus_config::host_env::HostEnv,
    /// What is killed around the tests.
    pub sweep: Sweep,
}

/// The largest reward file read (a flat object of numbers is far smaller); the warden reports
/// none larger.
pub const MAX_REWARD_FILE_BYTES: u64 = 256 * 1024;

/// `reward.json` (a flat object of numbers) wins over `reward.txt` (one number), as Harbor's
/// verifier reads them. A file of no bytes is `RewardFileEmptyError`; anything else that is not
/// a finite number (blank lines, `nan`, `inf`) cannot be a verdict (`VerifierOutputParseError`).
pub fn read_rewards(verifier_dir: &Path) -> Result<BTreeMap<String, f64>, TrialError> {
    let parse_error = |message: String| TrialError::new(TrialErrorKind::VerifierOutputParse, message);
    let empty = |path: &Path| TrialError::new(TrialErrorKind::RewardFileEmpty, format!("{} is empty", path.display()));
    let txt = verifier_dir.join(names::REWARD_TXT);
    let json_path = verifier_dir.join(names::REWARD_JSON);
    // Written by the tests, which the agent may have changed: read only when small.
    let read = |path: &Path| {
        crate::files::read_capped(path, MAX_REWARD_FILE_BYTES).map_err(|e| match e {
            Ok(size) => parse_error(format!(
                "{} is {size} bytes, more than a reward file may hold ({MAX_REWARD_FILE_BYTES}): not read",
                path.display()
            )),
            Err(e) => parse_error(e.to_string()),
        })
    };
    if json_path.is_file() {
        let text = read(&json_path)?;
        if text.is_empty() {
            return Err(empty(&json_path));
        }
        let rewards: BTreeMap<String, f64> = serde_json::from_str(&text)
            .map_err(|e| parse_error(format!("reward.json must be an object of numbers: {e}")))?;
        if let Some((key, value)) = rewards.iter().find(|(_, v)| !v.is_finite()) {
            return Err(parse_error(format!("reward.json: {key:?} is not a finite number ({value})")));
        }
        return Ok(rewards);
    }
    if txt.is_file() {
        let text = read(&txt)?;
        if text.is_empty() {
            return Err(empty(&txt));
        }
        let value: f64 =
            text.trim().parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                parse_error(format!("cannot read a finite number from reward.txt: {:?}", text.trim()))
            })?;
        return Ok(BTreeMap::from([("reward".to_string(), value)]));
    }
    Err(TrialError::new(
        TrialErrorKind::RewardFileNotFound,
        format!("no reward file found at {} or {}", txt.display(), json_path.display()),
    ))
}

/// Makes the container ready to grade in, before the tests arrive, and counts what runs when
/// they start:
/// - with [`AgentProcesses::Kill`], every process is killed but init and the container's own
///   idle command, and `/tests` and `/logs/verifier` are emptied, `/logs/verifier` owned by the
///   verifier's user, so nothing the agent planted there (a `reward.txt`, a `conftest.py`) is
///   seen by the tests or read as their verdict;
/// - with `Keep`, what the agent left runs on and only the reward files are removed (the tests
///   are uploaded over the image's `/tests`), as in Harbor.
pub async fn prepare_verification(
    container: &Environment,
    verifier_user: Option<&str>,
    processes: AgentProcesses,
) -> Result<ProcessCensus, TrialError> {
    let (sweep, reset) = match processes {
        AgentProcesses::Kill => (Sweep::All, Reset::Everything),
        AgentProcesses::Keep => (Sweep::Keep, Reset::Rewards),
    };
    warden::prepare(container, verifier_user, sweep, reset).await
}

/// The script that runs `then` once `script` is executable. The `chmod +x` runs as root, as
/// Harbor runs it, so a non-root user can run a script the upload left without the bit (a
/// task's `solve.sh` checked in as 0644): for root it is part of the same script, else an
/// exec of its own first.
pub(super) async fn executable_then(container: &Container, script: &str, user: Option<&str>, then: &str) -> String {
    if user.is_none_or(|u| u == "root" || u == "0") {
        return format!("chmod +x {script}; {then}");
    }
    // As root whatever the image's `USER` (an exec without a user runs as that).
    let root =
        ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
    if let Err(e) = container.exec(&format!("chmod +x {script}"), &root).await {
        tracing::warn!(script, error = %e, "could not make the script executable");
    }
    then.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn rewards_must_be_finite_numbers_and_reward_json_wins() {
        let kind = |files: &[(&str, &str)]| read_rewards(verifier_dir(files).path()).map_err(|e| e.kind);
        for bad in ["nan", "inf", "-inf", "NaN", "1e999"] {
            assert_eq!(kind(&[("reward.txt", bad)]), Err(TrialErrorKind::VerifierOutputParse), "{bad}");
        }
        assert_eq!(kind(&[("reward.json", r#"{"reward": 1e999}"#)]), Err(TrialErrorKind::VerifierOutputParse));
        assert_eq!(kind(&[("reward.txt", " \n")]), Err(TrialErrorKind::VerifierOutputParse), "blank is no number");
        assert_eq!(kind(&[("reward.txt", "")]), Err(TrialErrorKind::RewardFileEmpty));
        assert_eq!(kind(&[("reward.json", "")]), Err(TrialErrorKind::RewardFileEmpty));
        assert_eq!(kind(&[]), Err(TrialErrorKind::RewardFileNotFound));
        let both = kind(&[("reward.txt", "0.5\n"), ("reward.json", r#"{"reward": 1.0}"#)]).unwrap();
        assert_eq!(both["reward"], 1.0, "reward.json wins, as Harbor's verifier reads them");
        let json = kind(&[("reward.json", r#"{"reward": 1, "style": 0.25}"#)]).unwrap();
        assert_eq!(json.len(), 2);
    }
}
