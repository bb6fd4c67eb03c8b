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

/// Whether the trial's container still runs (see [`Environment::check`]); a trial that never
/// had one counts as alive.
pub async fn check_container(container: Option<&Environment>, settle: bool) -> ContainerCheck {
    match container {
        Some(container) => container.check(settle).await,
        None => ContainerCheck::Alive,
    }
}

/// What a container check found.
pub use terminus_sandbox::Liveness as ContainerCheck;
