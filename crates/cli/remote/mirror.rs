//! `terminus view --server URL`: the viewer over a job service. Every two seconds the service's
//! jobs are mirrored into a private temporary directory laid out as a jobs directory — each
//! job's `config.json` and `result.json`, each ended trial's files with its earlier attempts
//! under `attempts/` — and the ordinary viewer serves that directory. A job the service still
//! runs holds its mirror's job lock, so the viewer shows it running; a trial appears once its
//! attempt has ended.
//!
//! What the service sends is checked before it touches the disk: job ids are UUIDs, trial
//! names and artifact paths are plain relative names (no `..`, no leading `.`), each file is at
//! most [`FILE_LIMIT`] bytes, and a trial's files are swapped in whole.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use terminus_actors::files::replace_file;
use terminus_actors::lock::JobLock;

use super::client::{JSON_LIMIT, RemoteError, address, download, encode, request};
use crate::args::ViewArgs;
use crate::exit;

/// The most one mirrored file may hold.
const FILE_LIMIT: u64 = 512 << 20;

/// The most pages one listing is read to.
const PAGE_LIMIT: usize = 1000;

/// How often the service is asked what changed.
const EVERY: Duration = Duration::from_secs(2);

/// The files a job directory of the mirror holds beside its trials.
const JOB_FILES: [&str; 3] = ["config.json", "result.json", ".terminus.lock"];

/// A name the service gave, usable as one path component of ours.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !JOB_FILES.contains(&name) && !name.contains(['/', '\\', '\0'])
}

/// A relative path the service gave, usable under a trial's directory.
fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(n) if n.to_str().is_some_and(|n| !n.starts_with(".mirror-"))))
}

/// Why a sync stopped.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("the mirror `{path}`: {source}")]
    Disk { path: PathBuf, source: std::io::Error },
}

fn disk(path: &Path) -> impl FnOnce(std::io::Error) -> SyncError + '_ {
    move |source| SyncError::Disk { path: path.to_path_buf(), source }
}

struct Mirror {
    addr: String,
    root: PathBuf,
    /// Each job's `updated_at` when it was last mirrored.
    jobs: HashMap<String, String>,
    /// Each trial's attempts (`id state updated_at`) when it was last mirrored.
    trials: HashMap<(String, String), String>,
    /// The mirrors' locks of the jobs the service runs.
    locks: HashMap<String, JobLock>,
}

impl Mirror {
    /// Every item of a listing, page after page.
    fn list(&self, path: &str, filter: &str) -> Result<Vec<Value>, RemoteError> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..PAGE_LIMIT {
            let mut query = format!("{path}?page_size=100{filter}");
            if let Some(token) = &token {
                query.push_str(&format!("&page_token={}", encode(token)));
            }
            let page = request(&self.addr, "GET", &query, None, None)?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next_page_token"].as_str() {
                Some(next) if !next.is_empty() && seen.insert(next.to_string()) => token = Some(next.to_string()),
                _ => return Ok(items),
            }
        }
        Ok(items)
    }

    /// Brings every job of the service up to date. A job that cannot be mirrored now is tried
    /// again at the next sync and the others go on: the first such failure is returned as
    /// `Ok(Some(_))`; `Err` when the service's jobs cannot be listed at all.
    fn sync(&mut self) -> Result<Option<SyncError>, SyncError> {
        let mut failed = None;
        for job in self.list("/jobs", "")? {
            let Some(id) = job["id"].as_str().filter(|id| uuid::Uuid::parse_str(id).is_ok()) else { continue };
            let updated = job["updated_at"].as_str().unwrap_or_default().to_string();
            if self.jobs.get(id) == Some(&updated) {
                continue;
            }
            let dir = self.root.join(id);
            match self.job(id, &dir) {
                Ok(()) => {}
                // The service is gone: the next sync tries everything again.
                Err(e @ SyncError::Remote(RemoteError::Unreachable { .. })) => return Err(e),
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            }
            let live = !matches!(job["state"].as_str(), Some("finished" | "cancelled"));
            if live && !self.locks.contains_key(id) {
                if let Ok(lock) = JobLock::acquire(&dir) {
                    self.locks.insert(id.to_string(), lock);
                }
            } else if !live {
                self.locks.remove(id);
            }
            self.jobs.insert(id.to_string(), updated);
        }
        Ok(failed)
    }

    fn job(&mut self, id: &str, dir: &Path) -> Result<(), SyncError> {
        std::fs::create_dir_all(dir).map_err(disk(dir))?;
        let detail = request(&self.addr, "GET", &format!("/jobs/{id}"), None, None)?;
        let lock_uri = detail["job"]["lock_uri"].as_str().unwrap_or_default().to_string();
        let config = dir.join("config.json");
        if !config.exists() && !lock_uri.is_empty() {
            let bytes = download(&self.addr, &lock_uri, JSON_LIMIT)?;
            replace_file(&config, &bytes).map_err(disk(&config))?;
        }
        let mut trials: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for rollout in self.list("/rollouts", &format!("&job_ids={id}"))? {
            if let Some(name) = rollout["name"].as_str().filter(|n| plain_name(n)) {
                trials.entry(name.to_string()).or_default().push(rollout);
            }
        }
        for (name, attempts) in trials {
            let ended = attempts.iter().all(|a| matches!(a["state"].as_str(), Some("finished" | "cancelled")));
            if !ended {
                continue;
            }
            let mut marks: Vec<String> =
                attempts.iter().map(|a| format!("{} {} {}", a["id"], a["state"], a["updated_at"])).collect();
            marks.sort();
            let signature = marks.join("\n");
            let key = (id.to_string(), name.clone());
            if self.trials.get(&key) == Some(&signature) {
                continue;
            }
            self.trial(dir, &name, &attempts)?;
            self.trials.insert(key, signature);
        }
        // The job's `result.json` beside its config, last: the viewer shows a job with a
        // result and no lock as ended, so its trials are in place first (a `terminus serve`;
        // another service may not serve it, and the job then shows without its totals).
        if let Some(result_uri) = lock_uri.strip_suffix("/config.json").map(|d| format!("{d}/result.json")) {
            match download(&self.addr, &result_uri, JSON_LIMIT) {
                Ok(bytes) => {
                    let path = dir.join("result.json");
                    replace_file(&path, &bytes).map_err(disk(&path))?;
                }
                Err(RemoteError::Refused { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// A trial's files, every attempt of it, fetched aside and then swapped in.
    fn trial(&self, job_dir: &Path, name: &str, attempts: &[Value]) -> Result<(), SyncError> {
        let staging = job_dir.join(format!(".mirror-{name}"));
        let _ = std::fs::remove_dir_all(&staging);
        for attempt in attempts {
            let Some(rollout_id) = attempt["id"].as_str().filter(|i| uuid::Uuid::parse_str(i).is_ok()) else {
                continue;
            };
            let detail = request(&self.addr, "GET", &format!("/rollouts/{rollout_id}"), None, None)?;
            let rollout = &detail["rollout"];
            // `retry_ids`: every attempt of the trial, the latest first.
            let ids: Vec<&str> =
                rollout["retry_ids"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let position = ids.iter().position(|i| *i == rollout_id).unwrap_or(0);
            let target = match position {
                0 => staging.clone(),
                n => staging.join("attempts").join((ids.len() - 1 - n).to_string()),
            };
            std::fs::create_dir_all(&target).map_err(disk(&target))?;
            for (path, uri) in rollout["artifacts"].as_object().into_iter().flatten() {
                let Some(uri) = uri.as_str() else { continue };
                if path.ends_with('/') || !plain_path(path) {
                    continue;
                }
                let bytes = match download(&self.addr, uri, FILE_LIMIT) {
                    Ok(bytes) => bytes,
                    Err(e @ RemoteError::Unreachable { .. }) => return Err(e.into()),
                    // One file the service cannot give (gone since, or too large) is left out;
                    // the rest of the trial is shown.
                    Err(e) => {
                        tracing::warn!(trial = %name, file = %path, error = %e, "a file of the trial is not mirrored");
                        continue;
                    }
                };
                let file = target.join(path);
                replace_file(&file, &bytes).map_err(disk(&file))?;
            }
        }
        let dir = job_dir.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&staging, &dir).map_err(disk(&dir))
    }
}

pub async fn view_server(args: &ViewArgs, url: &str) -> u8 {
    let addr = match address(url) {
        Ok(addr) => addr,
        Err(e) => return super::fail(&e),
    };
    let root = match tempfile::Builder::new().prefix("terminus-view-server-").tempdir() {
        Ok(root) => root,
        Err(e) => {
            eprintln!("error: cannot make the mirror's directory: {e}");
            return exit::INVALID;
        }
    };
    let mut mirror = Mirror {
        addr,
        root: root.path().to_path_buf(),
        jobs: HashMap::new(),
        trials: HashMap::new(),
        locks: HashMap::new(),
    };
    let first = tokio::task::spawn_blocking(move || {
        let result = mirror.sync();
        (mirror, result)
    })
    .await;
    let (mut mirror, result) = match first {
        Ok(done) => done,
        Err(_) => return exit::INVALID,
    };
    match result {
        Ok(None) => {}
        Ok(Some(e)) => eprintln!("warning: {e} (that job is tried again in {}s)", EVERY.as_secs()),
        Err(SyncError::Remote(e)) => return super::fail(&e),
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    }
    let server = match terminus_view::start(root.path(), args.listen.host, args.listen.port, None).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let at = if server.token.is_some() { server.page_url("/") } else { server.url() };
    println!("terminus view: {url} at {at}");
    eprintln!("the service's jobs are mirrored in {} every {}s", root.path().display(), EVERY.as_secs());
    let mut interrupts = crate::job::Interrupts::listen();
    let mut failing = false;
    let serving = server.wait();
    tokio::pin!(serving);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {
                let synced = tokio::task::spawn_blocking(move || {
                    let result = mirror.sync();
                    (mirror, result)
                })
                .await;
                let Ok((back, result)) = synced else { return exit::INVALID };
                mirror = back;
                match (result, failing) {
                    (Ok(None), true) => {
                        eprintln!("the service answers again");
                        failing = false;
                    }
                    (Err(e) | Ok(Some(e)), false) => {
                        eprintln!("warning: {e} (the viewer shows the last mirror; retrying)");
                        failing = true;
                    }
                    _ => {}
                }
            }
            _ = &mut serving => return exit::TRIAL_ERRORS,
            _ = interrupts.next() => return exit::OK,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_from_the_service_stay_inside_the_mirror() {
        assert!(plain_name("hello-world__abc") && plain_name("a b"));
        for bad in ["", ".", "..", ".mirror-x", "a/b", "a\\b", "/etc", "result.json", "config.json"] {
            assert!(!plain_name(bad), "{bad}");
        }
        assert!(plain_path("agent/trajectory.json") && plain_path("result.json"));
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "a//b/..", ".mirror-x/y", "a\0b"] {
            assert!(!plain_path(bad), "{bad}");
        }
    }
}
