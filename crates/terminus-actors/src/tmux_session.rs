//! The TmuxSession actor: the agent's terminal, a tmux session inside the trial's container.
//!
//! Supervised by: its Trial (spawned linked; a failure here becomes the trial's error).
//! Owns: one long-lived shell channel into the container, through which every tmux command goes
//! (~5 ms a round trip instead of ~85 ms for a separate exec), the
//! incremental-output memory of the previous capture, and the queue of requests.
//! Accepts: [`TmuxMsg`] requests, through a [`TmuxHandle`].
//!
//! Its handlers await nothing. Set-up (tools installed as root when the image lacks
//! them, `tmux new-session` with the pane size, `TERM`/`SHELL`, extra env, history limit, pane
//! piped to `/logs/agent/terminus_2.pane`, the recording's follower started in the channel's
//! background before it and a `clear` typed at once) runs in a task started by `post_start`,
//! which can take minutes when tools must be installed; requests wait in the
//! queue meanwhile, and [`TmuxHandle::ready`] answers when it is done. Each request then lends
//! the channel to a task that runs its tmux commands and hands the channel back with the
//! output (`Ran`), so the mailbox stays free — a stop is handled at once, and the running task
//! is aborted.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use terminus_core::layout::container::PANE_LOG;
use terminus_sandbox::channel::ShellOutput;
use terminus_sandbox::control::Control;
use terminus_sandbox::observe::{ObserveError, Observer};
use terminus_sandbox::observe_reference::ReferenceObserver;
use terminus_sandbox::tmux::{self, PaneSize};
use terminus_sandbox::{Container, ExecOptions};
use tokio::task::JoinHandle;

pub use self::error::TmuxError;
pub use self::recorder::RecordTo;
use self::recorder::Recorder;
pub use self::shell::Shell;
use self::shell::check;

mod error;
mod recorder;
mod shell;

/// How long the tool installation may take (the agent's set-up limit bounds the whole set-up).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

pub struct TmuxSessionActor;

pub struct TmuxSessionArgs {
    pub container: Container,
    /// The user the session runs as (None: the image's default user).
    pub user: Option<String>,
    pub size: PaneSize,
    pub extra_env: BTreeMap<String, String>,
    /// Record the pane into this host file ([`recorder`]); None: not recorded.
    pub record: Option<RecordTo>,
    /// The reference's terminal: its observation (whole-scrollback diff), its history limit
    /// (raised only after the pane exists, so the pane keeps tmux's default) and keys typed
    /// as it types them (a final `;` not escaped).
    pub reference: bool,
    /// How long one tmux command may take before the channel is considered stuck.
    pub command_timeout: Duration,
}

/// The session as set up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionInfo {
    /// The instant the recording's times count from (None: not recording).
    pub recording_started: Option<Instant>,
    /// The container's clock (seconds since its host booted, `/proc/uptime`) just after the
    /// session started, before the agent could type anything: what starts in the terminal
    /// after it is the agent's (None: it could not be read).
    pub started_uptime: Option<f64>,
}

/// One request; each answers on its own port.
pub enum Request {
    /// Types keys without waiting (non-blocking send).
    SendKeys { keys: Vec<String>, reply: RpcReplyPort<Result<(), TmuxError>> },
    /// The observation since the previous call ("New Terminal Output:" / "Current Terminal Screen:").
    IncrementalOutput(RpcReplyPort<Result<String, TmuxError>>),
    /// The visible screen, or with `entire` the whole history.
    CapturePane { entire: bool, reply: RpcReplyPort<Result<String, TmuxError>> },
    /// Whether the session still exists.
    IsAlive(RpcReplyPort<bool>),
    /// Whether the terminal is idle, and the screen (to tell when it stops changing).
    IdleProbe(RpcReplyPort<Result<(bool, String), TmuxError>>),
    /// Takes the pane out of any mode it is in (the view mode tmux shows a killed
    /// `run-shell` job's end in), so that typed keys reach the shell again.
    LeaveModes(RpcReplyPort<()>),
}

/// Inbox of [`TmuxSessionActor`].
pub enum TmuxMsg {
    Request(Request),
    /// Answers once the set-up is over (at once if it is).
    Ready(RpcReplyPort<Result<SessionInfo, TmuxError>>),
    /// The set-up task's result.
    SetUp(Result<(Shell, SessionInfo, Option<Recorder>), TmuxError>),
    /// Ends the recording (what is in flight written first); answers when the file is whole.
    FinishRecording(RpcReplyPort<()>),
    /// A request's commands ran; the channel comes back with their output.
    Ran {
        request: Request,
        shell: Shell,
        outputs: Result<Vec<ShellOutput>, TmuxError>,
    },
}

/// How the agent's observations are made.
enum Look {
    Ours(Observer),
    Reference(ReferenceObserver),
}

impl Look {
    fn command(&self, separator: &str) -> String {
        match self {
            Look::Ours(observer) => observer.command(tmux::SESSION_NAME, separator),
            Look::Reference(observer) => observer.command(tmux::SESSION_NAME, separator),
        }
    }

    fn read(&mut self, stdout: &str, separator: &str) -> Result<String, ObserveError> {
        match self {
            Look::Ours(observer) => observer.read(stdout, separator),
            Look::Reference(observer) => observer.read(stdout, separator),
        }
    }
}

/// What the set-up task needs from the arguments.
struct SetUpArgs {
    size: PaneSize,
    extra_env: BTreeMap<String, String>,
    record: Option<RecordTo>,
    reference: bool,
}

enum Setup {
    Running(Vec<RpcReplyPort<Result<SessionInfo, TmuxError>>>),
    Done(SessionInfo),
    Failed(TmuxError),
}

pub struct TmuxSessionState {
    /// None while a task holds it.
    shell: Option<Shell>,
    setup: Setup,
    queue: VecDeque<Request>,
    /// What the agent has seen of the pane (the anchor, or the previous capture, of the next
    /// observation).
    look: Look,
    /// Keys typed as the reference types them.
    reference: bool,
    /// Separates the two captures of one round trip; random so output cannot forge it.
    separator: String,
    /// The set-up or request task in flight (aborted when the actor stops).
    work: Option<JoinHandle<()>>,
    /// Taken by `post_start`.
    args: Option<SetUpArgs>,
    /// The recording's task while it runs.
    recorder: Option<Recorder>,
}

/// Installs tmux when the image lacks it, as root, with whichever package manager the image
/// has (the reference's list). Prints `missing:tmux` if it is still missing.
const ENSURE_TOOLS: &str = include_str!("tmux_session/ensure_tools.sh");

/// How long ending the recording may take (its drain is bounded well below this).
const RECORDING_FINISH: Duration = Duration::from_secs(5);

/// How often the set-up looks at the screen while it waits (each look is a tmux process in the
/// container: with many trials starting at once, looking often is itself load).
const SCREEN_POLL: Duration = Duration::from_millis(100);

/// How long the set-up waits for the shell's prompt (then it goes on with whatever is shown).
const PROMPT_WAIT: Duration = Duration::from_secs(10);

/// Whether the screen's last non-blank line is an idle shell's prompt.
fn prompt_shown(screen: &str) -> bool {
    screen.lines().rev().find(|l| !l.trim().is_empty()).is_some_and(|l| tmux::looks_idle(&format!("-\n{l}")))
}

/// The channel command whose exit code says whether the image has tmux.
const TOOLS_CHECK: &str = "command -v tmux";

/// The tools [`ENSURE_TOOLS`] reports still missing (its `missing:<tool>` lines).
fn missing_tools(report: &str) -> Vec<&str> {
    report.lines().filter_map(|l| l.strip_prefix("missing:")).collect()
}

/// Whether the `clear` typed into the shell took effect: the screen shows one line, a prompt,
/// and not the `clear` itself.
fn cleared(screen: &str) -> bool {
    let mut shown = screen.lines().filter(|l| !l.trim().is_empty());
    matches!((shown.next(), shown.next()), (Some(line), None)
        if !line.contains("clear") && tmux::looks_idle(&format!("-\n{line}")))
}

/// Captures the screen until `ready` holds for it or `limit` passes; whether it held.
async fn wait_for_screen(shell: &mut Shell, limit: Duration, ready: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let screen = shell.capture(false).await.unwrap_or_default();
        if ready(&screen) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(SCREEN_POLL).await;
    }
}

/// Starts the session with our history limit (or without it where tmux refuses it).
async fn start_session(
    shell: &mut Shell,
    size: PaneSize,
    extra_env: &BTreeMap<String, String>,
) -> Result<(), TmuxError> {
    let started = shell.run(&tmux::start_session_command(size, extra_env, PANE_LOG, true)).await?;
    if started.exit_code != 0 {
        tracing::warn!(output = %started.stdout.trim(), "could not raise tmux history-limit; starting the session without it");
        let plain = shell.run(&tmux::start_session_command(size, extra_env, PANE_LOG, false)).await?;
        if plain.exit_code != 0 {
            return Err(TmuxError::Start(plain.stdout.trim().to_string()));
        }
    }
    Ok(())
}

/// The set-up, in its own task: tools, recording, session.
async fn set_up(mut shell: Shell, args: SetUpArgs) -> Result<(Shell, SessionInfo, Option<Recorder>), TmuxError> {
    let SetUpArgs { size, extra_env, record, reference } = args;
    // The cheap check through the channel first; the root exec only when something is missing.
    if shell.run(TOOLS_CHECK).await?.exit_code != 0 {
        // As root whatever the image's user or the task's `agent.user`: package managers need it.
        let options =
            ExecOptions { user: Some("root".into()), timeout: Some(INSTALL_TIMEOUT), ..ExecOptions::default() };
        let out = shell.container.exec(ENSURE_TOOLS, &options).await.map_err(|e| TmuxError::Start(e.to_string()))?;
        // The script's own report: one `missing:<tool>` line per tool still absent.
        if missing_tools(&out.output).contains(&"tmux") {
            return Err(TmuxError::NotInstalled);
        }
    }
    let mut info = SessionInfo { recording_started: None, started_uptime: None };
    let mut recorder = None;
    if let Some(to) = &record {
        let timeout = shell.command_timeout;
        let started = match shell.channel().await {
            Ok(channel) => recorder::start(channel, timeout, to, size).await,
            Err(e) => Err(e.to_string()),
        };
        match started {
            Ok((started, follower, at)) => {
                shell.follower = Some(follower);
                recorder = Some(started);
                info.recording_started = Some(at);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the terminal's recording could not start; the session is not recorded")
            }
        }
    }
    let started = if reference {
        // The reference raises the history limit after the session exists: its pane keeps
        // tmux's default, which its observations depend on.
        match shell.run(&tmux::start_session_command(size, &extra_env, PANE_LOG, false)).await {
            Ok(started) if started.exit_code != 0 => Err(TmuxError::Start(started.stdout.trim().to_string())),
            Ok(_) => shell.run(tmux::REFERENCE_HISTORY_COMMAND).await.map(drop),
            Err(e) => Err(e),
        }
    } else {
        start_session(&mut shell, size, &extra_env).await
    };
    if let Err(e) = started {
        if let Some(recorder) = &recorder {
            recorder.abort();
        }
        return Err(e);
    }
    // Builtins only: no process of the shell's own starts after the session's.
    info.started_uptime = match shell.run("read -r up _ < /proc/uptime && echo \"$up\"").await {
        Ok(out) if out.exit_code == 0 => out.stdout.trim().parse().ok(),
        _ => None,
    };
    if info.started_uptime.is_some() {
        // The clock ticks in hundredths: two ticks after the reading, nothing the agent starts
        // can share a tick with the terminal's own processes.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first screen is the agent's first observation: it shows the shell's prompt, not a
    // pane the login shell has not drawn yet.
    if recorder.is_some() {
        // A recorded session starts from a cleared screen, as the reference's does (it clears
        // the recorder's banner): what a login shell printed before its prompt is not shown.
        // The `clear` is typed at once (the terminal holds it until the shell reads input,
        // after its start-up files); the first observation comes after it took effect: a clear
        // that lands later would wipe what the agent's first commands printed before anyone
        // looked. Typed later, after the prompt, a look could also find the prompt alone before
        // the shell echoed the `clear`, and take it for the cleared screen.
        shell.send_keys(&["clear".into(), "Enter".into()]).await?;
    }
    // The control client after the `clear` was typed, so that its start delays nothing; the
    // reference's terminal runs its tmux commands as it runs them.
    if !reference {
        shell.start_control().await?;
    }
    if recorder.is_some() {
        wait_for_screen(&mut shell, PROMPT_WAIT, cleared).await;
    } else {
        wait_for_screen(&mut shell, PROMPT_WAIT, prompt_shown).await;
    }
    Ok((shell, info, recorder))
}

impl Request {
    /// The tmux commands that answer it.
    fn commands(&self, look: &Look, reference: bool, separator: &str) -> Vec<String> {
        match self {
            Request::SendKeys { keys, .. } if reference => tmux::send_keys_commands_as_given(keys),
            Request::SendKeys { keys, .. } => tmux::send_keys_commands(keys),
            Request::IncrementalOutput(_) => vec![look.command(separator)],
            Request::CapturePane { entire, .. } => vec![tmux::capture_pane_command(*entire)],
            Request::IsAlive(_) => vec![tmux::has_session_command()],
            Request::IdleProbe(_) => vec![tmux::idle_probe_command()],
            Request::LeaveModes(_) => vec![tmux::leave_modes_command()],
        }
    }

    /// The same answer through the channel's control client (None: as [`Request::commands`]).
    fn controlled(&self, control: &Control, observer: Option<&Observer>, separator: &str) -> Option<Vec<String>> {
        Some(vec![match self {
            Request::LeaveModes(_) => return None,
            Request::SendKeys { keys, .. } => control.send_keys(keys, &tmux::send_keys_commands(keys)),
            Request::IncrementalOutput(_) => observer?.control_command(separator, control),
            Request::CapturePane { entire, .. } => control.capture_pane(*entire),
            Request::IsAlive(_) => control.has_session(),
            Request::IdleProbe(_) => control.idle_probe(),
        }])
    }

    /// Answers with `error` (the set-up failed).
    fn fail(self, error: TmuxError) {
        match self {
            Request::SendKeys { reply, .. } => drop(reply.send(Err(error))),
            Request::IncrementalOutput(reply) | Request::CapturePane { reply, .. } => drop(reply.send(Err(error))),
            Request::IsAlive(reply) => drop(reply.send(false)),
            Request::IdleProbe(reply) => drop(reply.send(Err(error))),
            Request::LeaveModes(reply) => drop(reply.send(())),
        }
    }
}

impl TmuxSessionState {
    /// Takes a request: queued until the set-up is over, answered at once if it failed.
    fn accept(&mut self, request: Request) {
        match &self.setup {
            Setup::Failed(error) => request.fail(error.clone()),
            _ => self.queue.push_back(request),
        }
    }

    /// Answers `reply` with the set-up's outcome, or keeps it until the set-up is over.
    fn ready(&mut self, reply: RpcReplyPort<Result<SessionInfo, TmuxError>>) {
        match &mut self.setup {
            Setup::Running(waiting) => waiting.push(reply),
            Setup::Done(info) => drop(reply.send(Ok(*info))),
            Setup::Failed(error) => drop(reply.send(Err(error.clone()))),
        }
    }

    /// Records the set-up's outcome (its channel already back in `shell` when it succeeded):
    /// a failure fails every queued request; everyone waiting for it is answered.
    fn set_up_over(&mut self, result: Result<SessionInfo, TmuxError>) {
        let setup = match result {
            Ok(info) => Setup::Done(info),
            Err(error) => {
                for request in self.queue.drain(..) {
                    request.fail(error.clone());
                }
                Setup::Failed(error)
            }
        };
        if let Setup::Running(waiting) = std::mem::replace(&mut self.setup, setup) {
            let answer = match &self.setup {
                Setup::Done(info) => Ok(*info),
                Setup::Failed(error) => Err(error.clone()),
                Setup::Running(_) => unreachable!("just replaced"),
            };
            for reply in waiting {
                let _ = reply.send(answer.clone());
            }
        }
    }

    /// Answers a request from its commands' output (in-memory work only).
    fn answer(&mut self, request: Request, outputs: Result<Vec<ShellOutput>, TmuxError>) {
        let last = |outputs: &Result<Vec<ShellOutput>, TmuxError>, what| match outputs {
            Ok(list) => check(list.last(), what).map(|out| out.map(|o| o.stdout.clone()).unwrap_or_default()),
            Err(e) => Err(e.clone()),
        };
        match request {
            Request::SendKeys { reply, .. } => drop(reply.send(last(&outputs, "send-keys").map(|_| ()))),
            Request::CapturePane { reply, .. } => drop(reply.send(last(&outputs, "capture-pane"))),
            Request::LeaveModes(reply) => drop(reply.send(())),
            Request::IsAlive(reply) => {
                let alive = matches!(&outputs, Ok(list) if list.last().is_some_and(|o| o.exit_code == 0));
                drop(reply.send(alive))
            }
            Request::IdleProbe(reply) => {
                let probe = last(&outputs, "idle probe").map(|stdout| {
                    let screen = stdout.split_once('\n').map(|(_, s)| s.to_string()).unwrap_or_default();
                    (tmux::looks_idle(&stdout), screen)
                });
                drop(reply.send(probe))
            }
            Request::IncrementalOutput(reply) => {
                let observed = last(&outputs, "capture-pane").map(|stdout| self.look.read(&stdout, &self.separator));
                match observed {
                    // The pane scrolled past the window: the same request again, first in line
                    // (the observer starts its window further back now).
                    Ok(Err(ObserveError::Reread)) => self.queue.push_front(Request::IncrementalOutput(reply)),
                    Ok(Err(ObserveError::Malformed(_))) => drop(reply.send(Err(TmuxError::Garbled))),
                    Ok(Ok(text)) => drop(reply.send(Ok(text))),
                    Err(e) => drop(reply.send(Err(e))),
                }
            }
        }
    }

    /// Lends the channel to a task for the next queued request, if it is free.
    fn pump(&mut self, myself: &ActorRef<TmuxMsg>) {
        if !matches!(self.setup, Setup::Done(_)) {
            return;
        }
        let Some(mut shell) = self.shell.take() else { return };
        let Some(request) = self.queue.pop_front() else {
            self.shell = Some(shell);
            return;
        };
        let commands = request.commands(&self.look, self.reference, &self.separator);
        // What the control client's commands need (the reference's terminal has none).
        let observer = match (&request, &self.look) {
            (Request::IncrementalOutput(_), Look::Ours(observer)) => Some(observer.clone()),
            _ => None,
        };
        let separator = self.separator.clone();
        let myself = myself.clone();
        self.work = Some(tokio::spawn(async move {
            // The channel first (opened again if it broke, with a client of its own), then
            // the commands for the client it has.
            let outputs = match shell.control().await {
                Ok(control) => {
                    let controlled =
                        control.and_then(|control| request.controlled(&control, observer.as_ref(), &separator));
                    shell.run_all(controlled.as_deref().unwrap_or(&commands)).await
                }
                Err(e) => Err(e),
            };
            let _ = myself.send_message(TmuxMsg::Ran { request, shell, outputs });
        }));
    }
}

impl Actor for TmuxSessionActor {
    type Msg = TmuxMsg;
    type State = TmuxSessionState;
    type Arguments = TmuxSessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<TmuxMsg>,
        args: TmuxSessionArgs,
    ) -> Result<TmuxSessionState, ActorProcessingErr> {
        let shell = Shell {
            container: args.container,
            user: args.user,
            channel: None,
            command_timeout: args.command_timeout,
            follower: None,
            control_wanted: false,
            control: None,
        };
        Ok(TmuxSessionState {
            shell: Some(shell),
            setup: Setup::Running(Vec::new()),
            queue: VecDeque::new(),
            look: if args.reference {
                Look::Reference(ReferenceObserver::default())
            } else {
                Look::Ours(Observer::default())
            },
            reference: args.reference,
            separator: format!("__TERMINUS_PANE_SPLIT_{:016x}__", rand::random::<u64>()),
            work: None,
            args: Some(SetUpArgs {
                size: args.size,
                extra_env: args.extra_env,
                record: args.record,
                reference: args.reference,
            }),
            recorder: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<TmuxMsg>,
        state: &mut TmuxSessionState,
    ) -> Result<(), ActorProcessingErr> {
        if let (Some(shell), Some(args)) = (state.shell.take(), state.args.take()) {
            state.work = Some(tokio::spawn(async move {
                let result = set_up(shell, args).await;
                let _ = myself.send_message(TmuxMsg::SetUp(result));
            }));
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<TmuxMsg>,
        msg: TmuxMsg,
        state: &mut TmuxSessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TmuxMsg::Request(request) => {
                state.accept(request);
                state.pump(&myself);
            }
            TmuxMsg::Ready(reply) => state.ready(reply),
            TmuxMsg::SetUp(result) => {
                state.work = None;
                let result = result.map(|(shell, info, recorder)| {
                    state.shell = Some(shell);
                    state.recorder = recorder;
                    info
                });
                state.set_up_over(result);
                state.pump(&myself);
            }
            TmuxMsg::FinishRecording(reply) => match state.recorder.take() {
                // The drain takes up to a second and a half: a task of its own answers.
                Some(recorder) => {
                    let task = recorder.finish();
                    tokio::spawn(async move {
                        let _ = task.await;
                        let _ = reply.send(());
                    });
                }
                None => drop(reply.send(())),
            },
            TmuxMsg::Ran { request, shell, outputs } => {
                state.work = None;
                state.shell = Some(shell);
                state.answer(request, outputs);
                state.pump(&myself);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<TmuxMsg>,
        state: &mut TmuxSessionState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(work) = state.work.take() {
            work.abort();
        }
        if let Some(recorder) = state.recorder.take() {
            recorder.abort();
        }
        Ok(())
    }
}

/// How the Trial and the Summarizer use the terminal: typed requests with one time limit each
/// (`terminal_timeout_sec`).
#[derive(Clone, Debug)]
pub struct TmuxHandle {
    actor: ActorRef<TmuxMsg>,
    timeout: Duration,
}

impl TmuxHandle {
    pub fn new(actor: ActorRef<TmuxMsg>, timeout: Duration) -> TmuxHandle {
        TmuxHandle { actor, timeout }
    }

    pub fn actor(&self) -> &ActorRef<TmuxMsg> {
        &self.actor
    }

    async fn ask<T: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<Result<T, TmuxError>>) -> TmuxMsg,
        timeout: Option<Duration>,
    ) -> Result<T, TmuxError> {
        match self.actor.call(build, timeout).await {
            Ok(CallResult::Success(result)) => result,
            Ok(CallResult::Timeout) => Err(TmuxError::Timeout),
            Ok(CallResult::SenderError) | Err(_) => Err(TmuxError::Gone),
        }
    }

    /// Waits for the set-up (the caller bounds it with the agent's set-up limit).
    pub async fn ready(&self) -> Result<SessionInfo, TmuxError> {
        self.ask(TmuxMsg::Ready, None).await
    }

    pub async fn send_keys(&self, keys: Vec<String>) -> Result<(), TmuxError> {
        self.ask(|reply| TmuxMsg::Request(Request::SendKeys { keys, reply }), Some(self.timeout)).await
    }

    pub async fn incremental_output(&self) -> Result<String, TmuxError> {
        self.ask(|reply| TmuxMsg::Request(Request::IncrementalOutput(reply)), Some(self.timeout)).await
    }

    pub async fn capture_pane(&self, entire: bool) -> Result<String, TmuxError> {
        self.ask(|reply| TmuxMsg::Request(Request::CapturePane { entire, reply }), Some(self.timeout)).await
    }

    pub async fn idle_probe(&self) -> Result<(bool, String), TmuxError> {
        self.ask(|reply| TmuxMsg::Request(Request::IdleProbe(reply)), Some(self.timeout)).await
    }

    /// Takes the pane out of any mode (see [`Request::LeaveModes`]); a failure is ignored.
    pub async fn leave_modes(&self) {
        let _ = self.actor.call(|reply| TmuxMsg::Request(Request::LeaveModes(reply)), Some(self.timeout)).await;
    }

    /// Ends the recording, its last output written (at most a few seconds); at once when the
    /// session is not recorded or is gone.
    pub async fn finish_recording(&self) {
        let _ = self.actor.call(TmuxMsg::FinishRecording, Some(RECORDING_FINISH)).await;
    }

    /// Whether the session still exists (a failed check counts as gone).
    pub async fn is_alive(&self) -> bool {
        matches!(
            self.actor.call(|reply| TmuxMsg::Request(Request::IsAlive(reply)), Some(self.timeout)).await,
            Ok(CallResult::Success(true))
        )
    }

    /// Stops the actor (and any command it runs).
    pub fn stop(&self) {
        self.actor.stop(None);
    }
}

#[cfg(test)]
mod tests;
