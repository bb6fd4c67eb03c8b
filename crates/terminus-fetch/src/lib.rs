//! Registry datasets resolved over the network ([`NetworkResolver`], `registry.rs`), and
//! fetching a job's git tasks (registry datasets, `tasks` with `git_url`) into the task cache
//! before the job starts: [`fetch`]. A task already in the cache is used as it is, offline; the
//! others are fetched grouped by (repository, commit), one shallow, blob-filtered, sparse
//! checkout of exactly their paths each, verified (the checkout is the pinned commit; each path
//! is a task directory) and moved into place atomically (`cache.rs`). The git command line runs
//! in `git.rs`, the only place this crate starts a program.
//!
//! Errors are kinds, each naming the repository, the commit or the path: a repository that
//! cannot be reached, a commit it does not have, a path missing at the commit, a path that is
//! not a task. Which of the first two a failed fetch is, a second, cheap `git ls-remote` of the
//! repository decides by its exit status.

mod cache;
mod error;
mod git;
mod registry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use terminus_config::registry::GitSource;
use terminus_config::{Task, TaskRef};

pub use cache::LockedCache;
pub use error::FetchError;
pub use git::GitFailure;
pub use registry::{DatasetSummary, NetworkResolver, TIMEOUT_ENV};

/// What a fetch is doing, for a progress display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchEvent {
    /// `tasks` git tasks in all, `missing` of them not in the cache.
    Planned { tasks: usize, missing: usize },
    /// Another process holds the cache's lock; this one waits for it.
    Waiting { cache: PathBuf },
    /// One checkout of `tasks` tasks begins.
    Checkout { git_url: String, commit: String, tasks: usize },
    /// A task is in place at `path`.
    Placed { name: String, path: PathBuf },
}

/// What a fetch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Tasks fetched by this call.
    pub fetched: usize,
    /// Tasks found in the cache.
    pub cached: usize,
}

/// One task to fetch: where from, and its cache entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Wanted {
    git: GitSource,
    dest: PathBuf,
}

/// Makes sure every git task of `tasks` is in the cache, fetching those that are not; `on`
/// hears of the progress. Tasks without a repository are left alone.
pub fn fetch(tasks: &[TaskRef], on: &mut dyn FnMut(FetchEvent)) -> Result<FetchReport, FetchError> {
    let mut wanted: Vec<Wanted> =
        tasks.iter().filter_map(|t| Some(Wanted { git: t.git.clone()?, dest: t.path.clone() })).collect();
    wanted.sort();
    wanted.dedup();
    let missing = |wanted: &[Wanted]| wanted.iter().filter(|w| !w.dest.is_dir()).cloned().collect::<Vec<_>>();
    let first = missing(&wanted);
    on(FetchEvent::Planned { tasks: wanted.len(), missing: first.len() });
    let mut report = FetchReport { fetched: 0, cached: wanted.len() - first.len() };
    // Entries of one cache share its tasks directory: `<tasks>/<key>/<name>`.
    let mut by_cache: BTreeMap<PathBuf, Vec<Wanted>> = BTreeMap::new();
    for want in first {
        let tasks_dir = want.dest.parent().and_then(Path::parent).unwrap_or(Path::new("/")).to_path_buf();
        by_cache.entry(tasks_dir).or_default().push(want);
    }
    for (tasks_dir, wanted) in by_cache {
        let cache = LockedCache::lock(&tasks_dir, || on(FetchEvent::Waiting { cache: tasks_dir.clone() }))?;
        // Another process may have fetched some while this one waited.
        let still = missing(&wanted);
        report.cached += wanted.len() - still.len();
        let mut by_commit: BTreeMap<(String, String), Vec<Wanted>> = BTreeMap::new();
        for want in still {
            by_commit.entry((want.git.git_url.clone(), want.git.commit.clone())).or_default().push(want);
        }
        for ((url, commit), group) in by_commit {
            on(FetchEvent::Checkout { git_url: url.clone(), commit: commit.clone(), tasks: group.len() });
            report.fetched += fetch_commit(&cache, &group, on)?;
        }
    }
    Ok(report)
}

/// Fetches the tasks of `group`, all of one repository at one commit, by one checkout; how
/// many it placed.
fn fetch_commit(cache: &LockedCache, group: &[Wanted], on: &mut dyn FnMut(FetchEvent)) -> Result<usize, FetchError> {
    let work = cache.work_dir(&group[0].git.checkout_key())?;
    let placed = check_out_and_place(cache, &work, group, on);
    // On success or failure alike: what is left of the checkout is of no further use.
    cache::remove(&work)?;
    placed
}

fn check_out_and_place(
    cache: &LockedCache,
    work: &Path,
    group: &[Wanted],
    on: &mut dyn FnMut(FetchEvent),
) -> Result<usize, FetchError> {
    let (url, commit) = (group[0].git.git_url.as_str(), group[0].git.commit.as_str());
    let at = Some(work);
    let failed = |failure| FetchError::Git { url: url.to_string(), commit: commit.to_string(), failure };
    git::run(at, ["init", "--quiet"], None).map_err(failed)?;
    git::run(at, ["remote", "add", "origin", url], None).map_err(failed)?;
    if let Err(failure) =
        git::run(at, ["fetch", "--quiet", "--depth", "1", "--filter=blob:none", "origin", commit], None)
    {
        return Err(match git::run(None, ["ls-remote", "--", url, "HEAD"], None) {
            Err(GitFailure::NotInstalled(e)) => failed(GitFailure::NotInstalled(e)),
            Err(unreachable) => FetchError::Unreachable { url: url.to_string(), failure: unreachable },
            Ok(_) => FetchError::CommitGone { url: url.to_string(), commit: commit.to_string(), failure },
        });
    }
    let paths: Vec<&str> = group.iter().map(|w| w.git.path.as_str()).collect();
    // Each path as a literal pattern anchored at the root: `/tasks/a/` (its directory only).
    let patterns: String = paths.iter().map(|p| format!("/{}/\n", escape_pattern(p))).collect();
    git::run(at, ["sparse-checkout", "set", "--no-cone", "--stdin"], Some(&patterns)).map_err(failed)?;
    git::run(at, ["checkout", "--quiet", "--detach", commit], None).map_err(failed)?;
    let found = git::run(at, ["rev-parse", "HEAD"], None).map_err(failed)?;
    if found != commit {
        return Err(FetchError::WrongCommit { url: url.to_string(), commit: commit.to_string(), found });
    }
    // Deepest first: a task inside another task's directory moves out before its parent does.
    let mut order: Vec<&Wanted> = group.iter().collect();
    order.sort_by_key(|w| std::cmp::Reverse(w.git.path.matches('/').count()));
    let mut placed = 0;
    for want in order {
        let dir = work.join(&want.git.path);
        if !is_real_dir(work, &want.git.path) {
            let path = want.git.path.clone();
            return Err(FetchError::PathMissing { url: url.to_string(), commit: commit.to_string(), path });
        }
        if !Task::is_task_dir(&dir) {
            return Err(FetchError::NotATask {
                url: url.to_string(),
                commit: commit.to_string(),
                path: want.git.path.clone(),
                missing: Task::missing_parts(&dir),
            });
        }
        if cache.install(&dir, &want.dest)? {
            placed += 1;
        }
        on(FetchEvent::Placed { name: want.git.name().to_string(), path: want.dest.clone() });
    }
    Ok(placed)
}

/// Whether `path` (relative, `/`-separated) is a directory under `root` with no link on the way:
/// a repository's link (to `/`, to `~`) would otherwise have a task moved in from outside it.
fn is_real_dir(root: &Path, path: &str) -> bool {
    let mut at = root.to_path_buf();
    path.split('/').all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
    })
}

/// `path` with the characters gitignore patterns give a meaning escaped.
fn escape_pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
