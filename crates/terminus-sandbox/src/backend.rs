//! The environment backend: what a trial needs from "a place to run", behind one type.
//!
//! - [`Backend::Docker`]: the local engine (today's behaviour and speed, unchanged).
//! - [`Backend::Swarm`]: a Docker Swarm ([`crate::swarm`]): each trial a one-replica service the
//!   cluster schedules (and queues), its container reached on its node's own daemon.
//!
//! Either way a provisioned trial gets a [`Container`] (the main one of its
//! [`Environment`](crate::environment::Environment)) whose exec, shell channel and file
//! transfer go to the daemon that runs it, so the Terminus loop and everything above it is the
//! same. What differs is here: starting, removing, liveness, reaping by label, and which daemon
//! builds the images.

use std::sync::Arc;
use std::time::Duration;

use crate::container::{Container, ContainerSpec};
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::meter::LatencyWindow;
use crate::placement::{Labelled, LabelledKind, QueuedNotice};
use crate::swarm::{Swarm, SwarmSettings};

/// Where trials run.
#[derive(Clone, Debug)]
pub enum Backend {
    Docker(Engine),
    Swarm(Arc<Swarm>),
}

impl Backend {
    /// The local engine (`DOCKER_HOST` or the default socket).
    pub async fn docker() -> Result<Backend, SandboxError> {
        Ok(Backend::Docker(Engine::connect().await?))
    }

    /// A swarm through its manager.
    pub async fn swarm(settings: SwarmSettings) -> Result<Backend, SandboxError> {
        Ok(Backend::Swarm(Arc::new(Swarm::connect(settings).await?)))
    }

    /// Connects to where a job's trials run (`environment.type`).
    pub async fn connect(spec: &terminus_config::cluster::BackendSpec) -> Result<Backend, SandboxError> {
        match spec {
            terminus_config::cluster::BackendSpec::Docker => Backend::docker().await,
            terminus_config::cluster::BackendSpec::Swarm(swarm) => Backend::swarm((**swarm).clone()).await,
        }
    }

    /// The daemon that builds task images and is pinged for the backend's health: the local
    /// engine, or the swarm's manager.
    pub fn engine(&self) -> &Engine {
        match self {
            Backend::Docker(engine) => engine,
            Backend::Swarm(swarm) => swarm.manager(),
        }
    }

    /// The local engine, for what only it offers (networks per job, compose sidecars, egress
    /// proxies, GPUs, storage limits); None on a swarm.
    pub fn local(&self) -> Option<&Engine> {
        match self {
            Backend::Docker(engine) => Some(engine),
            Backend::Swarm(_) => None,
        }
    }

    pub async fn ping(&self) -> bool {
        self.engine().ping().await
    }

    /// The daemon's request latencies since the last reading (what admission weighs): the local
    /// engine's, or the swarm manager's.
    pub fn latency(&self) -> LatencyWindow {
        self.engine().latency()
    }

    /// Removes one container by name, on the daemon that builds (a separate verifier's, which
    /// runs on the local engine only).
    pub async fn remove_container(&self, name: &str) -> Result<(), SandboxError> {
        self.engine().remove_container(name).await
    }

    /// Removes one network by name (the job's own, when the label sweep failed).
    pub async fn remove_network(&self, name: &str) -> Result<(), SandboxError> {
        self.engine().remove_network(name).await
    }

    /// Starts the backend's background watches: the engine's heartbeat, and on a swarm the
    /// nodes' health.
    pub fn start_watching(&self) {
        self.engine().start_heartbeat();
        if let Backend::Docker(engine) = self {
            engine.start_stop_watch();
        }
        if let Backend::Swarm(swarm) = self {
            swarm.watch_nodes();
        }
    }

    /// Starts a trial's container from `spec`. On a swarm this waits while the cluster queues
    /// the trial, calling `queued` with each new reason, and returns once its container runs.
    pub async fn start_container(&self, spec: &ContainerSpec, queued: QueuedNotice) -> Result<Container, SandboxError> {
        match self {
            Backend::Docker(engine) => {
                let warden = engine.warden_volume().await?;
                engine.start_container(&ContainerSpec { warden: Some(warden), ..spec.clone() }).await
            }
            Backend::Swarm(swarm) => {
                let container = swarm.start(spec, queued).await?;
                if let Err(e) = container.install_warden().await {
                    let _ = container.remove().await;
                    return Err(e);
                }
                Ok(container)
            }
        }
    }

    /// Removes everything carrying `label` (`=value`): containers, and on a swarm its services
    /// on the manager and their containers on every node that answers. Returns how many went.
    pub async fn remove_with_label(&self, label: &str, value: Option<&str>) -> Result<usize, SandboxError> {
        match self {
            Backend::Docker(engine) => engine.remove_with_label(label, value).await,
            Backend::Swarm(swarm) => swarm.remove_with_label(label, value, Duration::ZERO).await,
        }
    }

    /// The end of a job: [`Backend::remove_with_label`], and on a swarm a short wait for nodes
    /// that are down, so what they ran is removed if they come back.
    pub async fn sweep_job(&self, label: &str, value: &str) -> Result<usize, SandboxError> {
        match self {
            Backend::Docker(engine) => engine.remove_with_label(label, Some(value)).await,
            Backend::Swarm(swarm) => swarm.remove_with_label(label, Some(value), crate::swarm::NODE_RETURN_WAIT).await,
        }
    }

    /// Removes the networks carrying `label=value` (on a swarm, trials make none).
    pub async fn remove_networks_with_label(&self, label: &str, value: &str) -> Result<usize, SandboxError> {
        match self {
            Backend::Docker(engine) => engine.remove_networks_with_label(label, value).await,
            Backend::Swarm(_) => Ok(0),
        }
    }

    /// Everything carrying `label`, with all its labels: containers, and on a swarm its services
    /// and the containers of every node that answers (what `gc` judges).
    pub async fn labelled(&self, label: &str) -> Result<Vec<Labelled>, SandboxError> {
        match self {
            Backend::Docker(engine) => Ok(engine
                .labelled_containers(label)
                .await?
                .into_iter()
                .map(|(id, labels)| Labelled { id, labels, kind: LabelledKind::Container { node: None } })
                .collect()),
            Backend::Swarm(swarm) => swarm.labelled(label).await,
        }
    }

    /// Removes one thing [`Backend::labelled`] listed.
    pub async fn remove_labelled(&self, item: &Labelled) -> Result<(), SandboxError> {
        match (self, &item.kind) {
            (Backend::Docker(engine), _) => engine.remove_container(&item.id).await,
            (Backend::Swarm(swarm), kind) => swarm.remove_labelled(&item.id, kind).await,
        }
    }
}
