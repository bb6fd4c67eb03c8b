//! A placed trial: waiting for its service's task to run (queued notices while the cluster has
//! no room), then attaching to the container on its node and moving it onto the job's network
//! of that node.

use super::*;
use crate::container::{Container, ContainerSpec};
use crate::engine::Engine;
use crate::placement::{Placement, QueuedNotice};
use bollard::models::TaskState;
use bollard::query_parameters::ListTasksOptionsBuilder;
use std::collections::HashMap;
use std::time::{Duration, Instant};

impl Swarm {
    /// The hostnames of nodes (by id), for what a trial's result says.
    pub(super) async fn hostnames(&self, ids: &[String]) -> Vec<String> {
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
pub(super) async fn no_new_privileges(engine: &Engine, id: &str) -> bool {
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
    pub(super) async fn attach(
        &self,
        spec: &ContainerSpec,
        service: &str,
        node: &str,
        id: &str,
    ) -> Result<Container, Waited> {
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
    pub(super) async fn join_job_network(
        &self,
        spec: &ContainerSpec,
        engine: &Engine,
        node: &str,
        id: &str,
    ) -> Result<Option<String>, String> {
        let job_network = spec.labels.get(crate::labels::LABEL_JOB_ID).map(|job| format!("terminus-swarm-{job}"));
        let network = match (&job_network, spec.no_network) {
            (Some(name), false) => {
                let mut made = self.job_networks.lock().await;
                let network_id = match made.get(node) {
                    Some(network_id) => network_id.clone(),
                    None => {
                        let labels = spec
                            .labels
                            .iter()
                            .filter(|(k, _)| k.as_str() == crate::labels::LABEL_JOB_ID)
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

    pub(super) async fn finish_attach(
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
        if spec.confinement.no_new_privileges && !no_new_privileges(&engine, id).await {
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
    pub(super) async fn wait_running(&self, service: &str, queued: QueuedNotice) -> Result<(String, String), Waited> {
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
}
