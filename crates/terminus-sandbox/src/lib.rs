//! Containers for trials, through the Docker Engine API (bollard).
//!
//! Architecture invariant: this is the only crate that imports bollard, and no `docker` CLI
//! process is ever spawned. It knows nothing about ractor, LLMs or Terminus; callers pass plain
//! values (image tags, paths, commands) and get plain values back.
//!
//! Layout:
//! - [`backend`]: the seam the actors see — where trials run: the local engine or a swarm;
//! - [`site`]: a job's place on its backend: labels, its network, its image builder;
//! - [`provision`]: a trial's environment from a plain request, through one call;
//! - [`swarm`]: trials as one-replica Swarm services, exec on their nodes' daemons;
//! - [`engine`]: connecting (with API version negotiation) and label sweeps;
//! - [`image`]: building task images under content-hash tags, once per tag at a time;
//! - [`container`]: create/start with limits and labels, exec with a deadline, file transfer;
//! - [`environment`]: a trial's main container with its compose project and egress proxy, as
//!   one thing: its network per phase, its removal;
//! - [`labels`]: the labels every container carries, by which sweeps find them;
//! - [`compose`]: a task's sidecars (`environment/docker-compose.yaml`) through the Engine API;
//! - [`egress`]: allowlisted phases: an internal network and a proxy admitting `allowed_hosts`;
//! - [`channel`]: one long-lived `bash` per container used as a fast command channel;
//! - [`follow`]: a growing file of a running trial's container, streamed (the viewer's live terminal);
//! - [`tmux`]: pure tmux command building;
//! - [`control`]: the same commands through one control-mode tmux client kept by the channel;
//! - [`observe`]: what the agent sees after its commands, read at a cost that follows what is new;
//! - [`archive`]: tar helpers for uploads and downloads.

pub mod archive;
pub mod backend;
mod blocking;
pub mod channel;
pub mod compose;
pub mod container;
pub mod control;
pub mod credentials;
pub mod egress;
pub mod engine;
pub mod environment;
pub mod error;
pub mod follow;
pub mod image;
pub mod labels;
pub mod liveness;
pub mod meter;
pub mod observe;
pub mod observe_reference;
pub mod placement;
pub mod provision;
pub mod site;
mod stops;
pub mod swarm;
pub mod tmux;
pub mod warden;

pub use backend::Backend;
pub use blocking::blocking;
pub use channel::{OutputChunks, ShellChannel};
pub use container::{
    ChangeKind, Confinement, Container, ContainerSpec, DEFAULT_CAP_DROP, Downloaded, ExecOptions, ExecOutput,
    FileChange, IDLE_MARK,
};
pub use egress::NetworkAccess;
pub use engine::{Engine, ImageFacts};
pub use environment::Environment;
pub use error::SandboxError;
pub use image::ImageBuilder;
pub use labels::*;
pub use liveness::Liveness;
pub use placement::{Labelled, LabelledKind, QueuedNotice};
pub use provision::{ProvisionError, ProvisionOutcome, ProvisionRequest};
pub use site::{Site, SiteSpec};
