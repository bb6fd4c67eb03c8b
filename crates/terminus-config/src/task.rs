//! Harbor-format task directories: `task.toml`, `instruction.md` (or `steps/<name>/` for a
//! multi-step task), `environment/` (optional with a prebuilt `docker_image`), `tests/test.sh`,
//! and optionally `solution/solve.sh`.
//!
//! Every key of Harbor 0.26's task model loads ([`schema`]). A task Harbor accepts is accepted
//! here; what this orchestrator does not act on is said by name, either as a [`TaskNotice`] (the
//! trial runs without it) or as an [`Unrunnable`] reason (the trial fails with it, rather than
//! give a reward the task's author would not recognise).
//!
//! Loading, validation and [`Task`]'s methods are here, over what the sub-modules compute from
//! the `task.toml` alone: each phase's network in `network`, `${VAR}` resolution and host reads
//! in `env`, notices and unrunnable reasons in `notices`, the verifier's place in `verifier`,
//! placed artifacts in `artifacts`. They import the schema and each other, never this file.

mod schema;

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use schema::*;

use crate::error::ConfigError;
use crate::host_env::HostRead;

mod artifacts;
mod env;
mod network;
mod notices;
mod verifier;

pub use artifacts::{confined_relative, placed_artifacts};
pub use env::{MissingVariable, resolve_env, resolve_host_env};
pub use network::{ExtraHosts, NetworkPlan, NetworkPolicy, normalize_allowed_host};
use notices::notices;
pub use notices::{NoticeKind, TaskNotice, Unrunnable};
pub use verifier::VerifierEnvironment;

/// A loaded task.
#[derive(Clone, Debug)]
pub struct Task {
    pub dir: PathBuf,
    /// `[task].name` when present, else the directory name (Harbor's rule).
    pub name: String,
    /// Empty for a multi-step task (each step has its own), as in Harbor.
    pub instruction: String,
    /// A multi-step task's instructions (`steps/<name>/instruction.md`), in step order.
    pub step_instructions: Vec<String>,
    pub config: TaskToml,
    /// What of the task is not acted on, by key.
    pub notices: Vec<TaskNotice>,
    /// The hosts the job adds to this task's allowlists (set by the trial that runs it).
    pub extra_hosts: ExtraHosts,
}

/// Parses `task.toml`, naming the key of a value of the wrong type (`agent.timeout_sec: …`), and
/// the keys no model knows.
/// Whether the task in `dir` is a multi-step task (a readable `task.toml` with `[[steps]]`).
pub(crate) fn has_steps(dir: &Path) -> bool {
    terminus_core::tree::read_text(dir, "task.toml", MAX_TOML_BYTES)
        .ok()
        .and_then(|text| parse_task_toml(&text).ok())
        .is_some_and(|(config, _)| config.steps.as_ref().is_some_and(|steps| !steps.is_empty()))
}

fn parse_task_toml(text: &str) -> Result<(TaskToml, Vec<String>), String> {
    let mut unknown = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let deserializer = toml::Deserializer::new(text);
    let parsed = serde_ignored::deserialize(serde_path_to_error::Deserializer::new(deserializer, &mut track), |p| {
        // Options show as `?` segments (`environment.healthcheck.?.typo`): not part of the key.
        unknown.push(p.to_string().replace(".?", ""))
    });
    match parsed {
        Ok(config) => Ok((config, unknown)),
        Err(e) => {
            let path = track.path().to_string();
            let message = e.message().trim().to_string();
            if path.is_empty() || path == "." {
                let line = e.span().map(|span| text[..span.start.min(text.len())].lines().count().max(1));
                Err(match line {
                    Some(line) => format!("task.toml line {line}: {message}"),
                    None => format!("task.toml: {message}"),
                })
            } else {
                Err(format!("task.toml: key `{path}`: {message}"))
            }
        }
    }
}

impl TaskToml {
    /// Values that parse but cannot run: non-positive timeouts, cpus or memory, an unreadable
    /// memory size (checked even when `memory_mb` wins, so a typo is never silently ignored).
    fn validate(&self) -> Result<(), String> {
        let positive = |key: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(format!("task.toml: key `{key}` must be positive, got {value}"))
            }
        };
        if let Some(timeout) = self.agent.timeout_sec {
            positive("agent.timeout_sec", timeout)?;
        }
        positive("verifier.timeout_sec", self.verifier.timeout_sec)?;
        positive("environment.build_timeout_sec", self.environment.build_timeout_sec)?;
        positive("environment.cpus", self.environment.cpus)?;
        if self.environment.memory_mb == Some(0) {
            return Err("task.toml: key `environment.memory_mb` must be positive, got 0".into());
        }
        if let Some(text) = &self.environment.memory {
            parse_size_mb(text)
                .ok_or_else(|| format!("task.toml: key `environment.memory`: cannot read size {text:?}"))?;
        }
        if let Some(text) = &self.environment.storage {
            parse_size_mb(text)
                .ok_or_else(|| format!("task.toml: key `environment.storage`: cannot read size {text:?}"))?;
        }
        let os = self.environment.os.to_ascii_lowercase();
        if os != "linux" && os != "windows" {
            return Err(format!(
                "task.toml: key `environment.os` must be \"linux\" or \"windows\", got {:?}",
                self.environment.os
            ));
        }
        self.validate_network()?;
        if let Some(env) = &self.verifier.environment {
            positive("verifier.environment.build_timeout_sec", env.build_timeout_sec)?;
            positive("verifier.environment.cpus", env.cpus)?;
            if env.memory_mb == Some(0) {
                return Err("task.toml: key `verifier.environment.memory_mb` must be positive, got 0".into());
            }
            if let Some(text) = &env.memory {
                parse_size_mb(text).ok_or_else(|| {
                    format!("task.toml: key `verifier.environment.memory`: cannot read size {text:?}")
                })?;
            }
            if env.allowed_hosts.as_ref().is_some_and(|hosts| !hosts.is_empty())
                && env.network_mode != Some(NetworkMode::Allowlist)
            {
                return Err("task.toml: key `verifier.environment.allowed_hosts` is only valid with `verifier.environment.network_mode = \"allowlist\"`".into());
            }
        }
        if self.verifier.environment_mode == Some(VerifierMode::Shared) && self.verifier.environment.is_some() {
            return Err(
                "task.toml: `verifier.environment_mode = \"shared\"` conflicts with `[verifier.environment]`".into()
            );
        }
        if let Some(steps) = &self.steps {
            let mut seen = std::collections::HashSet::new();
            for step in steps {
                if !valid_step_name(&step.name) {
                    return Err(format!(
                        "task.toml: step name {:?} must be a plain directory name under steps/",
                        step.name
                    ));
                }
                if !seen.insert(step.name.to_lowercase()) {
                    return Err(format!("task.toml: step name {:?} is used twice", step.name));
                }
            }
        }
        let step_artifacts =
            self.steps.iter().flatten().map(|step| (format!("steps.{}.artifacts", step.name), &step.artifacts));
        for (key, artifacts) in std::iter::once(("artifacts".to_string(), &self.artifacts)).chain(step_artifacts) {
            for (idx, artifact) in artifacts.iter().enumerate() {
                if artifact.source().split('/').any(|part| part == "..") {
                    return Err(format!(
                        "task.toml: key `{key}[{idx}].source`: {:?} must not contain `..`",
                        artifact.source()
                    ));
                }
                // Copied to `artifacts/<destination>` on the host: it must stay there.
                if let ArtifactSpec::Detailed { destination: Some(destination), .. } = artifact
                    && !confined_relative(destination)
                {
                    return Err(format!(
                        "task.toml: key `{key}[{idx}].destination`: {destination:?} must be a relative path inside artifacts/ (no `..`, not absolute)"
                    ));
                }
            }
        }
        if let Some(dir) = &self.environment.skills_dir
            && (!dir.starts_with('/') || dir.split('/').any(|part| part == ".."))
        {
            return Err(format!(
                "task.toml: key `environment.skills_dir`: {dir:?} must be an absolute path in the container without `..`"
            ));
        }
        self.environment.memory_mb().map(|_| ())
    }
}

/// A step's directory name: one portable path component.
fn valid_step_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The largest instruction read.
pub const MAX_INSTRUCTION_BYTES: u64 = 8 << 20;

impl Task {
    /// Whether `dir` looks like a task (Harbor's discovery rule).
    pub fn is_task_dir(dir: &Path) -> bool {
        Task::missing_parts(dir).is_empty()
    }

    /// The parts a task directory needs that `dir` lacks, for error messages.
    pub fn missing_parts(dir: &Path) -> Vec<String> {
        let mut missing = Vec::new();
        if !dir.join("task.toml").is_file() {
            missing.push("task.toml".to_string());
        }
        let config = terminus_core::tree::read_text(dir, "task.toml", MAX_TOML_BYTES)
            .ok()
            .and_then(|text| parse_task_toml(&text).ok())
            .map(|(config, _)| config);
        // A task with a prebuilt image (`environment.docker_image`) needs no recipe.
        let prebuilt = config.as_ref().is_some_and(|c| c.environment.docker_image.is_some());
        if !dir.join("environment").is_dir() && !prebuilt {
            missing.push("environment/".to_string());
        }
        match config.as_ref().and_then(|c| c.steps.as_ref()).filter(|steps| !steps.is_empty()) {
            Some(steps) => {
                for step in steps {
                    let step_dir = dir.join("steps").join(&step.name);
                    if !step_dir.join("instruction.md").is_file() {
                        missing.push(format!("steps/{}/instruction.md", step.name));
                    }
                    // A separate verifier whose image brings the tests needs none here.
                    let bundled = config
                        .as_ref()
                        .and_then(|c| c.verifier_environment(dir, Some(step)))
                        .is_some_and(|v| v.bundled_tests);
                    let windows = config.as_ref().is_some_and(|c| c.environment.os.eq_ignore_ascii_case("windows"));
                    let has =
                        |tests: &Path| tests.join("test.sh").is_file() || windows && tests.join("test.bat").is_file();
                    if !bundled && !has(&step_dir.join("tests")) && !has(&dir.join("tests")) {
                        missing.push(format!("steps/{}/tests/test.sh (or tests/test.sh)", step.name));
                    }
                }
            }
            None => {
                if !dir.join("instruction.md").is_file() {
                    missing.push("instruction.md".to_string());
                }
                let windows = config.as_ref().is_some_and(|c| c.environment.os.eq_ignore_ascii_case("windows"));
                let bundled =
                    config.as_ref().and_then(|c| c.verifier_environment(dir, None)).is_some_and(|v| v.bundled_tests);
                let tests = dir.join("tests");
                let has_tests = tests.join("test.sh").is_file() || windows && tests.join("test.bat").is_file();
                // A separate verifier's image may bring the tests (else they are uploaded to it).
                if !has_tests && !bundled {
                    missing.push("tests/test.sh".to_string());
                }
            }
        }
        missing
    }

    /// The name the task in `dir` goes by, without loading it: `[task].name` of its `task.toml`
    /// when that parses and gives one, else the directory's name (the rule [`Task::load`]
    /// applies).
    pub fn declared_name(dir: &Path) -> String {
        let declared = terminus_core::tree::read_text(dir, "task.toml", MAX_TOML_BYTES)
            .ok()
            .and_then(|text| parse_task_toml(&text).ok())
            .and_then(|(config, _)| config.task.and_then(|t| t.name));
        declared.unwrap_or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
    }

    /// Loads and checks a task directory.
    pub fn load(dir: &Path) -> Result<Task, ConfigError> {
        let err = |message: String| ConfigError::Task { task: dir.to_path_buf(), message };
        let read = |rel: &str, limit| terminus_core::tree::read_text(dir, rel, limit);
        let text = read("task.toml", MAX_TOML_BYTES).map_err(|e| err(format!("task.toml: {e}")))?;
        let (config, unknown) = parse_task_toml(&text).map_err(err)?;
        config.validate().map_err(err)?;
        let multi_step = config.steps.as_ref().is_some_and(|steps| !steps.is_empty());
        let mut step_instructions = Vec::new();
        let instruction = if multi_step {
            for step in config.steps.iter().flatten() {
                let rel = format!("steps/{}/instruction.md", step.name);
                let text = read(&rel, MAX_INSTRUCTION_BYTES).map_err(|e| err(format!("step `{}`: {e}", step.name)))?;
                step_instructions.push(strip_canary(&text));
            }
            String::new()
        } else {
            let text =
                read("instruction.md", MAX_INSTRUCTION_BYTES).map_err(|e| err(format!("instruction.md: {e}")))?;
            strip_canary(&text)
        };
        // A prebuilt image (`docker_image`) is used as it is; only a built one needs its recipe.
        let environment = dir.join("environment");
        // Only `.yaml`, as Harbor: a task may ship a `.yml` for its agent to fix.
        let compose = environment.join("docker-compose.yaml").is_file();
        if config.environment.docker_image.is_none() && !environment.join("Dockerfile").is_file() && !compose {
            return Err(err("environment/Dockerfile is missing (and no environment.docker_image is given)".into()));
        }
        // Everything of the task goes into images, hashes and uploads: nothing in it may lead
        // outside it (a link to a host key, to /dev/zero) or be other than files and folders.
        terminus_core::tree::walk(dir).map_err(|e| err(e.to_string()))?;
        let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = config.task.as_ref().and_then(|t| t.name.clone()).unwrap_or(dir_name);
        let notices = notices(&config, unknown);
        Ok(Task {
            dir: dir.to_path_buf(),
            name,
            instruction,
            step_instructions,
            config,
            notices,
            extra_hosts: ExtraHosts::default(),
        })
    }

    /// The steps of a multi-step task (`[[steps]]`), empty for a single-step one.
    pub fn steps(&self) -> &[StepSection] {
        self.config.steps.as_deref().unwrap_or_default()
    }

    /// `steps/<name>/` of a multi-step task.
    pub fn step_dir(&self, step: &StepSection) -> PathBuf {
        self.dir.join("steps").join(&step.name)
    }

    pub fn environment_dir(&self) -> PathBuf {
        self.dir.join("environment")
    }

    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    pub fn solution_dir(&self) -> PathBuf {
        self.dir.join("solution")
    }

    /// sha256 of every file of the task, for `task_checksum` in results.
    pub fn checksum(&self) -> std::io::Result<String> {
        dir_hash(&self.dir)
    }

    /// The network of each phase (Harbor's resolution: a phase's own `network_mode` if it has
    /// one, else the baseline of the environment it runs in: the task's, or for a separate
    /// verifier, its own).
    ///
    /// The job's [`ExtraHosts`] join the policies of the agent's container as Harbor merges
    /// them (see [`Task::extra_host_notices`] for where they do not apply).
    pub fn network_plan(&self) -> NetworkPlan {
        self.config.network_plan(&self.extra_hosts)
    }

    /// What the job's extra hosts do not change, said once per trial: a phase that stays
    /// public ignores them (as in Harbor); a separate verifier's environment does not take them.
    pub fn extra_host_notices(&self) -> Vec<String> {
        self.config.extra_host_notices(&self.extra_hosts)
    }

    /// The network of each phase of the task, or of its `step`.
    pub fn phase_plan(&self, step: Option<&StepSection>) -> NetworkPlan {
        step.map_or_else(|| self.network_plan(), |s| self.step_network_plan(s))
    }

    /// The network of each phase of a step: the step's own `network_mode` (with the step's
    /// hosts only) first, then the task's phase, then the environment's (Harbor's
    /// `_explicit_phase_policy`).
    pub fn step_network_plan(&self, step: &StepSection) -> NetworkPlan {
        self.config.step_network_plan(&self.extra_hosts, step)
    }

    /// Why this task cannot run here, if it cannot (checked when its trial starts, so that
    /// `tasks check` accepts what Harbor accepts and the job's other tasks still run).
    pub fn unrunnable(&self) -> Option<Unrunnable> {
        notices::unrunnable(&self.config, &self.network_plan())
    }

    /// Every variable this task reads from the host: `${VAR}` values of its env tables (the
    /// environment's, the tests', the solution's, each step's tests', a separate verifier's)
    /// and the variables its compose files name beyond the ones terminus itself sets.
    pub fn host_reads(&self) -> Vec<HostRead> {
        env::host_reads(&self.dir, &self.config)
    }

    /// Where this (single-step) task's separate verifier runs; None when it shares the agent's
    /// container. See [`TaskToml::verifier_environment`].
    pub fn verifier_environment(&self) -> Option<VerifierEnvironment> {
        self.config.verifier_environment(&self.dir, None)
    }

    /// The verifier's user: a step's own, else the task's `[verifier].user`.
    pub fn verifier_user(&self, step: Option<&StepSection>) -> Option<String> {
        step.and_then(|s| s.verifier.user.as_ref()).or(self.config.verifier.user.as_ref()).map(ToString::to_string)
    }

    /// The agent's user: a step's own, else the task's `[agent].user`.
    pub fn agent_user(&self, step: Option<&StepSection>) -> Option<String> {
        step.and_then(|s| s.agent.user.as_ref()).or(self.config.agent.user.as_ref()).map(ToString::to_string)
    }

    /// The task's own `artifacts`, placed; and a note for each that cannot be collected.
    pub fn artifact_specs(&self) -> (Vec<crate::policy::ArtifactSpec>, Vec<String>) {
        placed_artifacts("artifacts", &self.config.artifacts)
    }
}

/// Drops canary comment lines at the top of an instruction (benchmark leak markers).
fn strip_canary(text: &str) -> String {
    let mut lines = text.lines().peekable();
    let mut skipped = false;
    while let Some(line) = lines.peek() {
        let lower = line.to_ascii_lowercase();
        if lower.contains("canary") && (line.trim_start().starts_with('#') || line.trim_start().starts_with("<!--")) {
            lines.next();
            skipped = true;
        } else {
            break;
        }
    }
    if !skipped {
        return text.to_string();
    }
    let rest: Vec<&str> = lines.collect();
    let mut out = rest.join("\n").trim_start_matches('\n').to_string();
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A content hash of a directory: relative paths, executable bits and contents of every file
/// (streamed, not read whole), and the targets of the links inside it, in sorted order. Equal
/// trees give equal hashes on any machine. The walk refuses links that leave the directory and
/// special files ([`terminus_core::tree::walk`]).
pub fn dir_hash(dir: &Path) -> std::io::Result<String> {
    use terminus_core::tree::{TreeEntry, walk};
    let entries = walk(dir).map_err(std::io::Error::other)?;
    let mut hasher = Sha256::new();
    for entry in entries {
        match entry {
            TreeEntry::Dir { .. } => {}
            TreeEntry::File { rel, path, mode, size } => {
                hasher.update(rel.to_string_lossy().as_bytes());
                hasher.update([0u8, (mode & 0o111 != 0) as u8, 0u8]);
                hasher.update(size.to_le_bytes());
                let mut file = std::fs::File::open(&path)?;
                // At most `size` bytes: a file that grows while it is read changes nothing here.
                std::io::copy(&mut std::io::Read::take(&mut file, size), &mut hasher)?;
            }
            TreeEntry::Link { rel, target } => {
                hasher.update(rel.to_string_lossy().as_bytes());
                hasher.update([1u8]);
                hasher.update(target.to_string_lossy().as_bytes());
            }
        }
    }
    Ok(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests;
