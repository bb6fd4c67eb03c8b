//! Rollout rows as the service plans them: a trial's first attempt (from the job's status), a
//! retry's new attempt, and the attempts a job that no longer runs cancels in the database.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use terminus_core::control::{TrialState, TrialStatus};

use crate::store::{NewRollout, Outcome, RolloutRow, Store, StoreError, state};

/// An attempt to record, owning what its row borrows.
pub struct Planned {
    id: String,
    job_id: String,
    trial_key: String,
    retry_index: u32,
    retry_of: Option<String>,
    name: String,
    task_name: String,
    task_digest: String,
    agent_name: Option<String>,
    model_name: Option<String>,
    model_provider: Option<String>,
    config: Value,
    lock: Value,
    dir: PathBuf,
    state: &'static str,
}

impl Planned {
    pub fn row(&self) -> NewRollout<'_> {
        NewRollout {
            id: &self.id,
            job_id: &self.job_id,
            trial_key: &self.trial_key,
            retry_index: self.retry_index,
            retry_of: self.retry_of.as_deref(),
            name: &self.name,
            task_name: &self.task_name,
            task_digest: &self.task_digest,
            task_source: None,
            agent_name: self.agent_name.as_deref(),
            model_name: self.model_name.as_deref(),
            model_provider: self.model_provider.as_deref(),
            reasoning_effort: None,
            config: &self.config,
            lock: &self.lock,
            dir: &self.dir,
            state: self.state,
        }
    }
}

/// Harbor's state of a trial the Supervisor reports (`paused`: the job is paused).
pub fn run_state(trial: TrialState, paused: bool) -> &'static str {
    match trial {
        TrialState::Queued | TrialState::Held | TrialState::Waiting if paused => state::PAUSED,
        TrialState::Queued | TrialState::Held | TrialState::Waiting => state::QUEUED,
        TrialState::Running => state::RUNNING,
        TrialState::Cancelling => state::CANCELLING,
        TrialState::Finished => state::FINISHED,
        TrialState::Cancelled => state::CANCELLED,
    }
}

/// The task identity and agent index a trial's key holds (`identity#agent#attempt`).
fn split_key(key: &str) -> (&str, usize) {
    let mut parts = key.rsplitn(3, '#');
    let _attempt = parts.next();
    let agent = parts.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    (parts.next().unwrap_or(key), agent)
}

/// `sha256:<hex>` of a task's identity: what a rollout's lock pins before its result gives
/// the content checksum.
fn digest(identity: &str) -> String {
    format!("sha256:{:x}", Sha256::digest(identity.as_bytes()))
}

/// The provider a LiteLLM-style model name starts with (`openai/gpt-4o` → `openai`).
fn provider(model: Option<&str>) -> Option<String> {
    model.and_then(|m| m.split_once('/')).map(|(p, _)| p.to_string())
}

/// A trial's first attempt, as the job's first status lists it; `agents` holds each agent's
/// name and model.
pub fn first(job_id: &str, job_dir: &Path, trial: &TrialStatus, agents: &[(String, Option<String>)]) -> Planned {
    let key = trial.key.clone().unwrap_or_else(|| trial.name.0.clone());
    let (identity, agent_idx) = split_key(&key);
    let (agent_name, model_name) = agents.get(agent_idx).cloned().unwrap_or_default();
    let task_digest = digest(identity);
    let lock = json!({
        "task": { "name": trial.task_name, "type": "local", "digest": task_digest, "path": identity },
        "agent": { "name": agent_name, "model_name": model_name },
        "environment": { "type": "docker" },
        "verifier": {},
    });
    let config = json!({
        "task": { "path": identity },
        "trial_name": trial.name.0,
        "agent": { "name": agent_name, "model_name": model_name },
        "job_id": job_id,
    });
    Planned {
        id: uuid::Uuid::new_v4().to_string(),
        job_id: job_id.to_string(),
        retry_index: trial.retries,
        retry_of: None,
        name: trial.name.0.clone(),
        task_name: trial.task_name.clone(),
        task_digest,
        model_provider: provider(model_name.as_deref()),
        agent_name: (!agent_name.is_empty()).then_some(agent_name),
        model_name,
        config,
        lock,
        dir: job_dir.join(&trial.name.0),
        state: run_state(trial.state, false),
        trial_key: key,
    }
}

/// The attempt after `latest` (a retry of `retry_of`, which may be an earlier attempt).
pub fn next_attempt(latest: &RolloutRow, id: &str, retry_of: &str) -> Planned {
    Planned {
        id: id.to_string(),
        job_id: latest.job_id.clone(),
        trial_key: latest.trial_key.clone(),
        retry_index: latest.retry_index + 1,
        retry_of: Some(retry_of.to_string()),
        name: latest.name.clone(),
        task_name: latest.task_name.clone(),
        task_digest: latest.task_digest.clone(),
        agent_name: latest.agent_name.clone(),
        model_name: latest.model_name.clone(),
        model_provider: latest.model_provider.clone(),
        config: latest.config.clone(),
        lock: latest.lock.clone(),
        dir: trial_dir(latest),
        state: state::QUEUED,
    }
}

/// The directory of a trial's current attempt (earlier ones are under its `attempts/`).
pub fn trial_dir(row: &RolloutRow) -> PathBuf {
    let dir = PathBuf::from(&row.dir);
    // An archived attempt's row points into `<trial>/attempts/<n>`.
    match dir.parent().and_then(Path::parent) {
        Some(trial) if dir.parent().and_then(Path::file_name).is_some_and(|n| n == "attempts") => trial.to_path_buf(),
        _ => dir,
    }
}

/// A cancelled attempt that never ran.
fn cancelled() -> Outcome {
    Outcome { state: state::CANCELLED, error_type: Some("CancelledError".into()), ..Outcome::default() }
}

/// Cancels the queued and paused attempts of a job that no longer runs.
pub fn cancel_unstarted(store: &Store, job_id: &str) -> Result<(), StoreError> {
    for row in store.rollouts_of(job_id)? {
        if row.state == state::QUEUED || row.state == state::PAUSED {
            store.set_outcome(&row.id, &cancelled())?;
        }
    }
    Ok(())
}

/// Cancels one attempt of a job that no longer runs.
pub fn cancel_one(store: &Store, row: &RolloutRow) -> Result<(), StoreError> {
    store.set_outcome(&row.id, &cancelled())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gives_back_its_task_and_agent_even_when_the_path_holds_hashes() {
        assert_eq!(split_key("/tasks/a#b#1#0"), ("/tasks/a#b", 1));
        assert_eq!(split_key("/tasks/hello#0#3"), ("/tasks/hello", 0));
        let d = digest("/tasks/hello");
        assert!(
            d.starts_with("sha256:")
                && d.len() == 71
                && d[7..].chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(provider(Some("openai/gpt-4o")).as_deref(), Some("openai"));
        assert_eq!(provider(Some("oracle")), None);
    }

    #[test]
    fn queued_trials_of_a_paused_job_are_paused_and_the_rest_keep_their_state() {
        assert_eq!(run_state(TrialState::Queued, true), state::PAUSED);
        assert_eq!(run_state(TrialState::Waiting, false), state::QUEUED);
        assert_eq!(run_state(TrialState::Running, true), state::RUNNING);
        assert_eq!(run_state(TrialState::Cancelled, false), state::CANCELLED);
    }
}
