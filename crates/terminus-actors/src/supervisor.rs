//! The Supervisor actor: runs a job's trials with bounded concurrency and owns the job's
//! bookkeeping.
//!
//! Supervises: every Trial (spawned linked) and one LLM actor per distinct model endpoint.
//! Owns: the queue of trials not started yet, the running set, the trials waiting to be retried,
//! finished results, the job's `result.json`, and the only sender of [`RunEvent`]s, so what
//! reporters show always agrees with what is on disk.
//!
//! ```text
//! pre_start (job dir, config.json, LLM actors) ─► dispatch ─► TrialFinished ─┬─► record ─► dispatch … ─► all done: sweep, JobFinished, stop
//!                                                                            └─► failed & retryable: archive to attempts/N, RetryDue after a backoff (no slot held)
//!                           ActorFailed / TrialLost ─► remove its container by label ─► restart in a fresh container (≤ max_restarts)
//!                           EngineUnavailable ─► dispatch paused until the engine answers ─► its container removed ─► back to the queue (no attempt used)
//!                           TrialOverdue (the watchdog: all its deadlines + margin passed) ─► actor killed ─► restarted like a crash
//!                                                                                      └─► too many restarts in the window: halt (finish running trials, stay resumable)
//! ```
//!
//! The watchdog is the backstop for anything that waits without a deadline: each trial gets a
//! timer once its task has loaded, set to the budget it reports ([`JobSpec::trial_budget`]: its
//! phases' limits + 10 % + a margin; none for an agent without a time limit). The Supervisor
//! never reads a task itself. A trial still running when it fires is killed, its
//! in-flight work aborted with it, and its container removed before anything runs again.
//!
//! [`JobSpec::trial_budget`]: terminus_config::JobSpec::trial_budget
//!
//! One trial's failure never stops its siblings. At every event the counts satisfy
//! finished + errored + cancelled + pending + running = total.
//!
//! What a handler may await: nothing. Docker work (removing a crashed trial's container before
//! its restart, the job-end sweep, pinging an engine that went away) runs in spawned tasks that
//! report back (`CleanedUp`, `Swept`, `EngineBack`); trials and LLM actors are spawned without
//! waiting on their start. Decisions (retry, restart, resume) are taken on typed
//! [`TrialErrorKind`]s, never on message text.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, ActorRuntime, SupervisionEvent};
use terminus_config::job::TrialPlan;
use terminus_config::{AgentKind, AgentSpec, ModelApiFormat};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::{JobSummary, RunEvent};
use terminus_core::ids::TrialName;
use terminus_core::layout::TrialDir;
use terminus_core::result::{JobResult, JobStats, LiveCounts, TrialResult};
use terminus_core::time::{Timestamp, now};
use terminus_llm::limiter::LimitSettings;
use terminus_llm::retry::RetryPolicy;
use terminus_llm::{Provider, ProviderKind, ProviderSettings};
use terminus_sandbox::{LABEL_JOB_ID, LABEL_TRIAL_ID};
use tokio::sync::mpsc::UnboundedSender;

use crate::budget::Budget;
use crate::context::JobContext;
use crate::files;
use crate::llm::{LlmActor, LlmArgs, LlmHandle, LlmMsg};
use crate::protocol::{LlmRetried, TrialReport};
use crate::trial::record::TrialSetup;
use crate::trial::{TrialActor, TrialArgs, TrialMsg};

pub struct SupervisorActor;

/// Where a job starts from: nothing (a new job) or the trials an earlier run finished.
#[derive(Debug, Default)]
pub struct StartingPoint {
    /// Results already on disk; they count as finished and are not run again.
    pub finished: Vec<TrialResult>,
    /// The trials to run, with their names (all planned trials for a new job).
    pub to_run: Vec<(TrialPlan, TrialName)>,
    /// The earlier run's start time, kept in the job result.
    pub started_at: Option<Timestamp>,
    pub n_retries: u64,
    pub n_restarts: u64,
}

pub struct SupervisorArgs {
    pub ctx: Arc<JobContext>,
    pub events: UnboundedSender<RunEvent>,
    pub start: StartingPoint,
}

/// A trial's identity and history while it is queued, running or waiting to be retried.
#[derive(Clone, Debug)]
struct Slot {
    plan: TrialPlan,
    name: TrialName,
    /// Failed attempts so far (each archived under `attempts/N`).
    retries: u32,
    /// Restarts in a fresh container so far.
    restarts: u32,
    /// Runs given back because the engine did not answer (they use no attempt, but are bounded).
    requeues: u32,
    /// Which arming of the watchdog counts (an older one's timer is ignored).
    watch: u32,
    /// The cluster holds the trial in its queue: no watchdog until it is placed.
    queued: bool,
    /// How long this run may take in all (reported by the trial once its task loaded).
    budget: Option<Duration>,
}

/// Runs one trial may lose to engine outages before the last one's error counts: an engine that
/// keeps failing (or a machine so loaded that pings time out) must not run a trial for ever.
const MAX_ENGINE_REQUEUES: u32 = 5;

/// A trial waiting for its last run's container to be removed, and what comes next.
struct Cleanup {
    slot: Slot,
    /// Its error if it cannot run again (the job is cancelled or halted meanwhile).
    error: TrialError,
    then: AfterCleanup,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum AfterCleanup {
    /// A crash: it runs again (a restart is counted), or its error is its result.
    Restart,
    /// The engine was away: it runs again when it answers, no attempt or restart used.
    Requeue,
    /// A crash with no restart left: its error becomes its result.
    GiveUp,
}

pub struct SupervisorState {
    ctx: Arc<JobContext>,
    events: UnboundedSender<RunEvent>,
    queue: VecDeque<Slot>,
    running: HashMap<ActorId, Slot>,
    /// Failed trials waiting out their backoff, with their last result.
    waiting: HashMap<TrialName, (Slot, TrialResult)>,
    /// Trials whose last run's container is being removed before they start again.
    restarting: HashMap<TrialName, Cleanup>,
    finished: Vec<TrialResult>,
    /// The LLM actor of each agent index (None for agents that call no model). Agents that use
    /// the same (protocol, model, endpoint) share one actor, so they share its limits.
    llm: Vec<Option<ActorRef<LlmMsg>>>,
    n_total: u64,
    n_retries: u64,
    n_restarts: u64,
    /// Model calls retried (shown live, not stored).
    n_model_retries: u64,
    /// Recent restarts, for the intensity limit.
    restart_times: VecDeque<Instant>,
    started_at: Timestamp,
    started: Instant,
    cancelled: bool,
    halted: bool,
    finishing: bool,
    /// The engine stopped answering: nothing is dispatched until it does again.
    engine_down: bool,
    /// The job's budget (a job or agent with `budget:`), shared by every trial's model handle.
    budget: Option<Arc<Budget>>,
    /// Trials not started because their agent's budget (or the job's) is spent; they stay
    /// pending, for a resume with a raised budget.
    held: Vec<Slot>,
    /// The budget's reason, once said.
    budget_reached: Option<String>,
}

/// Inbox of [`SupervisorActor`].
pub enum SupervisorMsg {
    /// Starts as many queued trials as the concurrency limit allows.
    Dispatch,
    /// A trial's progress or last word.
    Trial(TrialReport),
    /// A model call is being retried (from an LLM actor).
    LlmRetried(LlmRetried),
    /// A trial's old container is gone: the trial can start again.
    CleanedUp { trial_name: TrialName },
    /// The watchdog's budget of a trial that just started (None: no watchdog for it), for its
    /// `watch`-th arming.
    /// A trial's budget ran out: if it still runs, it is stuck.
    TrialOverdue { trial: ActorId, budget: Duration, watch: u32 },
    /// The engine answers again after an outage (or the wait for it gave up).
    EngineBack { answered: bool },
    /// A failed trial's backoff is over.
    RetryDue { trial_name: TrialName },
    /// The job-end sweep of the job's containers is done.
    Swept,
    /// Stop dispatching and cancel running trials (first Ctrl-C).
    Cancel,
}

impl From<TrialReport> for SupervisorMsg {
    fn from(report: TrialReport) -> SupervisorMsg {
        SupervisorMsg::Trial(report)
    }
}

impl TryFrom<SupervisorMsg> for TrialReport {
    type Error = SupervisorMsg;

    fn try_from(msg: SupervisorMsg) -> Result<TrialReport, SupervisorMsg> {
        match msg {
            SupervisorMsg::Trial(report) => Ok(report),
            other => Err(other),
        }
    }
}

impl From<LlmRetried> for SupervisorMsg {
    fn from(retried: LlmRetried) -> SupervisorMsg {
        SupervisorMsg::LlmRetried(retried)
    }
}

impl TryFrom<SupervisorMsg> for LlmRetried {
    type Error = SupervisorMsg;

    fn try_from(msg: SupervisorMsg) -> Result<LlmRetried, SupervisorMsg> {
        match msg {
            SupervisorMsg::LlmRetried(retried) => Ok(retried),
            other => Err(other),
        }
    }
}

impl SupervisorState {
    fn emit(&self, event: RunEvent) {
        let _ = self.events.send(event);
    }

    fn live(&self) -> LiveCounts {
        LiveCounts {
            n_total: self.n_total,
            n_running: self.running.len() as u64,
            n_pending: (self.queue.len() + self.waiting.len() + self.restarting.len() + self.held.len()) as u64,
            n_retries: self.n_retries,
            n_restarts: self.n_restarts,
        }
    }

    fn stats(&self) -> JobStats {
        let metrics: Vec<&str> = self.ctx.spec.metrics.iter().map(|m| m.name()).collect();
        let stats = JobStats::compute(&self.finished, self.live(), &metrics);
        if !stats.is_consistent(self.n_total) {
            // Never expected; said loudly, because every count on screen and on disk derives from it.
            tracing::error!(n_total = self.n_total, ?stats, "trial accounting is inconsistent");
        }
        stats
    }

    fn write_job_result(&self, finished: bool) {
        let result = JobResult {
            id: self.ctx.job_id.to_string(),
            started_at: self.started_at,
            updated_at: Some(now()),
            finished_at: finished.then(now),
            n_total_trials: self.n_total,
            stats: self.stats(),
            budget: self.budget_status(),
        };
        if let Err(e) = files::write_json(&self.ctx.dir().result_json(), &result) {
            tracing::error!(error = %e, "could not write the job result");
        }
    }

    fn budget_status(&self) -> Option<terminus_core::result::BudgetStatus> {
        self.budget.as_ref().map(|budget| budget.status(self.held.len() as u64))
    }

    /// Every figure reporters show, from the same statistics as the job's result file.
    fn summary(&self) -> Box<JobSummary> {
        let job_dir = self.ctx.job_dir.display().to_string();
        Box::new(JobSummary {
            wall_seconds: self.started.elapsed().as_secs_f64(),
            n_model_retries: self.n_model_retries,
            cancelled: self.cancelled,
            halted: self.halted,
            budget: self.budget_status(),
            ..JobSummary::from_stats(&job_dir, self.n_total, &self.stats(), &self.finished)
        })
    }
}

impl Actor for SupervisorActor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let ctx = args.ctx;
        std::fs::create_dir_all(&ctx.job_dir)?;
        files::write_json(&ctx.dir().config_json(), &ctx.spec.raw)?;
        let mut llm: Vec<Option<ActorRef<LlmMsg>>> = Vec::new();
        let mut by_identity: HashMap<(ProviderKind, String, String), ActorRef<LlmMsg>> = HashMap::new();
        for idx in 0..ctx.spec.agents.len() {
            let Some(settings) = provider_settings(&ctx, idx) else {
                llm.push(None);
                continue;
            };
            let actor = match by_identity.get(&settings.identity()) {
                Some(actor) => actor.clone(),
                None => {
                    let actor = spawn_llm(&myself, &ctx, idx)?;
                    by_identity.insert(settings.identity(), actor.clone());
                    actor
                }
            };
            llm.push(Some(actor));
        }
        let budget = if ctx.spec.budget.is_set() || ctx.spec.agents.iter().any(|a| a.budget.is_set()) {
            let agents = ctx.spec.agents.iter().map(|a| a.budget).collect();
            Some(Arc::new(Budget::open(&ctx.dir().spend_journal(), ctx.spec.budget, agents)?))
        } else {
            None
        };
        let start = args.start;
        let queue: VecDeque<Slot> = start
            .to_run
            .into_iter()
            .map(|(plan, name)| Slot {
                plan,
                name,
                retries: 0,
                restarts: 0,
                requeues: 0,
                watch: 0,
                queued: false,
                budget: None,
            })
            .collect();
        let n_already_done = start.finished.len() as u64;
        let state = SupervisorState {
            n_total: queue.len() as u64 + n_already_done,
            ctx,
            events: args.events,
            queue,
            running: HashMap::new(),
            waiting: HashMap::new(),
            restarting: HashMap::new(),
            finished: start.finished,
            llm,
            n_retries: start.n_retries,
            n_restarts: start.n_restarts,
            n_model_retries: 0,
            restart_times: VecDeque::new(),
            started_at: start.started_at.unwrap_or_else(now),
            started: Instant::now(),
            cancelled: false,
            halted: false,
            finishing: false,
            engine_down: false,
            budget,
            held: Vec::new(),
            budget_reached: None,
        };
        state.write_job_result(false);
        state.emit(RunEvent::JobStarted {
            job_name: state.ctx.spec.job_name.clone(),
            job_dir: state.ctx.job_dir.display().to_string(),
            n_total: state.n_total,
            n_already_done,
            summary: state.summary(),
        });
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        _state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let _ = myself.send_message(SupervisorMsg::Dispatch);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Dispatch => dispatch(&myself, state),
            SupervisorMsg::Trial(TrialReport::Progress { trial_name, phase, episode, usage }) => {
                state.emit(RunEvent::TrialProgress { trial_name, phase, episode, usage })
            }
            SupervisorMsg::LlmRetried(LlmRetried { trial_name, attempt, wait, reason }) => {
                state.n_model_retries += 1;
                if let Some(trial_name) = trial_name {
                    let reason = reason.harbor_name().to_string();
                    state.emit(RunEvent::TrialRetrying { trial_name, attempt, wait_sec: wait.as_secs_f64(), reason });
                }
            }
            SupervisorMsg::Trial(TrialReport::Queued { trial_name, reason }) => {
                let Some((&trial, slot)) = state.running.iter_mut().find(|(_, slot)| slot.name == trial_name) else {
                    return Ok(());
                };
                // Queued: the watchdog waits; placed: it starts anew, as the trial's deadlines do.
                slot.watch += 1;
                slot.queued = reason.is_some();
                if reason.is_none() {
                    arm_watchdog(&myself, trial, slot);
                }
                state.emit(RunEvent::TrialQueued { trial_name, reason });
            }
            SupervisorMsg::Trial(TrialReport::Budget { trial_name, budget }) => {
                let Some((&trial, slot)) = state.running.iter_mut().find(|(_, slot)| slot.name == trial_name) else {
                    return Ok(());
                };
                slot.budget = budget;
                arm_watchdog(&myself, trial, slot);
            }
            SupervisorMsg::Trial(TrialReport::Finished { result, error, written }) => {
                let Some(slot) = take_running(state, &result.trial_name) else { return Ok(()) };
                if !written {
                    // The trial could not write it; one more try, and the job's result counts it either way.
                    write_trial_result(state, &result);
                }
                on_trial_finished(&myself, state, slot, *result, error);
                dispatch(&myself, state);
            }
            SupervisorMsg::Trial(TrialReport::Lost { trial_name, reason }) => {
                let Some(slot) = take_running(state, &trial_name) else { return Ok(()) };
                tracing::warn!(trial = %trial_name, %reason, "the trial lost its environment");
                restart_or_give_up(&myself, state, slot, TrialError::new(TrialErrorKind::EnvironmentLost, reason));
                dispatch(&myself, state);
            }
            SupervisorMsg::Trial(TrialReport::EngineUnavailable { trial_name, reason }) => {
                let Some(slot) = take_running(state, &trial_name) else { return Ok(()) };
                let error = TrialError::new(TrialErrorKind::EnvironmentStart, reason.clone());
                if state.cancelled || slot.requeues >= MAX_ENGINE_REQUEUES {
                    // Nothing will start it again in this job (a cancel does not wait for the
                    // engine: the job-end sweep removes its container if it can).
                    give_up(state, slot, error);
                } else {
                    let slot = Slot { requeues: slot.requeues + 1, ..slot };
                    tracing::warn!(trial = %trial_name, %reason, "the Docker engine does not answer; the trial waits for it");
                    engine_away(&myself, state, reason);
                    clean_up_then(&myself, state, slot, error, AfterCleanup::Requeue);
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::Trial(TrialReport::DiskFull { trial_name, reason }) => {
                let Some(slot) = take_running(state, &trial_name) else { return Ok(()) };
                // Not its fault, and not finished: it waits for a resume, like the queue.
                state.queue.push_front(slot);
                if !state.halted {
                    state.halted = true;
                    let why = format!(
                        "the disk is full ({reason}); no new trials start (free some space, then `terminus resume`)"
                    );
                    tracing::error!("{why}");
                    state.emit(RunEvent::JobHalted { reason: why });
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::CleanedUp { trial_name } => {
                if let Some(Cleanup { slot, error, then }) = state.restarting.remove(&trial_name) {
                    match then {
                        // Nothing will run it again in this job: its error is its result.
                        AfterCleanup::GiveUp => give_up(state, slot, error),
                        _ if state.cancelled => give_up(state, slot, error),
                        AfterCleanup::Restart if state.halted => give_up(state, slot, error),
                        // First in line; dispatch keeps the concurrency limit and waits for the
                        // engine (a halted job leaves it pending, for a resume).
                        AfterCleanup::Restart | AfterCleanup::Requeue => state.queue.push_front(slot),
                    }
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::TrialOverdue { trial, budget, watch } => {
                // An older arming's timer, or a trial the cluster still queues: not overdue.
                if !state.running.get(&trial).is_some_and(|slot| slot.watch == watch && !slot.queued) {
                    return Ok(());
                }
                let Some(slot) = state.running.remove(&trial) else { return Ok(()) };
                // Killed, not stopped: a stuck trial would not get to a stop. Its state goes with
                // it, which aborts its in-flight work (see `LiveEffects`' drop).
                if let Some(cell) = myself.get_children().into_iter().find(|c| c.get_id() == trial) {
                    cell.kill();
                }
                let secs = budget.as_secs_f64();
                tracing::error!(trial = %slot.name, "the trial outlived its deadlines ({secs:.0} s with the margin); the watchdog ended it");
                let error = TrialError::new(
                    TrialErrorKind::Overdue,
                    format!(
                        "the trial was still running after {secs:.0} s, all its deadlines plus the watchdog's margin"
                    ),
                );
                if state.engine_down {
                    // It was most likely waiting on the engine: like any trial the engine failed.
                    clean_up_then(&myself, state, slot, error, AfterCleanup::Requeue);
                } else {
                    restart_or_give_up(&myself, state, slot, error);
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::EngineBack { answered } => {
                state.engine_down = false;
                if answered {
                    tracing::info!("the Docker engine answers again; dispatching");
                } else {
                    tracing::error!(
                        "the Docker engine did not come back in {:?}; trials go on and may fail",
                        ENGINE_WAIT
                    );
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::RetryDue { trial_name } => {
                if let Some((slot, last)) = state.waiting.remove(&trial_name) {
                    if state.cancelled || state.halted {
                        // Nothing will run it again in this job: its last attempt is its result.
                        write_trial_result(state, &last);
                        record_finished(state, last);
                    } else {
                        state.queue.push_front(slot);
                    }
                }
                dispatch(&myself, state);
            }
            SupervisorMsg::Swept => {
                let complete = !state.cancelled
                    && !state.halted
                    && state.held.is_empty()
                    && state.queue.is_empty()
                    && state.waiting.is_empty()
                    && state.restarting.is_empty();
                state.write_job_result(complete);
                state.emit(RunEvent::JobFinished { summary: *state.summary() });
                for llm in state.llm.iter().flatten() {
                    llm.stop(None);
                }
                myself.stop(None);
            }
            SupervisorMsg::Cancel => {
                if !state.cancelled {
                    state.cancelled = true;
                    state.queue.clear();
                    state.held.clear();
                    state.n_total =
                        (state.finished.len() + state.running.len() + state.waiting.len() + state.restarting.len())
                            as u64;
                    for cell in myself.get_children() {
                        if state.running.contains_key(&cell.get_id()) {
                            let _ = cell.send_message(TrialMsg::Cancel);
                        }
                    }
                    let waiting: Vec<TrialName> = state.waiting.keys().cloned().collect();
                    for name in waiting {
                        let _ = myself.send_message(SupervisorMsg::RetryDue { trial_name: name });
                    }
                    dispatch(&myself, state);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        // Overridden because the default stops the supervisor when any child exits.
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            let id = cell.get_id();
            if let Some(slot) = state.running.remove(&id) {
                tracing::error!(trial = %slot.name, %error, "trial actor crashed");
                let error = TrialError::new(TrialErrorKind::Internal, format!("the trial actor crashed: {error}"));
                restart_or_give_up(&myself, state, slot, error);
                dispatch(&myself, state);
            } else if let Some(idx) = state.llm.iter().position(|l| l.as_ref().is_some_and(|l| l.get_id() == id)) {
                tracing::error!(%error, "LLM actor crashed; restarting it");
                let actor = spawn_llm(&myself, &state.ctx, idx)?;
                for slot in state.llm.iter_mut() {
                    if slot.as_ref().is_some_and(|l| l.get_id() == id) {
                        *slot = Some(actor.clone());
                    }
                }
            }
        }
        Ok(())
    }
}

/// How long dispatch waits for an engine that stopped answering before trying anyway.
const ENGINE_WAIT: Duration = Duration::from_secs(300);

/// Pings the engine once a second until it answers (or [`ENGINE_WAIT`] passes), then sends
/// `EngineBack`. The Supervisor keeps handling messages meanwhile.
fn wait_for_engine(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState) {
    let engine = state.ctx.backend.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        let answered = engine_answers_within(&engine, ENGINE_WAIT).await;
        let _ = myself.send_message(SupervisorMsg::EngineBack { answered });
    });
}

/// Pings once a second until the engine answers (true) or `limit` passes (false).
async fn engine_answers_within(engine: &terminus_sandbox::Backend, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if engine.ping().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn take_running(state: &mut SupervisorState, name: &TrialName) -> Option<Slot> {
    let id = state.running.iter().find(|(_, slot)| slot.name == *name).map(|(id, _)| *id)?;
    state.running.remove(&id)
}

/// A finished trial: recorded, or archived and scheduled again when its error is retryable.
fn on_trial_finished(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    slot: Slot,
    result: TrialResult,
    error: Option<TrialErrorKind>,
) {
    let retry = &state.ctx.spec.retry;
    let retryable =
        !state.cancelled && !state.halted && error.is_some_and(|kind| retry.should_retry(kind, slot.retries));
    let (true, Some(kind)) = (retryable, error) else {
        record_finished(state, result);
        return;
    };
    let reason = kind.harbor_name().to_string();
    let trial_dir = state.ctx.dir().trial(&slot.name);
    if let Err(e) = archive_attempt(&trial_dir, slot.retries) {
        tracing::warn!(trial = %slot.name, error = %e, "could not archive the failed attempt");
    }
    let wait = retry.backoff(slot.retries, rand::random::<f64>());
    tracing::info!(trial = %slot.name, retry = slot.retries + 1, wait_sec = wait.as_secs_f64(), %reason, "retrying the trial");
    state.emit(RunEvent::TrialWillRetry {
        trial_name: slot.name.clone(),
        retry: slot.retries + 1,
        wait_sec: wait.as_secs_f64(),
        reason,
    });
    state.n_retries += 1;
    let name = slot.name.clone();
    let next = Slot { retries: slot.retries + 1, ..slot };
    state.waiting.insert(name.clone(), (next, result));
    // The slot is free while the trial waits: the backoff is a timer, not a sleeping trial.
    myself.send_after(wait, move || SupervisorMsg::RetryDue { trial_name: name });
    state.write_job_result(false);
}

/// Moves everything of a failed attempt except earlier attempts into `attempts/<n>/`.
fn archive_attempt(trial_dir: &TrialDir, n: u32) -> std::io::Result<()> {
    let target = trial_dir.attempt(n);
    let target = target.path();
    std::fs::create_dir_all(target)?;
    for entry in std::fs::read_dir(trial_dir.path())? {
        let entry = entry?;
        if entry.file_name() == terminus_core::layout::names::ATTEMPTS_DIR {
            continue;
        }
        std::fs::rename(entry.path(), target.join(entry.file_name()))?;
    }
    Ok(())
}

/// Restarts a trial in a fresh container, unless it used its restarts or the job is restarting
/// too often (then it halts: running trials finish, nothing new starts, and the job can be resumed).
/// Its container cannot be trusted (or was left by a panic): it is removed first
/// ([`clean_up_then`]).
fn restart_or_give_up(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, slot: Slot, error: TrialError) {
    let supervision = state.ctx.spec.supervision;
    if slot.restarts < supervision.max_restarts && !state.cancelled && !state.halted {
        let now_instant = Instant::now();
        state.restart_times.push_back(now_instant);
        while state.restart_times.front().is_some_and(|t| now_instant.duration_since(*t) > supervision.intensity_window)
        {
            state.restart_times.pop_front();
        }
        state.n_restarts += 1;
        if state.restart_times.len() as u32 > supervision.intensity_max_restarts {
            state.halted = true;
            let why = format!(
                "more than {} restarts within {:.0} s; no new trials start (resume the job later with `terminus resume`)",
                supervision.intensity_max_restarts,
                supervision.intensity_window.as_secs_f64()
            );
            tracing::error!("{why}");
            state.emit(RunEvent::JobHalted { reason: why });
        } else {
            tracing::warn!(trial = %slot.name, restart = slot.restarts + 1, "restarting the trial in a fresh container");
            state.emit(RunEvent::TrialRestarting {
                trial_name: slot.name.clone(),
                restart: slot.restarts + 1,
                reason: error.message.clone(),
            });
            let restarted = Slot { restarts: slot.restarts + 1, ..slot };
            clean_up_then(myself, state, restarted, error, AfterCleanup::Restart);
            return;
        }
    }
    // Its error is its result, written once the container is gone (so the job does not end,
    // and sweep, while the removal is still under way).
    clean_up_then(myself, state, slot, error, AfterCleanup::GiveUp);
}

/// Removes what a trial's last run left on the engine (by label), in a task, then sends
/// `CleanedUp`: the trial runs again only after, or the removal could take the new container,
/// which carries the same label. After an outage the removal waits for the engine first.
fn clean_up_then(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    slot: Slot,
    error: TrialError,
    then: AfterCleanup,
) {
    let name = slot.name.clone();
    state.restarting.insert(name.clone(), Cleanup { slot, error, then });
    let (engine, myself) = (state.ctx.backend.clone(), myself.clone());
    tokio::spawn(async move {
        if then == AfterCleanup::Requeue {
            engine_answers_within(&engine, ENGINE_WAIT).await;
        }
        let _ = engine.remove_with_label(LABEL_TRIAL_ID, Some(name.as_str())).await;
        let _ = myself.send_message(SupervisorMsg::CleanedUp { trial_name: name });
    });
}

/// The engine stopped answering: dispatch pauses (once) until it does again.
fn engine_away(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, reason: String) {
    if !state.engine_down {
        state.engine_down = true;
        state.emit(RunEvent::EngineWaiting { reason });
        wait_for_engine(myself, state);
    }
}

/// Records a crashed trial's error as its result.
fn give_up(state: &mut SupervisorState, slot: Slot, error: TrialError) {
    let result = crashed_result(state, &slot, error);
    write_trial_result(state, &result);
    record_finished(state, result);
}

fn write_trial_result(state: &SupervisorState, result: &TrialResult) {
    let path = state.ctx.dir().trial(&result.trial_name).result_json();
    if let Err(e) = files::write_json(&path, result) {
        tracing::error!(error = %e, "could not write a trial result");
    }
}

/// How agent `idx` reaches its model (None for agents that call no model).
pub fn provider_settings(ctx: &JobContext, idx: usize) -> Option<ProviderSettings> {
    agent_provider_settings(&ctx.spec.agents[idx])
}

/// How `agent` reaches its model (None for agents that call no model).
pub fn agent_provider_settings(agent: &AgentSpec) -> Option<ProviderSettings> {
    let AgentKind::Terminus2(opts) = &agent.kind else { return None };
    let model_name = agent.model_name.as_deref().unwrap_or_default();
    Some(ProviderSettings {
        api_base: opts.api_base.clone(),
        api_key_env: opts.api_key_env.clone(),
        reasoning_effort: opts.reasoning_effort.clone(),
        max_thinking_tokens: opts.max_thinking_tokens,
        collect_rollout_details: opts.collect_rollout_details,
        request_timeout: agent.llm.request_timeout,
        model_info: opts.model_info(model_name),
        protocol: opts.api_format.map(|format| match format {
            ModelApiFormat::OpenAiChatCompletions => ProviderKind::OpenAiCompatible,
            ModelApiFormat::AnthropicMessages => ProviderKind::Anthropic,
        }),
        ..ProviderSettings::new(model_name)
    })
}

/// Spawns the LLM actor for agent `idx`'s endpoint, with that agent's limits and retry policy
/// (its start is instant: nothing to wait for).
fn spawn_llm(
    myself: &ActorRef<SupervisorMsg>,
    ctx: &JobContext,
    idx: usize,
) -> Result<ActorRef<LlmMsg>, ActorProcessingErr> {
    let settings = provider_settings(ctx, idx).ok_or("this agent calls no model")?;
    let llm = ctx.spec.agents[idx].llm;
    let args = LlmArgs {
        provider: Provider::new(settings)?,
        limits: LimitSettings {
            max_concurrent: llm.max_concurrent_requests,
            adaptive: llm.adaptive_concurrency,
            requests_per_minute: llm.requests_per_minute,
            tokens_per_minute: llm.tokens_per_minute,
        },
        retry: RetryPolicy { max_attempts: llm.max_attempts, base_delay: llm.base_delay, max_delay: llm.max_delay },
        retries_to: Some(myself.get_derived()),
    };
    Ok(ActorRuntime::spawn_linked_instant(None, LlmActor, args, myself.get_cell())?.0)
}

fn record_finished(state: &mut SupervisorState, result: TrialResult) {
    let (trial_name, task_name, reward) = (result.trial_name.clone(), result.task_name.clone(), result.reward());
    let error = result.exception_info.as_ref().map(|e| format!("{}: {}", e.exception_type, e.exception_message));
    state.finished.push(result);
    state.write_job_result(false);
    state.emit(RunEvent::TrialFinished { trial_name, task_name, reward, error, summary: state.summary() });
}

fn dispatch(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState) {
    while !state.cancelled
        && !state.halted
        && !state.engine_down
        && state.running.len() < state.ctx.spec.n_concurrent_trials
    {
        let Some(slot) = state.queue.pop_front() else { break };
        if let Some(why) = state.budget.as_ref().and_then(|b| b.reached(slot.plan.agent_idx)) {
            // Not started: it stays pending for a resume with a raised budget.
            hold_for_budget(state, slot, why);
            continue;
        }
        spawn_trial(myself, state, slot);
    }
    let idle = state.running.is_empty() && state.restarting.is_empty();
    let nothing_left = state.queue.is_empty() && state.waiting.is_empty();
    if idle && (nothing_left || state.halted) && !state.finishing {
        state.finishing = true;
        finish_job(myself, state);
    }
}

fn hold_for_budget(state: &mut SupervisorState, slot: Slot, why: String) {
    state.held.push(slot);
    if state.budget_reached.is_none() {
        tracing::warn!("{why}: no new trial of it starts (`terminus resume` with a raised budget runs them)");
        state.emit(RunEvent::BudgetReached { reason: why.clone() });
        state.budget_reached = Some(why);
    }
}

/// Spawns a trial; its start (building its state) is in-memory work, so nothing is awaited.
fn spawn_trial(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, mut slot: Slot) {
    // A fresh run: not in the cluster's queue (yet), its budget known once its task loads.
    slot.queued = false;
    slot.budget = None;
    let args = TrialArgs {
        ctx: state.ctx.clone(),
        plan: slot.plan.clone(),
        trial_name: slot.name.clone(),
        llm: state.llm[slot.plan.agent_idx].clone().map(|actor| {
            let handle = LlmHandle::new(actor, state.ctx.spec.agents[slot.plan.agent_idx].llm.call_timeout);
            match &state.budget {
                Some(budget) => handle.metered(budget.clone(), slot.plan.agent_idx),
                None => handle,
            }
        }),
        supervisor: myself.get_derived(),
        retries: slot.retries,
        restarts: slot.restarts,
    };
    state.emit(RunEvent::TrialStarted { trial_name: slot.name.clone(), task_name: slot.plan.task.name.clone() });
    match ActorRuntime::spawn_linked_instant(None, TrialActor, args, myself.get_cell()) {
        Ok((trial, _)) => {
            state.running.insert(trial.get_id(), slot);
        }
        Err(e) => {
            let error = TrialError::new(TrialErrorKind::Internal, format!("the trial could not start: {e}"));
            give_up(state, slot, error);
        }
    }
}

/// Starts the watchdog's timer for `slot`'s current run, once its budget is known and the
/// cluster no longer queues it; `TrialOverdue` of an older arming is ignored (`watch`).
fn arm_watchdog(myself: &ActorRef<SupervisorMsg>, trial: ActorId, slot: &Slot) {
    if let (Some(budget), false) = (slot.budget, slot.queued) {
        let watch = slot.watch;
        myself.send_after(budget, move || SupervisorMsg::TrialOverdue { trial, budget, watch });
    }
}

/// The result of a trial that crashed (or could not start) and will not run again.
fn crashed_result(state: &SupervisorState, slot: &Slot, error: TrialError) -> TrialResult {
    let dir = state.ctx.dir().trial(&slot.name);
    let setup = TrialSetup::new(state.ctx.spec.clone(), state.ctx.job_id, slot.plan.clone(), slot.name.clone(), dir);
    let mut record = setup.new_record();
    record.result.finished_at = Some(now());
    record.result.retries = slot.retries;
    record.result.restarts = slot.restarts;
    record.record_error(error);
    record.to_result()
}

/// Backstop: no container of this job survives it, whatever a trial did. The sweep runs in a
/// task; `Swept` writes the final result and stops the job.
fn finish_job(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState) {
    let (engine, job_id, myself) = (state.ctx.backend.clone(), state.ctx.job_id.to_string(), myself.clone());
    let network = state.ctx.network.clone();
    tokio::spawn(async move {
        match engine.sweep_job(LABEL_JOB_ID, &job_id).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(n, "removed containers the trials left behind"),
            Err(e) => tracing::warn!(error = %e, "could not sweep the job's containers"),
        }
        // Its containers are gone, so the trials' own networks (compose, egress) and the job's,
        // all labelled with its id, can go too (`gc` catches a leftover).
        let swept = engine.remove_networks_with_label(LABEL_JOB_ID, &job_id).await;
        if let Err(e) = &swept {
            tracing::warn!(error = %e, "could not sweep the job's networks");
        }
        if let Some(network) = network
            && swept.is_err()
            && let Err(e) = engine.engine().remove_network(&network).await
        {
            tracing::warn!(error = %e, "could not remove the job's network");
        }
        let _ = myself.send_message(SupervisorMsg::Swept);
    });
}
