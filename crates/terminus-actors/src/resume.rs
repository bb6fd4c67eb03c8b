//! Where a job starts: a new job plans every trial; a resumed one keeps the trials an earlier
//! run finished, cleans up what it left half done, and plans the rest.
//!
//! A trial is identified by (task path, agent index, attempt index), recorded in each trial's
//! `config.json`, so matching does not depend on the random part of trial names (Harbor matches
//! whole configs, which breaks when a runtime detail such as a port changes).

use std::collections::HashSet;
use std::path::Path;

use terminus_config::job::TrialPlan;
use terminus_core::error::TrialErrorKind;
use terminus_core::ids::{JobId, TrialName};
use terminus_core::layout::{JobDir, TrialDir};
use terminus_core::result::{TrialConfig, TrialResult};
use terminus_core::stats::JobResult;
use terminus_core::time::Timestamp;

/// Where a job starts from: nothing (a new job) or the trials an earlier run finished.
#[derive(Debug, Default)]
pub struct StartingPoint {
    /// Results already on disk; they count as finished and are not run again.
    pub finished: Vec<TrialResult>,
    /// The trials to run, with their names (all planned trials for a new job).
    pub to_run: Vec<(TrialPlan, TrialName)>,
    /// The earlier run's start time, kept in the job result.
    pub started_at: Option<Timestamp>,
    pub n_retries: u64,
    pub n_restarts: u64,
    /// Start paused: nothing is dispatched, and the job stays open with nothing left, until a
    /// live control resumes it (a service reopening a finished job for a retry).
    pub paused: bool,
}

/// Which finished trials a resume runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Only {
    /// Exactly the trials that ended with an error other than a cancellation.
    Errored,
    /// Exactly the cancelled trials.
    Cancelled,
    /// None: only the trials with no result run, and a cancelled trial stays cancelled. A job
    /// service's restart: its trials were cancelled by its users, not by a Ctrl-C.
    Unfinished,
}

/// How to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMode {
    New,
    /// Continue the job in the job directory; `only` narrows what runs.
    Resume {
        only: Option<Only>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("cannot read the job directory `{path}`: {message}")]
    Unreadable { path: String, message: String },
}

/// The key that identifies a trial across runs.
type TrialKey = (String, usize, u32);

/// Moves a directory a resume cannot read into `<job>/.orphaned/`, saying so.
fn orphan(job_dir: &Path, path: &Path) {
    let aside = JobDir::new(job_dir).orphaned_dir();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let target = aside.join(format!("{name}.{}", terminus_core::time::now().format("%Y%m%dT%H%M%S%.6f")));
    match std::fs::create_dir_all(&aside).and_then(|()| std::fs::rename(path, &target)) {
        Ok(()) => tracing::warn!(
            dir = %path.display(), moved_to = %target.display(),
            "a directory of the job could not be read as a trial; moved aside, not deleted"
        ),
        Err(e) => {
            tracing::warn!(dir = %path.display(), error = %e, "a directory of the job could not be read as a trial, nor moved aside; left as it is")
        }
    }
}

/// True when the tree at `path` has no file but the temporary ones our atomic writes leave
/// (`<name>.tmp-<pid>`) when killed between the write and the rename.
fn holds_nothing(path: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(path) else { return false };
    entries.into_iter().all(|entry| {
        let Ok(entry) = entry else { return false };
        let Ok(kind) = entry.file_type() else { return false };
        if kind.is_dir() {
            holds_nothing(&entry.path())
        } else {
            kind.is_file() && crate::files::is_temporary(&entry.path())
        }
    })
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok())
}

/// Where a job of `trials` starts. For a resume, also returns the earlier job id (its containers
/// must be reaped and its labels reused).
pub fn plan_start(
    trials: &[TrialPlan],
    job_dir: &Path,
    mode: StartMode,
) -> Result<(Option<JobId>, StartingPoint), ResumeError> {
    let plans = trials.to_vec();
    let new_names = |plans: Vec<TrialPlan>| -> Vec<_> {
        plans
            .into_iter()
            .map(|p| {
                let name = TrialName::generate(&p.task.name);
                (p, name)
            })
            .collect()
    };
    let StartMode::Resume { only } = mode else {
        return Ok((None, StartingPoint { to_run: new_names(plans), ..StartingPoint::default() }));
    };
    let unreadable =
        |e: std::io::Error| ResumeError::Unreadable { path: job_dir.display().to_string(), message: e.to_string() };
    let previous: Option<JobResult> = read(&JobDir::new(job_dir).result_json());
    let job_id = previous.as_ref().and_then(|r| r.id.parse::<uuid::Uuid>().ok()).map(JobId);

    let mut finished: Vec<TrialResult> = Vec::new();
    let mut done: HashSet<TrialKey> = HashSet::new();
    let mut rerun: HashSet<TrialKey> = HashSet::new();
    for entry in std::fs::read_dir(job_dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        // Our own hidden directories (`.orphaned`) and anything that is not a directory stay.
        if !path.is_dir() || path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
            continue;
        }
        let trial = TrialDir::new(&path);
        let config: Option<TrialConfig> = read(&trial.config_json());
        let key = config.as_ref().and_then(TrialConfig::trial_key);
        let result: Option<TrialResult> = read(&trial.result_json());
        let (Some(key), Some(result)) = (key.clone(), result) else {
            if key.is_some() && !trial.result_json().exists() {
                // One of ours that started but never finished: it runs again from scratch.
                tracing::info!(dir = %path.display(), "removing an unfinished trial directory");
                let _ = std::fs::remove_dir_all(&path);
            } else if holds_nothing(&path) {
                // A trial killed while making its directory, before its config.json landed:
                // only empty folders (and perhaps our temporary file) — nothing to lose.
                tracing::info!(dir = %path.display(), "removing an empty trial directory");
                let _ = std::fs::remove_dir_all(&path);
            } else {
                // Not readable as a trial of this job: never deleted, moved aside (and, if it was
                // one of the job's trials, run again).
                orphan(job_dir, &path);
            }
            continue;
        };
        // A recorded error whose name terminus does not know still counts as an error.
        let errored = result.exception_info.is_some();
        let cancelled = result.error_kind() == Some(TrialErrorKind::Cancelled);
        let again = match only {
            None | Some(Only::Cancelled) => cancelled,
            Some(Only::Errored) => errored && !cancelled,
            Some(Only::Unfinished) => false,
        };
        if again {
            tracing::info!(dir = %path.display(), "running this trial again");
            let _ = std::fs::remove_dir_all(&path);
            rerun.insert(key);
        } else if done.insert(key) {
            finished.push(result);
        }
    }
    let to_run: Vec<_> = plans
        .into_iter()
        .filter(|p| {
            let key = p.key();
            match only {
                None | Some(Only::Unfinished) => !done.contains(&key),
                Some(Only::Errored | Only::Cancelled) => rerun.contains(&key),
            }
        })
        .collect();
    let (n_retries, n_restarts) = previous.as_ref().map_or((0, 0), |r| (r.stats.n_retries, r.stats.n_restarts));
    Ok((
        job_id,
        StartingPoint {
            finished,
            to_run: new_names(to_run),
            started_at: previous.map(|r| r.started_at),
            n_retries,
            n_restarts,
            paused: false,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::record::TrialSetup;
    use terminus_config::JobPlan;

    fn job(jobs_dir: &Path) -> JobPlan {
        let task = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks/hello-world");
        let yaml = format!(
            "jobs_dir: {}\njob_name: j\nn_attempts: 3\nagents:\n  - name: nop\ntasks:\n  - path: {}\n",
            jobs_dir.display(),
            task.display()
        );
        JobPlan::from_yaml(Path::new("job.yaml"), &yaml, &terminus_config::job::Overrides::default()).unwrap()
    }

    /// The directory of attempt `i` of `job` with its `config.json` written, and its setup.
    fn started(job: &JobPlan, i: usize) -> (TrialDir, TrialSetup) {
        let job_dir = job.dir();
        let name = TrialName::with_suffix("hello-world", &format!("000000{i}"));
        let dir = JobDir::new(&job_dir).trial(&name);
        let basis = job.basis("job", &job.trials[i], name.as_str(), job_dir.display().to_string());
        let setup = TrialSetup::new(basis, JobId::new(), job.trials[i].clone(), name, dir.clone());
        std::fs::create_dir_all(dir.path()).unwrap();
        crate::files::write_json(&dir.config_json(), &setup.new_record().result.config).unwrap();
        (dir, setup)
    }

    #[test]
    fn a_resume_moves_what_it_cannot_read_aside_and_deletes_only_unfinished_trials() {
        let jobs = tempfile::tempdir().unwrap();
        let job = job(jobs.path());
        let job_dir = job.dir();
        let plans = &job.trials;
        let dir_of = |i: usize| started(&job, i);
        // Attempt 0 finished; attempt 1 never finished; attempt 2's result is garbage.
        let (done, setup) = dir_of(0);
        crate::files::write_json(&done.result_json(), &setup.new_record().to_result()).unwrap();
        let (unfinished, _) = dir_of(1);
        let (garbled, _) = dir_of(2);
        std::fs::write(garbled.result_json(), "{\"reward\": null, ").unwrap();
        // A trial killed while making its directory: empty folders and a temporary config.
        let empty = job_dir.join("hello-world__0000009");
        std::fs::create_dir_all(empty.join("agent")).unwrap();
        std::fs::create_dir_all(empty.join("verifier")).unwrap();
        std::fs::write(empty.join(format!("config.tmp-{}", std::process::id())), "{\"ta").unwrap();
        // A directory that is no trial at all (someone's notes).
        let notes = job_dir.join("notes");
        std::fs::create_dir_all(&notes).unwrap();
        std::fs::write(notes.join("todo.txt"), "keep me").unwrap();

        let (_, start) = plan_start(plans, &job_dir, StartMode::Resume { only: None }).unwrap();
        assert_eq!(start.finished.len(), 1);
        let attempts: Vec<u32> = start.to_run.iter().map(|(p, _)| p.attempt).collect();
        assert_eq!(attempts, [1, 2], "the unfinished and the unreadable trial run again");
        assert!(done.path().is_dir(), "a finished trial is kept");
        assert!(!unfinished.path().exists(), "an unfinished one of ours is cleaned up");
        assert!(!garbled.path().exists() && !notes.exists());
        assert!(!empty.exists(), "a directory holding nothing is removed, not moved aside");
        let aside: Vec<String> = std::fs::read_dir(JobDir::new(&job_dir).orphaned_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(aside.len(), 2, "{aside:?}");
        assert!(aside.iter().any(|n| n.starts_with("notes.")));
        let kept = std::fs::read_dir(JobDir::new(&job_dir).orphaned_dir()).unwrap().find_map(|e| {
            let path = e.unwrap().path();
            path.join("todo.txt").is_file().then_some(path)
        });
        assert_eq!(std::fs::read_to_string(kept.unwrap().join("todo.txt")).unwrap(), "keep me");
    }

    #[test]
    fn a_cancelled_trial_runs_again_on_resume_but_stays_cancelled_when_only_unfinished_ones_run() {
        let jobs = tempfile::tempdir().unwrap();
        let job = job(jobs.path());
        let job_dir = job.dir();
        let plans = &job.trials;
        let write = |i: usize, cancelled: bool| {
            let (dir, setup) = started(&job, i);
            let mut record = setup.new_record();
            if cancelled {
                let error = terminus_core::error::TrialError::new(TrialErrorKind::Cancelled, "cancelled");
                record.record_error(error);
            }
            crate::files::write_json(&dir.result_json(), &record.to_result()).unwrap();
            dir
        };
        // Attempt 0 finished, attempt 1 was cancelled, attempt 2 never started.
        write(0, false);
        let cancelled = write(1, true);
        let (_, start) = plan_start(plans, &job_dir, StartMode::Resume { only: Some(Only::Unfinished) }).unwrap();
        let attempts: Vec<u32> = start.to_run.iter().map(|(p, _)| p.attempt).collect();
        assert_eq!((start.finished.len(), attempts), (2, vec![2]));
        assert!(cancelled.result_json().is_file(), "the cancelled trial is kept as it ended");
        let (_, start) = plan_start(plans, &job_dir, StartMode::Resume { only: None }).unwrap();
        let attempts: Vec<u32> = start.to_run.iter().map(|(p, _)| p.attempt).collect();
        assert_eq!((start.finished.len(), attempts), (1, vec![1, 2]), "a plain resume runs it again");
    }
}
