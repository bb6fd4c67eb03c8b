//! A running job's pump: its events mark the job's rows stale; at most five times a second the
//! Supervisor's status is written to them. Once the job has ended, its trials' files are.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use terminus_actors::{JobController, JobHandle};
use terminus_core::control::{JobControl, JobStatus};
use terminus_core::events::{RunEvent, TrialPhase};
use terminus_core::ids::TrialName;
use tokio::sync::mpsc::UnboundedReceiver;

use super::Service;
use super::outcome;
use super::rollouts::{next_attempt, run_state, trial_dir};
use crate::store::{JobRow, Outcome, RolloutRow, Store, StoreError, state};

/// How often a job's rows are brought up to date while events come.
const SYNC_EVERY: Duration = Duration::from_millis(200);

/// Harbor's phase of a trial in one of ours.
fn phase(p: TrialPhase) -> &'static str {
    match p {
        TrialPhase::Preparing | TrialPhase::StartingEnvironment => "environment_setup",
        TrialPhase::RunningAgent => "agent_execution",
        TrialPhase::Verifying => "verifier",
        TrialPhase::TearingDown => "cleanup",
    }
}

pub(super) async fn run(
    service: Arc<Service>,
    job_id: String,
    handle: JobHandle,
    mut events: UnboundedReceiver<RunEvent>,
    mut nudged: UnboundedReceiver<()>,
    controller: JobController,
) {
    let mut phases: HashMap<TrialName, &'static str> = HashMap::new();
    let mut dirty = true;
    let mut tick = tokio::time::interval(SYNC_EVERY);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                None | Some(RunEvent::JobFinished { .. }) => break,
                Some(RunEvent::TrialProgress { trial_name, phase: p, .. }) => {
                    phases.insert(trial_name, phase(p));
                    dirty = true;
                }
                Some(_) => dirty = true,
            },
            Some(()) = nudged.recv() => dirty = true,
            _ = tick.tick(), if dirty => {
                dirty = false;
                sync(&service, &job_id, Some(&controller), &phases).await;
            }
        }
    }
    handle.wait().await;
    service.forget(&job_id);
    sync(&service, &job_id, None, &phases).await;
    // The rows may have ended before the job did: its `updated_at` now says when its files
    // were final.
    if let Err(e) = service.store.touch_job(&job_id) {
        tracing::error!(job = %job_id, error = %e, "could not record the job's end");
    }
}

/// Writes the job's state to its rows: from the Supervisor's status while it runs, else from
/// the trials' files.
pub(super) async fn sync(
    service: &Arc<Service>,
    job_id: &str,
    controller: Option<&JobController>,
    phases: &HashMap<TrialName, &'static str>,
) {
    let _guard = service.sync_lock.lock().await;
    let Ok(Some(job)) = service.store.job(job_id) else { return };
    let status = match controller {
        Some(controller) => controller.ask(JobControl::Status).await.ok(),
        None => None,
    };
    let written = match &status {
        Some(status) => from_status(&service.store, &job, status, phases),
        None => from_files(&service.store, &job),
    };
    if let Err(e) = written {
        tracing::error!(job = %job_id, error = %e, "could not record the job's rollouts");
    }
}

fn from_status(
    store: &Store,
    job: &JobRow,
    status: &JobStatus,
    phases: &HashMap<TrialName, &'static str>,
) -> Result<(), StoreError> {
    let rows = store.rollouts_of(&job.id)?;
    for trial in &status.trials {
        let Some(key) = &trial.key else { continue };
        let dir = Path::new(&job.dir).join(&trial.name.0);
        let attempts: Vec<&RolloutRow> = rows.iter().filter(|r| &r.trial_key == key).collect();
        let Some(mut latest) = attempts.iter().max_by_key(|r| r.retry_index).map(|r| (*r).clone()) else {
            tracing::warn!(trial = %trial.name, "a trial the job lists has no rollout");
            continue;
        };
        // Automatic retries: the attempts before ended, each kept under `attempts/<n>/`.
        while latest.retry_index < trial.retries {
            let id = uuid::Uuid::new_v4().to_string();
            store.insert_attempt(&next_attempt(&latest, &id, &latest.id).row())?;
            let Some(next) = store.latest(&job.id, key)? else { break };
            latest = next;
        }
        for row in attempts.iter().filter(|r| r.retry_index < trial.retries) {
            let archived = dir.join(terminus_core::layout::names::ATTEMPTS_DIR).join(row.retry_index.to_string());
            if row.dir != archived.display().to_string() || !state::is_terminal(&row.state) {
                let ended = outcome::read(&archived, false);
                if ended.is_some() || !state::is_terminal(&row.state) {
                    let ended = ended.unwrap_or(Outcome { state: state::FINISHED, ..Outcome::default() });
                    store.set_outcome(&row.id, &ended)?;
                }
            }
        }
        let now = run_state(trial.state, status.paused);
        if state::is_terminal(now) {
            let stale = !state::is_terminal(&latest.state)
                || latest.result.is_none()
                || latest.dir != dir.display().to_string();
            if stale && let Some(ended) = outcome::read(&dir, true) {
                store.set_outcome(&latest.id, &ended)?;
            }
        } else {
            let live = now == state::RUNNING || now == state::CANCELLING;
            let phase = live.then(|| phases.get(&trial.name).copied().unwrap_or("environment_setup"));
            store.set_live(&latest.id, now, phase, &trial.name.0, &dir)?;
        }
    }
    Ok(())
}

/// The job no longer runs: each attempt's result from its files; an attempt that never ran is
/// cancelled if the job was, else paused (resuming the job runs it).
pub(super) fn from_files(store: &Store, job: &JobRow) -> Result<(), StoreError> {
    for row in store.rollouts_of(&job.id)? {
        if state::is_terminal(&row.state) && row.result.is_some() {
            continue;
        }
        let dir = Path::new(&row.dir);
        let archived = dir.parent().and_then(Path::file_name).is_some_and(|n| n == "attempts");
        match outcome::read(dir, !archived) {
            Some(ended) => store.set_outcome(&row.id, &ended)?,
            None if state::is_terminal(&row.state) => {}
            None if job.cancel_mode.is_some() => store.set_outcome(
                &row.id,
                &Outcome { state: state::CANCELLED, error_type: Some("CancelledError".into()), ..Outcome::default() },
            )?,
            None => store.set_live(&row.id, state::PAUSED, None, &row.name, &trial_dir(&row))?,
        }
    }
    Ok(())
}
