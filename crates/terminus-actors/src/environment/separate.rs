//! Verification in an environment of its own: Harbor 0.26's `verifier.environment_mode =
//! "separate"` (or a `[verifier.environment]`).
//!
//! As Harbor does it: the artifacts (the job's, the task's, a step's, and always the agent's
//! `/logs/artifacts`) are copied out of the agent's container into the trial's `artifacts/`,
//! with `/logs/agent`; the agent's container is stopped when it has no further use; the
//! verifier's environment ([`VerifierEnvironment`]: its own image, or a `tests/Dockerfile`, or the
//! agent's image again) is started as a container of its own, labelled as the trial's, with its
//! own settings and network baseline; the artifacts are put back at their source paths in it
//! (nothing else of the agent's: not `/logs/agent`, not its files); the tests are uploaded
//! unless its image brings them; they run as the verifier's user with the verifier's
//! environment, on the verifier phase's network, within the verifier's time limit; then
//! `/logs/verifier` is copied out and the container removed, whatever happened.
//!
//! The work runs in a task a cancel may abort, so what it leaves is in a [`SeparateState`] the
//! trial's teardown looks at: the verifier's container (by name from before it is started) is
//! removed there if the verification did not get to it, and the artifacts are not copied again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use terminus_config::policy::ArtifactSpec;
use terminus_config::task::{NetworkMode, NetworkPolicy, VerifierEnvironment};
use terminus_config::trial::ResolvedTrial;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::TrialName;
use terminus_core::layout::{TrialDir, container as paths};
use terminus_sandbox::{Backend, ContainerRole, Environment, ExecOptions, archive, blocking};

use super::collect::CopyLimits;
use super::provision::EnvironmentPlan;
use super::verify::TestRun;
use crate::context::JobContext;

/// The log directories of a verifier's container: not `/logs/agent`, which it never sees.
const VERIFIER_LOG_DIRS: [&str; 3] = ["logs", "logs/verifier", "logs/artifacts"];

/// How long the agent's container gets to stop before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What a verification in a separate environment shares with the rest of the trial: it runs
/// in a task that a cancel may abort.
#[derive(Debug, Default)]
pub struct SeparateState {
    artifacts_collected: AtomicBool,
    agent_stopped: AtomicBool,
    verifier: Mutex<Option<Leftover>>,
}

/// The verifier's container, as far as it got.
#[derive(Debug)]
enum Leftover {
    /// About to be created under this name.
    Named(String),
    Started(Box<Environment>),
}

impl SeparateState {
    /// The artifacts were copied out of the agent's container: the teardown does not copy
    /// them again (the container may be stopped, and its verdict was given on these).
    pub fn artifacts_collected(&self) -> bool {
        self.artifacts_collected.load(Ordering::SeqCst)
    }

    /// The agent's container was stopped on purpose: a container check must not take it for
    /// lost.
    pub fn agent_stopped(&self) -> bool {
        self.agent_stopped.load(Ordering::SeqCst)
    }

    fn set(&self, leftover: Option<Leftover>) {
        *self.verifier.lock().unwrap_or_else(|p| p.into_inner()) = leftover;
    }

    fn take(&self) -> Option<Leftover> {
        self.verifier.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Removes the verifier's container (and its sidecars) if a verification left it, as an
    /// aborted one does. The job's label sweep is the backstop for what was never named here.
    pub async fn remove_leftovers(&self, backend: &Backend) {
        match self.take() {
            Some(Leftover::Started(container)) => super::collect::remove(&container).await,
            Some(Leftover::Named(name)) => {
                if let Err(e) = backend.remove_container(&name).await {
                    tracing::warn!(container = %name, error = %e, "could not remove the verifier's container; the job's final sweep will retry");
                }
            }
            None => {}
        }
    }
}

/// One verification in a separate environment.
#[derive(Clone, Debug)]
pub struct SeparateVerify {
    pub environment: VerifierEnvironment,
    /// Where its settings are in task.toml (`verifier.environment`, `environment` when it is a
    /// copy of the agent's), for messages.
    pub settings_key: &'static str,
    /// `trial`, or the step's name: the verifier's container is `<agent's>-verifier-<key>`.
    pub key: String,
    /// The paths copied out of the agent's container and put back at the same paths in the
    /// verifier's (the job's, the task's, a step's); `/logs/artifacts` is added.
    pub artifacts: Vec<ArtifactSpec>,
    /// Uploaded to `/tests` in order, unless the verifier's image brings the tests.
    pub tests: Vec<PathBuf>,
    pub run: TestRun,
    /// The verifier environment's baseline network, and the one the tests run with.
    pub baseline: NetworkPolicy,
    pub network: NetworkPolicy,
    /// The agent's container has no further use (a single-step trial): it is stopped once its
    /// artifacts and logs are out, so nothing left running in it competes with the tests.
    pub stop_agent: bool,
}

impl SeparateVerify {
    /// The verification of a single-step task whose verifier runs apart (None when it shares
    /// the agent's container): its tests as the task's `[verifier]` says, the job's and the
    /// task's artifacts, the agent's container stopped first.
    pub fn for_task(trial: &ResolvedTrial, timeout: Duration) -> Option<Result<SeparateVerify, TrialError>> {
        let task = &trial.task;
        let environment = task.verifier_environment()?;
        let network = task.network_plan();
        let env =
            match super::verify::verifier_env(task, &task.config.verifier.env, &trial.verifier.env, &trial.host_env) {
                Ok(env) => env,
                Err(error) => return Some(Err(error)),
            };
        Some(Ok(SeparateVerify {
            environment,
            settings_key: if task.config.verifier.environment.is_some() {
                "verifier.environment"
            } else {
                "environment"
            },
            key: "trial".to_string(),
            artifacts: trial.artifacts.clone(),
            tests: vec![task.tests_dir()],
            run: TestRun {
                user: task.config.verifier.user.as_ref().map(ToString::to_string),
                env,
                timeout,
                agent_logs: false,
                // A container of its own, where the agent never ran.
                sweep: super::warden::Sweep::Keep,
            },
            baseline: network.verifier_env.unwrap_or_else(|| network.verifier.clone()),
            network: network.verifier,
            stop_agent: true,
        }))
    }
}

/// `artifacts` with the agent's conventional publish directory, `/logs/artifacts` (at
/// `artifacts/logs/artifacts/`, where Harbor puts it), unless they name it already.
pub fn with_convention(artifacts: &[ArtifactSpec]) -> Vec<ArtifactSpec> {
    let named = artifacts.iter().any(|a| a.source.trim_end_matches('/') == paths::ARTIFACT_LOGS);
    let convention = (!named).then(|| ArtifactSpec {
        source: paths::ARTIFACT_LOGS.to_string(),
        destination: paths::ARTIFACT_LOGS.trim_start_matches('/').to_string(),
        ..ArtifactSpec::default()
    });
    convention.into_iter().chain(artifacts.iter().cloned()).collect()
}

/// Verifies in an environment of its own (see the module's documentation). `agent` is the
/// agent's container; `notes` gets what was cut from copies. The verifier's container is
/// removed before this returns, and by [`SeparateState::remove_leftovers`] if it is aborted.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is a distinct handle the call needs; bundling them would only rename them"
)]
pub async fn verify_separately(
    ctx: &Arc<JobContext>,
    trial: &ResolvedTrial,
    name: &TrialName,
    trial_dir: &TrialDir,
    agent: &Environment,
    request: &SeparateVerify,
    state: &SeparateState,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    let task = &trial.task;
    ctx.backend.refuse_separate_verifier(&task.name).map_err(|e| TrialError::from(&e))?;
    let limits = CopyLimits::of(&trial.container.policy);
    let artifacts = with_convention(&request.artifacts);
    let hooks = &task.config.verifier.collect;
    notes.extend(super::collect::collect_artifacts(agent, &artifacts, hooks, &trial_dir.artifacts_dir(), limits).await);
    state.artifacts_collected.store(true, Ordering::SeqCst);
    super::collect::fetch_agent_logs(agent, trial_dir, limits, notes).await;
    if request.stop_agent {
        state.agent_stopped.store(true, Ordering::SeqCst);
        if let Err(e) = agent.stop(STOP_GRACE).await {
            tracing::warn!(container = %agent.name, error = %e, "could not stop the agent's container before verifying");
        }
    }
    let key: String =
        request.key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    let container_name = format!("{}-verifier-{key}", agent.name);
    state.set(Some(Leftover::Named(container_name.clone())));
    let environment = &request.environment;
    let built_elsewhere = environment.dir != task.environment_dir();
    let plan = EnvironmentPlan {
        trial,
        config: &environment.config,
        key: request.settings_key,
        dir: environment.dir.clone(),
        // The agent's image again when it is the agent's recipe; else one of its own.
        image_name: if built_elsewhere { format!("{}-verifier", task.name) } else { task.name.clone() },
        container_name,
        baseline: request.baseline.clone(),
        ever_online: request.baseline.mode != NetworkMode::NoNetwork || request.network.mode != NetworkMode::NoNetwork,
        // A separate verifier's allowlist is refused before the trial starts
        // (`Unrunnable::SeparateVerifierAllowlist`): no proxy of its own.
        egress: false,
        log_dirs: &VERIFIER_LOG_DIRS,
        solution: None,
        role: ContainerRole::Verifier,
    };
    // Only on the local engine (refused above on a swarm), which never queues.
    let no_queue: terminus_sandbox::QueuedNotice = Arc::new(|_| {});
    let made = ctx.backend.start_environment(&ctx.site, &plan.request(name), no_queue).await;
    notes.extend(made.notes);
    let (container, error) = (made.environment, made.error.map(|e| TrialError::from(&e)));
    if let Some(container) = &container {
        state.set(Some(Leftover::Started(Box::new(container.clone()))));
    }
    let rewards = match (container, error) {
        (Some(container), None) => grade(&container, request, &artifacts, trial_dir, limits, notes).await,
        (_, Some(error)) => Err(error),
        (None, None) => {
            Err(TrialError::new(TrialErrorKind::EnvironmentStart, "the verifier's environment did not start"))
        }
    };
    state.remove_leftovers(&ctx.backend).await;
    rewards
}

/// In the verifier's running container: the artifacts back in place, the tests, the phase's
/// network, then the tests' run and verdict.
async fn grade(
    container: &Environment,
    request: &SeparateVerify,
    artifacts: &[ArtifactSpec],
    trial_dir: &TrialDir,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, f64>, TrialError> {
    put_artifacts(container, artifacts, &trial_dir.artifacts_dir()).await?;
    if !request.environment.bundled_tests {
        super::verify::upload_test_dirs(&request.tests, container).await?;
    }
    super::network::enter_phase(container, &request.network).await?;
    super::verify::run_tests(container, &request.run, trial_dir, limits, notes).await
}

/// Puts what was copied out of the agent's container back at the same paths in `container`:
/// a directory replaces what the image has there, a file is written over it. What was not
/// copied out is skipped. The copies hold only directories and regular files (the download
/// drops links and devices, and no mode bits but the permissions are kept).
async fn put_artifacts(
    container: &Environment,
    artifacts: &[ArtifactSpec],
    artifacts_dir: &std::path::Path,
) -> Result<(), TrialError> {
    let error = |e: &dyn std::fmt::Display| {
        TrialError::new(
            TrialErrorKind::AddTestsDir,
            format!("could not put the artifacts in the verifier's environment: {e}"),
        )
    };
    let present: Vec<(PathBuf, &ArtifactSpec)> = artifacts
        .iter()
        .map(|a| (artifacts_dir.join(&a.destination), a))
        .filter(|(host, _)| host.symlink_metadata().is_ok())
        .collect();
    let dirs: Vec<String> = present
        .iter()
        .filter(|(host, _)| host.is_dir())
        .map(|(_, a)| crate::files::shell_word(a.source.trim_end_matches('/')))
        .collect();
    if !dirs.is_empty() {
        let dirs = dirs.join(" ");
        let script = format!("rm -rf {dirs} && mkdir -p {dirs} && chmod 777 {dirs}");
        let options =
            ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
        match container.exec(&script, &options).await {
            Ok(out) if out.exit_code == Some(0) => {}
            Ok(out) => return Err(error(&out.output.trim())),
            Err(e) => return Err(error(&e)),
        }
    }
    for (host, artifact) in present {
        let name = artifact.source.trim_matches('/').to_string();
        let tar = blocking(move || archive::tar_path(&host, &name)).await.map_err(|e| error(&e))?;
        container.upload_tar("/", tar).await.map_err(|e| error(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_publish_directory_is_always_carried_over() {
        let task =
            ArtifactSpec { source: "/app/out.txt".into(), destination: "app/out.txt".into(), ..Default::default() };
        let with = with_convention(std::slice::from_ref(&task));
        assert_eq!(
            with[0],
            ArtifactSpec {
                source: "/logs/artifacts".into(),
                destination: "logs/artifacts".into(),
                ..Default::default()
            }
        );
        assert_eq!(with[1], task);
        // Named already (say, with a destination of its own): not twice.
        let own = ArtifactSpec { source: "/logs/artifacts/".into(), destination: "mine".into(), ..Default::default() };
        assert_eq!(with_convention(std::slice::from_ref(&own)), [own]);
    }
}
