//! The job's control socket: how `terminus jobs pause|resume|set|status` and
//! `terminus trials cancel|retry` reach the terminus that runs a job.
//!
//! The socket is `<job_dir>/.control/socket`, in a directory only its owner may enter (0700), and
//! a connection from another user is closed unanswered (its peer's uid is checked). The protocol
//! is JSON lines: a [`JobControl`] per line in, a [`ControlAnswer`] per line out. The socket is
//! removed when the job ends; one left by a killed run answers nothing, which the client reports
//! as "not running".
//!
//! A socket path is limited to 107 bytes: a longer one is reached through the directory's file
//! descriptor (`/proc/self/fd/<n>/socket`), which the kernel resolves like any path.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use terminus_actors::{ControlError, JobController};
use terminus_core::control::{ControlAnswer, ControlRefusal, JobControl, JobStatus};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The directory that holds the socket, inside the job directory (hidden: resume and the viewer
/// skip dot-entries).
const CONTROL_DIR: &str = ".control";
const SOCKET: &str = "socket";
/// The longest path `bind`/`connect` take (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// A request line longer than this is refused (a request is a few dozen bytes).
const MAX_LINE: usize = 64 * 1024;
/// A connection that sends nothing for this long is closed.
const IDLE: Duration = Duration::from_secs(60);

/// The socket of a running job; removed when dropped (unless a later run of the job has made
/// its own there meanwhile: the lock goes before this does).
pub struct ControlSocket {
    path: PathBuf,
    /// The socket file's (device, inode), to remove this one only.
    file: (u64, u64),
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.accept.abort();
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file);
        if ours {
            let _ = std::fs::remove_file(&self.path);
            // The directory too, when nothing else is in it: a finished job keeps no trace.
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// Opens the job's control socket and answers on it with `controller` until dropped. The caller
/// holds the job's lock, so a socket file already there is a killed run's and is replaced.
pub fn serve(job_dir: &Path, controller: JobController) -> io::Result<ControlSocket> {
    let owner = effective_uid();
    let dir = job_dir.join(CONTROL_DIR);
    // Only a real directory of this user, entered by nobody else, holds the socket: anything
    // else there (a link, another user's directory) is replaced.
    let usable = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == owner);
    if !usable {
        let _ = std::fs::remove_file(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(SOCKET);
    let _ = std::fs::remove_file(&path);
    let listener = with_socket_path(&dir, |reachable| UnixListener::bind(reachable))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let made = std::fs::symlink_metadata(&path)?;
    let file = (made.dev(), made.ino());
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            // Only the user who runs the job controls it (the directory's mode says the same).
            if stream.peer_cred().map(|c| c.uid()).ok() != Some(owner) {
                continue;
            }
            tokio::spawn(answer(stream, controller.clone()));
        }
    });
    Ok(ControlSocket { path, file, accept })
}

/// The user this process runs as.
fn effective_uid() -> u32 {
    #[expect(unsafe_code, reason = "a libc call with no safe wrapper in our dependencies")]
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe {
        libc::geteuid()
    }
}

/// Answers one connection's requests, a line each, until it closes or idles.
async fn answer(stream: UnixStream, controller: JobController) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read);
    let mut line = String::new();
    loop {
        line.clear();
        let read = tokio::time::timeout(IDLE, (&mut lines).take(MAX_LINE as u64 + 1).read_line(&mut line)).await;
        let answer = match read {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => return,
            Ok(Ok(_)) if line.len() > MAX_LINE => {
                ControlAnswer::BadRequest(format!("a request line is at most {MAX_LINE} bytes"))
            }
            Ok(Ok(_)) => match serde_json::from_str::<JobControl>(line.trim_end()) {
                Err(e) => ControlAnswer::BadRequest(format!("not a control request: {e}")),
                Ok(request) => match controller.ask(request).await {
                    Ok(status) => ControlAnswer::Ok(Box::new(status)),
                    Err(ControlError::Refused(refusal)) => ControlAnswer::Refused(refusal),
                    Err(ControlError::Gone) => return,
                },
            },
        };
        let Ok(mut text) = serde_json::to_string(&answer) else { return };
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() {
            return;
        }
        if line.len() > MAX_LINE {
            return;
        }
    }
}

/// The viewer's job page controls the job through its Supervisor (`terminus run --view`).
pub struct PageControls(pub JobController);

impl terminus_view::live::Controls for PageControls {
    fn ask(
        &self,
        request: JobControl,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = terminus_core::control::ControlReply> + Send>> {
        let controller = self.0.clone();
        Box::pin(async move {
            match controller.ask(request).await {
                Ok(status) => Ok(status),
                Err(ControlError::Refused(refusal)) => Err(refusal),
                Err(ControlError::Gone) => Err(ControlRefusal::Closed),
            }
        })
    }
}

/// Why a control got no status back.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{0}` is not a job directory")]
    NoJob(String),
    #[error("no terminus runs the job in `{0}` (it ended, or never started): `terminus resume` continues it")]
    NotRunning(String),
    #[error(transparent)]
    Refused(ControlRefusal),
    #[error("the job's control socket answered something unreadable: {0}")]
    Protocol(String),
}

/// Sends `request` to the terminus running the job in `job_dir`; its status after the change.
pub async fn ask(job_dir: &Path, request: &JobControl) -> Result<JobStatus, ClientError> {
    let shown = job_dir.display().to_string();
    if !terminus_core::layout::JobDir::new(job_dir).config_json().is_file() {
        return Err(ClientError::NoJob(shown));
    }
    let dir = job_dir.join(CONTROL_DIR);
    let connected = with_socket_path(&dir, |reachable| {
        let stream = std::os::unix::net::UnixStream::connect(reachable)?;
        stream.set_nonblocking(true)?;
        UnixStream::from_std(stream)
    });
    let Ok(stream) = connected else { return Err(ClientError::NotRunning(shown)) };
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_string(request).map_err(|e| ClientError::Protocol(e.to_string()))?;
    line.push('\n');
    write.write_all(line.as_bytes()).await.map_err(|_| ClientError::NotRunning(shown.clone()))?;
    let mut answer = String::new();
    let read = tokio::time::timeout(Duration::from_secs(60), BufReader::new(read).read_line(&mut answer)).await;
    match read {
        Ok(Ok(n)) if n > 0 => {}
        // The job ended between the connection and the answer.
        _ => return Err(ClientError::NotRunning(shown)),
    }
    match serde_json::from_str::<ControlAnswer>(answer.trim_end()) {
        Ok(ControlAnswer::Ok(status)) => Ok(*status),
        Ok(ControlAnswer::Refused(refusal)) => Err(ClientError::Refused(refusal)),
        Ok(ControlAnswer::BadRequest(why)) => Err(ClientError::Protocol(why)),
        Err(e) => Err(ClientError::Protocol(e.to_string())),
    }
}

/// Calls `f` with a path to `dir`'s socket that `bind` and `connect` accept: the path itself, or
/// when it is too long, the same file through an open descriptor of `dir`.
fn with_socket_path<T>(dir: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    let direct = dir.join(SOCKET);
    if direct.as_os_str().len() <= MAX_SOCKET_PATH {
        return f(&direct);
    }
    let handle = std::fs::File::open(dir)?;
    let via = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET}", std::os::fd::AsRawFd::as_raw_fd(&handle)));
    let result = f(&via);
    drop(handle);
    result
}

/// Prints a status: one line for the job, then one per trial that is not finished (all with
/// `all`).
pub fn print_status(status: &JobStatus, all: bool) {
    let mut state = Vec::new();
    if status.paused {
        state.push("paused".to_string());
    }
    if status.closed {
        state.push("starting nothing more".to_string());
    }
    state.push(format!("up to {} at once", status.n_concurrent));
    println!(
        "{} ({}): {} · {} running, {} pending, {} finished of {}",
        status.job_name,
        status.job_id,
        state.join(", "),
        status.n_running,
        status.n_pending,
        status.n_finished,
        status.n_total
    );
    if let Some(budget) = &status.budget {
        let mut limit = Vec::new();
        if let Some(usd) = budget.max_cost_usd {
            limit.push(format!("${usd}"));
        }
        if let Some(tokens) = budget.max_tokens {
            limit.push(format!("{tokens} tokens"));
        }
        println!(
            "budget: {} · spent ${:.4}, {} tokens{}",
            limit.join(", "),
            budget.spent_cost_usd,
            budget.spent_tokens,
            if budget.reached { " (reached)" } else { "" }
        );
    }
    for trial in status.trials.iter().filter(|t| all || !t.state.is_terminal()) {
        let state = serde_json::to_value(trial.state).ok().and_then(|v| v.as_str().map(str::to_string));
        let reward = trial.reward.map(|r| format!(" reward {r}")).unwrap_or_default();
        let retries = if trial.retries > 0 { format!(" ({} retries)", trial.retries) } else { String::new() };
        println!("  {:<11} {}{reward}{retries}", state.unwrap_or_default(), trial.name);
    }
}

/// `terminus jobs status|pause|resume`: sends `request`, prints the status (every trial for
/// `status`, the unfinished ones otherwise); returns the exit code.
pub async fn job_command(args: &crate::args::JobControlArgs, request: JobControl) -> u8 {
    let all = request == JobControl::Status;
    command(&args.job_dir, &request, args.json, all).await
}

/// `terminus jobs set`: each change given, in turn.
pub async fn set(args: &crate::args::JobSetArgs) -> u8 {
    // The budget first: it is the change a job may refuse (one without a budget), and then
    // nothing is changed.
    let mut requests = Vec::new();
    let budget = terminus_core::control::BudgetChange {
        max_cost_usd: args.budget.max_cost_usd,
        max_tokens: args.budget.max_tokens,
    };
    if budget != Default::default() {
        requests.push(JobControl::SetBudget(budget));
    }
    if let Some(n) = args.n_concurrent {
        requests.push(JobControl::SetConcurrency(n as usize));
    }
    if requests.is_empty() {
        return crate::exit::invalid("nothing to set: give --n-concurrent, --max-cost-usd or --max-tokens");
    }
    let last = requests.len() - 1;
    for (i, request) in requests.iter().enumerate() {
        let code = if i == last {
            command(&args.job.job_dir, request, args.job.json, false).await
        } else {
            match ask(&args.job.job_dir, request).await {
                Ok(_) => crate::exit::OK,
                Err(e) => failed(&e),
            }
        };
        if code != crate::exit::OK {
            return code;
        }
    }
    crate::exit::OK
}

/// `terminus trials cancel|retry`: the trial directory names the job (its parent) and the trial.
pub async fn trial_command(
    args: &crate::args::TrialControlArgs,
    request: fn(terminus_core::ids::TrialName) -> JobControl,
) -> u8 {
    let Some(name) = args.trial_dir.file_name() else {
        return crate::exit::invalid(format!("`{}` is not a trial directory", args.trial_dir.display()));
    };
    let trial = terminus_core::ids::TrialName(name.to_string_lossy().into_owned());
    let job_dir = match args.trial_dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    command(&job_dir, &request(trial), args.json, false).await
}

async fn command(job_dir: &Path, request: &JobControl, json: bool, all: bool) -> u8 {
    match ask(job_dir, request).await {
        Ok(status) => {
            if json {
                match serde_json::to_string_pretty(&status) {
                    Ok(text) => println!("{text}"),
                    Err(e) => eprintln!("error: {e}"),
                }
            } else {
                print_status(&status, all);
            }
            crate::exit::OK
        }
        Err(e) => failed(&e),
    }
}

/// Prints why a control failed; its exit code.
fn failed(error: &ClientError) -> u8 {
    eprintln!("error: {error}");
    match error {
        ClientError::NoJob(_) => crate::exit::INVALID,
        ClientError::NotRunning(_) => crate::exit::NOT_RUNNING,
        ClientError::Refused(_) | ClientError::Protocol(_) => crate::exit::REFUSED,
    }
}
