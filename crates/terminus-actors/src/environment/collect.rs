//! What leaves the container at the end of a trial: the terminal closed, the agent's logs and
//! the artifacts (with their collect hooks) copied out under caps, then the container removed.

use std::path::Path;
use std::time::Duration;

use terminus_config::policy::ContainerPolicy;
use terminus_core::layout::{TrialDir, container as paths, names};
use terminus_sandbox::{Container, Environment, ExecOptions, archive, blocking};

use crate::tmux_session::TmuxHandle;

/// How much of a container's files may reach the host, from the job's policy.
#[derive(Clone, Copy, Debug)]
pub struct CopyLimits {
    pub max_bytes: u64,
    pub max_files: usize,
}

impl CopyLimits {
    pub fn of(policy: &ContainerPolicy) -> CopyLimits {
        CopyLimits { max_bytes: policy.max_log_mb * 1024 * 1024, max_files: policy.max_log_files as usize }
    }
}

/// How long a download may wait for its next chunk before the engine is taken for hung.
const DOWNLOAD_STALL: Duration = Duration::from_secs(120);

/// Copies `path` out of the container through a temporary file in `scratch`, then unpacks it
/// with `unpack` off the async workers, within `limits`: memory stays small whatever the agent
/// left, and what did not fit is returned as a note for the trial's result.
pub(super) async fn fetch<F>(
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

/// Copies `/logs/agent` into the trial's `agent/` directory (files the host wrote win); what
/// is cut goes to `notes`, a failure is logged.
pub(super) async fn fetch_agent_logs(
    container: &Environment,
    trial_dir: &TrialDir,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) {
    copy_agent_logs(container, &trial_dir.agent_dir(), trial_dir.path(), limits, notes).await;
}

/// Copies `/logs/agent` into `agent_dir` (downloaded through `scratch`): files the host wrote
/// win, and nothing under a name the host writes itself ([`host_written`]) is copied; each such
/// name is a note.
async fn copy_agent_logs(
    container: &Container,
    agent_dir: &Path,
    scratch: &Path,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) {
    let agent = agent_dir.to_path_buf();
    let reserved = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let found = reserved.clone();
    match fetch(container, paths::AGENT_LOGS, scratch, limits, move |file, limits| {
        let unpacked = archive::unpack_stripped_reserving(file, &agent, limits, host_written)?;
        *found.lock().unwrap_or_else(|p| p.into_inner()) = unpacked.reserved.clone();
        Ok(unpacked)
    })
    .await
    {
        Ok(note) => notes.extend(note),
        Err(e) => tracing::warn!(error = %e, "could not copy the agent's logs"),
    }
    for name in reserved.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        notes.push(format!(
            "{}/{name} in the container was not copied: terminus writes that name in agent/ itself",
            paths::AGENT_LOGS
        ));
    }
}

/// The names terminus writes in a trial's `agent/` from the host (the episode records a replay
/// reads, the trajectories, the merged recording): what the container holds under them is not
/// copied, so nothing the agent wrote passes for them.
pub(crate) fn host_written(name: &str) -> bool {
    name.starts_with("episode-")
        || (name.starts_with("trajectory") && name.ends_with(".json"))
        || name == names::RECORDING_CAST
        || name == names::RECORDING_PART
}

/// The largest recording whose episode markers are merged in (it is read whole to do it).
pub const MAX_MERGED_CAST_BYTES: u64 = 256 << 20;

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

/// Ends the terminal: the recording, if one runs (whatever state the agent reached), takes the
/// output still in flight and ends, so the cast is whole; then the TmuxSession actor stops.
pub async fn close_terminal(tmux: Option<TmuxHandle>) {
    let Some(tmux) = tmux else { return };
    tmux.finish_recording().await;
    tmux.stop();
}

/// Downloads `/logs/agent` into the trial's `agent/` directory unless verification already did
/// (files the host wrote win), and removes the container. Returns what was cut from the logs.
pub async fn collect_and_remove(
    container: Environment,
    agent_dir: &Path,
    recording_dir: &Path,
    download: bool,
    limits: CopyLimits,
) -> Vec<String> {
    let mut notes = Vec::new();
    if download {
        let scratch = agent_dir.parent().unwrap_or(agent_dir).to_path_buf();
        copy_agent_logs(&container, agent_dir, &scratch, limits, &mut notes).await;
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
    remove(&container).await;
    notes
}

/// Puts the terminal's recording in place: the file the recorder wrote (`.recording.cast.part`)
/// becomes `recording.cast` — replacing any file of that name the container's logs brought —
/// with the episode markers merged in. Returns a note when the markers could not be merged.
pub async fn seal_recording(recording_dir: &Path, markers: &[(f64, String)]) -> Vec<String> {
    let mut notes = Vec::new();
    let part = recording_dir.join(names::RECORDING_PART);
    if !part.is_file() {
        return notes;
    }
    let cast = recording_dir.join(names::RECORDING_CAST);
    if let Err(e) = std::fs::rename(&part, &cast) {
        tracing::warn!(error = %e, "could not put the recording in place");
        return notes;
    }
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
    notes
}

/// Removes a container, leaving it to the job's final sweep if that fails.
pub async fn remove(container: &Environment) {
    if let Err(e) = container.remove().await {
        tracing::warn!(container = %container.name, error = %e, "could not remove the container; the job's final sweep will retry");
    }
}

/// Copies the artifact paths out of the trial's containers into `artifacts/` and writes
/// `artifacts/manifest.json`, as Harbor 0.26 collects them: the task's `[[verifier.collect]]`
/// hooks of `main` run first, then `main`'s artifacts are taken, then the sidecars' hooks run
/// and their artifacts are taken. Best effort: a failing hook is logged and noted, a missing
/// path recorded in the manifest, never an error. Returns what was cut or failed.
pub async fn collect_artifacts(
    container: &Environment,
    specs: &[terminus_config::policy::ArtifactSpec],
    hooks: &[terminus_config::task::CollectSpec],
    artifacts_dir: &Path,
    limits: CopyLimits,
) -> Vec<String> {
    let mut notes = Vec::new();
    if specs.is_empty() && hooks.is_empty() {
        return notes;
    }
    let is_main = |service: Option<&str>| service.is_none_or(|s| s == paths::MAIN_SERVICE);
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
async fn run_collect_hook(container: &Environment, hook: &terminus_config::task::CollectSpec) -> Option<String> {
    let service = hook.service.as_deref().unwrap_or(paths::MAIN_SERVICE);
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
    container: &Environment,
    spec: &terminus_config::policy::ArtifactSpec,
    artifacts_dir: &Path,
    limits: CopyLimits,
    notes: &mut Vec<String>,
) -> serde_json::Value {
    let mut entry = serde_json::json!({"source": spec.source, "destination": spec.destination});
    if let Some(service) = &spec.service {
        entry["service"] = serde_json::json!(service);
    }
    let status = match container.service(spec.service.as_deref().unwrap_or(paths::MAIN_SERVICE)) {
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
