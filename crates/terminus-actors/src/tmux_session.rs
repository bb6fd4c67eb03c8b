//! The TmuxSession actor: the agent's terminal, a tmux session inside the trial's container.
//!
//! Supervised by: its Trial (spawned linked; a failure here becomes the trial's error).
//! Owns: one long-lived shell channel into the container, through which every tmux command goes
//! (~5 ms a round trip instead of ~85 ms for a separate exec, stack-probe.md §3), and the
//! incremental-output memory of the previous capture.
//! Accepts: [`TmuxMsg`] RPCs from its Trial; all are short, none sleeps (the Trial schedules the
//! waits a command asks for with timers, so its own mailbox stays responsive).
//!
//! Lifecycle: `pre_start` opens the channel, starts the session (pane size checked when the
//! arguments were built, `TERM`/`SHELL` exported, extra env as `-e KEY=VALUE`, history limit
//! raised, pane piped to `/logs/agent/terminus_2.pane`) and starts the asciinema recording when
//! asked; then RPCs until the Trial stops it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use terminus_sandbox::tmux::{self, IncrementalOutput, PaneSize};
use terminus_sandbox::{Container, ExecOptions, ShellChannel};

/// Where the pane's raw output is logged inside the container.
pub const PANE_LOG: &str = "/logs/agent/terminus_2.pane";
/// Where the asciinema recording goes inside the container.
pub const RECORDING: &str = "/logs/agent/recording.cast";
/// How long one tmux command may take before the channel is considered stuck.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

pub struct TmuxSessionActor;

pub struct TmuxSessionArgs {
    pub container: Container,
    /// The user the session runs as (None: the image's default user).
    pub user: Option<String>,
    pub size: PaneSize,
    pub extra_env: BTreeMap<String, String>,
    /// Record the pane with asciinema (when the image has it).
    pub record: bool,
}

pub struct TmuxSessionState {
    container: Container,
    user: Option<String>,
    channel: ShellChannel,
    incremental: IncrementalOutput,
    /// Separates the two captures of one round trip; random so output cannot forge it.
    separator: String,
    /// When `asciinema rec` was started (None: not recording).
    recording_started: Option<Instant>,
}

/// Inbox of [`TmuxSessionActor`]. Errors are plain text: the Trial records them, it does not
/// branch on them.
pub enum TmuxMsg {
    /// Types keys without waiting (non-blocking send).
    SendKeys { keys: Vec<String>, reply: RpcReplyPort<Result<(), String>> },
    /// The observation since the previous call ("New Terminal Output:" / "Current Terminal Screen:").
    IncrementalOutput(RpcReplyPort<Result<String, String>>),
    /// The visible screen, or with `entire` the whole history.
    CapturePane { entire: bool, reply: RpcReplyPort<Result<String, String>> },
    /// Whether the session still exists.
    IsAlive(RpcReplyPort<bool>),
    /// When the asciinema recording started, if the session is recorded.
    RecordingStartedAt(RpcReplyPort<Option<Instant>>),
    /// Whether the terminal is idle, and the screen (to tell when it stops changing).
    IdleProbe(RpcReplyPort<Result<(bool, String), String>>),
    /// The pane's foreground program (e.g. `bash`, or `asciinema` while it records).
    Foreground(RpcReplyPort<Result<String, String>>),
}

/// Installs what the session needs when the image lacks it, as root, with whichever package
/// manager the image has (the reference's list). Prints the tools that are still missing.
const ENSURE_TOOLS: &str = r#"need="tmux"; [ "$NEED_ASCIINEMA" = 1 ] && need="$need asciinema"
missing=""; for t in $need; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
if [ -n "$missing" ]; then
  if command -v apt-get >/dev/null 2>&1; then DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1
  elif command -v dnf >/dev/null 2>&1; then dnf install -y $missing >/dev/null 2>&1
  elif command -v yum >/dev/null 2>&1; then yum install -y $missing >/dev/null 2>&1
  elif command -v apk >/dev/null 2>&1; then apk add --no-cache $missing >/dev/null 2>&1
  elif command -v pacman >/dev/null 2>&1; then pacman -S --noconfirm $missing >/dev/null 2>&1
  elif command -v zypper >/dev/null 2>&1; then zypper install -y -n $missing >/dev/null 2>&1
  fi
fi
for t in $need; do command -v "$t" >/dev/null 2>&1 || printf 'missing:%s\n' "$t"; done
true"#;

impl TmuxSessionState {
    /// Runs one command; reopens the channel once if it broke (the shell died or a command hung).
    async fn run(&mut self, command: &str) -> Result<terminus_sandbox::channel::ShellOutput, String> {
        if self.channel.is_broken() {
            self.channel = self.container.open_shell(self.user.as_deref()).await.map_err(|e| e.to_string())?;
        }
        self.channel.run(command, COMMAND_TIMEOUT).await.map_err(|e| e.to_string())
    }

    async fn send_keys(&mut self, keys: &[String]) -> Result<(), String> {
        for command in tmux::send_keys_commands(keys) {
            let out = self.run(&command).await?;
            if out.exit_code != 0 {
                return Err(format!("failed to send keys: {}", out.stdout.trim()));
            }
        }
        Ok(())
    }

    async fn capture(&mut self, entire: bool) -> Result<String, String> {
        let out = self.run(&tmux::capture_pane_command(entire)).await?;
        if out.exit_code != 0 {
            return Err(format!("capture-pane failed: {}", out.stdout.trim()));
        }
        Ok(out.stdout)
    }

    async fn incremental(&mut self) -> Result<String, String> {
        let out = self.run(&tmux::capture_both_command(&self.separator)).await?;
        if out.exit_code != 0 {
            return Err(format!("capture-pane failed: {}", out.stdout.trim()));
        }
        let marker = format!("{}\n", self.separator);
        let (full, visible) = out.stdout.split_once(&marker).ok_or("the capture lost its separator")?;
        Ok(self.incremental.next(full, visible))
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
        let channel = args.container.open_shell(args.user.as_deref()).await?;
        let separator = format!("__TERMINUS_PANE_SPLIT_{:016x}__", rand::random::<u64>());
        let mut state = TmuxSessionState {
            container: args.container,
            user: args.user,
            channel,
            incremental: IncrementalOutput::default(),
            separator,
            recording_started: None,
        };
        // The cheap check through the channel first; the root exec only when something is missing.
        let wanted = if args.record { "command -v tmux && command -v asciinema" } else { "command -v tmux" };
        let mut can_record = args.record;
        if state.run(wanted).await?.exit_code != 0 {
            let env = vec![format!("NEED_ASCIINEMA={}", u8::from(args.record))];
            let options = ExecOptions { env, timeout: Some(Duration::from_secs(300)), ..ExecOptions::default() };
            let out = state.container.exec(ENSURE_TOOLS, &options).await?;
            if out.output.contains("missing:tmux") {
                return Err("tmux is not installed in the task image and could not be installed".into());
            }
            if out.output.contains("missing:asciinema") {
                tracing::warn!(
                    "asciinema is not in the task image and could not be installed; the session is not recorded"
                );
                can_record = false;
            }
        }

        let started = state.run(&tmux::start_session_command(args.size, &args.extra_env, PANE_LOG, true)).await?;
        if started.exit_code != 0 {
            tracing::warn!(output = %started.stdout.trim(), "could not raise tmux history-limit; starting the session without it");
            let plain = state.run(&tmux::start_session_command(args.size, &args.extra_env, PANE_LOG, false)).await?;
            if plain.exit_code != 0 {
                return Err(format!("failed to start tmux session: {}", plain.stdout.trim()).into());
            }
        }
        if can_record {
            state.send_keys(&[format!("asciinema rec --stdin {RECORDING}"), "Enter".into()]).await?;
            state.recording_started = Some(Instant::now());
            // asciinema needs a moment to start its own shell before the screen is cleared: wait
            // for its banner and a prompt under it (the reference sleeps a fixed second).
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                let screen = state.capture(false).await.unwrap_or_default();
                let after_banner = screen.split_once("asciinema: press").map(|(_, rest)| rest).unwrap_or("");
                if after_banner.lines().skip(1).any(|l| tmux::looks_idle(&format!("asciinema\n{l}"))) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            state.send_keys(&["clear".into(), "Enter".into()]).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<TmuxMsg>,
        msg: TmuxMsg,
        state: &mut TmuxSessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TmuxMsg::SendKeys { keys, reply } => {
                let _ = reply.send(state.send_keys(&keys).await);
            }
            TmuxMsg::IncrementalOutput(reply) => {
                let _ = reply.send(state.incremental().await);
            }
            TmuxMsg::CapturePane { entire, reply } => {
                let _ = reply.send(state.capture(entire).await);
            }
            TmuxMsg::RecordingStartedAt(reply) => {
                let _ = reply.send(state.recording_started);
            }
            TmuxMsg::Foreground(reply) => {
                let command = format!("tmux display -p -t {} '#{{pane_current_command}}'", tmux::SESSION_NAME);
                let _ = reply.send(state.run(&command).await.map(|out| out.stdout.trim().to_string()));
            }
            TmuxMsg::IdleProbe(reply) => {
                let probe = state.run(&tmux::idle_probe_command()).await.map(|out| {
                    let screen = out.stdout.split_once('\n').map(|(_, s)| s.to_string()).unwrap_or_default();
                    (tmux::looks_idle(&out.stdout), screen)
                });
                let _ = reply.send(probe);
            }
            TmuxMsg::IsAlive(reply) => {
                let alive = matches!(state.run(&tmux::has_session_command()).await, Ok(out) if out.exit_code == 0);
                let _ = reply.send(alive);
            }
        }
        Ok(())
    }
}
