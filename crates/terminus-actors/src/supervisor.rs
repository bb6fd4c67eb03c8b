//! The Supervisor actor: runs a job's trials with bounded concurrency and owns the job's
//! bookkeeping.
//!
//! Supervises: every Trial (spawned linked) and one LLM actor per configured agent.
//! Owns: the queue of trials not started yet, the running set, finished results, the job's
//! `result.json`, and the only sender of [`RunEvent`]s, so what reporters show always agrees
//! with what is on disk.
//!
//! ```text
//! pre_start (job dir, config.json, LLM actors) ─► dispatch ─► [TrialProgress]* ─► TrialFinished ─► dispatch … ─► all done: final result, sweep, JobFinished, stop
//! ```
//!
//! A trial that panics never reports; its `ActorFailed` event makes the Supervisor remove its
//! container (by label, which works even if the container-started report is still queued) and
//! restart it once in a fresh container, then record it as errored. One trial's failure never
//! stops its siblings.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use terminus_config::AgentKind;
use terminus_config::job::TrialPlan;
use terminus_core::events::{JobSummary, RunEvent, TrialPhase};
use terminus_core::ids::TrialName;
use terminus_core::result::{ExceptionInfo, JobResult, JobStats, TrialResult};
use terminus_core::time::{Timestamp, now};
use terminus_llm::limiter::LimitSettings;
use terminus_llm::retry::RetryPolicy;
use terminus_llm::{Provider, ProviderKind, ProviderSettings};
use terminus_sandbox::{LABEL_JOB_ID, LABEL_TRIAL_ID};
use tokio::sync::mpsc::UnboundedSender;

use crate::context::JobContext;
use crate::files;
use crate::llm::{LlmActor, LlmArgs, LlmMsg};
use crate::trial::{TrialActor, TrialArgs, TrialMsg};

/// Restarts of one trial after its actor crashed.
const MAX_RESTARTS: u32 = 1;

pub struct SupervisorActor;

pub struct SupervisorArgs {
    pub ctx: Arc<JobContext>,
    pub events: UnboundedSender<RunEvent>,
}

/// A trial in flight.
struct Running {
    plan: TrialPlan,
    name: TrialName,
    restarts: u32,
}

pub struct SupervisorState {
    ctx: Arc<JobContext>,
    events: UnboundedSender<RunEvent>,
    queue: VecDeque<(TrialPlan, TrialName)>,
    running: HashMap<ActorId, Running>,
    finished: Vec<TrialResult>,
    /// The LLM actor of each agent index (None for agents that call no model). Agents that use
    /// the same (protocol, model, endpoint) share one actor, so they share its limits.
    llm: Vec<Option<ActorRef<LlmMsg>>>,
    n_total: u64,
    started_at: Timestamp,
    started: std::time::Instant,
    cancelled: bool,
}

/// Inbox of [`SupervisorActor`].
pub enum SupervisorMsg {
    /// Starts as many queued trials as the concurrency limit allows.
    Dispatch,
    TrialProgress {
        trial_name: TrialName,
        phase: TrialPhase,
        episode: Option<u32>,
    },
    ContainerStarted {
        trial_name: TrialName,
        container_id: String,
    },
    /// A model call is being retried (from an LLM actor).
    LlmRetry {
        trial_name: Option<TrialName>,
        attempt: u32,
        wait: std::time::Duration,
        reason: String,
    },
    /// A trial's last word: its result, already written to its directory.
    TrialFinished(Box<TrialResult>),
    /// Stop dispatching and cancel running trials (first Ctrl-C).
    Cancel,
}

impl SupervisorState {
    fn emit(&self, event: RunEvent) {
        let _ = self.events.send(event);
    }

    fn write_job_result(&self, finished: bool) {
        let result = JobResult {
            id: self.ctx.job_id.to_string(),
            started_at: self.started_at,
            updated_at: Some(now()),
            finished_at: finished.then(now),
            n_total_trials: self.n_total,
            stats: JobStats::compute(&self.finished, self.n_total, self.running.len() as u64),
        };
        if let Err(e) = files::write_json(&self.ctx.job_dir.join("result.json"), &result) {
            tracing::error!(error = %e, "could not write the job result");
        }
    }

    fn summary(&self) -> JobSummary {
        let stats = JobStats::compute(&self.finished, self.n_total, 0);
        let mean_reward = (!self.finished.is_empty())
            .then(|| self.finished.iter().map(|r| r.reward().unwrap_or(0.0)).sum::<f64>() / self.finished.len() as f64);
        JobSummary {
            job_dir: self.ctx.job_dir.display().to_string(),
            n_total: self.n_total,
            n_finished: self.finished.len() as u64,
            n_errored: stats.n_errored_trials,
            mean_reward,
            n_input_tokens: stats.n_input_tokens.unwrap_or(0),
            n_output_tokens: stats.n_output_tokens.unwrap_or(0),
            cost_usd: stats.cost_usd,
            wall_seconds: self.started.elapsed().as_secs_f64(),
        }
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
        files::write_json(&ctx.job_dir.join("config.json"), &ctx.spec.raw)?;
        let plans = ctx.spec.plan();
        let queue: VecDeque<(TrialPlan, TrialName)> = plans
            .into_iter()
            .map(|p| {
                let name = TrialName::generate(&p.task.name);
                (p, name)
            })
            .collect();
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
                    let actor = spawn_llm(&myself, &ctx, idx).await?;
                    by_identity.insert(settings.identity(), actor.clone());
                    actor
                }
            };
            llm.push(Some(actor));
        }
        let state = SupervisorState {
            n_total: queue.len() as u64,
            ctx,
            events: args.events,
            queue,
            running: HashMap::new(),
            finished: Vec::new(),
            llm,
            started_at: now(),
            started: std::time::Instant::now(),
            cancelled: false,
        };
        state.write_job_result(false);
        state.emit(RunEvent::JobStarted {
            job_name: state.ctx.spec.job_name.clone(),
            job_dir: state.ctx.job_dir.display().to_string(),
            n_total: state.n_total,
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
            SupervisorMsg::Dispatch => dispatch(&myself, state).await,
            SupervisorMsg::TrialProgress { trial_name, phase, episode } => {
                state.emit(RunEvent::TrialProgress { trial_name, phase, episode })
            }
            SupervisorMsg::LlmRetry { trial_name, attempt, wait, reason } => {
                if let Some(trial_name) = trial_name {
                    state.emit(RunEvent::TrialRetrying { trial_name, attempt, wait_sec: wait.as_secs_f64(), reason });
                }
            }
            SupervisorMsg::ContainerStarted { trial_name, container_id } => {
                tracing::debug!(trial = %trial_name, container = %container_id, "container started");
            }
            SupervisorMsg::TrialFinished(result) => {
                let id = state.running.iter().find(|(_, r)| r.name == result.trial_name).map(|(id, _)| *id);
                if let Some(id) = id {
                    state.running.remove(&id);
                }
                record_finished(state, *result);
                dispatch(&myself, state).await;
            }
            SupervisorMsg::Cancel => {
                if !state.cancelled {
                    state.cancelled = true;
                    state.queue.clear();
                    for cell in myself.get_children() {
                        if state.running.contains_key(&cell.get_id()) {
                            let _ = cell.send_message(TrialMsg::Cancel);
                        }
                    }
                    dispatch(&myself, state).await;
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
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let id = cell.get_id();
                if let Some(running) = state.running.remove(&id) {
                    tracing::error!(trial = %running.name, %error, "trial actor crashed");
                    let engine = state.ctx.engine.clone();
                    let name = running.name.to_string();
                    // Remove whatever container it had (it cannot clean up after a panic).
                    tokio::spawn(async move {
                        let _ = engine.remove_with_label(LABEL_TRIAL_ID, Some(&name)).await;
                    });
                    if running.restarts < MAX_RESTARTS && !state.cancelled {
                        tracing::warn!(trial = %running.name, "restarting the trial in a fresh container");
                        spawn_trial(&myself, state, running.plan, running.name, running.restarts + 1).await;
                    } else {
                        let result = crashed_result(state, &running, &error.to_string());
                        let path = state.ctx.job_dir.join(running.name.as_str()).join("result.json");
                        if let Err(e) = files::write_json(&path, &result) {
                            tracing::error!(error = %e, "could not write the result of a crashed trial");
                        }
                        record_finished(state, result);
                        dispatch(&myself, state).await;
                    }
                } else if let Some(idx) = state.llm.iter().position(|l| l.as_ref().is_some_and(|l| l.get_id() == id)) {
                    tracing::error!(%error, "LLM actor crashed; restarting it");
                    let actor = spawn_llm(&myself, &state.ctx, idx).await?;
                    for slot in state.llm.iter_mut() {
                        if slot.as_ref().is_some_and(|l| l.get_id() == id) {
                            *slot = Some(actor.clone());
                        }
                    }
                }
            }
            SupervisionEvent::ActorTerminated(..) | SupervisionEvent::ActorStarted(_) => {}
            _ => {}
        }
        Ok(())
    }
}

/// How agent `idx` reaches its model (None for agents that call no model).
pub fn provider_settings(ctx: &JobContext, idx: usize) -> Option<ProviderSettings> {
    let agent = &ctx.spec.agents[idx];
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
        ..ProviderSettings::new(model_name)
    })
}

/// Spawns the LLM actor for agent `idx`'s endpoint, with that agent's limits and retry policy.
async fn spawn_llm(
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
        supervisor: Some(myself.clone()),
    };
    Ok(Actor::spawn_linked(None, LlmActor, args, myself.get_cell()).await?.0)
}

fn record_finished(state: &mut SupervisorState, result: TrialResult) {
    state.emit(RunEvent::TrialFinished {
        trial_name: result.trial_name.clone(),
        task_name: result.task_name.clone(),
        reward: result.reward(),
        error: result.exception_info.as_ref().map(|e| format!("{}: {}", e.exception_type, e.exception_message)),
    });
    state.finished.push(result);
    state.write_job_result(false);
}

async fn dispatch(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState) {
    while !state.cancelled && state.running.len() < state.ctx.spec.n_concurrent_trials {
        let Some((plan, name)) = state.queue.pop_front() else {
            break;
        };
        spawn_trial(myself, state, plan, name, 0).await;
    }
    if state.running.is_empty() && state.queue.is_empty() {
        finish_job(myself, state).await;
    }
}

async fn spawn_trial(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    plan: TrialPlan,
    name: TrialName,
    restarts: u32,
) {
    let args = TrialArgs {
        ctx: state.ctx.clone(),
        plan: plan.clone(),
        trial_name: name.clone(),
        llm: state.llm[plan.agent_idx].clone(),
        supervisor: myself.clone(),
    };
    state.emit(RunEvent::TrialStarted { trial_name: name.clone(), task_name: plan.task.name.clone() });
    match Actor::spawn_linked(None, TrialActor, args, myself.get_cell()).await {
        Ok((trial, _)) => {
            state.running.insert(trial.get_id(), Running { plan, name, restarts });
        }
        Err(e) => {
            let running = Running { plan, name, restarts };
            let result = crashed_result(state, &running, &format!("the trial could not start: {e}"));
            record_finished(state, result);
        }
    }
}

fn crashed_result(state: &SupervisorState, running: &Running, message: &str) -> TrialResult {
    let agent = &state.ctx.spec.agents[running.plan.agent_idx];
    TrialResult {
        id: uuid::Uuid::new_v4().to_string(),
        task_name: running.plan.task.name.clone(),
        trial_name: running.name.clone(),
        trial_uri: format!("file://{}", state.ctx.job_dir.join(running.name.as_str()).display()),
        task_id: terminus_core::result::TaskIdRecord { path: running.plan.task.path.display().to_string() },
        source: running.plan.task.source.clone(),
        task_checksum: None,
        config: serde_json::Value::Null,
        agent_info: terminus_core::result::AgentInfo {
            name: agent.name.clone(),
            version: agent.version().to_string(),
            model_info: agent.model_name.as_deref().map(terminus_core::result::ModelInfo::from_model_name),
        },
        agent_result: None,
        verifier_result: None,
        exception_info: Some(ExceptionInfo::new("InternalError", message)),
        started_at: None,
        finished_at: Some(now()),
        environment_setup: None,
        agent_setup: None,
        agent_execution: None,
        verifier: None,
    }
}

async fn finish_job(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState) {
    // Backstop: no container of this job survives it, whatever a trial did.
    match state.ctx.engine.remove_with_label(LABEL_JOB_ID, Some(&state.ctx.job_id.to_string())).await {
        Ok(0) => {}
        Ok(n) => tracing::warn!(n, "removed containers the trials left behind"),
        Err(e) => tracing::warn!(error = %e, "could not sweep the job's containers"),
    }
    state.write_job_result(!state.cancelled);
    state.emit(RunEvent::JobFinished { summary: state.summary() });
    for llm in state.llm.iter().flatten() {
        llm.stop(None);
    }
    myself.stop(None);
}
