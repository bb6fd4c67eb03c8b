//! `terminus view`: a read-only web viewer for a jobs directory — the jobs, each job's trials,
//! each trial's trajectory, recording and verifier output, two jobs compared — live while a job
//! runs (`terminus run --view`, or another process's job seen through its files).
//!
//! Layout:
//! - [`confine`]: every path opened, checked to stay inside the jobs directory;
//! - [`scan`]: job and trial directories read into rows (cached by file stamps);
//! - [`trial`]: a trial's page, its trajectories a page of steps at a time, its files in slices;
//! - [`search`]: search across trajectory steps;
//! - [`compare`]: two jobs, task by task, with a paired bootstrap interval;
//! - [`live`]: server-sent events from the Supervisor's events or from watching files;
//! - [`terminal`]: a running trial's terminal, followed from its pane log;
//! - [`api`]: the routes; [`assets`]: the embedded browser side.
//!
//! Architecture invariant: read-only. Nothing here writes to a job directory or changes a
//! container; it reads files and follows one log. The one exception goes through the job's own
//! Supervisor: under `terminus run --view`, the job page's controls (pause, cancel or retry a
//! trial) are passed to the [`live::Controls`] the binary installed on the hub. It knows the layout only through
//! `terminus_core::layout`, and the engine only through `terminus_sandbox`.

pub mod api;
pub mod assets;
pub mod compare;
pub mod confine;
pub mod error;
pub mod live;
pub mod scan;
pub mod search;
pub mod step_index;
pub mod terminal;
pub mod trial;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use live::LiveHub;

/// Where the viewer listens by default.
pub const DEFAULT_PORT: u16 = 8420;

/// Why the viewer could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("jobs directory `{}` cannot be opened: {source}", .path.display())]
    JobsDir { path: PathBuf, source: std::io::Error },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
}

/// A running viewer.
pub struct ViewServer {
    /// Where it listens (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// The token the printed address carries: the access token off loopback; on loopback, under
    /// `run --view`, the one the job's controls need.
    pub token: Option<String>,
    task: tokio::task::JoinHandle<()>,
}

impl ViewServer {
    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", api::display_addr(&self.addr))
    }

    /// The address of `page` (`/jobs/x`) to open: with the access token when there is one (the
    /// first page sets the cookie the others send).
    pub fn page_url(&self, page: &str) -> String {
        match &self.token {
            Some(token) => format!("{}{page}?token={token}", self.url()),
            None => format!("{}{page}", self.url()),
        }
    }

    /// Serves until the task is stopped or fails.
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Stops serving.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// Starts serving `jobs_dir` on `host:port` (port 0: any free port). `hub` is the live state of
/// the job this process runs, if it runs one.
pub async fn start(
    jobs_dir: &Path,
    host: IpAddr,
    port: u16,
    hub: Option<Arc<LiveHub>>,
) -> Result<ViewServer, StartError> {
    let root = confine::JobsRoot::new(jobs_dir)
        .map_err(|source| StartError::JobsDir { path: jobs_dir.to_path_buf(), source })?;
    let addr = SocketAddr::new(host, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr: api::display_addr(&addr), source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: api::display_addr(&addr), source })?;
    if let Some(hub) = &hub {
        hub.watch_stalls();
    }
    // Off loopback (another machine, or a trial container, may connect) every request needs a
    // token that only the printed address carries.
    let token = (!host.is_loopback()).then(new_token);
    // The job this process runs can be controlled from its page: only by whoever opened the
    // printed address (on loopback too, where any local user may connect), which carries it.
    let control_token = token.clone().or_else(|| hub.is_some().then(new_token));
    let state = Arc::new(api::AppState {
        catalog: scan::Catalog::new(root),
        trajectories: trial::TrajectoryCache::default(),
        hub,
        engine: tokio::sync::Mutex::new(None),
        loopback_only: host.is_loopback(),
        token: token.clone(),
        control_token: control_token.clone(),
        permits: Arc::new(tokio::sync::Semaphore::new(api::MAX_CONCURRENT_REQUESTS)),
        streams: Arc::new(tokio::sync::Semaphore::new(api::MAX_STREAMS)),
    });
    let app = api::router(state);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the viewer stopped serving");
        }
    });
    Ok(ViewServer { addr, token: control_token, task })
}

/// 128 random bits, as hex.
fn new_token() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}
