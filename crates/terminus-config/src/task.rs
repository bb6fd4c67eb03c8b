//! Harbor-format task directories: `task.toml`, `instruction.md`, `environment/Dockerfile`,
//! `tests/test.sh`, and optionally `solution/solve.sh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::ConfigError;

/// A loaded task.
#[derive(Clone, Debug)]
pub struct Task {
    pub dir: PathBuf,
    /// `[task].name` when present, else the directory name (Harbor's rule).
    pub name: String,
    pub instruction: String,
    pub config: TaskToml,
}

/// `task.toml`. Unknown sections are ignored, as Harbor's model ignores `[metadata]` contents.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskToml {
    pub version: Option<String>,
    pub schema_version: Option<String>,
    pub task: Option<TaskSection>,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    pub environment: EnvironmentSection,
    pub solution: SolutionSection,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TaskSection {
    pub name: Option<String>,
    pub description: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct AgentSection {
    /// None means the agent has no time limit (Harbor's default).
    pub timeout_sec: Option<f64>,
    pub user: Option<UserSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct VerifierSection {
    pub timeout_sec: f64,
    pub env: BTreeMap<String, String>,
    pub user: Option<UserSpec>,
}

impl Default for VerifierSection {
    fn default() -> Self {
        VerifierSection { timeout_sec: 600.0, env: BTreeMap::new(), user: None }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SolutionSection {
    pub env: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default)]
pub struct EnvironmentSection {
    pub build_timeout_sec: f64,
    pub docker_image: Option<String>,
    pub os: String,
    pub cpus: f64,
    pub memory_mb: Option<u64>,
    /// Deprecated form of `memory_mb`, e.g. `"2G"`.
    pub memory: Option<String>,
    pub storage_mb: Option<u64>,
    pub gpus: u32,
    pub allow_internet: bool,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
}

impl Default for EnvironmentSection {
    fn default() -> Self {
        EnvironmentSection {
            build_timeout_sec: 600.0,
            docker_image: None,
            os: "linux".to_string(),
            cpus: 1.0,
            memory_mb: None,
            memory: None,
            storage_mb: None,
            gpus: 0,
            allow_internet: true,
            env: BTreeMap::new(),
            workdir: None,
        }
    }
}

impl EnvironmentSection {
    /// Memory limit in MiB: `memory_mb`, else the deprecated `memory` string, else 2048.
    pub fn memory_mb(&self) -> Result<u64, String> {
        if let Some(mb) = self.memory_mb {
            return Ok(mb);
        }
        match &self.memory {
            Some(text) => parse_size_mb(text).ok_or_else(|| format!("environment.memory: cannot read size {text:?}")),
            None => Ok(2048),
        }
    }
}

/// Parses `task.toml`, naming the key of a value of the wrong type (`agent.timeout_sec: …`).
fn parse_task_toml(text: &str) -> Result<TaskToml, String> {
    let deserializer = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().message().trim().to_string();
        if path.is_empty() || path == "." {
            let line = e.inner().span().map(|span| text[..span.start.min(text.len())].lines().count().max(1));
            match line {
                Some(line) => format!("task.toml line {line}: {message}"),
                None => format!("task.toml: {message}"),
            }
        } else {
            format!("task.toml: key `{path}`: {message}")
        }
    })
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
        self.environment.memory_mb().map(|_| ())
    }
}

/// A user given as a name or a numeric id.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum UserSpec {
    Name(String),
    Id(i64),
}

impl std::fmt::Display for UserSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UserSpec::Name(name) => f.write_str(name),
            UserSpec::Id(id) => write!(f, "{id}"),
        }
    }
}

/// Parses "2G", "512M", "1024" (MiB) into MiB.
fn parse_size_mb(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_uppercase();
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len()));
    let value: f64 = digits.parse().ok()?;
    let factor = match unit.trim_end_matches('B').trim() {
        "" | "M" => 1.0,
        "G" => 1024.0,
        "K" => 1.0 / 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((value * factor).round() as u64)
}

impl Task {
    /// Whether `dir` looks like a task (Harbor's discovery rule for single-step tasks).
    pub fn is_task_dir(dir: &Path) -> bool {
        Task::missing_parts(dir).is_empty()
    }

    /// The parts a task directory needs that `dir` lacks, for error messages.
    pub fn missing_parts(dir: &Path) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !dir.join("task.toml").is_file() {
            missing.push("task.toml");
        }
        if !dir.join("instruction.md").is_file() {
            missing.push("instruction.md");
        }
        // A task with a prebuilt image (`environment.docker_image`) needs no recipe.
        let prebuilt = || {
            std::fs::read_to_string(dir.join("task.toml"))
                .ok()
                .and_then(|text| parse_task_toml(&text).ok())
                .is_some_and(|config| config.environment.docker_image.is_some())
        };
        if !dir.join("environment").is_dir() && !prebuilt() {
            missing.push("environment/");
        }
        if !dir.join("tests").join("test.sh").is_file() {
            missing.push("tests/test.sh");
        }
        missing
    }

    /// Loads and checks a task directory.
    pub fn load(dir: &Path) -> Result<Task, ConfigError> {
        let err = |message: String| ConfigError::Task { task: dir.to_path_buf(), message };
        let toml_path = dir.join("task.toml");
        let text = std::fs::read_to_string(&toml_path).map_err(|e| err(format!("cannot read task.toml: {e}")))?;
        let config = parse_task_toml(&text).map_err(err)?;
        let instruction = std::fs::read_to_string(dir.join("instruction.md"))
            .map_err(|e| err(format!("cannot read instruction.md: {e}")))?;
        // A prebuilt image (`docker_image`) is used as it is; only a built one needs its recipe.
        if config.environment.docker_image.is_none() && !dir.join("environment").join("Dockerfile").is_file() {
            return Err(err("environment/Dockerfile is missing (and no environment.docker_image is given)".into()));
        }
        if !config.environment.os.eq_ignore_ascii_case("linux") {
            return Err(err(format!("environment.os = {:?}: only linux tasks run here", config.environment.os)));
        }
        if config.environment.gpus > 0 {
            return Err(err("environment.gpus > 0: the Docker environment has no GPUs".into()));
        }
        config.validate().map_err(err)?;
        // Everything of the task goes into images, hashes and uploads: nothing in it may lead
        // outside it (a link to a host key, to /dev/zero) or be other than files and folders.
        terminus_core::tree::walk(dir).map_err(|e| err(e.to_string()))?;
        let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let name = config.task.as_ref().and_then(|t| t.name.clone()).unwrap_or(dir_name);
        Ok(Task { dir: dir.to_path_buf(), name, instruction: strip_canary(&instruction), config })
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
        assert!(task.config.environment.allow_internet);
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
