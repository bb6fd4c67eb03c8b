//! Containers for trials, through the Docker Engine API (bollard).
//!
//! Architecture invariant: this is the only crate that imports bollard, and no `docker` CLI
//! process is ever spawned. It knows nothing about ractor, LLMs or Terminus; callers pass plain
//! values (image tags, paths, commands) and get plain values back.
//!
//! Layout:
//! - [`backend`]: the seam the actors see — where trials run: the local engine or a swarm;
//! - [`swarm`]: trials as one-replica Swarm services, exec on their nodes' daemons;
//! - [`engine`]: connecting (with API version negotiation) and label sweeps;
//! - [`image`]: building task images under content-hash tags, once per tag at a time;
//! - [`container`]: create/start with limits and labels, exec with a deadline, file transfer;
//! - [`compose`]: a task's sidecars (`environment/docker-compose.yaml`) through the Engine API;
//! - [`egress`]: allowlisted phases: an internal network and a proxy admitting `allowed_hosts`;
//! - [`channel`]: one long-lived `bash` per container used as a fast command channel;
//! - [`follow`]: a growing file of a running trial's container, streamed (the viewer's live terminal);
//! - [`tmux`]: pure tmux command building;
//! - [`observe`]: what the agent sees after its commands, read at a cost that follows what is new;
//! - [`archive`]: tar helpers for uploads and downloads.

pub mod archive;
pub mod backend;
pub mod channel;
pub mod compose;
pub mod container;
pub mod egress;
pub mod engine;
pub mod error;
pub mod follow;
pub mod image;
pub mod observe;
pub mod observe_reference;
pub mod placement;
pub mod swarm;
pub mod tmux;

pub use backend::Backend;
pub use channel::ShellChannel;
pub use container::{
    Container, ContainerSpec, DEFAULT_CAP_DROP, Downloaded, ExecOptions, ExecOutput, Hardening, IDLE_MARK,
};
pub use egress::NetworkAccess;
pub use engine::{Engine, ImageFacts};
pub use error::SandboxError;
pub use image::ImageBuilder;
pub use placement::{Labelled, LabelledKind, QueuedNotice};

/// Label carrying the job id on every container we create.
pub const LABEL_JOB_ID: &str = "terminus.job_id";
/// Label carrying the trial name on every container we create.
pub const LABEL_TRIAL_ID: &str = "terminus.trial_id";
/// Label carrying the process id of the orchestrator that created the container.
pub const LABEL_PID: &str = "terminus.pid";
/// Label carrying the job directory (absolute) of the orchestrator that created the container:
/// `gc` asks that directory's lock whether the job still runs.
pub const LABEL_JOB_DIR: &str = "terminus.job_dir";
/// Label carrying the identity of the machine whose orchestrator created the container.
pub const LABEL_HOST: &str = "terminus.host";
/// Label carrying what a trial's own container is for ([`ContainerRole`]); its sidecars and
/// egress proxy do not carry it.
pub const LABEL_ROLE: &str = "terminus.role";

/// What a trial's own container is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRole {
    /// The agent's environment: its terminal, its pane log.
    Agent,
    /// A separate verifier's environment.
    Verifier,
}

impl ContainerRole {
    /// The value of its [`LABEL_ROLE`] label.
    pub fn label(self) -> &'static str {
        match self {
            ContainerRole::Agent => "agent",
            ContainerRole::Verifier => "verifier",
        }
    }
}

/// Runs file work (walking, hashing, packing, unpacking) on the blocking pool, off the async
/// workers — two of them on a two-core machine, which a large task would otherwise stall for
/// every trial. A panic in `work` resumes in the caller.
pub async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("file work was cancelled: {e}"),
        },
    }
}
