//! The container side of a trial, as plain async functions the Trial's effects run in spawned
//! tasks: provisioning (task, image, container, log directories), verification (tests, reward),
//! and teardown (closing the terminal, collecting logs, removing the container). A separate
//! verifier's environment is started with the same code ([`separate`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use terminus_config::Task;
use terminus_config::job::TrialPlan;
use terminus_config::policy::AgentProcesses;
use terminus_config::task::{EnvironmentSection, Healthcheck, NetworkMode, NetworkPlan, NetworkPolicy, StepSection};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::TrialName;
use terminus_core::layout::{TrialDir, container as paths, names};
use terminus_sandbox::compose::{self, ProjectSpec};
use terminus_sandbox::egress::{self, EgressSpec, NetworkAccess};
use terminus_sandbox::{
    Container, ContainerRole, ContainerSpec, ExecOptions, ImageBuilder, LABEL_HOST, LABEL_JOB_DIR, LABEL_JOB_ID,
    LABEL_PID, LABEL_ROLE, LABEL_TRIAL_ID, QueuedNotice, archive, blocking,
};

use crate::context::JobContext;
use crate::tmux_session::TmuxHandle;

mod separate;
pub mod steps;

pub use separate::{SeparateState, SeparateVerify, verify_separately, with_convention};

/// What provisioning got to, and the error that stopped it.
pub struct Provisioned {
    pub task: Option<Task>,
    /// The task directory's checksum (read here, off the actor).
    pub checksum: Option<String>,
    pub container: Option<Container>,
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

fn fail(kind: TrialErrorKind, message: impl Into<String>) -> Option<TrialError> {
    Some(TrialError::new(kind, message))
}

/// Loads the task, makes its image, starts the container and puts the log directories (and the
/// solution, for the oracles) in place.
pub async fn provision(
    ctx: &Arc<JobContext>,
    plan: &TrialPlan,
    name: &TrialName,
    needs_solution: bool,
    queued: QueuedNotice,
) -> Provisioned {
    let mut out = provision_steps(ctx, plan, name, needs_solution, queued).await;
    out.host = out.container.as_ref().and_then(|c| c.swarm_host().map(str::to_string));
    if let Some(container) = &out.container {
        out.notes.extend(container.swarm_unapplied().iter().cloned());
        for lost in container.swarm_lost_before() {
            out.notes.push(format!(
                "the swarm node `{lost}` was lost before this trial's container ran there; it was placed on another"
            ));
        }
    }
    if let Some(dir) = out.task.as_ref().map(|t| t.dir.clone()) {
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
) -> Provisioned {
    let mut out = Provisioned {
        task: None,
        checksum: None,
        container: None,
        error: None,
        engine_down: false,
        notes: Vec::new(),
        host: None,
        lost: false,
    };
    let path = plan.task.path.clone();
    let mut task = match blocking(move || Task::load(&path)).await {
        Ok(task) => task,
        Err(e) => {
            out.error = fail(TrialErrorKind::TaskLoad, e.to_string());
            return out;
        }
    };
    // What the task reads from the host must be what the job passes, before anything of it runs.
    let reads = task.host_reads();
    if let Some(read) = ctx.spec.host_env.refusal(&reads) {
        let message = format!("task `{}`: {}", task.name, terminus_config::host_env::refusal_message(read));
        out.error = fail(TrialErrorKind::TaskLoad, message);
        out.task = Some(task);
        return out;
    }
    // The job's run-specific allowlist hosts: every network plan of this trial merges them.
    task.extra_hosts = ctx.spec.extra_hosts(&ctx.spec.agents[plan.agent_idx]);
    out.notes.extend(task.extra_host_notices());
    // A step without a solution of its own uses the task's (Harbor's oracle).
    let has_solution = |dir: std::path::PathBuf| dir.join("solve.sh").is_file();
    let solved = has_solution(task.solution_dir())
        || !task.steps().is_empty() && task.steps().iter().all(|s| has_solution(task.step_dir(s).join("solution")));
    if needs_solution && !solved {
        out.error = fail(
            TrialErrorKind::FileNotFound,
            format!("task `{}` has no solution/solve.sh, which the oracle needs", task.name),
        );
        out.task = Some(task);
        return out;
    }
    // Whatever of task.toml is not acted on is said in the trial's result, by key.
    out.notes.extend(task.notices.iter().map(|notice| format!("task.toml {notice}")));
    if let Some(reason) = task.unrunnable() {
        out.error = fail(TrialErrorKind::Unsupported, format!("task `{}`: {reason}", task.name));
        out.task = Some(task);
        return out;
    }
    let network = task.network_plan();
    // A step may give its agent or verifier a network the task's phases do not have.
    let plans: Vec<NetworkPlan> =
        std::iter::once(network.clone()).chain(task.steps().iter().map(|s| task.step_network_plan(s))).collect();
    let environment = EnvironmentPlan {
        task: &task,
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
    out.task = Some(task);
    out
}

/// One environment of a trial: the agent's (`[environment]`, built from `environment/`), or a
/// separate verifier's ([`terminus_config::task::VerifierEnvironment`]).
struct EnvironmentPlan<'a> {
    task: &'a Task,
    /// Its settings.
    config: &'a EnvironmentSection,
    /// Where they are in task.toml (`environment`, `verifier.environment`), for messages.
    key: &'static str,
    /// Its image's recipe (unless `config.docker_image` names one) and compose file.
    dir: PathBuf,
    /// What a built image's tag is named after.
    image_name: String,
    container_name: String,
    /// The network it starts with.
    baseline: NetworkPolicy,
    /// It joins a network at some phase (else it is started without one).
    ever_online: bool,
    /// Some phase of it is allowlisted: it gets the trial's egress proxy.
    egress: bool,
    /// The directories made in it, writable by any user (`logs/agent`…).
    log_dirs: &'a [&'a str],
    /// A solution to put at `/solution` (the oracle's).
    solution: Option<PathBuf>,
    /// What its container is for, as its `terminus.role` label says.
    role: ContainerRole,
}

/// Makes an environment's image, starts its sidecars and container, and puts its log
/// directories (and the solution) in place, then waits for its healthcheck. What cannot apply
/// is added to `notes`. A container that was started is returned even with an error, for its
/// caller to remove.
async fn start_environment(
    ctx: &Arc<JobContext>,
    plan: &EnvironmentPlan<'_>,
    trial: &TrialName,
    notes: &mut Vec<String>,
    queued: QueuedNotice,
) -> (Option<Container>, Option<TrialError>) {
    let (task, env) = (plan.task, plan.config);
    let unsupported_on_swarm = |what: &str| {
        fail(
            TrialErrorKind::Unsupported,
            format!("task `{}`: {what} is not supported on the swarm backend (environment.type: swarm)", task.name),
        )
    };
    if ctx.backend.local().is_none() && env.gpus > 0 {
        return (None, unsupported_on_swarm(&format!("`{}.gpus`", plan.key)));
    }
    if ctx.backend.local().is_none() && plan.egress {
        return (None, unsupported_on_swarm("an allowlisted network phase (`allowed_hosts`)"));
    }
    if let Some(engine) = ctx.backend.local()
        && env.gpus > 0
        && engine.has_gpus().await != Some(true)
    {
        return (
            None,
            fail(
                TrialErrorKind::Unsupported,
                format!(
                    "task `{}` asks for {} GPU(s) (`{}.gpus`), but this Docker engine has no GPU runtime (nvidia) or GPU devices",
                    task.name, env.gpus, plan.key
                ),
            ),
        );
    }
    // `${VAR}` values come from this process's environment, as Harbor reads the host's.
    let host = &ctx.spec.host_env;
    let task_env = match terminus_config::task::resolve_host_env(&format!("{}.env", plan.key), &env.env, host) {
        Ok(resolved) => resolved,
        Err(e) => return (None, fail(TrialErrorKind::InvalidValue, format!("task `{}`: {e}", task.name))),
    };
    // A prebuilt image is used as it is, unless a rebuild is forced and the task has the recipe.
    let prebuilt =
        env.docker_image.clone().filter(|_| !(ctx.spec.force_build && plan.dir.join("Dockerfile").is_file()));
    let tag = match &prebuilt {
        Some(image) => image.clone(),
        None => {
            let (hash_ctx, dir) = (ctx.clone(), plan.dir.clone());
            match blocking(move || hash_ctx.dir_hash(&dir)).await {
                Ok(hash) => ImageBuilder::tag_for(&plan.image_name, &hash),
                Err(e) => {
                    let message = format!("cannot read {}: {e}", plan.dir.display());
                    return (None, fail(TrialErrorKind::EnvironmentStart, message));
                }
            }
        }
    };
    let cpus = ctx.spec.override_cpus.unwrap_or(env.cpus);
    let memory_mb = ctx.spec.override_memory_mb.unwrap_or_else(|| env.memory_mb().unwrap_or(2048));
    // The compose file first: it may say how `main` is built.
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
    let compose = match read_compose(&plan.dir, infra).await {
        Ok(compose) => compose,
        Err(message) => {
            return (None, fail(TrialErrorKind::EnvironmentStart, format!("task `{}`: {message}", task.name)));
        }
    };
    if compose.is_some() && ctx.backend.local().is_none() {
        return (None, unsupported_on_swarm("environment/docker-compose.yaml"));
    }
    let main_build = compose.as_ref().and_then(|f| f.main.build.clone());
    let built = match (&prebuilt, main_build) {
        (Some(image), build) => {
            if build.is_some() {
                notes.push(format!(
                    "task `{}`: services.main.build in environment/docker-compose.yaml is not used: the task names docker_image `{image}`",
                    task.name
                ));
            }
            ctx.images
                .ensure_prebuilt(image, ctx.spec.build_timeout(task))
                .await
                .map(|_| ())
                .map_err(|e| format!("task `{}`: {e}", task.name))
        }
        (None, Some(compose::ServiceImage::Build { context, dockerfile })) => ctx
            .images
            .ensure_with(&tag, &context, &dockerfile, ctx.spec.force_build, ctx.spec.build_timeout(task))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        (None, _) => ctx
            .images
            .ensure(&tag, &plan.dir, ctx.spec.force_build, ctx.spec.build_timeout(task))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    if let Err(message) = built {
        return (None, fail(TrialErrorKind::EnvironmentBuild, message));
    }
    let image = tag;
    // With a root image that runs the command it is given (no ENTRYPOINT, which may ignore it),
    // the container's own command creates the log directories: one engine round trip (an
    // upload, ≈ 40 ms) less per trial. Otherwise the upload does it as root.
    let facts = ctx.images.facts(&image).await;
    let log_dirs_by_command = facts.is_some_and(|f| f.root && !f.entrypoint);
    // Without an ENTRYPOINT the idle command runs as it is given: it is then PID 1, which
    // nothing in the container can end (an agent's `kill -9 -1` ends its own processes, not the
    // container).
    let pid1 = facts.is_some_and(|f| !f.entrypoint);
    let mut spec = ContainerSpec {
        make_dirs: if log_dirs_by_command {
            plan.log_dirs.iter().map(|d| format!("/{d}")).collect()
        } else {
            Vec::new()
        },
        image,
        name: plan.container_name.clone(),
        labels: [
            (LABEL_JOB_ID.to_string(), ctx.job_id.to_string()),
            (LABEL_TRIAL_ID.to_string(), trial.to_string()),
            // Let `terminus gc` tell containers of a live job from those of a dead one (by the
            // job directory's lock, on this host; the pid for older containers).
            (LABEL_PID.to_string(), std::process::id().to_string()),
            (LABEL_JOB_DIR.to_string(), ctx.job_dir.display().to_string()),
            (LABEL_HOST.to_string(), crate::lock::host_identity()),
        ]
        .into_iter()
        .collect(),
        cpus: Some(cpus),
        memory_mb: Some(memory_mb),
        no_network: !plan.ever_online,
        network: ctx.network.clone(),
        hardening: hardening(ctx, env, notes),
        // The environment's own, then the job's `environment.env` over it.
        env: task_env.iter().chain(ctx.spec.environment_env.iter()).map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: env.workdir.clone(),
        gpus: env.gpus,
        aliases: Vec::new(),
        binds: Vec::new(),
        extra_hosts: Vec::new(),
        pid1,
    };
    // The sidecars first, on a network of the trial's own where `main` joins them.
    let mut project = None;
    let mut main_copies = Vec::new();
    if let Some(file) = &compose {
        let project_spec = ProjectSpec {
            prefix: spec.name.clone(),
            network: format!("{}-net", spec.name),
            labels: spec.labels.clone(),
            images: &ctx.images,
            task_name: plan.image_name.clone(),
            timeout: ctx.spec.build_timeout(task),
            hardening: spec.hardening.clone(),
            cpus: spec.cpus,
            memory_mb: spec.memory_mb,
        };
        // The local engine's (compose is refused on a swarm above).
        let engine = ctx.engine();
        let (started, result) = engine.start_project(file, &project_spec).await;
        if let Err(e) = result {
            started.remove(engine).await;
            return (None, fail(TrialErrorKind::EnvironmentStart, format!("task `{}`: sidecars: {e}", task.name)));
        }
        spec.network = Some(started.network.clone());
        spec.aliases = vec![compose::MAIN.to_string()];
        spec.binds = compose::Project::binds(&spec.name, &file.main.mounts);
        main_copies = compose::Project::copies(&file.main.mounts);
        spec.env.extend(file.main.environment.iter().cloned());
        if let Some(dir) = &file.main.working_dir {
            spec.workdir = Some(dir.clone());
        }
        // The file's own limits for `main` win, as its file comes last in Harbor's stack; a
        // job's overrides win over both.
        if ctx.spec.override_cpus.is_none()
            && let Some(cpus) = file.main.limits.cpus
        {
            spec.cpus = Some(cpus);
        }
        if ctx.spec.override_memory_mb.is_none()
            && let Some(memory) = file.main.limits.memory_mb
        {
            spec.memory_mb = Some(memory);
        }
        project = Some(started);
    }
    // An allowlisted phase reaches out only through the trial's proxy, which sits on `main`'s
    // own network; `main` knows its address from the start.
    let mut egress = None;
    if plan.egress {
        let egress_spec = EgressSpec {
            prefix: spec.name.clone(),
            labels: spec.labels.clone(),
            upstream: spec.network.clone(),
            fallback_image: spec.image.clone(),
        };
        match ctx.engine().start_egress(&egress_spec).await {
            Ok(started) => {
                spec.extra_hosts.push(started.host_entry());
                egress = Some(started);
            }
            Err(e) => {
                if let Some(project) = project {
                    project.remove(ctx.engine()).await;
                }
                return (None, fail(TrialErrorKind::EnvironmentStart, format!("task `{}`: {e}", task.name)));
            }
        }
    }
    // Only the environment's own container carries its role (its sidecars and proxy copied the
    // labels above): the viewer finds a trial's terminal by it.
    spec.labels.insert(LABEL_ROLE.to_string(), plan.role.label().to_string());
    let started = match ctx.backend.start_container(&spec, queued).await {
        Ok(container) => {
            let container = match egress {
                Some(egress) => container.with_egress(egress),
                None => container,
            };
            Ok(match project {
                Some(project) => container.with_project(project),
                None => container,
            })
        }
        Err(e) => {
            if let Some(egress) = egress {
                egress.remove(ctx.engine()).await;
            }
            if let Some(project) = project {
                project.remove(ctx.engine()).await;
            }
            Err(e)
        }
    };
    let container = match started {
        Ok(container) => container,
        Err(e) => return (None, fail(TrialErrorKind::EnvironmentStart, e.to_string())),
    };
    tracing::debug!(trial = %trial, container = %container.name, "container started");
    let upload = async {
        if plan.ever_online && plan.baseline.mode != NetworkMode::Public {
            container.set_network(&access(&plan.baseline)).await?;
        }
        if !log_dirs_by_command {
            container.upload_tar("/", archive::tar_dirs_and_files(plan.log_dirs, &[])?).await?;
        }
        if let Some(solution) = plan.solution.clone() {
            let tar = blocking(move || archive::tar_dir(&solution, "solution")).await?;
            container.upload_tar("/", tar).await?;
        }
        // `main`'s writable binds: a copy each, so the task's own directory is never written.
        for (source, target) in &main_copies {
            container.copy_in(source, target).await?;
        }
        Ok::<_, terminus_sandbox::SandboxError>(())
    };
    let error = if let Err(e) = upload.await {
        fail(TrialErrorKind::EnvironmentStart, e.to_string())
    } else if let Some(check) = &env.healthcheck
        && let Err(message) = healthcheck(&container, check, plan.key).await
    {
        fail(TrialErrorKind::Healthcheck, format!("task `{}`: {message}", task.name))
    } else {
        None
    };
    (Some(container), error)
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
async fn healthcheck(container: &Container, check: &Healthcheck, key: &str) -> Result<(), String> {
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

/// The network of each phase of the task, or of its `step` ([`Task::step_network_plan`]).
pub fn phase_plan(task: &Task, step: Option<&StepSection>) -> NetworkPlan {
    step.map_or_else(|| task.network_plan(), |s| task.step_network_plan(s))
}

/// What the container may reach under `policy`.
fn access(policy: &NetworkPolicy) -> NetworkAccess {
    match policy.mode {
        NetworkMode::NoNetwork => NetworkAccess::Offline,
        NetworkMode::Public => NetworkAccess::Full,
        NetworkMode::Allowlist => NetworkAccess::Allowlist(policy.allowed_hosts.clone()),
    }
}

/// The environment a phase's processes get for its network: for an allowlist, the variables
/// that send HTTP clients through the trial's egress proxy (`KEY=VALUE`).
pub fn phase_env(policy: &NetworkPolicy) -> Vec<String> {
    if policy.mode == NetworkMode::Allowlist { egress::proxy_env() } else { Vec::new() }
}

/// Gives the container the network its next phase may have (`network_mode` and
/// `allowed_hosts` per phase).
pub async fn enter_phase(container: &Container, policy: &NetworkPolicy) -> Result<(), TrialError> {
    container
        .set_network(&access(policy))
        .await
        .map_err(|e| TrialError::new(TrialErrorKind::Runtime, format!("cannot set the phase's network: {e}")))
}

/// How the job confines this task's container; what cannot apply is added to `notes`.
fn hardening(ctx: &JobContext, env: &EnvironmentSection, notes: &mut Vec<String>) -> terminus_sandbox::Hardening {
    let policy = &ctx.spec.containers;
    let requested = policy.storage_mb.or(env.storage_mb());
    let (storage_mb, note) = storage_limit(requested, ctx.storage_limits);
    notes.extend(note);
    terminus_sandbox::Hardening {
        pids_limit: policy.pids_limit,
        no_new_privileges: policy.no_new_privileges,
        cap_drop: policy.cap_drop.clone(),
        cap_add: policy.cap_add.clone(),
        runtime: policy.runtime.clone(),
        security_opt: policy.security_opt.clone(),
        keep_logs: policy.keep_container_logs,
        storage_mb,
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

/// How much of a container's files may reach the host, from the job's policy.
#[derive(Clone, Copy, Debug)]
pub struct CopyLimits {
    pub max_bytes: u64,
    pub max_files: usize,
}

impl CopyLimits {
    pub fn of(ctx: &JobContext) -> CopyLimits {
        let policy = &ctx.spec.containers;
        CopyLimits { max_bytes: policy.max_log_mb * 1024 * 1024, max_files: policy.max_log_files as usize }
    }
}

/// How long a download may wait for its next chunk before the engine is taken for hung.
const DOWNLOAD_STALL: Duration = Duration::from_secs(120);

/// Copies `path` out of the container through a temporary file in `scratch`, then unpacks it
/// with `unpack` off the async workers, within `limits`: memory stays small whatever the agent
/// left, and what did not fit is returned as a note for the trial's result.
async fn fetch<F>(
    container: &Container,
    path: &str,
    scratch: &Path,
    limits: CopyLimits,
    unpack: F,
) -> Result<Option<String>, String>
where
    F: FnOnce(std::fs::File, archive::UnpackLimits) -> std::io::Result<archive::Unpacked> + Send + 'static,
{
    std::fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
    let temp = scratch.join(format!(".download-{:08x}.tar", rand::random::<u32>()));
    let downloaded = container.download_to_file(path, &temp, limits.max_bytes, DOWNLOAD_STALL).await;
    let result = match downloaded {
        Ok(downloaded) => {
            let file = temp.clone();
            let unpack_limits = archive::UnpackLimits { max_files: limits.max_files, max_bytes: limits.max_bytes };
            blocking(move || std::fs::File::open(&file).and_then(|f| unpack(f, unpack_limits)))
                .await
                .map_err(|e| e.to_string())
                .map(|unpacked| {
                    let cut = unpacked.cut.or_else(|| downloaded.truncated.then(|| "its size limit".to_string()));
                    cut.map(|why| {
                        format!(
                            "{path} in the container holds {why}: only {} files ({} MiB) were copied (limits: environment.max_log_mb, max_log_files)",
                            unpacked.files,
                            unpacked.bytes / (1024 * 1024)
                        )
                    })
                })
        }
        Err(e) => Err(e.to_string()),
    };
    let _ = std::fs::remove_file(&temp);
    result
}

/// Puts the task's `tests/` at `/tests` in the container; for a step, the step's
/// `steps/<name>/tests/` over them (its `test.sh` wins over the task's, as in Harbor).
pub async fn upload_tests(task: &Task, step: Option<&StepSection>, container: &Container) -> Result<(), TrialError> {
    let mut dirs = vec![task.tests_dir()];
    dirs.extend(step.map(|step| task.step_dir(step).join("tests")));
    dirs.retain(|dir| step.is_none() || dir.is_dir());
    upload_test_dirs(&dirs, container).await
}

/// Puts the contents of `dirs` at `/tests` in the container, in order (a later file wins: a
/// step's tests over the task's).
pub async fn upload_test_dirs(dirs: &[PathBuf], container: &Container) -> Result<(), TrialError> {
    let error = |e: &dyn std::fmt::Display| TrialError::new(TrialErrorKind::AddTestsDir, e.to_string());
    for dir in dirs {
        let dir = dir.clone();
        let tests = blocking(move || archive::tar_dir(&dir, "tests")).await.map_err(|e| error(&e))?;
        container.upload_tar("/", tests).await.map_err(|e| error(&e))?;
    }
    Ok(())
}

/// Runs `tests/test.sh` (uploaded by [`upload_tests`]) and reads the reward.
/// `notes` gets what was cut from the copied logs.
pub async fn verify_task(
    grading: &Grading<'_>,
    container: &Container,
    trial_dir: &TrialDir,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    let Grading { task, step, timeout, job_env, host } = *grading;
    // The task's `[verifier].env`, a step's own over it (Harbor merges, then resolves).
    let mut raw = task.config.verifier.env.clone();
    raw.extend(step.map(|s| s.verifier.env.clone()).unwrap_or_default());
    // An allowlisted verifier's HTTP clients go through the proxy; the task and the job may
    // still say otherwise.
    let mut env = phase_env(&phase_plan(task, step).verifier);
    env.extend(verifier_env(task, &raw, job_env, host)?);
    let run = TestRun { user: verifier_user(task, step), env, timeout, agent_logs: true };
    run_tests(container, &run, trial_dir, limits, notes).await
}

/// How the tests run.
#[derive(Clone, Debug)]
pub struct TestRun {
    /// The verifier's user (None: the image's default user).
    pub user: Option<String>,
    /// `KEY=VALUE`, resolved ([`verifier_env`]).
    pub env: Vec<String>,
    pub timeout: Duration,
    /// Also copy `/logs/agent` out (the tests run where the agent ran).
    pub agent_logs: bool,
}

/// The tests' environment: `verifier_env` (the task's `[verifier].env`, or a step's over it;
/// its `${VAR}`s from the host), then the job's `verifier.env`.
pub fn verifier_env(
    task: &Task,
    verifier_env: &BTreeMap<String, String>,
    job_env: &BTreeMap<String, String>,
    host: &terminus_config::host_env::HostEnv,
) -> Result<Vec<String>, TrialError> {
    let task_env = terminus_config::task::resolve_host_env("verifier.env", verifier_env, host)
        .map_err(|e| TrialError::new(TrialErrorKind::InvalidValue, format!("task `{}`: {e}", task.name)))?;
    Ok(task_env.iter().chain(job_env.iter()).map(|(k, v)| format!("{k}={v}")).collect())
}

/// Runs `/tests/test.sh` in `container` as `run` says, copies `/logs/verifier` out (and
/// `/logs/agent`, with `agent_logs`) and reads the reward.
pub async fn run_tests(
    container: &Container,
    run: &TestRun,
    trial_dir: &TrialDir,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    let (user, timeout) = (run.user.clone(), run.timeout);
    let run_tests = format!("({}) > {} 2>&1", paths::TEST_SCRIPT, paths::TEST_STDOUT);
    let script = executable_then(container, paths::TEST_SCRIPT, user.as_deref(), &run_tests).await;
    let options = ExecOptions { user, env: run.env.clone(), workdir: None, timeout: Some(timeout) };
    let ran = container.exec(&script, &options).await;
    let timed_out = matches!(ran, Err(terminus_sandbox::SandboxError::Timeout { .. }));
    if let Err(e) = &ran
        && !timed_out
    {
        return Err(TrialError::new(TrialErrorKind::Runtime, format!("running the tests failed: {e}")));
    }
    // The verifier's files first and on their own, so that however much the agent left in
    // /logs/agent (it may be cut at the copy limits) the verdict always arrives; then the agent's
    // (the terminal is closed by now), so teardown need not fetch them again.
    let verifier_dir = trial_dir.verifier_dir();
    let download = || {
        let verifier = verifier_dir.clone();
        fetch(container, paths::VERIFIER_LOGS, trial_dir.path(), limits, move |file, limits| {
            archive::unpack_stripped(file, &verifier, false, limits)
        })
    };
    // The copy is idempotent, and a busy engine may time one out (seen at a load of 15 on two
    // cores): once more before the verdict is lost.
    let note = match download().await {
        Ok(note) => note,
        Err(first) => {
            tracing::warn!(container = %container.name, error = %first, "copying /logs/verifier failed; trying once more");
            tokio::time::sleep(Duration::from_secs(1)).await;
            download().await.map_err(|e| TrialError::new(TrialErrorKind::DownloadVerifierDir, e))?
        }
    };
    notes.extend(note);
    if run.agent_logs {
        fetch_agent_logs(container, trial_dir, limits, notes).await;
    }
    if timed_out {
        return Err(TrialError::new(
            TrialErrorKind::VerifierTimeout,
            format!("Verifier execution timed out after {} seconds", timeout.as_secs_f64()),
        ));
    }
    read_rewards(&verifier_dir)
}

/// What is graded: the task, or one of its steps, with the time limit and the job's
/// `verifier.env`.
#[derive(Clone, Copy)]
pub struct Grading<'a> {
    pub task: &'a Task,
    pub step: Option<&'a StepSection>,
    pub timeout: Duration,
    pub job_env: &'a BTreeMap<String, String>,
    /// The host variables the job passes to tasks.
    pub host: &'a terminus_config::host_env::HostEnv,
}

/// The verifier's user: a step's own, else the task's `[verifier].user`.
pub fn verifier_user(task: &Task, step: Option<&StepSection>) -> Option<String> {
    step.and_then(|s| s.verifier.user.as_ref()).or(task.config.verifier.user.as_ref()).map(ToString::to_string)
}

/// Copies `/logs/agent` into the trial's `agent/` directory (files the host wrote win); what
/// is cut goes to `notes`, a failure is logged.
async fn fetch_agent_logs(container: &Container, trial_dir: &TrialDir, limits: CopyLimits, notes: &mut Vec<String>) {
    let agent = trial_dir.agent_dir();
    match fetch(container, paths::AGENT_LOGS, trial_dir.path(), limits, move |file, limits| {
        archive::unpack_stripped(file, &agent, true, limits)
    })
    .await
    {
        Ok(note) => notes.extend(note),
        Err(e) => tracing::warn!(error = %e, "could not copy the agent's logs"),
    }
}

/// The largest reward file read (a flat object of numbers is far smaller).
pub const MAX_REWARD_FILE_BYTES: u64 = 1 << 20;
/// The largest recording whose episode markers are merged in (it is read whole to do it).
pub const MAX_MERGED_CAST_BYTES: u64 = 256 << 20;

/// `reward.txt` (one number) wins over `reward.json` (a flat object of numbers), as Harbor
/// documents it. A reward that is not a finite number (`nan`, `inf`) cannot be a verdict.
pub fn read_rewards(verifier_dir: &Path) -> Result<BTreeMap<String, f64>, TrialError> {
    let parse_error = |message: String| TrialError::new(TrialErrorKind::VerifierOutputParse, message);
    let empty = |path: &Path| TrialError::new(TrialErrorKind::RewardFileEmpty, format!("{} is empty", path.display()));
    let txt = verifier_dir.join(names::REWARD_TXT);
    let json_path = verifier_dir.join(names::REWARD_JSON);
    // Written by the tests, which the agent may have changed: read only when small.
    let read = |path: &Path| {
        crate::files::read_capped(path, MAX_REWARD_FILE_BYTES).map_err(|e| match e {
            Ok(size) => parse_error(format!(
                "{} is {size} bytes, more than a reward file may hold ({MAX_REWARD_FILE_BYTES}): not read",
                path.display()
            )),
            Err(e) => parse_error(e.to_string()),
        })
    };
    if txt.is_file() {
        let text = read(&txt)?;
        if text.trim().is_empty() {
            return Err(empty(&txt));
        }
        let value: f64 =
            text.trim().parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                parse_error(format!("cannot read a finite number from reward.txt: {:?}", text.trim()))
            })?;
        return Ok(BTreeMap::from([("reward".to_string(), value)]));
    }
    if json_path.is_file() {
        let text = read(&json_path)?;
        if text.trim().is_empty() {
            return Err(empty(&json_path));
        }
        let rewards: BTreeMap<String, f64> = serde_json::from_str(&text)
            .map_err(|e| parse_error(format!("reward.json must be an object of numbers: {e}")))?;
        if let Some((key, value)) = rewards.iter().find(|(_, v)| !v.is_finite()) {
            return Err(parse_error(format!("reward.json: {key:?} is not a finite number ({value})")));
        }
        return Ok(rewards);
    }
    Err(TrialError::new(
        TrialErrorKind::RewardFileNotFound,
        format!("no reward file found at {} or {}", txt.display(), json_path.display()),
    ))
}

/// Waits (at most `limit`) until the terminal is idle — a shell in the foreground — and its
/// screen the same on two looks in a row (a command typed just before is then done, even a
/// builtin that never leaves the shell).
pub async fn settle_terminal(tmux: &TmuxHandle, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    let mut last: Option<String> = None;
    while std::time::Instant::now() < deadline {
        match tmux.idle_probe().await {
            Ok((true, screen)) if last.as_deref() == Some(screen.as_str()) => return,
            Ok((idle, screen)) => last = idle.then_some(screen),
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Ends the terminal: exits the asciinema recorder (so the cast is complete) and stops the
/// TmuxSession actor.
pub async fn close_terminal(tmux: Option<TmuxHandle>, recording: bool) {
    let Some(tmux) = tmux else { return };
    if recording {
        let _ = tmux.send_keys(vec!["C-d".to_string()]).await;
        // asciinema writes its last events when its shell exits: wait until it has (the
        // reference sleeps half a second).
        let deadline = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < deadline {
            match tmux.foreground().await {
                Ok(program) if program != "asciinema" => break,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(_) => break,
            }
        }
    }
    tmux.stop();
}

/// Downloads `/logs/agent` into the trial's `agent/` directory unless verification already did
/// (files the host wrote win), merges the episode markers into the recording, and removes the
/// container. Returns what was cut from the logs.
pub async fn collect_and_remove(
    container: Container,
    agent_dir: &Path,
    recording_dir: &Path,
    markers: &[(f64, String)],
    download: bool,
    limits: CopyLimits,
) -> Vec<String> {
    let mut notes = Vec::new();
    if download {
        let dir = agent_dir.to_path_buf();
        let scratch = agent_dir.parent().unwrap_or(agent_dir).to_path_buf();
        match fetch(&container, paths::AGENT_LOGS, &scratch, limits, move |file, limits| {
            archive::unpack_stripped(file, &dir, true, limits)
        })
        .await
        {
            Ok(note) => notes.extend(note),
            Err(e) => tracing::debug!(error = %e, "no agent logs to download"),
        }
    }
    // A multi-step trial's terminal outlives its steps: its recording and pane log belong to the
    // trial, not to the last step's agent.
    if recording_dir != agent_dir {
        for name in [names::RECORDING_CAST, names::PANE_LOG] {
            if agent_dir.join(name).is_file() {
                let _ = std::fs::create_dir_all(recording_dir);
                let _ = std::fs::rename(agent_dir.join(name), recording_dir.join(name));
            }
        }
    }
    let cast = recording_dir.join(names::RECORDING_CAST);
    if !markers.is_empty() {
        let markers = markers.to_vec();
        let note = blocking(move || {
            let text = match crate::files::read_capped(&cast, MAX_MERGED_CAST_BYTES) {
                Ok(text) => text,
                Err(Ok(size)) => {
                    return Some(format!(
                        "recording.cast is {} MiB, over {} MiB: its episode markers were not merged in",
                        size >> 20,
                        MAX_MERGED_CAST_BYTES >> 20
                    ));
                }
                Err(Err(_)) => return None,
            };
            let merged = terminus_agent::recording::merge_markers(&text, &markers);
            if let Err(e) = crate::files::write_atomic(&cast, merged.as_bytes()) {
                tracing::warn!(error = %e, "could not merge the markers into the recording");
            }
            None
        })
        .await;
        notes.extend(note);
    }
    remove(&container).await;
    notes
}

/// Removes a container, leaving it to the job's final sweep if that fails.
pub async fn remove(container: &Container) {
    if let Err(e) = container.remove().await {
        tracing::warn!(container = %container.name, error = %e, "could not remove the container; the job's final sweep will retry");
    }
}

/// Shell that empties `/tests` and `/logs/verifier` for the tests, the latter owned by `owner`.
/// When the task's own sidecars write in `/logs/verifier` too (a compose file sharing it, as
/// Harbor's log mounts let them), what they wrote is the tests' input: only a verdict planted
/// there (`reward.txt`, `reward.json`) is removed.
pub fn reset_for_tests(container: &Container, owner: &str) -> String {
    let (tests, verifier) = (paths::TESTS, paths::VERIFIER_LOGS);
    let clear = if container.shares_with_sidecars(verifier) {
        format!("rm -rf {tests}; rm -f {verifier}/{} {verifier}/{}", names::REWARD_TXT, names::REWARD_JSON)
    } else {
        format!("rm -rf {tests} {verifier}")
    };
    format!("{clear}; mkdir -p {tests} {verifier}; chown {owner} {verifier} 2>/dev/null; chmod 755 {verifier}")
}

/// The processes alive when a trial's tests started, by command name (init, the container's
/// idle command and our own scripts left out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessCensus {
    pub commands: BTreeMap<String, u32>,
}

impl ProcessCensus {
    pub fn count(&self) -> u32 {
        self.commands.values().sum()
    }

    /// As the result records it (`agent_result.metadata.processes_at_verification`).
    pub fn to_json(&self, policy: AgentProcesses) -> serde_json::Value {
        serde_json::json!({"policy": policy.name(), "count": self.count(), "commands": self.commands})
    }
}

/// Bash, builtins only: `$keep` is the container's own idle command. Of init's children it is
/// the first to have started — before anything the agent could run (a forged name or a recycled
/// PID does not pass for it, and if it were killed the container would stop, so it is always
/// there).
const FIND_IDLE: &str = r#"me=$$
keep=""
first=""
# PID 1 may be the idle command itself (its last argument says so, and no process can change
# that): then nothing else is kept, and the oldest child of PID 1 may be anyone's orphan.
init_last=""
mapfile -d '' -t init_args < /proc/1/cmdline 2>/dev/null
for arg in "${init_args[@]}"; do init_last=$arg; done
if [ "$init_last" != terminus-idle ]; then
for dir in /proc/[0-9]*; do
  read -r stat 2>/dev/null < "$dir/stat" || continue
  set -- ${stat##*) }
  # $2 is the parent, ${20} the start time (clock ticks after boot).
  if [ "$2" = 1 ] && { [ -z "$first" ] || [ "${20}" -lt "$first" ]; }; then
    first=${20}
    keep=${dir#/proc/}
  fi
done
fi"#;

/// Bash, builtins only: every process but init, the idle command and this script is frozen,
/// then killed, until none is left (whatever the agent started, however it detached: daemons,
/// `setsid` loops, stopped processes, a fork bomb — a fork bomb cannot outrun a killer whose
/// victims can no longer fork; there may be no process slot left for anything but builtins).
const KILL_ALL: &str = r#"kill -STOP -1 2>/dev/null
pass=0
while [ "$pass" -lt 20 ]; do
  left=0
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    case "$pid" in 1|"$me"|"$keep") continue ;; esac
    read -r stat 2>/dev/null < "$dir/stat" || continue
    set -- ${stat##*) }
    [ "$1" = Z ] && continue
    [ "$2" = "$me" ] && continue
    kill -KILL "$pid" 2>/dev/null && left=1
  done
  [ "$left" = 0 ] && break
  pass=$((pass + 1))
done
kill -CONT -1 2>/dev/null"#;

/// Bash, builtins only: prints `process:<command name>` for each live process but init, the
/// idle command and this script.
pub(crate) const CENSUS: &str = r#"for dir in /proc/[0-9]*; do
  pid=${dir#/proc/}
  case "$pid" in 1|"$me"|"$keep") continue ;; esac
  read -r stat 2>/dev/null < "$dir/stat" || continue
  rest=${stat##*) }
  set -- $rest
  [ "$1" = Z ] && continue
  [ "$2" = "$me" ] && continue
  comm=${stat#*(}
  printf 'process:%s\n' "${comm%)*}"
done"#;

/// The processes a census script printed.
pub(crate) fn read_census(output: &str) -> ProcessCensus {
    let mut commands = BTreeMap::new();
    for name in output.lines().filter_map(|l| l.strip_prefix("process:")) {
        *commands.entry(name.to_string()).or_insert(0) += 1;
    }
    ProcessCensus { commands }
}

/// Makes the container ready to grade in, as root, before the tests arrive, and counts what
/// runs when they start:
/// - with [`AgentProcesses::Kill`], every process is killed but init and the container's own
///   idle command; with `Keep`, what the agent left runs on, as in Harbor;
/// - `/tests` and `/logs/verifier` are removed and made again, empty, owned by the verifier's
///   user, so nothing the agent planted there (a `reward.txt`, a `conftest.py`) is seen by the
///   tests or read as their verdict.
pub async fn prepare_verification(
    container: &Container,
    verifier_user: Option<&str>,
    processes: AgentProcesses,
) -> Result<ProcessCensus, TrialError> {
    let owner = verifier_user.map(crate::files::shell_word).unwrap_or_else(|| "root".to_string());
    let kill = match processes {
        AgentProcesses::Kill => KILL_ALL,
        AgentProcesses::Keep => "",
    };
    let script = format!("{FIND_IDLE}\n{kill}\n{reset}\n{CENSUS}\ntrue", reset = reset_for_tests(container, &owner));
    let options =
        ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
    match container.exec(&script, &options).await {
        Ok(out) => Ok(read_census(&out.output)),
        Err(e) => Err(TrialError::new(TrialErrorKind::AddTestsDir, format!("could not prepare the verification: {e}"))),
    }
}

/// The script that runs `then` once `script` is executable. The `chmod +x` runs as root, as
/// Harbor runs it, so a non-root user can run a script the upload left without the bit (a
/// task's `solve.sh` checked in as 0644): for root it is part of the same script, else an
/// exec of its own first.
async fn executable_then(container: &Container, script: &str, user: Option<&str>, then: &str) -> String {
    if user.is_none_or(|u| u == "root" || u == "0") {
        return format!("chmod +x {script}; {then}");
    }
    // As root whatever the image's `USER` (an exec without a user runs as that).
    let root =
        ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
    if let Err(e) = container.exec(&format!("chmod +x {script}"), &root).await {
        tracing::warn!(script, error = %e, "could not make the script executable");
    }
    then.to_string()
}

/// Runs the task's reference solution (the oracle agent) as `user`, with its output in
/// `/logs/agent/oracle.txt`; a non-zero exit is noted in `agent/exit-code.txt`, not an error.
pub async fn run_oracle(
    container: &Container,
    user: Option<String>,
    solution_env: Vec<String>,
    timeout: Option<Duration>,
    agent_dir: &Path,
) -> Option<TrialError> {
    let run = format!("({}) > {} 2>&1", paths::SOLUTION_SCRIPT, paths::ORACLE_OUTPUT);
    let script = executable_then(container, paths::SOLUTION_SCRIPT, user.as_deref(), &run).await;
    // The task's `[solution].env` has the last word, as in Harbor.
    let env = std::iter::once("DEBIAN_FRONTEND=noninteractive".to_string()).chain(solution_env).collect();
    let options = ExecOptions { user, env, workdir: None, timeout };
    match container.exec(&script, &options).await {
        Ok(out) => {
            if out.exit_code != Some(0) {
                let code = out.exit_code.unwrap_or(-1).to_string();
                crate::files::write_text_logged(&agent_dir.join(names::EXIT_CODE_TXT), &code);
            }
            None
        }
        // The exec's own limit is the agent's: whichever of it and the trial's deadline fires
        // first, the trial records the same timeout.
        Err(terminus_sandbox::SandboxError::Timeout { after, .. }) => Some(TrialError::new(
            TrialErrorKind::AgentTimeout,
            format!("Agent execution timed out after {} seconds", after.as_secs_f64()),
        )),
        Err(e) => Some(TrialError::new(TrialErrorKind::Runtime, e.to_string())),
    }
}

/// Whether the trial's container still runs, is gone (killed, removed, lost by the engine), or
/// cannot be told because the engine does not answer.
///
/// A kill closes the exec streams a moment before the engine marks the container exited, so an
/// error that may come from a dead container (`settle`) is given up to 1.5 s to show up as
/// one; any other error is checked once.
pub async fn check_container(container: Option<&Container>, settle: bool) -> ContainerCheck {
    let Some(container) = container else { return ContainerCheck::Alive };
    // The engine first: an error that came from a stopped engine must be judged while it is
    // still stopped (an inspect would wait for it to wake up, then find the container running),
    // or by what the heartbeat saw: an engine call gives up after two minutes, so the engine
    // may be back by the time its error arrives here.
    let engine = container.engine();
    // On a swarm, `engine` is the container's node: a node that does not answer while its
    // manager does is a lost node, and the trial runs again elsewhere.
    // A node's daemon that restarted meanwhile stopped its containers on the way: a node away
    // recently (its pings, the watcher's included, say so) counts as lost too.
    if let Some(manager) = container.swarm_manager()
        && (!engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW))
    {
        return if manager.ping().await { ContainerCheck::Gone } else { ContainerCheck::EngineDown };
    }
    if !engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW) {
        return ContainerCheck::EngineDown;
    }
    let checks = if settle { 6 } else { 1 };
    for i in 0..checks {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // A stopped engine accepts the connection and never answers: the inspect gets the
        // ping's deadline, and the ping tells a dead container from an absent engine.
        let running = tokio::time::timeout(INSPECT_TIMEOUT, container.is_running()).await;
        if running != Ok(true) {
            let answers = match container.swarm_manager() {
                Some(manager) => manager.ping().await,
                None => container.engine().ping().await,
            };
            return if answers { ContainerCheck::Gone } else { ContainerCheck::EngineDown };
        }
    }
    ContainerCheck::Alive
}

/// An engine outage this recent may have caused the error being checked (bollard's own request
/// timeout, two minutes, plus slack).
const ENGINE_AWAY_WINDOW: Duration = Duration::from_secs(150);

/// How long a container check waits for the engine to describe the container.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a container check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerCheck {
    /// Running (or the trial never had one): the error is the trial's own.
    Alive,
    /// Gone while the engine answers: the trial lost its environment.
    Gone,
    /// The engine does not answer: nobody can tell, and it is no fault of the trial.
    EngineDown,
}

/// The task's own `artifacts` (task.toml), as Harbor 0.26 places them: under `artifacts/` at the
/// given `destination`, else at the source path without its root (`/app/out.txt` →
/// `app/out.txt`), with their `exclude` patterns and service.
pub fn task_artifacts(task: &Task) -> (Vec<terminus_config::policy::ArtifactSpec>, Vec<String>) {
    artifact_specs("artifacts", &task.config.artifacts)
}

/// `artifacts` of a task or a step (`key` names them in notes), as [`task_artifacts`] places them.
pub fn artifact_specs(
    key: &str,
    artifacts: &[terminus_config::task::ArtifactSpec],
) -> (Vec<terminus_config::policy::ArtifactSpec>, Vec<String>) {
    let mut notes = Vec::new();
    let specs = artifacts
        .iter()
        .filter_map(|artifact| {
            let (source, destination, exclude, service) = match artifact {
                terminus_config::task::ArtifactSpec::Path(source) => (source, None, &[][..], None),
                terminus_config::task::ArtifactSpec::Detailed { source, destination, exclude, service } => {
                    (source, destination.as_deref(), exclude.as_slice(), service.as_deref())
                }
            };
            let relative: Vec<&str> = source.split('/').filter(|p| !p.is_empty() && *p != "." && *p != "..").collect();
            let destination = destination.map(str::to_string).unwrap_or_else(|| relative.join("/"));
            // Loading refuses a destination that leaves `artifacts/`; checked again where it is used.
            let confined = terminus_config::task::confined_relative(&destination);
            let usable = source.starts_with('/') && confined;
            if !source.starts_with('/') {
                notes.push(format!(
                    "task.toml `{key}`: {source:?} is not an absolute path in the container; not collected"
                ));
            } else if !confined {
                notes.push(format!("task.toml `{key}`: destination {destination:?} leaves artifacts/; not collected"));
            }
            usable.then(|| terminus_config::policy::ArtifactSpec {
                source: source.clone(),
                destination,
                exclude: exclude.to_vec(),
                service: service.filter(|s| *s != compose::MAIN).map(str::to_string),
            })
        })
        .collect();
    (specs, notes)
}

/// Copies the artifact paths out of the trial's containers into `artifacts/` and writes
/// `artifacts/manifest.json`, as Harbor 0.26 collects them: the task's `[[verifier.collect]]`
/// hooks of `main` run first, then `main`'s artifacts are taken, then the sidecars' hooks run
/// and their artifacts are taken. Best effort: a failing hook is logged and noted, a missing
/// path recorded in the manifest, never an error. Returns what was cut or failed.
pub async fn collect_artifacts(
    container: &Container,
    specs: &[terminus_config::policy::ArtifactSpec],
    hooks: &[terminus_config::task::CollectSpec],
    artifacts_dir: &Path,
    limits: CopyLimits,
) -> Vec<String> {
    let mut notes = Vec::new();
    if specs.is_empty() && hooks.is_empty() {
        return notes;
    }
    let is_main = |service: Option<&str>| service.is_none_or(|s| s == compose::MAIN);
    let mut manifest = Vec::new();
    for main_pass in [true, false] {
        for hook in hooks.iter().filter(|h| is_main(h.service.as_deref()) == main_pass) {
            notes.extend(run_collect_hook(container, hook).await);
        }
        for spec in specs.iter().filter(|s| is_main(s.service.as_deref()) == main_pass) {
            manifest.push(collect_artifact(container, spec, artifacts_dir, limits, &mut notes).await);
        }
    }
    if specs.is_empty() {
        return notes;
    }
    if let Err(e) = crate::files::write_json(&artifacts_dir.join(names::ARTIFACTS_MANIFEST), &manifest) {
        tracing::warn!(error = %e, "could not write the artifact manifest");
    }
    notes
}

/// One `[[verifier.collect]]` hook, in its service (`main` by default) as its user, within its
/// limit (60 s by default); a note when it fails.
async fn run_collect_hook(container: &Container, hook: &terminus_config::task::CollectSpec) -> Option<String> {
    let service = hook.service.as_deref().unwrap_or(compose::MAIN);
    let Some(target) = container.service(service) else {
        return Some(format!("verifier.collect: no compose service `{service}` to run {:?} in", hook.command));
    };
    let timeout = Duration::from_secs_f64(hook.timeout_sec.unwrap_or(60.0).max(0.0));
    let options = ExecOptions {
        user: hook.user.as_ref().map(ToString::to_string),
        timeout: Some(timeout),
        ..ExecOptions::default()
    };
    match target.exec(&hook.command, &options).await {
        Ok(out) if out.exit_code == Some(0) => None,
        Ok(out) => Some(format!(
            "verifier.collect: {:?} in `{service}` exited with {}",
            hook.command,
            out.exit_code.map_or("no code".to_string(), |c| c.to_string())
        )),
        Err(e) => Some(format!("verifier.collect: {:?} in `{service}` failed: {e}", hook.command)),
    }
}

/// One artifact into `artifacts/<destination>`, from its service's container; its manifest entry.
async fn collect_artifact(
    container: &Container,
    spec: &terminus_config::policy::ArtifactSpec,
    artifacts_dir: &Path,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> serde_json::Value {
    let mut entry = serde_json::json!({"source": spec.source, "destination": spec.destination});
    if let Some(service) = &spec.service {
        entry["service"] = serde_json::json!(service);
    }
    let status = match container.service(spec.service.as_deref().unwrap_or(compose::MAIN)) {
        None => {
            notes.push(format!(
                "artifacts: {:?} names the compose service `{}`, which the task does not run",
                spec.source,
                spec.service.as_deref().unwrap_or_default()
            ));
            "failed"
        }
        Some(source) => {
            let dest = artifacts_dir.join(&spec.destination);
            let exclude = spec.exclude.clone();
            let fetched = fetch(source, &spec.source, artifacts_dir, limits, move |file, limits| {
                archive::unpack_excluding(file, &dest, &exclude, limits)
            })
            .await;
            match fetched {
                Ok(None) => "ok",
                Ok(Some(note)) => {
                    notes.push(note);
                    "cut"
                }
                Err(e) => {
                    tracing::debug!(source = %spec.source, error = %e, "could not copy an artifact");
                    "failed"
                }
            }
        }
    };
    entry["status"] = serde_json::json!(status);
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kill_scripts_know_an_idle_pid_1_by_its_mark() {
        assert!(FIND_IDLE.contains(&format!("!= {}", terminus_sandbox::IDLE_MARK)));
    }

    #[test]
    fn a_storage_limit_applies_where_it_can_and_is_named_where_it_cannot() {
        assert_eq!(storage_limit(Some(512), true), (Some(512), None));
        let (limit, note) = storage_limit(Some(512), false);
        assert_eq!(limit, None);
        assert!(note.is_some_and(|n| n.contains("storage_mb = 512 is not enforced")));
        assert_eq!(storage_limit(None, false), (None, None));
    }

    fn verifier_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn rewards_must_be_finite_numbers_and_reward_txt_wins() {
        let kind = |files: &[(&str, &str)]| read_rewards(verifier_dir(files).path()).map_err(|e| e.kind);
        for bad in ["nan", "inf", "-inf", "NaN", "1e999"] {
            assert_eq!(kind(&[("reward.txt", bad)]), Err(TrialErrorKind::VerifierOutputParse), "{bad}");
        }
        assert_eq!(kind(&[("reward.json", r#"{"reward": 1e999}"#)]), Err(TrialErrorKind::VerifierOutputParse));
        assert_eq!(kind(&[("reward.txt", " \n")]), Err(TrialErrorKind::RewardFileEmpty));
        assert_eq!(kind(&[]), Err(TrialErrorKind::RewardFileNotFound));
        let both = kind(&[("reward.txt", "0.5\n"), ("reward.json", r#"{"reward": 1.0}"#)]).unwrap();
        assert_eq!(both["reward"], 0.5, "reward.txt wins, as Harbor documents");
        let json = kind(&[("reward.json", r#"{"reward": 1, "style": 0.25}"#)]).unwrap();
        assert_eq!(json.len(), 2);
    }
}
