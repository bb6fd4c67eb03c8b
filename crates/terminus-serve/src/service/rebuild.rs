//! The index rebuilt from the job directories when the database is missing: the files are the
//! truth, the database an index of them.
//!
//! Each `jobs/<id>/` that holds a job's `config.json` becomes a job again: its name, config and
//! controls from its [`JobRecord`] (or, without one, its id and `config.json`), one rollout per
//! planned trial and per attempt kept under the trial's `attempts/`, each ended attempt's
//! figures from its `result.json`. What never ran is paused (or cancelled, in a cancelled job),
//! so the job is resumed as after a restart. Idempotency keys are not in the files and are lost.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use terminus_config::job::Overrides;
use terminus_config::{JobPlan, JobSpec};
use terminus_core::control::{TrialState, TrialStatus, plan_key};
use terminus_core::ids::TrialName;
use terminus_core::layout::names::ATTEMPTS_DIR;
use terminus_core::result::TrialConfig;

use super::outcome::{self, file_uri};
use super::pump;
use super::record::JobRecord;
use super::rollouts::{first, next_attempt};
use crate::store::{NewJob, NewRollout, Outcome, Store, StoreError, state};

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("its config.json cannot be loaded: {0}")]
    Config(#[from] terminus_config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Indexes every job directory under `jobs_dir`, oldest first; returns how many.
pub fn index(store: &Store, jobs_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(jobs_dir) else { return 0 };
    let mut jobs: Vec<(String, String, PathBuf, Option<JobRecord>)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("config.json").is_file())
        .filter_map(|dir| {
            let id = dir.file_name()?.to_str()?.to_string();
            uuid::Uuid::parse_str(&id).ok()?;
            let record = JobRecord::read(&dir).filter(|r| r.id == id);
            let created = record.as_ref().map(|r| r.created_at.clone()).unwrap_or_default();
            Some((created, id, dir, record))
        })
        .collect();
    jobs.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut indexed = 0;
    for (_, id, dir, record) in jobs {
        match job(store, &id, &dir, record) {
            Ok(()) => indexed += 1,
            Err(e) => tracing::error!(job = %id, error = %e, "could not index the job directory"),
        }
    }
    indexed
}

/// The trial directories of a job by their trial's key.
fn trial_dirs(job_dir: &Path) -> HashMap<String, TrialName> {
    let Ok(entries) = std::fs::read_dir(job_dir) else { return HashMap::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let text = std::fs::read_to_string(e.path().join("config.json")).ok()?;
            let config: TrialConfig = serde_json::from_str(&text).ok()?;
            Some((plan_key(&config.trial_key()?), TrialName(name)))
        })
        .collect()
}

/// How many earlier attempts a trial keeps under `attempts/<n>/`.
fn archived(trial_dir: &Path) -> u32 {
    let Ok(entries) = std::fs::read_dir(trial_dir.join(ATTEMPTS_DIR)) else { return 0 };
    let numbers: Vec<u32> = entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    numbers.iter().max().map_or(0, |n| n + 1)
}

fn job(store: &Store, id: &str, dir: &Path, record: Option<JobRecord>) -> Result<(), RebuildError> {
    let spec = JobSpec::from_job_dir(dir, &Overrides { quiet: Some(true), ..Overrides::default() })?;
    let plan = JobPlan::new(spec);
    let agents: Vec<(String, Option<String>)> =
        plan.agents().iter().map(|a| (a.name.clone(), a.model_name.clone())).collect();
    let on_disk = trial_dirs(dir);
    let planned: Vec<_> = plan
        .trials
        .iter()
        .map(|p| {
            let key = plan_key(&p.key());
            let name = on_disk.get(&key).cloned().unwrap_or_else(|| TrialName::generate(&p.task.name));
            let status = TrialStatus {
                name,
                task_name: p.task.name.clone(),
                state: TrialState::Queued,
                retries: 0,
                reward: None,
                key: Some(key),
            };
            first(id, dir, &status, &agents)
        })
        .collect();
    let rows: Vec<NewRollout<'_>> = planned.iter().map(|p| p.row()).collect();
    let config = match &record {
        Some(record) => record.config.clone(),
        None => std::fs::read_to_string(dir.join("config.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
    };
    let lock_uri = file_uri(&dir.join("config.json"), false);
    let job = NewJob {
        id,
        name: record.as_ref().map_or(id, |r| r.name.as_str()),
        config: &config,
        lock_uri: &lock_uri,
        dir,
        created_at: record.as_ref().map(|r| r.created_at.as_str()),
    };
    store.insert_job(&job, &rows, None)?;
    if let Some(mode) = record.as_ref().and_then(|r| r.cancel_mode.as_deref()) {
        store.set_job_flags(id, None, Some(mode))?;
    }
    // Earlier attempts: one row each, its figures from `attempts/<n>/`.
    for row in store.rollouts_of(id)? {
        let trial_dir = PathBuf::from(&row.dir);
        let mut latest = row;
        for n in 0..archived(&trial_dir) {
            let attempt = uuid::Uuid::new_v4().to_string();
            store.insert_attempt(&next_attempt(&latest, &attempt, &latest.id).row())?;
            let kept = trial_dir.join(ATTEMPTS_DIR).join(n.to_string());
            let ended = outcome::read(&kept, false).unwrap_or(Outcome {
                state: state::FINISHED,
                dir: Some(kept.display().to_string()),
                ..Outcome::default()
            });
            store.set_outcome(&latest.id, &ended)?;
            let Some(next) = store.latest(id, &latest.trial_key)? else { break };
            latest = next;
        }
    }
    if let Some(job) = store.job(id)? {
        pump::from_files(store, &job)?;
    }
    if record.as_ref().is_some_and(|r| r.paused) {
        store.set_job_flags(id, Some(true), None)?;
    }
    Ok(())
}
