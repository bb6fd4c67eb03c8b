//! The Supervisor actor: runs a job's trials with bounded concurrency and owns the job's
//! bookkeeping, as a pure ledger (`supervisor/ledger.rs`: events in, [`Action`]s out, every
//! decision unit tested) inside this shell, which performs the actions.
//!
//! Supervises: every Trial (spawned linked) and one LLM actor per distinct model endpoint.
//! Owns: through the ledger, the queue of trials not started yet, the running set, the trials
//! waiting to be retried, finished results; the job's `result.json`, and the only sender of
//! [`RunEvent`]s, so what reporters show always agrees with what is on disk.
//!
//! ```text
//! pre_start (job dir, config.json, LLM actors) ─► dispatch ─► Trial(Finished)┬─► record ─► dispatch … ─► all done: sweep, JobFinished, stop
//!                                                                            └─► failed & retryable: archive to attempts/N, RetryDue after a backoff (no slot held)
//!                           ActorFailed / Trial(Lost) ─► remove its container by label ─► restart in a fresh container (≤ max_restarts)
//!                           EngineUnavailable ─► dispatch paused until the engine answers ─► its container removed ─► back to the queue (no attempt used)
//!                           TrialOverdue (the watchdog: all its deadlines + margin passed) ─► actor killed ─► restarted like a crash
//!                                                                                      └─► too many restarts in the window: halt (finish running trials, stay resumable)
//! ```
//!
//! The watchdog is the backstop for anything that waits without a deadline: each trial gets a
//! timer once its task has loaded, set to the budget it reports ([`TrialLimits::watchdog`]: its
//! phases' limits + 10 % + a margin; none for an agent without a time limit). The Supervisor
//! never reads a task itself. A trial still running when it fires is killed, its
//! in-flight work aborted with it, and its container removed before anything runs again.
//!
//! [`TrialLimits::watchdog`]: terminus_config::trial::TrialLimits::watchdog
//!
//! One trial's failure never stops its siblings. At every event the counts satisfy
//! finished + errored + cancelled + pending + running = total.
//!
//! What a handler may await: nothing. Docker work (removing a crashed trial's container before
//! its restart, the job-end sweep, pinging an engine that went away) and archiving a failed
//! attempt run in spawned tasks that report back (`CleanedUp`, `Swept`, `EngineBack`,
//! `RetryDue`); trials and LLM actors are spawned without
//! waiting on their start. Decisions (retry, restart, resume) are taken on typed
//! [`TrialErrorKind`]s, never on message text.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, ActorRuntime, RpcReplyPort, SupervisionEvent};
use terminus_core::control::{ControlReply, JobControl};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::RunEvent;
use terminus_core::ids::TrialName;
use terminus_core::layout::TrialDir;
use terminus_core::result::TrialResult;
use terminus_core::stats::{BudgetStatus, JobResult, JobStats, JobSummary};
use terminus_core::time::{Timestamp, now};
use terminus_llm::{Provider, ProviderKind};
use terminus_sandbox::{LABEL_JOB_ID, LABEL_TRIAL_ID};
use tokio::sync::mpsc::UnboundedSender;

use crate::budget::Budget;
use crate::context::JobContext;
use crate::files;
use crate::llm::{LlmActor, LlmArgs, LlmHandle, LlmMsg, provider_settings};
use crate::protocol::{LlmRetried, TrialReport, inbox_variant};
use crate::resume::StartingPoint;
use crate::trial::record::TrialSetup;
use crate::trial::{TrialActor, TrialArgs, TrialMsg};

mod admission;
mod control;
mod ledger;
mod shared;

use admission::{Admission, HostSample, Verdict};
use ledger::{Action, JobMode, Ledger, Rules, Slot};

pub struct SupervisorActor;

pub struct SupervisorArgs {
    pub ctx: Arc<JobContext>,
    pub events: UnboundedSender<RunEvent>,
    pub start: StartingPoint,
}

pub struct SupervisorState {
    ctx: Arc<JobContext>,
    events: UnboundedSender<RunEvent>,
    /// Every decision: queue, running slots, retries, restarts, outages, budget, results.
    ledger: Ledger<TrialResult>,
    /// The actor of each running trial.
    actors: HashMap<TrialName, ActorId>,
    /// The LLM actor of each agent index (None for agents that call no model). Agents that use
    /// the same (protocol, model, endpoint) share one actor, so they share its limits.
    llm: Vec<Option<ActorRef<LlmMsg>>>,
    /// Model calls retried (shown live, not stored).
    n_model_retries: u64,
    started_at: Timestamp,
    started: Instant,
    /// The job's budget (a job or agent with `budget:`), shared by every trial's model handle.
    budget: Option<Arc<Budget>>,
    /// The adaptive limit (`admission: adaptive`); None: `n_concurrent_trials` exactly.
    admission: Option<Admission>,
    /// A look again is due for trials the shared limit held back.
    recheck_armed: bool,
    /// When the host was last judged saturated, and why (for the warnings of trials that ran
    /// out of time then).
    saturated: VecDeque<(Timestamp, String)>,
    /// The saturation warning of a fixed concurrency was given.
    saturation_said: bool,
    /// Saturated ticks in a row (a fixed concurrency is warned about only when it lasts).
    saturated_run: u32,
}

/// Saturated ticks in a row before a fixed concurrency is said to be too much for the host (a
/// burst of container starts alone does not make it so).
const SATURATED_TICKS_TO_WARN: u32 = 3;

/// How many saturated ticks are remembered (an hour of them).
const SATURATED_KEPT: usize = 1800;

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
    /// A trial's budget ran out (for its `watch`-th arming): if it still runs, it is stuck.
    TrialOverdue { trial_name: TrialName, budget: Duration, watch: u32 },
    /// The engine answers again after an outage (or the wait for it gave up).
    EngineBack { answered: bool },
    /// A failed trial's backoff is over.
    RetryDue { trial_name: TrialName },
    /// The job-end sweep of the job's containers is done.
    Swept,
    /// Stop dispatching and cancel running trials (first Ctrl-C).
    Cancel,
    /// A live control (the job's control socket, the viewer): applied, then answered with the
    /// job's status, or refused.
    Control(JobControl, RpcReplyPort<ControlReply>),
    /// The host's health over the last tick (from the sampling task).
    Host(HostSample),
}

inbox_variant!(SupervisorMsg::Trial(TrialReport));
inbox_variant!(SupervisorMsg::LlmRetried(LlmRetried));

impl SupervisorState {
    fn emit(&self, event: RunEvent) {
        let _ = self.events.send(event);
    }

    fn stats(&self) -> JobStats {
        let metrics: Vec<&str> = self.ctx.plan.metrics().iter().map(|m| m.name()).collect();
        let (n_total, finished) = (self.ledger.n_total(), self.ledger.finished());
        let stats = JobStats::compute(finished, self.ledger.live(), &metrics, self.ctx.plan.score_convention());
        if !stats.is_consistent(n_total) {
            // Never expected; said loudly, because every count on screen and on disk derives from it.
            tracing::error!(n_total, ?stats, "trial accounting is inconsistent");
        }
        stats
    }

    /// The job's `result.json`, from `stats` (computed once per event, shared with the summary).
    fn write_job_result(&self, stats: &JobStats, finished: bool) {
        let result = JobResult {
            id: self.ctx.job_id.to_string(),
            started_at: self.started_at,
            updated_at: Some(now()),
            finished_at: finished.then(now),
            n_total_trials: self.ledger.n_total(),
            stats: stats.clone(),
            budget: self.budget_status(),
            preflight: self.ctx.plan.preflight().cloned(),
            regrade_of: self.ctx.plan.regrade_of().map(|p| p.display().to_string()),
        };
        if let Err(e) = files::write_json(&self.ctx.dir().result_json(), &result) {
            tracing::error!(error = %e, "could not write the job result");
        }
    }

    fn budget_status(&self) -> Option<BudgetStatus> {
        self.budget.as_ref().map(|budget| budget.status(self.ledger.n_held()))
    }

    /// Every figure reporters show, from the same statistics as the job's result file.
    fn summary(&self, stats: &JobStats) -> Box<JobSummary> {
        let job_dir = self.ctx.job_dir.display().to_string();
        Box::new(JobSummary {
            wall_seconds: self.started.elapsed().as_secs_f64(),
            n_model_retries: self.n_model_retries,
            cancelled: self.ledger.mode() == JobMode::Cancelled,
            halted: self.ledger.mode() == JobMode::Halted,
            budget: self.budget_status(),
            ..JobSummary::from_stats(&job_dir, self.ledger.n_total(), stats, self.ledger.finished())
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
        files::write_json(&ctx.dir().config_json(), ctx.plan.record())?;
        let mut llm: Vec<Option<ActorRef<LlmMsg>>> = Vec::new();
        let mut by_identity: HashMap<(ProviderKind, String, String), ActorRef<LlmMsg>> = HashMap::new();
        for idx in 0..ctx.plan.agents().len() {
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
        let budget = if ctx.plan.budget().is_set() || ctx.plan.agents().iter().any(|a| a.budget.is_set()) {
            let agents = ctx.plan.agents().iter().map(|a| a.budget).collect();
            Some(Arc::new(Budget::open(&ctx.dir().spend_journal(), ctx.plan.budget(), agents)?))
        } else {
            None
        };
        let start = args.start;
        let n_already_done = start.finished.len() as u64;
        let admission = (ctx.plan.admission() == terminus_config::job::AdmissionMode::Adaptive)
            .then(|| Admission::new(ctx.plan.n_concurrent()));
        let rules = Rules {
            n_concurrent: admission.as_ref().map_or(ctx.plan.n_concurrent(), Admission::limit),
            retry: ctx.plan.retry().clone(),
            supervision: ctx.plan.supervision(),
        };
        let to_run = start.to_run.into_iter().map(|(plan, name)| Slot::new(plan, name)).collect();
        let mut ledger = Ledger::new(rules, to_run, start.finished, start.n_retries, start.n_restarts);
        if start.paused {
            let _ = ledger.set_paused(true);
        }
        let state = SupervisorState {
            ledger,
            ctx,
            events: args.events,
            actors: HashMap::new(),
            llm,
            n_model_retries: 0,
            started_at: start.started_at.unwrap_or_else(now),
            started: Instant::now(),
            budget,
            admission,
            recheck_armed: false,
            saturated: VecDeque::new(),
            saturation_said: false,
            saturated_run: 0,
        };
        let stats = state.stats();
        state.write_job_result(&stats, false);
        state.emit(RunEvent::JobStarted {
            job_name: state.ctx.plan.name().to_string(),
            job_dir: state.ctx.job_dir.display().to_string(),
            n_total: state.ledger.n_total(),
            n_already_done,
            summary: state.summary(&stats),
        });
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let _ = myself.send_message(SupervisorMsg::Dispatch);
        tokio::spawn(sample_host(myself.clone(), state.ctx.backend.clone()));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let ledger = &mut state.ledger;
        let actions = match msg {
            SupervisorMsg::Dispatch => {
                state.recheck_armed = false;
                Vec::new()
            }
            SupervisorMsg::Trial(TrialReport::Progress { trial_name, phase, episode, usage }) => {
                state.emit(RunEvent::TrialProgress { trial_name, phase, episode, usage });
                return Ok(());
            }
            SupervisorMsg::LlmRetried(LlmRetried { trial_name, attempt, wait, reason }) => {
                state.n_model_retries += 1;
                if let Some(trial_name) = trial_name {
                    let reason = reason.name().to_string();
                    state.emit(RunEvent::TrialRetrying { trial_name, attempt, wait_sec: wait.as_secs_f64(), reason });
                }
                return Ok(());
            }
            SupervisorMsg::Trial(TrialReport::Queued { trial_name, reason }) => {
                if !ledger.is_running(&trial_name) {
                    return Ok(());
                }
                let actions = ledger.queued(&trial_name, reason.is_some());
                state.emit(RunEvent::TrialQueued { trial_name, reason });
                actions
            }
            SupervisorMsg::Trial(TrialReport::Budget { trial_name, budget }) => ledger.budget(&trial_name, budget),
            SupervisorMsg::Trial(TrialReport::Finished { mut result, error, written }) => {
                if !ledger.is_running(&result.trial_name) {
                    return Ok(());
                }
                let timed_out = error == Some(TrialErrorKind::AgentTimeout);
                if let Some(why) = timed_out.then(|| saturated_during(&state.saturated, &result)).flatten() {
                    let advice = match state.admission {
                        Some(_) => "admission was lowering the number of trials at once",
                        None => "lower n_concurrent_trials or set admission: adaptive",
                    };
                    result.warnings.push(format!(
                        "the agent ran out of time while the host was saturated ({why}): the limit may have been hit because of the host, not the agent ({advice})"
                    ));
                    write_trial_result(&state.ctx, &result);
                } else if !written {
                    // The trial could not write it; one more try, and the job's result counts it either way.
                    write_trial_result(&state.ctx, &result);
                }
                let trial_name = result.trial_name.clone();
                ledger.finished_trial(&trial_name, *result, error, rand::random::<f64>())
            }
            SupervisorMsg::Trial(TrialReport::Lost { trial_name, reason }) => {
                tracing::warn!(trial = %trial_name, %reason, "the trial lost its environment");
                let error = TrialError::new(TrialErrorKind::EnvironmentLost, reason);
                ledger.lost(&trial_name, error, Instant::now())
            }
            SupervisorMsg::Trial(TrialReport::EngineUnavailable { trial_name, reason }) => {
                tracing::warn!(trial = %trial_name, %reason, "the Docker engine does not answer; the trial waits for it");
                ledger.engine_unavailable(&trial_name, reason)
            }
            SupervisorMsg::Trial(TrialReport::DiskFull { trial_name, reason }) => {
                ledger.disk_full(&trial_name, &reason)
            }
            SupervisorMsg::CleanedUp { trial_name } => ledger.cleaned_up(&trial_name),
            SupervisorMsg::TrialOverdue { trial_name, budget, watch } => {
                if ledger.watching(&trial_name, watch) {
                    let secs = budget.as_secs_f64();
                    tracing::error!(trial = %trial_name, "the trial outlived its deadlines ({secs:.0} s with the margin); the watchdog ended it");
                }
                ledger.overdue(&trial_name, budget, watch, Instant::now())
            }
            SupervisorMsg::EngineBack { answered } => {
                if answered {
                    tracing::info!("the Docker engine answers again; dispatching");
                } else {
                    tracing::error!(
                        "the Docker engine did not come back in {:?}; trials go on and may fail",
                        ENGINE_WAIT
                    );
                }
                ledger.engine_back();
                Vec::new()
            }
            SupervisorMsg::RetryDue { trial_name } => ledger.retry_due(&trial_name),
            SupervisorMsg::Swept => {
                let stats = state.stats();
                state.write_job_result(&stats, state.ledger.complete());
                state.emit(RunEvent::JobFinished { summary: state.summary(&stats) });
                for llm in state.llm.iter().flatten() {
                    llm.stop(None);
                }
                myself.stop(None);
                return Ok(());
            }
            SupervisorMsg::Cancel => ledger.cancel(),
            SupervisorMsg::Control(request, reply) => {
                let answer = match state.control(request) {
                    Ok(actions) => {
                        apply(&myself, state, actions);
                        Ok(state.status())
                    }
                    Err(refusal) => Err(refusal),
                };
                let _ = reply.send(answer);
                return Ok(());
            }
            SupervisorMsg::Host(sample) => {
                state.host(sample);
                Vec::new()
            }
        };
        apply(&myself, state, actions);
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
            let trial = state.actors.iter().find(|(_, actor)| **actor == id).map(|(name, _)| name.clone());
            if let Some(trial) = trial.filter(|name| state.ledger.is_running(name)) {
                tracing::error!(%trial, %error, "trial actor crashed");
                let error = TrialError::new(TrialErrorKind::Internal, format!("the trial actor crashed: {error}"));
                let actions = state.ledger.lost(&trial, error, Instant::now());
                apply(&myself, state, actions);
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

impl SupervisorState {
    /// Takes one tick's sample of the host: remembers saturation, moves the adaptive limit (the
    /// dispatch that follows starts what it allows), or warns once that a fixed concurrency is
    /// more than the host can take.
    fn host(&mut self, sample: HostSample) {
        let verdict = admission::judge(&sample);
        if let Verdict::Saturated(why) = &verdict {
            if self.saturated.len() >= SATURATED_KEPT {
                self.saturated.pop_front();
            }
            self.saturated.push_back((now(), why.clone()));
            self.saturated_run += 1;
        } else {
            self.saturated_run = 0;
        }
        let (running, queued) = (self.ledger.n_running(), self.ledger.n_queued());
        match &mut self.admission {
            Some(admission) => {
                if let Some(change) = admission.observe(&verdict, running, queued) {
                    tracing::info!(from = change.from, to = change.to, running, "admission: {}", change.why);
                    self.ledger.set_limit(change.to);
                    self.emit(RunEvent::Admission { limit: change.to, running, why: change.why });
                }
            }
            None => {
                if let Verdict::Saturated(why) = verdict
                    && !self.saturation_said
                    && self.saturated_run >= SATURATED_TICKS_TO_WARN
                    && running > 1
                {
                    self.saturation_said = true;
                    let n_concurrent = self.ctx.plan.n_concurrent();
                    tracing::warn!(
                        "the host is saturated ({why}) with {running} trials running (n_concurrent_trials: {n_concurrent}): trials may run out of time because of it; lower n_concurrent_trials or set admission: adaptive"
                    );
                    self.emit(RunEvent::HostSaturated { reason: why, n_concurrent });
                }
            }
        }
    }
}

/// Why the host was saturated while `result`'s agent ran, if it was.
fn saturated_during(saturated: &VecDeque<(Timestamp, String)>, result: &TrialResult) -> Option<String> {
    let phase = result.agent_execution.as_ref()?;
    let (from, to) = (phase.started_at?, phase.finished_at.unwrap_or_else(now));
    let during: Vec<&String> =
        saturated.iter().filter(|(at, _)| *at >= from && *at <= to).map(|(_, why)| why).collect();
    let last = during.last()?;
    let secs = during.len() as u64 * admission::TICK.as_secs();
    Some(format!("{secs} s of its {:.0} s: {last}", (to - from).num_milliseconds() as f64 / 1000.0))
}

/// Samples the host every tick — CPU and memory from /proc, the engine's latencies as the
/// trials measured them — and sends each sample to the Supervisor, until it is gone.
async fn sample_host(supervisor: ActorRef<SupervisorMsg>, backend: terminus_sandbox::Backend) {
    let read_cpu =
        async || tokio::fs::read_to_string("/proc/stat").await.ok().and_then(|s| admission::parse_cpu_times(&s));
    let mut before = read_cpu().await;
    // The window starts now: what was measured before the job started says nothing of it.
    backend.latency();
    let mut tick = tokio::time::interval(admission::TICK);
    tick.tick().await;
    loop {
        tick.tick().await;
        let after = read_cpu().await;
        let cpu_busy = before.zip(after).and_then(|(b, a)| admission::cpu_busy(&b, &a));
        before = after;
        let memory_available =
            tokio::fs::read_to_string("/proc/meminfo").await.ok().and_then(|s| admission::parse_memory_available(&s));
        let sample = HostSample { cpu_busy, memory_available, latency: backend.latency() };
        if supervisor.send_message(SupervisorMsg::Host(sample)).is_err() {
            return;
        }
    }
}

/// Performs the ledger's actions, then dispatches (which may start trials or end the job). A
/// trial given up is recorded through the ledger, so its actions join the work list.
fn apply(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, actions: Vec<Action>) {
    let mut work: VecDeque<Action> = actions.into();
    let mut dispatched = false;
    loop {
        let Some(action) = work.pop_front() else {
            if dispatched {
                break;
            }
            dispatched = true;
            work.extend(shared::dispatch(myself, state));
            continue;
        };
        match action {
            Action::Spawn(slot) => {
                if let Err(error) = spawn_trial(myself, state, &slot) {
                    work.extend(state.ledger.spawn_failed(&slot.name, error));
                }
            }
            Action::ArmWatchdog { trial, budget, watch } => {
                myself.send_after(budget, move || SupervisorMsg::TrialOverdue { trial_name: trial, budget, watch });
            }
            Action::Kill(trial) => {
                // Killed, not stopped: a stuck trial would not get to a stop. Its state goes
                // with it, which aborts its in-flight work (see `LiveEffects`' drop).
                let id = state.actors.get(&trial).copied();
                if let Some(cell) = myself.get_children().into_iter().find(|c| Some(c.get_id()) == id) {
                    cell.kill();
                }
            }
            Action::CleanUp { trial, after_outage } => clean_up(myself, state, trial, after_outage),
            Action::WaitForEngine => wait_for_engine(myself, state),
            Action::RetryLater { trial, attempt, wait } => retry_later(myself, state, trial, attempt, wait),
            Action::GiveUp { slot, error } => {
                let result = crashed_result(state, &slot, error);
                write_trial_result(&state.ctx, &result);
                work.extend(state.ledger.record(result));
            }
            Action::Recorded { trial, write } => {
                let Some(result) = state.ledger.finished().iter().rev().find(|r| r.trial_name == trial) else {
                    continue;
                };
                if write {
                    write_trial_result(&state.ctx, result);
                }
                let (task_name, reward) = (result.task_name.clone(), result.reward());
                let error =
                    result.exception_info.as_ref().map(|e| format!("{}: {}", e.exception_type, e.exception_message));
                let stats = state.stats();
                state.write_job_result(&stats, false);
                let summary = state.summary(&stats);
                state.emit(RunEvent::TrialFinished { trial_name: trial, task_name, reward, error, summary });
            }
            Action::WriteJobResult => state.write_job_result(&state.stats(), false),
            Action::Emit(event) => {
                match &event {
                    RunEvent::JobHalted { reason } => tracing::error!("{reason}"),
                    RunEvent::BudgetReached { reason } => tracing::warn!(
                        "{reason}: no new trial of it starts (`terminus resume` with a raised budget runs them)"
                    ),
                    RunEvent::TrialRestarting { trial_name, restart, .. } => {
                        tracing::warn!(trial = %trial_name, restart, "restarting the trial in a fresh container")
                    }
                    RunEvent::TrialWillRetry { trial_name, retry, wait_sec, reason } => {
                        tracing::info!(trial = %trial_name, retry, wait_sec, %reason, "retrying the trial")
                    }
                    _ => {}
                }
                state.emit(event);
            }
            Action::CancelRunning => {
                for cell in myself.get_children() {
                    if state.actors.values().any(|id| *id == cell.get_id()) {
                        let _ = cell.send_message(TrialMsg::Cancel);
                    }
                }
            }
            Action::CancelTrial(trial) => {
                let id = state.actors.get(&trial).copied();
                if let Some(cell) = myself.get_children().into_iter().find(|c| Some(c.get_id()) == id) {
                    let _ = cell.send_message(TrialMsg::Cancel);
                }
            }
            Action::Finish => finish_job(myself, state),
        }
    }
    let ledger = &state.ledger;
    state.actors.retain(|name, _| ledger.is_running(name));
    shared::publish(state);
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

/// Spawns the LLM actor for agent `idx`'s endpoint, with that agent's limits and retry policy
/// (its start is instant: nothing to wait for).
fn spawn_llm(
    myself: &ActorRef<SupervisorMsg>,
    ctx: &JobContext,
    idx: usize,
) -> Result<ActorRef<LlmMsg>, ActorProcessingErr> {
    let settings = provider_settings(ctx, idx).ok_or("this agent calls no model")?;
    let llm = ctx.plan.agents()[idx].llm;
    let args = LlmArgs {
        provider: Provider::new(settings)?,
        limits: llm.limits,
        retry: llm.retry,
        retries_to: Some(myself.get_derived()),
    };
    Ok(ActorRuntime::spawn_linked_instant(None, LlmActor, args, myself.get_cell())?.0)
}

/// Spawns a trial; its start (building its state) is in-memory work, so nothing is awaited.
fn spawn_trial(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, slot: &Slot) -> Result<(), TrialError> {
    let agent_idx = slot.plan.agent_idx;
    let args = TrialArgs {
        ctx: state.ctx.clone(),
        setup: trial_setup(state, slot),
        // A replay reads its replies from the recorded trial: it has no model to ask.
        llm: state.llm[agent_idx].clone().filter(|_| slot.plan.replay_of.is_none()).map(|actor| {
            let handle = LlmHandle::new(actor, state.ctx.plan.agents()[agent_idx].llm.call_timeout);
            match &state.budget {
                Some(budget) => handle.metered(budget.clone(), agent_idx),
                None => handle,
            }
        }),
        supervisor: myself.get_derived(),
        retries: slot.retries,
        restarts: slot.restarts,
    };
    state.emit(RunEvent::TrialStarted { trial_name: slot.name.clone(), task_name: slot.plan.task.name.clone() });
    let (trial, _) = ActorRuntime::spawn_linked_instant(None, TrialActor, args, myself.get_cell())
        .map_err(|e| TrialError::new(TrialErrorKind::Internal, format!("the trial could not start: {e}")))?;
    state.actors.insert(slot.name.clone(), trial.get_id());
    Ok(())
}

/// Removes what a trial's last run left on the engine (by label), in a task, then sends
/// `CleanedUp`: the trial runs again only after, or the removal could take the new container,
/// which carries the same label. After an outage the removal waits for the engine first.
fn clean_up(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState, trial: TrialName, after_outage: bool) {
    let (engine, myself) = (state.ctx.backend.clone(), myself.clone());
    tokio::spawn(async move {
        if after_outage {
            engine_answers_within(&engine, ENGINE_WAIT).await;
        }
        let _ = engine.remove_with_label(LABEL_TRIAL_ID, Some(trial.as_str())).await;
        let _ = myself.send_message(SupervisorMsg::CleanedUp { trial_name: trial });
    });
}

/// Moves the failed attempt `attempt` of `trial` under `attempts/<attempt>/` (off the handler),
/// then sends `RetryDue` once `wait` has passed since the decision.
fn retry_later(
    myself: &ActorRef<SupervisorMsg>,
    state: &SupervisorState,
    trial: TrialName,
    attempt: u32,
    wait: Duration,
) {
    let (trial_dir, myself) = (state.ctx.dir().trial(&trial), myself.clone());
    let due = tokio::time::Instant::now() + wait;
    tokio::spawn(async move {
        let archived = terminus_sandbox::blocking(move || archive_attempt(&trial_dir, attempt)).await;
        if let Err(e) = archived {
            tracing::warn!(%trial, error = %e, "could not archive the failed attempt");
        }
        tokio::time::sleep_until(due).await;
        let _ = myself.send_message(SupervisorMsg::RetryDue { trial_name: trial });
    });
}

fn write_trial_result(ctx: &JobContext, result: &TrialResult) {
    let dir = ctx.dir().trial(&result.trial_name);
    // A trial that never started (cancelled while queued), or whose files were archived for a
    // retry, has no config.json: written beside its result, so a resume knows the trial.
    if !dir.config_json().is_file()
        && let Err(e) = files::write_json(&dir.config_json(), &result.config)
    {
        tracing::error!(error = %e, "could not write a trial's config");
    }
    if let Err(e) = files::write_json(&dir.result_json(), result) {
        tracing::error!(error = %e, "could not write a trial result");
    }
}

/// Who a slot's trial is, as the job plans it before its task loads.
fn trial_setup(state: &SupervisorState, slot: &Slot) -> TrialSetup {
    let ctx = &state.ctx;
    let dir = ctx.dir().trial(&slot.name);
    let trials_dir = ctx.job_dir.display().to_string();
    let basis = ctx.plan.basis(&ctx.job_id.to_string(), &slot.plan, slot.name.as_str(), trials_dir);
    TrialSetup::new(basis, ctx.job_id, slot.plan.clone(), slot.name.clone(), dir)
}

/// The result of a trial that crashed (or could not start) and will not run again.
fn crashed_result(state: &SupervisorState, slot: &Slot, error: TrialError) -> TrialResult {
    let mut record = trial_setup(state, slot).new_record();
    record.result.finished_at = Some(now());
    record.result.retries = slot.retries;
    record.result.restarts = slot.restarts;
    record.record_error(error);
    record.to_result()
}

/// Backstop: no container of this job survives it, whatever a trial did. The sweep runs in a
/// task; `Swept` writes the final result and stops the job.
fn finish_job(myself: &ActorRef<SupervisorMsg>, state: &SupervisorState) {
    shared::leave(state);
    let (engine, job_id, myself) = (state.ctx.backend.clone(), state.ctx.job_id.to_string(), myself.clone());
    let network = state.ctx.site.network().map(str::to_string);
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
            && let Err(e) = engine.remove_network(&network).await
        {
            tracing::warn!(error = %e, "could not remove the job's network");
        }
        let _ = myself.send_message(SupervisorMsg::Swept);
    });
}
