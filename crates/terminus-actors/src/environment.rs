//! The container side of a trial, as plain async functions the Trial actor runs in spawned
//! tasks: provisioning (task, image, container, log directories), verification (tests, reward),
//! and teardown (closing the terminal, collecting logs, removing the container).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ractor::ActorRef;
use terminus_config::Task;
use terminus_config::job::TrialPlan;
use terminus_core::ids::TrialName;
use terminus_core::result::ExceptionInfo;
use terminus_sandbox::{
    Container, ContainerSpec, ExecOptions, ImageBuilder, LABEL_JOB_ID, LABEL_PID, LABEL_TRIAL_ID, archive,
};

use crate::context::JobContext;
use crate::supervisor::SupervisorMsg;
use crate::tmux_session::TmuxMsg;

/// The directories every trial's container has, writable by any user.
const LOG_DIRS: [&str; 4] = ["logs", "logs/agent", "logs/verifier", "logs/artifacts"];

/// What the provisioning task hands back: whatever it got to, and the error that stopped it.
pub struct Provisioned {
    pub task: Option<Task>,
    pub container: Option<Container>,
    pub error: Option<ExceptionInfo>,
}

/// Loads the task, makes its image, starts the container and puts the log directories (and the
/// solution, for the oracles) in place.
pub async fn provision(
    ctx: &JobContext,
    plan: &TrialPlan,
    name: &TrialName,
    needs_solution: bool,
    supervisor: &ActorRef<SupervisorMsg>,
) -> Provisioned {
    let mut out = Provisioned { task: None, container: None, error: None };
    let task = match Task::load(&plan.task.path) {
        Ok(task) => task,
        Err(e) => {
            out.error = Some(ExceptionInfo::new("TaskLoadError", e.to_string()));
            return out;
        }
    };
    if needs_solution && !task.solution_dir().join("solve.sh").is_file() {
        out.error = Some(ExceptionInfo::new(
            "FileNotFoundError",
            format!("task `{}` has no solution/solve.sh, which the oracle needs", task.name),
        ));
        out.task = Some(task);
        return out;
    }
    let env = &task.config.environment;
    let image = match (&env.docker_image, ctx.spec.force_build) {
        (Some(image), false) => image.clone(),
        _ => {
            let hash = match terminus_config::task::dir_hash(&task.environment_dir()) {
                Ok(hash) => hash,
                Err(e) => {
                    out.error = Some(ExceptionInfo::new(
                        "EnvironmentStartError",
                        format!("cannot read {}: {e}", task.environment_dir().display()),
                    ));
                    out.task = Some(task);
                    return out;
                }
            };
            let tag = ImageBuilder::tag_for(&task.name, &hash);
            if let Err(e) = ctx
                .images
                .ensure(&tag, &task.environment_dir(), ctx.spec.force_build, ctx.spec.build_timeout(&task))
                .await
            {
                out.error = Some(ExceptionInfo::new("EnvironmentBuildError", e.to_string()));
                out.task = Some(task);
                return out;
            }
            tag
        }
    };
    // With a root image, the container's own command creates the log directories: one engine
    // round trip (an upload, ≈ 40 ms) less per trial. Otherwise the upload does it as root.
    let log_dirs_by_command = ctx.images.runs_as_root(&image).await == Some(true);
    let spec = ContainerSpec {
        make_dirs: if log_dirs_by_command { LOG_DIRS.iter().map(|d| format!("/{d}")).collect() } else { Vec::new() },
        image,
        // A random tail keeps names unique across restarts of the same trial.
        name: format!(
            "terminus-{}-{}-{:04x}",
            &ctx.job_id.to_string()[..8],
            name.as_str()
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "-"),
            rand::random::<u16>()
        ),
        labels: [
            (LABEL_JOB_ID.to_string(), ctx.job_id.to_string()),
            (LABEL_TRIAL_ID.to_string(), name.to_string()),
            // Lets `terminus gc` tell containers of a live job from those of a dead one.
            (LABEL_PID.to_string(), std::process::id().to_string()),
        ]
        .into_iter()
        .collect(),
        cpus: Some(ctx.spec.override_cpus.unwrap_or(env.cpus)),
        memory_mb: Some(ctx.spec.override_memory_mb.unwrap_or_else(|| env.memory_mb().unwrap_or(2048))),
        no_network: !env.allow_internet,
        // The task's environment, then the job's `environment.env` over it.
        env: env.env.iter().chain(ctx.spec.environment_env.iter()).map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: env.workdir.clone(),
    };
    let container = match ctx.engine.start_container(&spec).await {
        Ok(container) => container,
        Err(e) => {
            out.error = Some(ExceptionInfo::new("EnvironmentStartError", e.to_string()));
            out.task = Some(task);
            return out;
        }
    };
    let _ = supervisor
        .cast(SupervisorMsg::ContainerStarted { trial_name: name.clone(), container_id: container.id.clone() });
    let upload = async {
        if !log_dirs_by_command {
            container.upload_tar("/", archive::tar_dirs_and_files(&LOG_DIRS, &[])?).await?;
        }
        if needs_solution {
            container.upload_tar("/", archive::tar_dir(&task.solution_dir(), "solution")?).await?;
        }
        Ok::<_, terminus_sandbox::SandboxError>(())
    };
    if let Err(e) = upload.await {
        out.error = Some(ExceptionInfo::new("EnvironmentStartError", e.to_string()));
    }
    out.task = Some(task);
    out.container = Some(container);
    out
}

/// Puts the task's `tests/` at `/tests` in the container.
pub async fn upload_tests(task: &Task, container: &Container) -> Result<(), ExceptionInfo> {
    let tests = archive::tar_dir(&task.tests_dir(), "tests")
        .map_err(|e| ExceptionInfo::new("AddTestsDirError", e.to_string()))?;
    container.upload_tar("/", tests).await.map_err(|e| ExceptionInfo::new("AddTestsDirError", e.to_string()))
}

/// Runs `tests/test.sh` (uploaded by [`upload_tests`]) and reads the reward.
pub async fn verify_task(
    task: &Task,
    container: &Container,
    timeout: Duration,
    verifier_dir: &std::path::Path,
    job_env: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, f64>, ExceptionInfo> {
    let user = task.config.verifier.user.as_ref().map(ToString::to_string);
    // The task's `[verifier].env`, then the job's `verifier.env` over it.
    let env: Vec<String> =
        task.config.verifier.env.iter().chain(job_env.iter()).map(|(k, v)| format!("{k}={v}")).collect();
    let as_root = user.as_deref().is_none_or(|u| u == "root" || u == "0");
    let script = if as_root {
        "chmod +x /tests/test.sh; (/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"
    } else {
        // The chmod runs as root so a non-root verifier user can still execute the script.
        let _ = container
            .exec(
                "chmod +x /tests/test.sh",
                &ExecOptions { timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() },
            )
            .await;
        "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1"
    };
    let options = ExecOptions { user, env, workdir: None, timeout: Some(timeout) };
    let run = container.exec(script, &options).await;
    let timed_out = matches!(run, Err(terminus_sandbox::SandboxError::Timeout { .. }));
    if let Err(e) = &run
        && !timed_out
    {
        return Err(ExceptionInfo::new("RuntimeError", format!("running the tests failed: {e}")));
    }
    // One download brings the verifier's files and the agent's (the terminal is closed by now),
    // so teardown need not fetch the agent's again.
    let agent_dir = verifier_dir.parent().map(|p| p.join("agent")).unwrap_or_default();
    match container.download_tar("/logs").await {
        Ok(tar) => {
            let routes = [("verifier", verifier_dir, false), ("agent", agent_dir.as_path(), true)];
            if let Err(e) = archive::unpack_routed(&tar, &routes) {
                return Err(ExceptionInfo::new("DownloadVerifierDirError", e.to_string()));
            }
        }
        Err(e) => {
            return Err(ExceptionInfo::new("DownloadVerifierDirError", e.to_string()));
        }
    }
    if timed_out {
        return Err(ExceptionInfo::new(
            "VerifierTimeoutError",
            format!("Verifier execution timed out after {} seconds", timeout.as_secs_f64()),
        ));
    }
    read_rewards(verifier_dir)
}

/// `reward.txt` (one number) wins over `reward.json` (a flat object of numbers).
pub fn read_rewards(verifier_dir: &std::path::Path) -> Result<BTreeMap<String, f64>, ExceptionInfo> {
    let txt = verifier_dir.join("reward.txt");
    let json_path = verifier_dir.join("reward.json");
    if txt.is_file() {
        let text =
            std::fs::read_to_string(&txt).map_err(|e| ExceptionInfo::new("VerifierOutputParseError", e.to_string()))?;
        if text.trim().is_empty() {
            return Err(ExceptionInfo::new("RewardFileEmptyError", format!("{} is empty", txt.display())));
        }
        let value: f64 = text.trim().parse().map_err(|_| {
            ExceptionInfo::new(
                "VerifierOutputParseError",
                format!("cannot read a number from reward.txt: {:?}", text.trim()),
            )
        })?;
        return Ok(BTreeMap::from([("reward".to_string(), value)]));
    }
    if json_path.is_file() {
        let text = std::fs::read_to_string(&json_path)
            .map_err(|e| ExceptionInfo::new("VerifierOutputParseError", e.to_string()))?;
        if text.trim().is_empty() {
            return Err(ExceptionInfo::new("RewardFileEmptyError", format!("{} is empty", json_path.display())));
        }
        let map: BTreeMap<String, f64> = serde_json::from_str(&text).map_err(|e| {
            ExceptionInfo::new("VerifierOutputParseError", format!("reward.json must be an object of numbers: {e}"))
        })?;
        return Ok(map);
    }
    Err(ExceptionInfo::new(
        "RewardFileNotFoundError",
        format!("no reward file found at {} or {}", txt.display(), json_path.display()),
    ))
}

/// Ends the terminal: exits the asciinema recorder (so the cast is complete) and stops the
/// TmuxSession actor.
pub async fn close_terminal(tmux: Option<ActorRef<TmuxMsg>>, recording: bool) {
    let Some(tmux) = tmux else { return };
    if recording {
        let keys = vec!["C-d".to_string()];
        let _ = tmux.call(|reply| TmuxMsg::SendKeys { keys, reply }, Some(Duration::from_secs(10))).await;
        // asciinema writes its last events when its shell exits: wait until it has (the
        // reference sleeps half a second).
        let deadline = std::time::Instant::now() + Duration::from_millis(1500);
        while std::time::Instant::now() < deadline {
            match tmux.call(TmuxMsg::Foreground, Some(Duration::from_secs(10))).await {
                Ok(ractor::rpc::CallResult::Success(Ok(program))) if program != "asciinema" => break,
                Ok(ractor::rpc::CallResult::Success(Ok(_))) => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => break,
            }
        }
    }
    tmux.stop(None);
}

/// Downloads `/logs/agent` into the trial's `agent/` directory unless verification already did
/// (files the host wrote win), merges the episode markers into the recording, and removes the
/// container.
pub async fn collect_and_remove(container: Container, agent_dir: &Path, markers: &[(f64, String)], download: bool) {
    if download {
        match container.download_tar("/logs/agent").await {
            Ok(tar) => {
                if let Err(e) = archive::unpack_stripped(&tar, agent_dir, true) {
                    tracing::warn!(error = %e, "could not unpack the agent logs");
                }
            }
            Err(e) => tracing::debug!(error = %e, "no agent logs to download"),
        }
    }
    let cast = agent_dir.join("recording.cast");
    if !markers.is_empty()
        && let Ok(text) = std::fs::read_to_string(&cast)
    {
        let merged = terminus_agent::recording::merge_markers(&text, markers);
        if let Err(e) = crate::files::write_atomic(&cast, merged.as_bytes()) {
            tracing::warn!(error = %e, "could not merge the markers into the recording");
        }
    }
    if let Err(e) = container.remove().await {
        tracing::warn!(container = %container.name, error = %e, "could not remove the container; the job's final sweep will retry");
    }
}

/// Kills what the agent left running (the tmux server and every process under it), so nothing
/// the agent started keeps running while the tests do. Runs as the agent's user, who owns them.
pub async fn stop_agent_processes(container: &Container, user: Option<String>) {
    const SCRIPT: &str = r#"kill_tree() { for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done; kill -KILL "$1" 2>/dev/null; }
srv=$(tmux display -p '#{pid}' 2>/dev/null)
if [ -n "$srv" ]; then kill_tree "$srv"; fi
tmux kill-server 2>/dev/null
true"#;
    let options = ExecOptions { user, timeout: Some(Duration::from_secs(30)), ..ExecOptions::default() };
    if let Err(e) = container.exec(SCRIPT, &options).await {
        tracing::warn!(container = %container.name, error = %e, "could not stop the agent's processes");
    }
}

/// Copies the job's artifact paths out of the container into `artifacts/` and writes
/// `artifacts/manifest.json`. Best effort: a missing path is recorded, never an error.
pub async fn collect_artifacts(
    container: &Container,
    specs: &[terminus_config::policy::ArtifactSpec],
    artifacts_dir: &Path,
) {
    if specs.is_empty() {
        return;
    }
    let mut manifest = Vec::new();
    for spec in specs {
        let status = match container.download_tar(&spec.source).await {
            Ok(tar) => match archive::unpack_renamed(&tar, &artifacts_dir.join(&spec.destination)) {
                Ok(0) => "empty",
                Ok(_) => "ok",
                Err(e) => {
                    tracing::warn!(source = %spec.source, error = %e, "could not unpack an artifact");
                    "failed"
                }
            },
            Err(_) => "failed",
        };
        manifest.push(serde_json::json!({"source": spec.source, "destination": spec.destination, "status": status}));
    }
    if let Err(e) = crate::files::write_json(&artifacts_dir.join("manifest.json"), &manifest) {
        tracing::warn!(error = %e, "could not write the artifact manifest");
    }
}
