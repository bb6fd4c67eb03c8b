//! [`LiveEffects`]: the Effects seam over Docker, tmux, the LLM actor and the disk. Each slow
//! operation runs in a spawned task that reports back with one stamped [`TrialEvent`]; the
//! task's handle is kept so an abandoned generation can be aborted.

use super::events::{Delivery, OracleRun, TeardownPlan, TerminalSetup, TerminalStart, TrialEvent, VerifyPlan};
use super::replay::{Replay, recorded_reply};
use super::seam::Effects;
use crate::context::JobContext;
use crate::environment::{self, ContainerCheck};
use crate::files;
use crate::llm::{LlmCall, LlmHandle};
use crate::panics::panic_text;
use crate::protocol::{SummarizerEvent, SummarizerReport, TrialReport};
use crate::summarizer::{SummarizerActor, SummarizerArgs, SummarizerMsg};
use crate::tmux_session::{RecordTo, TmuxError, TmuxHandle, TmuxSessionActor, TmuxSessionArgs};
use futures_util::FutureExt;
use ractor::{ActorCell, ActorId, ActorRef, ActorRuntime, DerivedActorRef};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use terminus_agent::summarize::{SummaryError, SummaryJob};
use terminus_config::job::TrialPlan;
use terminus_config::policy::{AgentProcesses, ArtifactSpec, ContainerPolicy};
use terminus_config::task::CollectSpec;
use terminus_config::trial::ResolvedTrial;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::TrialName;
use terminus_core::layout::{TrialDir, names};
use terminus_core::llm::{LlmError, LlmRequest};
use terminus_sandbox::Environment;
use tokio::task::AbortHandle;

/// The effects of a real trial.
pub struct LiveEffects {
    deliver: DerivedActorRef<Delivery>,
    /// The Trial: supervisor of the terminal and the Summarizer.
    trial: ActorCell,
    summarizer_reports: DerivedActorRef<SummarizerReport>,
    ctx: Arc<JobContext>,
    plan: TrialPlan,
    name: TrialName,
    dir: TrialDir,
    llm: Option<LlmHandle>,
    supervisor: DerivedActorRef<TrialReport>,
    generation: u64,
    container: Option<Environment>,
    tmux: Option<TmuxHandle>,
    /// The container's clock when the terminal was handed to the agent: what started in it
    /// after that is the agent's (set by the terminal's start task).
    terminal_ready: std::sync::Arc<std::sync::OnceLock<environment::TerminalReady>>,
    summarizer: Option<ActorRef<SummarizerMsg>>,
    /// Provisioning or verification, which a cancel aborts.
    work: Option<AbortHandle>,
    /// Model calls in flight: abandoned (and so no longer paid for) when the trial moves on.
    calls: Vec<AbortHandle>,
    /// Every task not known to be finished.
    spawned: Vec<AbortHandle>,
    /// Episode logs on their way to disk, written in order off the actor.
    logs: Option<EpisodeLogs>,
    /// The trial's plan, once its task has loaded: the artifacts, the task's
    /// `[[verifier.collect]]` hooks and the copy limits of every collection come from it.
    resolved: Option<Arc<ResolvedTrial>>,
    /// What a verification in a separate environment leaves for the teardown and the checks.
    separate: Arc<environment::SeparateState>,
    /// The tests ran with the terminal still open: the agent's logs (the pane log among them)
    /// are copied at teardown, once it is closed, and not by the verification.
    terminal_files_at_teardown: bool,
    /// A replaying trial's source of replies (it asks no model).
    replay: Option<Replay>,
}

/// The writer of a trial's episode logs (`prompt.txt`, `response.txt`, `debug.json`): one task
/// that writes them in the order given, in the blocking pool, so that a long trial's large
/// `debug.json` is not written on the trial's actor. Teardown waits for it ([`EpisodeLogs::flush`]),
/// so every log is on disk before the result is. It is not aborted with the trial's other tasks:
/// what was handed to it is written.
pub(super) struct EpisodeLogs {
    queue: tokio::sync::mpsc::UnboundedSender<(std::path::PathBuf, String)>,
    writer: tokio::task::JoinHandle<()>,
}

impl EpisodeLogs {
    pub(super) fn start() -> EpisodeLogs {
        let (queue, mut files) = tokio::sync::mpsc::unbounded_channel::<(std::path::PathBuf, String)>();
        let writer = tokio::spawn(async move {
            while let Some((path, text)) = files.recv().await {
                let _ = tokio::task::spawn_blocking(move || files::write_text_logged(&path, &text)).await;
            }
        });
        EpisodeLogs { queue, writer }
    }

    /// Waits until everything handed over is written.
    pub(super) async fn flush(self) {
        drop(self.queue);
        let _ = self.writer.await;
    }
}

impl Drop for LiveEffects {
    /// A trial's state is dropped when its actor ends, also when it is killed (the watchdog) or
    /// fails (a panic), which run no cleanup: nothing it started may go on working (downloading
    /// into its directory, calling its model) behind the run that replaces it.
    fn drop(&mut self) {
        for task in self.spawned.drain(..) {
            task.abort();
        }
    }
}

impl LiveEffects {
    #[expect(
        clippy::too_many_arguments,
        reason = "each argument is a distinct handle the call needs; bundling them would only rename them"
    )]
    pub fn new(
        deliver: DerivedActorRef<Delivery>,
        summarizer_reports: DerivedActorRef<SummarizerReport>,
        ctx: Arc<JobContext>,
        plan: TrialPlan,
        name: TrialName,
        dir: TrialDir,
        llm: Option<LlmHandle>,
        supervisor: DerivedActorRef<TrialReport>,
    ) -> LiveEffects {
        let replay = plan.replay_of.as_deref().map(Replay::new);
        LiveEffects {
            trial: deliver.get_cell(),
            deliver,
            summarizer_reports,
            ctx,
            plan,
            name,
            dir,
            llm,
            supervisor,
            generation: 0,
            container: None,
            tmux: None,
            terminal_ready: Default::default(),
            summarizer: None,
            work: None,
            calls: Vec::new(),
            spawned: Vec::new(),
            logs: None,
            resolved: None,
            separate: Arc::default(),
            terminal_files_at_teardown: false,
            replay,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The job's artifacts, then the task's (none before the task has loaded).
    fn artifacts(&self) -> &[ArtifactSpec] {
        self.resolved.as_ref().map_or(&[], |t| t.artifacts.as_slice())
    }

    /// The task's `[[verifier.collect]]` hooks.
    fn collect_hooks(&self) -> &[CollectSpec] {
        self.resolved.as_ref().map_or(&[], |t| t.task.config.verifier.collect.as_slice())
    }

    /// How much of a container may be copied out. Before the task has loaded there is no
    /// container to copy from; the defaults stand in.
    fn copy_limits(&self) -> environment::CopyLimits {
        let default = ContainerPolicy::default();
        environment::CopyLimits::of(self.resolved.as_ref().map_or(&default, |t| &t.container.policy))
    }

    /// Takes what an event brings along (the container a provisioning made) before the machine
    /// sees it. A stale event's container belongs to no one any more: it is removed.
    pub fn absorb(&mut self, event: &mut TrialEvent, current: bool) {
        match event {
            TrialEvent::Provisioned(provisioned) => {
                if current {
                    self.work = None;
                    self.resolved = provisioned.trial.clone();
                }
                if let Some(container) = provisioned.container.take() {
                    if current {
                        self.container = Some(container);
                    } else {
                        tokio::spawn(async move { environment::remove(&container).await });
                    }
                }
            }
            TrialEvent::Verified { .. } | TrialEvent::StepPrepared { .. } if current => self.work = None,
            TrialEvent::Summarizer(SummarizerEvent::Finished { .. }) if current => {
                // It stops itself after its last report.
                self.summarizer = None;
            }
            _ => {}
        }
    }

    pub fn is_summarizer(&self, id: ActorId) -> bool {
        self.summarizer.as_ref().is_some_and(|s| s.get_id() == id)
    }

    pub fn is_terminal(&self, id: ActorId) -> bool {
        self.tmux.as_ref().is_some_and(|t| t.actor().get_id() == id)
    }

    pub fn forget_summarizer(&mut self) {
        self.summarizer = None;
    }

    pub fn forget_terminal(&mut self) {
        self.tmux = None;
    }

    /// Runs `work` in a task whose outcome comes back as an event of the current generation.
    /// The task is the trial's: it ends with the trial's state at the latest (see `Drop`).
    pub(super) fn spawn(&mut self, work: impl Future<Output = TrialEvent> + Send + 'static) -> AbortHandle {
        let (deliver, generation) = (self.deliver.clone(), self.generation);
        let task = tokio::spawn(async move {
            let delivery = match std::panic::AssertUnwindSafe(work).catch_unwind().await {
                Ok(event) => Delivery::Event { generation, event },
                Err(panic) => Delivery::Panicked(panic_text(&panic)),
            };
            let _ = deliver.send_message(delivery);
        });
        self.spawned.retain(|t| !t.is_finished());
        self.spawned.push(task.abort_handle());
        task.abort_handle()
    }

    /// Delivers `event` now (an effect that has nothing to wait for).
    pub(super) fn now(&self, event: TrialEvent) {
        let _ = self.deliver.send_message(Delivery::Event { generation: self.generation, event });
    }

    /// Runs a terminal request, or answers at once that there is no terminal.
    pub(super) fn with_tmux<F, Fut>(&mut self, request: F, gone: TrialEvent)
    where
        F: FnOnce(TmuxHandle) -> Fut,
        Fut: Future<Output = TrialEvent> + Send + 'static,
    {
        match self.tmux.clone() {
            Some(tmux) => drop(self.spawn(request(tmux))),
            None => self.now(gone),
        }
    }

    pub(super) fn call_model(&mut self, request: LlmRequest, event: fn(Box<LlmCall>) -> TrialEvent) {
        let Some(llm) = self.llm.clone() else {
            let call = LlmCall {
                result: Err(LlmError::BadRequest("no LLM actor for this agent".into())),
                retries: 0,
                elapsed_msec: 0.0,
            };
            return self.now(event(Box::new(call)));
        };
        let trial = self.name.clone();
        let call = self.spawn(async move { event(Box::new(llm.complete(request, Some(trial)).await)) });
        self.calls.retain(|c| !c.is_finished());
        self.calls.push(call);
    }
}

impl Effects for LiveEffects {
    fn invalidate(&mut self) {
        self.generation += 1;
        // Their replies would be dropped as stale; aborting the wait also lets the LLM actor
        // abandon the call itself (no retry, no further spending).
        for call in self.calls.drain(..) {
            call.abort();
        }
    }

    fn report(&mut self, report: TrialReport) {
        let _ = self.supervisor.send_message(report);
    }

    fn stop(&mut self) {
        self.trial.stop(None);
    }

    fn set_deadline(&mut self, after: Duration) {
        let generation = self.generation;
        self.deliver.send_after(after, move || Delivery::Deadline { generation });
    }

    fn after(&mut self, delay: Duration, event: TrialEvent) {
        let generation = self.generation;
        self.deliver.send_after(delay, move || Delivery::Event { generation, event });
    }

    fn write_text(&mut self, path: &Path, text: &str) {
        files::write_text_logged(path, text);
    }

    fn write_episode_log(&mut self, path: &Path, text: &str) {
        let logs = self.logs.get_or_insert_with(EpisodeLogs::start);
        if let Err(refused) = logs.queue.send((path.to_path_buf(), text.to_string())) {
            // The writer is gone (the runtime is shutting down): write here, losing nothing.
            let (path, text) = refused.0;
            files::write_text_logged(&path, &text);
        }
    }

    fn write_atomic(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        files::write_atomic(path, bytes)
    }

    fn replace_file(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        files::replace_file(path, bytes)
    }

    fn write_from(&mut self, path: &Path, offset: u64, bytes: &[u8], durable: bool) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
        file.set_len(offset)?;
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(bytes)?;
        if durable {
            file.sync_all()?;
        }
        Ok(())
    }

    fn read_range(&mut self, path: &Path, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = vec![0; end.saturating_sub(start) as usize];
        file.read_exact(&mut bytes)?;
        Ok(bytes)
    }

    fn provision(&mut self, needs_solution: bool) {
        let (ctx, plan, name) = (self.ctx.clone(), self.plan.clone(), self.name.clone());
        // A cluster's queue is reported to the Supervisor as it changes (the bars, the viewer,
        // the watchdog), and the placement once the container runs.
        let supervisor = self.supervisor.clone();
        let was_queued = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let queued: terminus_sandbox::QueuedNotice = {
            let (supervisor, trial_name, was_queued) = (supervisor.clone(), name.clone(), was_queued.clone());
            Arc::new(move |reason: String| {
                was_queued.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = supervisor
                    .send_message(TrialReport::Queued { trial_name: trial_name.clone(), reason: Some(reason) });
            })
        };
        let loaded: environment::TaskLoaded = {
            let (supervisor, trial_name) = (supervisor.clone(), name.clone());
            Box::new(move |trial: &ResolvedTrial| {
                let budget = trial.limits.watchdog;
                let _ = supervisor.send_message(TrialReport::Budget { trial_name, budget });
            })
        };
        self.work = Some(self.spawn(async move {
            let provisioned = environment::provision(&ctx, &plan, &name, needs_solution, queued, loaded).await;
            if was_queued.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = supervisor.send_message(TrialReport::Queued { trial_name: name.clone(), reason: None });
            }
            TrialEvent::Provisioned(Box::new(provisioned))
        }));
    }

    fn abort_work(&mut self) {
        if let Some(work) = self.work.take() {
            work.abort();
        }
    }

    fn start_terminal(&mut self, setup: TerminalSetup) {
        let (Some(container), Some(trial)) = (self.container.clone(), self.resolved.as_ref()) else {
            let error = TrialError::new(TrialErrorKind::TmuxSession, "the trial has no container");
            return self.now(TrialEvent::TerminalStarted(Err(error)));
        };
        let timeout = trial.limits.terminal;
        let args = TmuxSessionArgs {
            container: container.main().clone(),
            user: setup.user.clone(),
            size: setup.size,
            extra_env: setup.extra_env,
            // The trial's own agent directory (a multi-step trial's terminal outlives its steps).
            record: setup.record.then(|| RecordTo {
                path: self.dir.agent_dir().join(names::RECORDING_PART),
                max_bytes: self.copy_limits().max_bytes,
            }),
            reference: setup.reference,
            // Half the request limit, so a stuck command fails its request instead of timing it out.
            command_timeout: timeout / 2,
        };
        // The session's own start is instant; its set-up runs in its task, awaited below.
        let actor = match ActorRuntime::spawn_linked_instant(None, TmuxSessionActor, args, self.trial.clone()) {
            Ok((actor, _)) => actor,
            Err(e) => {
                let error =
                    TrialError::new(TrialErrorKind::TmuxSession, format!("failed to start the tmux session: {e}"));
                return self.now(TrialEvent::TerminalStarted(Err(error)));
            }
        };
        let tmux = TmuxHandle::new(actor, timeout);
        self.tmux = Some(tmux.clone());
        let ready = std::sync::Arc::new(std::sync::OnceLock::new());
        self.terminal_ready = ready.clone();
        let (limit, network, skills_dir, user) = (setup.limit, setup.network, setup.skills_dir, setup.user);
        let inject_skills = setup.inject_skills;
        let container = self.container.clone();
        self.spawn(async move {
            let failed = |kind, message: String| TrialEvent::TerminalStarted(Err(TrialError::new(kind, message)));
            let info = match tokio::time::timeout(limit, tmux.ready()).await {
                Ok(Ok(info)) => {
                    let _ = ready.set(match info.started_uptime {
                        Some(uptime) => environment::TerminalReady::Uptime(uptime),
                        None => environment::TerminalReady::Host(Instant::now()),
                    });
                    info
                }
                Ok(Err(e)) => {
                    return failed(TrialErrorKind::TmuxSession, format!("failed to start the tmux session: {e}"));
                }
                Err(_) => {
                    let message = format!("Agent setup timed out after {} seconds", limit.as_secs_f64());
                    return failed(TrialErrorKind::AgentSetupTimeout, message);
                }
            };
            // The set-up (tool installation) had the environment's network; the agent gets its own.
            if let Some(container) = &container
                && let Err(error) = environment::enter_phase(container, &network).await
            {
                return TrialEvent::TerminalStarted(Err(error));
            }
            match tmux.incremental_output().await {
                Ok(screen) => {
                    let skills = match (&container, skills_dir) {
                        (Some(container), Some(dir)) => {
                            if let Err(error) = environment::inject_skills(container, &dir, &inject_skills).await {
                                return TrialEvent::TerminalStarted(Err(error));
                            }
                            environment::find_skills(container, &dir, user).await
                        }
                        _ => Vec::new(),
                    };
                    TrialEvent::TerminalStarted(Ok(TerminalStart {
                        recording_started: info.recording_started,
                        screen,
                        skills,
                    }))
                }
                Err(e) => failed(TrialErrorKind::TmuxSession, format!("failed to capture the first screen: {e}")),
            }
        });
    }

    fn check_terminal(&mut self) {
        self.with_tmux(
            |tmux| async move { TrialEvent::TerminalChecked { alive: tmux.is_alive().await } },
            TrialEvent::TerminalChecked { alive: false },
        );
    }

    fn send_keys(&mut self, keys: Vec<String>) {
        self.with_tmux(
            |tmux| async move {
                let (result, took) = timed(tmux.send_keys(keys)).await;
                TrialEvent::KeysSent { result, took }
            },
            TrialEvent::KeysSent { result: Err(TmuxError::Gone), took: Duration::ZERO },
        );
    }

    fn idle_probe(&mut self) {
        self.with_tmux(
            |tmux| async move {
                let (probe, took) = timed(tmux.idle_probe()).await;
                TrialEvent::IdleProbed { probe, took }
            },
            TrialEvent::IdleProbed { probe: Err(TmuxError::Gone), took: Duration::ZERO },
        );
    }

    fn observe(&mut self) {
        self.with_tmux(
            |tmux| async move {
                let (result, took) = timed(tmux.incremental_output()).await;
                TrialEvent::Observed { result, took }
            },
            TrialEvent::Observed { result: Err(TmuxError::Gone), took: Duration::ZERO },
        );
    }

    fn capture_screen(&mut self) {
        self.with_tmux(
            |tmux| async move { TrialEvent::ScreenCaptured(tmux.capture_pane(false).await.unwrap_or_default()) },
            TrialEvent::ScreenCaptured(String::new()),
        );
    }

    fn stop_terminal(&mut self) {
        if let Some(tmux) = self.tmux.take() {
            tmux.stop();
        }
    }

    fn query(&mut self, request: LlmRequest) {
        if let Some(replay) = &mut self.replay {
            let (agent_dir, n) = replay.take();
            let call =
                self.spawn(async move { TrialEvent::ModelReplied(Box::new(recorded_reply(agent_dir, n).await)) });
            self.calls.push(call);
            return;
        }
        self.call_model(request, TrialEvent::ModelReplied);
    }

    fn short_summary(&mut self, request: LlmRequest) {
        self.call_model(request, TrialEvent::ShortSummaryReplied);
    }

    fn summarize(&mut self, job: Arc<SummaryJob>) {
        let finished = |error: String| {
            let result = Box::new(Err(SummaryError::Crashed(error)));
            TrialEvent::Summarizer(SummarizerEvent::Finished { result, retries: 0 })
        };
        let Some(llm) = self.llm.clone() else { return self.now(finished("no LLM actor for this agent".into())) };
        let args = SummarizerArgs {
            job,
            trial: self.name.clone(),
            llm,
            tmux: self.tmux.clone(),
            report_to: self.summarizer_reports.clone(),
            generation: self.generation,
        };
        // Its start is instant and cannot fail; its calls run in its own task.
        match ActorRuntime::spawn_linked_instant(None, SummarizerActor, args, self.trial.clone()) {
            Ok((summarizer, _)) => self.summarizer = Some(summarizer),
            Err(e) => self.now(finished(format!("the summarizer could not start: {e}"))),
        }
    }

    fn stop_summarizer(&mut self) {
        if let Some(summarizer) = self.summarizer.take() {
            summarizer.stop(None);
        }
    }

    fn run_oracle(&mut self, run: OracleRun) {
        let Some(container) = self.container.clone() else {
            return self.now(TrialEvent::AgentRan(Some(TrialError::new(TrialErrorKind::Runtime, "no container"))));
        };
        self.spawn(async move {
            if let Err(error) = environment::enter_phase(&container, &run.network).await {
                return TrialEvent::AgentRan(Some(error));
            }
            let agent_dir = run.agent_dir;
            TrialEvent::AgentRan(environment::run_oracle(&container, run.user, run.env, run.timeout, &agent_dir).await)
        });
    }

    fn prepare_step(&mut self, mut prep: environment::steps::StepPrep) {
        if let Some(replay) = &mut self.replay {
            replay.enter_step(&prep.name);
        }
        let Some(container) = self.container.clone() else {
            let error = TrialError::new(TrialErrorKind::Runtime, "the trial has no container");
            return self.now(TrialEvent::StepPrepared { result: Err(error), notes: Vec::new() });
        };
        // The previous step's artifacts: the job's, the task's, then that step's own.
        if let Some((_, step_artifacts)) = &mut prep.previous {
            let shared = self.artifacts().iter().cloned();
            *step_artifacts = shared.chain(step_artifacts.drain(..)).collect();
        }
        prep.collect = self.collect_hooks().iter().cloned().chain(std::mem::take(&mut prep.collect)).collect();
        let limits = self.copy_limits();
        self.work = Some(self.spawn(async move {
            let (result, notes) = environment::steps::prepare_step(&container, prep, limits).await;
            TrialEvent::StepPrepared { result, notes }
        }));
    }

    fn check_container(&mut self, settle: bool) {
        let container = self.container.clone();
        let (separate, backend) = (self.separate.clone(), self.ctx.backend.clone());
        self.spawn(async move {
            // Stopped on purpose before a separate verification: only the engine can be away.
            if separate.agent_stopped() {
                let check = if backend.ping().await { ContainerCheck::Alive } else { ContainerCheck::EngineDown };
                return TrialEvent::ContainerChecked(check);
            }
            TrialEvent::ContainerChecked(environment::check_container(container.as_ref(), settle).await)
        });
    }

    fn verify(&mut self, plan: VerifyPlan) {
        let Some(container) = self.container.clone() else {
            let error = TrialError::new(TrialErrorKind::Runtime, "the trial has no container to verify in");
            return self.now(TrialEvent::Verified { rewards: Err(error), notes: Vec::new(), processes: None });
        };
        let trial = plan.trial.clone();
        let processes = trial.verifier.agent_processes;
        // A step before the last keeps its terminal for the next step's agent. The tests run
        // with the terminal still open when what the agent left runs on through them (as in
        // Harbor: a server's log lines still reach the pane); it closes at teardown then.
        let more = plan.step.as_ref().is_some_and(|s| s.more);
        let separate = trial.task.verifier_environment().is_some();
        let close = !more && (separate || processes == AgentProcesses::Kill);
        let tmux = if close { self.tmux.take() } else { self.tmux.clone() };
        self.terminal_files_at_teardown = !more && !close;
        let terminal_open = self.terminal_files_at_teardown;
        let limits = self.copy_limits();
        let (ctx, name, separate) = (self.ctx.clone(), self.name.clone(), self.separate.clone());
        let ready_at = self.terminal_ready.get().copied().unwrap_or(environment::TerminalReady::Host(Instant::now()));
        self.work = Some(self.spawn(async move {
            let VerifyPlan { timed_out, timeout, dir, step, .. } = plan;
            let task = &trial.task;
            let step = step.map(|s| s.step);
            let grading = environment::Grading {
                task,
                step: step.as_ref(),
                timeout,
                job_env: &trial.verifier.env,
                host: &trial.host_env,
                sweep: match processes {
                    AgentProcesses::Kill => environment::Sweep::All,
                    AgentProcesses::Keep => environment::Sweep::Keep,
                },
            };
            if let (AgentProcesses::Kill, false, Some(tmux)) = (processes, timed_out, &tmux) {
                // The agent said it is done, perhaps just after typing its last command: let
                // the shell finish it (briefly) before everything is stopped.
                environment::settle_terminal(tmux, SETTLE_BEFORE_VERIFYING).await;
            }
            if more {
                let verified = verify_step(&grading, &container, processes, ready_at, &dir, limits).await;
                if let (AgentProcesses::Kill, Some(tmux)) = (processes, &tmux) {
                    // A `run-shell` job the kill ended leaves its end shown in view mode.
                    tmux.leave_modes().await;
                }
                return verified;
            }
            if close {
                // The recorder writes its last events when its shell exits: the terminal closes
                // before anything is stopped.
                environment::close_terminal(tmux).await;
            }
            let mut notes = Vec::new();
            if let Some(request) = environment::SeparateVerify::for_task(&trial, timeout) {
                let rewards = match request {
                    Ok(request) => {
                        environment::verify_separately(
                            &ctx, &trial, &name, &dir, &container, &request, &separate, &mut notes,
                        )
                        .await
                    }
                    Err(error) => Err(error),
                };
                return TrialEvent::Verified { rewards, notes, processes: None };
            }
            // What the agent left is handled (kept or killed) before the verifier's network is
            // granted: in an offline agent phase, nothing the agent ran is meant to get it.
            let verifier_user = task.verifier_user(step.as_ref());
            let census = match environment::prepare_verification(&container, verifier_user.as_deref(), processes).await
            {
                Ok(census) => census,
                Err(error) => return TrialEvent::Verified { rewards: Err(error), notes, processes: None },
            };
            let network = trial.network(step.as_ref()).verifier;
            let rewards = match environment::enter_phase(&container, &network).await {
                Ok(()) => match environment::upload_tests(task, step.as_ref(), &container).await {
                    // With the terminal open, teardown copies the agent's logs (and the
                    // terminal's files whole): not twice.
                    Ok(()) => {
                        environment::verify_task(&grading, &container, &dir, limits, !terminal_open, &mut notes).await
                    }
                    Err(error) => Err(error),
                },
                Err(error) => Err(error),
            };
            TrialEvent::Verified { rewards, notes, processes: Some(census) }
        }));
    }

    fn teardown(&mut self, plan: TeardownPlan) {
        let (container, tmux) = (self.container.take(), self.tmux.take());
        let (dir, recording_dir) = (plan.dir.clone(), self.dir.agent_dir());
        let artifacts: Vec<_> = self.artifacts().iter().chain(&plan.step_artifacts).cloned().collect();
        let limits = self.copy_limits();
        let logs = self.logs.take();
        let hooks: Vec<_> = self.collect_hooks().iter().chain(&plan.step_hooks).cloned().collect();
        let (separate, backend) = (self.separate.clone(), self.ctx.backend.clone());
        let terminal_files = self.terminal_files_at_teardown;
        self.spawn(async move {
            if let Some(logs) = logs {
                logs.flush().await;
            }
            environment::close_terminal(tmux).await;
            let mut notes = Vec::new();
            // A verifier's container that an aborted verification left.
            separate.remove_leftovers(&backend).await;
            if let Some(container) = container {
                // A separate verification copied them already, and graded what it copied.
                if !separate.artifacts_collected() {
                    notes.extend(
                        environment::collect_artifacts(&container, &artifacts, &hooks, &dir.artifacts_dir(), limits)
                            .await,
                    );
                }
                let agent_dir = dir.agent_dir();
                let download = plan.download_agent_logs || terminal_files;
                notes.extend(
                    environment::collect_and_remove(container, &agent_dir, &recording_dir, download, limits).await,
                );
            }
            notes.extend(environment::seal_recording(&recording_dir, &plan.markers).await);
            TrialEvent::TornDown { notes }
        });
    }
}

/// Verifies a step that more steps follow, in the container they go on in, with the terminal
/// open: what the agent runs goes on (or, with `kill`, is killed first, the terminal's own
/// processes aside). The verifier's copy of the terminal's own files (the recording and pane
/// log, still being written) is dropped: the trial keeps their final version.
pub(super) async fn verify_step(
    grading: &environment::Grading<'_>,
    container: &Environment,
    processes: AgentProcesses,
    ready_at: environment::TerminalReady,
    dir: &TrialDir,
    limits: environment::CopyLimits,
) -> TrialEvent {
    let (task, step) = (grading.task, grading.step);
    let user = task.verifier_user(step);
    let mut notes = Vec::new();
    let prepared = environment::steps::prepare_step_verification(container, user.as_deref(), processes, ready_at);
    let (census, sweep) = match prepared.await {
        Ok(prepared) => prepared,
        Err(error) => return TrialEvent::Verified { rewards: Err(error), notes, processes: None },
    };
    let grading = environment::Grading { sweep, ..*grading };
    let network = task.phase_plan(step).verifier;
    let ready = match environment::enter_phase(container, &network).await {
        Ok(()) => environment::upload_tests(task, step, container).await,
        Err(error) => Err(error),
    };
    let rewards = match ready {
        Ok(()) => environment::verify_task(&grading, container, dir, limits, true, &mut notes).await,
        Err(error) => {
            // The terminal was frozen for tests that will not run.
            environment::thaw(container, sweep).await;
            Err(error)
        }
    };
    for name in [terminus_core::layout::names::RECORDING_CAST, terminus_core::layout::names::PANE_LOG] {
        let _ = std::fs::remove_file(dir.agent_file(name));
    }
    TrialEvent::Verified { rewards, notes, processes: Some(census) }
}

/// How long the terminal gets to finish the agent's last command before verification stops
/// everything in the container.
const SETTLE_BEFORE_VERIFYING: Duration = Duration::from_secs(3);

/// A request's outcome and how long it took (for the timings in the trial's metadata).
async fn timed<T>(request: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let outcome = request.await;
    (outcome, started.elapsed())
}
