//! Which tasks a job names: task directories, tasks in git repositories, dataset directories,
//! registry datasets, and the filters every dataset takes.

use std::path::{Path, PathBuf};

use super::paths::dir_name;
use super::spec::*;
use crate::error::ConfigError;
use crate::raw::{RawDataset, RawJob, RawTask};
use crate::registry::{
    self, DatasetSpec, GitSource, GitSourceError, RegistryError, RegistryLocation, RegistryTask, TaskCache, TaskProblem,
};
use crate::task::Task;

pub(super) fn resolve_tasks(
    path: &Path,
    raw: &RawJob,
    warnings: &mut Vec<String>,
) -> Result<Vec<TaskRef>, ConfigError> {
    let cache = TaskCache::from_env();
    let mut tasks = Vec::new();
    for (idx, task) in raw.tasks.iter().enumerate() {
        tasks.push(listed_task(path, idx, task, cache.as_ref())?);
    }
    for (idx, dataset) in raw.datasets.iter().enumerate() {
        let key = |k: &str| format!("datasets[{idx}].{k}");
        if dataset.repo.is_some() && dataset.name.is_none() {
            let why = RegistryError::ImplicitRepoDataset.to_string();
            return Err(ConfigError::invalid(path, key("repo"), why));
        }
        match (&dataset.path, &dataset.name) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    path,
                    key("name"),
                    "give either path (a directory of tasks) or name (a registry dataset), not both",
                ));
            }
            (Some(dir), None) => {
                for (name, set) in [
                    ("version", dataset.version.is_some()),
                    ("registry_url", dataset.registry_url.is_some()),
                    ("registry_path", dataset.registry_path.is_some()),
                    ("registry", dataset.registry.is_some()),
                ] {
                    if set {
                        warnings.push(format!(
                            "{}: has a meaning only for registry datasets (name); this one is a local path: ignored",
                            key(name)
                        ));
                    }
                }
                tasks.extend(local_dataset(path, idx, dataset, dir)?);
            }
            (None, Some(name)) => tasks.extend(registry_dataset(path, idx, dataset, name, cache.as_ref(), warnings)?),
            (None, None) => {
                return Err(ConfigError::invalid(path, key("path"), "is required (or name, for a registry dataset)"));
            }
        }
    }
    Ok(tasks)
}

/// One `tasks` entry: a task directory, or a directory of a git repository at a commit.
fn listed_task(path: &Path, idx: usize, task: &RawTask, cache: Option<&TaskCache>) -> Result<TaskRef, ConfigError> {
    let key = |k: &str| format!("tasks[{idx}].{k}");
    let Some(task_path) = &task.path else {
        let what = if task.name.is_some() {
            "package tasks (org/name) come from the Harbor hub, which terminus cannot reach; give a local path, or a path in a git repository with git_url and git_commit_id"
        } else {
            "is required"
        };
        return Err(ConfigError::invalid(path, key("path"), what));
    };
    match (&task.git_url, &task.git_commit_id) {
        (Some(url), commit) => {
            let git = GitSource::new(url, commit.as_deref(), &task_path.to_string_lossy()).map_err(|e| {
                let named = match e {
                    GitSourceError::BadUrl(_) => "git_url",
                    GitSourceError::BadPath(_) => "path",
                    GitSourceError::Unpinned | GitSourceError::BadCommit(_) => "git_commit_id",
                };
                ConfigError::invalid(path, key(named), e.to_string())
            })?;
            let cache =
                cache.ok_or_else(|| ConfigError::invalid(path, key("git_url"), RegistryError::NoCache.to_string()))?;
            return Ok(TaskRef::fetched(cache, git, task.source.clone()));
        }
        (None, Some(_)) => return Err(ConfigError::invalid(path, key("git_commit_id"), "needs git_url")),
        (None, None) => {}
    }
    if !Task::is_task_dir(task_path) {
        return Err(ConfigError::invalid(
            path,
            key("path"),
            format!(
                "{} is not a task directory (it lacks {})",
                task_path.display(),
                Task::missing_parts(task_path).join(", ")
            ),
        ));
    }
    Ok(TaskRef::local(task_path, task.source.clone()))
}

/// The task directories of a dataset directory that its filters keep, in name order (so that
/// `n_tasks` picks the same subset on every machine).
fn local_dataset(path: &Path, idx: usize, dataset: &RawDataset, dir: &Path) -> Result<Vec<TaskRef>, ConfigError> {
    let key = |k: &str| format!("datasets[{idx}].{k}");
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ConfigError::invalid(path, key("path"), format!("cannot list {}: {e}", dir.display())))?;
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| Task::is_task_dir(p)).collect();
    dirs.sort();
    let dirs = select(path, idx, dataset, dirs.into_iter().map(|d| (dir_name(&d), d)).collect())?;
    if dirs.is_empty() {
        // A directory that is almost a task was most likely meant as one: say what it lacks.
        let missing = Task::missing_parts(dir);
        let hint = if missing.len() < 4 {
            format!(" and is not a task directory itself (it lacks {})", missing.join(", "))
        } else {
            String::new()
        };
        return Err(ConfigError::invalid(
            path,
            key("path"),
            format!("{} holds no task directory{hint}", dir.display()),
        ));
    }
    let source = dir_name(dir);
    Ok(dirs.iter().map(|d| TaskRef::local(d, Some(source.clone()))).collect())
}

/// The tasks of a registry dataset that its filters keep, in the registry's order.
fn registry_dataset(
    path: &Path,
    idx: usize,
    dataset: &RawDataset,
    name: &str,
    cache: Option<&TaskCache>,
    warnings: &mut Vec<String>,
) -> Result<Vec<TaskRef>, ConfigError> {
    let nested = dataset.registry.clone().unwrap_or_default();
    let url = dataset.registry_url.as_deref().or(nested.url.as_deref());
    let registry_path = dataset.registry_path.as_deref().or(nested.path.as_deref());
    let at = |source: RegistryError| {
        let named = match &source {
            RegistryError::UnknownVersion { .. } => "version",
            RegistryError::UnknownDataset { .. }
            | RegistryError::Package { .. }
            | RegistryError::Task { .. }
            | RegistryError::NoCache => "name",
            RegistryError::BadRepo { .. } | RegistryError::RepoAndUrl => "repo",
            _ if dataset.repo.is_some() => "repo",
            _ if url.is_some() => "registry_url",
            _ if registry_path.is_some() => "registry_path",
            // Neither: the Harbor hub, asked for this name.
            _ => "name",
        };
        ConfigError::Registry {
            path: path.to_path_buf(),
            key: format!("datasets[{idx}].{named}"),
            source: Box::new(source),
        }
    };
    let location = RegistryLocation::from_dataset_keys(dataset.repo.as_deref(), url, registry_path).map_err(at)?;
    let resolution = registry::resolve(&location, name, dataset.version.as_deref()).map_err(at)?;
    if let Some(why) = &resolution.from_cache {
        warnings.push(format!("datasets[{idx}]: {name}@{} resolved from the cache: {why}", resolution.spec.version));
    }
    let spec = resolution.spec;
    let tasks = select(path, idx, dataset, spec.task_refs(&location, cache).map_err(at)?)?;
    for task in &tasks {
        spec.check_local(&location, task).map_err(at)?;
    }
    Ok(tasks)
}

/// The entries a dataset's filters keep, in their order (Harbor's filtering): those whose name
/// matches a `task_names` glob (one at least must), less those matching an
/// `exclude_task_names` glob, then the first `n_tasks`.
fn select<T>(path: &Path, idx: usize, dataset: &RawDataset, entries: Vec<(String, T)>) -> Result<Vec<T>, ConfigError> {
    let key = |k: &str| format!("datasets[{idx}].{k}");
    let include = dataset.task_names.clone().unwrap_or_default();
    let exclude = dataset.exclude_task_names.clone().unwrap_or_default();
    let mut available: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
    available.sort();
    let matches = |patterns: &[String], name: &str| patterns.iter().any(|p| crate::glob::matches(p, name));
    if !include.is_empty() && !entries.iter().any(|(name, _)| matches(&include, name)) {
        let sample = available.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        return Err(ConfigError::invalid(
            path,
            key("task_names"),
            format!("matches no task of the {} available; for example: {sample}", available.len()),
        ));
    }
    let kept: Vec<bool> = entries
        .iter()
        .map(|(name, _)| (include.is_empty() || matches(&include, name)) && !matches(&exclude, name))
        .collect();
    let mut out: Vec<T> = entries.into_iter().zip(kept).filter(|(_, keep)| *keep).map(|((_, t), _)| t).collect();
    if let Some(n) = dataset.n_tasks {
        if n < 0 {
            return Err(ConfigError::invalid(path, key("n_tasks"), "must not be negative"));
        }
        out.truncate(n as usize);
    }
    Ok(out)
}

/// `rel` under `base`, when it stays there: relative, no `..` that climbs out, and (once it
/// exists) no link that resolves outside.
fn inside(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut depth = 0usize;
    for part in Path::new(rel).components() {
        match part {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => depth = depth.checked_sub(1)?,
            std::path::Component::RootDir | std::path::Component::Prefix(_) => return None,
        }
    }
    let path = base.join(rel);
    if let (Ok(resolved), Ok(root)) = (path.canonicalize(), base.canonicalize())
        && !resolved.starts_with(&root)
    {
        return None;
    }
    Some(path)
}

/// A registry dataset's tasks as the job names them (here, not in the registry module, so the
/// registry knows nothing of jobs and tasks).
impl DatasetSpec {
    /// This dataset's tasks, each with the name Harbor filters by (its directory's name), in the
    /// registry's order. A git task reads from its cache entry; a local one from its path,
    /// relative to the registry file's directory.
    pub fn task_refs(
        &self,
        registry: &RegistryLocation,
        cache: Option<&TaskCache>,
    ) -> Result<Vec<(String, TaskRef)>, RegistryError> {
        let problem = |task: &RegistryTask, problem: TaskProblem| RegistryError::Task {
            registry: registry.to_string(),
            dataset: format!("{}@{}", self.name, self.version),
            task: task.name.clone(),
            problem,
        };
        // Local tasks are beside a registry file; a network registry can have none.
        let base = registry.path().map(|file| file.parent().unwrap_or(Path::new("/")));
        let mut out = Vec::with_capacity(self.tasks.len());
        for task in &self.tasks {
            let task_ref = match &task.git_url {
                Some(url) => {
                    let git = GitSource::new(url, task.git_commit_id.as_deref(), &task.path)
                        .map_err(|e| problem(task, e.into()))?;
                    TaskRef::fetched(cache.ok_or(RegistryError::NoCache)?, git, Some(self.name.clone()))
                }
                None => {
                    let base = base.ok_or_else(|| problem(task, TaskProblem::LocalFromRemote))?;
                    let path = inside(base, &task.path)
                        .ok_or_else(|| problem(task, TaskProblem::OutsideRegistry { path: task.path.clone() }))?;
                    TaskRef::local(&path, Some(self.name.clone()))
                }
            };
            let task_ref = TaskRef { dataset_version: Some(self.version.clone()), ..task_ref };
            out.push((task_ref.name.clone(), task_ref));
        }
        Ok(out)
    }

    /// Checks that a local task (one with no repository) is a task directory; git tasks are
    /// checked when fetched.
    pub fn check_local(&self, registry: &RegistryLocation, task: &TaskRef) -> Result<(), RegistryError> {
        if task.git.is_some() || Task::is_task_dir(&task.path) {
            return Ok(());
        }
        Err(RegistryError::Task {
            registry: registry.to_string(),
            dataset: format!("{}@{}", self.name, self.version),
            task: task.name.clone(),
            problem: TaskProblem::NotATask { path: task.path.clone(), missing: Task::missing_parts(&task.path) },
        })
    }
}
