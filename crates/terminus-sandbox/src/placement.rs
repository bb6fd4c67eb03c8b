//! The small types the backend seam passes around: where a swarm trial's container runs, what
//! carries terminus's labels, and how provisioning says the cluster queues a trial. A leaf, so
//! the backend, the swarm and the container modules can share them without importing each
//! other.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::Engine;

/// What provisioning tells its caller before the container runs: the cluster holds the trial
/// in its queue, and why (Swarm's own words).
pub type QueuedNotice = Arc<dyn Fn(String) + Send + Sync>;

/// Where a swarm trial's container runs: its service on the manager, its node.
#[derive(Clone, Debug)]
pub struct Placement {
    pub manager: Engine,
    pub service: String,
    pub node: String,
    /// The node's hostname, for the trial's result.
    pub hostname: String,
    /// Nodes (hostnames) the trial was placed on before, lost before its container ran there.
    pub lost_before: Vec<String>,
    /// Confinement the service asked for that the node's engine did not apply, each said.
    pub unapplied: Vec<String>,
}

/// Something carrying terminus's labels.
#[derive(Clone, Debug)]
pub struct Labelled {
    pub id: String,
    pub labels: HashMap<String, String>,
    pub kind: LabelledKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelledKind {
    /// A container, on the local engine (None) or on a swarm node (its id).
    Container { node: Option<String> },
    /// A swarm service.
    Service,
}
