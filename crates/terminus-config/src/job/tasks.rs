//! Which tasks a job names: paths, dataset directories, filters.

use std::path::{Path, PathBuf};

use super::load::{absolute, dir_name};
use super::*;
use crate::error::ConfigError;
use crate::raw::RawJob;
use crate::task::Task;

pub(super) fn resolve_tasks(path: &Path, raw: &RawJob) -> Result<Vec<TaskRef>, ConfigError> {
    let mut tasks = Vec::new();
    for (idx, task) in raw.tasks.iter().enumerate() {
        let key = format!("tasks[{idx}].path");
        let Some(task_path) = &task.path else {
            let what =
                if task.name.is_some() { "registry tasks are not supported; give a local path" } else { "is required" };
            return Err(ConfigError::invalid(path, key, what));
        };
        if !Task::is_task_dir(task_path) {
            return Err(ConfigError::invalid(
                path,
                key,
                format!(
                    "{} is not a task directory (it lacks {})",
                    task_path.display(),
                    Task::missing_parts(task_path).join(", ")
                ),
            ));
        }
        tasks.push(TaskRef { path: absolute(task_path), name: dir_name(task_path), source: task.source.clone() });
    }
    for (idx, dataset) in raw.datasets.iter().enumerate() {
        let key = |k: &str| format!("datasets[{idx}].{k}");
        let Some(dataset_path) = &dataset.path else {
            let what = if dataset.name.is_some() {
                "registry datasets are not supported; give a local path"
            } else {
                "is required"
            };
            return Err(ConfigError::invalid(path, key("path"), what));
        };
        let entries = std::fs::read_dir(dataset_path).map_err(|e| {
            ConfigError::invalid(path, key("path"), format!("cannot list {}: {e}", dataset_path.display()))
        })?;
        // Sorted, so that `n_tasks` picks the same subset on every machine.
        let mut dirs: Vec<PathBuf> =
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| Task::is_task_dir(p)).collect();
        dirs.sort();
        let include = dataset.task_names.clone().unwrap_or_default();
        let exclude = dataset.exclude_task_names.clone().unwrap_or_default();
        let available: Vec<String> = dirs.iter().map(|d| dir_name(d)).collect();
        dirs.retain(|d| {
            let name = dir_name(d);
            (include.is_empty() || include.iter().any(|p| crate::glob::matches(p, &name)))
                && !exclude.iter().any(|p| crate::glob::matches(p, &name))
        });
        if !include.is_empty() && dirs.is_empty() {
            let sample: Vec<&str> = available.iter().take(5).map(String::as_str).collect();
            return Err(ConfigError::invalid(
                path,
                key("task_names"),
                format!("matches no task; available: {}", sample.join(", ")),
            ));
        }
        if let Some(n) = dataset.n_tasks {
            if n < 0 {
                return Err(ConfigError::invalid(path, key("n_tasks"), "must not be negative"));
            }
            dirs.truncate(n as usize);
        }
        if dirs.is_empty() {
            // A directory that is almost a task was most likely meant as one: say what it lacks.
            let missing = Task::missing_parts(dataset_path);
            let hint = if missing.len() < 4 {
                format!(" and is not a task directory itself (it lacks {})", missing.join(", "))
            } else {
                String::new()
            };
            return Err(ConfigError::invalid(
                path,
                key("path"),
                format!("{} holds no task directory{hint}", dataset_path.display()),
            ));
        }
        let source = dir_name(&absolute(dataset_path));
        tasks.extend(dirs.iter().map(|d| TaskRef {
            path: absolute(d),
            name: dir_name(d),
            source: Some(source.clone()),
        }));
    }
    Ok(tasks)
}
