//! One orchestrator per job directory: an exclusive lock (`flock`) on `<job>/.terminus.lock`,
//! held by `run` and `resume` for as long as the job runs, and released by the kernel however
//! the process ends (even `kill -9`). A second `terminus` on the same directory is refused
//! instead of deleting the first one's trials and containers; `gc` asks the lock, not a PID,
//! whether a job is still running.
//!
//! The file also says who holds it (pid, host, since when), for the refusal's message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::layout::JobDir;
use serde::{Deserialize, Serialize};

/// Who holds a job's lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    pub since: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} on {}, since {}", self.pid, self.host, self.since)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("`{}` is in use by another terminus ({})", .dir.display(), .holder.as_ref().map_or_else(|| "its holder is unknown".to_string(), ToString::to_string))]
    Busy { dir: PathBuf, holder: Option<LockHolder> },
    #[error("cannot lock `{}`: {source}", .path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The held lock of a job directory; dropping it releases the lock.
#[derive(Debug)]
pub struct JobLock {
    _file: File,
}

/// This machine, as containers are labelled with it (`/etc/machine-id`, else the host name).
pub fn host_identity() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    read("/etc/machine-id").or_else(|| read("/proc/sys/kernel/hostname")).unwrap_or_else(|| "unknown".to_string())
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
}

impl JobLock {
    /// Takes the lock of `job_dir` (creating the directory and the file), or says who holds it.
    pub fn acquire(job_dir: &Path) -> Result<JobLock, LockError> {
        let path = JobDir::new(job_dir).lock_file();
        let io = |source| LockError::Io { path: path.clone(), source };
        std::fs::create_dir_all(job_dir).map_err(io)?;
        let mut file = open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::Busy { dir: job_dir.to_path_buf(), holder: Self::holder(job_dir) });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let holder =
            LockHolder { pid: std::process::id(), host: host_identity(), since: crate::time::iso(&crate::time::now()) };
        let text = serde_json::to_string(&holder).unwrap_or_default();
        file.set_len(0).and_then(|()| file.rewind()).and_then(|()| file.write_all(text.as_bytes())).map_err(io)?;
        Ok(JobLock { _file: file })
    }

    /// Who last took the lock (it may be gone).
    pub fn holder(job_dir: &Path) -> Option<LockHolder> {
        let mut text = String::new();
        File::open(JobDir::new(job_dir).lock_file()).ok()?.read_to_string(&mut text).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Whether a live process holds the lock of `job_dir` (a missing lock file: no).
    pub fn is_held(job_dir: &Path) -> bool {
        let Ok(file) = File::open(JobDir::new(job_dir).lock_file()) else { return false };
        matches!(file.try_lock_shared(), Err(TryLockError::WouldBlock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_named_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job");
        assert!(!JobLock::is_held(&job));
        let first = JobLock::acquire(&job).unwrap();
        assert!(JobLock::is_held(&job));
        match JobLock::acquire(&job) {
            Err(LockError::Busy { holder: Some(holder), .. }) => assert_eq!(holder.pid, std::process::id()),
            other => panic!("expected a refusal, got {other:?}"),
        }
        drop(first);
        assert!(!JobLock::is_held(&job));
        let again = JobLock::acquire(&job).unwrap();
        drop(again);
    }
}
