//! How to reach a Docker Swarm and where its trials may run: what the job file's
//! `environment.swarm` says once validated, and what the sandbox connects with.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Client certificate files of a daemon reached over TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A swarm: its manager, its nodes' daemons, and the placement of every trial.
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
    pub labels: BTreeMap<String, String>,
}

impl SwarmSettings {
    /// The nodes' daemons are reached on plain TCP: whoever reaches their port controls them.
    pub fn insecure_nodes(&self) -> bool {
        self.node_tls.is_none()
    }
}
