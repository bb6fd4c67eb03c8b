//! Running one job in this process: its lock, the viewer (with `--view`), the reporter, the
//! Supervisor, and the interrupts that cancel it; then what it left in its directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use terminus_actors::JobHandle;
use terminus_actors::lock::{JobLock, LockError};
use terminus_actors::resume::StartMode;
use terminus_config::cluster::BackendSpec;
use terminus_config::{JobPlan, JobSpec};
use terminus_core::events::RunEvent;
use terminus_core::layout::TrialDir;
use terminus_core::result::TrialResult;
use terminus_core::stats::JobSummary;
use terminus_view::{LiveHub, ViewServer};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::args::ViewFlags;
use crate::exit;
use crate::reporter::{self, Reporter};

/// Runs `spec`, planned by `plan` (which may leave trials out or make them replays), with the
/// reporter and signal handling, and the viewer with `--view`; returns the exit code and the
/// summary.
pub async fn run(
    spec: JobSpec,
    plan: impl FnOnce(JobSpec) -> JobPlan,
    mode: StartMode,
    view: Option<&ViewFlags>,
) -> (u8, Option<JobSummary>) {
    let job_dir = spec.job_dir();
    // Before anything touches the directory: one terminus per job.
    let lock = match lock_job(&job_dir) {
        Ok(lock) => lock,
        Err(code) => return (code, None),
    };
    // The viewer before anything runs: a port that is taken stops the command, not the job.
    let hub = view.filter(|v| v.view).map(|_| {
        let name = job_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        LiveHub::new(&name, spec.stall_warning)
    });
    let viewer = match start_viewer(view, hub.as_ref(), &job_dir).await {
        Ok(viewer) => viewer,
        Err(code) => return (code, None),
    };
    let reporter = Reporter::new(spec.quiet, spec.stall_warning);
    reporter::init_tracing(&reporter, &job_dir, spec.debug);
    for warning in &spec.warnings {
        tracing::warn!("{warning}");
    }
    raise_fd_limit();
    let grace = spec.grace_period;
    let backend = spec.backend.clone();
    let plan = plan(spec);
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = match terminus_actors::start_job(plan, events_tx, mode, lock).await {
        Ok(handle) => handle,
        Err(e) => return (start_failed(&reporter, &backend, e), None),
    };
    // Live controls (`terminus jobs …`, `terminus trials …`) reach the job through its socket
    // until the job ends; a socket that cannot be made leaves the job running without them.
    let _control = match crate::control::serve(&handle.job_dir, handle.controller()) {
        Ok(socket) => Some(socket),
        Err(e) => {
            tracing::warn!(error = %e, "the job's control socket could not be made: live controls are off");
            None
        }
    };
    if let Some(hub) = &hub {
        hub.install_controls(Arc::new(crate::control::PageControls(handle.controller())));
    }
    let events_rx = through_hub(hub, events_rx);
    let report = tokio::spawn(reporter.run(events_rx));
    let interrupted = match wait_for_job(handle, &backend, grace).await {
        Ok(interrupted) => interrupted,
        Err(code) => return (code, None),
    };
    let summary = report.await.ok().flatten();
    if let Some(viewer) = &viewer {
        viewer.stop();
        eprintln!(
            "the viewer stopped with the job; `terminus view {}` shows it again",
            job_dir.parent().unwrap_or(Path::new(".")).display()
        );
    }
    (exit::of_job(interrupted, summary.as_ref()), summary)
}

/// Takes the job's lock, or prints why not and returns the exit code.
fn lock_job(job_dir: &Path) -> Result<JobLock, u8> {
    match JobLock::acquire(job_dir) {
        Ok(lock) => Ok(lock),
        Err(e @ LockError::Busy { .. }) => {
            eprintln!("error: {e}");
            eprintln!("hint: wait for it to finish (or stop it), or choose another job_name");
            Err(exit::BUSY)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(exit::INVALID)
        }
    }
}

/// Starts the viewer on the job's hub (with `--view`) and prints its address; a viewer that
/// cannot start gives the exit code.
async fn start_viewer(
    view: Option<&ViewFlags>,
    hub: Option<&Arc<LiveHub>>,
    job_dir: &Path,
) -> Result<Option<ViewServer>, u8> {
    let (Some(flags), Some(hub)) = (view, hub) else { return Ok(None) };
    let jobs_dir = job_dir.parent().unwrap_or(Path::new("."));
    match terminus_view::start(jobs_dir, flags.view_host, flags.view_port, Some(hub.clone())).await {
        Ok(server) => {
            eprintln!("viewer: {} (stops with the job)", server.page_url(&format!("/jobs/{}", hub.job())));
            Ok(Some(server))
        }
        Err(e) => {
            eprintln!("error: the viewer: {e}");
            eprintln!("hint: choose another --view-port (0 takes any free port)");
            Err(exit::INVALID)
        }
    }
}

/// Prints why the job could not start, with a hint where the engine is the cause; returns the
/// exit code.
fn start_failed(reporter: &Reporter, backend: &BackendSpec, error: terminus_actors::StartError) -> u8 {
    reporter.abandon();
    match error {
        terminus_actors::StartError::Docker(e) => {
            eprintln!("error: {e}");
            match backend {
                BackendSpec::Docker => eprintln!("hint: run scripts/setup.sh to install and start the Docker engine"),
                BackendSpec::Swarm(swarm) => eprintln!(
                    "hint: check environment.swarm.manager ({}) and that it is a swarm manager (docs/SCALE-OUT.md)",
                    swarm.manager
                ),
            }
            exit::NO_DOCKER
        }
        e => {
            eprintln!("error: {e}");
            exit::INVALID
        }
    }
}

/// With the viewer, every event goes to its hub first, then on to the progress bars.
fn through_hub(hub: Option<Arc<LiveHub>>, events_rx: UnboundedReceiver<RunEvent>) -> UnboundedReceiver<RunEvent> {
    match hub {
        Some(hub) => {
            let (tee_tx, tee_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut events_rx = events_rx;
            tokio::spawn(async move {
                while let Some(event) = events_rx.recv().await {
                    hub.publish(&event);
                    if tee_tx.send(event).is_err() {
                        break;
                    }
                }
            });
            tee_rx
        }
        None => events_rx,
    }
}

/// Waits for the job to end. A first interrupt cancels its trials; a second one, or the grace
/// period running out after the first, removes its containers and gives the exit code.
/// Returns whether it was interrupted.
async fn wait_for_job(handle: JobHandle, backend: &BackendSpec, grace: Duration) -> Result<bool, u8> {
    let job_id = handle.job_id.clone();
    let canceller = handle.canceller();
    let wait = handle.wait();
    tokio::pin!(wait);
    let mut interrupted = false;
    let grace_over = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(grace_over);
    // Listened for once: a second signal sent while the first is being handled still counts.
    let mut interrupts = Interrupts::listen();
    loop {
        tokio::select! {
            _ = &mut wait => break,
            _ = interrupts.next() => {
                if interrupted {
                    eprintln!("second interrupt: removing the job's containers and exiting");
                    let _ = terminus_actors::sweep_job_containers(backend, &job_id).await;
                    return Err(exit::INTERRUPTED);
                }
                interrupted = true;
                eprintln!("interrupt: cancelling running trials (press Ctrl-C again to stop at once)");
                canceller.cancel();
                grace_over.as_mut().reset(tokio::time::Instant::now() + grace);
            }
            _ = &mut grace_over => {
                eprintln!("the grace period is over: removing the job's containers and exiting");
                let _ = terminus_actors::sweep_job_containers(backend, &job_id).await;
                return Err(exit::INTERRUPTED);
            }
        }
    }
    Ok(interrupted)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn interrupt() {
    Interrupts::listen().next().await
}

/// Ctrl-C and SIGTERM, listened for from the moment this is made: one that arrives while its
/// holder is busy elsewhere is kept for the next [`Interrupts::next`], not lost.
pub struct Interrupts {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Interrupts {
    pub fn listen() -> Interrupts {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Interrupts { streams: signal(SignalKind::interrupt()).ok().zip(signal(SignalKind::terminate()).ok()) }
        }
        #[cfg(not(unix))]
        Interrupts {}
    }

    /// The next interrupt.
    pub async fn next(&mut self) {
        #[cfg(unix)]
        if let Some((int, term)) = &mut self.streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Each trial holds a few descriptors (its shell channel, transient exec connections); the
/// common default soft limit of 1024 is too low for hundreds of trials.
fn raise_fd_limit() {
    #[cfg(unix)]
    #[expect(unsafe_code, reason = "a libc call with no safe wrapper in our dependencies")]
    {
        // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
        unsafe {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max.min(65_536);
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
        }
    }
}

/// The results of the trials in `job_dir` that finished (a result that does not parse is
/// skipped, with a warning: a summary that drops one silently misleads).
pub fn trial_results(job_dir: &Path) -> Vec<TrialResult> {
    let mut results = Vec::new();
    for entry in std::fs::read_dir(job_dir).into_iter().flatten().flatten() {
        let path = TrialDir::new(entry.path()).result_json();
        // A directory without result.json is a trial that has not finished (or not a trial).
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        match serde_json::from_str(&text) {
            Ok(result) => results.push(result),
            Err(e) => eprintln!("warning: {} is not a trial result, skipped: {e}", path.display()),
        }
    }
    results
}
