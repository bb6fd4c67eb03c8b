//! Everything a Trial does that is not in-memory: the [`Effects`] seam between the state machine
//! ([`super::stage`]) and the world, and [`LiveEffects`], its implementation over Docker, tmux,
//! the LLM actor and the disk.
//!
//! Every slow operation (provisioning, terminal set-up, tmux requests, model calls,
//! verification, teardown, container checks) runs in a spawned task that reports back with one
//! [`TrialEvent`] ([`Delivery::Event`]), stamped with the generation it started in. The machine
//! calls [`Effects::invalidate`] when it abandons what is in flight (a deadline, a cancel, the
//! end of the agent), so late replies arrive stale and are dropped by the shell. A task that
//! panics delivers [`Delivery::Panicked`] at once, and the trial fails (to be restarted) instead
//! of waiting for a reply that never comes. Deliveries reach the Trial's inbox through a
//! `DerivedActorRef<Delivery>`, so this file does not depend on the actor that uses it.
//!
//! Waits are timers (`send_after`), and small file writes (trajectories, episode logs, the
//! result) happen in place: they are the record of what happened and must stay in order.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use terminus_agent::prompts::SkillFile;
use terminus_agent::summarize::SummaryJob;
use terminus_core::llm::LlmRequest;
use terminus_sandbox::Container;
use terminus_sandbox::container::ExecOptions;

use crate::environment::{self};
use crate::protocol::TrialReport;

mod events;
mod live;

pub use events::{Delivery, OracleRun, StepVerify, TeardownPlan, TerminalSetup, TerminalStart, TrialEvent, VerifyPlan};
pub use live::LiveEffects;

/// How long the terminal gets to finish the agent's last command before verification stops
/// everything in the container.
const SETTLE_BEFORE_VERIFYING: Duration = Duration::from_secs(3);

/// The seam: what the Trial's state machine asks of the world. Each slow call returns at once
/// and its outcome arrives later as a [`TrialEvent`].
pub trait Effects {
    /// Abandons the work in flight: its replies will be dropped as stale.
    fn invalidate(&mut self);
    fn report(&mut self, report: TrialReport);
    /// Stops the trial actor (its result is reported).
    fn stop(&mut self);
    /// Sends [`TrialMsg::AgentDeadline`] after `after`.
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

/// A request's outcome and how long it took (for the timings in the trial's metadata).
/// The `SKILL.md` of each directory right below `dir` in the container, read as the agent's
/// user (each cut at 1 MiB; none when `dir` is no directory). A failure leaves the prompt
/// without skills and is logged: the run goes on, as the reference's does.
async fn find_skills(container: &Container, dir: &str, user: Option<String>) -> Vec<SkillFile> {
    const SKILL_MD_MAX: usize = 1 << 20;
    let quoted = terminus_sandbox::tmux::shell_quote(dir);
    let script = format!(
        "[ -d {quoted} ] || exit 0; find {quoted} -mindepth 2 -maxdepth 2 -name SKILL.md -type f | sort | \
         while IFS= read -r f; do printf '%s\\0' \"$f\"; head -c {SKILL_MD_MAX} \"$f\" | tr -d '\\0'; printf '\\0'; done"
    );
    let options = ExecOptions { user, timeout: Some(Duration::from_secs(20)), ..ExecOptions::default() };
    match container.exec(&script, &options).await {
        Ok(out) if out.exit_code == Some(0) => {
            let fields: Vec<&str> = out.output.split('\0').collect();
            fields
                .chunks_exact(2)
                .map(|pair| SkillFile { path: pair[0].to_string(), text: pair[1].to_string() })
                .collect()
        }
        Ok(out) => {
            tracing::warn!(dir, exit_code = ?out.exit_code, "could not list the task's skills");
            Vec::new()
        }
        Err(error) => {
            tracing::warn!(dir, %error, "could not list the task's skills");
            Vec::new()
        }
    }
}

async fn timed<T>(request: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let outcome = request.await;
    (outcome, started.elapsed())
}
