//! The Trial's state machine: which stage a trial is in, what each stage holds, and how events
//! move it on. Pure: everything it does goes through [`Effects`], so the unit tests below drive
//! it with a recording fake, in milliseconds, without Docker.
//!
//! ```text
//! Provisioning ─Provisioned─► Agent{trial} ─driver: Finished(None | AgentTimeout)─► Verifying ─Verified─► TearingDown ─TornDown─► Done
//!      │                          │  └─ Finished(other error) ─► CheckingContainer ─gone─► Done (Lost: the Supervisor restarts it)
//!      │                          │                                   └─alive─► TearingDown (error recorded)
//!      ├─ engine down ─► Done (EngineUnavailable: queued again)      Verified(error) ─► CheckingContainer ─► Done | TearingDown
//!      └─ error ─► TearingDown          Cancel in any stage ─► CancelledError recorded ─► TearingDown
//! ```
//!
//! A multi-step task (`[[steps]]`, Harbor's `MultiStepTrial`) runs the middle of this line once per
//! step, in the one container:
//!
//! ```text
//! Provisioned ─► PreparingStep ─StepPrepared─► Agent ─► Verifying ─Verified─► PreparingStep (next step) … ─► TearingDown
//! ```
//!
//! Each step's agent, verifier, error and timings are its own (`step_results`, files under
//! `steps/<name>/`); a step that fails without a verdict, or misses its `min_reward`, ends the
//! run (the remaining steps are skipped); the trial's reward is the steps' mean per key or the
//! last step's (`multi_step_reward_strategy`).
//!
//! An agent deadline ends the agent phase with `AgentTimeoutError` and still verifies (Harbor's
//! rule, [`TrialErrorKind::still_graded`], which `override_error_policy`'s `should_grade` may
//! change per kind); any other agent error skips verification. An error
//! that may only be the visible end of a dead container is checked first: then the trial is
//! reported lost (and restarted) instead of recording it.

use std::mem;

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::Arc;

use terminus_config::task::RewardStrategy;
use terminus_config::trial::ResolvedTrial;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::TrialPhase;
use terminus_core::layout::TrialDir;
use terminus_core::result::{StepResult, TimingInfo, VerifierResult};

use super::drivers::{AgentDriver, AgentTurn, Cx, Step};
use super::effects::{Effects, StepVerify, TeardownPlan, TrialEvent, VerifyPlan};
use super::record::{TrialRecord, TrialSetup};
use crate::environment::steps::{StepPrep, min_reward_failure};
use crate::environment::{ContainerCheck, Provisioned, Stopped};
use crate::files;
use crate::protocol::TrialReport;

/// Where a trial is, with what that stage needs.
pub enum Stage {
    /// Loading the task, making its image, starting its container.
    Provisioning,
    /// A multi-step task's next step is being set up (its workdir, `setup.sh`, healthcheck).
    PreparingStep { trial: Arc<ResolvedTrial> },
    /// The agent runs in the container.
    Agent { trial: Arc<ResolvedTrial> },
    /// An error arrived that a dead container may explain: checking before recording it.
    CheckingContainer { error: TrialError, then: AfterCheck },
    /// The task's (or the step's) tests run.
    Verifying { trial: Arc<ResolvedTrial> },
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

/// A multi-step trial's way through its steps.
struct StepsRun {
    /// How the trial's verdict is made from the steps' (`multi_step_reward_strategy`).
    strategy: RewardStrategy,
    /// Each step's own `artifacts`, as collected.
    artifacts: Vec<Vec<terminus_config::policy::ArtifactSpec>>,
    /// Each step's own `[[steps.verifier.collect]]` hooks, run (after the task's) before its
    /// artifacts are collected.
    hooks: Vec<Vec<terminus_config::task::CollectSpec>>,
    /// The step under way (an index into the task's steps).
    index: usize,
    /// One per step begun; the last is the current one.
    results: Vec<StepResult>,
    /// The current step's first error (recorded on the step, not the trial, as in Harbor).
    error: Option<TrialError>,
    /// A verifier ran in the container since the last step's set-up (its files are cleared).
    verified: bool,
}

impl StepsRun {
    /// The run of the trial's steps.
    fn new(trial: &ResolvedTrial) -> StepsRun {
        let task = &trial.task;
        let artifacts = trial.step_artifacts.clone();
        let hooks = task.steps().iter().map(|step| step.verifier.collect.clone()).collect();
        let strategy = task.config.multi_step_reward_strategy.unwrap_or(RewardStrategy::Mean);
        StepsRun { strategy, artifacts, hooks, index: 0, results: Vec::new(), error: None, verified: false }
    }

    fn current(&mut self) -> &mut StepResult {
        self.results.last_mut().expect("a step has begun")
    }
}

/// The machine.
pub struct TrialMachine {
    setup: TrialSetup,
    stage: Stage,
    driver: AgentDriver,
    record: TrialRecord,
    cancelled: bool,
    /// Where the agent's and verifier's files go now: the trial's directory, or its step's.
    out: TrialDir,
    /// The time limit of the agent phase under way (for the deadline's message).
    agent_limit: Option<Duration>,
    /// The agent's deadline is to be set once its execution starts: its terminal's set-up
    /// (tool installs, the recorder) has a limit of its own and is not charged to the agent.
    deadline_pending: bool,
    /// For a multi-step task.
    steps: Option<StepsRun>,
}

impl TrialMachine {
    pub fn new(setup: TrialSetup, retries: u32, restarts: u32) -> TrialMachine {
        let mut record = setup.new_record();
        record.result.retries = retries;
        record.result.restarts = restarts;
        TrialMachine {
            driver: AgentDriver::for_agent(&setup.agent),
            out: setup.dir.clone(),
            setup,
            stage: Stage::Provisioning,
            record,
            cancelled: false,
            agent_limit: None,
            deadline_pending: false,
            steps: None,
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
        Cx { setup: &self.setup, dir: &self.out, record: &mut self.record, effects }.progress(phase, None, usage);
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
            (Stage::PreparingStep { .. }, TrialEvent::StepPrepared { result, notes }) => {
                self.note(notes);
                self.on_step_prepared(result, effects)
            }
            (Stage::Agent { trial }, event) => {
                let mut cx =
                    Cx { setup: &self.setup, dir: &self.out, record: &mut self.record, effects: &mut *effects };
                let step = self.driver.on_event(event, trial, &mut cx);
                self.after_step(step, effects);
            }
            (Stage::CheckingContainer { .. }, TrialEvent::ContainerChecked(check)) => {
                self.on_container_checked(check, effects)
            }
            (Stage::Verifying { .. }, TrialEvent::Verified { rewards, notes, processes }) => {
                self.note(notes);
                if let Some(census) = processes {
                    self.record_processes(&census);
                }
                self.on_verified(rewards, effects)
            }
            (Stage::TearingDown, TrialEvent::TornDown { notes }) => {
                self.note(notes);
                self.on_torn_down(effects)
            }
            (_, _) => tracing::debug!(trial = %self.setup.name, "an event for another stage was ignored"),
        }
    }

    /// Records what ran when the tests started, in the agent's report (a step's on the step).
    fn record_processes(&mut self, census: &crate::environment::ProcessCensus) {
        // Only a verification (whose stage holds the trial's plan) reports what ran.
        let Stage::Verifying { trial } = &self.stage else { return };
        let processes = trial.verifier.agent_processes;
        let report = census.to_json(processes);
        let agent = match self.steps.as_mut() {
            Some(steps) => &mut steps.current().agent_result,
            None => &mut self.record.result.agent_result,
        };
        agent
            .get_or_insert_with(Default::default)
            .metadata
            .get_or_insert_with(Default::default)
            .insert("processes_at_verification".into(), report);
    }

    /// Keeps what an effect had to leave out (logs cut at their limit) in the result.
    fn note(&mut self, notes: Vec<String>) {
        for note in notes {
            tracing::warn!(trial = %self.setup.name, "{note}");
            self.record.result.warnings.push(note);
        }
    }

    fn after_step(&mut self, step: Step, effects: &mut dyn Effects) {
        if self.deadline_pending
            && self.record.result.agent_execution.is_some()
            && let Some(limit) = self.agent_limit
        {
            self.deadline_pending = false;
            effects.set_deadline(limit);
        }
        if let Step::Finished(error) = step {
            self.finish_agent(error, effects);
        }
    }

    fn on_provisioned(&mut self, provisioned: Provisioned, effects: &mut dyn Effects) {
        TrialRecord::finish(&mut self.record.result.environment_setup);
        self.note(provisioned.notes);
        self.record.result.host = provisioned.host;
        if let Some(trial) = &provisioned.trial {
            self.record.result.task_name = trial.task.name.clone();
            self.record.result.task_checksum = provisioned.checksum.clone();
        }
        match provisioned.stopped {
            // Its node was lost while the container was set up: a crash, restarted elsewhere by
            // the Supervisor.
            Some(Stopped::Lost(error)) if !self.cancelled => {
                return self.stop_with(effects, |name| TrialReport::Lost { trial_name: name, reason: error.message });
            }
            // The engine itself is away (dockerd restarting): this is no fault of the trial. The
            // Supervisor queues it again and waits for the engine.
            Some(Stopped::EngineDown(error)) if !self.cancelled => {
                return self.stop_with(effects, |name| TrialReport::EngineUnavailable {
                    trial_name: name,
                    reason: error.message,
                });
            }
            Some(stopped) => self.record.record_error(stopped.into_error()),
            None => {}
        }
        let trial = match provisioned.trial {
            Some(trial) if !self.cancelled && self.record.error.is_none() => trial,
            _ => return self.teardown(effects),
        };
        chaos_panic(&self.setup, &self.record);
        self.progress(effects, TrialPhase::StartingEnvironment);
        self.record.result.agent_setup = Some(TimingInfo::started());
        if !trial.task.steps().is_empty() {
            self.steps = Some(StepsRun::new(&trial));
            return self.begin_step(trial, effects);
        }
        let turn = AgentTurn {
            instruction: trial.instruction.clone(),
            user: trial.task.agent_user(None),
            network: trial.network(None).agent,
            timeout: trial.limits.agent,
        };
        self.start_agent(trial, turn, effects);
    }

    fn start_agent(&mut self, trial: Arc<ResolvedTrial>, turn: AgentTurn, effects: &mut dyn Effects) {
        self.agent_limit = turn.timeout;
        self.deadline_pending = turn.timeout.is_some();
        let mut cx = Cx { setup: &self.setup, dir: &self.out, record: &mut self.record, effects: &mut *effects };
        let step = self.driver.start(&trial, turn, &mut cx);
        self.stage = Stage::Agent { trial };
        self.after_step(step, effects);
    }

    /// Sets the container up for the current step of a multi-step task (after collecting the
    /// previous step's artifacts).
    fn begin_step(&mut self, trial: Arc<ResolvedTrial>, effects: &mut dyn Effects) {
        let Some(steps) = self.steps.as_mut() else { return self.teardown(effects) };
        let task = &trial.task;
        let index = steps.index;
        let step = &task.steps()[index];
        let previous = index.checked_sub(1).map(|i| (self.out.clone(), steps.artifacts[i].clone()));
        steps.results.push(StepResult { step_name: step.name.clone(), ..StepResult::default() });
        let network = task.step_network_plan(step);
        let dir = self.setup.dir.step(&step.name);
        let prep = StepPrep {
            dir: dir.clone(),
            name: step.name.clone(),
            workdir: task.step_dir(step).join("workdir"),
            previous,
            // The previous step's own hooks; the effects put the task's, which they hold with its
            // artifacts, before them.
            collect: index.checked_sub(1).map(|i| steps.hooks[i].clone()).unwrap_or_default(),
            reset_verifier: std::mem::take(&mut steps.verified),
            user: task.agent_user(Some(step)),
            healthcheck: step.healthcheck.clone(),
            healthcheck_key: format!("steps[{index}]"),
            solution: self.setup.needs_solution().then(|| task.step_dir(step).join("solution")),
            setup_network: network.setup,
            // The first step's agent enters its network once its terminal is set up.
            agent_network: (index > 0).then_some(network.agent),
        };
        tracing::info!(trial = %self.setup.name, step = %step.name, "step {} of {} begins", index + 1, task.steps().len());
        self.out = dir;
        self.stage = Stage::PreparingStep { trial };
        effects.prepare_step(prep);
    }

    fn on_step_prepared(&mut self, result: Result<(), TrialError>, effects: &mut dyn Effects) {
        let Stage::PreparingStep { trial } = mem::replace(&mut self.stage, Stage::TearingDown) else { return };
        if let Err(error) = result {
            // Without its set-up the step has no verdict: the remaining steps are skipped.
            tracing::warn!(trial = %self.setup.name, error = %error.message, "a step's set-up failed");
            self.record_error(error);
            return self.teardown(effects);
        }
        if self.cancelled {
            return self.teardown(effects);
        }
        let index = self.steps.as_ref().map_or(0, |s| s.index);
        let step = &trial.task.steps()[index];
        let turn = AgentTurn {
            instruction: trial.step_instructions[index].clone(),
            user: trial.task.agent_user(Some(step)),
            network: trial.network(Some(step)).agent,
            timeout: trial.step_limits(index).agent,
        };
        self.start_agent(trial, turn, effects);
    }

    /// Records an error where it belongs: on the current step of a multi-step trial (Harbor
    /// records handled failures there), else on the trial.
    fn record_error(&mut self, error: TrialError) {
        match self.steps.as_mut().filter(|steps| steps.results.len() == steps.index + 1) {
            Some(steps) => drop(steps.error.get_or_insert(error)),
            None => self.record.record_error(error),
        }
    }

    /// After a step's verification (or its agent, when verification is off): the next step, or
    /// the end. Harbor's gate: a step that failed without a verdict, or whose verdict misses its
    /// `min_reward` (unless verification is off), ends the run.
    fn next_step_or_teardown(&mut self, trial: Arc<ResolvedTrial>, effects: &mut dyn Effects) {
        let Some(steps) = self.steps.as_mut() else { return self.teardown(effects) };
        let task = &trial.task;
        let step = &task.steps()[steps.index];
        let failed = steps.error.is_some() && steps.current().verifier_result.is_none();
        let below = match &step.min_reward {
            Some(min) if !trial.verifier.disabled => {
                let rewards = steps.current().verifier_result.as_ref().and_then(|v| v.rewards.as_ref());
                min_reward_failure(rewards, min)
            }
            _ => None,
        };
        if let Some(why) = &below {
            tracing::info!(trial = %self.setup.name, step = %step.name, "{why}; the remaining steps are skipped");
        }
        if failed || below.is_some() || self.cancelled || steps.index + 1 >= task.steps().len() {
            return self.teardown(effects);
        }
        close_step(steps);
        steps.index += 1;
        self.begin_step(trial, effects);
    }

    /// The agent's time limit passed.
    pub fn on_deadline(&mut self, effects: &mut dyn Effects) {
        if !matches!(self.stage, Stage::Agent { .. }) {
            return;
        }
        let secs = self.agent_limit.map_or(0.0, |d| d.as_secs_f64());
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

    /// Ends the agent's side activities and records what it reports (a step's on the step).
    fn stop_agent(&mut self, effects: &mut dyn Effects) {
        let mut cx = Cx { setup: &self.setup, dir: &self.out, record: &mut self.record, effects: &mut *effects };
        self.driver.stop(&mut cx);
        if let Some(steps) = self.steps.as_mut() {
            let step = steps.current();
            step.agent_result = self.record.result.agent_result.take();
            step.agent_execution = self.record.result.agent_execution.take();
        }
    }

    /// Ends the agent phase. A timeout still goes on to verification; any other error skips it,
    /// once a container check has ruled out a dead container.
    fn finish_agent(&mut self, error: Option<TrialError>, effects: &mut dyn Effects) {
        let Stage::Agent { trial } = mem::replace(&mut self.stage, Stage::TearingDown) else { return };
        effects.invalidate();
        self.stop_agent(effects);
        match error {
            Some(error) if !trial.error_policy.still_graded(error.kind) => {
                effects.check_container(error.kind.may_mean_lost_container());
                self.stage = Stage::CheckingContainer { error, then: AfterCheck::Agent };
            }
            graded => self.verify_or_teardown(trial, graded, effects),
        }
    }

    fn verify_or_teardown(&mut self, trial: Arc<ResolvedTrial>, error: Option<TrialError>, effects: &mut dyn Effects) {
        // Graded after an error (a timeout, or what `override_error_policy` grades after): the
        // agent did not say it was done, so its last command gets no time to settle.
        let timed_out = error.is_some();
        let graded = error.as_ref().is_none_or(|e| trial.error_policy.still_graded(e.kind));
        if let Some(error) = error {
            tracing::warn!(trial = %self.setup.name, error = %error.message, "agent ended with an error");
            self.record_error(error);
        }
        if !graded || self.cancelled {
            return self.teardown(effects);
        }
        if trial.verifier.disabled {
            return self.next_step_or_teardown(trial, effects);
        }
        self.progress(effects, TrialPhase::Verifying);
        self.record.result.verifier = Some(TimingInfo::started());
        let (timeout, step) = match &self.steps {
            Some(steps) => {
                let step = trial.task.steps()[steps.index].clone();
                let more = steps.index + 1 < trial.task.steps().len();
                (trial.step_limits(steps.index).verifier, Some(StepVerify { step, more }))
            }
            None => (trial.limits.verifier, None),
        };
        effects.verify(VerifyPlan { timeout, timed_out, trial: trial.clone(), dir: self.out.clone(), step });
        self.stage = Stage::Verifying { trial };
    }

    fn on_verified(
        &mut self,
        rewards: Result<std::collections::BTreeMap<String, f64>, TrialError>,
        effects: &mut dyn Effects,
    ) {
        TrialRecord::finish(&mut self.record.result.verifier);
        if let Some(steps) = self.steps.as_mut() {
            steps.verified = true;
            steps.current().verifier = self.record.result.verifier.take();
        }
        match rewards {
            Ok(rewards) => {
                let verdict = Some(VerifierResult { rewards: Some(rewards) });
                match self.steps.as_mut() {
                    Some(steps) => steps.current().verifier_result = verdict,
                    None => self.record.result.verifier_result = verdict,
                }
                match mem::replace(&mut self.stage, Stage::TearingDown) {
                    Stage::Verifying { trial } => self.next_step_or_teardown(trial, effects),
                    _ => self.teardown(effects),
                }
            }
            Err(error) if !self.cancelled => {
                effects.check_container(error.kind.may_mean_lost_container());
                self.stage = Stage::CheckingContainer { error, then: AfterCheck::Verification };
            }
            Err(error) => {
                self.record_error(error);
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
            ContainerCheck::EndedFromInside if matches!(then, AfterCheck::Agent) => {
                // What ran inside ended the container (nothing outside stopped it): the agent's
                // doing, this trial's error; no loss to restart, nothing left to verify in.
                let message = format!(
                    "the container stopped from inside while the agent ran (nothing outside stopped it): {}",
                    error.message
                );
                self.record_error(TrialError::new(TrialErrorKind::AgentEndedEnvironment, message));
                return self.teardown(effects);
            }
            // During the tests: their error stands, as the trial's own.
            ContainerCheck::Alive | ContainerCheck::EngineDown | ContainerCheck::EndedFromInside => {}
        }
        if matches!(then, AfterCheck::Agent) {
            tracing::warn!(trial = %self.setup.name, error = %error.message, "agent ended with an error");
        }
        self.record_error(error);
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
            self.record_error(error.clone());
        }
        self.record.record_error(TrialError::new(TrialErrorKind::Cancelled, "the job was cancelled"));
        match self.stage {
            Stage::PreparingStep { .. } => effects.abort_work(),
            Stage::Provisioning => {
                // A container it made meanwhile is removed when its report arrives stale.
                effects.abort_work();
                TrialRecord::finish(&mut self.record.result.environment_setup);
            }
            Stage::Agent { .. } => {
                effects.invalidate();
                self.stop_agent(effects);
            }
            Stage::Verifying { .. } => {
                effects.abort_work();
                TrialRecord::finish(&mut self.record.result.verifier);
                if let Some(steps) = self.steps.as_mut() {
                    steps.current().verifier = self.record.result.verifier.take();
                }
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
        let (step_artifacts, step_hooks) = self.finish_steps();
        if chaos_hang(&self.setup, &self.record) {
            return;
        }
        effects.teardown(TeardownPlan {
            markers: self.driver.markers(),
            // Verification downloads all of /logs; only a trial that was not verified fetches them
            // here, and a multi-step one, whose terminal may outlive its last verification (host
            // files win, so this only adds what is new: the finished recording).
            download_agent_logs: self.steps.is_some() || self.record.result.verifier.is_none(),
            dir: self.out.clone(),
            step_artifacts,
            step_hooks,
        });
    }

    /// Closes a multi-step trial's last step and derives the trial's verdict from the steps'
    /// (Harbor: `final` takes the last step's; `mean`, the default, averages each key over the
    /// steps that have a verdict, a key a step lacks counting 0). Returns the last step's own
    /// artifacts and collect hooks, which teardown runs and collects.
    fn finish_steps(
        &mut self,
    ) -> (Vec<terminus_config::policy::ArtifactSpec>, Vec<terminus_config::task::CollectSpec>) {
        let Some(steps) = self.steps.as_mut() else { return Default::default() };
        if steps.results.is_empty() {
            return Default::default();
        }
        close_step(steps);
        self.record.result.verifier_result = match steps.strategy {
            RewardStrategy::Final => steps.results.last().and_then(|s| s.verifier_result.clone()),
            RewardStrategy::Mean => mean_rewards(&steps.results),
        };
        self.record.result.step_results = Some(steps.results.clone());
        let artifacts = steps.artifacts.get(steps.index).cloned().unwrap_or_default();
        (artifacts, steps.hooks.get(steps.index).cloned().unwrap_or_default())
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
        let error = result.error_kind();
        effects.report(TrialReport::Finished { result: Box::new(result), error, written });
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

/// Ends the current step: its error goes on its result.
fn close_step(steps: &mut StepsRun) {
    if let Some(error) = steps.error.take() {
        steps.current().exception_info = Some(error.to_exception_info());
    }
}

/// Harbor's `mean`: per key, the mean over the steps with a verdict, a key a step lacks
/// counting 0. None when no step has a verdict with a key.
fn mean_rewards(steps: &[StepResult]) -> Option<VerifierResult> {
    let verdicts: Vec<BTreeMap<String, f64>> = steps
        .iter()
        .filter_map(|s| s.verifier_result.as_ref())
        .map(|v| v.rewards.clone().unwrap_or_default())
        .collect();
    let keys: std::collections::BTreeSet<&String> = verdicts.iter().flat_map(|r| r.keys()).collect();
    if keys.is_empty() {
        return None;
    }
    let count = verdicts.len() as f64;
    let rewards = keys
        .into_iter()
        .map(|key| (key.clone(), verdicts.iter().map(|r| r.get(key).copied().unwrap_or(0.0)).sum::<f64>() / count))
        .collect();
    Some(VerifierResult { rewards: Some(rewards) })
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
