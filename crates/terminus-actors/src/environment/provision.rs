//! Provisioning a trial's environment: the task's image built or found, the main container
//! started hardened and confined, a compose project's sidecars and the egress proxy beside it,
//! health checks, and the per-step variant of all of it.

use std::path::PathBuf;
use std::sync::Arc;

use terminus_config::Task;
use terminus_config::job::TrialPlan;
use terminus_config::task::{EnvironmentSection, NetworkMode, NetworkPlan, NetworkPolicy};
use terminus_config::trial::ResolvedTrial;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::TrialName;
use terminus_core::layout::container as paths;
use terminus_sandbox::{ContainerRole, Environment, ProvisionOutcome, ProvisionRequest, QueuedNotice, blocking};

use super::network::access;
use crate::context::JobContext;

/// What provisioning got to, and the error that stopped it.
pub struct Provisioned {
    /// The trial as the job, its agent and the loaded task resolve it.
    pub trial: Option<Arc<ResolvedTrial>>,
    /// The task directory's checksum (read here, off the actor).
    pub checksum: Option<String>,
    pub container: Option<Environment>,
    /// Why it stopped short of a ready environment, if it did.
    pub stopped: Option<Stopped>,
    /// What the trial's result should say about its container (a limit that cannot apply).
    pub notes: Vec<String>,
    /// The cluster node its container runs on (a swarm's).
    pub host: Option<String>,
}

/// Why provisioning stopped, by what the trial does about it.
#[derive(Debug)]
pub enum Stopped {
    /// The trial's own error: recorded as its result's.
    Failed(TrialError),
    /// The error came with an engine that does not answer: no fault of the trial, which goes
    /// back to the queue without using an attempt.
    EngineDown(TrialError),
    /// The error came from a swarm node lost under the container: the trial is restarted
    /// elsewhere.
    Lost(TrialError),
}

impl Stopped {
    /// The error, whatever is done about it (a cancelled trial records it).
    pub fn into_error(self) -> TrialError {
        match self {
            Stopped::Failed(error) | Stopped::EngineDown(error) | Stopped::Lost(error) => error,
        }
    }
}

pub(super) fn fail(kind: TrialErrorKind, message: impl Into<String>) -> Option<Stopped> {
    Some(Stopped::Failed(TrialError::new(kind, message)))
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
    if let Some(dir) = out.trial.as_ref().map(|t| t.task.dir.clone()) {
        out.checksum = ctx.site.dir_hash(&dir).await.ok();
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
    let mut out =
        Provisioned { trial: None, checksum: None, container: None, stopped: None, notes: Vec::new(), host: None };
    let path = plan.task.path.clone();
    let task = match blocking(move || Task::load(&path)).await {
        Ok(task) => task,
        Err(e) => {
            out.stopped = fail(TrialErrorKind::TaskLoad, e.to_string());
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
        out.stopped = fail(TrialErrorKind::TaskLoad, message);
        return out;
    }
    out.notes.extend(task.extra_host_notices());
    out.notes.extend(trial.artifact_notes.iter().cloned());
    // A step without a solution of its own uses the task's (Harbor's oracle).
    let has_solution = |dir: std::path::PathBuf| dir.join("solve.sh").is_file();
    let solved = has_solution(task.solution_dir())
        || !task.steps().is_empty() && task.steps().iter().all(|s| has_solution(task.step_dir(s).join("solution")));
    if needs_solution && !solved {
        out.stopped = fail(
            TrialErrorKind::FileNotFound,
            format!("task `{}` has no solution/solve.sh, which the oracle needs", task.name),
        );
        return out;
    }
    // Whatever of task.toml is not acted on is said in the trial's result, by key.
    out.notes.extend(task.notices.iter().map(|notice| format!("task.toml {notice}")));
    if let Some(reason) = task.unrunnable() {
        out.stopped = fail(TrialErrorKind::Unsupported, format!("task `{}`: {reason}", task.name));
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
        container_name: ctx.site.container_name(name.as_str()),
        // A container that needs a network at some phase (of any step) joins it and leaves it
        // at the others (it can only do so if it was started on one).
        ever_online: plans.iter().any(NetworkPlan::ever_online),
        egress: plans.iter().any(NetworkPlan::any_allowlist),
        baseline: network.setup,
        log_dirs: &paths::LOG_DIRS,
        solution: needs_solution.then(|| task.solution_dir()).filter(|dir| dir.is_dir()),
        role: ContainerRole::Agent,
    };
    let outcome = ctx.backend.provision(&ctx.site, &environment.request(name), queued).await;
    out.absorb(outcome);
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
    pub(super) log_dirs: &'static [&'static str],
    /// A solution to put at `/solution` (the oracle's).
    pub(super) solution: Option<PathBuf>,
    /// What its container is for, as its `terminus.role` label says.
    pub(super) role: ContainerRole,
}

impl EnvironmentPlan<'_> {
    /// What the backend is asked for: the plan with the job's and the task's settings
    /// resolved into plain values.
    pub(super) fn request(&self, trial: &TrialName) -> ProvisionRequest {
        let (task, env, inputs) = (&self.trial.task, self.config, &self.trial.container);
        // `${VAR}` values come from this process's environment, as Harbor reads the host's.
        let host = &self.trial.host_env;
        let task_env = terminus_config::task::resolve_host_env(&format!("{}.env", self.key), &env.env, host)
            .map_err(|e| format!("task `{}`: {e}", task.name));
        // The host's values of what the compose file names, as far as the job passes them.
        let host_vars = task
            .host_reads()
            .into_iter()
            .filter_map(|read| host.lookup(&read.var).map(|value| (read.var, value)))
            .collect();
        let confinement = &inputs.policy.confinement;
        ProvisionRequest {
            trial: trial.to_string(),
            container_name: self.container_name.clone(),
            role: self.role,
            task_name: task.name.clone(),
            key: self.key,
            dir: self.dir.clone(),
            image_name: self.image_name.clone(),
            docker_image: env.docker_image.clone(),
            force_build: inputs.force_build,
            build_timeout: self.trial.limits.build,
            env: task_env,
            host_vars,
            job_env: inputs.env.clone(),
            cpus: inputs.cpus.unwrap_or(env.cpus),
            memory_mb: inputs.memory_mb.unwrap_or_else(|| env.memory_mb().unwrap_or(2048)),
            job_sets_cpus: inputs.cpus.is_some(),
            job_sets_memory: inputs.memory_mb.is_some(),
            gpus: env.gpus,
            workdir: env.workdir.clone(),
            confinement: confinement.clone(),
            storage_mb: confinement.storage_mb.or(env.storage_mb()),
            ever_online: self.ever_online,
            egress: self.egress,
            // A container started on a network it may not keep at its first phase leaves it
            // before anything runs.
            initial_network: (self.ever_online && self.baseline.mode != NetworkMode::Public)
                .then(|| access(&self.baseline)),
            log_dirs: self.log_dirs,
            solution: self.solution.clone(),
            healthcheck: env.healthcheck.clone(),
        }
    }
}

impl Provisioned {
    /// Takes in what the backend made: the environment, its notes after the trial's own, and
    /// its error as the trial records it.
    fn absorb(&mut self, outcome: ProvisionOutcome) {
        self.container = outcome.environment;
        self.notes.extend(outcome.notes);
        self.host = outcome.host;
        self.stopped = outcome.error.map(|error| {
            let trial_error = TrialError::from(&error);
            // A lost node wins: the trial runs again elsewhere, whatever the manager answered.
            if error.lost() {
                Stopped::Lost(trial_error)
            } else if error.engine_down() {
                Stopped::EngineDown(trial_error)
            } else {
                Stopped::Failed(trial_error)
            }
        });
    }
}
