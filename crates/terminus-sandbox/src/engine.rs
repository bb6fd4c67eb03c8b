//! The connection to the Docker engine.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

use crate::error::SandboxError;
use crate::meter::{LatencyMeter, LatencyWindow};

/// How long a ping waits for an answer before the engine counts as away.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// How often the heartbeat pings (see [`Engine::start_heartbeat`]).
const HEARTBEAT: Duration = Duration::from_secs(2);

/// A connected engine. Cheap to clone: bollard's client is reference-counted, and so is what
/// the heartbeat learns.
#[derive(Clone, Debug)]
pub struct Engine {
    pub(crate) docker: Docker,
    health: Arc<Health>,
    /// The latencies its users measured (shell channels, execs), shared by every clone.
    pub(crate) latency: Arc<LatencyMeter>,
    /// The warden's volume once it is known to be there ([`crate::warden`]).
    pub(crate) warden: Arc<tokio::sync::OnceCell<String>>,
    /// Which containers were stopped from outside ([`crate::stops`]).
    pub(crate) stops: Arc<crate::stops::StopWatch>,
}

/// What pings learned about the engine, shared by every clone.
#[derive(Debug, Default)]
struct Health {
    /// When a ping last went unanswered.
    last_away: Mutex<Option<Instant>>,
    heartbeat: OnceLock<()>,
}

/// What an image does with the command a container is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    /// Its default user is root (no `USER`, or `root`/`0`).
    pub root: bool,
    /// It has an `ENTRYPOINT`, which gets the command as its arguments (and may ignore them).
    pub entrypoint: bool,
}

impl Engine {
    /// Connects through `DOCKER_HOST` or the default socket and negotiates the API version:
    /// bollard asks for a newer API than Debian's engine (1.41) accepts.
    pub async fn connect() -> Result<Engine, SandboxError> {
        let docker = Docker::connect_with_defaults().map_err(|e| SandboxError::Connect(e.to_string()))?;
        let docker = docker.negotiate_version().await.map_err(|e| SandboxError::Connect(e.to_string()))?;
        docker.ping().await.map_err(|e| SandboxError::Connect(e.to_string()))?;
        Ok(Engine {
            docker,
            health: Arc::default(),
            latency: Arc::default(),
            warden: Arc::default(),
            stops: Arc::default(),
        })
    }

    /// An engine over an already negotiated connection (a swarm's manager or node).
    pub(crate) fn from_docker(docker: Docker) -> Engine {
        Engine {
            docker,
            health: Arc::default(),
            latency: Arc::default(),
            warden: Arc::default(),
            stops: Arc::default(),
        }
    }

    /// The latencies measured through this engine since the previous read.
    pub fn latency(&self) -> LatencyWindow {
        self.latency.take()
    }

    /// How a container of `image` runs the command it is given. None when the image cannot be
    /// inspected.
    pub async fn image_facts(&self, image: &str) -> Option<ImageFacts> {
        let config = self.docker.inspect_image(image).await.ok()?.config.unwrap_or_default();
        let user = config.user.unwrap_or_default();
        let name = user.split(':').next().unwrap_or_default();
        Some(ImageFacts {
            root: name.is_empty() || name == "root" || name == "0",
            entrypoint: config.entrypoint.is_some_and(|e| !e.is_empty()),
        })
    }

    /// The names of the networks a container is attached to.
    pub async fn connected_networks(&self, id: &str) -> Result<Vec<String>, SandboxError> {
        let info = self
            .docker
            .inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(info.network_settings.and_then(|n| n.networks).map(|n| n.into_keys().collect()).unwrap_or_default())
    }

    /// Whether the engine can pass GPUs through: an `nvidia` runtime or CDI devices of a GPU
    /// vendor are registered. None when the engine cannot be asked.
    pub async fn has_gpus(&self) -> Option<bool> {
        let info = self.docker.info().await.ok()?;
        let nvidia_runtime = info.runtimes.as_ref().is_some_and(|r| r.contains_key("nvidia"));
        let cdi_gpu = info
            .discovered_devices
            .iter()
            .flatten()
            .any(|d| d.id.as_deref().is_some_and(|id| id.contains("nvidia.com/gpu") || id.contains("amd.com/gpu")));
        Some(nvidia_runtime || cdi_gpu)
    }

    /// Makes the job's own bridge network unless it exists: trials reach the internet through
    /// it, but not each other (inter-container traffic is off).
    pub async fn ensure_network(&self, name: &str, labels: HashMap<String, String>) -> Result<(), SandboxError> {
        self.ensure_network_with(name, labels, false).await
    }

    /// [`Engine::ensure_network`], with traffic between its containers allowed or not (a
    /// trial's own network for its sidecars allows it).
    pub async fn ensure_network_with(
        &self,
        name: &str,
        labels: HashMap<String, String>,
        inter_container: bool,
    ) -> Result<(), SandboxError> {
        let mut named = self.networks_named(name).await?;
        if named.is_empty() {
            let options =
                HashMap::from([("com.docker.network.bridge.enable_icc".to_string(), inter_container.to_string())]);
            let request = bollard::models::NetworkCreateRequest {
                name: name.to_string(),
                driver: Some("bridge".to_string()),
                options: Some(options),
                labels: Some(labels),
                ..Default::default()
            };
            // An error may mean it was made meanwhile by someone else (a concurrent start): the
            // list made after it says.
            let created = self.docker.create_network(request).await;
            named = self.networks_named(name).await?;
            if let (Err(e), true) = (created, named.is_empty()) {
                return Err(SandboxError::Api(format!("cannot create network `{name}`: {e}")));
            }
        }
        // The engine lets two networks share a name, and every later use of the name then
        // fails as ambiguous: a run killed while it made this network can have its creation land
        // beside ours. The oldest is kept; the others (no container can use an ambiguous name)
        // are removed.
        for extra in named.iter().skip(1) {
            if let Err(e) = self.docker.remove_network(extra).await {
                tracing::warn!(network = name, id = %extra, error = %e, "could not remove a network of the same name");
            }
        }
        Ok(())
    }

    /// The ids of the networks named exactly `name`, the oldest first.
    async fn networks_named(&self, name: &str) -> Result<Vec<String>, SandboxError> {
        let options = bollard::query_parameters::ListNetworksOptionsBuilder::default()
            .filters(&HashMap::from([("name".to_string(), vec![name.to_string()])]))
            .build();
        let list = self.docker.list_networks(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        // The filter matches parts of names; the creation times are RFC 3339 in UTC.
        let mut named: Vec<(String, String)> = list
            .into_iter()
            .filter(|n| n.name.as_deref() == Some(name))
            .filter_map(|n| Some((n.created.unwrap_or_default(), n.id?)))
            .collect();
        named.sort();
        Ok(named.into_iter().map(|(_, id)| id).collect())
    }

    /// Removes a network (it must have no containers left).
    pub async fn remove_network(&self, name: &str) -> Result<(), SandboxError> {
        self.docker
            .remove_network(name)
            .await
            .map_err(|e| SandboxError::Api(format!("cannot remove network `{name}`: {e}")))
    }

    /// Removes the networks carrying `label=value` that no container uses any more (a trial's
    /// compose and egress networks); returns how many went.
    pub async fn remove_networks_with_label(&self, label: &str, value: &str) -> Result<usize, SandboxError> {
        let mut removed = 0;
        for (name, _) in self.labelled_networks(&format!("{label}={value}")).await? {
            if self.remove_network(&name).await.is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Networks carrying `label` (or `label=value`), with their labels.
    pub async fn labelled_networks(&self, label: &str) -> Result<Vec<(String, HashMap<String, String>)>, SandboxError> {
        let options = bollard::query_parameters::ListNetworksOptionsBuilder::default()
            .filters(&HashMap::from([("label".to_string(), vec![label.to_string()])]))
            .build();
        let list = self.docker.list_networks(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(list.into_iter().filter_map(|n| Some((n.name?, n.labels.unwrap_or_default()))).collect())
    }

    /// Starts the engine's stop watch (once per engine, whatever the number of calls): who
    /// stopped a container, see [`crate::stops`].
    pub fn start_stop_watch(&self) {
        self.stops.start(self.docker.clone());
    }

    /// Whether something outside stopped container `id` (started at `since`): None when the
    /// watch was not up throughout, and nobody can tell.
    pub(crate) fn stopped_from_outside(&self, id: &str, since: std::time::Instant) -> Option<bool> {
        self.stops.stopped_from_outside(id, since)
    }

    /// Whether the storage driver can limit a container's writable layer (overlay2 on xfs with
    /// project quotas); elsewhere `storage_mb` cannot be enforced.
    pub async fn supports_storage_limits(&self) -> bool {
        let Ok(info) = self.docker.info().await else { return false };
        let overlay = info.driver.as_deref() == Some("overlay2");
        let xfs = info
            .driver_status
            .unwrap_or_default()
            .iter()
            .any(|pair| pair.len() == 2 && pair[0] == "Backing Filesystem" && pair[1] == "xfs");
        overlay && xfs
    }

    /// Whether the engine answers right now. A restarting dockerd refuses the connection; a
    /// stopped one (`SIGSTOP`, a wedged daemon) accepts it and never answers, so the ping has its
    /// own short deadline rather than the client's two minutes.
    pub async fn ping(&self) -> bool {
        let answered = matches!(tokio::time::timeout(PING_TIMEOUT, self.docker.ping()).await, Ok(Ok(_)));
        if !answered {
            *self.health.last_away.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
        answered
    }

    /// Pings every two seconds for as long as the process runs (once per engine, whatever the
    /// number of calls), so that [`Engine::was_away_within`] knows about outages nobody was
    /// looking at: an engine call that failed because dockerd was stopped for a while is often
    /// judged only after it runs again.
    pub fn start_heartbeat(&self) {
        if self.health.heartbeat.set(()).is_err() {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            loop {
                engine.ping().await;
                tokio::time::sleep(HEARTBEAT).await;
            }
        });
    }

    /// Whether a ping went unanswered within the last `window`.
    pub fn was_away_within(&self, window: Duration) -> bool {
        let last = *self.health.last_away.lock().unwrap_or_else(|p| p.into_inner());
        last.is_some_and(|at| at.elapsed() <= window)
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

    /// Every container (running or not) carrying `label`, with all its labels.
    pub async fn labelled_containers(
        &self,
        label: &str,
    ) -> Result<Vec<(String, HashMap<String, String>)>, SandboxError> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&HashMap::from([("label".to_string(), vec![label.to_string()])]))
            .build();
        let list = self.docker.list_containers(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(list.into_iter().filter_map(|c| Some((c.id?, c.labels.unwrap_or_default()))).collect())
    }

    /// Tags of the images whose repository starts with `prefix`, and the images containers use.
    pub async fn images_with_prefix(&self, prefix: &str) -> Result<Vec<String>, SandboxError> {
        let images = self
            .docker
            .list_images(None::<bollard::query_parameters::ListImagesOptions>)
            .await
            .map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(images.into_iter().flat_map(|i| i.repo_tags).filter(|tag| tag.starts_with(prefix)).collect())
    }

    /// Removes an image by tag (force: also when stopped containers still reference it).
    pub async fn remove_image(&self, tag: &str) -> Result<(), SandboxError> {
        let options = bollard::query_parameters::RemoveImageOptionsBuilder::default().force(true).build();
        self.docker
            .remove_image(tag, Some(options), None)
            .await
            .map(|_| ())
            .map_err(|e| SandboxError::Api(format!("removing image `{tag}`: {e}")))
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
            // With `force`, a conflict means another request is already removing it (a trial's
            // own teardown racing a sweep): it is gone once that one ends, so wait for it.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {
                self.wait_until_removed(id, Duration::from_secs(30)).await
            }
            Err(e) => Err(SandboxError::Api(format!("removing container `{id}`: {e}"))),
        }
    }

    /// Waits, up to `limit`, for a container that another request is removing to be gone.
    async fn wait_until_removed(&self, id: &str, limit: Duration) -> Result<(), SandboxError> {
        let deadline = Instant::now() + limit;
        loop {
            match self.docker.inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>).await {
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => return Ok(()),
                Err(e) => return Err(SandboxError::Api(format!("removing container `{id}`: {e}"))),
                Ok(_) if Instant::now() >= deadline => {
                    return Err(SandboxError::Api(format!(
                        "removing container `{id}`: another removal was still under way after {}s",
                        limit.as_secs()
                    )));
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Ids of the running containers carrying `label`.
    pub async fn running_with_label(&self, label: &str) -> Result<Vec<String>, SandboxError> {
        let options = ListContainersOptionsBuilder::default()
            .filters(&HashMap::from([("label".to_string(), vec![label.to_string()])]))
            .build();
        let list = self.docker.list_containers(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(list.into_iter().filter_map(|c| c.id).collect())
    }

    /// Sends SIGKILL to a container's init, as an engine-side failure would (used by the chaos
    /// suite; the product itself removes containers, it never kills them behind a trial's back).
    pub async fn kill_container(&self, id: &str) -> Result<(), SandboxError> {
        self.docker
            .kill_container(id, None::<bollard::query_parameters::KillContainerOptions>)
            .await
            .map_err(|e| SandboxError::Api(format!("killing container `{id}`: {e}")))
    }
}
