//! Provisioning a trial's environment: the task's image built or found, the main container
//! started hardened and confined, a compose project's sidecars and the egress proxy beside it,
//! health checks, and the per-step variant of all of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use terminus_config::Task;
use terminus_config::compose;
use terminus_config::job::TrialPlan;
use terminus_config::task::{EnvironmentSection, Healthcheck, NetworkMode, NetworkPlan, NetworkPolicy};
use terminus_config::trial::ResolvedTrial;
use terminus_core::confinement::Confinement;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::TrialName;
use terminus_core::layout::container as paths;
use terminus_sandbox::compose::{Project, ProjectSpec};
use terminus_sandbox::egress::{Egress, EgressSpec};
use terminus_sandbox::{
    Container, ContainerRole, ContainerSpec, Environment, ExecOptions, ImageBuilder, ImageFacts, LABEL_HOST,
    LABEL_JOB_DIR, LABEL_JOB_ID, LABEL_PID, LABEL_ROLE, LABEL_TRIAL_ID, QueuedNotice, archive, blocking,
};

use super::network::access;
use crate::context::JobContext;

/// What provisioning got to, and the error that stopped it.
pub struct Provisioned {
    /// The trial as the job, its agent and the loaded task resolve it.
    pub trial: Option<Arc<ResolvedTrial>>,
    /// The task directory's checksum (read here, off the actor).
    pub checksum: Option<String>,
    pub container: Option<Environment>,
    pub error: Option<TrialError>,
    /// The error came with an engine that does not answer a ping.
    pub engine_down: bool,
    /// What the trial's result should say about its container (a limit that cannot apply).
    pub notes: Vec<String>,
    /// The cluster node its container runs on (a swarm's).
    pub host: Option<String>,
    /// The error came from a node lost under the container (a swarm's).
    pub lost: bool,
}

pub(super) fn fail(kind: TrialErrorKind, message: impl Into<String>) -> Option<TrialError> {
    Some(TrialError::new(kind, message))
}

/// Called once the task has loaded and the trial is resolved, before anything of it runs (the
/// trial reports the watchdog's budget from it, so the task is read once per attempt).
pub type TaskLoaded = Box<dyn FnOnce(&ResolvedTrial) + Send>;

/// Loads the task, makes its image, starts the container and puts the log directories (and the
/// solution, for the oracles) in place.
pub async fn provision(
    ctx: &Arc<JobContext>,
    plan: &TrialPlan,
    name: &TrialName,
    needs_solution: bool,
    queued: QueuedNotice,
    loaded: TaskLoaded,
) -> Provisioned {
    let mut out = provision_steps(ctx, plan, name, needs_solution, queued, loaded).await;
    out.host = out.container.as_ref().and_then(|c| c.swarm_host().map(str::to_string));
    if let Some(container) = &out.container {
        out.notes.extend(container.swarm_unapplied().iter().cloned());
        for lost in container.swarm_lost_before() {
            out.notes.push(format!(
                "the swarm node `{lost}` was lost before this trial's container ran there; it was placed on another"
            ));
        }
    }
    if let Some(dir) = out.trial.as_ref().map(|t| t.task.dir.clone()) {
        let ctx = ctx.clone();
        out.checksum = blocking(move || ctx.dir_hash(&dir).ok()).await;
    }
    // The engine itself may be away (dockerd restarting): then this is no fault of the trial.
    if out.error.as_ref().is_some_and(|e| e.kind.may_be_engine_outage()) {
        out.engine_down = !ctx.backend.ping().await;
    }
    // On a swarm, a node lost while its container was being set up: the trial lost its
    // environment, and is restarted (elsewhere).
    if out.error.is_some()
        && let Some(container) = &out.container
        && container.swarm_manager().is_some()
        && !container.engine().ping().await
    {
        out.lost = true;
    }
    out
}

async fn provision_steps(
    ctx: &Arc<JobContext>,
    plan: &TrialPlan,
    name: &TrialName,
    needs_solution: bool,
    queued: QueuedNotice,
    loaded: TaskLoaded,
) -> Provisioned {
    let mut out = Provisioned {
        trial: None,
        checksum: None,
        container: None,
        error: None,
        engine_down: false,
        notes: Vec::new(),
        host: None,
        lost: false,
    };
    let path = plan.task.path.clone();
    let task = match blocking(move || Task::load(&path)).await {
        Ok(task) => task,
        Err(e) => {
            out.error = fail(TrialErrorKind::TaskLoad, e.to_string());
            return out;
        }
    };
    // The one place a trial's plan is made from the job: everything after reads the plan.
    let trial = Arc::new(ctx.plan.resolve(plan.agent_idx, task));
    out.trial = Some(trial.clone());
    loaded(&trial);
    let task = &trial.task;
    // What the task reads from the host must be what the job passes, before anything of it runs.
    let reads = task.host_reads();
    if let Some(read) = trial.host_env.refusal(&reads) {
        let message = format!("task `{}`: {}", task.name, terminus_config::host_env::refusal_message(read));
        out.error = fail(TrialErrorKind::TaskLoad, message);
        return out;
    }
    out.notes.extend(task.extra_host_notices());
    out.notes.extend(trial.artifact_notes.iter().cloned());
    // A step without a solution of its own uses the task's (Harbor's oracle).
    let has_solution = |dir: std::path::PathBuf| dir.join("solve.sh").is_file();
    let solved = has_solution(task.solution_dir())
        || !task.steps().is_empty() && task.steps().iter().all(|s| has_solution(task.step_dir(s).join("solution")));
    if needs_solution && !solved {
        out.error = fail(
            TrialErrorKind::FileNotFound,
            format!("task `{}` has no solution/solve.sh, which the oracle needs", task.name),
        );
        return out;
    }
    // Whatever of task.toml is not acted on is said in the trial's result, by key.
    out.notes.extend(task.notices.iter().map(|notice| format!("task.toml {notice}")));
    if let Some(reason) = task.unrunnable() {
        out.error = fail(TrialErrorKind::Unsupported, format!("task `{}`: {reason}", task.name));
        return out;
    }
    let network = task.network_plan();
    // A step may give its agent or verifier a network the task's phases do not have.
    let plans: Vec<NetworkPlan> =
        std::iter::once(network.clone()).chain(task.steps().iter().map(|s| task.step_network_plan(s))).collect();
    let environment = EnvironmentPlan {
        trial: &trial,
        config: &task.config.environment,
        key: "environment",
        dir: task.environment_dir(),
        image_name: task.name.clone(),
        // A random tail keeps names unique across restarts of the same trial.
        container_name: format!(
            "terminus-{}-{}-{:04x}",
            &ctx.job_id.to_string()[..8],
            name.as_str()
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "-"),
            rand::random::<u16>()
        ),
        // A container that needs a network at some phase (of any step) joins it and leaves it
        // at the others (it can only do so if it was started on one).
        ever_online: plans.iter().any(NetworkPlan::ever_online),
        egress: plans.iter().any(NetworkPlan::any_allowlist),
        baseline: network.setup,
        log_dirs: &paths::LOG_DIRS,
        solution: needs_solution.then(|| task.solution_dir()).filter(|dir| dir.is_dir()),
        role: ContainerRole::Agent,
    };
    let (container, error) = start_environment(ctx, &environment, name, &mut out.notes, queued).await;
    out.container = container;
    out.error = error;
    out
}

/// One environment of a trial: the agent's (`[environment]`, built from `environment/`), or a
/// separate verifier's ([`terminus_config::task::VerifierEnvironment`]).
pub(super) struct EnvironmentPlan<'a> {
    pub(super) trial: &'a ResolvedTrial,
    /// Its settings.
    pub(super) config: &'a EnvironmentSection,
    /// Where they are in task.toml (`environment`, `verifier.environment`), for messages.
    pub(super) key: &'static str,
    /// Its image's recipe (unless `config.docker_image` names one) and compose file.
    pub(super) dir: PathBuf,
    /// What a built image's tag is named after.
    pub(super) image_name: String,
    pub(super) container_name: String,
    /// The network it starts with.
    pub(super) baseline: NetworkPolicy,
    /// It joins a network at some phase (else it is started without one).
    pub(super) ever_online: bool,
    /// Some phase of it is allowlisted: it gets the trial's egress proxy.
    pub(super) egress: bool,
    /// The directories made in it, writable by any user (`logs/agent`…).
    pub(super) log_dirs: &'a [&'a str],
    /// A solution to put at `/solution` (the oracle's).
    pub(super) solution: Option<PathBuf>,
    /// What its container is for, as its `terminus.role` label says.
    pub(super) role: ContainerRole,
}

/// Makes an environment's image, starts its sidecars and container, and puts its log
/// directories (and the solution) in place, then waits for its healthcheck. What cannot apply
/// is added to `notes`. A container that was started is returned even with an error, for its
/// caller to remove.
pub(super) async fn start_environment(
    ctx: &Arc<JobContext>,
    plan: &EnvironmentPlan<'_>,
    trial: &TrialName,
    notes: &mut Vec<String>,
    queued: QueuedNotice,
) -> (Option<Environment>, Option<TrialError>) {
    let made = async {
        check_backend(ctx, plan).await?;
        let image = make_image(ctx, plan, notes).await?;
        let facts = ctx.images.facts(&image.tag).await;
        let mut spec = container_spec(ctx, plan, trial, &image, facts, notes);
        let (project, main_copies) = start_sidecars(ctx, plan, image.compose.as_ref(), &mut spec).await?;
        let egress = match start_egress(ctx, plan, &mut spec).await {
            Ok(egress) => egress,
            Err(error) => {
                if let Some(project) = project {
                    project.remove(ctx.engine()).await;
                }
                return Err(error);
            }
        };
        let environment = start_main(ctx, &spec, plan.role, project, egress, queued).await?;
        Ok((environment, main_copies, spec.make_dirs.is_empty()))
    };
    let (environment, main_copies, upload_log_dirs) = match made.await {
        Ok(made) => made,
        Err(error) => return (None, Some(error)),
    };
    tracing::debug!(trial = %trial, container = %environment.name, "container started");
    let error = prepare_main(&environment, plan, upload_log_dirs, &main_copies).await.err();
    (Some(environment), error)
}

/// What the task asks of an environment that its backend cannot give: GPUs, compose files and
/// allowlisted phases on a swarm, GPUs on an engine without them.
async fn check_backend(ctx: &JobContext, plan: &EnvironmentPlan<'_>) -> Result<(), TrialError> {
    let (task, env) = (&plan.trial.task, plan.config);
    let unsupported_on_swarm = |what: &str| {
        TrialError::new(
            TrialErrorKind::Unsupported,
            format!("task `{}`: {what} is not supported on the swarm backend (environment.type: swarm)", task.name),
        )
    };
    if ctx.backend.local().is_none() && env.gpus > 0 {
        return Err(unsupported_on_swarm(&format!("`{}.gpus`", plan.key)));
    }
    if ctx.backend.local().is_none() && plan.egress {
        return Err(unsupported_on_swarm("an allowlisted network phase (`allowed_hosts`)"));
    }
    if ctx.backend.local().is_none() && plan.dir.join(compose::FILE_NAME).is_file() {
        return Err(unsupported_on_swarm("environment/docker-compose.yaml"));
    }
    if let Some(engine) = ctx.backend.local()
        && env.gpus > 0
        && engine.has_gpus().await != Some(true)
    {
        return Err(TrialError::new(
            TrialErrorKind::Unsupported,
            format!(
                "task `{}` asks for {} GPU(s) (`{}.gpus`), but this Docker engine has no GPU runtime (nvidia) or GPU devices",
                task.name, env.gpus, plan.key
            ),
        ));
    }
    Ok(())
}

/// An environment's image, made, with what its making read.
struct MadeImage {
    tag: String,
    /// The environment's own variables, `${VAR}` resolved.
    task_env: BTreeMap<String, String>,
    /// The environment's compose file.
    compose: Option<compose::ComposeFile>,
    cpus: f64,
    memory_mb: u64,
}

/// Reads the environment's compose file (it may say how `main` is built) and makes its image:
/// the task's prebuilt image as it is (unless a rebuild is forced and the task has the recipe),
/// else built from the compose file's `main.build` or the environment's directory.
async fn make_image(
    ctx: &Arc<JobContext>,
    plan: &EnvironmentPlan<'_>,
    notes: &mut Vec<String>,
) -> Result<MadeImage, TrialError> {
    let (task, env, inputs) = (&plan.trial.task, plan.config, &plan.trial.container);
    let start_error = |message: String| TrialError::new(TrialErrorKind::EnvironmentStart, message);
    // `${VAR}` values come from this process's environment, as Harbor reads the host's.
    let host = &plan.trial.host_env;
    let task_env = terminus_config::task::resolve_host_env(&format!("{}.env", plan.key), &env.env, host)
        .map_err(|e| TrialError::new(TrialErrorKind::InvalidValue, format!("task `{}`: {e}", task.name)))?;
    let prebuilt = env.docker_image.clone().filter(|_| !(inputs.force_build && plan.dir.join("Dockerfile").is_file()));
    let tag = match &prebuilt {
        Some(image) => image.clone(),
        None => {
            let (hash_ctx, dir) = (ctx.clone(), plan.dir.clone());
            let hash = blocking(move || hash_ctx.dir_hash(&dir))
                .await
                .map_err(|e| start_error(format!("cannot read {}: {e}", plan.dir.display())))?;
            ImageBuilder::tag_for(&plan.image_name, &hash)
        }
    };
    let cpus = inputs.cpus.unwrap_or(env.cpus);
    let memory_mb = inputs.memory_mb.unwrap_or_else(|| env.memory_mb().unwrap_or(2048));
    // The host's values of what the compose file names, as far as the job passes them.
    let host_vars = task
        .host_reads()
        .into_iter()
        .filter_map(|read| host.lookup(&read.var).map(|value| (read.var, value)))
        .collect();
    let infra = ComposeInfra {
        task_env: task_env.clone(),
        host_vars,
        main_image: tag.clone(),
        prebuilt: prebuilt.is_some(),
        cpus,
        memory_mb,
    };
    let compose = read_compose(&plan.dir, infra)
        .await
        .map_err(|message| start_error(format!("task `{}`: {message}", task.name)))?;
    let main_build = compose.as_ref().and_then(|f| f.main.build.clone());
    let limit = plan.trial.limits.build;
    let built = match (&prebuilt, main_build) {
        (Some(image), build) => {
            if build.is_some() {
                notes.push(format!(
                    "task `{}`: services.main.build in environment/docker-compose.yaml is not used: the task names docker_image `{image}`",
                    task.name
                ));
            }
            ctx.images.ensure_prebuilt(image, limit).await.map(|_| ()).map_err(|e| format!("task `{}`: {e}", task.name))
        }
        (None, Some(compose::ServiceImage::Build { context, dockerfile })) => ctx
            .images
            .ensure_with(&tag, &context, &dockerfile, inputs.force_build, limit)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        (None, _) => {
            ctx.images.ensure(&tag, &plan.dir, inputs.force_build, limit).await.map(|_| ()).map_err(|e| e.to_string())
        }
    };
    built.map_err(|message| TrialError::new(TrialErrorKind::EnvironmentBuild, message))?;
    Ok(MadeImage { tag, task_env, compose, cpus, memory_mb })
}

/// The main container of an environment, before the compose file and the proxy add to it.
fn container_spec(
    ctx: &JobContext,
    plan: &EnvironmentPlan<'_>,
    trial: &TrialName,
    image: &MadeImage,
    facts: Option<ImageFacts>,
    notes: &mut Vec<String>,
) -> ContainerSpec {
    let env = plan.config;
    // With a root image that runs the command it is given (no ENTRYPOINT, which may ignore it),
    // the container's own command creates the log directories: one engine round trip (an
    // upload, ≈ 40 ms) less per trial. Otherwise the upload does it as root.
    let log_dirs_by_command = facts.is_some_and(|f| f.root && !f.entrypoint);
    ContainerSpec {
        make_dirs: if log_dirs_by_command {
            plan.log_dirs.iter().map(|d| format!("/{d}")).collect()
        } else {
            Vec::new()
        },
        image: image.tag.clone(),
        name: plan.container_name.clone(),
        labels: [
            (LABEL_JOB_ID.to_string(), ctx.job_id.to_string()),
            (LABEL_TRIAL_ID.to_string(), trial.to_string()),
            // Let `terminus gc` tell containers of a live job from those of a dead one (by the
            // job directory's lock, on this host; the pid for older containers).
            (LABEL_PID.to_string(), std::process::id().to_string()),
            (LABEL_JOB_DIR.to_string(), ctx.job_dir.display().to_string()),
            (LABEL_HOST.to_string(), terminus_core::lock::host_identity()),
        ]
        .into_iter()
        .collect(),
        cpus: Some(image.cpus),
        memory_mb: Some(image.memory_mb),
        no_network: !plan.ever_online,
        network: ctx.network.clone(),
        confinement: confinement(ctx, &plan.trial.container.policy.confinement, env, notes),
        // The environment's own, then the job's `environment.env` over it.
        env: image.task_env.iter().chain(plan.trial.container.env.iter()).map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: env.workdir.clone(),
        gpus: env.gpus,
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
async fn start_sidecars(
    ctx: &JobContext,
    plan: &EnvironmentPlan<'_>,
    file: Option<&compose::ComposeFile>,
    spec: &mut ContainerSpec,
) -> Result<(Option<Project>, Vec<(PathBuf, String)>), TrialError> {
    let Some(file) = file else { return Ok((None, Vec::new())) };
    let project_spec = ProjectSpec {
        prefix: spec.name.clone(),
        network: format!("{}-net", spec.name),
        labels: spec.labels.clone(),
        images: &ctx.images,
        task_name: plan.image_name.clone(),
        timeout: plan.trial.limits.build,
        confinement: spec.confinement.clone(),
        cpus: spec.cpus,
        memory_mb: spec.memory_mb,
    };
    // The local engine's (compose is refused on a swarm).
    let engine = ctx.engine();
    let (started, result) = engine.start_project(file, &project_spec).await;
    if let Err(e) = result {
        started.remove(engine).await;
        let message = format!("task `{}`: sidecars: {e}", plan.trial.task.name);
        return Err(TrialError::new(TrialErrorKind::EnvironmentStart, message));
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
    if plan.trial.container.cpus.is_none()
        && let Some(cpus) = file.main.limits.cpus
    {
        spec.cpus = Some(cpus);
    }
    if plan.trial.container.memory_mb.is_none()
        && let Some(memory) = file.main.limits.memory_mb
    {
        spec.memory_mb = Some(memory);
    }
    Ok((Some(started), Project::copies(&file.main.mounts)))
}

/// An allowlisted phase reaches out only through the trial's proxy, which sits on `main`'s own
/// network; `main` knows its address from the start.
async fn start_egress(
    ctx: &JobContext,
    plan: &EnvironmentPlan<'_>,
    spec: &mut ContainerSpec,
) -> Result<Option<Egress>, TrialError> {
    if !plan.egress {
        return Ok(None);
    }
    let egress_spec = EgressSpec {
        prefix: spec.name.clone(),
        labels: spec.labels.clone(),
        upstream: spec.network.clone(),
        fallback_image: spec.image.clone(),
    };
    let started = ctx.engine().start_egress(&egress_spec).await.map_err(|e| {
        TrialError::new(TrialErrorKind::EnvironmentStart, format!("task `{}`: {e}", plan.trial.task.name))
    })?;
    spec.extra_hosts.push(started.host_entry());
    Ok(Some(started))
}

/// Starts `main` and makes it one environment with what was started beside it; if it cannot
/// start, those are removed.
async fn start_main(
    ctx: &JobContext,
    spec: &ContainerSpec,
    role: ContainerRole,
    project: Option<Project>,
    egress: Option<Egress>,
    queued: QueuedNotice,
) -> Result<Environment, TrialError> {
    let mut spec = spec.clone();
    // Only the environment's own container carries its role (its sidecars and proxy copied the
    // labels above): the viewer finds a trial's terminal by it.
    spec.labels.insert(LABEL_ROLE.to_string(), role.label().to_string());
    match ctx.backend.start_container(&spec, queued).await {
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
                egress.remove(ctx.engine()).await;
            }
            if let Some(project) = project {
                project.remove(ctx.engine()).await;
            }
            Err(TrialError::new(TrialErrorKind::EnvironmentStart, e.to_string()))
        }
    }
}

/// Puts in the started environment what it needs before anything runs: its baseline network,
/// its log directories (unless its command made them), the solution, `main`'s writable binds;
/// then waits for its healthcheck.
async fn prepare_main(
    environment: &Environment,
    plan: &EnvironmentPlan<'_>,
    upload_log_dirs: bool,
    main_copies: &[(PathBuf, String)],
) -> Result<(), TrialError> {
    let upload = async {
        if plan.ever_online && plan.baseline.mode != NetworkMode::Public {
            environment.set_network(&access(&plan.baseline)).await?;
        }
        if upload_log_dirs {
            environment.upload_tar("/", archive::tar_dirs_and_files(plan.log_dirs, &[])?).await?;
        }
        if let Some(solution) = plan.solution.clone() {
            let tar = blocking(move || archive::tar_dir(&solution, "solution")).await?;
            environment.upload_tar("/", tar).await?;
        }
        // `main`'s writable binds: a copy each, so the task's own directory is never written.
        for (source, target) in main_copies {
            environment.copy_in(source, target).await?;
        }
        Ok::<_, terminus_sandbox::SandboxError>(())
    };
    upload.await.map_err(|e| TrialError::new(TrialErrorKind::EnvironmentStart, e.to_string()))?;
    if let Some(check) = &plan.config.healthcheck {
        healthcheck(environment, check, plan.key).await.map_err(|message| {
            TrialError::new(TrialErrorKind::Healthcheck, format!("task `{}`: {message}", plan.trial.task.name))
        })?;
    }
    Ok(())
}

/// What a compose file is told about the trial ([`compose::Infra`]), owned to cross threads.
struct ComposeInfra {
    task_env: BTreeMap<String, String>,
    host_vars: BTreeMap<String, String>,
    main_image: String,
    prebuilt: bool,
    cpus: f64,
    memory_mb: u64,
}

/// An environment's `docker-compose.yaml` in `dir` ([`compose::read`]), off the async workers.
async fn read_compose(dir: &Path, infra: ComposeInfra) -> Result<Option<compose::ComposeFile>, String> {
    let dir = dir.to_path_buf();
    blocking(move || {
        let infra = compose::Infra {
            task_env: &infra.task_env,
            host_vars: &infra.host_vars,
            main_image: &infra.main_image,
            prebuilt: infra.prebuilt,
            cpus: infra.cpus,
            memory_mb: Some(infra.memory_mb),
        };
        compose::read(&dir, &infra)
    })
    .await
}

/// Runs the task's readiness check until it passes (Docker HEALTHCHECK semantics, as Harbor
/// runs it): failures during `start_period_sec` do not count; `retries` failures in a row after
/// it end the trial. A check that outlives `timeout_sec` is a failure.
/// Runs a healthcheck (`key` names it in errors) with Docker's semantics.
pub(super) async fn healthcheck(container: &Container, check: &Healthcheck, key: &str) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    let start_period = Duration::from_secs_f64(check.start_period_sec.max(0.0));
    let timeout = Duration::from_secs_f64(check.timeout_sec.max(0.001));
    let mut failures = 0;
    loop {
        let in_start_period = started.elapsed() < start_period;
        let options = ExecOptions { timeout: Some(timeout), ..ExecOptions::default() };
        match container.exec(&check.command, &options).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(_) | Err(terminus_sandbox::SandboxError::Timeout { .. }) => {}
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

/// How the job confines this task's container; what cannot apply is added to `notes`.
fn confinement(
    ctx: &JobContext,
    policy: &Confinement,
    env: &EnvironmentSection,
    notes: &mut Vec<String>,
) -> Confinement {
    let requested = policy.storage_mb.or(env.storage_mb());
    let (storage_mb, note) = storage_limit(requested, ctx.storage_limits);
    notes.extend(note);
    Confinement { storage_mb, ..policy.clone() }
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
