//! The container side of a multi-step task's steps (`[[steps]]`, Harbor's `MultiStepTrial`):
//! what runs between one step's verification and the next step's agent, and how a step that is
//! not the last is verified without ending the terminal the next step goes on in.
//!
//! One container and one terminal serve every step; each step gets a fresh agent, its own
//! instruction, tests, timeouts and outputs under `steps/<name>/`. Between steps
//! ([`prepare_step`]): the previous step's artifacts are collected; what its verifier left
//! (`/tests`, `/logs/verifier`) and its agent's logs are cleared, except the two files the
//! terminal writes for the whole trial (the recording and the pane log); the step's
//! `workdir/` is staged in the working directory and its `workdir/setup.sh` run; its
//! healthcheck must pass; the oracles get its `solution/`.
//!
//! A step before the last is graded in the live environment, as in Harbor, unless the job
//! says `verifier.agent_processes: kill` ([`prepare_step_verification`]): then what the agent
//! started is killed first, in its terminal too, while the terminal itself goes on into the
//! next step.

use std::path::PathBuf;
use std::time::Duration;

use terminus_config::task::{Healthcheck, NetworkPolicy};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::layout::{TrialDir, container as paths, names};
use terminus_sandbox::{Container, Environment, ExecOptions, archive, blocking};

use terminus_config::policy::AgentProcesses;

use super::collect::CopyLimits;
use super::warden::ProcessCensus;

/// What preparing one step needs.
#[derive(Clone, Debug)]
pub struct StepPrep {
    /// `steps/<name>/` of the trial: made here, with its `agent/` and `verifier/`.
    pub dir: TrialDir,
    pub name: String,
    /// The step's `workdir/` in the task, staged into the container's working directory.
    pub workdir: PathBuf,
    /// Where the previous step's outputs go and the artifacts to take for it (none before the
    /// first step).
    pub previous: Option<(TrialDir, Vec<terminus_config::policy::ArtifactSpec>)>,
    /// The collect hooks run before those artifacts are taken: the task's, then the previous
    /// step's own.
    pub collect: Vec<terminus_config::task::CollectSpec>,
    /// A verifier ran in this container before: its `/tests` and `/logs/verifier` go.
    pub reset_verifier: bool,
    /// The step's agent user (staging and `setup.sh` run as this user, as in Harbor).
    pub user: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    /// The key the healthcheck's errors name (`steps[1].healthcheck`).
    pub healthcheck_key: String,
    /// For the oracles: the step's `solution/`, put at `/solution` (else the task's stays).
    pub solution: Option<PathBuf>,
    /// The network of the step's set-up (the environment's), and of its agent when the agent
    /// does not enter its own (a terminal that is already up).
    pub setup_network: NetworkPolicy,
    pub agent_network: Option<NetworkPolicy>,
}

/// Makes the container ready for a step's agent. Returns the error that stops the step, and
/// what was cut from the previous step's artifacts.
pub async fn prepare_step(
    container: &Environment,
    prep: StepPrep,
    limits: CopyLimits,
) -> (Result<(), TrialError>, Vec<String>) {
    let mut notes = Vec::new();
    if let Some((previous, artifacts)) = &prep.previous {
        let hooks = &prep.collect;
        notes.extend(
            super::collect::collect_artifacts(container, artifacts, hooks, &previous.artifacts_dir(), limits).await,
        );
    }
    let result = prepare(container, &prep).await;
    (result, notes)
}

async fn prepare(container: &Environment, prep: &StepPrep) -> Result<(), TrialError> {
    let runtime = |message: String| TrialError::new(TrialErrorKind::Runtime, message);
    for dir in [prep.dir.agent_dir(), prep.dir.verifier_dir()] {
        std::fs::create_dir_all(&dir).map_err(|e| runtime(format!("cannot make {}: {e}", dir.display())))?;
    }
    super::network::enter_phase(container, &prep.setup_network).await?;
    // As root whatever the image's `USER` (an exec without a user runs as that).
    let root =
        ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
    let clear = format!(
        "find {agent} -mindepth 1 -maxdepth 1 ! -name {cast} ! -name {pane} -exec rm -rf {{}} + 2>/dev/null; {reset} true",
        agent = paths::AGENT_LOGS,
        cast = names::RECORDING_CAST,
        pane = names::PANE_LOG,
        reset = if prep.reset_verifier {
            format!(
                "find {tests} {verifier} -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + 2>/dev/null;",
                tests = paths::TESTS,
                verifier = paths::VERIFIER_LOGS
            )
        } else {
            String::new()
        },
    );
    run(container, &clear, &root).await.map_err(|e| runtime(format!("cannot clear the last step's files: {e}")))?;

    if let Some(solution) = prep.solution.clone().filter(|s| s.is_dir()) {
        let tar =
            blocking(move || archive::tar_dir(&solution, "solution")).await.map_err(|e| runtime(e.to_string()))?;
        run(container, &format!("rm -rf {}", paths::SOLUTION), &root).await.map_err(runtime)?;
        container.upload_tar("/", tar).await.map_err(|e| runtime(e.to_string()))?;
    }

    // The set-up's clients go through the proxy when its network is an allowlist.
    let as_user = ExecOptions {
        user: prep.user.clone(),
        env: prep.setup_network.proxy_env(),
        timeout: Some(Duration::from_secs(60)),
        ..ExecOptions::default()
    };
    let workdir = container
        .exec("pwd", &as_user)
        .await
        .map(|out| out.output.trim().to_string())
        .ok()
        .filter(|pwd| pwd.starts_with('/'))
        .unwrap_or_else(|| "/".to_string());
    if prep.workdir.is_dir() {
        let source = prep.workdir.clone();
        let tar = blocking(move || archive::tar_dir_contents(&source)).await.map_err(|e| runtime(e.to_string()))?;
        container.upload_tar(&workdir, tar).await.map_err(|e| runtime(format!("cannot stage workdir/: {e}")))?;
        let setup = prep.workdir.join("setup.sh");
        if setup.is_file() {
            let script = format!("{}/setup.sh", workdir.trim_end_matches('/'));
            let options = ExecOptions { timeout: None, ..as_user.clone() };
            let out = container
                .exec(&format!("bash {}", crate::files::shell_word(&script)), &options)
                .await
                .map_err(|e| runtime(format!("step `{}`: setup.sh could not run: {e}", prep.name)))?;
            if out.exit_code != Some(0) {
                let code = out.exit_code.unwrap_or(-1);
                return Err(runtime(format!(
                    "step `{}`: setup.sh exited with code {code}: {}",
                    prep.name,
                    tail(&out.output)
                )));
            }
        }
    }
    if let Some(check) = &prep.healthcheck {
        terminus_sandbox::provision::healthcheck(container, check, &prep.healthcheck_key).await.map_err(|message| {
            TrialError::new(TrialErrorKind::Healthcheck, format!("step `{}`: {message}", prep.name))
        })?;
    }
    if let Some(network) = &prep.agent_network {
        super::network::enter_phase(container, network).await?;
    }
    Ok(())
}

/// Readies the container for the tests of a step that more steps follow, as root: `/tests`
/// and `/logs/verifier` cleared, and what runs counted. With [`AgentProcesses::Keep`] the
/// step is graded live, as in Harbor. With `Kill`, everything the agent started is killed:
/// what runs apart from the terminal (daemons, `nohup` and `setsid` loops, windows and panes
/// it opened, `pipe-pane` and `run-shell` jobs), and in the terminal whatever its shell runs.
/// The terminal itself — the tmux server the trial started, its pane's shell and the pane
/// log's pipe, as they were when the agent got the terminal (`ready_at`) — is frozen until the
/// step's verdict is read, then goes on into the next step, as do the host's own exec sessions
/// from before it (the command channel, the recording's follower, the tmux control client).
pub async fn prepare_step_verification(
    container: &Environment,
    verifier_user: Option<&str>,
    processes: AgentProcesses,
    ready_at: super::warden::TerminalReady,
) -> Result<(ProcessCensus, super::warden::Sweep), TrialError> {
    let sweep = match processes {
        AgentProcesses::Kill => super::warden::Sweep::AllButTerminal { ready_at },
        AgentProcesses::Keep => super::warden::Sweep::Keep,
    };
    let census = super::warden::prepare(container, verifier_user, sweep, super::warden::Reset::Everything).await?;
    Ok((census, sweep))
}

/// Runs `script` and fails unless it exits 0.
async fn run(container: &Container, script: &str, options: &ExecOptions) -> Result<(), String> {
    match container.exec(script, options).await {
        Ok(out) if out.exit_code == Some(0) => Ok(()),
        Ok(out) => Err(format!("exit code {:?}: {}", out.exit_code, tail(&out.output))),
        Err(e) => Err(e.to_string()),
    }
}

/// The end of a command's output, for an error message.
fn tail(output: &str) -> &str {
    let output = output.trim();
    let start = output.len().saturating_sub(2000);
    let start = (start..output.len()).find(|&i| output.is_char_boundary(i)).unwrap_or(output.len());
    &output[start..]
}

/// A step's reward gate (`min_reward`): why the remaining steps are skipped, if they are. A
/// float gates on `reward`; a table on each key. A missing key (or no verdict) is −∞.
pub fn min_reward_failure(
    rewards: Option<&std::collections::BTreeMap<String, f64>>,
    min_reward: &terminus_config::task::MinReward,
) -> Option<String> {
    use terminus_config::task::MinReward;
    let thresholds: Vec<(&str, f64)> = match min_reward {
        MinReward::Reward(value) => vec![("reward", *value)],
        MinReward::Keys(keys) => keys.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
    };
    thresholds.into_iter().find_map(|(key, threshold)| {
        let actual = rewards.and_then(|r| r.get(key)).copied().unwrap_or(f64::NEG_INFINITY);
        (actual < threshold).then(|| format!("{key}={actual} below min_reward {threshold}"))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use terminus_config::task::MinReward;

    use super::*;

    #[test]
    fn the_reward_gate_reads_missing_keys_as_minus_infinity() {
        let rewards: BTreeMap<String, f64> = [("reward".to_string(), 0.5), ("style".to_string(), 1.0)].into();
        assert_eq!(min_reward_failure(Some(&rewards), &MinReward::Reward(0.5)), None);
        assert_eq!(
            min_reward_failure(Some(&rewards), &MinReward::Reward(0.75)).as_deref(),
            Some("reward=0.5 below min_reward 0.75")
        );
        assert!(min_reward_failure(None, &MinReward::Reward(0.0)).is_some(), "no verdict fails any gate");
        let keys = MinReward::Keys([("style".to_string(), 1.0)].into());
        assert_eq!(min_reward_failure(Some(&rewards), &keys), None);
        let missing = MinReward::Keys([("speed".to_string(), 0.0)].into());
        assert_eq!(min_reward_failure(Some(&rewards), &missing).as_deref(), Some("speed=-inf below min_reward 0"));
    }
}
