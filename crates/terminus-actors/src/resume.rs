//! Where a job starts: a new job plans every trial; a resumed one keeps the trials an earlier
//! run finished, cleans up what it left half done, and plans the rest.
//!
//! A trial is identified by (task path, agent index, attempt index), recorded in each trial's
//! `config.json`, so matching does not depend on the random part of trial names (Harbor matches
//! whole configs, which breaks when a runtime detail such as a port changes).

use std::collections::HashSet;
use std::path::Path;

use terminus_config::JobSpec;
use terminus_core::error::TrialErrorKind;
use terminus_core::ids::{JobId, TrialName};
use terminus_core::layout::{JobDir, TrialDir};
use terminus_core::result::{JobResult, TrialConfig, TrialResult};

use crate::supervisor::StartingPoint;

/// Which finished trials a resume runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Only {
    /// Exactly the trials that ended with an error other than a cancellation.
    Errored,
    /// Exactly the cancelled trials.
    Cancelled,
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

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok())
}

/// Plans a job. For a resume, also returns the earlier job id (its containers must be reaped and
/// its labels reused).
pub fn plan_start(
    spec: &JobSpec,
    job_dir: &Path,
    mode: StartMode,
) -> Result<(Option<JobId>, StartingPoint), ResumeError> {
    let plans = spec.plan();
    let new_names = |plans: Vec<terminus_config::job::TrialPlan>| -> Vec<_> {
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
        if !path.is_dir() {
            continue;
        }
        let trial = TrialDir::new(&path);
        let config: Option<TrialConfig> = read(&trial.config_json());
        let result: Option<TrialResult> = read(&trial.result_json());
        let (Some(key), Some(result)) = (config.as_ref().and_then(TrialConfig::trial_key), result) else {
            // Started but never finished (or not a trial of ours): it runs again from scratch.
            tracing::info!(dir = %path.display(), "removing an unfinished trial directory");
            let _ = std::fs::remove_dir_all(&path);
            continue;
        };
        // A recorded error whose name terminus does not know still counts as an error.
        let errored = result.exception_info.is_some();
        let cancelled = result.error_kind() == Some(TrialErrorKind::Cancelled);
        let again = match only {
            None | Some(Only::Cancelled) => cancelled,
            Some(Only::Errored) => errored && !cancelled,
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
            let key = (p.task.path.display().to_string(), p.agent_idx, p.attempt);
            match only {
                None => !done.contains(&key),
                Some(_) => rerun.contains(&key),
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
        },
    ))
}
