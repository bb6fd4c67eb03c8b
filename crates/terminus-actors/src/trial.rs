//! The Trial actor: one attempt of one agent on one task, from image to result file.
//!
//! Supervised by: the Supervisor. Supervises: its TmuxSession.
//! Owns: the container (removed at the end whatever happened), the Terminus loop state, the
//! trial's result record and its directory.
//!
//! ```text
//! post_start ─► [provision task] ─► EnvironmentReady ─► agent ─► [verify task] ─► VerificationDone ─► [teardown task] ─► TornDown ─► report, stop
//!                                                         │
//!                        Terminus 2: AskModel ─► ModelReplied ─► RunCommand(i) ─► CommandWaitOver(i) ─► … ─► AskModel … ─► agent done
//! ```
//!
//! Nothing slow runs inside a handler: container work and model calls run in spawned tasks that
//! report back with a message, and the waits commands ask for are timers. So a deadline or a
//! cancel is handled within milliseconds. Each in-flight piece of work carries the `generation`
//! it was started in; when a deadline or cancel moves the trial on, the generation changes and
//! late replies are dropped (rust-analyzer's flycheck pattern).
//!
//! Errors are data: an error ends the trial with `exception_info` filled in, never by returning
//! `Err` from a handler (which would skip cleanup).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde_json::{Map, Value, json};
use terminus_agent::{AgentLoop, Command, LoopSettings, Next, Reply};
use terminus_config::job::TrialPlan;
use terminus_config::{AgentKind, AgentSpec, Task};
use terminus_core::events::TrialPhase;
use terminus_core::ids::TrialName;
use terminus_core::result::{
    AgentContext, AgentInfo, ExceptionInfo, ModelInfo, TaskIdRecord, TimingInfo, TrialResult, VerifierResult,
};
use terminus_core::secrets::redact_json;
use terminus_llm::{LlmError, LlmResponse};
use terminus_sandbox::tmux::PaneSize;
use terminus_sandbox::{Container, ContainerSpec, ExecOptions, ImageBuilder, LABEL_JOB_ID, LABEL_TRIAL_ID, archive};

use crate::context::JobContext;
use crate::files;
use crate::llm::LlmMsg;
use crate::supervisor::SupervisorMsg;
use crate::tmux_session::{TmuxMsg, TmuxSessionActor, TmuxSessionArgs};

/// How long a tmux RPC may take.
const TMUX_RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one model call (with its retries) may take before the trial gives up on it.
const LLM_CALL_TIMEOUT: Duration = Duration::from_secs(1800);

pub struct TrialActor;

pub struct TrialArgs {
    pub ctx: Arc<JobContext>,
    pub plan: TrialPlan,
    pub trial_name: TrialName,
    pub llm: Option<ActorRef<LlmMsg>>,
    pub supervisor: ActorRef<SupervisorMsg>,
}

/// What the provisioning task hands back: whatever it got to, and the error that stopped it.
pub struct Provisioned {
    task: Option<Task>,
    container: Option<Container>,
    error: Option<ExceptionInfo>,
}

/// Inbox of [`TrialActor`].
pub enum TrialMsg {
    EnvironmentReady(Box<Provisioned>),
    /// Starts the next episode.
    AskModel {
        generation: u64,
    },
    ModelReplied {
        generation: u64,
        result: Result<LlmResponse, LlmError>,
        elapsed_msec: f64,
    },
    /// Types command `index` of the current reply (or, past the last one, observes the terminal).
    RunCommand {
        generation: u64,
        index: usize,
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
    agent_loop: Option<AgentLoop>,
    /// The commands of the reply being carried out.
    commands: Vec<Command>,
    episode: u64,
    result: TrialResult,
}

impl TrialState {
    fn agent_dir(&self) -> PathBuf {
        self.trial_dir.join("agent")
    }

    fn progress(&self, phase: TrialPhase, episode: Option<u32>) {
        let _ =
            self.supervisor.cast(SupervisorMsg::TrialProgress { trial_name: self.trial_name.clone(), phase, episode });
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
}

impl Actor for TrialActor {
    type Msg = TrialMsg;
    type State = TrialState;
    type Arguments = TrialArgs;

    async fn pre_start(&self, _myself: ActorRef<TrialMsg>, args: TrialArgs) -> Result<TrialState, ActorProcessingErr> {
        let agent = args.ctx.spec.agents[args.plan.agent_idx].clone();
        let trial_dir = args.ctx.job_dir.join(args.trial_name.as_str());
        let result = new_result(&args.ctx, &args.plan, &agent, &args.trial_name, &trial_dir);
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
            agent_loop: None,
            commands: Vec::new(),
            episode: 0,
            result,
        })
    }

    async fn post_start(&self, myself: ActorRef<TrialMsg>, state: &mut TrialState) -> Result<(), ActorProcessingErr> {
        // A retry of a crashed trial starts from a clean directory.
        let _ = std::fs::remove_dir_all(&state.trial_dir);
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
            let provisioned = provision(&ctx, &plan, &name, needs_solution, &supervisor).await;
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
        match msg {
            TrialMsg::EnvironmentReady(provisioned) => on_environment_ready(&myself, state, *provisioned).await,
            TrialMsg::AskModel { generation } if generation == state.generation => ask_model(&myself, state).await,
            TrialMsg::ModelReplied { generation, result, elapsed_msec } if generation == state.generation => {
                on_model_reply(&myself, state, result, elapsed_msec).await
            }
            TrialMsg::RunCommand { generation, index } if generation == state.generation => {
                run_command(&myself, state, index).await
            }
            TrialMsg::CommandWaitOver { generation, index } if generation == state.generation => {
                let _ = myself.send_message(TrialMsg::RunCommand { generation, index: index + 1 });
            }
            TrialMsg::AgentDeadline { generation } if generation == state.generation && state.stage == Stage::Agent => {
                let limit =
                    state.ctx.spec.agent_timeout(&state.agent, state.task.as_ref().expect("agent stage has a task"));
                let secs = limit.map_or(0.0, |d| d.as_secs_f64());
                tracing::warn!(trial = %state.trial_name, "agent timed out after {secs:.0} s");
                finish_agent(
                    &myself,
                    state,
                    Some(ExceptionInfo::new(
                        "AgentTimeoutError",
                        format!("Agent execution timed out after {secs} seconds"),
                    )),
                )
                .await;
            }
            TrialMsg::AgentRan { generation, error } if generation == state.generation => {
                finish_agent(&myself, state, error).await
            }
            TrialMsg::VerificationDone { rewards } => {
                if let Some(timing) = state.result.verifier.as_mut() {
                    timing.finish();
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
                    stop_agent(state).await;
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
        // The only child is the TmuxSession. Its normal stop is expected; a failure mid-run ends
        // the agent with an error (the default would stop this actor without cleanup).
        if let SupervisionEvent::ActorFailed(_, error) = event
            && state.stage == Stage::Agent
        {
            {
                state.tmux = None;
                finish_agent(
                    &myself,
                    state,
                    Some(ExceptionInfo::new("TmuxSessionError", format!("the tmux session actor failed: {error}"))),
                )
                .await;
            }
        }
        Ok(())
    }
}

/// Builds the result record as it stands before anything ran.
fn new_result(
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
    }
}

/// The trial's `config.json` (Harbor's TrialConfig shape), secrets redacted.
fn trial_config(ctx: &JobContext, plan: &TrialPlan, agent: &AgentSpec, name: &TrialName) -> Value {
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
        "job_id": ctx.job_id.to_string(),
    });
    redact_json(&mut value);
    value
}

/// Loads the task, makes its image, starts the container and puts the log directories (and the
/// solution, for the oracles) in place.
async fn provision(
    ctx: &JobContext,
    plan: &TrialPlan,
    name: &TrialName,
    needs_solution: bool,
    supervisor: &ActorRef<SupervisorMsg>,
) -> Provisioned {
    let mut out = Provisioned { task: None, container: None, error: None };
    let task = match Task::load(&plan.task.path) {
        Ok(task) => task,
        Err(e) => {
            out.error = Some(ExceptionInfo::new("TaskLoadError", e.to_string()));
            return out;
        }
    };
    if needs_solution && !task.solution_dir().join("solve.sh").is_file() {
        out.error = Some(ExceptionInfo::new(
            "FileNotFoundError",
            format!("task `{}` has no solution/solve.sh, which the oracle needs", task.name),
        ));
        out.task = Some(task);
        return out;
    }
    let env = &task.config.environment;
    let image = match (&env.docker_image, ctx.spec.force_build) {
        (Some(image), false) => image.clone(),
        _ => {
            let hash = match terminus_config::task::dir_hash(&task.environment_dir()) {
                Ok(hash) => hash,
                Err(e) => {
                    out.error = Some(ExceptionInfo::new(
                        "EnvironmentStartError",
                        format!("cannot read {}: {e}", task.environment_dir().display()),
                    ));
                    out.task = Some(task);
                    return out;
                }
            };
            let tag = ImageBuilder::tag_for(&task.name, &hash);
            if let Err(e) = ctx
                .images
                .ensure(&tag, &task.environment_dir(), ctx.spec.force_build, ctx.spec.build_timeout(&task))
                .await
            {
                out.error = Some(ExceptionInfo::new("EnvironmentBuildError", e.to_string()));
                out.task = Some(task);
                return out;
            }
            tag
        }
    };
    let spec = ContainerSpec {
        image,
        name: format!(
            "terminus-{}-{}",
            &ctx.job_id.to_string()[..8],
            name.as_str()
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "-")
        ),
        labels: [(LABEL_JOB_ID.to_string(), ctx.job_id.to_string()), (LABEL_TRIAL_ID.to_string(), name.to_string())]
            .into_iter()
            .collect(),
        cpus: Some(ctx.spec.override_cpus.unwrap_or(env.cpus)),
        memory_mb: Some(ctx.spec.override_memory_mb.unwrap_or_else(|| env.memory_mb().unwrap_or(2048))),
        no_network: !env.allow_internet,
        env: env.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: env.workdir.clone(),
    };
    let container = match ctx.engine.start_container(&spec).await {
        Ok(container) => container,
        Err(e) => {
            out.error = Some(ExceptionInfo::new("EnvironmentStartError", e.to_string()));
            out.task = Some(task);
            return out;
        }
    };
    let _ = supervisor
        .cast(SupervisorMsg::ContainerStarted { trial_name: name.clone(), container_id: container.id.clone() });
    let upload = async {
        let dirs = archive::tar_dirs_and_files(&["logs", "logs/agent", "logs/verifier", "logs/artifacts"], &[])?;
        container.upload_tar("/", dirs).await?;
        if needs_solution {
            container.upload_tar("/", archive::tar_dir(&task.solution_dir(), "solution")?).await?;
        }
        Ok::<_, terminus_sandbox::SandboxError>(())
    };
    if let Err(e) = upload.await {
        out.error = Some(ExceptionInfo::new("EnvironmentStartError", e.to_string()));
    }
    out.task = Some(task);
    out.container = Some(container);
    out
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
        state.result.record_error(error);
    }
    if state.cancelled || state.result.exception_info.is_some() {
        teardown(myself, state);
        return;
    }
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
                Err(e) => {
                    return finish_agent(myself, state, Some(ExceptionInfo::new("ValueError", e))).await;
                }
            };
            let args = TmuxSessionArgs {
                container,
                user: state.agent_user(),
                size,
                extra_env: state.agent.env.clone(),
                record: opts.record_terminal_session,
            };
            let spawned = Actor::spawn_linked(None, TmuxSessionActor, args, myself.get_cell()).await;
            let tmux = match spawned {
                Ok((tmux, _)) => tmux,
                Err(e) => {
                    return finish_agent(
                        myself,
                        state,
                        Some(ExceptionInfo::new("TmuxSessionError", format!("failed to start the tmux session: {e}"))),
                    )
                    .await;
                }
            };
            state.tmux = Some(tmux.clone());
            let screen = match tmux.call(TmuxMsg::IncrementalOutput, Some(TMUX_RPC_TIMEOUT)).await {
                Ok(CallResult::Success(Ok(screen))) => screen,
                other => {
                    return finish_agent(myself, state, Some(tmux_error("capture the first screen", other))).await;
                }
            };
            let settings = LoopSettings {
                model_name: state.agent.model_name.clone().unwrap_or_default(),
                temperature: opts.temperature,
                max_turns: opts.max_turns,
                llm_call_kwargs: opts.llm_call_kwargs.clone(),
                session_id: opts.session_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            };
            let mut agent_loop = AgentLoop::new(settings);
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
                            files::write_text_logged(
                                &agent_dir.join("exit-code.txt"),
                                &format!("{}", out.exit_code.unwrap_or(-1)),
                            );
                        }
                        None
                    }
                    Err(terminus_sandbox::SandboxError::Timeout { .. }) => None, // the deadline message reports it
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

async fn ask_model(myself: &ActorRef<TrialMsg>, state: &mut TrialState) {
    let Some(agent_loop) = state.agent_loop.as_mut() else {
        return;
    };
    let Some(episode) = agent_loop.begin_episode() else {
        tracing::info!(trial = %state.trial_name, "max_turns reached");
        return finish_agent(myself, state, None).await;
    };
    state.episode = episode;
    if let Some(tmux) = &state.tmux {
        // The reference ends the run quietly when the session is gone.
        if !matches!(tmux.call(TmuxMsg::IsAlive, Some(TMUX_RPC_TIMEOUT)).await, Ok(CallResult::Success(true))) {
            tracing::warn!(trial = %state.trial_name, "the tmux session has ended; stopping the agent");
            return finish_agent(myself, state, None).await;
        }
    }
    let agent_loop = state.agent_loop.as_ref().expect("checked above");
    let episode_dir = state.agent_dir().join(format!("episode-{episode}"));
    files::write_text_logged(&episode_dir.join("prompt.txt"), agent_loop.prompt());
    state.progress(TrialPhase::RunningAgent, Some(episode as u32));
    let request = agent_loop.request();
    let Some(llm) = state.llm.clone() else {
        return finish_agent(myself, state, Some(ExceptionInfo::new("RuntimeError", "no LLM actor for this agent")))
            .await;
    };
    let generation = state.generation;
    let myself = myself.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let result = match llm.call(|reply| LlmMsg::Complete { request, reply }, Some(LLM_CALL_TIMEOUT)).await {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => {
                Err(LlmError::Transient(format!("no reply within {} s", LLM_CALL_TIMEOUT.as_secs())))
            }
            Ok(CallResult::SenderError) | Err(_) => Err(LlmError::Cancelled),
        };
        let elapsed_msec = started.elapsed().as_secs_f64() * 1000.0;
        let _ = myself.send_message(TrialMsg::ModelReplied { generation, result, elapsed_msec });
    });
}

async fn on_model_reply(
    myself: &ActorRef<TrialMsg>,
    state: &mut TrialState,
    result: Result<LlmResponse, LlmError>,
    elapsed_msec: f64,
) {
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            let message = match &error {
                LlmError::ContextLengthExceeded(_) => {
                    format!("{error} (context summarization is not built yet)")
                }
                _ => error.to_string(),
            };
            return finish_agent(myself, state, Some(ExceptionInfo::new(error.exception_type(), message))).await;
        }
    };
    let episode_dir = state.agent_dir().join(format!("episode-{}", state.episode));
    files::write_text_logged(&episode_dir.join("response.txt"), &response.content);
    if let Some(debug) = &response.debug {
        let mut debug = debug.clone();
        redact_json(&mut debug);
        files::write_text_logged(
            &episode_dir.join("debug.json"),
            &serde_json::to_string_pretty(&debug).unwrap_or_default(),
        );
    }
    let agent_loop = state.agent_loop.as_mut().expect("replies arrive only while the loop runs");
    match agent_loop.on_response(response, elapsed_msec) {
        Reply::Reprompt => {
            let _ = myself.send_message(TrialMsg::AskModel { generation: state.generation });
        }
        Reply::Execute(commands) => {
            state.commands = commands;
            let _ = myself.send_message(TrialMsg::RunCommand { generation: state.generation, index: 0 });
        }
    }
}

async fn run_command(myself: &ActorRef<TrialMsg>, state: &mut TrialState, index: usize) {
    let Some(tmux) = state.tmux.clone() else {
        return;
    };
    let generation = state.generation;
    if let Some(command) = state.commands.get(index).cloned() {
        if !command.keystrokes.is_empty() {
            let sent = tmux
                .call(
                    |reply| TmuxMsg::SendKeys { keys: vec![command.keystrokes.clone()], reply },
                    Some(TMUX_RPC_TIMEOUT),
                )
                .await;
            if !matches!(sent, Ok(CallResult::Success(Ok(())))) {
                return finish_agent(myself, state, Some(tmux_error("send keys", sent))).await;
            }
        }
        myself.send_after(Duration::from_secs_f64(command.duration), move || TrialMsg::CommandWaitOver {
            generation,
            index,
        });
        return;
    }
    let output = match tmux.call(TmuxMsg::IncrementalOutput, Some(TMUX_RPC_TIMEOUT)).await {
        Ok(CallResult::Success(Ok(output))) => output,
        other => {
            return finish_agent(myself, state, Some(tmux_error("capture the pane", other))).await;
        }
    };
    let agent_loop = state.agent_loop.as_mut().expect("commands run only while the loop runs");
    let next = agent_loop.on_terminal_output(&output);
    write_trajectory(state);
    match next {
        Next::Done => finish_agent(myself, state, None).await,
        Next::Continue => {
            let _ = myself.send_message(TrialMsg::AskModel { generation });
        }
    }
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

fn write_trajectory(state: &TrialState) {
    if let Some(agent_loop) = &state.agent_loop {
        let text = agent_loop.trajectory().to_json();
        if let Err(e) = files::write_atomic(&state.agent_dir().join("trajectory.json"), text.as_bytes()) {
            tracing::warn!(trial = %state.trial_name, error = %e, "could not write the trajectory");
        }
    }
}

/// Stops the agent's side activities (the terminal) and fills in what the agent reports.
async fn stop_agent(state: &mut TrialState) {
    if let Some(tmux) = state.tmux.take() {
        tmux.stop(None);
    }
    if let Some(timing) = state.result.agent_execution.as_mut() {
        timing.finish();
    }
    if let Some(agent_loop) = &state.agent_loop {
        write_trajectory(state);
        let totals = agent_loop.totals();
        let mut metadata = Map::new();
        metadata.insert("n_episodes".into(), json!(agent_loop.n_episodes()));
        metadata.insert("api_request_times_msec".into(), json!(agent_loop.api_request_times_msec()));
        metadata.insert("summarization_count".into(), json!(0));
        state.result.agent_result = Some(AgentContext {
            n_input_tokens: Some(totals.input_tokens),
            n_cache_tokens: Some(totals.cache_tokens),
            n_output_tokens: Some(totals.output_tokens),
            cost_usd: (totals.cost_usd > 0.0).then_some(totals.cost_usd),
            rollout_details: Some(Vec::new()),
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
    stop_agent(state).await;
    let verify = match &error {
        None => true,
        Some(info) => info.exception_type == "AgentTimeoutError",
    };
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
    let myself = myself.clone();
    tokio::spawn(async move {
        let rewards = verify_task(&task, &container, timeout, &verifier_dir).await;
        let _ = myself.send_message(TrialMsg::VerificationDone { rewards });
    });
}

/// Runs `tests/test.sh` and reads the reward.
async fn verify_task(
    task: &Task,
    container: &Container,
    timeout: Duration,
    verifier_dir: &std::path::Path,
) -> Result<BTreeMap<String, f64>, ExceptionInfo> {
    let tests = archive::tar_dir(&task.tests_dir(), "tests")
        .map_err(|e| ExceptionInfo::new("AddTestsDirError", e.to_string()))?;
    container.upload_tar("/", tests).await.map_err(|e| ExceptionInfo::new("AddTestsDirError", e.to_string()))?;
    let user = task.config.verifier.user.as_ref().map(ToString::to_string);
    let env: Vec<String> = task.config.verifier.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    // The chmod runs as root so a non-root verifier user can still execute the script.
    let _ = container
        .exec(
            "chmod +x /tests/test.sh",
            &ExecOptions { timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() },
        )
        .await;
    let options = ExecOptions { user, env, workdir: None, timeout: Some(timeout) };
    let run = container.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1", &options).await;
    let timed_out = matches!(run, Err(terminus_sandbox::SandboxError::Timeout { .. }));
    if let Err(e) = &run
        && !timed_out
    {
        return Err(ExceptionInfo::new("RuntimeError", format!("running the tests failed: {e}")));
    }
    match container.download_tar("/logs/verifier").await {
        Ok(tar) => {
            if let Err(e) = archive::unpack_stripped(&tar, verifier_dir, false) {
                return Err(ExceptionInfo::new("DownloadVerifierDirError", e.to_string()));
            }
        }
        Err(e) => {
            return Err(ExceptionInfo::new("DownloadVerifierDirError", e.to_string()));
        }
    }
    if timed_out {
        return Err(ExceptionInfo::new(
            "VerifierTimeoutError",
            format!("Verifier execution timed out after {} seconds", timeout.as_secs_f64()),
        ));
    }
    read_rewards(verifier_dir)
}

/// `reward.txt` (one number) wins over `reward.json` (a flat object of numbers).
pub fn read_rewards(verifier_dir: &std::path::Path) -> Result<BTreeMap<String, f64>, ExceptionInfo> {
    let txt = verifier_dir.join("reward.txt");
    let json_path = verifier_dir.join("reward.json");
    if txt.is_file() {
        let text =
            std::fs::read_to_string(&txt).map_err(|e| ExceptionInfo::new("VerifierOutputParseError", e.to_string()))?;
        if text.trim().is_empty() {
            return Err(ExceptionInfo::new("RewardFileEmptyError", format!("{} is empty", txt.display())));
        }
        let value: f64 = text.trim().parse().map_err(|_| {
            ExceptionInfo::new(
                "VerifierOutputParseError",
                format!("cannot read a number from reward.txt: {:?}", text.trim()),
            )
        })?;
        return Ok(BTreeMap::from([("reward".to_string(), value)]));
    }
    if json_path.is_file() {
        let text = std::fs::read_to_string(&json_path)
            .map_err(|e| ExceptionInfo::new("VerifierOutputParseError", e.to_string()))?;
        if text.trim().is_empty() {
            return Err(ExceptionInfo::new("RewardFileEmptyError", format!("{} is empty", json_path.display())));
        }
        let map: BTreeMap<String, f64> = serde_json::from_str(&text).map_err(|e| {
            ExceptionInfo::new("VerifierOutputParseError", format!("reward.json must be an object of numbers: {e}"))
        })?;
        return Ok(map);
    }
    Err(ExceptionInfo::new(
        "RewardFileNotFoundError",
        format!("no reward file found at {} or {}", txt.display(), json_path.display()),
    ))
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
    let agent_dir = state.agent_dir();
    let myself = myself.clone();
    tokio::spawn(async move {
        if let Some(container) = container {
            match container.download_tar("/logs/agent").await {
                // Files the host already wrote (trajectory, episodes) win over container copies.
                Ok(tar) => {
                    if let Err(e) = archive::unpack_stripped(&tar, &agent_dir, true) {
                        tracing::warn!(error = %e, "could not unpack the agent logs");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "no agent logs to download"),
            }
            if let Err(e) = container.remove().await {
                tracing::warn!(container = %container.name, error = %e, "could not remove the container; the job's final sweep will retry");
            }
        }
        let _ = myself.send_message(TrialMsg::TornDown);
    });
}
