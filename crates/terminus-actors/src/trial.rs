//! The Trial actor: one attempt of one agent on one task, from image to result file.
//!
//! Supervised by: the Supervisor. Supervises: its TmuxSession and, while one runs, a Summarizer.
//! Owns: the container (removed at the end whatever happened), the Terminus loop state with the
//! handbook's registers (`terminus_agent::AgentLoop`), the trial's result record and directory.
//!
//! ```text
//! post_start ─► [provision] ─► EnvironmentReady ─► agent ─► [verify] ─► VerificationDone ─► [teardown] ─► TornDown ─► report, stop
//!
//! Terminus 2 agent, one episode:
//!   AskModel ─► (proactive summary? ─► Summarizer ─► SummaryReady) ─► QueryModel ─► ModelReplied
//!     ├─ parse error ─────────────────────────────────────────────► AskModel
//!     ├─ commands ─► RunCommand(i) ─► CommandWaitOver(i) … ─► observe ─► AskModel | agent done
//!     ├─ context overflow ─► unwind ─► Summarizer ─► SummaryReady ──► QueryModel
//!     │                                  └─ failed ─► short summary ─► ShortSummaryReplied ─► QueryModel
//!     └─ truncated reply ─► salvage (as a reply) | explain the limit ─► QueryModel
//! ```
//!
//! Nothing slow runs inside a handler: container work, model calls and summarizations run in
//! spawned tasks or side actors that report back with a message, and the waits commands ask for
//! are timers. So a deadline or a cancel is handled within milliseconds. Each in-flight piece of
//! work carries the `generation` it was started in; when a deadline or cancel moves the trial on,
//! the generation changes and late replies are dropped (rust-analyzer's flycheck pattern).
//!
//! Errors are data: an error ends the trial with `exception_info` filled in, never by returning
//! `Err` from a handler (which would skip cleanup).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::rpc::CallResult;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{Value, json};
use terminus_agent::prompts::{self, Format};
use terminus_agent::summarize::SummaryOutcome;
use terminus_agent::{AgentLoop, Command, LoopSettings, Next, Reply};
use terminus_config::job::TrialPlan;
use terminus_config::{AgentKind, AgentSpec, Task};
use terminus_core::events::{ProgressUsage, TrialPhase};
use terminus_core::ids::TrialName;
use terminus_core::llm::{ChatMessage, LlmRequest};
use terminus_core::result::{
    AgentContext, AgentInfo, ExceptionInfo, ModelInfo, TaskIdRecord, TimingInfo, TrialResult, VerifierResult,
};
use terminus_core::secrets::redact_json;
use terminus_llm::{LlmError, LlmResponse};
use terminus_sandbox::tmux::PaneSize;
use terminus_sandbox::{Container, ExecOptions};

use crate::context::JobContext;
use crate::environment::{self, Provisioned};
use crate::files;
use crate::llm::LlmMsg;
use crate::summarizer::{SummarizerActor, SummarizerArgs, SummarizerMsg};
use crate::supervisor::SupervisorMsg;
use crate::tmux_session::{TmuxMsg, TmuxSessionActor, TmuxSessionArgs};

/// How long a tmux RPC may take.
const TMUX_RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one model call (with its retries) may take before the trial gives up on it.
const LLM_CALL_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often `early_return` looks at a terminal that looks idle (to confirm it)…
const IDLE_PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// … and at one still busy. Probes also back off to twice their own duration, so a loaded
/// machine (hundreds of trials on two cores) is not made busier by them.
const BUSY_PROBE_INTERVAL: Duration = Duration::from_millis(250);
/// Consecutive idle probes with an unchanged screen that end a wait early.
const IDLE_STABLE_PROBES: u32 = 2;
/// How much of the screen the summarization fallbacks quote (characters from the end).
const FALLBACK_SCREEN_CHARS: usize = 1000;

pub struct TrialActor;

pub struct TrialArgs {
    pub ctx: Arc<JobContext>,
    pub plan: TrialPlan,
    pub trial_name: TrialName,
    pub llm: Option<ActorRef<LlmMsg>>,
    pub supervisor: ActorRef<SupervisorMsg>,
    /// Failed attempts before this one (kept under `attempts/`).
    pub retries: u32,
    /// Restarts in a fresh container before this one.
    pub restarts: u32,
}

/// Why a summarization was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryPurpose {
    /// Free context fell below the threshold at the start of an episode.
    Proactive,
    /// The provider rejected a request as too long.
    Overflow,
}

/// Inbox of [`TrialActor`].
pub enum TrialMsg {
    EnvironmentReady(Box<Provisioned>),
    /// Starts the next episode.
    AskModel {
        generation: u64,
    },
    /// Sends the current prompt (within the current episode).
    QueryModel {
        generation: u64,
    },
    ModelReplied {
        generation: u64,
        result: Result<LlmResponse, LlmError>,
        elapsed_msec: f64,
        retries: u32,
    },
    /// The Summarizer's result (or failure), with the retries its calls took.
    SummaryReady {
        generation: u64,
        purpose: SummaryPurpose,
        result: Box<Result<SummaryOutcome, String>>,
        retries: u32,
    },
    /// The short-summary fallback's reply; `screen_tail` is what it was shown.
    ShortSummaryReplied {
        generation: u64,
        result: Result<LlmResponse, LlmError>,
        elapsed_msec: f64,
        screen_tail: String,
        retries: u32,
    },
    /// Types command `index` of the current reply (or, past the last one, observes the terminal).
    RunCommand {
        generation: u64,
        index: usize,
    },
    /// With `early_return`: checks whether the terminal is idle before the wait is over.
    ProbeIdle {
        generation: u64,
        index: usize,
        deadline: Instant,
        last_screen: Option<String>,
        stable: u32,
    },
    CommandWaitOver {
        generation: u64,
        index: usize,
    },
    /// The agent's time limit is reached.
    AgentDeadline {
        generation: u64,
    },
    /// The oracle or nop agent is done.
    AgentRan {
        generation: u64,
        error: Option<ExceptionInfo>,
    },
    VerificationDone {
        rewards: Result<BTreeMap<String, f64>, ExceptionInfo>,
    },
    TornDown,
    /// Stop as soon as possible: the job is being cancelled.
    Cancel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Provisioning,
    Agent,
    Verifying,
    TearingDown,
}

pub struct TrialState {
    ctx: Arc<JobContext>,
    plan: TrialPlan,
    agent: AgentSpec,
    trial_name: TrialName,
    trial_dir: PathBuf,
    llm: Option<ActorRef<LlmMsg>>,
    supervisor: ActorRef<SupervisorMsg>,
    stage: Stage,
    generation: u64,
    cancelled: bool,
    task: Option<Task>,
    container: Option<Container>,
    tmux: Option<ActorRef<TmuxMsg>>,
    recording: bool,
    summarizer: Option<ActorRef<SummarizerMsg>>,
    agent_loop: Option<AgentLoop>,
    /// The commands of the reply being carried out.
    commands: Vec<Command>,
    /// The current query follows a context-overflow summarization: if it fails, the turn goes on
    /// with a stand-in reply instead of ending the trial (the reference's last resort).
    after_overflow: bool,
    /// Retries of this trial's model calls, summarization included.
    llm_retries: u32,
    /// Why the agent stopped early without an error (e.g. its cost limit), for the metadata.
    stop_reason: Option<&'static str>,
    timings: Timings,
    result: TrialResult,
}

/// Where a trial's time goes, for `agent_result.metadata.timings` (the benchmark reads them).
#[derive(Debug, Default)]
struct Timings {
    /// When the last model reply arrived (None while a call or a summarization is in flight).
    reply_at: Option<Instant>,
    /// When the current command's wait began.
    wait_started: Option<Instant>,
    /// Time spent in command waits since the last reply.
    waited_since_reply: Duration,
    /// Per episode: from a model reply to the next request, minus the waits in between.
    loop_overhead_msec: Vec<f64>,
    tmux_send_keys_msec: Vec<f64>,
    tmux_capture_msec: Vec<f64>,
    requested_wait_sec: f64,
    waited_sec: f64,
}

impl Timings {
    fn end_wait(&mut self) {
        if let Some(started) = self.wait_started.take() {
            let waited = started.elapsed();
            self.waited_since_reply += waited;
            self.waited_sec += waited.as_secs_f64();
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "loop_overhead_msec": self.loop_overhead_msec,
            "tmux_send_keys_msec": self.tmux_send_keys_msec,
            "tmux_capture_msec": self.tmux_capture_msec,
            "requested_wait_sec": self.requested_wait_sec,
            "waited_sec": self.waited_sec,
        })
    }
}

impl TrialState {
    fn agent_dir(&self) -> PathBuf {
        self.trial_dir.join("agent")
    }

    fn episode_dir(&self) -> PathBuf {
        let episode = self.agent_loop.as_ref().map_or(0, AgentLoop::episode);
        self.agent_dir().join(format!("episode-{episode}"))
    }

    fn progress(&self, phase: TrialPhase, episode: Option<u32>) {
        let usage = self.agent_loop.as_ref().map(|l| {
            let totals = l.final_totals();
            ProgressUsage {
                input_tokens: totals.input_tokens,
                output_tokens: totals.output_tokens,
                cost_usd: totals.cost_usd,
            }
        });
        let trial_name = self.trial_name.clone();
        let _ = self.supervisor.cast(SupervisorMsg::TrialProgress { trial_name, phase, episode, usage });
    }

    fn uses_oracle_model(&self) -> bool {
        matches!(self.agent.kind, AgentKind::Terminus2(_))
            && self.agent.model_name.as_deref() == Some(terminus_llm::provider::ORACLE_MODEL)
    }

    fn needs_solution(&self) -> bool {
        matches!(self.agent.kind, AgentKind::Oracle) || self.uses_oracle_model()
    }

    fn agent_user(&self) -> Option<String> {
        self.task.as_ref().and_then(|t| t.config.agent.user.as_ref()).map(ToString::to_string)
    }

    fn summarize_enabled(&self) -> bool {
        self.agent_loop.as_ref().is_some_and(|l| l.settings().enable_summarize)
    }
}

impl Actor for TrialActor {
    type Msg = TrialMsg;
    type State = TrialState;
    type Arguments = TrialArgs;

    async fn pre_start(&self, _myself: ActorRef<TrialMsg>, args: TrialArgs) -> Result<TrialState, ActorProcessingErr> {
        let agent = args.ctx.spec.agents[args.plan.agent_idx].clone();
        let trial_dir = args.ctx.job_dir.join(args.trial_name.as_str());
        let mut result = new_result(&args.ctx, &args.plan, &agent, &args.trial_name, &trial_dir);
        result.retries = args.retries;
        result.restarts = args.restarts;
        Ok(TrialState {
            ctx: args.ctx,
            plan: args.plan,
            agent,
            trial_name: args.trial_name,
            trial_dir,
            llm: args.llm,
            supervisor: args.supervisor,
            stage: Stage::Provisioning,
            generation: 0,
            cancelled: false,
            task: None,
            container: None,
            tmux: None,
            recording: false,
            summarizer: None,
            agent_loop: None,
            commands: Vec::new(),
            after_overflow: false,
            llm_retries: 0,
            stop_reason: None,
            timings: Timings::default(),
            result,
        })
    }

    async fn post_start(&self, myself: ActorRef<TrialMsg>, state: &mut TrialState) -> Result<(), ActorProcessingErr> {
        // A restart of a crashed trial starts from a clean directory.
        // A restart starts from a clean directory; earlier failed attempts stay in `attempts/`.
        clear_dir_except(&state.trial_dir, "attempts")?;
        for sub in ["agent", "verifier"] {
            std::fs::create_dir_all(state.trial_dir.join(sub))?;
        }
        files::write_json(
            &state.trial_dir.join("config.json"),
            &trial_config(&state.ctx, &state.plan, &state.agent, &state.trial_name),
        )?;
        state.result.started_at = Some(terminus_core::time::now());
        state.result.environment_setup = Some(TimingInfo::started());
        state.progress(TrialPhase::Preparing, None);
        tracing::info!(trial = %state.trial_name, task = %state.plan.task.name, agent = %state.agent.name, model = ?state.agent.model_name, "trial started");
        let ctx = state.ctx.clone();
        let plan = state.plan.clone();
        let name = state.trial_name.clone();
        let needs_solution = state.needs_solution();
        let supervisor = state.supervisor.clone();
        tokio::spawn(async move {
            let provisioned = environment::provision(&ctx, &plan, &name, needs_solution, &supervisor).await;
            let _ = myself.send_message(TrialMsg::EnvironmentReady(Box::new(provisioned)));
        });
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<TrialMsg>,
        msg: TrialMsg,
        state: &mut TrialState,
    ) -> Result<(), ActorProcessingErr> {
        let current = state.generation;
        match msg {
            TrialMsg::EnvironmentReady(provisioned) => on_environment_ready(&myself, state, *provisioned).await,
            TrialMsg::AskModel { generation } if generation == current => ask_model(&myself, state).await,
            TrialMsg::QueryModel { generation } if generation == current => query_model(&myself, state),
            TrialMsg::ModelReplied { generation, result, elapsed_msec, retries } if generation == current => {
                state.llm_retries += retries;
                on_model_reply(&myself, state, result, elapsed_msec).await
            }
            TrialMsg::SummaryReady { generation, purpose, result, retries } if generation == current => {
                state.summarizer = None;
                state.llm_retries += retries;
                on_summary(&myself, state, purpose, *result).await
            }
            TrialMsg::ShortSummaryReplied { generation, result, elapsed_msec, screen_tail, retries }
                if generation == current =>
            {
                state.llm_retries += retries;
                on_short_summary(&myself, state, result, elapsed_msec, &screen_tail)
            }
            TrialMsg::RunCommand { generation, index } if generation == current => {
                run_command(&myself, state, index).await
            }
            TrialMsg::ProbeIdle { generation, index, deadline, last_screen, stable } if generation == current => {
                probe_idle(&myself, state, index, deadline, last_screen, stable).await
            }
            TrialMsg::CommandWaitOver { generation, index } if generation == current => {
                state.timings.end_wait();
                let _ = myself.send_message(TrialMsg::RunCommand { generation, index: index + 1 });
            }
            TrialMsg::AgentDeadline { generation } if generation == current && state.stage == Stage::Agent => {
                let limit =
                    state.ctx.spec.agent_timeout(&state.agent, state.task.as_ref().expect("agent stage has a task"));
                let secs = limit.map_or(0.0, |d| d.as_secs_f64());
                tracing::warn!(trial = %state.trial_name, "agent timed out after {secs:.0} s");
                let info =
                    ExceptionInfo::new("AgentTimeoutError", format!("Agent execution timed out after {secs} seconds"));
                finish_agent(&myself, state, Some(info)).await;
            }
            TrialMsg::AgentRan { generation, error } if generation == current => {
                finish_agent(&myself, state, error).await
            }
            TrialMsg::VerificationDone { rewards } => {
                if let Some(timing) = state.result.verifier.as_mut() {
                    timing.finish();
                }
                if let Err(info) = &rewards
                    && !state.cancelled
                    && environment_lost(state, true).await
                {
                    report_lost(&myself, state, &info.exception_message);
                    return Ok(());
                }
                match rewards {
                    Ok(rewards) => state.result.verifier_result = Some(VerifierResult { rewards: Some(rewards) }),
                    Err(info) => state.result.record_error(info),
                }
                teardown(&myself, state);
            }
            TrialMsg::TornDown => {
                state.result.finished_at = Some(terminus_core::time::now());
                match &state.result.exception_info {
                    Some(info) => {
                        tracing::info!(trial = %state.trial_name, error = %info.exception_type, reward = ?state.result.reward(), "trial finished with an error: {}", info.exception_message)
                    }
                    None => {
                        tracing::info!(trial = %state.trial_name, reward = ?state.result.reward(), "trial finished")
                    }
                }
                if let Some(info) = &state.result.exception_info {
                    files::write_text_logged(&state.trial_dir.join("exception.txt"), &info.exception_traceback);
                }
                files::write_json(&state.trial_dir.join("result.json"), &state.result)?;
                let _ = state.supervisor.cast(SupervisorMsg::TrialFinished(Box::new(state.result.clone())));
                myself.stop(None);
            }
            TrialMsg::Cancel if !state.cancelled => {
                state.cancelled = true;
                state.result.record_error(ExceptionInfo::new("CancelledError", "the job was cancelled"));
                // While provisioning, the provisioning task reports back and teardown starts then.
                if matches!(state.stage, Stage::Agent | Stage::Verifying) {
                    state.generation += 1;
                    stop_agent(state);
                    teardown(&myself, state);
                }
            }
            // A message from an earlier generation: the trial has moved on.
            _ => {}
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<TrialMsg>,
        event: SupervisionEvent,
        state: &mut TrialState,
    ) -> Result<(), ActorProcessingErr> {
        // Children: the TmuxSession and a Summarizer. Their normal stops are expected; a failure
        // is handled here (the default would stop this actor without cleanup).
        if let SupervisionEvent::ActorFailed(cell, error) = event {
            let id: ActorId = cell.get_id();
            if state.summarizer.as_ref().is_some_and(|s| s.get_id() == id) {
                state.summarizer = None;
                let generation = state.generation;
                let result = Box::new(Err(format!("the summarizer failed: {error}")));
                // Which purpose does not matter for a failure only when no overflow is pending;
                // an overflow always waits on a summarizer, so report it as one.
                let purpose = if state.after_overflow { SummaryPurpose::Overflow } else { SummaryPurpose::Proactive };
                let _ = myself.send_message(TrialMsg::SummaryReady { generation, purpose, result, retries: 0 });
            } else if state.stage == Stage::Agent {
                state.tmux = None;
                let info = ExceptionInfo::new("TmuxSessionError", format!("the tmux session actor failed: {error}"));
                finish_agent(&myself, state, Some(info)).await;
            }
        }
        Ok(())
    }
}

/// Builds the result record as it stands before anything ran.
pub(crate) fn new_result(
    ctx: &JobContext,
    plan: &TrialPlan,
    agent: &AgentSpec,
    name: &TrialName,
    trial_dir: &std::path::Path,
) -> TrialResult {
    TrialResult {
        id: uuid::Uuid::new_v4().to_string(),
        task_name: plan.task.name.clone(),
        trial_name: name.clone(),
        trial_uri: format!("file://{}", trial_dir.display()),
        task_id: TaskIdRecord { path: plan.task.path.display().to_string() },
        source: plan.task.source.clone(),
        task_checksum: None,
        config: trial_config(ctx, plan, agent, name),
        agent_info: AgentInfo {
            name: agent.name.clone(),
            version: agent.version().to_string(),
            model_info: agent.model_name.as_deref().map(ModelInfo::from_model_name),
        },
        agent_result: None,
        verifier_result: None,
        exception_info: None,
        started_at: None,
        finished_at: None,
        environment_setup: None,
        agent_setup: None,
        agent_execution: None,
        verifier: None,
        retries: 0,
        restarts: 0,
    }
}

/// The trial's `config.json` (Harbor's TrialConfig shape), secrets redacted.
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

pub(crate) fn trial_config(ctx: &JobContext, plan: &TrialPlan, agent: &AgentSpec, name: &TrialName) -> Value {
    let spec = &ctx.spec;
    let mut value = json!({
        "task": {"path": plan.task.path.display().to_string(), "source": plan.task.source},
        "trial_name": name.as_str(),
        "trials_dir": ctx.job_dir.display().to_string(),
        "agent_timeout_multiplier": spec.multipliers.agent,
        "verifier_timeout_multiplier": spec.multipliers.verifier,
        "agent_setup_timeout_multiplier": spec.multipliers.agent_setup,
        "environment_build_timeout_multiplier": spec.multipliers.environment_build,
        "agent": {
            "name": agent.name,
            "model_name": agent.model_name,
            "override_timeout_sec": agent.override_timeout_sec,
            "max_timeout_sec": agent.max_timeout_sec,
            "kwargs": agent.kwargs,
            "env": agent.env,
        },
        "environment": {"type": "docker", "force_build": spec.force_build, "delete": spec.delete},
        "verifier": {"disable": spec.verifier_disable, "override_timeout_sec": spec.verifier_override_timeout_sec},
        "attempt": plan.attempt,
        "agent_index": plan.agent_idx,
        "job_id": ctx.job_id.to_string(),
    });
    redact_json(&mut value);
    value
}

/// Test hook for the supervision tests and the chaos suite: `TERMINUS_CHAOS_PANIC_TASK=<task>`
/// makes the first run (not a restart) of that task's trials panic once their container exists.
fn chaos_panic(state: &TrialState) {
    if state.result.restarts == 0
        && std::env::var("TERMINUS_CHAOS_PANIC_TASK").is_ok_and(|task| !task.is_empty() && task == state.plan.task.name)
    {
        panic!("chaos: TERMINUS_CHAOS_PANIC_TASK={} (a test hook)", state.plan.task.name);
    }
}

async fn on_environment_ready(myself: &ActorRef<TrialMsg>, state: &mut TrialState, provisioned: Provisioned) {
    if let Some(timing) = state.result.environment_setup.as_mut() {
        timing.finish();
    }
    if let Some(task) = &provisioned.task {
        state.result.task_name = task.name.clone();
        state.result.task_checksum = task.checksum().ok();
    }
    state.task = provisioned.task;
    state.container = provisioned.container;
    if let Some(error) = provisioned.error {
        // The engine itself is away (dockerd restarting): this is no fault of the trial. Hand
        // it back to the Supervisor, which queues it again and waits for the engine.
        let engine_side = matches!(error.exception_type.as_str(), "EnvironmentStartError" | "EnvironmentBuildError");
        if engine_side && !state.cancelled && !state.ctx.engine.ping().await {
            return report_engine_unavailable(myself, state, &error.exception_message);
        }
        state.result.record_error(error);
    }
    if state.cancelled || state.result.exception_info.is_some() {
        teardown(myself, state);
        return;
    }
    chaos_panic(state);
    state.stage = Stage::Agent;
    state.progress(TrialPhase::StartingEnvironment, None);
    let task = state.task.clone().expect("a provisioned trial has its task");
    let container = state.container.clone().expect("a provisioned trial has its container");
    state.result.agent_setup = Some(TimingInfo::started());
    if let Some(limit) = state.ctx.spec.agent_timeout(&state.agent, &task) {
        let generation = state.generation;
        myself.send_after(limit, move || TrialMsg::AgentDeadline { generation });
    }
    match state.agent.kind.clone() {
        AgentKind::Terminus2(opts) => {
            let size = match PaneSize::new(opts.pane_width as i64, opts.pane_height as i64) {
                Ok(size) => size,
                Err(e) => return finish_agent(myself, state, Some(ExceptionInfo::new("ValueError", e))).await,
            };
            let args = TmuxSessionArgs {
                container,
                user: state.agent_user(),
                size,
                extra_env: state.agent.env.clone(),
                record: opts.record_terminal_session,
            };
            let setup_limit = state.ctx.spec.agent_setup_timeout(&state.agent);
            let spawned =
                tokio::time::timeout(setup_limit, Actor::spawn_linked(None, TmuxSessionActor, args, myself.get_cell()))
                    .await;
            let tmux = match spawned {
                Ok(Ok((tmux, _))) => tmux,
                Ok(Err(e)) => {
                    let info = ExceptionInfo::new("TmuxSessionError", format!("failed to start the tmux session: {e}"));
                    return finish_agent(myself, state, Some(info)).await;
                }
                Err(_) => {
                    let message = format!("Agent setup timed out after {} seconds", setup_limit.as_secs_f64());
                    return finish_agent(myself, state, Some(ExceptionInfo::new("AgentSetupTimeoutError", message)))
                        .await;
                }
            };
            state.tmux = Some(tmux.clone());
            let recording_started = match tmux.call(TmuxMsg::RecordingStartedAt, Some(TMUX_RPC_TIMEOUT)).await {
                Ok(CallResult::Success(at)) => at,
                _ => None,
            };
            state.recording = recording_started.is_some();
            let screen = match tmux.call(TmuxMsg::IncrementalOutput, Some(TMUX_RPC_TIMEOUT)).await {
                Ok(CallResult::Success(Ok(screen))) => screen,
                other => return finish_agent(myself, state, Some(tmux_error("capture the first screen", other))).await,
            };
            let model_name = state.agent.model_name.clone().unwrap_or_default();
            let model_info = opts.model_info(&model_name);
            let settings = LoopSettings {
                model_name: model_name.clone(),
                temperature: opts.temperature,
                max_turns: opts.max_turns,
                llm_call_kwargs: opts.llm_call_kwargs.clone(),
                session_id: opts.session_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                format: Format::from_name(&opts.parser_name),
                raw_content: opts.raw_content,
                linear_history: opts.linear_history,
                interleaved_thinking: opts.interleaved_thinking,
                store_all_messages: opts.store_all_messages,
                enable_summarize: opts.enable_summarize,
                proactive_summarization_threshold: opts.proactive_summarization_threshold,
                context_limit: model_info.context_limit(),
                output_limit: model_info.max_output_tokens,
            };
            let mut agent_loop = AgentLoop::new(settings);
            if let Some(at) = recording_started {
                agent_loop.set_recording_started(at);
            }
            agent_loop.start(&task.instruction, &screen);
            state.agent_loop = Some(agent_loop);
            begin_agent_execution(state);
            let _ = myself.send_message(TrialMsg::AskModel { generation: state.generation });
        }
        AgentKind::Oracle => {
            begin_agent_execution(state);
            let generation = state.generation;
            let timeout = state.ctx.spec.agent_timeout(&state.agent, &task);
            let user = state.agent_user();
            let agent_dir = state.agent_dir();
            let myself = myself.clone();
            tokio::spawn(async move {
                let script = "chmod +x /solution/solve.sh; (/solution/solve.sh) > /logs/agent/oracle.txt 2>&1";
                let options =
                    ExecOptions { user, env: vec!["DEBIAN_FRONTEND=noninteractive".into()], workdir: None, timeout };
                let error = match container.exec(script, &options).await {
                    Ok(out) => {
                        if out.exit_code != Some(0) {
                            let code = out.exit_code.unwrap_or(-1).to_string();
                            files::write_text_logged(&agent_dir.join("exit-code.txt"), &code);
                        }
                        None
                    }
                    // The deadline message reports it.
                    Err(terminus_sandbox::SandboxError::Timeout { .. }) => None,
                    Err(e) => Some(ExceptionInfo::new("RuntimeError", e.to_string())),
                };
                let _ = myself.send_message(TrialMsg::AgentRan { generation, error });
            });
        }
        AgentKind::Nop => {
            begin_agent_execution(state);
            let _ = myself.send_message(TrialMsg::AgentRan { generation: state.generation, error: None });
        }
    }
}

fn begin_agent_execution(state: &mut TrialState) {
    if let Some(timing) = state.result.agent_setup.as_mut() {
        timing.finish();
    }
    state.result.agent_execution = Some(TimingInfo::started());
    state.progress(TrialPhase::RunningAgent, None);
}

/// Starts an episode: checks the session, summarises proactively if the context is nearly full,
/// then queries the model.
async fn ask_model(myself: &ActorRef<TrialMsg>, state: &mut TrialState) {
    let Some(agent_loop) = state.agent_loop.as_mut() else { return };
    let Some(episode) = agent_loop.begin_episode() else {
        tracing::info!(trial = %state.trial_name, "max_turns reached");
        return finish_agent(myself, state, None).await;
    };
    if let Some(tmux) = &state.tmux {
        // The reference ends the run quietly when the session is gone.
        if !matches!(tmux.call(TmuxMsg::IsAlive, Some(TMUX_RPC_TIMEOUT)).await, Ok(CallResult::Success(true))) {
            tracing::warn!(trial = %state.trial_name, "the tmux session has ended; stopping the agent");
            return finish_agent(myself, state, None).await;
        }
    }
    if let (AgentKind::Terminus2(opts), Some(agent_loop)) = (&state.agent.kind, &state.agent_loop)
        && let Some(limit) = opts.max_cost_usd
        && agent_loop.final_totals().cost_usd >= limit
    {
        tracing::info!(trial = %state.trial_name, limit, "the trial's cost limit is reached; stopping the agent");
        state.stop_reason = Some("max_cost_usd");
        return finish_agent(myself, state, None).await;
    }
    state.progress(TrialPhase::RunningAgent, Some(episode as u32));
    state.after_overflow = false;
    if state.agent_loop.as_ref().is_some_and(AgentLoop::wants_proactive_summary) {
        tracing::info!(trial = %state.trial_name, episode, "context nearly full; summarizing proactively");
        return start_summarization(myself, state, SummaryPurpose::Proactive).await;
    }
    query_model(myself, state);
}

/// Sends the current prompt to the LLM actor; the reply arrives as `ModelReplied`.
fn query_model(myself: &ActorRef<TrialMsg>, state: &mut TrialState) {
    let Some(agent_loop) = state.agent_loop.as_ref() else { return };
    if let Some(reply_at) = state.timings.reply_at.take() {
        let overhead = reply_at.elapsed().saturating_sub(std::mem::take(&mut state.timings.waited_since_reply));
        state.timings.loop_overhead_msec.push(overhead.as_secs_f64() * 1000.0);
    }
    files::write_text_logged(&state.episode_dir().join("prompt.txt"), agent_loop.prompt());
    let request = agent_loop.request();
    let Some(llm) = state.llm.clone() else {
        let info = ExceptionInfo::new("RuntimeError", "no LLM actor for this agent");
        let _ = myself.send_message(TrialMsg::AgentRan { generation: state.generation, error: Some(info) });
        return;
    };
    let generation = state.generation;
    let trial = state.trial_name.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        let (result, retries, elapsed_msec) = complete(&llm, &trial, request).await;
        let _ = myself.send_message(TrialMsg::ModelReplied { generation, result, elapsed_msec, retries });
    });
}

/// One call through the LLM actor, with the number of retries it took.
/// One model call through the LLM actor: its result, the retries it took, and its wall time in
/// milliseconds (for `api_request_times_msec`).
async fn complete(
    llm: &ActorRef<LlmMsg>,
    trial: &TrialName,
    request: LlmRequest,
) -> (Result<LlmResponse, LlmError>, u32, f64) {
    let started = Instant::now();
    let trial = Some(trial.clone());
    let (result, retries) =
        match llm.call(|reply| LlmMsg::Complete { request, trial, reply }, Some(LLM_CALL_TIMEOUT)).await {
            Ok(CallResult::Success(reply)) => (reply.result, reply.retries),
            Ok(CallResult::Timeout) => {
                (Err(LlmError::Transient(format!("no reply within {} s", LLM_CALL_TIMEOUT.as_secs()))), 0)
            }
            Ok(CallResult::SenderError) | Err(_) => (Err(LlmError::Cancelled), 0),
        };
    (result, retries, started.elapsed().as_secs_f64() * 1000.0)
}

fn write_response_logs(state: &TrialState, response: &LlmResponse) {
    let episode_dir = state.episode_dir();
    files::write_text_logged(&episode_dir.join("response.txt"), &response.content);
    if let Some(debug) = &response.debug {
        let mut debug = debug.clone();
        redact_json(&mut debug);
        files::write_text_logged(
            &episode_dir.join("debug.json"),
            &serde_json::to_string_pretty(&debug).unwrap_or_default(),
        );
    }
}

async fn on_model_reply(
    myself: &ActorRef<TrialMsg>,
    state: &mut TrialState,
    result: Result<LlmResponse, LlmError>,
    elapsed_msec: f64,
) {
    let after_overflow = std::mem::take(&mut state.after_overflow);
    let response = match result {
        Ok(response) => response,
        Err(LlmError::ContextLengthExceeded(message)) if state.summarize_enabled() && !after_overflow => {
            let agent_loop = state.agent_loop.as_mut().expect("replies arrive only while the loop runs");
            let dropped = agent_loop.unwind();
            tracing::warn!(trial = %state.trial_name, dropped, "context length exceeded ({message}); summarizing");
            return start_summarization(myself, state, SummaryPurpose::Overflow).await;
        }
        Err(LlmError::OutputLengthExceeded { truncated, usage }) => {
            let agent_loop = state.agent_loop.as_mut().expect("replies arrive only while the loop runs");
            match agent_loop.salvage(&truncated) {
                Some(salvaged) => LlmResponse { content: salvaged, usage, ..LlmResponse::default() },
                None => {
                    if !agent_loop.on_truncated(&truncated, usage.as_ref(), elapsed_msec) {
                        let info = ExceptionInfo::new(
                            "OutputLengthExceededError",
                            "the model's replies kept exceeding the output limit",
                        );
                        return finish_agent(myself, state, Some(info)).await;
                    }
                    let message = agent_loop.prompt().to_string();
                    files::write_text_logged(&state.episode_dir().join("response.txt"), &message);
                    state.after_overflow = after_overflow;
                    return query_model(myself, state);
                }
            }
        }
        Err(error) if after_overflow && !matches!(error, LlmError::Cancelled) => {
            // The reference's last resort: a stand-in reply, outside the history.
            tracing::warn!(trial = %state.trial_name, %error, "the call after summarization failed; continuing");
            let response =
                LlmResponse { content: prompts::TECHNICAL_DIFFICULTIES.to_string(), ..LlmResponse::default() };
            write_response_logs(state, &response);
            let agent_loop = state.agent_loop.as_mut().expect("replies arrive only while the loop runs");
            let reply = agent_loop.on_response(response, 0.0, false);
            return act_on_reply(myself, state, reply);
        }
        Err(error) => {
            let message = match &error {
                LlmError::ContextLengthExceeded(_) => format!("{error} (enable_summarize is off)"),
                _ => error.to_string(),
            };
            return finish_agent(myself, state, Some(ExceptionInfo::new(error.exception_type(), message))).await;
        }
    };
    write_response_logs(state, &response);
    state.timings.reply_at = Some(Instant::now());
    state.timings.waited_since_reply = Duration::ZERO;
    let agent_loop = state.agent_loop.as_mut().expect("replies arrive only while the loop runs");
    let reply = agent_loop.on_response(response, elapsed_msec, true);
    act_on_reply(myself, state, reply);
}

fn act_on_reply(myself: &ActorRef<TrialMsg>, state: &mut TrialState, reply: Reply) {
    write_segments(state);
    match reply {
        Reply::Reprompt => {
            let _ = myself.send_message(TrialMsg::AskModel { generation: state.generation });
        }
        Reply::Execute(commands) => {
            state.commands = commands;
            let _ = myself.send_message(TrialMsg::RunCommand { generation: state.generation, index: 0 });
        }
    }
}

/// Starts the Summarizer (or, with nothing to summarise, hands over the raw instruction).
async fn start_summarization(myself: &ActorRef<TrialMsg>, state: &mut TrialState, purpose: SummaryPurpose) {
    // Summarizing is model time, not loop overhead.
    state.timings.reply_at = None;
    let agent_loop = state.agent_loop.as_mut().expect("summaries happen only while the loop runs");
    let Some(job) = agent_loop.begin_summarization() else {
        agent_loop.handoff_instruction();
        state.after_overflow = purpose == SummaryPurpose::Overflow;
        return query_model(myself, state);
    };
    let Some(llm) = state.llm.clone() else { return };
    state.after_overflow = purpose == SummaryPurpose::Overflow;
    let args = SummarizerArgs {
        job,
        trial: state.trial_name.clone(),
        llm,
        tmux: state.tmux.clone(),
        logs_dir: state.agent_dir(),
        reply_to: myself.clone(),
        generation: state.generation,
        purpose,
    };
    // Spawning runs the Summarizer's (instant) pre_start; the calls happen in its own task.
    match Actor::spawn_linked(None, SummarizerActor, args, myself.get_cell()).await {
        Ok((summarizer, _)) => state.summarizer = Some(summarizer),
        Err(e) => {
            let generation = state.generation;
            let result = Box::new(Err(format!("the summarizer could not start: {e}")));
            let _ = myself.send_message(TrialMsg::SummaryReady { generation, purpose, result, retries: 0 });
        }
    }
}

async fn on_summary(
    myself: &ActorRef<TrialMsg>,
    state: &mut TrialState,
    purpose: SummaryPurpose,
    result: Result<SummaryOutcome, String>,
) {
    let agent_loop = state.agent_loop.as_mut().expect("summaries happen only while the loop runs");
    match result {
        Ok(outcome) => {
            agent_loop.apply_summary(&outcome);
            tracing::info!(trial = %state.trial_name, count = agent_loop.summarization_count(), "summarization handed over");
            state.after_overflow = purpose == SummaryPurpose::Overflow;
            query_model(myself, state);
        }
        Err(error) if purpose == SummaryPurpose::Proactive => {
            // A failed proactive summary is not fatal: the episode goes on with its prompt.
            tracing::error!(trial = %state.trial_name, %error, "proactive summarization failed");
            query_model(myself, state);
        }
        Err(error) => {
            tracing::error!(trial = %state.trial_name, %error, "summarization after a context overflow failed; trying a short summary");
            let screen = match &state.tmux {
                Some(tmux) => {
                    match tmux.call(|reply| TmuxMsg::CapturePane { entire: false, reply }, Some(TMUX_RPC_TIMEOUT)).await
                    {
                        Ok(CallResult::Success(Ok(screen))) => screen,
                        _ => String::new(),
                    }
                }
                None => String::new(),
            };
            let chars: Vec<char> = screen.chars().collect();
            let screen_tail: String = chars[chars.len().saturating_sub(FALLBACK_SCREEN_CHARS)..].iter().collect();
            let prompt = prompts::short_summary_prompt(agent_loop.original_instruction(), &screen_tail);
            let settings = agent_loop.settings();
            let request = LlmRequest {
                messages: vec![ChatMessage::user(prompt)],
                temperature: Some(settings.temperature),
                extra: settings.llm_call_kwargs.clone(),
            };
            let Some(llm) = state.llm.clone() else { return };
            let generation = state.generation;
            let trial = state.trial_name.clone();
            let myself = myself.clone();
            tokio::spawn(async move {
                let (result, retries, elapsed_msec) = complete(&llm, &trial, request).await;
                let _ = myself.send_message(TrialMsg::ShortSummaryReplied {
                    generation,
                    result,
                    elapsed_msec,
                    screen_tail,
                    retries,
                });
            });
        }
    }
}

fn on_short_summary(
    myself: &ActorRef<TrialMsg>,
    state: &mut TrialState,
    result: Result<LlmResponse, LlmError>,
    elapsed_msec: f64,
    screen_tail: &str,
) {
    let agent_loop = state.agent_loop.as_mut().expect("summaries happen only while the loop runs");
    let instruction = agent_loop.original_instruction().to_string();
    let prompt = match result {
        Ok(response) => {
            // Counted with the subagents (the reference counts this call nowhere).
            agent_loop.record_subagent_call(response.usage.as_ref(), elapsed_msec);
            prompts::short_summary_restart(&instruction, &response.content)
        }
        Err(error) => {
            tracing::error!(trial = %state.trial_name, %error, "the short summary failed too; restarting from the instruction");
            prompts::ultimate_fallback_prompt(&instruction, screen_tail)
        }
    };
    agent_loop.set_fallback_prompt(prompt);
    state.after_overflow = true;
    query_model(myself, state);
}

async fn run_command(myself: &ActorRef<TrialMsg>, state: &mut TrialState, index: usize) {
    let Some(tmux) = state.tmux.clone() else { return };
    let generation = state.generation;
    if let Some(command) = state.commands.get(index).cloned() {
        if !command.keystrokes.is_empty() {
            let keys = vec![command.keystrokes.clone()];
            let started = Instant::now();
            let sent = tmux.call(|reply| TmuxMsg::SendKeys { keys, reply }, Some(TMUX_RPC_TIMEOUT)).await;
            state.timings.tmux_send_keys_msec.push(started.elapsed().as_secs_f64() * 1000.0);
            if !matches!(sent, Ok(CallResult::Success(Ok(())))) {
                return finish_agent(myself, state, Some(tmux_error("send keys", sent))).await;
            }
        }
        let wait = Duration::from_secs_f64(command.duration);
        state.timings.requested_wait_sec += command.duration;
        state.timings.wait_started = Some(Instant::now());
        let early = matches!(&state.agent.kind, AgentKind::Terminus2(opts) if opts.early_return);
        if early && wait > IDLE_PROBE_INTERVAL {
            let deadline = Instant::now() + wait;
            myself.send_after(IDLE_PROBE_INTERVAL, move || TrialMsg::ProbeIdle {
                generation,
                index,
                deadline,
                last_screen: None,
                stable: 0,
            });
        } else {
            myself.send_after(wait, move || TrialMsg::CommandWaitOver { generation, index });
        }
        return;
    }
    let started = Instant::now();
    let captured = tmux.call(TmuxMsg::IncrementalOutput, Some(TMUX_RPC_TIMEOUT)).await;
    state.timings.tmux_capture_msec.push(started.elapsed().as_secs_f64() * 1000.0);
    let output = match captured {
        Ok(CallResult::Success(Ok(output))) => output,
        other => return finish_agent(myself, state, Some(tmux_error("capture the pane", other))).await,
    };
    let agent_loop = state.agent_loop.as_mut().expect("commands run only while the loop runs");
    let next = agent_loop.on_terminal_output(&output);
    write_trajectory(state, false);
    match next {
        Next::Done => finish_agent(myself, state, None).await,
        Next::Continue => {
            let _ = myself.send_message(TrialMsg::AskModel { generation });
        }
    }
}

/// `early_return`: the wait ends once the terminal has looked idle, with the same screen, on
/// [`IDLE_STABLE_PROBES`] probes in a row, or at the requested duration, whichever comes first.
async fn probe_idle(
    myself: &ActorRef<TrialMsg>,
    state: &mut TrialState,
    index: usize,
    deadline: Instant,
    last_screen: Option<String>,
    stable: u32,
) {
    let generation = state.generation;
    let Some(tmux) = state.tmux.clone() else { return };
    let started = Instant::now();
    let (idle, screen) = match tmux.call(TmuxMsg::IdleProbe, Some(TMUX_RPC_TIMEOUT)).await {
        Ok(CallResult::Success(Ok(probe))) => probe,
        // A failed probe is not fatal: fall back to waiting out the duration.
        _ => (false, String::new()),
    };
    let stable = if idle && last_screen.as_deref() == Some(screen.as_str()) { stable + 1 } else { 0 };
    let now = Instant::now();
    if stable >= IDLE_STABLE_PROBES || now >= deadline {
        let _ = myself.send_message(TrialMsg::CommandWaitOver { generation, index });
        return;
    }
    let base = if idle { IDLE_PROBE_INTERVAL } else { BUSY_PROBE_INTERVAL };
    let next = base.max(started.elapsed() * 2).min(deadline - now);
    myself.send_after(next, move || TrialMsg::ProbeIdle {
        generation,
        index,
        deadline,
        last_screen: Some(screen),
        stable,
    });
}

fn tmux_error<T, E>(what: &str, outcome: Result<CallResult<Result<T, String>>, E>) -> ExceptionInfo {
    let detail = match outcome {
        Ok(CallResult::Success(Err(e))) => e,
        Ok(CallResult::Success(Ok(_))) => "unexpected reply".to_string(),
        Ok(CallResult::Timeout) => "no reply in time".to_string(),
        Ok(CallResult::SenderError) | Err(_) => "the tmux session actor is gone".to_string(),
    };
    ExceptionInfo::new("TmuxSessionError", format!("failed to {what}: {detail}"))
}

/// Writes segments a linear-history split closed.
fn write_segments(state: &mut TrialState) {
    let agent_dir = state.agent_dir();
    let Some(agent_loop) = state.agent_loop.as_mut() else { return };
    for (file, trajectory) in agent_loop.take_finished_segments() {
        if let Err(e) = files::write_atomic(&agent_dir.join(file), trajectory.to_json().as_bytes()) {
            tracing::warn!(trial = %state.trial_name, error = %e, "could not write a trajectory segment");
        }
    }
}

/// Writes the current trajectory segment (`final_totals`: with the subagents folded in).
fn write_trajectory(state: &mut TrialState, final_totals: bool) {
    write_segments(state);
    if let Some(agent_loop) = &state.agent_loop {
        let text = agent_loop.trajectory(final_totals).to_json();
        if let Err(e) = files::write_atomic(&state.agent_dir().join(agent_loop.segment_file()), text.as_bytes()) {
            tracing::warn!(trial = %state.trial_name, error = %e, "could not write the trajectory");
        }
    }
}

/// Ends the agent's side activities and fills in what the agent reports (reg-subagent-metrics
/// folded into the totals here, at teardown).
fn stop_agent(state: &mut TrialState) {
    if let Some(summarizer) = state.summarizer.take() {
        summarizer.stop(None);
    }
    if let Some(timing) = state.result.agent_execution.as_mut() {
        timing.finish();
    }
    write_trajectory(state, true);
    if let Some(agent_loop) = &state.agent_loop {
        let totals = agent_loop.final_totals();
        let mut metadata = agent_loop.metadata();
        metadata.insert("llm_retries".into(), json!(state.llm_retries));
        metadata.insert("timings".into(), state.timings.to_json());
        if let Some(reason) = state.stop_reason {
            metadata.insert("stop_reason".into(), json!(reason));
        }
        state.result.agent_result = Some(AgentContext {
            n_input_tokens: Some(totals.input_tokens),
            n_cache_tokens: Some(totals.cache_tokens),
            n_output_tokens: Some(totals.output_tokens),
            cost_usd: (totals.cost_usd > 0.0).then_some(totals.cost_usd),
            rollout_details: Some(agent_loop.rollout_details()),
            metadata: Some(metadata),
        });
    } else if state.result.agent_execution.is_some() {
        state.result.agent_result = Some(AgentContext::default());
    }
}

/// Ends the agent phase. A timeout still goes on to verification (Harbor's rule); any other
/// error skips it.
async fn finish_agent(myself: &ActorRef<TrialMsg>, state: &mut TrialState, error: Option<ExceptionInfo>) {
    if state.stage != Stage::Agent {
        return;
    }
    state.generation += 1;
    stop_agent(state);
    let timed_out = error.as_ref().is_some_and(|info| info.exception_type == "AgentTimeoutError");
    if let Some(info) = &error
        && !timed_out
        && environment_lost(state, environment_error(info)).await
    {
        return report_lost(myself, state, &info.exception_message);
    }
    let verify = error.is_none() || timed_out;
    if let Some(info) = error {
        tracing::warn!(trial = %state.trial_name, error = %info.exception_message, "agent ended with an error");
        state.result.record_error(info);
    }
    if !verify || state.ctx.spec.verifier_disable || state.cancelled {
        return teardown(myself, state);
    }
    state.stage = Stage::Verifying;
    state.progress(TrialPhase::Verifying, None);
    state.result.verifier = Some(TimingInfo::started());
    let task = state.task.clone().expect("the agent stage has a task");
    let container = state.container.clone().expect("the agent stage has a container");
    let timeout = state.ctx.spec.verifier_timeout(&task);
    let verifier_dir = state.trial_dir.join("verifier");
    let tmux = state.tmux.take();
    let recording = state.recording;
    let user = state.agent_user();
    let job_env = state.ctx.spec.verifier_env.clone();
    let myself = myself.clone();
    tokio::spawn(async move {
        let uploaded = if timed_out {
            environment::close_terminal(tmux, recording).await;
            // The deadline bites: nothing the agent started keeps running during the tests,
            // and nothing it left behind sees them arrive.
            environment::stop_agent_processes(&container, user).await;
            environment::upload_tests(&task, &container).await
        } else {
            // The recorder's exit and the upload are independent: overlap them. (Background
            // processes of the agent outlive its terminal either way, as in Harbor.)
            tokio::join!(environment::close_terminal(tmux, recording), environment::upload_tests(&task, &container)).1
        };
        let rewards = match uploaded {
            Ok(()) => environment::verify_task(&task, &container, timeout, &verifier_dir, &job_env).await,
            Err(info) => Err(info),
        };
        let _ = myself.send_message(TrialMsg::VerificationDone { rewards });
    });
}

/// Whether the trial's container is gone (killed, removed, or the engine lost it).
///
/// A kill closes the exec streams a moment before the engine marks the container exited, so an
/// error that smells of the environment (`settle`) is given up to 1.5 s to show up as a dead
/// container; a model or parse error is checked once.
async fn environment_lost(state: &TrialState, settle: bool) -> bool {
    let Some(container) = &state.container else { return false };
    let checks = if settle { 6 } else { 1 };
    for i in 0..checks {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if !container.is_running().await {
            return true;
        }
    }
    false
}

/// Errors that come from the container or its terminal rather than from the model.
fn environment_error(info: &ExceptionInfo) -> bool {
    matches!(info.exception_type.as_str(), "TmuxSessionError" | "EnvironmentError" | "RuntimeError")
        || info.exception_message.contains("container")
}

/// The container or terminal died under the trial: hand it back to the Supervisor, which
/// restarts it in a fresh container (or records the loss), and stop without a result.
fn report_lost(myself: &ActorRef<TrialMsg>, state: &mut TrialState, reason: &str) {
    state.stage = Stage::TearingDown;
    state.generation += 1;
    if let Some(tmux) = state.tmux.take() {
        tmux.stop(None);
    }
    let trial_name = state.trial_name.clone();
    let reason = format!("the trial's container is gone: {reason}");
    let _ = state.supervisor.cast(SupervisorMsg::TrialLost { trial_name, reason });
    myself.stop(None);
}

/// The engine did not answer while the trial prepared its environment: stop without a result
/// and let the Supervisor queue the trial again once the engine is back (no attempt is used).
fn report_engine_unavailable(myself: &ActorRef<TrialMsg>, state: &mut TrialState, reason: &str) {
    state.stage = Stage::TearingDown;
    state.generation += 1;
    let trial_name = state.trial_name.clone();
    let _ = state.supervisor.cast(SupervisorMsg::EngineUnavailable { trial_name, reason: reason.to_string() });
    myself.stop(None);
}

/// Collects the agent's logs from the container and removes it, whatever happened before.
fn teardown(myself: &ActorRef<TrialMsg>, state: &mut TrialState) {
    if state.stage == Stage::TearingDown {
        return;
    }
    state.stage = Stage::TearingDown;
    state.generation += 1;
    state.progress(TrialPhase::TearingDown, None);
    let container = state.container.take();
    let tmux = state.tmux.take();
    let recording = state.recording;
    let markers = state.agent_loop.as_ref().map(|l| l.asciinema_markers().to_vec()).unwrap_or_default();
    let agent_dir = state.agent_dir();
    let artifacts_dir = state.trial_dir.join("artifacts");
    let artifacts = state.ctx.spec.artifacts.clone();
    // Verification downloads all of /logs; only a trial that was not verified fetches them here.
    let logs_collected = state.result.verifier.is_some();
    let myself = myself.clone();
    tokio::spawn(async move {
        environment::close_terminal(tmux, recording).await;
        if let Some(container) = container {
            environment::collect_artifacts(&container, &artifacts, &artifacts_dir).await;
            environment::collect_and_remove(container, &agent_dir, &markers, !logs_collected).await;
        }
        let _ = myself.send_message(TrialMsg::TornDown);
    });
}
