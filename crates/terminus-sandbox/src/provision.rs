//! Provisioning: from a [`ProvisionRequest`] (plain data the actors resolve from the job and
//! the task) to a running [`Environment`], through one call. The recipe: what the backend
//! refuses, the image built or found, the main container started hardened and confined, a
//! compose project's sidecars and the egress proxy beside it, the log directories, solution and
//! writable binds put in, the healthcheck waited for.
//!
//! A backend shows here in two places only: [`Backend::refusal`] (what it cannot give) and
//! [`Backend::start_container`] (how `main` runs); a new backend adds its arm to each.

mod error;
mod image;
mod recipe;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use terminus_config::task::Healthcheck;
use terminus_core::confinement::Confinement;

use crate::backend::Backend;
use crate::egress::NetworkAccess;
use crate::environment::Environment;
use crate::labels::ContainerRole;
use crate::placement::QueuedNotice;
use crate::site::Site;

pub use error::ProvisionError;
pub use recipe::healthcheck;

/// One environment of a trial, as the actors resolved it: the agent's (`[environment]`), or a
/// separate verifier's.
#[derive(Clone, Debug)]
pub struct ProvisionRequest {
    /// The trial's name (its containers' label).
    pub trial: String,
    /// The main container's name ([`Site::container_name`], or the verifier's).
    pub container_name: String,
    /// What the container is for, as its `terminus.role` label says.
    pub role: ContainerRole,
    /// The task's name, as messages name it.
    pub task_name: String,
    /// Where the environment's settings are in task.toml (`environment`,
    /// `verifier.environment`), for messages.
    pub key: &'static str,
    /// The image's recipe (unless `docker_image` names one) and compose file.
    pub dir: PathBuf,
    /// What a built image's tag is named after.
    pub image_name: String,
    /// The task's prebuilt image, used as it is unless a rebuild is forced and `dir` has the
    /// recipe.
    pub docker_image: Option<String>,
    pub force_build: bool,
    /// How long building or pulling the image (and each sidecar's) may take.
    pub build_timeout: Duration,
    /// The environment's own variables with `${VAR}` resolved, or the complete message of why
    /// they could not be (reported after what the backend refuses).
    pub env: Result<BTreeMap<String, String>, String>,
    /// The host's values of what the compose file names, as far as the job passes them.
    pub host_vars: BTreeMap<String, String>,
    /// The job's `environment.env`, over the environment's own.
    pub job_env: BTreeMap<String, String>,
    pub cpus: f64,
    pub memory_mb: u64,
    /// The job overrides the limits (then they win over a compose file's limits for `main`).
    pub job_sets_cpus: bool,
    pub job_sets_memory: bool,
    pub gpus: u32,
    pub workdir: Option<String>,
    /// How the job confines the container; `storage_mb` below replaces its storage limit.
    pub confinement: Confinement,
    /// The storage limit asked for (the job's override, else the task's).
    pub storage_mb: Option<u64>,
    /// It joins a network at some phase (else it is started without one).
    pub ever_online: bool,
    /// Some phase of it is allowlisted: it gets the trial's egress proxy.
    pub egress: bool,
    /// The network it is put on once started, when that is not the one it starts with.
    pub initial_network: Option<NetworkAccess>,
    /// The directories made in it, writable by any user (`logs/agent`…).
    pub log_dirs: &'static [&'static str],
    /// A solution to put at `/solution` (the oracle's).
    pub solution: Option<PathBuf>,
    pub healthcheck: Option<Healthcheck>,
}

/// What provisioning got to. A container that was started comes back even with an error, for
/// its caller to remove.
#[derive(Debug, Default)]
pub struct ProvisionOutcome {
    pub environment: Option<Environment>,
    pub error: Option<ProvisionError>,
    /// What the trial's result should say about its environment (a limit that cannot apply, a
    /// placement that was not kept), in the order it was found.
    pub notes: Vec<String>,
    /// The cluster node the container runs on (a swarm's).
    pub host: Option<String>,
}

impl Backend {
    /// Provisions a trial's environment ([`Backend::start_environment`]), then says where it was
    /// placed and whether an error is the backend's own: an engine that no longer answers
    /// ([`ProvisionError::EngineDown`]), a swarm node lost under the container
    /// ([`ProvisionError::Lost`]).
    pub async fn provision(&self, site: &Site, request: &ProvisionRequest, queued: QueuedNotice) -> ProvisionOutcome {
        let mut out = self.start_environment(site, request, queued).await;
        if let Some(container) = &out.environment {
            out.host = container.swarm_host().map(str::to_string);
            out.notes.extend(container.swarm_unapplied().iter().cloned());
            for lost in container.swarm_lost_before() {
                out.notes.push(format!(
                    "the swarm node `{lost}` was lost before this trial's container ran there; it was placed on another"
                ));
            }
        }
        // The engine itself may be away (dockerd restarting): then this is no fault of the trial.
        if let Some(error) = out.error.take() {
            let error = if error.kind().may_be_engine_outage() && !self.ping().await {
                ProvisionError::EngineDown(Box::new(error))
            } else {
                error
            };
            // On a swarm, a node lost while its container was being set up: the trial lost its
            // environment, and is restarted (elsewhere).
            let error = match &out.environment {
                Some(container) if container.swarm_manager().is_some() && !container.engine().ping().await => {
                    ProvisionError::Lost(Box::new(error))
                }
                _ => error,
            };
            out.error = Some(error);
        }
        out
    }

    /// Makes an environment's image, starts its sidecars and container, puts its log
    /// directories (and the solution) in place, then waits for its healthcheck. What cannot
    /// apply goes to the outcome's notes.
    pub async fn start_environment(
        &self,
        site: &Site,
        request: &ProvisionRequest,
        queued: QueuedNotice,
    ) -> ProvisionOutcome {
        let mut out = ProvisionOutcome::default();
        let made = async {
            self.refusal(request).await?;
            let env = request.env.clone().map_err(ProvisionError::Invalid)?;
            let image = image::make_image(site, request, env, &mut out.notes).await?;
            let facts = site.images.facts(&image.tag).await;
            let mut spec = recipe::container_spec(site, request, &image, facts, &mut out.notes);
            let (project, main_copies) =
                recipe::start_sidecars(self, site, request, image.compose.as_ref(), &mut spec).await?;
            let egress = match recipe::start_egress(self, request, &mut spec).await {
                Ok(egress) => egress,
                Err(error) => {
                    if let Some(project) = project {
                        project.remove(self.engine()).await;
                    }
                    return Err(error);
                }
            };
            let environment = recipe::start_main(self, &spec, request.role, project, egress, queued).await?;
            Ok((environment, main_copies, spec.make_dirs.is_empty()))
        };
        let made = made.await;
        let (environment, main_copies, upload_log_dirs) = match made {
            Ok(made) => made,
            Err(error) => {
                out.error = Some(error);
                return out;
            }
        };
        tracing::debug!(trial = %request.trial, container = %environment.name, "container started");
        out.error = recipe::prepare_main(&environment, request, upload_log_dirs, &main_copies).await.err();
        out.environment = Some(environment);
        out
    }

    /// What the request asks of this backend that it cannot give: GPUs, compose files and
    /// allowlisted phases on a swarm, GPUs on an engine without them.
    pub async fn refusal(&self, request: &ProvisionRequest) -> Result<(), ProvisionError> {
        let task = &request.task_name;
        match self {
            Backend::Docker(engine) => {
                if request.gpus > 0 && engine.has_gpus().await != Some(true) {
                    return Err(ProvisionError::Unsupported(format!(
                        "task `{task}` asks for {} GPU(s) (`{}.gpus`), but this Docker engine has no GPU runtime (nvidia) or GPU devices",
                        request.gpus, request.key
                    )));
                }
            }
            Backend::Swarm(_) => {
                let unsupported = |what: &str| {
                    Err(ProvisionError::Unsupported(format!(
                        "task `{task}`: {what} is not supported on the swarm backend (environment.type: swarm)"
                    )))
                };
                if request.gpus > 0 {
                    return unsupported(&format!("`{}.gpus`", request.key));
                }
                if request.egress {
                    return unsupported("an allowlisted network phase (`allowed_hosts`)");
                }
                if request.dir.join(terminus_config::compose::FILE_NAME).is_file() {
                    return unsupported("environment/docker-compose.yaml");
                }
            }
        }
        Ok(())
    }

    /// Whether a task's verifier may run in an environment of its own here (not on a swarm).
    pub fn refuse_separate_verifier(&self, task: &str) -> Result<(), ProvisionError> {
        match self {
            Backend::Docker(_) => Ok(()),
            Backend::Swarm(_) => Err(ProvisionError::Unsupported(format!(
                "task `{task}`: a separate verifier environment is not supported on the swarm backend"
            ))),
        }
    }
}
