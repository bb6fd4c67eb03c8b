//! Harbor's JSON dataset registry: a `registry.json` listing datasets by name and version, each
//! a list of tasks in git repositories at pinned commits (or in directories beside the file).
//! [`RegistryLocation`] says where the file is (`registry_path`, or a `file://` `registry_url`;
//! the Harbor hub and other HTTP addresses are refused by name: terminus reads registries from
//! files), [`Registry::read`] parses it, [`Registry::dataset`] picks one version of a dataset
//! (a name alone means [`resolve_version`]'s). The job's task list (`job/tasks.rs`) turns a
//! dataset's tasks into the job's `TaskRef`s: a git task's path is its entry in the
//! [`TaskCache`], filled before the job starts by the terminus-fetch crate. This module imports
//! nothing of jobs or tasks.

mod source;
mod version;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

pub use source::{CACHE_DIR_ENV, GitSource, GitSourceError, TaskCache};
pub use version::resolve_version;

/// The registry Harbor uses when a dataset names none (the Harbor hub); it cannot be reached
/// from terminus.
pub const HARBOR_HUB_URL: &str = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json";

/// How to give a registry instead, for messages.
const GIVE_A_FILE: &str = "download the registry.json and give it with `registry_path:` in the job file, or `--registry-path` on the command line";

/// Why a registry, or a dataset in it, cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the Harbor hub registry (`{url}`) cannot be reached from terminus: {GIVE_A_FILE}")]
    Hub { url: String },
    #[error("no registry given (the default is the Harbor hub, which terminus cannot reach): {GIVE_A_FILE}")]
    NoneGiven,
    #[error("registry `{url}`: terminus reads registries from files only (a path or a file:// URL): {GIVE_A_FILE}")]
    RemoteUrl { url: String },
    #[error("give one of registry_url and registry_path, not both")]
    BothGiven,
    #[error("registry `{}` cannot be read: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("registry `{}` is not a regular file ({kind}): not read", .path.display())]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("registry `{}` is larger than {} MiB: not read", .path.display(), MAX_REGISTRY_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("registry `{}` is not a Harbor registry (a JSON list of datasets): {message}", .path.display())]
    Malformed { path: PathBuf, message: String },
    #[error("dataset `{name}` is not in registry `{}`; it lists: {}", .registry.display(), list(.known))]
    UnknownDataset { registry: PathBuf, name: String, known: Vec<String> },
    #[error("dataset `{name}` has no version `{version}` in registry `{}`; its versions: {}", .registry.display(), list(.versions))]
    UnknownVersion { registry: PathBuf, name: String, version: String, versions: Vec<String> },
    #[error(
        "`{name}` names a package dataset (org/name), which the Harbor hub serves and terminus cannot reach: {GIVE_A_FILE}"
    )]
    Package { name: String },
    #[error("dataset `{dataset}` in registry `{}`: task `{task}`: {problem}", .registry.display())]
    Task { registry: PathBuf, dataset: String, task: String, problem: TaskProblem },
    #[error("no cache directory for tasks fetched from git: set {CACHE_DIR_ENV} (or HOME, for ~/.cache/terminus)")]
    NoCache,
}

/// What is wrong with one task of a dataset.
#[derive(Debug, thiserror::Error)]
pub enum TaskProblem {
    #[error(transparent)]
    Git(#[from] GitSourceError),
    #[error("`{}` is not a task directory (it lacks {})", .path.display(), .missing.join(", "))]
    NotATask { path: PathBuf, missing: Vec<String> },
    #[error("path {path:?} leaves the registry's directory (a local task must be inside it)")]
    OutsideRegistry { path: String },
}

/// The largest registry file read (Harbor's hub registry is under 2 MiB).
pub const MAX_REGISTRY_BYTES: u64 = 64 << 20;

fn list(items: &[String]) -> String {
    if items.is_empty() { "(nothing)".to_string() } else { items.join(", ") }
}

/// Where a registry file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryLocation {
    path: PathBuf,
}

impl RegistryLocation {
    /// The registry a dataset entry (or the command line) names: `path` (a `registry.json`, or
    /// a directory holding one) or `url` (`file://` only); the hub, other URLs and neither are
    /// refused by name.
    pub fn from_keys(url: Option<&str>, path: Option<&Path>) -> Result<RegistryLocation, RegistryError> {
        let path = match (url, path) {
            (Some(_), Some(_)) => return Err(RegistryError::BothGiven),
            (None, None) => return Err(RegistryError::NoneGiven),
            (None, Some(path)) => path.to_path_buf(),
            (Some(url), None) if url.trim_end_matches('/') == HARBOR_HUB_URL => {
                return Err(RegistryError::Hub { url: url.to_string() });
            }
            (Some(url), None) => match url.strip_prefix("file://") {
                // `file:///p` and `file://localhost/p`; a relative `file://p` reads as a path too.
                Some(rest) => PathBuf::from(rest.strip_prefix("localhost").unwrap_or(rest)),
                None => return Err(RegistryError::RemoteUrl { url: url.to_string() }),
            },
        };
        let path = std::path::absolute(&path).unwrap_or(path);
        let path = if path.is_dir() { path.join("registry.json") } else { path };
        Ok(RegistryLocation { path })
    }

    /// The registry file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One task of a dataset, as the registry lists it (Harbor's `RegistryTaskId`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RegistryTask {
    pub name: String,
    #[serde(default)]
    pub git_url: Option<String>,
    #[serde(default)]
    pub git_commit_id: Option<String>,
    pub path: String,
}

/// One version of a dataset (Harbor's `DatasetSpec`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct DatasetSpec {
    pub name: String,
    pub version: String,
    pub description: String,
    pub tasks: Vec<RegistryTask>,
    /// Harbor's metric configs; terminus lists them but computes the job's own `metrics`.
    #[serde(default)]
    pub metrics: Vec<Value>,
}

/// A registry file, read.
#[derive(Clone, Debug)]
pub struct Registry {
    location: RegistryLocation,
    pub datasets: Vec<DatasetSpec>,
}

impl Registry {
    pub fn read(location: &RegistryLocation) -> Result<Registry, RegistryError> {
        let path = location.path();
        let text = read_checked(path)?;
        let malformed = |message: String| RegistryError::Malformed { path: path.to_path_buf(), message };
        let mut json = serde_json::Deserializer::from_str(&text);
        let datasets: Vec<DatasetSpec> = serde_path_to_error::deserialize(&mut json).map_err(|e| {
            let at = e.path().to_string();
            malformed(format!("{at}: {}", crate::serde_message::strip_serde_position(&e.into_inner().to_string())))
        })?;
        Ok(Registry { location: location.clone(), datasets })
    }

    pub fn location(&self) -> &RegistryLocation {
        &self.location
    }

    /// Dataset `name` at `version`, or at the version [`resolve_version`] picks. A name listed
    /// twice at one version means its last listing (as in Harbor).
    pub fn dataset(&self, name: &str, version: Option<&str>) -> Result<&DatasetSpec, RegistryError> {
        if name.contains('/') {
            return Err(RegistryError::Package { name: name.to_string() });
        }
        let named: Vec<&DatasetSpec> = self.datasets.iter().filter(|d| d.name == name).collect();
        if named.is_empty() {
            let mut known: Vec<String> = self.datasets.iter().map(|d| d.name.clone()).collect();
            known.sort();
            known.dedup();
            return Err(RegistryError::UnknownDataset {
                registry: self.location.path.clone(),
                name: name.into(),
                known,
            });
        }
        let mut versions: Vec<&str> = Vec::new();
        for version in named.iter().map(|d| d.version.as_str()) {
            if !versions.contains(&version) {
                versions.push(version);
            }
        }
        let wanted = match version {
            Some(version) => version,
            None => resolve_version(&versions).unwrap_or_default(),
        };
        named.into_iter().rev().find(|d| d.version == wanted).ok_or_else(|| RegistryError::UnknownVersion {
            registry: self.location.path.clone(),
            name: name.to_string(),
            version: wanted.to_string(),
            versions: versions.iter().map(|v| v.to_string()).collect(),
        })
    }
}

/// A registry file's text, checked before a byte is read: a regular file (a fifo would block,
/// a device may never end), at most [`MAX_REGISTRY_BYTES`].
fn read_checked(path: &Path) -> Result<String, RegistryError> {
    use std::io::Read;
    let unreadable = |source| RegistryError::Unreadable { path: path.to_path_buf(), source };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if !meta.is_file() {
        let kind = if meta.is_dir() { "a directory" } else { "a device, fifo or socket" };
        return Err(RegistryError::NotAFile { path: path.to_path_buf(), kind });
    }
    if meta.len() > MAX_REGISTRY_BYTES {
        return Err(RegistryError::TooLarge { path: path.to_path_buf() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_REGISTRY_BYTES + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_REGISTRY_BYTES {
        return Err(RegistryError::TooLarge { path: path.to_path_buf() });
    }
    String::from_utf8(bytes).map_err(|e| unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

#[cfg(test)]
mod tests;
