//! The agents a Trial can run, one arm each: [`AgentDriver::Terminus2`] performs the actions the
//! pure `terminus_agent::AgentLoop` decides (terminal checks, model calls, summarizations,
//! keystrokes and waits, observations); `Oracle` runs the task's solution; `Nop` does nothing.
//!
//! A driver is started once the container is up, reacts to its events, and is stopped when the
//! agent phase ends (by itself, a deadline, a cancel, or an error), at which point it folds what
//! it knows into the record's `agent_result`. A multi-step task starts it again for each step
//! ([`AgentTurn`]): Terminus 2 then begins a fresh chat on the terminal the last step left, as
//! Harbor reuses one agent and session across steps. A new agent kind is one more arm here.

use std::time::Duration;

use terminus_config::task::NetworkPolicy;
use terminus_config::trial::ResolvedTrial;
use terminus_config::{AgentKind, AgentSpec};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::{ProgressUsage, TrialPhase};
use terminus_core::layout::TrialDir;
use terminus_core::result::{AgentContext, TimingInfo};

use super::effects::{Effects, OracleRun, TrialEvent};
use super::record::{TrialRecord, TrialSetup};
use crate::protocol::TrialReport;

mod terminus2;

pub use terminus2::Terminus2;

/// What the machine needs from it while a driver works.
pub struct Cx<'a> {
    pub setup: &'a TrialSetup,
    /// Where the agent's files go: the trial's directory, or its step's (`steps/<name>/`).
    pub dir: &'a TrialDir,
    pub record: &'a mut TrialRecord,
    pub effects: &'a mut dyn Effects,
}

/// One run of the agent: the whole task, or one step of a multi-step task.
#[derive(Clone, Debug)]
pub struct AgentTurn {
    /// The instruction as the agent gets it (the job's extra instructions included).
    pub instruction: String,
    pub user: Option<String>,
    /// The agent phase's network (the step's, in a multi-step task).
    pub network: NetworkPolicy,
    pub timeout: Option<Duration>,
}

impl Cx<'_> {
    pub fn progress(&mut self, phase: TrialPhase, episode: Option<u32>, usage: Option<ProgressUsage>) {
        let trial_name = self.setup.name.clone();
        self.effects.report(TrialReport::Progress { trial_name, phase, episode, usage });
    }

    /// Whether `bytes` more may go into the trial's directory (see [`DiskMeter`]); the first
    /// refusal is named in the trial's warnings.
    fn may_write(&mut self, bytes: usize) -> bool {
        let first = !self.record.disk.exceeded;
        let admitted = self.record.disk.admit(bytes);
        if !admitted && first {
            let note = format!(
                "the trial's files reached max_trial_disk_mb ({} MB): nothing more of the agent's is written",
                self.record.disk.limit >> 20
            );
            tracing::warn!(trial = %self.setup.name, "{note}");
            self.record.result.warnings.push(note);
        }
        admitted
    }

    /// The error that ends an agent whose writes reached the limit, if they did.
    fn disk_limit_error(&self) -> Option<TrialError> {
        self.record.disk.exceeded.then(|| {
            TrialError::new(
                TrialErrorKind::TrialDiskLimit,
                format!(
                    "the agent's files in the trial directory reached max_trial_disk_mb ({} MB)",
                    self.record.disk.limit >> 20
                ),
            )
        })
    }

    /// The agent's set-up is over and its execution starts.
    fn begin_execution(&mut self, usage: Option<ProgressUsage>) {
        TrialRecord::finish(&mut self.record.result.agent_setup);
        self.record.result.agent_execution = Some(TimingInfo::started());
        self.progress(TrialPhase::RunningAgent, None, usage);
    }
}

/// After an event: the agent goes on, or it is done (with the error that ended it).
#[derive(Debug, PartialEq)]
pub enum Step {
    Running,
    Finished(Option<TrialError>),
}

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

    /// Whether the terminal is being recorded.
    pub fn recording(&self) -> bool {
        matches!(self, AgentDriver::Terminus2(t2) if t2.running().is_some_and(|r| r.recording))
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
