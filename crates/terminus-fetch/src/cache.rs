//! The task cache on disk: `<tasks>/<key>/<name>` entries, each put in place by one rename, so
//! an entry that exists is complete; `<tasks>/.tmp-<key>` (an entry being staged) and
//! `<tasks>/.work-<key>` (a checkout) only while a fetch runs. A fetch holds `<tasks>/.lock`
//! (flock, released by the kernel however the process ends), so what a killed fetch left in
//! `.tmp-*` and `.work-*` is stale to the next one, which removes it first.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use crate::error::FetchError;

const LOCK: &str = ".lock";
const STAGING: &str = ".tmp-";
const WORK: &str = ".work-";

/// The held lock of a cache's tasks directory; dropping it releases the lock.
pub struct CacheLock {
    _file: File,
}

/// The cache's tasks directory, locked for one process's fetches.
pub struct LockedCache {
    tasks_dir: PathBuf,
    _lock: CacheLock,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FetchError + '_ {
    move |source| FetchError::Cache { path: path.to_path_buf(), source }
}

impl LockedCache {
    /// Locks `tasks_dir` (made if missing), waiting for another process's fetch to end (`waiting`
    /// is told first), then removes what interrupted fetches left.
    pub fn lock(tasks_dir: &Path, waiting: impl FnOnce()) -> Result<LockedCache, FetchError> {
        std::fs::create_dir_all(tasks_dir).map_err(io(tasks_dir))?;
        let path = tasks_dir.join(LOCK);
        let file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                waiting();
                file.lock().map_err(io(&path))?;
            }
            Err(TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        let cache = LockedCache { tasks_dir: tasks_dir.to_path_buf(), _lock: CacheLock { _file: file } };
        cache.remove_leftovers()?;
        Ok(cache)
    }

    /// Removes every staging and checkout directory: with the lock held, none is in use.
    fn remove_leftovers(&self) -> Result<(), FetchError> {
        let entries = std::fs::read_dir(&self.tasks_dir).map_err(io(&self.tasks_dir))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(STAGING) || name.starts_with(WORK) {
                tracing::info!(path = %entry.path().display(), "removing what an interrupted fetch left");
                remove(&entry.path())?;
            }
        }
        Ok(())
    }

    /// A fresh, empty checkout directory for the commit whose key is `key`.
    pub fn work_dir(&self, key: &str) -> Result<PathBuf, FetchError> {
        let path = self.tasks_dir.join(format!("{WORK}{key}"));
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        Ok(path)
    }

    /// Moves the checked-out task directory `task` into place as the entry `dest`
    /// (`<tasks>/<key>/<name>`): into `.tmp-<key>/<name>` first, then `.tmp-<key>` renamed to
    /// `<key>` in one step. False when the entry was already there (it is kept).
    pub fn install(&self, task: &Path, dest: &Path) -> Result<bool, FetchError> {
        let (Some(entry), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(io(dest)(std::io::Error::other("not a cache entry")));
        };
        if entry.exists() {
            return Ok(false);
        }
        let key = entry.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let staging = self.tasks_dir.join(format!("{STAGING}{key}"));
        std::fs::create_dir_all(&staging).map_err(io(&staging))?;
        std::fs::rename(task, staging.join(name)).map_err(io(task))?;
        std::fs::rename(&staging, entry).map_err(io(entry))?;
        Ok(true)
    }
}

/// Removes `path`, a directory or a file.
pub fn remove(path: &Path) -> Result<(), FetchError> {
    let removed = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}
