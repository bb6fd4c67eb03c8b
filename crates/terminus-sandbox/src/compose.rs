//! Multi-container tasks run through the Engine API (no compose CLI): a compose file as
//! `terminus_config::compose` reads it becomes the trial's network, volumes and sidecars,
//! created in dependency order and confined like the main container, waited on by their health
//! checks, and removed with the trial.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, NetworkingConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use terminus_config::compose::{ComposeFile, Condition, Dependency, Mount, ServiceImage};

use crate::container::Container;
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::image::ImageBuilder;

/// How a trial's sidecars are made.
pub struct ProjectSpec<'a> {
    /// Containers are named `<prefix>-<service>`.
    pub prefix: String,
    /// The trial's own network, shared by `main` and the sidecars.
    pub network: String,
    pub labels: HashMap<String, String>,
    pub images: &'a ImageBuilder,
    /// Built sidecar images are tagged like the task's own image, with the service's name.
    pub task_name: String,
    /// For images, and for each dependency to be ready.
    pub timeout: Duration,
    /// `main`'s confinement, which every sidecar gets too.
    pub confinement: crate::container::Confinement,
    /// `main`'s limits: a sidecar's own (`deploy.resources.limits`) win where it has them.
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
}

/// What a trial's compose file made besides `main`: removed by [`Project::remove`], and by
/// label sweeps if the trial never gets to.
#[derive(Clone, Debug, Default)]
pub struct Project {
    pub network: String,
    pub sidecars: Vec<Container>,
    pub volumes: Vec<String>,
    /// `main`'s log directories its sidecars write in too ([`ComposeFile::shared_logs`]).
    pub shared_logs: Vec<String>,
}

impl Project {
    /// The volume name of the file's `name` for this project.
    pub fn volume_name(prefix: &str, name: &str) -> String {
        format!("{prefix}-{name}")
    }

    /// Writable binds of `mounts`: (source on the host, target in the container), copied into
    /// the container before it runs instead of bound.
    pub fn copies(mounts: &[Mount]) -> Vec<(PathBuf, String)> {
        mounts
            .iter()
            .filter_map(|mount| match mount {
                Mount::Bind { source, target, read_only: false } => Some((source.clone(), target.clone())),
                _ => None,
            })
            .collect()
    }

    /// Binds for `mounts` (named volumes under their project names; writable binds are
    /// [`Project::copies`], not binds).
    pub fn binds(prefix: &str, mounts: &[Mount]) -> Vec<String> {
        mounts
            .iter()
            .filter(|m| !matches!(m, Mount::Bind { read_only: false, .. }))
            .map(|m| match m {
                Mount::Volume { name, target, read_only } => {
                    format!("{}:{target}{}", Project::volume_name(prefix, name), if *read_only { ":ro" } else { "" })
                }
                Mount::Bind { source, target, read_only } => {
                    format!("{}:{target}{}", source.display(), if *read_only { ":ro" } else { "" })
                }
            })
            .collect()
    }

    /// Removes the sidecars, the volumes and the network (after `main` is gone).
    pub async fn remove(&self, engine: &Engine) {
        for sidecar in &self.sidecars {
            let _ = engine.remove_container(&sidecar.id).await;
        }
        for volume in &self.volumes {
            let _ = engine.docker.remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>).await;
        }
        let _ = engine.remove_network(&self.network).await;
    }
}

impl Engine {
    /// Makes the trial's network and volumes and starts the sidecars in order, each once what it
    /// depends on is ready; returns when `main`'s own dependencies are ready too. On an error,
    /// what was made so far is in the returned project (for removal) with the error.
    pub async fn start_project(
        &self,
        file: &ComposeFile,
        spec: &ProjectSpec<'_>,
    ) -> (Project, Result<(), SandboxError>) {
        let mut project =
            Project { network: spec.network.clone(), shared_logs: file.shared_logs.clone(), ..Project::default() };
        let result = self.start_project_steps(file, spec, &mut project).await;
        (project, result)
    }

    async fn start_project_steps(
        &self,
        file: &ComposeFile,
        spec: &ProjectSpec<'_>,
        project: &mut Project,
    ) -> Result<(), SandboxError> {
        self.ensure_network_with(&spec.network, spec.labels.clone(), true).await?;
        for name in &file.volumes {
            let volume = Project::volume_name(&spec.prefix, name);
            let request = bollard::models::VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(spec.labels.clone()),
                ..Default::default()
            };
            self.docker
                .create_volume(request)
                .await
                .map_err(|e| SandboxError::Api(format!("volume `{volume}`: {e}")))?;
            project.volumes.push(volume);
        }
        let mut started: BTreeMap<String, Container> = BTreeMap::new();
        for service in &file.services {
            self.wait_for(&service.depends_on, &started, spec.timeout).await?;
            let image = match &service.image {
                ServiceImage::Image(image) => {
                    spec.images.ensure_prebuilt(image, spec.timeout).await?;
                    image.clone()
                }
                ServiceImage::Build { context, dockerfile } => {
                    let dir = context.clone();
                    let hash = crate::blocking::blocking(move || content_tag(&dir)).await?;
                    let tag = ImageBuilder::tag_for(&format!("{}-{}", spec.task_name, service.name), &hash);
                    spec.images.ensure_with(&tag, context, dockerfile, false, spec.timeout).await?;
                    tag
                }
            };
            let name = format!("{}-{}", spec.prefix, service.name);
            let body = ContainerCreateBody {
                image: Some(image),
                cmd: service.command.clone(),
                entrypoint: service.entrypoint.clone(),
                env: (!service.environment.is_empty()).then(|| service.environment.clone()),
                working_dir: service.working_dir.clone(),
                user: service.user.clone(),
                labels: Some(spec.labels.clone()),
                healthcheck: service.healthcheck.as_ref().map(|h| HealthConfig {
                    test: Some(h.test.clone()),
                    interval: Some(h.interval.as_nanos() as i64),
                    timeout: Some(h.timeout.as_nanos() as i64),
                    retries: Some(h.retries),
                    start_period: Some(h.start_period.as_nanos() as i64),
                    ..Default::default()
                }),
                // Confined as `main` is: pids, memory and CPU limits, capabilities,
                // no-new-privileges, runtime, logging.
                host_config: Some(HostConfig {
                    network_mode: Some(spec.network.clone()),
                    binds: Some(Project::binds(&spec.prefix, &service.mounts)),
                    ..crate::container::confined(
                        &spec.confinement,
                        service.limits.cpus.or(spec.cpus),
                        service.limits.memory_mb.or(spec.memory_mb),
                    )
                }),
                networking_config: Some(NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(
                        spec.network.clone(),
                        EndpointSettings { aliases: Some(vec![service.name.clone()]), ..Default::default() },
                    )])),
                }),
                ..Default::default()
            };
            let err = |message: String| SandboxError::Start { name: name.clone(), message };
            let options = CreateContainerOptionsBuilder::default().name(&name).build();
            let created = self.docker.create_container(Some(options), body).await.map_err(|e| err(e.to_string()))?;
            let container = Container::adopt(self.clone(), created.id, name.clone(), Some(spec.network.clone()));
            project.sidecars.push(container.clone());
            for (source, target) in Project::copies(&service.mounts) {
                container.copy_in(&source, &target).await?;
            }
            self.docker.start_container(&container.id, None).await.map_err(|e| err(e.to_string()))?;
            started.insert(service.name.clone(), container);
        }
        self.wait_for(&file.main.depends_on, &started, spec.timeout).await
    }

    /// Waits until each dependency meets its condition, within `timeout` in all.
    async fn wait_for(
        &self,
        deps: &[Dependency],
        started: &BTreeMap<String, Container>,
        timeout: Duration,
    ) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + timeout;
        for dep in deps {
            let Some(container) = started.get(&dep.service) else { continue };
            loop {
                let info = self
                    .docker
                    .inspect_container(&container.id, None::<bollard::query_parameters::InspectContainerOptions>)
                    .await
                    .map_err(|e| SandboxError::Api(e.to_string()))?;
                let state = info.state.unwrap_or_default();
                let running = state.running == Some(true);
                let health = state.health.and_then(|h| h.status).map(|s| s.to_string());
                let ready = match dep.condition {
                    Condition::Started => true,
                    Condition::Healthy => health.as_deref() == Some("healthy"),
                    Condition::CompletedSuccessfully => !running && state.exit_code == Some(0),
                };
                if ready {
                    break;
                }
                let failed = match dep.condition {
                    Condition::Healthy => health.as_deref() == Some("unhealthy") || !running,
                    Condition::CompletedSuccessfully => !running && state.exit_code.is_some_and(|c| c != 0),
                    Condition::Started => false,
                };
                if failed || tokio::time::Instant::now() >= deadline {
                    let why = if failed { "failed" } else { "timed out" };
                    return Err(SandboxError::Start {
                        name: container.name.clone(),
                        message: format!(
                            "service `{}` {why} waiting for `{:?}` (state: {}, health: {})",
                            dep.service,
                            dep.condition,
                            state.status.map(|s| s.to_string()).unwrap_or_default(),
                            health.unwrap_or_else(|| "none".into())
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }
}

/// A short content hash of a build context, for its image tag.
fn content_tag(dir: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for entry in terminus_core::tree::walk(dir).map_err(std::io::Error::other)? {
        if let terminus_core::tree::TreeEntry::File { rel, path, .. } = entry {
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update(std::fs::read(path)?);
        }
    }
    Ok(format!("{:x}", hasher.finalize())[..16].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named volume is the project's; a bind without a mode is read-only; `rw` makes it a
    /// copy into the container, never a bind of the task's directory.
    #[test]
    fn mounts_become_binds_of_the_project_or_copies() {
        let text = "services:\n  db:\n    image: x\n    volumes: [\"shared:/shared\", \"./data:/data\", \"./state:/state:rw\"]\nvolumes:\n  shared:\n";
        let file = terminus_config::compose::parse(text, Path::new("/t/environment"), &|_| None).unwrap();
        let mounts = &file.services[0].mounts;
        assert_eq!(Project::binds("p", mounts), ["p-shared:/shared", "/t/environment/data:/data:ro"]);
        assert_eq!(Project::copies(mounts), [("/t/environment/state".into(), "/state".to_string())]);
    }
}
