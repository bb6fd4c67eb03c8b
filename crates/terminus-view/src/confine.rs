//! Every path the viewer opens comes from here, and none leaves the jobs directory.
//!
//! Two checks, both needed: names and relative paths from a request must be plain (no `..`, no
//! absolute paths, no hidden entries such as the lock file), and the path they make, with every
//! link resolved, must still lie below the directory it was asked under — so a symbolic link an
//! agent left in its artifacts cannot point the viewer at `/etc/passwd` or at another job.

use std::path::{Component, Path, PathBuf};

use crate::error::ViewError;

/// The jobs directory, resolved once.
#[derive(Clone, Debug)]
pub struct JobsRoot {
    root: PathBuf,
}

/// Whether `name` is one plain, visible directory entry name.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).components().count() == 1
}

impl JobsRoot {
    pub fn new(dir: &Path) -> std::io::Result<JobsRoot> {
        Ok(JobsRoot { root: dir.canonicalize()? })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// A job's directory, by its name.
    pub fn job(&self, name: &str) -> Result<PathBuf, ViewError> {
        if !is_plain_name(name) {
            return Err(ViewError::Refused(name.to_string()));
        }
        let dir = self.root.join(name);
        match within(&self.root, &dir) {
            Ok(dir) if dir.is_dir() => Ok(dir),
            Ok(_) | Err(ViewError::NoFile(_)) => Err(ViewError::NoJob(name.to_string())),
            Err(e) => Err(e),
        }
    }

    /// A trial's directory in a job.
    pub fn trial(&self, job: &str, trial: &str) -> Result<PathBuf, ViewError> {
        let job_dir = self.job(job)?;
        if !is_plain_name(trial) {
            return Err(ViewError::Refused(trial.to_string()));
        }
        match within(&job_dir, &job_dir.join(trial)) {
            Ok(dir) if dir.is_dir() => Ok(dir),
            Ok(_) | Err(ViewError::NoFile(_)) => {
                Err(ViewError::NoTrial { job: job.to_string(), trial: trial.to_string() })
            }
            Err(e) => Err(e),
        }
    }
}

/// `rel` (slash-separated, from a request) below `base`: plain components only, and the
/// resolved path inside `base`'s resolved path. The path need not be a file; it must exist.
pub fn below(base: &Path, rel: &str) -> Result<PathBuf, ViewError> {
    let refused = || ViewError::Refused(rel.to_string());
    if rel.is_empty() {
        return Ok(base.to_path_buf());
    }
    let mut path = base.to_path_buf();
    for part in rel.split('/') {
        if !is_plain_name(part) {
            return Err(refused());
        }
        path.push(part);
    }
    // `Path::components` would fold some of what the loop refuses; check the result too.
    if path.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        return Err(refused());
    }
    within(base, &path).map_err(|e| match e {
        ViewError::NoFile(_) => ViewError::NoFile(rel.to_string()),
        other => other,
    })
}

/// `path` with every link resolved, if that lies inside `base` (resolved too).
fn within(base: &Path, path: &Path) -> Result<PathBuf, ViewError> {
    let base = base.canonicalize().map_err(|_| ViewError::NoFile(base.display().to_string()))?;
    let resolved = path.canonicalize().map_err(|_| ViewError::NoFile(path.display().to_string()))?;
    if resolved.starts_with(&base) { Ok(resolved) } else { Err(ViewError::Refused(path.display().to_string())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, JobsRoot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs/j1/t1/agent")).unwrap();
        std::fs::write(dir.path().join("jobs/j1/t1/agent/trajectory.json"), "{}").unwrap();
        std::fs::write(dir.path().join("jobs/j1/.terminus.lock"), "{}").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        std::fs::create_dir_all(dir.path().join("jobs/j2/t9")).unwrap();
        std::fs::write(dir.path().join("jobs/j2/t9/result.json"), "{}").unwrap();
        let root = JobsRoot::new(&dir.path().join("jobs")).unwrap();
        (dir, root)
    }

    #[test]
    fn plain_names_and_paths_are_served() {
        let (_dir, root) = tree();
        let trial = root.trial("j1", "t1").unwrap();
        assert!(below(&trial, "agent/trajectory.json").unwrap().is_file());
        assert!(matches!(root.job("nope"), Err(ViewError::NoJob(_))));
        assert!(matches!(root.trial("j1", "nope"), Err(ViewError::NoTrial { .. })));
        assert!(matches!(below(&trial, "agent/missing.json"), Err(ViewError::NoFile(_))));
    }

    #[test]
    fn traversal_is_refused_in_every_spelling() {
        let (_dir, root) = tree();
        for name in ["..", ".", "../jobs", "a/b", "/etc", ".terminus.lock", "", "j1\0"] {
            assert!(matches!(root.job(name), Err(ViewError::Refused(_))), "{name:?}");
        }
        assert!(matches!(root.trial("j1", ".."), Err(ViewError::Refused(_))));
        let trial = root.trial("j1", "t1").unwrap();
        for rel in
            ["../../secret.txt", "../t1/agent", "agent/../../..", "/etc/passwd", "agent//x", "./agent", "agent/.."]
        {
            assert!(matches!(below(&trial, rel), Err(ViewError::Refused(_))), "{rel:?}");
        }
    }

    #[test]
    fn links_that_leave_are_refused() {
        let (dir, root) = tree();
        let trial = root.trial("j1", "t1").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), trial.join("agent/escape.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("jobs/j2/t9"), trial.join("agent/other")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("jobs/etc-job")).unwrap();
        assert!(matches!(below(&trial, "agent/escape.txt"), Err(ViewError::Refused(_))));
        assert!(matches!(below(&trial, "agent/other/result.json"), Err(ViewError::Refused(_))));
        assert!(matches!(root.job("etc-job"), Err(ViewError::Refused(_))));
        // A link that stays inside is fine.
        std::os::unix::fs::symlink("trajectory.json", trial.join("agent/alias.json")).unwrap();
        assert!(below(&trial, "agent/alias.json").is_ok());
    }
}
