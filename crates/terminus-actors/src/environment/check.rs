//! Checks on a running trial's container (alive, gone, engine away) and the oracle agent, which
//! runs the task's reference solution instead of a model.

use std::path::Path;
use std::time::Duration;

use super::verify::executable_then;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::layout::{container as paths, names};
use terminus_sandbox::{Container, Environment, ExecOptions};

/// Runs the task's reference solution (the oracle agent) as `user`, with its output in
/// `/logs/agent/oracle.txt`; a non-zero exit is noted in `agent/exit-code.txt`, not an error.
pub async fn run_oracle(
    container: &Container,
    user: Option<String>,
    solution_env: Vec<String>,
    timeout: Option<Duration>,
    agent_dir: &Path,
) -> Option<TrialError> {
    let run = format!("({}) > {} 2>&1", paths::SOLUTION_SCRIPT, paths::ORACLE_OUTPUT);
    let script = executable_then(container, paths::SOLUTION_SCRIPT, user.as_deref(), &run).await;
    // The task's `[solution].env` has the last word, as in Harbor.
    let env = std::iter::once("DEBIAN_FRONTEND=noninteractive".to_string()).chain(solution_env).collect();
    let options = ExecOptions { user, env, workdir: None, timeout };
    match container.exec(&script, &options).await {
        Ok(out) => {
            if out.exit_code != Some(0) {
                let code = out.exit_code.unwrap_or(-1).to_string();
                crate::files::write_text_logged(&agent_dir.join(names::EXIT_CODE_TXT), &code);
            }
            None
        }
        // The exec's own limit is the agent's: whichever of it and the trial's deadline fires
        // first, the trial records the same timeout.
        Err(terminus_sandbox::SandboxError::Timeout { after, .. }) => Some(TrialError::new(
            TrialErrorKind::AgentTimeout,
            format!("Agent execution timed out after {} seconds", after.as_secs_f64()),
        )),
        Err(e) => Some(TrialError::new(TrialErrorKind::Runtime, e.to_string())),
    }
}

/// Whether the trial's container still runs, is gone (killed, removed, lost by the engine), or
/// cannot be told because the engine does not answer.
///
/// A kill closes the exec streams a moment before the engine marks the container exited, so an
/// error that may come from a dead container (`settle`) is given up to 1.5 s to show up as
/// one; any other error is checked once.
pub async fn check_container(container: Option<&Environment>, settle: bool) -> ContainerCheck {
    let Some(container) = container else { return ContainerCheck::Alive };
    // The engine first: an error that came from a stopped engine must be judged while it is
    // still stopped (an inspect would wait for it to wake up, then find the container running),
    // or by what the heartbeat saw: an engine call gives up after two minutes, so the engine
    // may be back by the time its error arrives here.
    let engine = container.engine();
    // On a swarm, `engine` is the container's node: a node that does not answer while its
    // manager does is a lost node, and the trial runs again elsewhere.
    // A node's daemon that restarted meanwhile stopped its containers on the way: a node away
    // recently (its pings, the watcher's included, say so) counts as lost too.
    if let Some(manager) = container.swarm_manager()
        && (!engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW))
    {
        return if manager.ping().await { ContainerCheck::Gone } else { ContainerCheck::EngineDown };
    }
    if !engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW) {
        return ContainerCheck::EngineDown;
    }
    let checks = if settle { 6 } else { 1 };
    for i in 0..checks {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // A stopped engine accepts the connection and never answers: the inspect gets the
        // ping's deadline, and the ping tells a dead container from an absent engine.
        let running = tokio::time::timeout(INSPECT_TIMEOUT, container.is_running()).await;
        if running != Ok(true) {
            let answers = match container.swarm_manager() {
                Some(manager) => manager.ping().await,
                None => container.engine().ping().await,
            };
            if !answers {
                return ContainerCheck::EngineDown;
            }
            return if container.ended_from_inside().await {
                ContainerCheck::EndedFromInside
            } else {
                ContainerCheck::Gone
            };
        }
    }
    ContainerCheck::Alive
}

/// An engine outage this recent may have caused the error being checked (bollard's own request
/// timeout, two minutes, plus slack).
const ENGINE_AWAY_WINDOW: Duration = Duration::from_secs(150);

/// How long a container check waits for the engine to describe the container.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a container check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerCheck {
    /// Running (or the trial never had one): the error is the trial's own.
    Alive,
    /// Gone while the engine answers: the trial lost its environment.
    Gone,
    /// Stopped by what ran inside it, nothing outside asking (the engine's init ended once an
    /// agent's `kill -9 -1` took its child): the trial's own doing, no loss.
    EndedFromInside,
    /// The engine does not answer: nobody can tell, and it is no fault of the trial.
    EngineDown,
}
