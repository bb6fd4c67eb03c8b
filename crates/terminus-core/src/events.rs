//! Events the Supervisor emits for reporters (progress bars, plain log lines, tests).
//!
//! They echo the actor messages but drop any detail a reporter has no use for. The Supervisor is
//! the only producer, so the counts a reporter shows always agree with the job's result file.

use crate::ids::TrialName;

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

/// What happened, in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum RunEvent {
    JobStarted {
        job_name: String,
        job_dir: String,
        n_total: u64,
    },
    TrialStarted {
        trial_name: TrialName,
        task_name: String,
    },
    TrialProgress {
        trial_name: TrialName,
        phase: TrialPhase,
        episode: Option<u32>,
    },
    /// A model call of the trial failed and will be retried after `wait_sec`.
    TrialRetrying {
        trial_name: TrialName,
        attempt: u32,
        wait_sec: f64,
        reason: String,
    },
    TrialFinished {
        trial_name: TrialName,
        task_name: String,
        reward: Option<f64>,
        error: Option<String>,
    },
    JobFinished {
        summary: JobSummary,
    },
}

/// The end-of-job figures a reporter prints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobSummary {
    pub job_dir: String,
    pub n_total: u64,
    pub n_finished: u64,
    pub n_errored: u64,
    pub mean_reward: Option<f64>,
    pub n_input_tokens: u64,
    pub n_output_tokens: u64,
    pub cost_usd: Option<f64>,
    pub wall_seconds: f64,
}
