//! The Trial actor: one attempt of one agent on one task, from image to result file.
//!
//! Supervised by: the Supervisor. Supervises: its TmuxSession and, while one runs, a Summarizer.
//! Owns: the container (removed at the end whatever happened), the agent's state (for Terminus 2
//! the loop with the agent's registers, `terminus_agent::AgentLoop`), the trial's record and
//! directory.
//!
//! This file is the shell: the actor, its inbox and the dispatch. The parts:
//! - [`stage`]: the state machine (`Stage` with its data, `TrialMachine`), pure;
//! - [`drivers`]: the agents (`AgentDriver::{Terminus2, Oracle, Nop}`);
//! - [`effects`]: every slow operation, as a spawned task that reports back (`LiveEffects`);
//! - [`record`]: the result record, the trial config, the timings.
//!
//! ```text
//! post_start ─► provision ─► Provisioned ─► driver (terminal, loop…) ─► verify ─► Verified ─► teardown ─► TornDown ─► result.json, Finished ─► stop
//! ```
//!
//! What a handler may await: nothing. Each handler is in-memory work on the machine, small file
//! writes (the record), and sends; container work, terminal requests, model calls and
//! summarizations run in tasks or side actors that report back with a message, and the waits
//! commands ask for are timers. So `Cancel` and `Delivered(Deadline)` are handled within milliseconds
//! whatever is in flight. Each piece of work carries the generation it was started in; when the
//! machine abandons work (a deadline, a cancel, the end of the agent) the generation changes and
//! late replies are dropped (rust-analyzer's flycheck pattern).
//!
//! Errors are data: a trial ends with its error recorded, never by returning `Err` from a
//! handler (which would skip its cleanup) — except a panic in an effect, a bug, which fails
//! the actor at once so the Supervisor restarts the trial in a fresh container.

mod drivers;
mod effects;
pub mod record;
mod stage;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef, SupervisionEvent};
use terminus_agent::summarize::SummaryError;
use terminus_core::layout::names;

use self::effects::{Delivery, LiveEffects, TrialEvent};
use self::record::TrialSetup;
use self::stage::TrialMachine;
use crate::context::JobContext;
use crate::files;
use crate::llm::LlmHandle;
use crate::protocol::{SummarizerEvent, SummarizerReport, TrialReport, inbox_variant};

pub struct TrialActor;

pub struct TrialArgs {
    pub ctx: Arc<JobContext>,
    /// Who the trial is, as the Supervisor planned it from the job.
    pub setup: TrialSetup,
    pub llm: Option<LlmHandle>,
    pub supervisor: DerivedActorRef<TrialReport>,
    /// Failed attempts before this one (kept under `attempts/`).
    pub retries: u32,
    /// Restarts in a fresh container before this one.
    pub restarts: u32,
}

/// Inbox of [`TrialActor`].
pub enum TrialMsg {
    /// Stop as soon as possible: the job is being cancelled.
    Cancel,
    /// What the trial's effects deliver: an outcome, the agent's deadline, a panic.
    Delivered(Delivery),
    /// What its Summarizer reports, as an event of the generation that started it.
    Summarizer(SummarizerReport),
}

inbox_variant!(TrialMsg::Delivered(Delivery));
inbox_variant!(TrialMsg::Summarizer(SummarizerReport));

/// An effect's outcome: what it brings along is taken first; a reply from an earlier generation
/// is not the machine's any more (the trial has moved on).
fn on_event(machine: &mut TrialMachine, effects: &mut LiveEffects, generation: u64, mut event: TrialEvent) {
    let current = generation == effects.generation();
    effects.absorb(&mut event, current);
    if current {
        machine.on_event(event, effects);
    }
}

pub struct TrialState {
    machine: TrialMachine,
    effects: LiveEffects,
}

impl Actor for TrialActor {
    type Msg = TrialMsg;
    type State = TrialState;
    type Arguments = TrialArgs;

    async fn pre_start(&self, myself: ActorRef<TrialMsg>, args: TrialArgs) -> Result<TrialState, ActorProcessingErr> {
        let setup = args.setup;
        let effects = LiveEffects::new(
            myself.get_derived(),
            myself.get_derived(),
            args.ctx,
            setup.plan.clone(),
            setup.name.clone(),
            setup.dir.clone(),
            args.llm,
            args.supervisor,
        );
        Ok(TrialState { machine: TrialMachine::new(setup, args.retries, args.restarts), effects })
    }

    async fn post_start(&self, _myself: ActorRef<TrialMsg>, state: &mut TrialState) -> Result<(), ActorProcessingErr> {
        // A restart starts from a clean directory; earlier failed attempts stay in `attempts/`.
        let setup = state.machine.setup();
        let dir = &setup.dir;
        let prepared = clear_dir_except(dir.path(), names::ATTEMPTS_DIR)
            .and_then(|()| std::fs::create_dir_all(dir.agent_dir()))
            .and_then(|()| std::fs::create_dir_all(dir.verifier_dir()))
            .and_then(|()| files::write_json(&dir.config_json(), &state.machine.record().result.config));
        match prepared {
            Ok(()) => state.machine.start(&mut state.effects),
            // Nothing ran yet: the job halts, and this trial waits for a resume.
            Err(e) if files::is_disk_full(&e) => state.machine.disk_full(&e, &mut state.effects),
            // Anything else is a crash: the Supervisor restarts the trial.
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<TrialMsg>,
        msg: TrialMsg,
        state: &mut TrialState,
    ) -> Result<(), ActorProcessingErr> {
        let TrialState { machine, effects } = state;
        match msg {
            TrialMsg::Cancel => machine.on_cancel(effects),
            // A deadline of an earlier agent phase (a step that ended) is not this one's.
            TrialMsg::Delivered(Delivery::Deadline { generation }) if generation == effects.generation() => {
                machine.on_deadline(effects)
            }
            TrialMsg::Delivered(Delivery::Deadline { .. }) => {}
            TrialMsg::Delivered(Delivery::Event { generation, event }) => on_event(machine, effects, generation, event),
            TrialMsg::Summarizer(SummarizerReport { generation, event }) => {
                on_event(machine, effects, generation, TrialEvent::Summarizer(event))
            }
            TrialMsg::Delivered(Delivery::Panicked(text)) => {
                return Err(format!("an effect of the trial panicked: {text}").into());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<TrialMsg>,
        event: SupervisionEvent,
        state: &mut TrialState,
    ) -> Result<(), ActorProcessingErr> {
        // Children: the TmuxSession and a Summarizer. Their normal stops are expected; a failure
        // is handled here (the default would stop this actor without cleanup).
        let TrialState { machine, effects } = state;
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            let id = cell.get_id();
            if effects.is_summarizer(id) {
                effects.forget_summarizer();
                let result = Box::new(Err(SummaryError::Crashed(error.to_string())));
                machine.on_event(TrialEvent::Summarizer(SummarizerEvent::Finished { result, retries: 0 }), effects);
            } else if effects.is_terminal(id) {
                effects.forget_terminal();
                machine.on_terminal_crashed(&error.to_string(), effects);
            }
        }
        Ok(())
    }

    async fn post_stop(&self, myself: ActorRef<TrialMsg>, _state: &mut TrialState) -> Result<(), ActorProcessingErr> {
        // Backstop: no terminal or summarizer outlives its trial.
        myself.stop_children(None);
        Ok(())
    }
}

/// Removes everything in `dir` but the entry named `keep` (creating `dir` if needed).
fn clear_dir_except(dir: &std::path::Path, keep: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == keep {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}
