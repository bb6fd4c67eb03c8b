//! Live control of a running job: what can be asked of it ([`JobControl`]), what it answers
//! ([`JobStatus`]) and why it may refuse ([`ControlRefusal`]). Plain data: the Supervisor acts on
//! these, the CLI carries them over the job's control socket as JSON lines, the viewer asks them
//! from its job page.

use serde::{Deserialize, Serialize};

use crate::ids::TrialName;
use crate::stats::BudgetStatus;

/// One request to a running job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobControl {
    /// Only the status.
    Status,
    /// No new trial starts; running ones go on.
    Pause,
    /// Trials start again, up to the limit.
    Resume,
    /// How many trials may run at once (running ones are never stopped for it).
    SetConcurrency(usize),
    /// The job's own spending limit (each field left out keeps its value).
    SetBudget(BudgetChange),
    /// Cancels one trial: a queued one never starts, a running one stops and its container is
    /// removed; either way its result says `CancelledError`.
    CancelTrial(TrialName),
    /// Runs a finished trial again: its files move under `attempts/<n>/`, and it goes first in
    /// line.
    RetryTrial(TrialName),
}

/// A change of the job's budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetChange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Where one trial is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialState {
    /// Waiting for a slot (or for the job to be resumed).
    Queued,
    Running,
    /// Asked to cancel; its run is stopping.
    Cancelling,
    /// Waiting out a retry's backoff, or for its old container to be removed.
    Waiting,
    /// Not started because a budget is spent.
    Held,
    Finished,
    Cancelled,
}

impl TrialState {
    /// Whether nothing more happens to it in this run.
    pub fn is_terminal(self) -> bool {
        matches!(self, TrialState::Finished | TrialState::Cancelled)
    }
}

/// One trial as the job's status lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialStatus {
    pub name: TrialName,
    pub task_name: String,
    pub state: TrialState,
    /// Failed attempts so far (each kept under `attempts/<n>/`).
    pub retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// What identifies the trial across runs of its job (a rerun after a resume gets a new
    /// name): [`plan_key`] of its task, agent index and attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A trial's identity across runs (task identity, agent index, attempt) as one string.
pub fn plan_key((task, agent, attempt): &(String, usize, u32)) -> String {
    format!("{task}#{agent}#{attempt}")
}

/// A running job as its Supervisor sees it, after the request was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    pub job_id: String,
    pub job_name: String,
    pub paused: bool,
    /// Nothing more starts: the job was cancelled or halted, or is ending.
    pub closed: bool,
    /// How many trials may run at once now.
    pub n_concurrent: usize,
    pub n_total: u64,
    pub n_running: u64,
    pub n_pending: u64,
    pub n_finished: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStatus>,
    /// Every trial of the job, in name order.
    pub trials: Vec<TrialStatus>,
}

/// Why a request was not applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "kind", content = "trial")]
pub enum ControlRefusal {
    #[error("the job has no trial named `{0}`")]
    UnknownTrial(TrialName),
    #[error("trial `{0}` has finished: retry it instead")]
    AlreadyFinished(TrialName),
    #[error("trial `{0}` has not finished: only a finished trial can be retried")]
    NotFinished(TrialName),
    #[error("the job starts nothing more (it is cancelled, halted or ending)")]
    Closed,
    #[error("n_concurrent_trials must be at least 1")]
    ZeroConcurrency,
    #[error("a budget must be a finite, non-negative amount")]
    InvalidBudget,
    #[error(
        "the job runs without a budget, so its running trials' calls are not metered: set `budget:` in the job file and `terminus resume` it"
    )]
    NoBudget,
}

/// What a job answers to one request: its status, or why it refused.
pub type ControlReply = Result<JobStatus, ControlRefusal>;

/// The socket protocol's answer line (a `Result` has no JSON form of its own).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAnswer {
    Ok(Box<JobStatus>),
    Refused(ControlRefusal),
    /// The request line could not be read (it names what was wrong).
    BadRequest(String),
}

impl From<ControlReply> for ControlAnswer {
    fn from(reply: ControlReply) -> ControlAnswer {
        match reply {
            Ok(status) => ControlAnswer::Ok(Box::new(status)),
            Err(refusal) => ControlAnswer::Refused(refusal),
        }
    }
}

/// A change a control made, as reporters show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlChange {
    Paused,
    Resumed,
    Concurrency(usize),
    Budget(BudgetChange),
    TrialCancelled(TrialName),
    TrialRetried(TrialName),
}

impl std::fmt::Display for ControlChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlChange::Paused => write!(f, "paused: no new trial starts until `terminus jobs resume`"),
            ControlChange::Resumed => write!(f, "resumed: trials start again"),
            ControlChange::Concurrency(n) => write!(f, "n_concurrent_trials set to {n}"),
            ControlChange::Budget(change) => {
                write!(f, "budget set to")?;
                if let Some(usd) = change.max_cost_usd {
                    write!(f, " ${usd}")?;
                }
                if let Some(tokens) = change.max_tokens {
                    write!(f, " {tokens} tokens")?;
                }
                Ok(())
            }
            ControlChange::TrialCancelled(trial) => write!(f, "trial {trial} cancelled"),
            ControlChange::TrialRetried(trial) => write!(f, "trial {trial} will run again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_read_back_as_they_were_written() {
        let requests = [
            JobControl::Status,
            JobControl::Pause,
            JobControl::SetConcurrency(3),
            JobControl::SetBudget(BudgetChange { max_cost_usd: Some(1.5), max_tokens: None }),
            JobControl::CancelTrial(TrialName("hello__abc".into())),
            JobControl::RetryTrial(TrialName("hello__abc".into())),
        ];
        for request in requests {
            let line = serde_json::to_string(&request).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<JobControl>(&line).unwrap(), request);
        }
        assert_eq!(serde_json::to_string(&JobControl::Pause).unwrap(), "\"pause\"");
        let refused = ControlAnswer::Refused(ControlRefusal::UnknownTrial(TrialName("x".into())));
        let line = serde_json::to_string(&refused).unwrap();
        assert_eq!(line, r#"{"refused":{"kind":"unknown_trial","trial":"x"}}"#);
        assert_eq!(serde_json::from_str::<ControlAnswer>(&line).unwrap(), refused);
        let closed = serde_json::to_string(&ControlAnswer::Refused(ControlRefusal::Closed)).unwrap();
        assert_eq!(
            serde_json::from_str::<ControlAnswer>(&closed).unwrap(),
            ControlAnswer::Refused(ControlRefusal::Closed)
        );
    }
}
