//! Why a fetch failed: each kind names the repository, the commit or the path.

use std::path::PathBuf;

use crate::git::GitFailure;

/// Why the tasks could not all be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("git repository `{url}` cannot be reached: {failure}")]
    Unreachable { url: String, failure: GitFailure },
    #[error("git repository `{url}` has no commit {commit} (it may have been force-pushed away): {failure}")]
    CommitGone { url: String, commit: String, failure: GitFailure },
    #[error("git repository `{url}` at {commit} checked out {found} instead")]
    WrongCommit { url: String, commit: String, found: String },
    #[error("git repository `{url}` has no directory `{path}` at commit {commit} (a link is not followed)")]
    PathMissing { url: String, commit: String, path: String },
    #[error("`{path}` in git repository `{url}` at commit {commit} is not a task directory (it lacks {})", .missing.join(", "))]
    NotATask { url: String, commit: String, path: String, missing: Vec<String> },
    #[error("git repository `{url}` at {commit}: {failure}")]
    Git { url: String, commit: String, failure: GitFailure },
    #[error("the task cache at `{}`: {source}", .path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
