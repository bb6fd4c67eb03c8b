//! The Supervisor's decisions, as a pure ledger: it takes what happened (a trial finished, was
//! lost, is overdue; the engine went away; the job was cancelled) and returns [`Action`]s for the
//! shell (`supervisor.rs`) to perform. It holds the queue, the running slots, the trials waiting
//! out a backoff or a cleanup, the budget's held trials and the finished results, with the
//! counts derived from them. It awaits nothing, spawns nothing and touches no file: every rule
//! (retry, restart, restart intensity, outage requeue, watchdog, budget, cancel) is unit tested
//! here without Docker or actors.
//!
//! `R` is a finished trial's result (`TrialResult` in the product); the ledger only keeps it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use terminus_config::job::TrialPlan;
use terminus_config::policy::{RetrySpec, SupervisionSpec};
use terminus_core::control::{ControlChange, ControlRefusal, TrialState};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::RunEvent;
use terminus_core::ids::TrialName;
use terminus_core::stats::LiveCounts;

/// Runs one trial may lose to engine outages before the last one's error counts: an engine that
/// keeps failing (or a machine so loaded that pings time out) must not run a trial for ever.
pub const MAX_ENGINE_REQUEUES: u32 = 5;

/// A trial's identity and history while it is queued, running or waiting to be retried.
#[derive(Clone, Debug)]
pub struct Slot {
    pub plan: TrialPlan,
    pub name: TrialName,
    /// Failed attempts so far (each archived under `attempts/N`).
    pub retries: u32,
    /// Restarts in a fresh container so far.
    pub restarts: u32,
    /// Runs given back because the engine did not answer (they use no attempt, but are bounded).
    pub requeues: u32,
    /// Which arming of the watchdog counts (an older one's timer is ignored).
    pub watch: u32,
    /// The cluster holds the trial in its queue: no watchdog until it is placed.
    pub queued: bool,
    /// How long this run may take in all (reported by the trial once its task loaded).
    pub budget: Option<Duration>,
    /// A live control cancelled it: whatever its run ends with, it is not run again.
    pub cancelled: bool,
}

impl Slot {
    pub fn new(plan: TrialPlan, name: TrialName) -> Slot {
        Slot {
            plan,
            name,
            retries: 0,
            restarts: 0,
            requeues: 0,
            watch: 0,
            queued: false,
            budget: None,
            cancelled: false,
        }
    }
}

/// Where the job is. Dispatch runs only while `Running`; a `Halted` job lets its running trials
/// finish and stays resumable; a `Cancelled` one gives every unfinished trial its error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobMode {
    Running,
    /// Too many restarts, or a full disk: nothing new starts.
    Halted,
    Cancelled,
}

/// What a trial waits for after its container is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterCleanup {
    /// A crash: it runs again (a restart is counted), or its error is its result.
    Restart,
    /// The engine was away: it runs again when it answers, no attempt or restart used.
    Requeue,
    /// A crash with no restart left: its error becomes its result.
    GiveUp,
}

/// A trial waiting for its last run's container to be removed, and what comes next.
#[derive(Debug)]
struct Cleanup {
    slot: Slot,
    /// Its error if it cannot run again (the job is cancelled or halted meanwhile).
    error: TrialError,
    then: AfterCleanup,
}

/// What the shell does for the ledger.
#[derive(Debug)]
pub enum Action {
    /// Start a trial actor for this slot's run (`spawn_failed` if it cannot be).
    Spawn(Slot),
    /// Send `TrialOverdue` after `budget`.
    ArmWatchdog {
        trial: TrialName,
        budget: Duration,
        watch: u32,
    },
    /// Kill the trial's actor (it outlived all its deadlines and the margin).
    Kill(TrialName),
    /// Remove what the trial's last run left on the engine, then report `cleaned_up`; after an
    /// outage, wait for the engine first.
    CleanUp {
        trial: TrialName,
        after_outage: bool,
    },
    /// Ping the engine until it answers, then report `engine_back`.
    WaitForEngine,
    /// Archive the failed attempt `attempt` and report `retry_due` after `wait`.
    RetryLater {
        trial: TrialName,
        attempt: u32,
        wait: Duration,
    },
    /// The trial cannot run again: its error is its result (the shell builds it, writes it and
    /// hands it to `record`).
    GiveUp {
        slot: Slot,
        error: TrialError,
    },
    /// A result was recorded (and, with `write`, must still be written to the trial's
    /// `result.json`): write the job's result and tell the reporters.
    Recorded {
        trial: TrialName,
        write: bool,
    },
    /// The counts changed without a trial finishing: write the job's result.
    WriteJobResult,
    Emit(RunEvent),
    /// Ask every running trial to cancel.
    CancelRunning,
    /// Ask one running trial to cancel (a live control).
    CancelTrial(TrialName),
    /// Nothing is running or left to run: sweep the job's containers and finish.
    Finish,
}

/// The rules the ledger applies (from the job's spec).
#[derive(Clone, Debug)]
pub struct Rules {
    pub n_concurrent: usize,
    pub retry: RetrySpec,
    pub supervision: SupervisionSpec,
}

#[derive(Debug)]
pub struct Ledger<R> {
    rules: Rules,
    queue: VecDeque<Slot>,
    running: HashMap<TrialName, Slot>,
    /// Failed trials waiting out their backoff, with their last result.
    waiting: HashMap<TrialName, (Slot, R)>,
    /// Trials whose last run's container is being removed before they start again.
    restarting: HashMap<TrialName, Cleanup>,
    /// Trials not started because their agent's budget (or the job's) is spent; they stay
    /// pending, for a resume with a raised budget.
    held: Vec<Slot>,
    finished: Vec<R>,
    n_total: u64,
    n_retries: u64,
    n_restarts: u64,
    /// Recent restarts, for the intensity limit.
    restart_times: VecDeque<Instant>,
    mode: JobMode,
    /// The engine stopped answering: nothing is dispatched until it does again.
    engine_down: bool,
    /// The sweep has started: nothing more happens.
    finishing: bool,
    /// The budget's reason, once said.
    budget_reached: Option<String>,
    /// A live control paused admission: nothing starts until it is resumed.
    paused: bool,
}

impl<R: HasTrialName> Ledger<R> {
    pub fn new(rules: Rules, to_run: Vec<Slot>, finished: Vec<R>, n_retries: u64, n_restarts: u64) -> Ledger<R> {
        Ledger {
            n_total: (to_run.len() + finished.len()) as u64,
            rules,
            queue: to_run.into(),
            running: HashMap::new(),
            waiting: HashMap::new(),
            restarting: HashMap::new(),
            held: Vec::new(),
            finished,
            n_retries,
            n_restarts,
            restart_times: VecDeque::new(),
            mode: JobMode::Running,
            engine_down: false,
            finishing: false,
            budget_reached: None,
            paused: false,
        }
    }

    pub fn mode(&self) -> JobMode {
        self.mode
    }

    pub fn finished(&self) -> &[R] {
        &self.finished
    }

    pub fn n_total(&self) -> u64 {
        self.n_total
    }

    pub fn n_held(&self) -> u64 {
        self.held.len() as u64
    }

    pub fn live(&self) -> LiveCounts {
        LiveCounts {
            n_total: self.n_total,
            n_running: self.running.len() as u64,
            n_pending: (self.queue.len() + self.waiting.len() + self.restarting.len() + self.held.len()) as u64,
            n_retries: self.n_retries,
            n_restarts: self.n_restarts,
        }
    }

    /// Whether every planned trial finished in this run (the job's result says `finished_at`).
    pub fn complete(&self) -> bool {
        self.mode == JobMode::Running
            && self.held.is_empty()
            && self.queue.is_empty()
            && self.waiting.is_empty()
            && self.restarting.is_empty()
    }

    /// How many trials may run at once (adaptive admission moves it; running trials stay).
    pub fn set_limit(&mut self, n_concurrent: usize) {
        self.rules.n_concurrent = n_concurrent.max(1);
    }

    pub fn n_running(&self) -> usize {
        self.running.len()
    }

    /// Trials that could start now if the limit allowed.
    pub fn n_queued(&self) -> usize {
        self.queue.len()
    }

    pub fn is_running(&self, trial: &TrialName) -> bool {
        self.running.contains_key(trial)
    }

    /// Starts queued trials up to the concurrency limit; `budget_reached` says why an agent's
    /// trials may not start (its budget, or the job's, is spent). Ends the job when nothing is
    /// running or left.
    pub fn dispatch(&mut self, budget_reached: &dyn Fn(usize) -> Option<String>) -> Vec<Action> {
        self.dispatch_within(usize::MAX, budget_reached)
    }

    /// [`Ledger::dispatch`] running at most `cap` trials in all (a limit shared with other jobs).
    pub fn dispatch_within(&mut self, cap: usize, budget_reached: &dyn Fn(usize) -> Option<String>) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.finishing {
            return actions;
        }
        while self.mode == JobMode::Running
            && !self.paused
            && !self.engine_down
            && self.running.len() < self.rules.n_concurrent.min(cap)
        {
            let Some(mut slot) = self.queue.pop_front() else { break };
            if let Some(why) = budget_reached(slot.plan.agent_idx) {
                // Not started: it stays pending for a resume with a raised budget.
                self.held.push(slot);
                if self.budget_reached.is_none() {
                    actions.push(Action::Emit(RunEvent::BudgetReached { reason: why.clone() }));
                    self.budget_reached = Some(why);
                }
                continue;
            }
            // A fresh run: not in the cluster's queue (yet), its budget known once its task loads.
            slot.queued = false;
            slot.budget = None;
            self.running.insert(slot.name.clone(), slot.clone());
            actions.push(Action::Spawn(slot));
        }
        let idle = self.running.is_empty() && self.restarting.is_empty();
        let nothing_left = self.queue.is_empty() && self.waiting.is_empty();
        // A paused job stays open with nothing left, for a retry before it is resumed; a
        // cancelled or halted one ends all the same.
        if idle && ((nothing_left && !self.paused) || self.mode != JobMode::Running) {
            self.finishing = true;
            actions.push(Action::Finish);
        }
        actions
    }

    /// The trial's actor could not be started: its error is its result.
    pub fn spawn_failed(&mut self, trial: &TrialName, error: TrialError) -> Vec<Action> {
        match self.running.remove(trial) {
            Some(slot) => vec![Action::GiveUp { slot, error }],
            None => Vec::new(),
        }
    }

    /// The cluster queues the trial (`queued`) or has placed it: the watchdog waits while it is
    /// queued and starts anew at the placement, as the trial's own deadlines do.
    pub fn queued(&mut self, trial: &TrialName, queued: bool) -> Vec<Action> {
        let Some(slot) = self.running.get_mut(trial) else { return Vec::new() };
        slot.watch += 1;
        slot.queued = queued;
        arm(slot).into_iter().collect()
    }

    /// The trial's task loaded: how long its run may take in all.
    pub fn budget(&mut self, trial: &TrialName, budget: Option<Duration>) -> Vec<Action> {
        let Some(slot) = self.running.get_mut(trial) else { return Vec::new() };
        slot.budget = budget;
        arm(slot).into_iter().collect()
    }

    /// The trial finished with `result`. A retryable error (and retries left, and a job still
    /// running) makes it wait out a backoff (`jitter`: a uniform draw in [0, 1)) and run again;
    /// anything else is recorded.
    pub fn finished_trial(
        &mut self,
        trial: &TrialName,
        result: R,
        error: Option<TrialErrorKind>,
        jitter: f64,
    ) -> Vec<Action> {
        let Some(slot) = self.running.remove(trial) else { return Vec::new() };
        let retry = &self.rules.retry;
        let kind = error
            .filter(|kind| !slot.cancelled && self.mode == JobMode::Running && retry.should_retry(*kind, slot.retries));
        let Some(kind) = kind else { return self.record(result) };
        let wait = retry.backoff(slot.retries, jitter);
        self.n_retries += 1;
        let event = RunEvent::TrialWillRetry {
            trial_name: slot.name.clone(),
            retry: slot.retries + 1,
            wait_sec: wait.as_secs_f64(),
            reason: kind.name().to_string(),
        };
        let actions = vec![
            Action::Emit(event),
            Action::RetryLater { trial: slot.name.clone(), attempt: slot.retries, wait },
            Action::WriteJobResult,
        ];
        let next = Slot { retries: slot.retries + 1, ..slot };
        // The slot is free while the trial waits: the backoff is a timer, not a sleeping trial.
        self.waiting.insert(next.name.clone(), (next, result));
        actions
    }

    /// A result that is final: kept, and said.
    pub fn record(&mut self, result: R) -> Vec<Action> {
        let trial = result.trial_name().clone();
        self.finished.push(result);
        vec![Action::Recorded { trial, write: false }]
    }

    /// The trial's container or terminal died under it, or its actor crashed: it restarts in a
    /// fresh container if it may.
    pub fn lost(&mut self, trial: &TrialName, error: TrialError, now: Instant) -> Vec<Action> {
        match self.running.remove(trial) {
            Some(slot) if slot.cancelled => self.clean_up_then(slot, cancelled_error(), AfterCleanup::GiveUp),
            Some(slot) => self.restart_or_give_up(slot, error, now),
            None => Vec::new(),
        }
    }

    /// The engine did not answer while the trial prepared: it waits for the engine (using no
    /// attempt), at most [`MAX_ENGINE_REQUEUES`] times.
    pub fn engine_unavailable(&mut self, trial: &TrialName, reason: String) -> Vec<Action> {
        let Some(slot) = self.running.remove(trial) else { return Vec::new() };
        let error = TrialError::new(TrialErrorKind::EnvironmentStart, reason.clone());
        if slot.cancelled {
            return self.give_up(slot, cancelled_error());
        }
        if self.mode == JobMode::Cancelled || slot.requeues >= MAX_ENGINE_REQUEUES {
            // Nothing will start it again in this job (a cancel does not wait for the engine:
            // the job-end sweep removes its container if it can).
            return self.give_up(slot, error);
        }
        let slot = Slot { requeues: slot.requeues + 1, ..slot };
        let mut actions = self.engine_away(reason);
        actions.extend(self.clean_up_then(slot, error, AfterCleanup::Requeue));
        actions
    }

    /// The trial could not write its record, the disk being full: it goes back to the queue
    /// (not its fault, not finished) and the job halts, resumably.
    pub fn disk_full(&mut self, trial: &TrialName, reason: &str) -> Vec<Action> {
        let Some(slot) = self.running.remove(trial) else { return Vec::new() };
        if slot.cancelled {
            return self.give_up(slot, cancelled_error());
        }
        self.queue.push_front(slot);
        if self.mode != JobMode::Running {
            return Vec::new();
        }
        self.mode = JobMode::Halted;
        let reason =
            format!("the disk is full ({reason}); no new trials start (free some space, then `terminus resume`)");
        vec![Action::Emit(RunEvent::JobHalted { reason })]
    }

    /// The trial's last run's container is gone: it runs again, or its error is its result.
    pub fn cleaned_up(&mut self, trial: &TrialName) -> Vec<Action> {
        let Some(Cleanup { slot, error, then }) = self.restarting.remove(trial) else { return Vec::new() };
        match (then, self.mode) {
            // Nothing will run it again in this job: its error is its result.
            (AfterCleanup::GiveUp, _) | (_, JobMode::Cancelled) | (AfterCleanup::Restart, JobMode::Halted) => {
                self.give_up(slot, error)
            }
            // First in line; dispatch keeps the concurrency limit and waits for the engine (a
            // halted job leaves it pending, for a resume).
            (AfterCleanup::Restart | AfterCleanup::Requeue, _) => {
                self.queue.push_front(slot);
                Vec::new()
            }
        }
    }

    /// The watchdog's timer fired. Only the current arming of a trial the cluster does not
    /// queue counts: then the trial is killed, and requeued (the engine is away: it was most
    /// likely waiting on it) or restarted.
    pub fn overdue(&mut self, trial: &TrialName, budget: Duration, watch: u32, now: Instant) -> Vec<Action> {
        if !self.watching(trial, watch) {
            return Vec::new();
        }
        let Some(slot) = self.running.remove(trial) else { return Vec::new() };
        let secs = budget.as_secs_f64();
        let error = TrialError::new(
            TrialErrorKind::Overdue,
            format!("the trial was still running after {secs:.0} s, all its deadlines plus the watchdog's margin"),
        );
        let mut actions = vec![Action::Kill(slot.name.clone())];
        if slot.cancelled {
            actions.extend(self.clean_up_then(slot, cancelled_error(), AfterCleanup::GiveUp));
        } else if self.engine_down {
            actions.extend(self.clean_up_then(slot, error, AfterCleanup::Requeue));
        } else {
            actions.extend(self.restart_or_give_up(slot, error, now));
        }
        actions
    }

    /// Whether `watch` is the current arming of a running trial the cluster does not queue (its
    /// timer firing means the trial is overdue).
    pub fn watching(&self, trial: &TrialName, watch: u32) -> bool {
        self.running.get(trial).is_some_and(|slot| slot.watch == watch && !slot.queued)
    }

    /// The engine answers again (or the wait for it ran out): dispatch resumes.
    pub fn engine_back(&mut self) {
        self.engine_down = false;
    }

    /// A retried trial's backoff is over: it goes first in line, unless the job will run nothing
    /// more (then its last attempt is its result).
    pub fn retry_due(&mut self, trial: &TrialName) -> Vec<Action> {
        let Some((slot, last)) = self.waiting.remove(trial) else { return Vec::new() };
        if self.mode != JobMode::Running {
            // Nothing will run it again in this job: its last attempt is its result.
            self.finished.push(last);
            return vec![Action::Recorded { trial: slot.name, write: true }];
        }
        self.queue.push_front(slot);
        Vec::new()
    }

    /// Cancels the job: nothing new starts, running trials are asked to cancel, and trials
    /// waiting out a backoff take their last attempt as their result.
    pub fn cancel(&mut self) -> Vec<Action> {
        if self.mode == JobMode::Cancelled {
            return Vec::new();
        }
        self.mode = JobMode::Cancelled;
        self.queue.clear();
        self.held.clear();
        self.n_total = (self.finished.len() + self.running.len() + self.waiting.len() + self.restarting.len()) as u64;
        let mut actions = vec![Action::CancelRunning];
        let waiting: Vec<TrialName> = self.waiting.keys().cloned().collect();
        for name in waiting {
            actions.extend(self.retry_due(&name));
        }
        actions
    }

    /// Whether a live control paused admission.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Whether nothing more starts in this run (cancelled, halted, or ending).
    pub fn closed(&self) -> bool {
        self.mode != JobMode::Running || self.finishing
    }

    /// How many trials may run at once now.
    pub fn limit(&self) -> usize {
        self.rules.n_concurrent
    }

    /// Pauses admission (`pause`) or resumes it: running trials are never touched.
    pub fn set_paused(&mut self, pause: bool) -> Result<Vec<Action>, ControlRefusal> {
        if self.closed() {
            return Err(ControlRefusal::Closed);
        }
        if self.paused == pause {
            return Ok(Vec::new());
        }
        self.paused = pause;
        let change = if pause { ControlChange::Paused } else { ControlChange::Resumed };
        Ok(vec![Action::Emit(RunEvent::Controlled { change })])
    }

    /// A budget was raised: the trials held for it go back to the queue, in their order (those
    /// still over a limit are held again at dispatch).
    pub fn release_held(&mut self) {
        for slot in self.held.drain(..).rev() {
            self.queue.push_front(slot);
        }
        self.budget_reached = None;
    }

    /// Cancels one trial (a live control). Queued or held: it never runs and its result says so.
    /// Waiting to run again: its last attempt is its result. Running: it is asked to stop, and
    /// whatever its run ends with, it is not run again. A finished trial is refused (retry it
    /// instead).
    pub fn cancel_trial(&mut self, trial: &TrialName) -> Result<Vec<Action>, ControlRefusal> {
        let change = Action::Emit(RunEvent::Controlled { change: ControlChange::TrialCancelled(trial.clone()) });
        if let Some(slot) = self.running.get_mut(trial) {
            if slot.cancelled {
                return Ok(Vec::new());
            }
            slot.cancelled = true;
            return Ok(vec![change, Action::CancelTrial(trial.clone())]);
        }
        if let Some(cleanup) = self.restarting.get_mut(trial) {
            cleanup.then = AfterCleanup::GiveUp;
            cleanup.error = cancelled_error();
            cleanup.slot.cancelled = true;
            return Ok(vec![change]);
        }
        if let Some((slot, last)) = self.waiting.remove(trial) {
            // Waiting to run again (a backoff, or a retry asked for): its last attempt is its
            // result, as when the whole job is cancelled.
            self.finished.push(last);
            return Ok(vec![change, Action::Recorded { trial: slot.name, write: true }]);
        }
        let queued = self.queue.iter().position(|s| &s.name == trial).and_then(|i| self.queue.remove(i));
        let held = || self.held.iter().position(|s| &s.name == trial).map(|i| self.held.remove(i));
        if let Some(slot) = queued.or_else(held) {
            let mut actions = vec![change];
            actions.extend(self.give_up(Slot { cancelled: true, ..slot }, cancelled_error()));
            return Ok(actions);
        }
        if self.finished.iter().any(|r| r.trial_name() == trial) {
            return Err(ControlRefusal::AlreadyFinished(trial.clone()));
        }
        Err(ControlRefusal::UnknownTrial(trial.clone()))
    }

    /// Runs a finished trial again (a live control): its last result is set aside, its files
    /// are archived as attempt `retries`, and it goes first in line with one retry more.
    /// `slot` is the trial as planned (the shell finds it from the result's config).
    pub fn retry_trial(&mut self, trial: &TrialName, slot: Option<Slot>) -> Result<Vec<Action>, ControlRefusal> {
        if self.is_live(trial) {
            return Err(ControlRefusal::NotFinished(trial.clone()));
        }
        let Some(index) = self.finished.iter().rposition(|r| r.trial_name() == trial) else {
            return Err(ControlRefusal::UnknownTrial(trial.clone()));
        };
        if self.closed() {
            return Err(ControlRefusal::Closed);
        }
        let Some(slot) = slot else { return Err(ControlRefusal::UnknownTrial(trial.clone())) };
        let last = self.finished.remove(index);
        self.n_retries += 1;
        let attempt = slot.retries;
        let next = Slot { retries: slot.retries + 1, ..slot };
        self.waiting.insert(trial.clone(), (next, last));
        Ok(vec![
            Action::Emit(RunEvent::Controlled { change: ControlChange::TrialRetried(trial.clone()) }),
            Action::RetryLater { trial: trial.clone(), attempt, wait: Duration::ZERO },
            Action::WriteJobResult,
        ])
    }

    /// Whether the trial is anywhere but among the finished (queued, running, waiting, held).
    fn is_live(&self, trial: &TrialName) -> bool {
        self.live_slots().iter().any(|(slot, _)| &slot.name == trial)
    }

    /// Every trial not finished, with where it is.
    pub fn live_slots(&self) -> Vec<(&Slot, TrialState)> {
        let mut slots = Vec::new();
        slots.extend(self.queue.iter().map(|s| (s, TrialState::Queued)));
        slots.extend(
            self.running.values().map(|s| (s, if s.cancelled { TrialState::Cancelling } else { TrialState::Running })),
        );
        slots.extend(self.waiting.values().map(|(s, _)| (s, TrialState::Waiting)));
        slots.extend(self.restarting.values().map(|c| (&c.slot, TrialState::Waiting)));
        slots.extend(self.held.iter().map(|s| (s, TrialState::Held)));
        slots
    }

    /// Restarts a trial in a fresh container (after its container is removed), unless it used its
    /// restarts or the job restarts too often (then it halts: running trials finish, nothing new
    /// starts, and the job can be resumed).
    fn restart_or_give_up(&mut self, slot: Slot, error: TrialError, now: Instant) -> Vec<Action> {
        let supervision = self.rules.supervision;
        let mut actions = Vec::new();
        if slot.restarts < supervision.max_restarts && self.mode == JobMode::Running {
            self.restart_times.push_back(now);
            while self.restart_times.front().is_some_and(|t| now.duration_since(*t) > supervision.intensity_window) {
                self.restart_times.pop_front();
            }
            self.n_restarts += 1;
            if self.restart_times.len() as u32 > supervision.intensity_max_restarts {
                self.mode = JobMode::Halted;
                let reason = format!(
                    "more than {} restarts within {:.0} s; no new trials start (resume the job later with `terminus resume`)",
                    supervision.intensity_max_restarts,
                    supervision.intensity_window.as_secs_f64()
                );
                actions.push(Action::Emit(RunEvent::JobHalted { reason }));
            } else {
                actions.push(Action::Emit(RunEvent::TrialRestarting {
                    trial_name: slot.name.clone(),
                    restart: slot.restarts + 1,
                    reason: error.message.clone(),
                }));
                let restarted = Slot { restarts: slot.restarts + 1, ..slot };
                actions.extend(self.clean_up_then(restarted, error, AfterCleanup::Restart));
                return actions;
            }
        }
        // Its error is its result, recorded once the container is gone (so the job does not end,
        // and sweep, while the removal is still under way).
        actions.extend(self.clean_up_then(slot, error, AfterCleanup::GiveUp));
        actions
    }

    fn clean_up_then(&mut self, slot: Slot, error: TrialError, then: AfterCleanup) -> Vec<Action> {
        let trial = slot.name.clone();
        self.restarting.insert(trial.clone(), Cleanup { slot, error, then });
        vec![Action::CleanUp { trial, after_outage: then == AfterCleanup::Requeue }]
    }

    fn engine_away(&mut self, reason: String) -> Vec<Action> {
        if self.engine_down {
            return Vec::new();
        }
        self.engine_down = true;
        vec![Action::Emit(RunEvent::EngineWaiting { reason }), Action::WaitForEngine]
    }

    fn give_up(&mut self, slot: Slot, error: TrialError) -> Vec<Action> {
        vec![Action::GiveUp { slot, error }]
    }
}

/// The error of a trial a live control cancelled.
fn cancelled_error() -> TrialError {
    TrialError::new(TrialErrorKind::Cancelled, "the trial was cancelled by a live control")
}

/// The watchdog's arming for a slot's current run, once its budget is known and the cluster no
/// longer queues it.
fn arm(slot: &Slot) -> Option<Action> {
    match (slot.budget, slot.queued) {
        (Some(budget), false) => Some(Action::ArmWatchdog { trial: slot.name.clone(), budget, watch: slot.watch }),
        _ => None,
    }
}

/// A result the ledger can file by its trial.
pub trait HasTrialName {
    fn trial_name(&self) -> &TrialName;
}

impl HasTrialName for terminus_core::result::TrialResult {
    fn trial_name(&self) -> &TrialName {
        &self.trial_name
    }
}

#[cfg(test)]
mod tests;
