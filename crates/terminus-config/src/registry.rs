//! Harbor's dataset registries: datasets by name and version, each a list of tasks in git
//! repositories at pinned commits (or, in a registry file, in directories beside it).
//! [`RegistryLocation`] says where a registry is, as Harbor's client factory decides it: a
//! `registry.json` file (`registry_path`, a `file://` URL), a JSON registry over HTTP(S)
//! (`registry_url`), or, given neither (or Harbor's default registry URL), the Harbor hub's read
//! API. [`Registry::read`] parses a file, [`Registry::parse`] a registry's text,
//! [`Registry::dataset`] picks one version of a dataset (a name alone means
//! [`resolve_version`]'s). Registries over the network are asked by the [`Resolver`] the
//! program installs ([`install_resolver`]; terminus-fetch's), so this crate reads files only.
//! The job's task list (`job/tasks.rs`) turns a dataset's tasks into the job's `TaskRef`s: a git
//! task's path is its entry in the [`TaskCache`], filled before the job starts by the
//! terminus-fetch crate. This module imports nothing of jobs or tasks.

mod remote;
mod repo;
mod source;
mod version;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use remote::{HubApi, RemoteProblem, Resolution, Resolver, install_resolver, resolve};
pub use repo::RepoSource;
pub use source::{CACHE_DIR_ENV, GitSource, GitSourceError, TaskCache};
pub use version::resolve_version;

/// Harbor's default registry URL: a dataset that names no registry, or names this one, is
/// resolved through the Harbor hub's read API, as Harbor's client factory does.
pub const HARBOR_HUB_URL: &str = "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json";

/// Why a registry, or a dataset in it, cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error(
        "registry `{url}` is not a registry address: give an http(s):// or file:// URL (or a path with registry_path)"
    )]
    BadUrl { url: String },
    #[error("give one of registry_url and registry_path, not both")]
    BothGiven,
    #[error("repo `{source_text}`: {message}")]
    BadRepo { source_text: String, message: String },
    #[error("give one of repo and registry_url, not both")]
    RepoAndUrl,
    #[error(
        "a repository's tasks directory as a dataset (repo without a name) is not built: name a dataset of its registry.json"
    )]
    ImplicitRepoDataset,
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
    #[error("registry `{registry}` is not a Harbor registry (a JSON list of datasets): {message}")]
    Malformed { registry: String, message: String },
    #[error("registry `{registry}`: {problem}")]
    Remote { registry: String, problem: RemoteProblem },
    #[error("registry `{registry}` is on the network, and this program reads registries from files only")]
    NoResolver { registry: String },
    #[error("dataset `{name}` is not in registry `{registry}`{}", listing(.known))]
    UnknownDataset { registry: String, name: String, known: Vec<String> },
    #[error("dataset `{name}` has no version `{version}` in registry `{registry}`; its versions: {}", list(.versions))]
    UnknownVersion { registry: String, name: String, version: String, versions: Vec<String> },
    #[error(
        "`{name}` names a package dataset (org/name), served by Harbor's package registry, which terminus does not read: name a registry dataset (no `/`), or give its tasks by path"
    )]
    Package { name: String },
    #[error("dataset `{dataset}` in registry `{registry}`: task `{task}`: {problem}")]
    Task { registry: String, dataset: String, task: String, problem: TaskProblem },
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
    #[error("has no git_url: a registry on the network can list only tasks in git repositories")]
    LocalFromRemote,
}

/// The largest registry read, from a file or the network (Harbor's JSON registry is under 2 MiB).
pub const MAX_REGISTRY_BYTES: u64 = 64 << 20;

/// `; it lists: …` of a registry's datasets; nothing when it was not listed (the hub answers
/// for one name at a time).
fn listing(known: &[String]) -> String {
    if known.is_empty() { String::new() } else { format!("; it lists: {}", known.join(", ")) }
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "(nothing)".to_string() } else { items.join(", ") }
}

/// Where a registry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryLocation {
    /// A `registry.json` file.
    File(PathBuf),
    /// A JSON registry (a `registry.json`) over HTTP(S).
    Json(String),
    /// The Harbor hub's read API.
    Hub(HubApi),
    /// A `registry.json` in a git repository (Harbor's `repo`).
    Repo(RepoSource),
}

impl RegistryLocation {
    /// The registry a dataset entry (or the command line) names, as Harbor's client factory
    /// picks it: `path` (a `registry.json`, or a directory holding one); `url`, a `file://` one
    /// read as a path, Harbor's default registry URL meaning the hub, other `http(s)://` ones a
    /// JSON registry; neither, the hub.
    pub fn from_keys(url: Option<&str>, path: Option<&Path>) -> Result<RegistryLocation, RegistryError> {
        let path = match (url, path) {
            (Some(_), Some(_)) => return Err(RegistryError::BothGiven),
            (None, None) => return Ok(RegistryLocation::Hub(HubApi::from_env())),
            (None, Some(path)) => path.to_path_buf(),
            (Some(url), None) if url.trim_end_matches('/') == HARBOR_HUB_URL => {
                return Ok(RegistryLocation::Hub(HubApi::from_env()));
            }
            (Some(url), None) => match url.strip_prefix("file://") {
                // `file:///p` and `file://localhost/p`; a relative `file://p` reads as a path too.
                Some(rest) => PathBuf::from(rest.strip_prefix("localhost").unwrap_or(rest)),
                None if is_http(url) => return Ok(RegistryLocation::Json(url.to_string())),
                None => return Err(RegistryError::BadUrl { url: url.to_string() }),
            },
        };
        let path = std::path::absolute(&path).unwrap_or(path);
        let path = if path.is_dir() { path.join("registry.json") } else { path };
        Ok(RegistryLocation::File(path))
    }

    /// The registry `repo` names (with `registry_path` relative to the repository), or as
    /// [`RegistryLocation::from_keys`] picks it when there is no `repo`.
    pub fn from_dataset_keys(
        repo: Option<&str>,
        url: Option<&str>,
        path: Option<&Path>,
    ) -> Result<RegistryLocation, RegistryError> {
        let Some(repo) = repo else { return RegistryLocation::from_keys(url, path) };
        if url.is_some() {
            return Err(RegistryError::RepoAndUrl);
        }
        let relative = path.map(|p| p.to_string_lossy().into_owned());
        RepoSource::parse(repo, relative.as_deref())
            .map(RegistryLocation::Repo)
            .map_err(|message| RegistryError::BadRepo { source_text: repo.to_string(), message })
    }

    /// The registry file, for a registry that is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            RegistryLocation::File(path) => Some(path),
            _ => None,
        }
    }
}

/// An `http://` or `https://` URL with a host.
fn is_http(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    ["http://", "https://"].iter().any(|scheme| lower.strip_prefix(scheme).is_some_and(|rest| !rest.is_empty()))
}

impl std::fmt::Display for RegistryLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryLocation::File(path) => write!(f, "{}", path.display()),
            RegistryLocation::Json(url) => f.write_str(url),
            RegistryLocation::Hub(api) => write!(f, "the Harbor hub ({})", api.url),
            RegistryLocation::Repo(repo) => match &repo.reference {
                Some(reference) => write!(f, "{} in {}@{reference}", repo.registry_file, repo.git_url),
                None => write!(f, "{} in {}", repo.registry_file, repo.git_url),
            },
        }
    }
}

/// One task of a dataset, as the registry lists it (Harbor's `RegistryTaskId`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct RegistryTask {
    pub name: String,
    #[serde(default)]
    pub git_url: Option<String>,
    #[serde(default)]
    pub git_commit_id: Option<String>,
    pub path: String,
}

/// One version of a dataset (Harbor's `DatasetSpec`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
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
    /// Reads a registry file.
    pub fn read(location: &RegistryLocation) -> Result<Registry, RegistryError> {
        let Some(path) = location.path() else {
            return Err(RegistryError::NoResolver { registry: location.to_string() });
        };
        let text = read_checked(path)?;
        Registry::parse(location, &text)
    }

    /// Parses a registry's text (Harbor's `registry.json`: a list of datasets).
    pub fn parse(location: &RegistryLocation, text: &str) -> Result<Registry, RegistryError> {
        let malformed = |message: String| RegistryError::Malformed { registry: location.to_string(), message };
        let mut json = serde_json::Deserializer::from_str(text);
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
                registry: self.location.to_string(),
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
            registry: self.location.to_string(),
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
