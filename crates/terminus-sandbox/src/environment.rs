//! A trial's environment as one thing: its main container, the task's compose project
//! (sidecars, volumes, network) and the egress proxy of allowlisted phases. A trial holds it,
//! changes its network per phase through it, and removes it whole. It derefs to the main
//! container, where execs, copies and the terminal go.

use std::ops::Deref;
use std::sync::Arc;

use terminus_core::layout::container::MAIN_SERVICE;

use crate::compose::Project;
use crate::container::Container;
use crate::egress::{Egress, NetworkAccess};
use crate::error::SandboxError;

/// A main container with what the trial made beside it. Cloning is cheap (shared parts).
#[derive(Clone, Debug)]
pub struct Environment {
    main: Container,
    /// The task's sidecars, volumes and network, removed with `main`.
    project: Option<Arc<Project>>,
    /// The internal network and proxy of allowlisted phases, removed with `main`.
    egress: Option<Arc<Egress>>,
}

impl Environment {
    /// An environment of `main` alone.
    pub fn new(main: Container) -> Environment {
        Environment { main, project: None, egress: None }
    }

    /// Makes `project` part of the environment: removed with it.
    pub fn with_project(mut self, project: Project) -> Environment {
        self.project = Some(Arc::new(project));
        self
    }

    /// Makes `egress` part of the environment: [`Environment::set_network`] uses it, and it is
    /// removed with the environment.
    pub fn with_egress(mut self, egress: Egress) -> Environment {
        self.egress = Some(Arc::new(egress));
        self
    }

    /// The trial's own container.
    pub fn main(&self) -> &Container {
        &self.main
    }

    /// Whether a sidecar of the task writes in `dir` of `main` too (a log directory the compose
    /// file shares): its contents are the task's, not only the agent's.
    pub fn shares_with_sidecars(&self, dir: &str) -> bool {
        self.project.as_ref().is_some_and(|p| p.shared_logs.iter().any(|d| d == dir))
    }

    /// The container of the task's compose service `service` (`main`: the trial's own).
    pub fn service(&self, service: &str) -> Option<&Container> {
        if service == MAIN_SERVICE {
            return Some(&self.main);
        }
        let name = format!("{}-{service}", self.main.name);
        self.project.as_ref()?.sidecars.iter().find(|s| s.name == name)
    }

    /// Gives `main` what a phase may reach: its own network, only the egress proxy
    /// (whose allowlist is set first), or only loopback. It leaves a network before it joins
    /// another, so it is never on both. A container started without a network stays so.
    pub async fn set_network(&self, access: &NetworkAccess) -> Result<(), SandboxError> {
        let api = |e: bollard::errors::Error| {
            SandboxError::Api(format!("cannot change the network of `{}`: {e}", self.main.name))
        };
        let Some(own) = self.main.network() else {
            return match access {
                NetworkAccess::Offline => Ok(()),
                _ => Err(SandboxError::Api(format!("container `{}` was started without a network", self.main.name))),
            };
        };
        let egress = match (access, &self.egress) {
            (NetworkAccess::Allowlist(hosts), Some(egress)) => {
                egress.allow(hosts).await?;
                Some(egress.network.as_str())
            }
            (NetworkAccess::Allowlist(_), None) => {
                return Err(SandboxError::Api(format!(
                    "container `{}` was started without an egress proxy",
                    self.main.name
                )));
            }
            (_, egress) => egress.as_ref().map(|e| e.network.as_str()),
        };
        let connected = self.main.engine().connected_networks(&self.main.id).await?;
        let wanted: Vec<&str> = match access {
            NetworkAccess::Offline => Vec::new(),
            NetworkAccess::Full => vec![own],
            NetworkAccess::Allowlist(_) => egress.into_iter().collect(),
        };
        let mine = std::iter::once(own).chain(egress);
        for network in mine.filter(|n| !wanted.contains(n) && connected.iter().any(|c| c == n)) {
            let request =
                bollard::models::NetworkDisconnectRequest { container: self.main.id.clone(), force: Some(true) };
            self.main.engine().docker.disconnect_network(network, request).await.map_err(api)?;
        }
        for network in wanted.iter().filter(|n| !connected.iter().any(|c| c == *n)) {
            let request =
                bollard::models::NetworkConnectRequest { container: self.main.id.clone(), endpoint_config: None };
            self.main.engine().docker.connect_network(network, request).await.map_err(api)?;
        }
        Ok(())
    }

    /// Stops `main` and the sidecars, each within `grace`.
    pub async fn stop(&self, grace: std::time::Duration) -> Result<(), SandboxError> {
        self.main.stop(grace).await?;
        for sidecar in self.project.iter().flat_map(|p| p.sidecars.iter()) {
            sidecar.stop(grace).await?;
        }
        Ok(())
    }

    /// Removes `main`, then the proxy (it sits on the project's network), then the project.
    pub async fn remove(&self) -> Result<(), SandboxError> {
        let removed = self.main.remove().await;
        if let Some(egress) = &self.egress {
            egress.remove(self.main.engine()).await;
        }
        if let Some(project) = &self.project {
            project.remove(self.main.engine()).await;
        }
        removed
    }
}

impl Deref for Environment {
    type Target = Container;

    fn deref(&self) -> &Container {
        &self.main
    }
}
