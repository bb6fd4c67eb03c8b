//! What a driver works with: the machine's context ([`Cx`]), one run of the agent
//! ([`AgentTurn`]) and what follows an event ([`Step`]).

use std::time::Duration;

use terminus_config::task::NetworkPolicy;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::{ProgressUsage, TrialPhase};
use terminus_core::layout::TrialDir;
use terminus_core::result::TimingInfo;

use crate::protocol::TrialReport;
use crate::trial::effects::Effects;
use crate::trial::record::{TrialRecord, TrialSetup};

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
    pub(super) fn may_write(&mut self, bytes: usize) -> bool {
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
    pub(super) fn disk_limit_error(&self) -> Option<TrialError> {
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
    pub(super) fn begin_execution(&mut self, usage: Option<ProgressUsage>) {
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
