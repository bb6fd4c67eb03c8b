//! The git command line, the one program terminus starts besides itself. Each call runs
//! `git` with prompts off (a repository that wants credentials, or ssh a decision, fails instead
//! of waiting for a terminal), no system or global configuration (so no filter, LFS or
//! credential helper of the user's runs for a repository that asks for it in its
//! `.gitattributes` or `.lfsconfig`), LFS smudging off, the transports limited to
//! [`ALLOWED_PROTOCOLS`], hooks off, and C messages;
//! a failure keeps git's exit status and the end of its stderr for the message, and nothing
//! decides on that text.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The transports git may use: `https`, `ssh` and `git`, and `file` (local paths too), which
/// every registry terminus reads may name, being a local file itself. Not `ext` (which runs
/// commands), `fd` or plain `http`.
pub const ALLOWED_PROTOCOLS: &str = "https:ssh:git:file";

/// How much of git's stderr a failure keeps.
const STDERR_TAIL: usize = 600;

/// A git command that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum GitFailure {
    #[error("the git command line cannot be run ({0}); install git")]
    NotInstalled(std::io::Error),
    #[error("`git {command}` failed ({status}): {stderr}")]
    Failed { command: String, status: String, stderr: String },
}

/// The git command for `args`, confined as this module says.
fn command<S: AsRef<OsStr>>(args: &[S], stdin: bool) -> Command {
    let mut command = Command::new("git");
    command
        .args(["-c", "protocol.ext.allow=never", "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false"])
        // A transfer that stalls (under 1 KiB/s for two minutes) fails instead of hanging.
        .args(["-c", "http.lowSpeedLimit=1024", "-c", "http.lowSpeedTime=120"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ALLOW_PROTOCOL", ALLOWED_PROTOCOLS)
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("LC_ALL", "C")
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // ssh would ask on the terminal (a new host key, a passphrase) and wait there.
    if std::env::var_os("GIT_SSH_COMMAND").is_none() && std::env::var_os("GIT_SSH").is_none() {
        command.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes");
    }
    command
}

/// Runs `git args…` in `cwd` (with `stdin` written to it when given); its stdout on success.
pub fn run<I, S>(cwd: Option<&Path>, args: I, stdin: Option<&str>) -> Result<String, GitFailure>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    let mut command = command(&args, stdin.is_some());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    let shown = || args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ");
    tracing::debug!(command = %shown(), "git");
    let mut child = command.spawn().map_err(GitFailure::NotInstalled)?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A git that exits early closes the pipe; its status says what went wrong.
        let _ = pipe.write_all(text.as_bytes());
    }
    let output = child.wait_with_output().map_err(GitFailure::NotInstalled)?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).trim().to_string());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr = stderr.trim();
    let cut = stderr.char_indices().rev().nth(STDERR_TAIL).map_or(0, |(i, _)| i);
    Err(GitFailure::Failed {
        command: shown(),
        status: output.status.to_string(),
        stderr: stderr[cut..].replace('\n', " | "),
    })
}

#[cfg(test)]
mod confinement_tests {
    use super::*;

    #[test]
    fn git_runs_without_the_user_s_configuration_filters_or_other_transports() {
        let command = command(&["status"], false);
        let envs: std::collections::BTreeMap<_, _> = command
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.map(|v| v.to_string_lossy().into_owned())))
            .collect();
        assert_eq!(envs["GIT_CONFIG_NOSYSTEM"].as_deref(), Some("1"));
        assert_eq!(envs["GIT_CONFIG_GLOBAL"].as_deref(), Some("/dev/null"));
        assert_eq!(envs["GIT_LFS_SKIP_SMUDGE"].as_deref(), Some("1"));
        assert_eq!(envs["GIT_ALLOW_PROTOCOL"].as_deref(), Some("https:ssh:git:file"));
        // Plain http is not among them: refused before anything is asked of the address.
        let refused = run(None, ["ls-remote", "--", "http://127.0.0.1:9/r.git"], None).unwrap_err();
        assert!(refused.to_string().contains("not allowed"), "{refused}");
    }
}
