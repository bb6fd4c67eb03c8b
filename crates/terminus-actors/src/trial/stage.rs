//! The Trial's state machine: which stage a trial is in, what each stage holds, and how events
//! move it on. Pure: everything it does goes through [`Effects`], so the unit tests below drive
//! it with a recording fake, in milliseconds, without Docker.
//!
//! ```text
//! Provisioning ─Provisioned─► Agent{task} ─driver: Finished(None | AgentTimeout)─► Verifying ─Verified─► TearingDown ─TornDown─► Done
//!      │                          │  └─ Finished(other error) ─► CheckingContainer ─gone─► Done (Lost: the Supervisor restarts it)
//!      │                          │                                   └─alive─► TearingDown (error recorded)
//!      ├─ engine down ─► Done (EngineUnavailable: queued again)      Verified(error) ─► CheckingContainer ─► Done | TearingDown
//!      └─ error ─► TearingDown          Cancel in any stage ─► CancelledError recorded ─► TearingDown
//! ```
//!
//! An agent deadline ends the agent phase with `AgentTimeoutError` and still verifies (Harbor's
//! rule, [`TrialErrorKind::still_graded`], which `override_error_policy`'s `should_grade` may
//! change per kind); any other agent error skips verification. An error
//! that may only be the visible end of a dead container is checked first: then the trial is
//! reported lost (and restarted) instead of recording it.

use std::mem;

use terminus_config::Task;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::TrialPhase;
use terminus_core::result::{TimingInfo, VerifierResult};

use super::drivers::{AgentDriver, Cx, Step};
use super::effects::{Effects, TeardownPlan, TrialEvent, VerifyPlan};
use super::record::{TrialRecord, TrialSetup};
use crate::environment::{ContainerCheck, Provisioned};
use crate::files;
use crate::protocol::TrialReport;

/// Where a trial is, with what that stage needs.
pub enum Stage {
    /// Loading the task, making its image, starting its container.
    Provisioning,
    /// The agent runs in the container.
    Agent { task: Box<Task> },
    /// An error arrived that a dead container may explain: checking before recording it.
    CheckingContainer { error: TrialError, then: AfterCheck },
    /// The task's tests run.
    Verifying,
    /// Logs are collected and the container removed.
    TearingDown,
    /// Reported; the actor stops.
    Done,
}

/// What follows a container check that finds the container alive.
pub enum AfterCheck {
    /// The agent's error stands: verification is skipped.
    Agent,
    /// The verifier's error stands.
    Verification,
}

/// The machine.
pub struct TrialMachine {
    setup: TrialSetup,
    stage: Stage,
    driver: AgentDriver,
    record: TrialRecord,
    cancelled: bool,
}

impl TrialMachine {
    pub fn new(setup: TrialSetup, retries: u32, restarts: u32) -> TrialMachine {
        let mut record = setup.new_record();
        record.result.retries = retries;
        record.result.restarts = restarts;
        TrialMachine {
            driver: AgentDriver::for_agent(&setup.agent),
            setup,
            stage: Stage::Provisioning,
            record,
            cancelled: false,
        }
    }

    pub fn setup(&self) -> &TrialSetup {
        &self.setup
    }

    #[cfg(test)]
    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    pub fn record(&self) -> &TrialRecord {
        &self.record
    }

    fn progress(&mut self, effects: &mut dyn Effects, phase: TrialPhase) {
        let usage = self.driver.usage();
        Cx { setup: &self.setup, record: &mut self.record, effects }.progress(phase, None, usage);
    }

    /// The trial begins: its environment is prepared.
    pub fn start(&mut self, effects: &mut dyn Effects) {
        self.record.result.started_at = Some(terminus_core::time::now());
        self.record.result.environment_setup = Some(TimingInfo::started());
        self.progress(effects, TrialPhase::Preparing);
        let setup = &self.setup;
        tracing::info!(trial = %setup.name, task = %setup.plan.task.name, agent = %setup.agent.name, model = ?setup.agent.model_name, "trial started");
        effects.provision(self.setup.needs_solution());
    }

    /// An effect's outcome (of the current generation).
    pub fn on_event(&mut self, event: TrialEvent, effects: &mut dyn Effects) {
        match (&mut self.stage, event) {
            (Stage::Provisioning, TrialEvent::Provisioned(provisioned)) => self.on_provisioned(*provisioned, effects),
            (Stage::Agent { task }, event) => {
                let mut cx = Cx { setup: &self.setup, record: &mut self.record, effects: &mut *effects };
                let step = self.driver.on_event(event, task, &mut cx);
                self.after_step(step, effects);
            }
            (Stage::CheckingContainer { .. }, TrialEvent::ContainerChecked(check)) => {
                self.on_container_checked(check, effects)
            }
            (Stage::Verifying, TrialEvent::Verified { rewards, notes }) => {
                self.note(notes);
                self.on_verified(rewards, effects)
            }
            (Stage::TearingDown, TrialEvent::TornDown { notes }) => {
                self.note(notes);
                self.on_torn_down(effects)
            }
            (_, _) => tracing::debug!(trial = %self.setup.name, "an event for another stage was ignored"),
        }
    }

    /// Keeps what an effect had to leave out (logs cut at their limit) in the result.
    fn note(&mut self, notes: Vec<String>) {
        for note in notes {
            tracing::warn!(trial = %self.setup.name, "{note}");
            self.record.result.warnings.push(note);
        }
    }

    fn after_step(&mut self, step: Step, effects: &mut dyn Effects) {
        if let Step::Finished(error) = step {
            self.finish_agent(error, effects);
        }
    }

    fn on_provisioned(&mut self, provisioned: Provisioned, effects: &mut dyn Effects) {
        TrialRecord::finish(&mut self.record.result.environment_setup);
        self.note(provisioned.notes);
        if let Some(task) = &provisioned.task {
            self.record.result.task_name = task.name.clone();
            self.record.result.task_checksum = provisioned.checksum.clone();
        }
        if let Some(error) = provisioned.error {
            if provisioned.engine_down && !self.cancelled {
                // The engine itself is away (dockerd restarting): this is no fault of the
                // trial. The Supervisor queues it again and waits for the engine.
                return self.stop_with(effects, |name| TrialReport::EngineUnavailable {
                    trial_name: name,
                    reason: error.message,
                });
            }
            self.record.record_error(error);
        }
        let task = match provisioned.task {
            Some(task) if !self.cancelled && self.record.error.is_none() => task,
            _ => return self.teardown(effects),
        };
        chaos_panic(&self.setup, &self.record);
        self.progress(effects, TrialPhase::StartingEnvironment);
        self.record.result.agent_setup = Some(TimingInfo::started());
        if let Some(limit) = self.setup.spec.agent_timeout(&self.setup.agent, &task) {
            effects.set_deadline(limit);
        }
        let mut cx = Cx { setup: &self.setup, record: &mut self.record, effects: &mut *effects };
        let step = self.driver.start(&task, &mut cx);
        self.stage = Stage::Agent { task: Box::new(task) };
        self.after_step(step, effects);
    }

    /// The agent's time limit passed.
    pub fn on_deadline(&mut self, effects: &mut dyn Effects) {
        let Stage::Agent { task } = &self.stage else { return };
        let limit = self.setup.spec.agent_timeout(&self.setup.agent, task);
        let secs = limit.map_or(0.0, |d| d.as_secs_f64());
        tracing::warn!(trial = %self.setup.name, "agent timed out after {secs:.0} s");
        let error =
            TrialError::new(TrialErrorKind::AgentTimeout, format!("Agent execution timed out after {secs} seconds"));
        self.finish_agent(Some(error), effects);
    }

    /// The terminal's actor failed under the agent.
    pub fn on_terminal_crashed(&mut self, reason: &str, effects: &mut dyn Effects) {
        if matches!(self.stage, Stage::Agent { .. }) {
            let error =
                TrialError::new(TrialErrorKind::TmuxSession, format!("the tmux session actor failed: {reason}"));
            self.finish_agent(Some(error), effects);
        }
    }

    /// Ends the agent's side activities and records what it reports.
    fn stop_agent(&mut self, effects: &mut dyn Effects) {
        let mut cx = Cx { setup: &self.setup, record: &mut self.record, effects: &mut *effects };
        self.driver.stop(&mut cx);
    }

    /// Ends the agent phase. A timeout still goes on to verification; any other error skips it,
    /// once a container check has ruled out a dead container.
    fn finish_agent(&mut self, error: Option<TrialError>, effects: &mut dyn Effects) {
        let Stage::Agent { task } = mem::replace(&mut self.stage, Stage::TearingDown) else { return };
        effects.invalidate();
        self.stop_agent(effects);
        match error {
            Some(error) if !self.setup.spec.error_policy.still_graded(error.kind) => {
                effects.check_container(error.kind.may_mean_lost_container());
                self.stage = Stage::CheckingContainer { error, then: AfterCheck::Agent };
            }
            graded => self.verify_or_teardown(*task, graded, effects),
        }
    }

    fn verify_or_teardown(&mut self, task: Task, error: Option<TrialError>, effects: &mut dyn Effects) {
        // Graded after an error (a timeout, or what `override_error_policy` grades after): the
        // agent did not say it was done, so its last command gets no time to settle.
        let timed_out = error.is_some();
        let graded = error.as_ref().is_none_or(|e| self.setup.spec.error_policy.still_graded(e.kind));
        if let Some(error) = error {
            tracing::warn!(trial = %self.setup.name, error = %error.message, "agent ended with an error");
            self.record.record_error(error);
        }
        if !graded || self.setup.spec.verifier_disable || self.cancelled {
            return self.teardown(effects);
        }
        self.stage = Stage::Verifying;
        self.progress(effects, TrialPhase::Verifying);
        self.record.result.verifier = Some(TimingInfo::started());
        effects.verify(VerifyPlan {
            timeout: self.setup.spec.verifier_timeout(&task),
            recording: self.driver.recording(),
            timed_out,
            task,
        });
    }

    fn on_verified(
        &mut self,
        rewards: Result<std::collections::BTreeMap<String, f64>, TrialError>,
        effects: &mut dyn Effects,
    ) {
        TrialRecord::finish(&mut self.record.result.verifier);
        match rewards {
            Ok(rewards) => {
                self.record.result.verifier_result = Some(VerifierResult { rewards: Some(rewards) });
                self.teardown(effects);
            }
            Err(error) if !self.cancelled => {
                effects.check_container(error.kind.may_mean_lost_container());
                self.stage = Stage::CheckingContainer { error, then: AfterCheck::Verification };
            }
            Err(error) => {
                self.record.record_error(error);
                self.teardown(effects);
            }
        }
    }

    fn on_container_checked(&mut self, check: ContainerCheck, effects: &mut dyn Effects) {
        let Stage::CheckingContainer { error, then } = mem::replace(&mut self.stage, Stage::TearingDown) else {
            return;
        };
        match check {
            ContainerCheck::Gone => {
                // The container or terminal died under the trial: the Supervisor restarts it in
                // a fresh container (or records the loss), and this run writes no result.
                effects.stop_terminal();
                let reason = format!("the trial's container is gone: {}", error.message);
                return self.stop_with(effects, |name| TrialReport::Lost { trial_name: name, reason });
            }
            ContainerCheck::EngineDown if !self.cancelled => {
                // The engine stopped answering (a stopped or wedged dockerd): the error is the
                // engine's, not the trial's. The Supervisor removes what is left of this run
                // once the engine is back and runs the trial again, no attempt used.
                effects.stop_terminal();
                let reason = format!("the Docker engine does not answer: {}", error.message);
                return self.stop_with(effects, |name| TrialReport::EngineUnavailable { trial_name: name, reason });
            }
            ContainerCheck::Alive | ContainerCheck::EngineDown => {}
        }
        if matches!(then, AfterCheck::Agent) {
            tracing::warn!(trial = %self.setup.name, error = %error.message, "agent ended with an error");
        }
        self.record.record_error(error);
        self.teardown(effects);
    }

    /// Stop as soon as possible: the job is being cancelled.
    pub fn on_cancel(&mut self, effects: &mut dyn Effects) {
        if self.cancelled || matches!(self.stage, Stage::Done) {
            return;
        }
        self.cancelled = true;
        // An error that was being checked happened first, so it is the one that counts.
        if let Stage::CheckingContainer { error, .. } = &self.stage {
            self.record.record_error(error.clone());
        }
        self.record.record_error(TrialError::new(TrialErrorKind::Cancelled, "the job was cancelled"));
        match self.stage {
            Stage::Provisioning => {
                // A container it made meanwhile is removed when its report arrives stale.
                effects.abort_work();
                TrialRecord::finish(&mut self.record.result.environment_setup);
            }
            Stage::Agent { .. } => {
                effects.invalidate();
                self.stop_agent(effects);
            }
            Stage::Verifying => {
                effects.abort_work();
                TrialRecord::finish(&mut self.record.result.verifier);
            }
            Stage::CheckingContainer { .. } => {}
            Stage::TearingDown | Stage::Done => return,
        }
        self.teardown(effects);
    }

    /// Collects the agent's logs from the container and removes it, whatever happened before.
    /// Called once, from the stage that ends the trial.
    fn teardown(&mut self, effects: &mut dyn Effects) {
        self.stage = Stage::TearingDown;
        effects.invalidate();
        self.progress(effects, TrialPhase::TearingDown);
        if chaos_hang(&self.setup, &self.record) {
            return;
        }
        effects.teardown(TeardownPlan {
            markers: self.driver.markers(),
            recording: self.driver.recording(),
            // Verification downloads all of /logs; only a trial that was not verified fetches them here.
            download_agent_logs: self.record.result.verifier.is_none(),
        });
    }

    /// Writes the result and reports it. A disk error is logged and reported, never a crash:
    /// a finished trial is not run (and paid for) again because its file could not be written.
    fn on_torn_down(&mut self, effects: &mut dyn Effects) {
        self.stage = Stage::Done;
        self.record.result.finished_at = Some(terminus_core::time::now());
        let (name, reward) = (&self.setup.name, self.record.result.reward());
        match &self.record.error {
            Some(error) => {
                tracing::info!(trial = %name, error = %error.kind, ?reward, "trial finished with an error: {}", error.message);
                effects.write_text(&self.setup.dir.exception_txt(), &error.message);
            }
            None => tracing::info!(trial = %name, ?reward, "trial finished"),
        }
        let result = self.record.to_result();
        let written = match files::to_json(&result)
            .and_then(|bytes| effects.write_atomic(&self.setup.dir.result_json(), &bytes))
        {
            Ok(()) => true,
            // Without its result on disk the trial is not done: it runs again on a resume.
            Err(e) if files::is_disk_full(&e) => return self.disk_full(&e, effects),
            Err(e) => {
                tracing::error!(trial = %name, error = %e, "could not write the trial's result; the job's result still counts it");
                false
            }
        };
        effects.report(TrialReport::Finished { result: Box::new(result), error: self.record.error_kind(), written });
        effects.stop();
    }

    /// The trial's directory has no room for its record: it stops without a result and the
    /// Supervisor halts the job, resumably (a restart would only fill the disk again).
    pub fn disk_full(&mut self, error: &std::io::Error, effects: &mut dyn Effects) {
        let reason = format!("cannot write to {}: {error}", self.setup.dir.path().display());
        tracing::error!(trial = %self.setup.name, %reason, "the disk is full");
        self.stop_with(effects, |name| TrialReport::DiskFull { trial_name: name, reason });
    }

    fn stop_with(
        &mut self,
        effects: &mut dyn Effects,
        report: impl FnOnce(terminus_core::ids::TrialName) -> TrialReport,
    ) {
        self.stage = Stage::Done;
        effects.invalidate();
        effects.report(report(self.setup.name.clone()));
        effects.stop();
    }
}

/// Test hook for the watchdog tests: `TERMINUS_CHAOS_HANG_TASK=<task>` makes the first run (not
/// a restart) of that task's trials never finish their teardown, as if an engine call had no
/// deadline. Only the Supervisor's watchdog ends such a trial.
fn chaos_hang(setup: &TrialSetup, record: &TrialRecord) -> bool {
    let task = &setup.plan.task.name;
    record.result.restarts == 0 && std::env::var("TERMINUS_CHAOS_HANG_TASK").is_ok_and(|t| !t.is_empty() && t == *task)
}

/// Test hook for the supervision tests and the chaos suite: `TERMINUS_CHAOS_PANIC_TASK=<task>`
/// makes the first run (not a restart) of that task's trials panic once their container exists.
fn chaos_panic(setup: &TrialSetup, record: &TrialRecord) {
    let task = &setup.plan.task.name;
    if record.result.restarts == 0
        && std::env::var("TERMINUS_CHAOS_PANIC_TASK").is_ok_and(|t| !t.is_empty() && t == *task)
    {
        panic!("chaos: TERMINUS_CHAOS_PANIC_TASK={task} (a test hook)");
    }
}
