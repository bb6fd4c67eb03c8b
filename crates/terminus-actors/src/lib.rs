//! The actors of terminus and the entry point that runs a job with them.
//!
//! ```text
//!                 Supervisor ──spawns, supervises──► Trial ×N ──spawns──► TmuxSession
//!                     │  ▲                             │  ▲
//!        spawns ×agent│  └── progress, results ────────┘  │ RPC: send keys, capture, is alive
//!                     ▼                                   │
//!                    LLM ◄──── Complete(request) ─────────┘
//! ```
//!
//! The Summarizer, the fifth actor of the design, is not built yet: summarization is off and
//! each trial says so in the log; a context overflow ends a trial with an error.

pub mod context;
pub mod environment;
pub mod files;
pub mod llm;
pub mod summarizer;
pub mod supervisor;
pub mod tmux_session;
pub mod trial;

use std::sync::Arc;

use ractor::{Actor, ActorRef};
use terminus_config::JobSpec;
use terminus_core::events::RunEvent;
use terminus_sandbox::{Engine, SandboxError};
use tokio::sync::mpsc::UnboundedSender;

use crate::context::JobContext;
use crate::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};

/// A job in progress.
pub struct JobHandle {
    pub job_dir: std::path::PathBuf,
    pub job_id: String,
    supervisor: ActorRef<SupervisorMsg>,
    join: tokio::task::JoinHandle<()>,
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

impl JobHandle {
    pub fn canceller(&self) -> JobCanceller {
        JobCanceller { supervisor: self.supervisor.clone() }
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

/// Connects to Docker and starts the job's Supervisor. Events arrive on `events` until
/// [`RunEvent::JobFinished`].
pub async fn start_job(spec: JobSpec, events: UnboundedSender<RunEvent>) -> Result<JobHandle, StartError> {
    let engine = Engine::connect().await?;
    let ctx = Arc::new(JobContext::new(spec, engine));
    let job_dir = ctx.job_dir.clone();
    let job_id = ctx.job_id.to_string();
    let (supervisor, join) = Actor::spawn(None, SupervisorActor, SupervisorArgs { ctx, events })
        .await
        .map_err(|e| StartError::Spawn(e.to_string()))?;
    Ok(JobHandle { job_dir, job_id, supervisor, join })
}

/// Removes every container of a job (used after a second Ctrl-C).
pub async fn sweep_job_containers(job_id: &str) -> Result<usize, SandboxError> {
    let engine = Engine::connect().await?;
    engine.remove_with_label(terminus_sandbox::LABEL_JOB_ID, Some(job_id)).await
}
