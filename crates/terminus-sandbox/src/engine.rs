//! The connection to the Docker engine.

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

use crate::error::SandboxError;

/// A connected engine. Cheap to clone: bollard's client is reference-counted.
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) docker: Docker,
}

impl Engine {
    /// Connects through `DOCKER_HOST` or the default socket and negotiates the API version:
    /// bollard asks for a newer API than Debian's engine (1.41) accepts.
    pub async fn connect() -> Result<Engine, SandboxError> {
        let docker = Docker::connect_with_defaults().map_err(|e| SandboxError::Connect(e.to_string()))?;
        let docker = docker.negotiate_version().await.map_err(|e| SandboxError::Connect(e.to_string()))?;
        docker.ping().await.map_err(|e| SandboxError::Connect(e.to_string()))?;
        Ok(Engine { docker })
    }

    /// The engine's version string, for logs and benchmark reports.
    pub async fn version(&self) -> Result<String, SandboxError> {
        let version = self.docker.version().await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(format!("{} (API {})", version.version.unwrap_or_default(), version.api_version.unwrap_or_default()))
    }

    /// Names of the containers (running or not) that carry `label=value`.
    pub async fn containers_with_label(&self, label: &str, value: Option<&str>) -> Result<Vec<String>, SandboxError> {
        let filter = match value {
            Some(value) => format!("{label}={value}"),
            None => label.to_string(),
        };
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&HashMap::from([("label".to_string(), vec![filter])]))
            .build();
        let list = self.docker.list_containers(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    /// Force-removes every container carrying `label=value`; returns how many went.
    pub async fn remove_with_label(&self, label: &str, value: Option<&str>) -> Result<usize, SandboxError> {
        let ids = self.containers_with_label(label, value).await?;
        let mut removed = 0;
        for id in &ids {
            if self.remove_container(id).await.is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Force-removes one container and its anonymous volumes. Missing is not an error.
    pub async fn remove_container(&self, id: &str) -> Result<(), SandboxError> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(e) => Err(SandboxError::Api(format!("removing container `{id}`: {e}"))),
        }
    }
}
