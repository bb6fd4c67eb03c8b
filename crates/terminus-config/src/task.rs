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
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn write_task(dir: &Path, toml: &str) {
        std::fs::create_dir_all(dir.join("environment")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        std::fs::write(dir.join("instruction.md"), "# canary GUID 1234\nDo the thing.\n").unwrap();
        std::fs::write(dir.join("environment/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
        std::fs::write(dir.join("tests/test.sh"), "#!/bin/bash\n").unwrap();
    }

    #[test]
    fn loads_a_task_with_harbor_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("my-task");
        write_task(&dir, "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[environment]\nmemory = \"1G\"\n");
        assert!(Task::is_task_dir(&dir));
        let task = Task::load(&dir).unwrap();
        assert_eq!(task.name, "my-task");
        assert_eq!(task.instruction, "Do the thing.\n");
        assert_eq!(task.config.agent.timeout_sec, Some(120.0));
        assert_eq!(task.config.verifier.timeout_sec, 600.0);
        assert_eq!(task.config.environment.memory_mb().unwrap(), 1024);
        assert_eq!(task.network_plan().agent.mode, NetworkMode::Public);
        assert!(task.notices.is_empty() && task.unrunnable().is_none());
    }

    #[test]
    fn a_prebuilt_image_needs_no_dockerfile() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("prebuilt");
        write_task(&dir, "version = \"1.0\"\n[environment]\ndocker_image = \"example/tool:1\"\n");
        std::fs::remove_dir_all(dir.join("environment")).unwrap();
        assert!(Task::is_task_dir(&dir));
        assert_eq!(Task::load(&dir).unwrap().config.environment.docker_image.as_deref(), Some("example/tool:1"));
        // Without an image, the recipe is required, and the error says both.
        let built = tmp.path().join("built");
        write_task(&built, "version = \"1.0\"\n");
        std::fs::remove_file(built.join("environment/Dockerfile")).unwrap();
        let err = Task::load(&built).unwrap_err().to_string();
        assert!(err.contains("environment/Dockerfile is missing") && err.contains("docker_image"), "{err}");
    }

    #[test]
    fn paths_a_task_names_must_stay_inside_their_root() {
        let tmp = tempfile::tempdir().unwrap();
        let cases = [
            (
                "artifacts = [{ source = \"/app/x\", destination = \"/home/me/.ssh/authorized_keys\" }]\n",
                "artifacts[0].destination",
            ),
            (
                "artifacts = [\"/app/y\", { source = \"/app/x\", destination = \"../../../escape\" }]\n",
                "artifacts[1].destination",
            ),
            ("artifacts = [{ source = \"/app/x\", destination = \"a/../../b\" }]\n", "artifacts[0].destination"),
            ("artifacts = [{ source = \"/app/../etc\" }]\n", "artifacts[0].source"),
            ("[environment]\nskills_dir = \"skills\"\n", "environment.skills_dir"),
            ("[environment]\nskills_dir = \"/skills/../etc\"\n", "environment.skills_dir"),
        ];
        for (idx, (toml, key)) in cases.iter().enumerate() {
            let dir = tmp.path().join(format!("escape-{idx}"));
            write_task(&dir, &format!("version = \"1.0\"\n{toml}"));
            let err = Task::load(&dir).expect_err(toml).to_string();
            assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
        }
        let dir = tmp.path().join("inside");
        write_task(&dir, "version = \"1.0\"\nartifacts = [{ source = \"/app/x\", destination = \"out/x.txt\" }]\n");
        assert!(Task::load(&dir).is_ok());
        assert!(
            confined_relative("a/./b")
                && !confined_relative("")
                && !confined_relative(".")
                && !confined_relative("a\0b")
        );
    }

    #[test]
    fn bad_task_toml_names_the_task() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("broken");
        write_task(&dir, "[agent\n");
        let err = Task::load(&dir).unwrap_err().to_string();
        assert!(err.contains("broken") && err.contains("task.toml line 1"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let tmp = tempfile::tempdir().unwrap();
        for (toml, key) in [
            ("[agent]\ntimeout_sec = \"soon\"\n", "agent.timeout_sec"),
            ("[agent]\ntimeout_sec = -5.0\n", "agent.timeout_sec"),
            ("[verifier]\ntimeout_sec = 0.0\n", "verifier.timeout_sec"),
            ("[environment]\ncpus = 0\n", "environment.cpus"),
            ("[environment]\nmemory_mb = 1024\nmemory = \"lots\"\n", "environment.memory"),
            ("[environment]\ngpus = \"two\"\n", "environment.gpus"),
        ] {
            let dir = tmp.path().join(key);
            write_task(&dir, toml);
            let err = Task::load(&dir).unwrap_err().to_string();
            assert!(err.contains(&format!("key `{key}`")), "{toml:?}: {err}");
        }
    }

    /// A task.toml with every section Harbor 0.26 knows loads; what is not acted on is named.
    #[test]
    fn every_harbor_key_loads_and_what_is_ignored_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("full");
        write_task(
            &dir,
            r#"schema_version = "1.4"
source = "cookbook"
artifacts = ["/app/out.txt", { source = "/app/logs", destination = "logs", exclude = ["*.tmp"] }]
surprise = 1

[task]
name = "org/full"
description = "d"
authors = [{ name = "A", email = "a@example.com" }]
keywords = ["k"]

[metadata]
difficulty = "easy"

[agent]
timeout_sec = 60.0
user = "agent"
network_mode = "no-network"

[verifier]
timeout_sec = 30.0
user = 1000
network_mode = "public"
env = { TOKEN = "${HOST_TOKEN:-none}" }

[[verifier.collect]]
command = "true"

[environment]
os = "Linux"
cpus = 2
memory = "1G"
storage = "2G"
gpus = 0
gpu_types = ["H100"]
skills_dir = "/skills"
workdir = "/app"
allow_internet = true
env = { A = "1" }
mcp_servers = [{ name = "files", transport = "stdio", command = "mcp-files", args = ["--root", "/app"] }]

[environment.healthcheck]
command = "test -f /ready"
retries = 5
typo = true

[solution]
env = { S = "1" }
"#,
        );
        let task = Task::load(&dir).unwrap();
        assert_eq!(task.name, "org/full");
        assert_eq!(task.config.environment.storage_mb(), Some(2048));
        assert_eq!(task.config.environment.healthcheck.as_ref().unwrap().retries, 5);
        assert_eq!(task.config.environment.mcp_servers[0].args, ["--root", "/app"]);
        let named: Vec<String> = task.notices.iter().map(|n| n.key.clone()).collect();
        for key in ["surprise", "environment.healthcheck.typo", "environment.gpu_types"] {
            assert!(named.iter().any(|n| n == key), "{key} not named in {named:?}");
        }
        let plan = task.network_plan();
        let modes = [plan.setup.mode, plan.agent.mode, plan.verifier.mode];
        assert_eq!(modes, [NetworkMode::Public, NetworkMode::NoNetwork, NetworkMode::Public]);
        assert_eq!(plan.verifier_env, None);
        assert_eq!(task.unrunnable(), None);
        assert!(!named.iter().any(|n| n == "environment.skills_dir"), "Terminus 2 lists the skills");
        assert!(!named.iter().any(|n| n == "verifier.collect"), "the task's collect hooks run");
    }

    /// Harbor's `merge_extra_allowlists` per phase: the environment's hosts join the baseline
    /// (and the phases that follow it), the agent's its phase, the verifier's the tests'; a
    /// public phase ignores them (named), `no-network` becomes an allowlist of them, a phase's
    /// own policy takes only its phase's extras, and a separate verifier takes none.
    #[test]
    fn job_extra_hosts_merge_as_harbor_merges_them() {
        let tmp = tempfile::tempdir().unwrap();
        let load = |name: &str, toml: &str| {
            let dir = tmp.path().join(name);
            write_task(&dir, toml);
            let mut task = Task::load(&dir).unwrap();
            task.extra_hosts = ExtraHosts {
                environment: vec!["env.example".into()],
                agent: vec!["agent.example".into()],
                verifier: vec!["tests.example".into()],
            };
            task
        };
        fn hosts(p: &NetworkPolicy) -> (NetworkMode, Vec<&str>) {
            (p.mode, p.allowed_hosts.iter().map(String::as_str).collect())
        }
        let public = load("public", "");
        let plan = public.network_plan();
        assert_eq!(hosts(&plan.agent), (NetworkMode::Public, vec![]));
        assert_eq!(public.extra_host_notices().len(), 3, "{:?}", public.extra_host_notices());

        let offline =
            load("offline", "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n");
        let plan = offline.network_plan();
        assert_eq!(hosts(&plan.setup), (NetworkMode::Allowlist, vec!["env.example"]));
        assert_eq!(hosts(&plan.agent), (NetworkMode::Allowlist, vec!["env.example", "agent.example"]));
        assert_eq!(hosts(&plan.verifier), (NetworkMode::Public, vec![]), "its own public policy");
        assert_eq!(
            offline.extra_host_notices(),
            ["verifier.extra_allowed_hosts [\"tests.example\"]: ignored, the phase's network is public"]
        );

        let allow = load(
            "allow",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n\
             [agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.org\"]\n",
        );
        let plan = allow.network_plan();
        assert_eq!(
            hosts(&plan.agent),
            (NetworkMode::Allowlist, vec!["a.org", "agent.example"]),
            "not the environment's"
        );
        assert_eq!(hosts(&plan.verifier), (NetworkMode::Allowlist, vec!["pypi.org", "env.example", "tests.example"]));

        let separate = load(
            "separate",
            "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n",
        );
        let plan = separate.network_plan();
        assert_eq!(plan.verifier_env.as_ref().map(|p| p.mode), Some(NetworkMode::NoNetwork));
        assert_eq!(hosts(&plan.verifier), (NetworkMode::NoNetwork, vec![]));
        assert!(separate.extra_host_notices()[0].contains("separate verifier"), "{:?}", separate.extra_host_notices());
    }

    #[test]
    fn network_modes_resolve_per_phase_with_the_legacy_key() {
        let tmp = tempfile::tempdir().unwrap();
        let load = |name: &str, toml: &str| {
            let dir = tmp.path().join(name);
            write_task(&dir, toml);
            Task::load(&dir)
        };
        let offline = load("offline", "[environment]\nallow_internet = false\n").unwrap();
        assert!(!offline.network_plan().ever_online());
        // `network_mode` wins over the deprecated key.
        let explicit = load("explicit", "[environment]\nallow_internet = false\nnetwork_mode = \"public\"\n").unwrap();
        assert_eq!(explicit.network_plan().agent.mode, NetworkMode::Public);
        let allow = load(
            "allow",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\", \"*.debian.org\", \"10.0.0.0/8\"]\n",
        )
        .unwrap();
        // Allowlists run: each phase has its own hosts, normalized, or the environment's.
        assert_eq!(allow.unrunnable(), None);
        let plan = allow.network_plan();
        let hosts = vec!["pypi.org".to_string(), "*.debian.org".into(), "10.0.0.0/8".into()];
        assert_eq!(plan.agent, NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: hosts.clone() });
        assert_eq!((&plan.setup, &plan.verifier), (&plan.agent, &plan.agent));
        assert!(plan.any_allowlist() && plan.ever_online());
        let phases = load(
            "phases",
            "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"A.example.\", \"2001:DB8:0::1\", \"a.example.\"]\n\
             [verifier]\nnetwork_mode = \"no-network\"\n",
        )
        .unwrap();
        let plan = phases.network_plan();
        assert_eq!(plan.setup, NetworkPolicy::new(NetworkMode::Public));
        assert_eq!(plan.agent.allowed_hosts, ["a.example", "2001:db8::1"]);
        assert_eq!(plan.verifier, NetworkPolicy::new(NetworkMode::NoNetwork));
        // A phase's own allowlist does not inherit the environment's hosts (Harbor's rule).
        let own = load(
            "own",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n[agent]\nnetwork_mode = \"allowlist\"\n",
        )
        .unwrap();
        assert_eq!(own.network_plan().agent, NetworkPolicy::new(NetworkMode::Allowlist));
        assert_eq!(own.network_plan().setup.allowed_hosts, ["a.com"]);
        for (name, toml, key) in [
            ("hosts-without-mode", "[agent]\nallowed_hosts = [\"a.com\"]\n", "agent.allowed_hosts"),
            (
                "url-host",
                "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"https://a.com\"]\n",
                "environment.allowed_hosts",
            ),
            (
                "port-host",
                "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com:443\"]\n",
                "environment.allowed_hosts",
            ),
            ("bad-mode", "[environment]\nnetwork_mode = \"sometimes\"\n", "environment.network_mode"),
        ] {
            let err = load(name, toml).unwrap_err().to_string();
            assert!(err.contains(key), "{name}: {err}");
        }
    }

    /// A step's own `network_mode` brings its own hosts only; else the task's phase policy.
    #[test]
    fn step_network_policies_override_the_tasks_per_phase() {
        let (config, _) = parse_task_toml(
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"env.example\"]\n\
             [verifier]\nnetwork_mode = \"no-network\"\n\
             [[steps]]\nname = \"one\"\n[steps.agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"One.Example.\"]\n\
             [steps.verifier]\nnetwork_mode = \"public\"\n\
             [[steps]]\nname = \"two\"\n[steps.agent]\nnetwork_mode = \"allowlist\"\n\
             [[steps]]\nname = \"three\"\n",
        )
        .unwrap();
        config.validate().unwrap();
        let task = Task {
            dir: PathBuf::from("/nonexistent"),
            name: "steps".into(),
            instruction: String::new(),
            step_instructions: Vec::new(),
            config,
            notices: Vec::new(),
            extra_hosts: ExtraHosts::default(),
        };
        let [one, two, three] = task.steps() else { panic!("three steps") };
        let env = NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: vec!["env.example".into()] };
        let one = task.step_network_plan(one);
        assert_eq!(
            one.agent,
            NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: vec!["one.example".into()] }
        );
        assert_eq!((&one.setup, &one.verifier), (&env, &NetworkPolicy::new(NetworkMode::Public)));
        // Its own mode without hosts: an allowlist of none, not the environment's.
        let two = task.step_network_plan(two);
        assert_eq!(two.agent, NetworkPolicy::new(NetworkMode::Allowlist));
        assert_eq!(two.verifier, NetworkPolicy::new(NetworkMode::NoNetwork));
        let three = task.step_network_plan(three);
        assert_eq!((&three.agent, &three.verifier), (&env, &NetworkPolicy::new(NetworkMode::NoNetwork)));
        assert!(three.any_allowlist());
        // A step's hosts need the step's own allowlist.
        let (bad, _) =
            parse_task_toml("[[steps]]\nname = \"one\"\n[steps.verifier]\nallowed_hosts = [\"a.com\"]\n").unwrap();
        assert!(bad.validate().unwrap_err().contains("steps.one.verifier.allowed_hosts"));
    }

    #[test]
    fn allowed_hosts_normalize_as_harbor_normalizes_them() {
        for (entry, normal) in [
            ("Example.COM.", Some("example.com")),
            ("  *.Debian.org ", Some("*.debian.org")),
            ("xn--bcher-kva.example", Some("xn--bcher-kva.example")),
            ("192.0.2.1", Some("192.0.2.1")),
            ("10.0.0.0/8", Some("10.0.0.0/8")),
            ("2001:0DB8:0000::0001", Some("2001:db8::1")),
            ("2001:db8::/32", Some("2001:db8::/32")),
            ("0.0.0.0/0", Some("0.0.0.0/0")),
            // Host bits past the prefix (Harbor's strict `ip_network`).
            ("10.0.0.1/8", None),
            ("https://a.com", None),
            ("a.com:443", None),
            ("a.com/path", None),
            ("[2001:db8::1]", None),
            ("fe80::1%eth0", None),
            ("*.1.2.3.4", None),
            ("a.*.com", None),
            ("*", None),
            ("*.", None),
            ("-a.com", None),
            ("a_b.com", None),
            ("", None),
            ("10.0.0.0/33", None),
            (&format!("{}.com", "a".repeat(64)), None),
        ] {
            assert_eq!(normalize_allowed_host(entry).as_deref(), normal, "{entry:?}");
        }
    }

    #[test]
    fn tasks_harbor_accepts_load_and_say_at_run_time_what_cannot_run() {
        let tmp = tempfile::tempdir().unwrap();
        // Multi-step: no top-level instruction; each step has its own.
        let steps = tmp.path().join("steps");
        write_task(&steps, "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\nmin_reward = 1.0\n");
        std::fs::remove_file(steps.join("instruction.md")).unwrap();
        assert!(Task::missing_parts(&steps).contains(&"steps/one/instruction.md".to_string()));
        for step in ["one", "two"] {
            std::fs::create_dir_all(steps.join("steps").join(step)).unwrap();
            std::fs::write(steps.join("steps").join(step).join("instruction.md"), "Do it.\n").unwrap();
        }
        assert!(Task::is_task_dir(&steps), "{:?}", Task::missing_parts(&steps));
        let task = Task::load(&steps).unwrap();
        assert_eq!(task.instruction, "");
        assert_eq!(task.step_instructions, ["Do it.\n", "Do it.\n"]);
        assert_eq!(task.steps().len(), 2);
        assert_eq!(task.unrunnable(), None, "multi-step tasks run");
        // A separate verifier runs; Windows (the agent's or the verifier's) and GPUs load.
        let separate = tmp.path().join("separate");
        write_task(&separate, "[verifier]\nenvironment_mode = \"separate\"\n");
        assert_eq!(Task::load(&separate).unwrap().unrunnable(), None);
        let windows_verifier = tmp.path().join("windows-verifier");
        write_task(&windows_verifier, "[verifier.environment]\nos = \"windows\"\n");
        assert_eq!(Task::load(&windows_verifier).unwrap().unrunnable(), Some(Unrunnable::Windows));
        let windows = tmp.path().join("windows");
        write_task(&windows, "[environment]\nos = \"windows\"\n");
        assert_eq!(Task::load(&windows).unwrap().unrunnable(), Some(Unrunnable::Windows));
        let gpus = tmp.path().join("gpus");
        write_task(&gpus, "[environment]\ngpus = 2\n");
        assert_eq!(Task::load(&gpus).unwrap().config.environment.gpus, 2);
        let shared_with_env = tmp.path().join("conflict");
        write_task(&shared_with_env, "[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 1\n");
        assert!(Task::load(&shared_with_env).unwrap_err().to_string().contains("environment_mode"));
    }

    /// Harbor 0.26's `resolve_verifier_environment_definition`: the mode, the settings, the
    /// image's source, whether the tests come with it, and the network of each phase.
    #[test]
    fn separate_verifier_environments_resolve_as_harbor_resolves_them() {
        let tmp = tempfile::tempdir().unwrap();
        let load = |name: &str, toml: &str, tests_dockerfile: bool| {
            let dir = tmp.path().join(name);
            write_task(&dir, toml);
            if tests_dockerfile {
                std::fs::write(dir.join("tests/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
            }
            Task::load(&dir).unwrap()
        };
        // Shared unless asked, even with a tests/Dockerfile.
        let shared = load("shared", "", true);
        assert_eq!(shared.config.verifier_mode(None), VerifierMode::Shared);
        assert!(shared.verifier_environment().is_none());
        assert_eq!(shared.network_plan().verifier_env, None);

        // `separate` alone: the agent's environment again, in a container of its own; the tests
        // are uploaded, as is the agent's network baseline.
        let again = load(
            "again",
            "[environment]\ncpus = 2\nnetwork_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n",
            false,
        );
        let env = again.verifier_environment().unwrap();
        assert_eq!((env.dir, env.bundled_tests), (again.dir.join("environment"), false));
        assert_eq!((env.config.cpus, env.config.docker_image), (2.0, None));
        let plan = again.network_plan();
        let offline = NetworkPolicy::new(NetworkMode::NoNetwork);
        assert_eq!((&plan.verifier, plan.verifier_env.as_ref()), (&offline, Some(&offline)));
        assert!(!plan.ever_online() && !plan.verifier_env_ever_online());

        // A tests/Dockerfile makes the image, which brings the tests.
        let built = load("built", "[verifier]\nenvironment_mode = \"separate\"\n", true);
        let env = built.verifier_environment().unwrap();
        assert_eq!((env.dir, env.bundled_tests, env.config.docker_image), (built.dir.join("tests"), true, None));

        // A `[verifier.environment]` implies `separate`; its settings are the verifier's (not
        // the agent's); its network is the verifier's baseline, a `verifier.network_mode` the
        // phase's; the agent's container no longer needs the verifier's network.
        let own = load(
            "own",
            "[environment]\ndocker_image = \"agent:1\"\nnetwork_mode = \"no-network\"\n\
             [verifier]\nnetwork_mode = \"public\"\n[verifier.environment]\nmemory_mb = 512\nnetwork_mode = \"no-network\"\n",
            false,
        );
        assert_eq!(own.config.verifier_mode(None), VerifierMode::Separate);
        let env = own.verifier_environment().unwrap();
        assert_eq!((env.config.memory_mb, env.config.cpus), (Some(512), 1.0));
        // Neither its own image nor a tests recipe: the task's image, tests uploaded.
        assert_eq!((env.config.docker_image.as_deref(), env.bundled_tests), (Some("agent:1"), false));
        let plan = own.network_plan();
        assert_eq!(
            (plan.setup.mode, plan.verifier.mode, plan.verifier_env.as_ref().map(|p| p.mode)),
            (NetworkMode::NoNetwork, NetworkMode::Public, Some(NetworkMode::NoNetwork))
        );
        assert!(!plan.ever_online() && plan.verifier_env_ever_online());

        // Its own `docker_image` wins over a tests/Dockerfile, and brings the tests.
        let image = load("image", "[verifier.environment]\ndocker_image = \"grader:2\"\n", true);
        let env = image.verifier_environment().unwrap();
        assert_eq!((env.config.docker_image.as_deref(), env.bundled_tests), (Some("grader:2"), true));
        assert_eq!(env.dir, image.dir.join("tests"));

        // Steps: the step's own settings and tests directory first, then the task's; an
        // explicit `shared` of the step wins over the task's `separate`.
        let steps_dir = tmp.path().join("steps");
        let (config, _) = parse_task_toml(
            "[verifier]\nenvironment_mode = \"separate\"\n\
             [[steps]]\nname = \"one\"\n[steps.verifier.environment]\ncpus = 3\n\
             [[steps]]\nname = \"two\"\n[steps.verifier]\nenvironment_mode = \"shared\"\n\
             [[steps]]\nname = \"three\"\n",
        )
        .unwrap();
        let steps = Task {
            dir: steps_dir.clone(),
            name: "steps".into(),
            instruction: String::new(),
            step_instructions: Vec::new(),
            config,
            notices: Vec::new(),
            extra_hosts: ExtraHosts::default(),
        };
        let step_tests = steps.dir.join("steps/one/tests");
        std::fs::create_dir_all(&step_tests).unwrap();
        std::fs::write(step_tests.join("Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
        let [one, two, three] = &steps.config.steps.as_ref().unwrap()[..] else { panic!("three steps") };
        let env = steps.config.verifier_environment(&steps.dir, Some(one)).unwrap();
        assert_eq!((env.dir, env.bundled_tests, env.config.cpus), (step_tests, true, 3.0));
        assert_eq!(steps.config.verifier_mode(Some(two)), VerifierMode::Shared);
        assert!(steps.config.verifier_environment(&steps.dir, Some(two)).is_none());
        let env = steps.config.verifier_environment(&steps.dir, Some(three)).unwrap();
        assert_eq!((env.dir, env.bundled_tests), (steps.dir.join("environment"), false));

        // Tests are required unless the verifier's image brings them.
        let bare = tmp.path().join("bare");
        write_task(&bare, "[verifier]\nenvironment_mode = \"separate\"\n");
        std::fs::remove_file(bare.join("tests/test.sh")).unwrap();
        assert_eq!(Task::missing_parts(&bare), ["tests/test.sh"]);
        std::fs::write(bare.join("tests/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
        assert!(Task::missing_parts(&bare).is_empty());

        // What cannot run names its key.
        let allow =
            load("allow", "[verifier.environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n", false);
        assert_eq!(
            allow.unrunnable(),
            Some(Unrunnable::SeparateVerifierAllowlist { key: "verifier.environment.network_mode" })
        );
        let phase = load(
            "allow-phase",
            "[verifier]\nenvironment_mode = \"separate\"\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n",
            false,
        );
        assert_eq!(phase.unrunnable(), Some(Unrunnable::SeparateVerifierAllowlist { key: "verifier.network_mode" }));
        let dir = tmp.path().join("bad-cpus");
        write_task(&dir, "[verifier.environment]\ncpus = 0\n");
        assert!(Task::load(&dir).unwrap_err().to_string().contains("verifier.environment.cpus"));
    }

    #[test]
    fn env_templates_follow_harbors_rules() {
        let env: BTreeMap<String, String> = [
            ("PLAIN", "x${NOT}y"),
            ("SET", "${HOST_A}"),
            ("DEFAULTED", "${HOST_B:-fallback}"),
            ("EMPTY_DEFAULT", "${HOST_B:-}"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let host = |v: &str| (v == "HOST_A").then(|| "from-host".to_string());
        let resolved = resolve_env("environment.env", &env, host).unwrap();
        assert_eq!(resolved["PLAIN"], "x${NOT}y");
        assert_eq!(resolved["SET"], "from-host");
        assert_eq!(resolved["DEFAULTED"], "fallback");
        assert_eq!(resolved["EMPTY_DEFAULT"], "");
        let missing: BTreeMap<String, String> = [("KEY".to_string(), "${NOPE}".to_string())].into();
        let err = resolve_env("verifier.env", &missing, host).unwrap_err();
        assert_eq!(err, MissingVariable { key: "verifier.env.KEY".into(), var: "NOPE".into() });
        assert!(err.to_string().contains("`verifier.env.KEY`") && err.to_string().contains("${NOPE:-value}"));
    }

    #[test]
    fn dir_hash_changes_with_content() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a"), "1").unwrap();
        let before = dir_hash(tmp.path()).unwrap();
        std::fs::write(tmp.path().join("a"), "2").unwrap();
        assert_ne!(before, dir_hash(tmp.path()).unwrap());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size_mb("2G"), Some(2048));
        assert_eq!(parse_size_mb("512M"), Some(512));
        assert_eq!(parse_size_mb("lots"), None);
    }
}
