//! The agents a Trial can run, one arm each: [`AgentDriver::Terminus2`] performs the actions the
//! pure `terminus_agent::AgentLoop` decides (terminal checks, model calls, summarizations,
//! keystrokes and waits, observations); `Oracle` runs the task's solution; `Nop` does nothing.
//!
//! A driver is started once the container is up, reacts to its events, and is stopped when the
//! agent phase ends (by itself, a deadline, a cancel, or an error), at which point it folds what
//! it knows into the record's `agent_result`. A multi-step task starts it again for each step
//! ([`AgentTurn`]): Terminus 2 then begins a fresh chat on the terminal the last step left, as
//! Harbor reuses one agent and session across steps. A new agent kind is one more arm here.

use terminus_config::trial::ResolvedTrial;
use terminus_config::{AgentKind, AgentSpec};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::ProgressUsage;
use terminus_core::result::AgentContext;

use super::effects::{OracleRun, TrialEvent};
use super::record::TrialRecord;

mod cx;
mod terminus2;

pub use cx::{AgentTurn, Cx, Step};
pub use terminus2::Terminus2;

/// The agent of a trial.
pub enum AgentDriver {
    Terminus2(Box<Terminus2>),
    Oracle,
    Nop,
}

impl AgentDriver {
    pub fn for_agent(agent: &AgentSpec) -> AgentDriver {
        match &agent.kind {
            AgentKind::Terminus2(opts) => AgentDriver::Terminus2(Box::new(Terminus2::new(opts, agent))),
            AgentKind::Oracle => AgentDriver::Oracle,
            AgentKind::Nop => AgentDriver::Nop,
        }
    }

    /// Starts the agent in its ready container.
    pub fn start(&mut self, trial: &ResolvedTrial, turn: AgentTurn, cx: &mut Cx<'_>) -> Step {
        let task = &trial.task;
        match self {
            AgentDriver::Terminus2(t2) => t2.start(trial, turn, cx),
            AgentDriver::Oracle => {
                cx.begin_execution(None);
                // The proxy's variables for an allowlisted agent phase; the solution's own win.
                let proxy = turn.network.proxy_env();
                let env = match terminus_config::task::resolve_host_env(
                    "solution.env",
                    &task.config.solution.env,
                    &trial.host_env,
                ) {
                    Ok(env) => proxy.into_iter().chain(env.into_iter().map(|(k, v)| format!("{k}={v}"))).collect(),
                    Err(e) => {
                        let message = format!("task `{}`: {e}", task.name);
                        return Step::Finished(Some(TrialError::new(TrialErrorKind::InvalidValue, message)));
                    }
                };
                let AgentTurn { user, network, timeout, .. } = turn;
                let agent_dir = cx.dir.agent_dir();
                cx.effects.run_oracle(OracleRun { user, agent_dir, timeout, env, network });
                Step::Running
            }
            AgentDriver::Nop => {
                cx.begin_execution(None);
                Step::Finished(None)
            }
        }
    }

    pub fn on_event(&mut self, event: TrialEvent, trial: &ResolvedTrial, cx: &mut Cx<'_>) -> Step {
        match (self, event) {
            (AgentDriver::Terminus2(t2), event) => match t2.on_event(event, &trial.task, cx) {
                // A write refused for the disk limit ends the agent (its own error wins).
                Step::Running if cx.record.disk.exceeded => Step::Finished(cx.disk_limit_error()),
                step => step,
            },
            (AgentDriver::Oracle, TrialEvent::AgentRan(error)) => Step::Finished(error),
            _ => Step::Running,
        }
    }

    /// Ends the agent's side activities and fills in what it reports (`agent_result`; for
    /// Terminus 2 its final trajectory too, reg-subagent-metrics folded into the totals here).
    pub fn stop(&mut self, cx: &mut Cx<'_>) {
        TrialRecord::finish(&mut cx.record.result.agent_execution);
        let started = cx.record.result.agent_execution.is_some();
        cx.record.result.agent_result = match self {
            AgentDriver::Terminus2(t2) => t2.stop(cx),
            AgentDriver::Oracle | AgentDriver::Nop => None,
        }
        .or_else(|| started.then(AgentContext::default));
    }

    /// Tokens and cost so far, for the progress line.
    pub fn usage(&self) -> Option<ProgressUsage> {
        match self {
            AgentDriver::Terminus2(t2) => t2.usage(),
            AgentDriver::Oracle | AgentDriver::Nop => None,
        }
    }

    /// reg-asciinema-markers (of every step so far), merged into the recording at teardown.
    pub fn markers(&self) -> Vec<(f64, String)> {
        match self {
            AgentDriver::Terminus2(t2) => {
                let current = t2.running().map(|r| r.agent_loop.asciinema_markers()).unwrap_or_default();
                t2.past_markers.iter().chain(current).cloned().collect()
            }
            AgentDriver::Oracle | AgentDriver::Nop => Vec::new(),
        }
    }
}
