//! Events the Supervisor emits for reporters (progress bars, plain log lines, tests).
//!
//! They echo the actor messages but drop any detail a reporter has no use for. The Supervisor is
//! the only producer, and every figure a reporter shows comes from the [`JobSummary`] an event
//! carries (made in [`crate::stats`]) — a reporter keeps no statistics of its own.

use crate::ids::TrialName;
use crate::stats::JobSummary;

/// The phase a running trial is in, as shown on its progress line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrialPhase {
    /// Loading the task and building (or finding) its image.
    Preparing,
    /// Creating and starting the container.
    StartingEnvironment,
    /// The agent loop is running.
    RunningAgent,
    /// The task's tests are running.
    Verifying,
    /// Collecting logs and removing the container.
    TearingDown,
}

impl TrialPhase {
    pub fn label(self) -> &'static str {
        match self {
            TrialPhase::Preparing => "preparing",
            TrialPhase::StartingEnvironment => "starting environment",
            TrialPhase::RunningAgent => "running agent",
            TrialPhase::Verifying => "verifying",
            TrialPhase::TearingDown => "tearing down",
        }
    }
}

/// Tokens and cost of a trial so far, for its progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProgressUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// What happened, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    JobStarted {
        job_name: String,
        job_dir: String,
        n_total: u64,
        n_already_done: u64,
        /// The figures so far (a resumed job's earlier trials included).
        summary: Box<JobSummary>,
    },
    TrialStarted {
        trial_name: TrialName,
        task_name: String,
    },
    TrialProgress {
        trial_name: TrialName,
        phase: TrialPhase,
        episode: Option<u32>,
        usage: Option<ProgressUsage>,
    },
    /// The cluster holds the trial in its queue (`reason`: the scheduler's own words), or
    /// (`None`) has placed it: its container runs, and its deadlines start.
    TrialQueued {
        trial_name: TrialName,
        reason: Option<String>,
    },
    /// A model call of the trial failed and will be retried after `wait_sec`.
    TrialRetrying {
        trial_name: TrialName,
        attempt: u32,
        wait_sec: f64,
        reason: String,
    },
    /// The whole trial failed and will run again after `wait_sec` (it holds no slot meanwhile).
    TrialWillRetry {
        trial_name: TrialName,
        retry: u32,
        wait_sec: f64,
        reason: String,
    },
    /// The trial crashed or lost its container and starts again in a fresh one.
    TrialRestarting {
        trial_name: TrialName,
        restart: u32,
        reason: String,
    },
    TrialFinished {
        trial_name: TrialName,
        task_name: String,
        reward: Option<f64>,
        error: Option<String>,
        /// The job's figures with this trial counted.
        summary: Box<JobSummary>,
    },
    /// Adaptive admission moved the number of trials that may run at once.
    Admission {
        limit: usize,
        running: usize,
        why: String,
    },
    /// The host cannot keep up with the trials a fixed `n_concurrent_trials` runs at once
    /// (said once per job): trials may run out of time because of it.
    HostSaturated {
        reason: String,
        n_concurrent: usize,
    },
    /// The Docker engine stopped answering: no trial starts until it answers again.
    EngineWaiting {
        reason: String,
    },
    /// Too many restarts in too short a time: no new trials start; the job can be resumed.
    JobHalted {
        reason: String,
    },
    /// A budget is spent: no new model call starts (running agents stop at their next one and
    /// are graded) and trials of its agents are not started.
    BudgetReached {
        reason: String,
    },
    /// A live control changed the job (`terminus jobs …`, `terminus trials …`, the viewer).
    Controlled {
        change: crate::control::ControlChange,
    },
    JobFinished {
        summary: Box<JobSummary>,
    },
}
