//! The Docker recipe of an environment once its image exists: `main`'s spec, the compose
//! project's sidecars, the egress proxy, `main` itself, what is put in it before anything runs,
//! and its healthcheck.

use std::path::PathBuf;
use std::time::Duration;

use terminus_config::compose;
use terminus_config::task::Healthcheck;
use terminus_core::confinement::Confinement;
use terminus_core::layout::container as paths;

use super::image::MadeImage;
use super::{ProvisionError, ProvisionRequest};
use crate::backend::Backend;
use crate::compose::{Project, ProjectSpec};
use crate::container::{Container, ContainerSpec, ExecOptions};
use crate::egress::{Egress, EgressSpec};
use crate::engine::ImageFacts;
use crate::environment::Environment;
use crate::error::SandboxError;
use crate::labels::{ContainerRole, LABEL_ROLE};
use crate::placement::QueuedNotice;
use crate::site::Site;
use crate::{archive, blocking::blocking};

/// The main container of an environment, before the compose file and the proxy add to it.
pub(super) fn container_spec(
    site: &Site,
    request: &ProvisionRequest,
    image: &MadeImage,
    facts: Option<ImageFacts>,
    notes: &mut Vec<String>,
) -> ContainerSpec {
    // With a root image that runs the command it is given (no ENTRYPOINT, which may ignore it),
    // the container's own command creates the log directories: one engine round trip (an
    // upload, ≈ 40 ms) less per trial. Otherwise the upload does it as root.
    let log_dirs_by_command = facts.is_some_and(|f| f.root && !f.entrypoint);
    let (storage_mb, note) = storage_limit(request.storage_mb, site.storage_limits);
    notes.extend(note);
    ContainerSpec {
        make_dirs: if log_dirs_by_command {
            request.log_dirs.iter().map(|d| format!("/{d}")).collect()
        } else {
            Vec::new()
        },
        image: image.tag.clone(),
        name: request.container_name.clone(),
        labels: site.labels(&request.trial),
        cpus: Some(request.cpus),
        memory_mb: Some(request.memory_mb),
        no_network: !request.ever_online,
        network: site.network().map(str::to_string),
        confinement: Confinement { storage_mb, ..request.confinement.clone() },
        // The environment's own, then the job's `environment.env` over it.
        env: image.task_env.iter().chain(request.job_env.iter()).map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: request.workdir.clone(),
        gpus: request.gpus,
        aliases: Vec::new(),
        binds: Vec::new(),
        extra_hosts: Vec::new(),
        // The backend mounts the warden where it can.
        warden: None,
        // Without an ENTRYPOINT the idle command runs as it is given: it is then PID 1, which
        // nothing in the container can end (an agent's `kill -9 -1` ends its own processes,
        // not the container).
        pid1: facts.is_some_and(|f| !f.entrypoint),
    }
}

/// Starts the compose file's sidecars on a network of the trial's own, and points `main`'s
/// spec at it; returns the project and `main`'s writable binds (copied in once it runs).
pub(super) async fn start_sidecars(
    backend: &Backend,
    site: &Site,
    request: &ProvisionRequest,
    file: Option<&compose::ComposeFile>,
    spec: &mut ContainerSpec,
) -> Result<(Option<Project>, Vec<(PathBuf, String)>), ProvisionError> {
    let Some(file) = file else { return Ok((None, Vec::new())) };
    let project_spec = ProjectSpec {
        prefix: spec.name.clone(),
        network: format!("{}-net", spec.name),
        labels: spec.labels.clone(),
        images: &site.images,
        task_name: request.image_name.clone(),
        timeout: request.build_timeout,
        confinement: spec.confinement.clone(),
        cpus: spec.cpus,
        memory_mb: spec.memory_mb,
    };
    // The local engine's (compose is refused on a swarm).
    let engine = backend.engine();
    let (started, result) = engine.start_project(file, &project_spec).await;
    if let Err(e) = result {
        started.remove(engine).await;
        return Err(ProvisionError::Start(format!("task `{}`: sidecars: {e}", request.task_name)));
    }
    spec.network = Some(started.network.clone());
    spec.aliases = vec![paths::MAIN_SERVICE.to_string()];
    spec.binds = Project::binds(&spec.name, &file.main.mounts);
    spec.env.extend(file.main.environment.iter().cloned());
    if let Some(dir) = &file.main.working_dir {
        spec.workdir = Some(dir.clone());
    }
    // The file's own limits for `main` win, as its file comes last in Harbor's stack; a job's
    // overrides win over both.
    if !request.job_sets_cpus
        && let Some(cpus) = file.main.limits.cpus
    {
        spec.cpus = Some(cpus);
    }
    if !request.job_sets_memory
        && let Some(memory) = file.main.limits.memory_mb
    {
        spec.memory_mb = Some(memory);
    }
    Ok((Some(started), Project::copies(&file.main.mounts)))
}

/// An allowlisted phase reaches out only through the trial's proxy, which sits on `main`'s own
/// network; `main` knows its address from the start.
pub(super) async fn start_egress(
    backend: &Backend,
    request: &ProvisionRequest,
    spec: &mut ContainerSpec,
) -> Result<Option<Egress>, ProvisionError> {
    if !request.egress {
        return Ok(None);
    }
    let egress_spec = EgressSpec {
        prefix: spec.name.clone(),
        labels: spec.labels.clone(),
        upstream: spec.network.clone(),
        fallback_image: spec.image.clone(),
    };
    let started = backend
        .engine()
        .start_egress(&egress_spec)
        .await
        .map_err(|e| ProvisionError::Start(format!("task `{}`: {e}", request.task_name)))?;
    spec.extra_hosts.push(started.host_entry());
    Ok(Some(started))
}

/// Starts `main` and makes it one environment with what was started beside it; if it cannot
/// start, those are removed.
pub(super) async fn start_main(
    backend: &Backend,
    spec: &ContainerSpec,
    role: ContainerRole,
    project: Option<Project>,
    egress: Option<Egress>,
    queued: QueuedNotice,
) -> Result<Environment, ProvisionError> {
    let mut spec = spec.clone();
    // Only the environment's own container carries its role (its sidecars and proxy copied the
    // labels above): the viewer finds a trial's terminal by it.
    spec.labels.insert(LABEL_ROLE.to_string(), role.label().to_string());
    match backend.start_container(&spec, queued).await {
        Ok(container) => {
            let mut environment = Environment::new(container);
            if let Some(egress) = egress {
                environment = environment.with_egress(egress);
            }
            if let Some(project) = project {
                environment = environment.with_project(project);
            }
            Ok(environment)
        }
        Err(e) => {
            if let Some(egress) = egress {
                egress.remove(backend.engine()).await;
            }
            if let Some(project) = project {
                project.remove(backend.engine()).await;
            }
            Err(ProvisionError::Start(e.to_string()))
        }
    }
}

/// Puts in the started environment what it needs before anything runs: its first network,
/// its log directories (unless its command made them), the solution, `main`'s writable binds;
/// then waits for its healthcheck.
pub(super) async fn prepare_main(
    environment: &Environment,
    request: &ProvisionRequest,
    upload_log_dirs: bool,
    main_copies: &[(PathBuf, String)],
) -> Result<(), ProvisionError> {
    let upload = async {
        if let Some(access) = &request.initial_network {
            environment.set_network(access).await?;
        }
        if upload_log_dirs {
            environment.upload_tar("/", archive::tar_dirs_and_files(request.log_dirs, &[])?).await?;
        }
        if let Some(solution) = request.solution.clone() {
            let tar = blocking(move || archive::tar_dir(&solution, "solution")).await?;
            environment.upload_tar("/", tar).await?;
        }
        // `main`'s writable binds: a copy each, so the task's own directory is never written.
        for (source, target) in main_copies {
            environment.copy_in(source, target).await?;
        }
        Ok::<_, SandboxError>(())
    };
    upload.await.map_err(|e| ProvisionError::Start(e.to_string()))?;
    if let Some(check) = &request.healthcheck {
        healthcheck(environment, check, request.key)
            .await
            .map_err(|message| ProvisionError::Healthcheck(format!("task `{}`: {message}", request.task_name)))?;
    }
    Ok(())
}

/// Runs the task's readiness check until it passes (Docker HEALTHCHECK semantics, as Harbor
/// runs it): failures during `start_period_sec` do not count; `retries` failures in a row after
/// it end the trial. A check that outlives `timeout_sec` is a failure. `key` names the check's
/// place in task.toml in errors.
pub async fn healthcheck(container: &Container, check: &Healthcheck, key: &str) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    let start_period = Duration::from_secs_f64(check.start_period_sec.max(0.0));
    let timeout = Duration::from_secs_f64(check.timeout_sec.max(0.001));
    let mut failures = 0;
    loop {
        let in_start_period = started.elapsed() < start_period;
        let options = ExecOptions { timeout: Some(timeout), ..ExecOptions::default() };
        match container.exec(&check.command, &options).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(_) | Err(SandboxError::Timeout { .. }) => {}
            Err(e) => return Err(format!("the healthcheck could not run: {e}")),
        }
        let pause = if in_start_period {
            check.start_interval_sec
        } else {
            failures += 1;
            if failures >= check.retries.max(1) {
                return Err(format!(
                    "the healthcheck failed {failures} times in a row (`{key}.healthcheck.command` = {:?})",
                    check.command
                ));
            }
            check.interval_sec
        };
        tokio::time::sleep(Duration::from_secs_f64(pause.max(0.0))).await;
    }
}

/// A storage limit (the job's `override_storage_mb`, else the task's `storage_mb`) applies only
/// where the storage driver can enforce one; elsewhere the trial's result says it was not.
fn storage_limit(requested: Option<u64>, enforceable: bool) -> (Option<u64>, Option<String>) {
    match requested {
        Some(mb) if !enforceable => (
            None,
            Some(format!(
                "storage_mb = {mb} is not enforced: the engine's storage driver cannot limit a container's disk (it needs overlay2 on xfs with project quotas)"
            )),
        ),
        requested => (requested, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_limit_applies_where_it_can_and_is_named_where_it_cannot() {
        assert_eq!(storage_limit(Some(512), true), (Some(512), None));
        let (limit, note) = storage_limit(Some(512), false);
        assert_eq!(limit, None);
        assert!(note.is_some_and(|n| n.contains("storage_mb = 512 is not enforced")));
        assert_eq!(storage_limit(None, false), (None, None));
    }
}
