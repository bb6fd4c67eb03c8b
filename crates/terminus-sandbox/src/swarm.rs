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

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{
    Limit, NodeSpecAvailabilityEnum, NodeSpecRoleEnum, NodeState, ResourceObject, ServiceSpec, ServiceSpecMode,
    ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec, TaskSpecContainerSpecPrivileges, TaskSpecLogDriver,
    TaskSpecPlacement, TaskSpecResources, TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{
    ListNodesOptions, ListServicesOptionsBuilder, ListTasksOptionsBuilder, PushImageOptionsBuilder,
    TagImageOptionsBuilder,
};
use futures_util::StreamExt;

use crate::LABEL_TRIAL_ID;
use crate::container::{Container, ContainerSpec};
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::placement::{Labelled, LabelledKind, Placement, QueuedNotice};

/// Client certificates for a daemon over TLS (Docker's `ca.pem`, `cert.pem`, `key.pem`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How to reach a swarm and where its trials may run (the job file's `environment.swarm`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwarmSettings {
    /// `unix:///path`, `tcp://host:port` or `ssh://user@host`.
    pub manager: String,
    /// For a `tcp://` manager.
    pub tls: Option<TlsFiles>,
    /// Each node's daemon: its Swarm address and this port.
    pub node_port: u16,
    /// For the nodes' daemons (None: plain TCP, for private networks only).
    pub node_tls: Option<TlsFiles>,
    /// `host:port` of a registry every node can pull from; None streams images to the nodes.
    pub registry: Option<String>,
    /// Placement constraints of every trial (`node.role==worker`, `node.labels.gpu!=true`…).
    pub constraints: Vec<String>,
    /// Extra labels on every trial's service.
    pub labels: HashMap<String, String>,
}

/// How long a request to a daemon may take (bollard's timeout, in seconds).
const REQUEST_TIMEOUT: u64 = 120;
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

/// Connects to a daemon at `address` (`unix://`, `tcp://`, `ssh://`), negotiating the API
/// version (Debian's engine speaks 1.41, bollard asks for newer) and pinging it.
pub async fn connect_daemon(address: &str, tls: Option<&TlsFiles>) -> Result<Engine, SandboxError> {
    let fail = |e: bollard::errors::Error| SandboxError::Connect(format!("{address}: {e}"));
    let version = bollard::API_DEFAULT_VERSION;
    let docker = if let Some(path) = address.strip_prefix("unix://") {
        Docker::connect_with_socket(path, REQUEST_TIMEOUT, version).map_err(fail)?
    } else if address.starts_with("ssh://") {
        Docker::connect_with_ssh(address, REQUEST_TIMEOUT, version, None).map_err(fail)?
    } else if let Some(tls) = tls {
        let host = address.replacen("tcp://", "", 1);
        Docker::connect_with_ssl(&host, &tls.key, &tls.cert, &tls.ca, REQUEST_TIMEOUT, version).map_err(fail)?
    } else {
        Docker::connect_with_http(address, REQUEST_TIMEOUT, version).map_err(fail)?
    };
    let docker = docker.negotiate_version().await.map_err(fail)?;
    docker.ping().await.map_err(fail)?;
    Ok(Engine::from_docker(docker))
}

/// One node as the manager last described it.
#[derive(Clone, Debug)]
struct NodeView {
    addr: String,
    hostname: String,
    role: String,
    labels: HashMap<String, String>,
    ready: bool,
    active: bool,
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

    /// Every node as the manager describes it, by id.
    async fn node_views(&self) -> Result<HashMap<String, NodeView>, SandboxError> {
        let nodes = self.manager.docker.list_nodes(None::<ListNodesOptions>).await.map_err(Self::api)?;
        Ok(nodes
            .into_iter()
            .filter_map(|node| {
                let id = node.id?;
                let spec = node.spec.unwrap_or_default();
                let status = node.status.unwrap_or_default();
                let view = NodeView {
                    addr: status.addr.unwrap_or_default(),
                    hostname: node.description.and_then(|d| d.hostname).unwrap_or_default(),
                    role: match spec.role {
                        Some(NodeSpecRoleEnum::MANAGER) => "manager".into(),
                        _ => "worker".into(),
                    },
                    labels: spec.labels.unwrap_or_default(),
                    ready: status.state == Some(NodeState::READY),
                    active: matches!(spec.availability, Some(NodeSpecAvailabilityEnum::ACTIVE) | None),
                };
                Some((id, view))
            })
            .collect())
    }

    /// The daemon of node `id`, connected on first use.
    async fn node(&self, id: &str, view: Option<&NodeView>) -> Result<Engine, SandboxError> {
        if let Some(engine) = self.nodes.lock().expect("not poisoned").get(id) {
            return Ok(engine.clone());
        }
        let addr = match view {
            Some(view) => view.addr.clone(),
            None => {
                let node = self.manager.docker.inspect_node(id).await.map_err(Self::api)?;
                node.status.and_then(|s| s.addr).unwrap_or_default()
            }
        };
        // A manager on 0.0.0.0 reports that: its own daemon is the one we already talk to.
        let engine = if addr.is_empty() || addr == "0.0.0.0" {
            self.manager.clone()
        } else {
            connect_daemon(&format!("tcp://{addr}:{}", self.settings.node_port), self.settings.node_tls.as_ref())
                .await?
        };
        self.nodes.lock().expect("not poisoned").insert(id.to_string(), engine.clone());
        Ok(engine)
    }

    /// Whether node `id` was last seen down.
    pub fn is_down(&self, id: &str) -> bool {
        self.down.lock().expect("not poisoned").contains(id)
    }

    /// Watches node health every two seconds (once per swarm): a node that goes down is
    /// remembered (its trials' containers count as gone); one that comes back is swept of the
    /// containers whose service is gone.
    pub fn watch_nodes(self: &Arc<Self>) {
        if self.watching.set(()).is_err() {
            return;
        }
        let swarm = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(NODE_POLL).await;
                let Some(swarm) = swarm.upgrade() else { break };
                let Ok(views) = swarm.node_views().await else { continue };
                // Down in the manager's view, or a daemon that does not answer us (the manager
                // takes about ten seconds to see a dead node; its trials' next start must not
                // be sent there meanwhile).
                let mut now_down: HashSet<String> =
                    views.iter().filter(|(_, v)| !v.ready).map(|(id, _)| id.clone()).collect();
                let known: Vec<(String, Engine)> =
                    swarm.nodes.lock().expect("not poisoned").iter().map(|(id, e)| (id.clone(), e.clone())).collect();
                let pings = known.iter().map(|(id, engine)| async move { (id.clone(), engine.ping().await) });
                for (id, answers) in futures_util::future::join_all(pings).await {
                    if !answers {
                        now_down.insert(id);
                    }
                }
                let back: Vec<String> = {
                    let mut down = swarm.down.lock().expect("not poisoned");
                    let back = down.difference(&now_down).cloned().collect();
                    for id in now_down.difference(&down) {
                        tracing::warn!(node = %id, host = %views[id].hostname, "a swarm node is down; its trials will run elsewhere");
                    }
                    *down = now_down;
                    back
                };
                for id in back {
                    // Its daemon restarted: connect anew, and remove what lost its service.
                    swarm.nodes.lock().expect("not poisoned").remove(&id);
                    if let Err(e) = swarm.sweep_orphans(&id, views.get(&id)).await {
                        tracing::warn!(node = %id, error = %e, "could not sweep a node that came back");
                    }
                }
            }
        });
    }

    /// Removes the containers of node `id` whose trial's service no longer exists.
    async fn sweep_orphans(&self, id: &str, view: Option<&NodeView>) -> Result<usize, SandboxError> {
        let engine = self.node(id, view).await?;
        let services = self.services_with_label(LABEL_TRIAL_ID, None).await?;
        let live: HashSet<String> =
            services.iter().filter_map(|(_, labels)| labels.get(LABEL_TRIAL_ID).cloned()).collect();
        let mut removed = 0;
        for (container, labels) in engine.labelled_containers(LABEL_TRIAL_ID).await? {
            let orphan = labels.get(LABEL_TRIAL_ID).is_some_and(|t| !live.contains(t));
            if orphan && engine.remove_container(&container).await.is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(node = %id, removed, "removed containers of trials that had moved on");
        }
        Ok(removed)
    }

    async fn services_with_label(
        &self,
        label: &str,
        value: Option<&str>,
    ) -> Result<Vec<(String, HashMap<String, String>)>, SandboxError> {
        let filter = match value {
            Some(value) => format!("{label}={value}"),
            None => label.to_string(),
        };
        let options = ListServicesOptionsBuilder::default()
            .filters(&HashMap::from([("label".to_string(), vec![filter])]))
            .build();
        let services = self.manager.docker.list_services(Some(options)).await.map_err(Self::api)?;
        Ok(services
            .into_iter()
            .filter_map(|s| Some((s.id?, s.spec.and_then(|spec| spec.labels).unwrap_or_default())))
            .collect())
    }

    fn eligible(&self, id: &str, view: &NodeView) -> bool {
        eligible_with(&self.settings, id, view)
    }

    /// The image reference services use for the manager's image `tag`: in the registry, by
    /// digest; or, without one, `tag` itself once every eligible node has it.
    async fn image_for(&self, tag: &str) -> Result<String, SandboxError> {
        let cell = self.images.lock().await.entry(tag.to_string()).or_default().clone();
        match &self.settings.registry {
            Some(registry) => cell.get_or_try_init(|| self.push(tag, registry)).await.cloned(),
            None => {
                // Nodes join and come back: every start checks that the eligible ones have it.
                self.stream_to_nodes(tag).await?;
                Ok(tag.to_string())
            }
        }
    }

    /// Tags `tag` for the registry, pushes it, and returns its reference by digest.
    async fn push(&self, tag: &str, registry: &str) -> Result<String, SandboxError> {
        let err = |message: String| SandboxError::Build { tag: tag.to_string(), message };
        let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
        let remote = format!("{registry}/{repo}");
        let options = TagImageOptionsBuilder::default().repo(&remote).tag(version).build();
        self.manager.docker.tag_image(tag, Some(options)).await.map_err(|e| err(format!("tagging: {e}")))?;
        let options = PushImageOptionsBuilder::default().tag(version).build();
        let mut push = self.manager.docker.push_image(&remote, Some(options), None);
        while let Some(info) = push.next().await {
            let info = info.map_err(|e| err(format!("pushing to {registry}: {e}")))?;
            if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                return Err(err(format!("pushing to {registry}: {detail}")));
            }
        }
        let image = self.manager.docker.inspect_image(&format!("{remote}:{version}")).await.map_err(Self::api)?;
        image
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find(|d| d.starts_with(&format!("{remote}@")))
            .ok_or_else(|| err(format!("{registry} gave no digest for {remote}:{version}")))
    }

    /// Copies image `tag` from the manager to every eligible node that lacks it (export,
    /// import), one node at a time.
    async fn stream_to_nodes(&self, tag: &str) -> Result<(), SandboxError> {
        let views = self.node_views().await?;
        for (id, view) in &views {
            if !self.eligible(id, view)
                || self.streamed.lock().expect("not poisoned").contains(&(id.clone(), tag.into()))
            {
                continue;
            }
            let engine = self.node(id, Some(view)).await?;
            if engine.docker.inspect_image(tag).await.is_err() {
                let started = Instant::now();
                let export = self.manager.docker.export_image(tag).map(|chunk| chunk.map_err(std::io::Error::other));
                let options = bollard::query_parameters::ImportImageOptionsBuilder::default().quiet(true).build();
                let mut import = engine.docker.import_image_stream(options, export, None);
                while let Some(progress) = import.next().await {
                    let progress = progress.map_err(|e| SandboxError::Build {
                        tag: tag.into(),
                        message: format!("streaming to node {}: {e}", view.hostname),
                    })?;
                    if let Some(message) = progress.error_detail.and_then(|d| d.message) {
                        return Err(SandboxError::Build { tag: tag.into(), message });
                    }
                }
                tracing::info!(node = %view.hostname, image = %tag, secs = started.elapsed().as_secs_f64(), "streamed an image to a node");
            }
            self.streamed.lock().expect("not poisoned").insert((id.clone(), tag.to_string()));
        }
        Ok(())
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
            capability_drop: (!spec.hardening.cap_drop.is_empty()).then(|| {
                spec.hardening.cap_drop.iter().map(|c| format!("CAP_{}", c.trim_start_matches("CAP_"))).collect()
            }),
            capability_add: (!spec.hardening.cap_add.is_empty()).then(|| {
                spec.hardening.cap_add.iter().map(|c| format!("CAP_{}", c.trim_start_matches("CAP_"))).collect()
            }),
            hosts: (!spec.extra_hosts.is_empty())
                .then(|| spec.extra_hosts.iter().map(|h| h.replacen(':', " ", 1)).collect()),
            // Asked for; an engine older than API 1.46 ignores it, which `attach` finds out and
            // the trial's result says.
            privileges: Some(TaskSpecContainerSpecPrivileges {
                no_new_privileges: Some(spec.hardening.no_new_privileges),
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
                pids: spec.hardening.pids_limit,
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
                log_driver: (!spec.hardening.keep_logs)
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

    /// The hostnames of nodes (by id), for what a trial's result says.
    async fn hostnames(&self, ids: &[String]) -> Vec<String> {
        let mut names = Vec::new();
        for id in ids {
            let name = match self.manager.docker.inspect_node(id).await {
                Ok(node) => node.description.and_then(|d| d.hostname).unwrap_or_else(|| id.clone()),
                Err(_) => id.clone(),
            };
            names.push(name);
        }
        names
    }
}

/// Whether the process the container runs has the `no_new_privs` bit (read from its status).
async fn no_new_privileges(engine: &Engine, id: &str) -> bool {
    let probe = crate::container::ExecOptions { timeout: Some(Duration::from_secs(10)), ..Default::default() };
    let container = Container::adopt(engine.clone(), id.to_string(), id.to_string(), None);
    match container.exec("grep -E '^NoNewPrivs:' /proc/1/status", &probe).await {
        Ok(out) => out.output.split_whitespace().nth(1) == Some("1"),
        Err(_) => false,
    }
}

impl Swarm {
    /// The running container of a placed trial, on its node's daemon, on the job's network of
    /// its node (or none, when the trial is offline in every phase).
    async fn attach(&self, spec: &ContainerSpec, service: &str, node: &str, id: &str) -> Result<Container, Waited> {
        let mut tries = 0;
        let engine = loop {
            match self.node(node, None).await {
                Ok(engine) => break engine,
                Err(_) if tries < NODE_CONNECT_TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(_) => return Err(Waited::NodeLost(node.to_string())),
            }
        };
        // A failure while the node does not answer is the node's loss, not the trial's.
        let failed = |e: String| Waited::Failed(e);
        match self.join_job_network(spec, &engine, node, id).await {
            Ok(network) => self.finish_attach(spec, service, node, id, engine, network).await,
            Err(e) if !engine.ping().await => {
                tracing::debug!(node, error = %e, "the node went away while its trial was attached");
                Err(Waited::NodeLost(node.to_string()))
            }
            Err(e) => Err(failed(e)),
        }
    }

    /// Puts a trial's container on the job's network of its node (made once per node), or, offline
    /// in every phase, on none; takes it off every other. Swarm attaches its tasks to the node's
    /// bridge, where they would reach each other; the job's network has no traffic between its
    /// containers, as the local job network.
    async fn join_job_network(
        &self,
        spec: &ContainerSpec,
        engine: &Engine,
        node: &str,
        id: &str,
    ) -> Result<Option<String>, String> {
        let job_network = spec.labels.get(crate::LABEL_JOB_ID).map(|job| format!("terminus-swarm-{job}"));
        let network = match (&job_network, spec.no_network) {
            (Some(name), false) => {
                let mut made = self.job_networks.lock().await;
                let network_id = match made.get(node) {
                    Some(network_id) => network_id.clone(),
                    None => {
                        let labels = spec
                            .labels
                            .iter()
                            .filter(|(k, _)| k.as_str() == crate::LABEL_JOB_ID)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        engine.ensure_network(name, labels).await.map_err(|e| e.to_string())?;
                        let info = engine
                            .docker
                            .inspect_network(name, None::<bollard::query_parameters::InspectNetworkOptions>)
                            .await
                            .map_err(|e| e.to_string())?;
                        let network_id = info.id.unwrap_or_else(|| name.clone());
                        made.insert(node.to_string(), network_id.clone());
                        network_id
                    }
                };
                drop(made);
                let request =
                    bollard::models::NetworkConnectRequest { container: id.to_string(), endpoint_config: None };
                if let Err(e) = engine.docker.connect_network(&network_id, request).await {
                    // Made again next time (a node's daemon that lost it, say).
                    self.job_networks.lock().await.remove(node);
                    return Err(format!("cannot put it on the job's network: {e}"));
                }
                Some((name.clone(), network_id))
            }
            (None, false) => Some(("bridge".to_string(), "bridge".to_string())),
            (_, true) => None,
        };
        for other in engine.connected_networks(id).await.map_err(|e| e.to_string())? {
            if network.as_ref().is_some_and(|(name, network_id)| other == *name || other == *network_id) {
                continue;
            }
            let request = bollard::models::NetworkDisconnectRequest { container: id.to_string(), force: Some(true) };
            engine
                .docker
                .disconnect_network(&other, request)
                .await
                .map_err(|e| format!("cannot take it off the network {other}: {e}"))?;
        }
        Ok(network.map(|(name, _)| name))
    }

    async fn finish_attach(
        &self,
        spec: &ContainerSpec,
        service: &str,
        node: &str,
        id: &str,
        engine: Engine,
        network: Option<String>,
    ) -> Result<Container, Waited> {
        // What the service asked for and the node's engine did not apply is said, not assumed.
        let mut unapplied = Vec::new();
        if spec.hardening.no_new_privileges && !no_new_privileges(&engine, id).await {
            unapplied.push(
                "no-new-privileges is not applied on this swarm: its engine ignores it for services (Docker API < 1.46)"
                    .to_string(),
            );
        }
        let hostname = self.hostnames(&[node.to_string()]).await.pop().unwrap_or_default();
        Ok(Container::adopt(engine, id.to_string(), spec.name.clone(), network).placed(Placement {
            manager: self.manager.clone(),
            service: service.to_string(),
            node: node.to_string(),
            hostname,
            lost_before: Vec::new(),
            unapplied,
        }))
    }

    /// Waits for the service's task to run: (node id, container id); or the node it was sent to
    /// was lost; or why it will not run.
    async fn wait_running(&self, service: &str, queued: QueuedNotice) -> Result<(String, String), Waited> {
        let filters = HashMap::from([("service".to_string(), vec![service.to_string()])]);
        let mut last_reason = String::new();
        let mut assigned_at: Option<Instant> = None;
        let pending_since = Instant::now();
        loop {
            let options = ListTasksOptionsBuilder::default().filters(&filters).build();
            let tasks =
                self.manager.docker.list_tasks(Some(options)).await.map_err(|e| Waited::Failed(e.to_string()))?;
            if let Some(task) = tasks.into_iter().next() {
                let status = task.status.unwrap_or_default();
                let state = status.state.unwrap_or(TaskState::NEW);
                let node = task.node_id.unwrap_or_default();
                match state {
                    TaskState::RUNNING => {
                        let container = status.container_status.and_then(|c| c.container_id).unwrap_or_default();
                        if !node.is_empty() && !container.is_empty() {
                            return Ok((node, container));
                        }
                    }
                    TaskState::FAILED
                    | TaskState::REJECTED
                    | TaskState::SHUTDOWN
                    | TaskState::COMPLETE
                    | TaskState::ORPHANED
                    | TaskState::REMOVE => {
                        if !node.is_empty() && self.is_down(&node) {
                            return Err(Waited::NodeLost(node));
                        }
                        let why = status.err.or(status.message).unwrap_or_else(|| state.to_string());
                        return Err(Waited::Failed(format!("its swarm task ended {state}: {why}")));
                    }
                    TaskState::NEW | TaskState::ALLOCATED | TaskState::PENDING => {
                        // Held by the cluster: said when the scheduler gives a reason ("no
                        // suitable node (insufficient resources on 3 nodes)"), or when it takes
                        // longer than a placement does.
                        let reason = status.err.or_else(|| {
                            (pending_since.elapsed() > QUEUE_NOTICE_AFTER).then(|| status.message.unwrap_or_default())
                        });
                        if let Some(reason) = reason.filter(|r| !r.is_empty() && *r != last_reason) {
                            queued(reason.clone());
                            last_reason = reason;
                        }
                    }
                    _ => {
                        // Assigned to a node: pulling, creating, starting.
                        if !node.is_empty() && self.is_down(&node) {
                            return Err(Waited::NodeLost(node));
                        }
                        let since = *assigned_at.get_or_insert_with(Instant::now);
                        if since.elapsed() > START_LIMIT {
                            return Err(Waited::Failed(format!(
                                "its container did not start within {} s of being placed",
                                START_LIMIT.as_secs()
                            )));
                        }
                    }
                }
            }
            tokio::time::sleep(TASK_POLL).await;
        }
    }

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

    /// Removes what carries `label` on node `id` (its containers, then, for a value, its
    /// networks); None if the node cannot be reached now.
    async fn sweep_node(&self, id: &str, view: &NodeView, label: &str, value: Option<&str>) -> Option<usize> {
        if !view.ready {
            return None;
        }
        let engine = self.node(id, Some(view)).await.ok()?;
        let removed = engine.remove_with_label(label, value).await.ok()?;
        if let Some(value) = value {
            let _ = engine.remove_networks_with_label(label, value).await;
        }
        Some(removed)
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

/// Whether node `view` may run trials under `settings`' placement constraints, as far as they
/// can be read here (`node.role`, `node.hostname`, `node.id`, `node.labels.*`; others are left
/// to Swarm): where images are streamed.
fn eligible_with(settings: &SwarmSettings, id: &str, view: &NodeView) -> bool {
    view.ready
        && view.active
        && settings.constraints.iter().all(|c| {
            let (key, want, equal) = match (c.split_once("!="), c.split_once("==")) {
                (Some((k, v)), _) => (k.trim(), v.trim(), false),
                (None, Some((k, v))) => (k.trim(), v.trim(), true),
                _ => return true,
            };
            let have = match key {
                "node.role" => Some(view.role.as_str()),
                "node.hostname" => Some(view.hostname.as_str()),
                "node.id" => Some(id),
                _ => key.strip_prefix("node.labels.").map(|l| view.labels.get(l).map_or("", String::as_str)),
            };
            have.is_none_or(|have| (have == want) == equal)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(role: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView {
            addr: "10.0.0.1".into(),
            hostname: "n1".into(),
            role: role.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ready: true,
            active: true,
        }
    }

    #[test]
    fn service_names_fit_swarms_limit() {
        let long = format!("terminus-12345678-{}-ab12", "x".repeat(80));
        let name = Swarm::service_name(&long);
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-ab12"));
        assert_eq!(Swarm::service_name("short"), "short");
    }

    #[test]
    fn placement_constraints_pick_the_nodes_images_go_to() {
        let eligible = |constraints: &[&str], v: &NodeView| {
            let settings = SwarmSettings {
                manager: String::new(),
                tls: None,
                node_port: 2375,
                node_tls: None,
                registry: None,
                constraints: constraints.iter().map(|c| c.to_string()).collect(),
                labels: HashMap::new(),
            };
            eligible_with(&settings, "id1", v)
        };
        assert!(eligible(&["node.role==worker"], &view("worker", &[])));
        assert!(!eligible(&["node.role==worker"], &view("manager", &[])));
        assert!(eligible(&["node.role != manager"], &view("worker", &[])));
        assert!(eligible(&["node.labels.pool==evals"], &view("worker", &[("pool", "evals")])));
        assert!(!eligible(&["node.labels.pool==evals"], &view("worker", &[])));
        assert!(eligible(&["engine.labels.x==y"], &view("worker", &[])), "left to Swarm");
        let mut down = view("worker", &[]);
        down.ready = false;
        assert!(!eligible(&[], &down));
    }
}
