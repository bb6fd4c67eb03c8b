//! Trials on a Docker Swarm: the cluster schedules and queues them, terminus reaches each
//! trial's container on its node's own daemon.
//!
//! - A trial is a one-replica service (`Replicated{replicas: 1}` — the 20.10 engine leaves a
//!   `replicated-job`'s container behind after `service rm`), restart condition `none`, `init`,
//!   a 2 s stop grace period, reservations and limits from the task's cpus and memory, labelled
//!   with the trial's labels (its container too, so nodes can be swept by label).
//! - The cluster is the admission queue: a task that fits nowhere stays `pending` with Swarm's
//!   reason, which provisioning reports until the task runs.
//! - Images: built on the manager; with a registry, pushed there and referenced by digest;
//!   without, streamed from the manager (export → import) to every node that lacks them before
//!   the first service that uses them.
//! - Exec has no Swarm API: each node's daemon is reached at the address Swarm reports for it
//!   plus `node_port` (TLS with the same certificates as the manager's, or none).
//! - Nodes are watched: one that goes `down` makes its trials' containers count as gone, so
//!   their trials restart elsewhere; one that comes back is swept of containers whose service no
//!   longer exists.
//!
//! A daemon (the manager's, a node's) is connected to in `daemon`, the nodes are watched in
//! `nodes`, images reach them through `images`, and a placed trial's container is found and
//! networked in `placement`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::{
    Limit, ResourceObject, ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec,
    TaskSpecContainerSpecPrivileges, TaskSpecLogDriver, TaskSpecPlacement, TaskSpecResources, TaskSpecRestartPolicy,
    TaskSpecRestartPolicyConditionEnum,
};

use crate::container::{Container, ContainerSpec};
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::placement::{Labelled, LabelledKind, QueuedNotice};

mod daemon;
mod images;
mod nodes;
mod placement;

pub use daemon::connect_daemon;

pub use terminus_core::cluster::{SwarmSettings, TlsFiles};

/// How often a queued trial's task is looked at.
const TASK_POLL: Duration = Duration::from_millis(250);

/// From the task being assigned a node to its container running (a pull from the registry).
const START_LIMIT: Duration = Duration::from_secs(600);

/// How often node health is read.
const NODE_POLL: Duration = Duration::from_secs(2);

/// How long the end of a job waits for a lost node to come back and be swept.
pub const NODE_RETURN_WAIT: Duration = Duration::from_secs(60);

/// What a service may wait for its container to stop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A task still pending after this is reported as queued (placements take well under a second).
const QUEUE_NOTICE_AFTER: Duration = Duration::from_secs(2);

/// Placements of one trial whose node was lost before its container ran.
const MAX_PLACEMENTS: usize = 3;

/// Tries (half a second apart) to reach the daemon of the node a trial was placed on.
const NODE_CONNECT_TRIES: u32 = 20;

/// Why a trial's task did not run.
enum Waited {
    /// The node it was sent to is lost: place it again, elsewhere.
    NodeLost(String),
    Failed(String),
}

/// A connected swarm.
#[derive(Debug)]
pub struct Swarm {
    manager: Engine,
    settings: SwarmSettings,
    /// Connections to node daemons, by node id.
    nodes: Mutex<HashMap<String, Engine>>,
    /// The nodes seen down by the watcher.
    down: Mutex<HashSet<String>>,
    /// Per image tag: the reference services use, once made (pushed, or streamed to the nodes).
    images: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::OnceCell<String>>>>,
    /// (node id, image tag) known to be on the node.
    streamed: Mutex<HashSet<(String, String)>>,
    /// Per node id: the id of the job's network made there. Made under this lock, so that trials
    /// starting at once on a node do not make two networks of one name.
    job_networks: tokio::sync::Mutex<HashMap<String, String>>,
    watching: std::sync::OnceLock<()>,
}

impl Swarm {
    pub async fn connect(settings: SwarmSettings) -> Result<Swarm, SandboxError> {
        let manager = connect_daemon(&settings.manager, settings.tls.as_ref()).await?;
        let info = manager.docker.info().await.map_err(|e| SandboxError::Connect(e.to_string()))?;
        let state = info.swarm.as_ref().and_then(|s| s.local_node_state).map(|s| s.to_string());
        let control = info.swarm.as_ref().and_then(|s| s.control_available).unwrap_or(false);
        if state.as_deref() != Some("active") || !control {
            return Err(SandboxError::Connect(format!(
                "{} is not a swarm manager (swarm state {:?}, control available: {control})",
                settings.manager,
                state.unwrap_or_default()
            )));
        }
        Ok(Swarm {
            manager,
            settings,
            nodes: Mutex::default(),
            down: Mutex::default(),
            images: tokio::sync::Mutex::default(),
            streamed: Mutex::default(),
            job_networks: tokio::sync::Mutex::default(),
            watching: std::sync::OnceLock::new(),
        })
    }

    pub fn manager(&self) -> &Engine {
        &self.manager
    }

    fn api(e: bollard::errors::Error) -> SandboxError {
        SandboxError::Api(e.to_string())
    }

    /// The service's name: Swarm allows 63 characters.
    fn service_name(name: &str) -> String {
        if name.len() <= 63 {
            return name.to_string();
        }
        let tail = &name[name.len() - 5..];
        format!("{}{tail}", &name[..58])
    }

    /// Creates the trial's service and waits until its container runs; `queued` hears each new
    /// reason the cluster gives for holding it.
    pub async fn start(&self, spec: &ContainerSpec, queued: QueuedNotice) -> Result<Container, SandboxError> {
        let err = |message: String| SandboxError::Start { name: spec.name.clone(), message };
        let image = self.image_for(&spec.image).await?;
        let mut labels = spec.labels.clone();
        let mut service_labels = labels.clone();
        service_labels.extend(self.settings.labels.clone());
        labels.remove("com.docker.stack.namespace");
        let nanos = |cpus: f64| (cpus * 1e9) as i64;
        let bytes = |mb: u64| (mb * 1024 * 1024) as i64;
        let container = TaskSpecContainerSpec {
            image: Some(image),
            labels: Some(labels),
            command: Some(crate::container::idle_command(&spec.make_dirs, spec.pid1)),
            env: (!spec.env.is_empty()).then(|| spec.env.clone()),
            dir: spec.workdir.clone(),
            init: Some(!spec.pid1),
            stop_grace_period: Some(STOP_GRACE.as_nanos() as i64),
            capability_drop: (!spec.confinement.cap_drop.is_empty()).then(|| {
                spec.confinement.cap_drop.iter().map(|c| format!("CAP_{}", c.trim_start_matches("CAP_"))).collect()
            }),
            capability_add: (!spec.confinement.cap_add.is_empty()).then(|| {
                spec.confinement.cap_add.iter().map(|c| format!("CAP_{}", c.trim_start_matches("CAP_"))).collect()
            }),
            hosts: (!spec.extra_hosts.is_empty())
                .then(|| spec.extra_hosts.iter().map(|h| h.replacen(':', " ", 1)).collect()),
            // Asked for; an engine older than API 1.46 ignores it, which `attach` finds out and
            // the trial's result says.
            privileges: Some(TaskSpecContainerSpecPrivileges {
                no_new_privileges: Some(spec.confinement.no_new_privileges),
                ..Default::default()
            }),
            ..Default::default()
        };
        let resources = TaskSpecResources {
            reservations: Some(ResourceObject {
                nano_cpus: spec.cpus.map(nanos),
                memory_bytes: spec.memory_mb.map(bytes),
                ..Default::default()
            }),
            limits: Some(Limit {
                nano_cpus: spec.cpus.map(nanos),
                memory_bytes: spec.memory_mb.map(bytes),
                pids: spec.confinement.pids_limit,
            }),
            ..Default::default()
        };
        let service = ServiceSpec {
            name: Some(Self::service_name(&spec.name)),
            labels: Some(service_labels),
            task_template: Some(TaskSpec {
                container_spec: Some(container),
                resources: Some(resources),
                restart_policy: Some(TaskSpecRestartPolicy {
                    condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                    ..Default::default()
                }),
                // As local trials: the container's output is not kept on the node's disk.
                log_driver: (!spec.confinement.keep_container_logs)
                    .then(|| TaskSpecLogDriver { name: Some("none".into()), options: None }),
                placement: (!self.settings.constraints.is_empty()).then(|| TaskSpecPlacement {
                    constraints: Some(self.settings.constraints.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            mode: Some(ServiceSpecMode {
                replicated: Some(ServiceSpecModeReplicated { replicas: Some(1) }),
                ..Default::default()
            }),
            ..Default::default()
        };
        // A node lost while the trial waited for its container: placed again, elsewhere.
        let mut lost = Vec::new();
        for _ in 0..MAX_PLACEMENTS {
            let mut service = service.clone();
            let excluded: Vec<String> = {
                let down = self.down.lock().expect("not poisoned");
                down.iter().chain(lost.iter()).map(|id| format!("node.id!={id}")).collect()
            };
            if !excluded.is_empty()
                && let Some(task) = service.task_template.as_mut()
            {
                let placement = task.placement.get_or_insert_with(TaskSpecPlacement::default);
                placement.constraints.get_or_insert_with(Vec::new).extend(excluded);
            }
            let created = self.manager.docker.create_service(service, None).await.map_err(|e| err(e.to_string()))?;
            let service_id = created.id.unwrap_or_default();
            let (node, container_id) = match self.wait_running(&service_id, queued.clone()).await {
                Ok(placed) => placed,
                Err(Waited::NodeLost(node)) => {
                    let _ = self.manager.docker.delete_service(&service_id).await;
                    tracing::warn!(node = %node, "a trial's node was lost before its container ran; placing it again");
                    lost.push(node);
                    continue;
                }
                Err(Waited::Failed(message)) => {
                    let _ = self.manager.docker.delete_service(&service_id).await;
                    return Err(err(message));
                }
            };
            return match self.attach(spec, &service_id, &node, &container_id).await {
                Ok(container) => Ok(container.placed_after(self.hostnames(&lost).await)),
                Err(Waited::NodeLost(node)) => {
                    // A node coming back runs its tasks a moment before its API answers; one
                    // that never answered is as good as lost.
                    let _ = self.manager.docker.delete_service(&service_id).await;
                    tracing::warn!(node = %node, "a trial's node does not answer; placing it again");
                    lost.push(node);
                    continue;
                }
                Err(Waited::Failed(message)) => {
                    let _ = self.manager.docker.delete_service(&service_id).await;
                    Err(err(message))
                }
            };
        }
        Err(err(format!("its node was lost {MAX_PLACEMENTS} times before its container ran")))
    }
}

impl Swarm {
    /// Removes the services carrying `label` (`=value`), then the containers carrying it on
    /// every node that answers. A node that is down is swept if it comes back within
    /// `wait_for_nodes` (the end of a job waits a little for a node it lost; anything on a node
    /// that stays away is left to `gc`, and said).
    pub async fn remove_with_label(
        &self,
        label: &str,
        value: Option<&str>,
        wait_for_nodes: Duration,
    ) -> Result<usize, SandboxError> {
        let mut removed = 0;
        for (service, _) in self.services_with_label(label, value).await? {
            match self.manager.docker.delete_service(&service).await {
                Ok(()) => removed += 1,
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                Err(e) => return Err(Self::api(e)),
            }
        }
        let mut pending: HashSet<String> = HashSet::new();
        let deadline = Instant::now() + wait_for_nodes;
        loop {
            for (id, view) in self.node_views().await? {
                let swept = self.sweep_node(&id, &view, label, value).await;
                match swept {
                    Some(n) => {
                        removed += n;
                        pending.remove(&id);
                    }
                    None => {
                        pending.insert(id);
                    }
                }
            }
            if pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(NODE_POLL).await;
        }
        if !pending.is_empty() {
            tracing::warn!(nodes = ?pending, "swarm nodes still away: what they hold is removed when they return under a running job, or by `terminus gc`");
        }
        Ok(removed)
    }

    /// Services and node containers carrying `label`.
    pub async fn labelled(&self, label: &str) -> Result<Vec<Labelled>, SandboxError> {
        let mut out: Vec<Labelled> = self
            .services_with_label(label, None)
            .await?
            .into_iter()
            .map(|(id, labels)| Labelled { id, labels, kind: LabelledKind::Service })
            .collect();
        for (node, view) in self.node_views().await? {
            if !view.ready {
                continue;
            }
            if let Ok(engine) = self.node(&node, Some(&view)).await {
                for (id, labels) in engine.labelled_containers(label).await.unwrap_or_default() {
                    out.push(Labelled { id, labels, kind: LabelledKind::Container { node: Some(node.clone()) } });
                }
            }
        }
        Ok(out)
    }

    pub async fn remove_labelled(&self, id: &str, kind: &LabelledKind) -> Result<(), SandboxError> {
        match kind {
            LabelledKind::Service => match self.manager.docker.delete_service(id).await {
                Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
                Err(e) => Err(Self::api(e)),
            },
            LabelledKind::Container { node: Some(node) } => self.node(node, None).await?.remove_container(id).await,
            LabelledKind::Container { node: None } => self.manager.remove_container(id).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_fit_swarms_limit() {
        let long = format!("terminus-12345678-{}-ab12", "x".repeat(80));
        let name = Swarm::service_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-ab12"));
        assert_eq!(Swarm::service_name("short"), "short");
    }
}
