//! `--tasks-from DIR` of `trials replay` and `jobs regrade`: the tasks a replay runs, found in
//! DIR by the name each task goes by (its `task.toml`'s `[task].name`, else its directory's
//! name), as a result records it. DIR may be laid out like the dataset the job ran
//! (`DIR/<dir>`), by name (`DIR/org/name`), or be one task. The check before the job and the
//! trials use this one lookup; a task DIR lacks, or holds twice, is named before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use terminus_config::Task;

/// How deep below DIR tasks are looked for (`DIR/dataset/org/name`).
const MAX_DEPTH: usize = 4;

/// The tasks of a directory, by the name each goes by.
#[derive(Debug)]
pub struct TasksFrom {
    dir: PathBuf,
    by_name: BTreeMap<String, Vec<PathBuf>>,
}

impl TasksFrom {
    /// Indexes the task directories in `dir` (or `dir` itself, when it is one). Hidden
    /// directories are not entered, nor the inside of a task.
    pub fn index(dir: &Path) -> Result<TasksFrom, String> {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        if !dir.is_dir() {
            return Err(format!("--tasks-from: `{}` is not a directory", dir.display()));
        }
        let mut by_name: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let mut pending = vec![(dir.clone(), 0)];
        while let Some((at, depth)) = pending.pop() {
            if Task::is_task_dir(&at) {
                by_name.entry(Task::declared_name(&at)).or_default().push(at);
                continue;
            }
            if depth == MAX_DEPTH {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&at) else { continue };
            for entry in entries.flatten() {
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if !hidden && entry.path().is_dir() {
                    pending.push((entry.path(), depth + 1));
                }
            }
        }
        for paths in by_name.values_mut() {
            paths.sort();
        }
        Ok(TasksFrom { dir, by_name })
    }

    /// The directory of the task named `name`: found exactly once, or an error naming it.
    pub fn find(&self, name: &str) -> Result<&Path, String> {
        match self.by_name.get(name).map(Vec::as_slice) {
            Some([one]) => Ok(one),
            Some(many) => Err(format!(
                "--tasks-from: task `{name}` is in `{}` {} times: {}",
                self.dir.display(),
                many.len(),
                many.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ")
            )),
            None => {
                let known: Vec<&str> = self.by_name.keys().map(String::as_str).take(10).collect();
                let held = if known.is_empty() {
                    "it holds no task directory".to_string()
                } else {
                    let more = if self.by_name.len() > known.len() { ", …" } else { "" };
                    format!("it holds {} task(s): {}{more}", self.by_name.len(), known.join(", "))
                };
                Err(format!(
                    "--tasks-from: no task named `{name}` (by task.toml's [task].name, else its directory's name) in `{}`; {held}",
                    self.dir.display()
                ))
            }
        }
    }

    /// Every one of `names` found exactly once, or the first that is not.
    pub fn check<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<(), String> {
        names.into_iter().try_for_each(|name| self.find(name).map(|_| ()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(dir: &Path, declared: Option<&str>) {
        std::fs::create_dir_all(dir.join("environment")).unwrap();
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::write(dir.join("environment/Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.join("tests/test.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join("instruction.md"), "do it\n").unwrap();
        let toml = match declared {
            Some(name) => format!("version = \"1.0\"\n[task]\nname = \"{name}\"\n"),
            None => "version = \"1.0\"\n".to_string(),
        };
        std::fs::write(dir.join("task.toml"), toml).unwrap();
    }

    #[test]
    fn tasks_are_found_by_the_name_they_go_by_in_any_layout() {
        let root = tempfile::tempdir().unwrap();
        task(&root.path().join("flat/hello"), Some("hbbench/hello-world"));
        task(&root.path().join("flat/plain"), None);
        task(&root.path().join("byname/hbbench/hello-world"), Some("hbbench/hello-world"));
        task(&root.path().join("byname/.hidden/x"), Some("hbbench/other"));
        for layout in ["flat", "byname"] {
            let index = TasksFrom::index(&root.path().join(layout)).unwrap();
            let found = index.find("hbbench/hello-world").unwrap();
            assert!(found.starts_with(root.path().join(layout)), "{}", found.display());
            assert!(index.find("hbbench/other").is_err(), "hidden directories are not entered");
        }
        let flat = TasksFrom::index(&root.path().join("flat")).unwrap();
        assert_eq!(flat.find("plain").unwrap(), root.path().join("flat/plain"));
        let missing = flat.find("hello").unwrap_err();
        assert!(missing.contains("no task named `hello`") && missing.contains("hbbench/hello-world"), "{missing}");
        let one = TasksFrom::index(&root.path().join("flat/hello")).unwrap();
        assert!(one.find("hbbench/hello-world").is_ok(), "DIR may be the task itself");
    }

    #[test]
    fn a_task_held_twice_is_named_with_both_places() {
        let root = tempfile::tempdir().unwrap();
        task(&root.path().join("a/hello"), Some("org/hello"));
        task(&root.path().join("b/hello"), Some("org/hello"));
        let index = TasksFrom::index(root.path()).unwrap();
        let twice = index.check(["org/hello"]).unwrap_err();
        assert!(twice.contains("2 times") && twice.contains("a/hello") && twice.contains("b/hello"), "{twice}");
        assert!(TasksFrom::index(&root.path().join("none")).is_err());
    }
}
