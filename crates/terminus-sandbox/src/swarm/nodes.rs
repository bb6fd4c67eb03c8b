//! The swarm's nodes: their views from the manager, a daemon connection per node, which are
//! down or drained, a watcher that sweeps what a returning node still runs, and which nodes a
//! trial may be placed on.

use super::daemon::connect_daemon;
use super::*;
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::labels::LABEL_TRIAL_ID;
use bollard::models::{NodeSpecAvailabilityEnum, NodeSpecRoleEnum, NodeState};
use bollard::query_parameters::{ListNodesOptions, ListServicesOptionsBuilder};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// One node as the manager last described it.
#[derive(Clone, Debug)]
pub(super) struct NodeView {
    pub(super) addr: String,
    pub(super) hostname: String,
    pub(super) role: String,
    pub(super) labels: HashMap<String, String>,
    pub(super) ready: bool,
    pub(super) active: bool,
}

impl Swarm {
    /// Every node as the manager describes it, by id.
    pub(super) async fn node_views(&self) -> Result<HashMap<String, NodeView>, SandboxError> {
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
    pub(super) async fn node(&self, id: &str, view: Option<&NodeView>) -> Result<Engine, SandboxError> {
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

    /// Removes what carries `label` on node `id` (its containers, then, for a value, its
    /// networks); None if the node cannot be reached now.
    pub(super) async fn sweep_node(
        &self,
        id: &str,
        view: &NodeView,
        label: &str,
        value: Option<&str>,
    ) -> Option<usize> {
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
    pub(super) async fn sweep_orphans(&self, id: &str, view: Option<&NodeView>) -> Result<usize, SandboxError> {
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

    pub(super) async fn services_with_label(
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

    pub(super) fn eligible(&self, id: &str, view: &NodeView) -> bool {
        eligible_with(&self.settings, id, view)
    }
}

/// Whether node `view` may run trials under `settings`' placement constraints, as far as they
/// can be read here (`node.role`, `node.hostname`, `node.id`, `node.labels.*`; others are left
/// to Swarm): where images are streamed.
pub(super) fn eligible_with(settings: &SwarmSettings, id: &str, view: &NodeView) -> bool {
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
    fn placement_constraints_pick_the_nodes_images_go_to() {
        let eligible = |constraints: &[&str], v: &NodeView| {
            let settings = SwarmSettings {
                manager: String::new(),
                tls: None,
                node_port: 2375,
                node_tls: None,
                registry: None,
                constraints: constraints.iter().map(|c| c.to_string()).collect(),
                labels: Default::default(),
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
