//! The reports that travel up the actor tree, apart from the actors that send or receive them.
//!
//! A child reports to its parent through a `DerivedActorRef<Report>` (ractor's typed view of
//! the parent's inbox), so the child's file never imports the parent's: Trial → Supervisor
//! ([`TrialReport`]), LLM → Supervisor ([`LlmRetried`]), Summarizer → Trial
//! ([`SummarizerReport`]). The receivers wrap them in their own inbox enums (`From` and
//! `TryFrom` in each receiver's file), so the import graph of the actor files has no circle:
//!
//! ```text
//! supervisor ─► trial ─► summarizer ─► llm ─► protocol
//!     │           │           └──────► tmux_session
//!     └─► llm     └─► tmux_session, llm, protocol
//! ```

use std::time::Duration;

use terminus_agent::summarize::{Subagent, SubagentCall, SummaryError, SummaryOutcome};
use terminus_core::error::TrialErrorKind;
use terminus_core::events::{ProgressUsage, TrialPhase};
use terminus_core::ids::TrialName;
use terminus_core::result::TrialResult;

/// What a Trial tells its Supervisor.
#[derive(Debug)]
pub enum TrialReport {
    /// The trial's phase, episode and usage changed (for the progress bars).
    Progress { trial_name: TrialName, phase: TrialPhase, episode: Option<u32>, usage: Option<ProgressUsage> },
    /// The cluster queues the trial's environment (`reason`), or has just placed it (`None`):
    /// its deadlines, and the watchdog's, start then.
    Queued { trial_name: TrialName, reason: Option<String> },
    /// The trial's task has loaded: how long all its phases may take, with the watchdog's margin
    /// (None: no limit). The Supervisor's watchdog counts from here, or from the placement.
    Budget { trial_name: TrialName, budget: Option<Duration> },
    /// The trial's last word: its result, and whether it reached the trial's `result.json`
    /// (a disk error is recorded here, never turned into a crash and a paid-for restart).
    Finished { result: Box<TrialResult>, error: Option<TrialErrorKind>, written: bool },
    /// The trial's container or terminal died under it; it stopped without a result.
    Lost { trial_name: TrialName, reason: String },
    /// The engine did not answer while the trial prepared its environment; the trial stopped
    /// without a result and goes back to the queue.
    EngineUnavailable { trial_name: TrialName, reason: String },
    /// The trial could not write its record because the disk is full; it stopped without a
    /// result. The job halts resumably (restarting would only fill the disk again).
    DiskFull { trial_name: TrialName, reason: String },
}

/// An LLM actor is retrying a model call.
#[derive(Clone, Debug)]
pub struct LlmRetried {
    pub trial_name: Option<TrialName>,
    pub attempt: u32,
    pub wait: Duration,
    pub reason: TrialErrorKind,
}

/// What a Summarizer tells its Trial, stamped with the Trial's generation when it started (so a
/// report that arrives after the Trial moved on is dropped like any stale reply).
#[derive(Debug)]
pub struct SummarizerReport {
    pub generation: u64,
    pub event: SummarizerEvent,
}

/// The progress of one summarization.
#[derive(Debug)]
pub enum SummarizerEvent {
    /// One subagent call finished; it counts whatever happens to the rest.
    CallDone { which: Subagent, call: Box<SubagentCall> },
    /// The summarization is over, with the retries its calls took.
    Finished { result: Box<Result<SummaryOutcome, SummaryError>>, retries: u32 },
}

/// `From` and `TryFrom` between an actor's inbox enum and the message type of one of its
/// variants, so that a `DerivedActorRef` of that type reaches the actor with that kind of
/// message only (a sender sees its own type, never the actor's whole inbox).
macro_rules! inbox_variant {
    ($inbox:ident :: $variant:ident ( $message:ty )) => {
        impl From<$message> for $inbox {
            fn from(message: $message) -> $inbox {
                $inbox::$variant(message)
            }
        }

        impl TryFrom<$inbox> for $message {
            type Error = $inbox;

            fn try_from(inbox: $inbox) -> Result<$message, $inbox> {
                match inbox {
                    $inbox::$variant(message) => Ok(message),
                    other => Err(other),
                }
            }
        }
    };
}
pub(crate) use inbox_variant;
