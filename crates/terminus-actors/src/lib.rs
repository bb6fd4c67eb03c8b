//! The actors of terminus and the entry point that runs a job with them.
//!
//! ```text
//!                 Supervisor ──spawns, supervises──► Trial ×N ──spawns──► TmuxSession
//!                     │  ▲                             │  ▲
//!        spawns ×agent│  └── TrialReport ──────────────┘  │ TmuxHandle: send keys, capture, is alive
//!                     ▼                                   │
//!                    LLM ◄──── LlmHandle::complete ───────┘
//! ```
//!
//! The Summarizer (spawned by a Trial when its context fills up) completes the five. Reports
//! that travel up the tree are typed in [`protocol`], so no actor file imports its parent's.
//!
//! What a handler may await, in every actor: nothing. Handlers do in-memory work and send
//! messages; anything slow runs in a task that reports back as a message.

pub mod budget;
pub mod context;
pub mod environment;
pub mod files;
pub mod llm;
/// The job directory's lock lives in `terminus_core` (the viewer asks it too); re-exported for callers.
pub use terminus_core::lock;
pub mod model_limits;
mod panics;
pub mod protocol;
pub mod resume;
pub mod shared_limit;
pub mod summarizer;
pub mod supervisor;
pub mod tmux_session;
pub mod trial;

use std::sync::Arc;

use ractor::{Actor, ActorRef};
use terminus_config::JobPlan;
use terminus_config::cluster::BackendSpec;
use terminus_core::events::RunEvent;
use terminus_core::ids::JobId;
use terminus_sandbox::{Backend, SandboxError, SiteSpec};
use tokio::sync::mpsc::UnboundedSender;

use crate::context::JobContext;
use crate::lock::JobLock;
use crate::resume::StartMode;
use crate::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};

/// A job in progress. It holds the job directory's lock until the job is over.
pub struct JobHandle {
    pub job_dir: std::path::PathBuf,
    pub job_id: String,
    supervisor: ActorRef<SupervisorMsg>,
    join: tokio::task::JoinHandle<()>,
    _lock: JobLock,
}

/// Cancels a running job; cheap to clone, usable while another task waits on the job.
#[derive(Clone)]
pub struct JobCanceller {
    supervisor: ActorRef<SupervisorMsg>,
}

impl JobCanceller {
    /// Stops dispatching and cancels the running trials; their containers are removed and their
    /// results record `CancelledError`.
    pub fn cancel(&self) {
        let _ = self.supervisor.cast(SupervisorMsg::Cancel);
    }
}

/// Sends live controls to a running job; cheap to clone.
#[derive(Clone)]
pub struct JobController {
    supervisor: ActorRef<SupervisorMsg>,
}

/// Why a live control got no status back.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Refused(#[from] terminus_core::control::ControlRefusal),
    #[error("the job is no longer running")]
    Gone,
}

impl JobController {
    /// Applies `request` and returns the job's status after it (the Supervisor answers at once:
    /// it applies controls in memory, whatever they start runs in the background).
    pub async fn ask(
        &self,
        request: terminus_core::control::JobControl,
    ) -> Result<terminus_core::control::JobStatus, ControlError> {
        let answer = self
            .supervisor
            .call(|port| SupervisorMsg::Control(request, port), Some(std::time::Duration::from_secs(30)))
            .await;
        match answer {
            Ok(ractor::rpc::CallResult::Success(reply)) => Ok(reply?),
            _ => Err(ControlError::Gone),
        }
    }
}

impl JobHandle {
    pub fn canceller(&self) -> JobCanceller {
        JobCanceller { supervisor: self.supervisor.clone() }
    }

    pub fn controller(&self) -> JobController {
        JobController { supervisor: self.supervisor.clone() }
    }

    /// Waits until the Supervisor has stopped (after `JobFinished` was sent).
    pub async fn wait(self) {
        let _ = self.join.await;
    }
}

/// Why a job could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Docker(#[from] SandboxError),
    #[error("cannot start the job: {0}")]
    Spawn(String),
}

/// Connects to Docker and starts the job's Supervisor: a new job, or (`StartMode::Resume`) the
/// continuation of the one in the job directory, whose leftover containers are removed first.
/// The caller holds the job directory's `lock` (nothing may touch the directory before); the
/// handle keeps it. Events arrive on `events` until [`RunEvent::JobFinished`].
pub async fn start_job(
    plan: JobPlan,
    events: UnboundedSender<RunEvent>,
    mode: StartMode,
    lock: JobLock,
) -> Result<JobHandle, StartError> {
    start_job_with(plan, events, mode, lock, StartOptions::default()).await
}

/// How a service starts a job, beyond what a job file says.
#[derive(Clone, Default)]
pub struct StartOptions {
    /// A limit on running trials over every job of the process.
    pub shared: Option<Arc<shared_limit::SharedLimit>>,
    /// Start paused (see [`resume::StartingPoint::paused`]).
    pub paused: bool,
    /// The id of a new job (a resumed one keeps the id it has).
    pub job_id: Option<JobId>,
}

/// [`start_job`] with [`StartOptions`].
pub async fn start_job_with(
    plan: JobPlan,
    events: UnboundedSender<RunEvent>,
    mode: StartMode,
    lock: JobLock,
    options: StartOptions,
) -> Result<JobHandle, StartError> {
    let backend = Backend::connect(plan.backend()).await?;
    // Outages are noticed even while no trial is looking (see `check_container`); on a swarm,
    // so are lost nodes.
    backend.start_watching();
    let job_dir = std::path::absolute(plan.dir()).unwrap_or_else(|_| plan.dir());
    let resuming = matches!(mode, StartMode::Resume { .. });
    let (previous_id, mut start) =
        resume::plan_start(&plan.trials, &job_dir, mode).map_err(|e| StartError::Spawn(e.to_string()))?;
    start.paused = options.paused;
    // A job stopped before its first result still has its containers under the id it was given.
    if let Some(id) = previous_id.or(options.job_id.filter(|_| resuming)) {
        // On a swarm: its services on the manager, their containers on every node.
        let reaped = backend.remove_with_label(terminus_sandbox::LABEL_JOB_ID, Some(&id.to_string())).await?;
        if reaped > 0 {
            tracing::warn!(reaped, "removed containers an earlier run of this job left behind");
        }
        // Their trials' networks too (compose, egress); the job's own is made again below.
        let _ = backend.remove_networks_with_label(terminus_sandbox::LABEL_JOB_ID, &id.to_string()).await;
    }
    // Before any trial: every trial and its config.json see the same limits.
    let mut plan = plan;
    // No task reads a model key from the host unless the job names the variable.
    plan.protect_host_variables(terminus_llm::providers::key_variables());
    // A replay asks no model: its servers are not asked for their limits either.
    if !plan.replays() {
        model_limits::settle(plan.agents_mut()).await;
    }
    let job_id = previous_id.or(options.job_id).unwrap_or_else(JobId::new);
    let limits = plan.build_limits();
    let site = SiteSpec {
        job_id: job_id.to_string(),
        job_dir: job_dir.clone(),
        isolate_network: plan.isolate_network(),
        build_limits: terminus_sandbox::image::BuildLimits { memory_mb: limits.memory_mb, cpus: limits.cpus },
    };
    let site = backend.open_site(site).await?;
    let mut ctx = JobContext::new(plan, job_id, job_dir.clone(), backend, site);
    ctx.shared_limit = options.shared;
    let ctx = Arc::new(ctx);
    let job_id = ctx.job_id.to_string();
    let args = SupervisorArgs { ctx, events, start };
    let (supervisor, join) =
        Actor::spawn(None, SupervisorActor, args).await.map_err(|e| StartError::Spawn(e.to_string()))?;
    Ok(JobHandle { job_dir, job_id, supervisor, join, _lock: lock })
}

/// Removes everything of a job (used after a second Ctrl-C): its containers, and on a swarm its
/// services and their containers on every node.
pub async fn sweep_job_containers(backend: &BackendSpec, job_id: &str) -> Result<usize, SandboxError> {
    let backend = Backend::connect(backend).await?;
    backend.remove_with_label(terminus_sandbox::LABEL_JOB_ID, Some(job_id)).await
}
