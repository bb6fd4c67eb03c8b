//! The TmuxSession's shell channel with what it takes to open it again: the user, the time
//! limit, the recording's follower and the tmux control client each channel gets.

use std::time::Duration;

use terminus_sandbox::channel::ShellOutput;
use terminus_sandbox::control::{self, Control};
use terminus_sandbox::tmux;
use terminus_sandbox::{Container, ShellChannel};

use super::error::TmuxError;
use super::recorder;

/// The channel with what it takes to reopen it.
pub struct Shell {
    pub(super) container: Container,
    pub(super) user: Option<String>,
    pub(super) channel: Option<ShellChannel>,
    pub(super) command_timeout: Duration,
    /// The recording's follower, started again on each channel opened after it.
    pub(super) follower: Option<recorder::Follower>,
    /// Start a control client on each channel once the session exists (not for the
    /// reference's terminal, whose commands stay as it runs them).
    pub(super) control_wanted: bool,
    /// The control client of the current channel, if it started.
    pub(super) control: Option<Control>,
}

impl Shell {
    /// Runs one command; reopens the channel first if it broke (the shell died or a command hung).
    pub(super) async fn run(&mut self, command: &str) -> Result<ShellOutput, TmuxError> {
        let timeout = self.command_timeout;
        let kill = self.follower.as_mut().and_then(recorder::Follower::kill_once_ended);
        let command = match &kill {
            Some(kill) => std::borrow::Cow::Owned(format!("{kill} {command}")),
            None => std::borrow::Cow::Borrowed(command),
        };
        let result = self.channel().await?.run(&command, timeout).await;
        if self.channel.as_ref().is_some_and(ShellChannel::is_broken) {
            // Dropped at once: what a hung command still prints is not kept waiting for a
            // reader (the recording's follower is read apart from it).
            self.channel = None;
        }
        result.map_err(|e| TmuxError::Channel(e.to_string()))
    }

    /// The channel, opened again if it broke.
    pub(super) async fn channel(&mut self) -> Result<&mut ShellChannel, TmuxError> {
        let channel = match self.channel.take() {
            Some(channel) if !channel.is_broken() => channel,
            _ => {
                let mut opened = self
                    .container
                    .open_shell(self.user.as_deref())
                    .await
                    .map_err(|e| TmuxError::Channel(e.to_string()))?;
                if let Some(follower) = &self.follower {
                    // The old follower is read no more (it ends with the old shell): the
                    // recording goes on from where it was, through the new channel.
                    follower.restart(&mut opened, self.command_timeout).await;
                }
                // The old client ended with the old shell.
                self.control = None;
                if self.control_wanted {
                    self.control = start_control(&mut opened, self.command_timeout).await;
                }
                opened
            }
        };
        Ok(self.channel.insert(channel))
    }

    /// Runs commands in order, stopping after the first that exits non-zero.
    pub(super) async fn run_all(&mut self, commands: &[String]) -> Result<Vec<ShellOutput>, TmuxError> {
        let mut outputs = Vec::with_capacity(commands.len());
        for command in commands {
            let out = self.run(command).await?;
            let failed = out.exit_code != 0;
            outputs.push(out);
            if failed {
                break;
            }
        }
        Ok(outputs)
    }

    pub(super) async fn send_keys(&mut self, keys: &[String]) -> Result<(), TmuxError> {
        let per_process = tmux::send_keys_commands(keys);
        // The client of the channel the commands will run on (it may be opened again first).
        let commands = match &self.control().await? {
            Some(control) => vec![control.send_keys(keys, &per_process)],
            None => per_process,
        };
        let outputs = self.run_all(&commands).await?;
        check(outputs.last(), "send-keys").map(|_| ())
    }

    pub(super) async fn capture(&mut self, entire: bool) -> Result<String, TmuxError> {
        let command = match &self.control().await? {
            Some(control) => control.capture_pane(entire),
            None => tmux::capture_pane_command(entire),
        };
        let out = self.run(&command).await?;
        check(Some(&out), "capture-pane")?;
        Ok(out.stdout)
    }

    /// From now on, every channel keeps a control client; starts one on the current channel.
    pub(super) async fn start_control(&mut self) -> Result<(), TmuxError> {
        let timeout = self.command_timeout;
        let control = start_control(self.channel().await?, timeout).await;
        self.control = control;
        self.control_wanted = true;
        Ok(())
    }

    /// The channel made ready (opened again if it broke), and its control client.
    pub(super) async fn control(&mut self) -> Result<Option<Control>, TmuxError> {
        self.channel().await?;
        Ok(self.control.clone())
    }
}

/// Starts the channel's control client (None when it does not start: the commands then run
/// as tmux processes of their own).
async fn start_control(channel: &mut ShellChannel, timeout: Duration) -> Option<Control> {
    let nonce = control::new_nonce();
    let started = match channel.run(&control::start_command(&nonce), timeout).await {
        Ok(out) => Control::started(&out.stdout, &nonce),
        Err(_) => None,
    };
    if started.is_none() {
        tracing::debug!("no tmux control client: each tmux command runs as a process of its own");
    }
    started
}

/// The output, or the error of a command that exited non-zero.
pub(super) fn check<'a>(
    out: Option<&'a ShellOutput>,
    what: &'static str,
) -> Result<Option<&'a ShellOutput>, TmuxError> {
    match out {
        Some(out) if out.exit_code != 0 => Err(TmuxError::Command { what, output: out.stdout.trim().to_string() }),
        other => Ok(other),
    }
}
