//! A task in a git repository at a pinned commit ([`GitSource`]), and where the task cache keeps
//! its copy ([`TaskCache`]): `<cache>/tasks/<key>/<task name>`, the key a hash of (repository,
//! commit, path), so the same task at the same commit is fetched once for every job and
//! dataset that names it. The cache is `TERMINUS_CACHE_DIR`, else `~/.cache/terminus`.
//!
//! Only the paths are computed here; fetching (git, the lock, the atomic rename into place) is
//! the terminus-fetch crate's.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The environment variable that moves the cache.
pub const CACHE_DIR_ENV: &str = "TERMINUS_CACHE_DIR";

/// One task directory of a git repository at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitSource {
    /// The repository as git reaches it (`https://…`, `file://…`, a path).
    pub git_url: String,
    /// A full commit id (40 or 64 hex digits), lower case.
    pub commit: String,
    /// The task's directory in the repository: relative, `/`-separated, without `.` or `..`.
    pub path: String,
}

/// Why a registry's (or a job file's) git task cannot be fetched as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GitSourceError {
    #[error("has no git_commit_id: terminus fetches tasks at pinned commits only (a full commit id)")]
    Unpinned,
    #[error("git_commit_id {0:?} is not a full commit id (40 or 64 hex digits)")]
    BadCommit(String),
    #[error("git_url {0:?} is not a repository address")]
    BadUrl(String),
    #[error("path {0:?} must be a directory inside the repository (relative, not leaving it)")]
    BadPath(String),
}

impl GitSource {
    /// Checks and normalises the three keys of a git task, as Harbor normalises them: `..`
    /// steps are folded, and may not leave the repository.
    pub fn new(git_url: &str, commit: Option<&str>, path: &str) -> Result<GitSource, GitSourceError> {
        // A URL starting with `-` would be read by git as an option.
        if git_url.trim().is_empty() || git_url.starts_with('-') || git_url.contains(['\n', '\0']) {
            return Err(GitSourceError::BadUrl(git_url.to_string()));
        }
        let commit = commit.ok_or(GitSourceError::Unpinned)?;
        let hex = commit.chars().all(|c| c.is_ascii_hexdigit());
        if !hex || !(commit.len() == 40 || commit.len() == 64) {
            return Err(GitSourceError::BadCommit(commit.to_string()));
        }
        Ok(GitSource {
            git_url: git_url.to_string(),
            commit: commit.to_ascii_lowercase(),
            path: normalize(path).ok_or_else(|| GitSourceError::BadPath(path.to_string()))?,
        })
    }

    /// The task's name: its directory's (Harbor's `GitTaskId.get_name`).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The cache key: the first 32 hex digits of SHA-256 over the three keys.
    pub fn key(&self) -> String {
        let mut hasher = Sha256::new();
        for part in [&self.git_url, &self.commit, &self.path] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    /// The (repository, commit) pair: the tasks that share it are fetched by one checkout.
    pub fn checkout_key(&self) -> String {
        GitSource { path: String::new(), ..self.clone() }.key()
    }
}

/// `path` relative, its `.` and empty steps dropped and its `..` steps folded; None when it is
/// absolute, leaves the repository, or names the repository itself.
fn normalize(path: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('\\') || path.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            // A leading `-` would read as an option in git's command lines.
            part if part.starts_with('-') => return None,
            part => parts.push(part),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Where fetched tasks are kept: the `tasks` directory of the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskCache {
    tasks_dir: PathBuf,
}

impl TaskCache {
    /// The cache of `TERMINUS_CACHE_DIR`, else of `~/.cache/terminus`; None without either.
    pub fn from_env() -> Option<TaskCache> {
        let dir = match std::env::var_os(CACHE_DIR_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache/terminus"),
        };
        Some(TaskCache::at(&dir))
    }

    /// The cache whose root is `dir` (its tasks in `dir/tasks`).
    pub fn at(dir: &Path) -> TaskCache {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        TaskCache { tasks_dir: dir.join("tasks") }
    }

    pub fn tasks_dir(&self) -> &Path {
        &self.tasks_dir
    }

    /// Where `task` is once fetched: `<tasks>/<key>/<name>`.
    pub fn entry(&self, task: &GitSource) -> PathBuf {
        self.tasks_dir.join(task.key()).join(task.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn sources_are_checked_and_normalised() {
        let source = GitSource::new("file:///r.git", Some(&COMMIT.to_uppercase()), "./tasks//a/../hello/").unwrap();
        assert_eq!((source.commit.as_str(), source.path.as_str(), source.name()), (COMMIT, "tasks/hello", "hello"));
        assert_eq!(GitSource::new("u", None, "t"), Err(GitSourceError::Unpinned));
        assert!(matches!(GitSource::new("u", Some("head"), "t"), Err(GitSourceError::BadCommit(_))));
        assert!(matches!(GitSource::new("u", Some("0123abc"), "t"), Err(GitSourceError::BadCommit(_))));
        assert!(matches!(GitSource::new("--upload-pack=x", Some(COMMIT), "t"), Err(GitSourceError::BadUrl(_))));
        for bad in ["/etc", "..", "a/../..", "", ".", "-x/t"] {
            assert!(matches!(GitSource::new("u", Some(COMMIT), bad), Err(GitSourceError::BadPath(_))), "{bad}");
        }
    }

    #[test]
    fn cache_keys_tell_repository_commit_and_path_apart() {
        let source = GitSource::new("file:///r.git", Some(COMMIT), "tasks/hello").unwrap();
        let key = source.key();
        assert_eq!(key.len(), 32);
        assert_eq!(key, GitSource::new("file:///r.git", Some(COMMIT), "tasks/./hello").unwrap().key(), "same task");
        let other_commit = GitSource { commit: COMMIT.replace('0', "f"), ..source.clone() };
        let other_path = GitSource { path: "tasks/hello2".into(), ..source.clone() };
        let other_url = GitSource { git_url: "file:///s.git".into(), ..source.clone() };
        for other in [&other_commit, &other_path, &other_url] {
            assert_ne!(other.key(), key);
        }
        assert_eq!(source.checkout_key(), other_path.checkout_key(), "one checkout serves both paths");
        assert_ne!(source.checkout_key(), other_commit.checkout_key());
        let cache = TaskCache::at(Path::new("/c"));
        assert_eq!(cache.entry(&source), Path::new("/c/tasks").join(key).join("hello"));
    }
}
