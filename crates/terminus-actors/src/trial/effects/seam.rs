//! The seam between the Trial's state machine and the world: what the machine asks, each slow
//! call returning at once with its outcome arriving later as a [`TrialEvent`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use terminus_agent::summarize::SummaryJob;
use terminus_core::llm::LlmRequest;

use super::events::{OracleRun, TeardownPlan, TerminalSetup, TrialEvent, VerifyPlan};
use crate::environment;
use crate::protocol::TrialReport;

/// The seam: what the Trial's state machine asks of the world. Each slow call returns at once
/// and its outcome arrives later as a [`TrialEvent`].
pub trait Effects {
    /// Abandons the work in flight: its replies will be dropped as stale.
    fn invalidate(&mut self);
    fn report(&mut self, report: TrialReport);
    /// Stops the trial actor (its result is reported).
    fn stop(&mut self);
    /// Delivers [`Delivery::Deadline`](super::events::Delivery::Deadline) after `after`.
    fn set_deadline(&mut self, after: Duration);
    /// Delivers `event` after `delay` (command waits, idle probes).
    fn after(&mut self, delay: Duration, event: TrialEvent);
    /// Writes a log file; a failure is logged, never fatal.
    fn write_text(&mut self, path: &Path, text: &str);
    /// Writes an episode log (`prompt.txt`, `response.txt`, `debug.json`), off the actor: on disk
    /// by the end of the teardown.
    fn write_episode_log(&mut self, path: &Path, text: &str);
    /// Writes a record atomically (temporary file, fsync, rename).
    fn write_atomic(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    /// Replaces a file that is rewritten often (temporary file, rename; no fsync).
    fn replace_file(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()>;
    /// Cuts `path` (made if missing) to its first `offset` bytes and writes `bytes` after them;
    /// `durable`: fsynced. For a file that grows: what is on disk is not written again.
    fn write_from(&mut self, path: &Path, offset: u64, bytes: &[u8], durable: bool) -> std::io::Result<()>;
    /// Bytes `start..end` of a file this trial wrote (a released step's text, read back).
    fn read_range(&mut self, path: &Path, start: u64, end: u64) -> std::io::Result<Vec<u8>>;

    /// Loads the task, makes its image, starts the container → `Provisioned`.
    fn provision(&mut self, needs_solution: bool);
    /// Aborts provisioning or verification in flight.
    fn abort_work(&mut self);
    /// Starts the TmuxSession and waits (off the actor) for it → `TerminalStarted`.
    fn start_terminal(&mut self, setup: TerminalSetup);
    /// → `TerminalChecked`.
    fn check_terminal(&mut self);
    /// → `KeysSent`.
    fn send_keys(&mut self, keys: Vec<String>);
    /// → `IdleProbed`.
    fn idle_probe(&mut self);
    /// The new terminal output → `Observed`.
    fn observe(&mut self);
    /// The visible screen → `ScreenCaptured`.
    fn capture_screen(&mut self);
    /// Stops the terminal (and the recording with it).
    fn stop_terminal(&mut self);
    /// → `ModelReplied`.
    fn query(&mut self, request: LlmRequest);
    /// → `ShortSummaryReplied`.
    fn short_summary(&mut self, request: LlmRequest);
    /// Starts a Summarizer → `Summarizer(CallDone…, Finished)`.
    fn summarize(&mut self, job: Arc<SummaryJob>);
    fn stop_summarizer(&mut self);
    /// Runs the task's solution → `AgentRan`.
    fn run_oracle(&mut self, run: OracleRun);
    /// Readies the container for a step's agent → `StepPrepared`.
    fn prepare_step(&mut self, prep: environment::steps::StepPrep);
    /// Whether the container is gone → `ContainerChecked`.
    fn check_container(&mut self, settle: bool);
    /// → `Verified`.
    fn verify(&mut self, plan: VerifyPlan);
    /// Closes the terminal, collects logs and artifacts, removes the container → `TornDown`.
    fn teardown(&mut self, plan: TeardownPlan);
}
