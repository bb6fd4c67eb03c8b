//! The job service: a job submitted is a job directory under `<data>/jobs/<id>/`, run by the
//! same Supervisor as `terminus run` with a limit on running trials shared by every job; its
//! rollouts (one row per attempt of a trial) follow what the Supervisor says of its trials.
//!
//! Each running job has a pump task: it reads the job's events and, after each burst, asks the
//! Supervisor for its status and writes what changed. When the job ends, the pump reads the
//! trials' results from their files. Jobs that were running when the service stopped are
//! resumed when it starts, as `terminus resume` would resume them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};
use terminus_actors::lock::{JobLock, LockError};
use terminus_actors::resume::{Only, StartMode};
use terminus_actors::shared_limit::SharedLimit;
use terminus_actors::{ControlError, JobController, StartOptions};
use terminus_config::job::Overrides;
use terminus_config::{JobPlan, JobSpec};
use terminus_core::control::{ControlRefusal, JobControl, JobStatus};
use terminus_core::ids::TrialName;

use crate::error::ServeError;
use crate::store::{JobRow, NewJob, NewRollout, RolloutRow, Store, state};

mod outcome;
mod pump;
mod rebuild;
mod record;
mod rollouts;

pub use outcome::{file_uri, quote, unquote};

/// A job the service runs now.
#[derive(Clone)]
struct Running {
    backend: terminus_config::cluster::BackendSpec,
    controller: JobController,
    canceller: terminus_actors::JobCanceller,
    nudge: tokio::sync::mpsc::UnboundedSender<()>,
    /// Which start of the job this is (a job reopened is another).
    generation: u64,
}

pub struct Service {
    data_dir: PathBuf,
    store: Arc<Store>,
    shared: Arc<SharedLimit>,
    running: std::sync::Mutex<HashMap<String, Running>>,
    /// Held while a job's rows are brought up to date, and by a retry between asking the job
    /// and writing the new attempt (two writers would both add it).
    sync_lock: tokio::sync::Mutex<()>,
    /// Held by a retry while it reopens an ended job (two retries would both reopen it).
    reopening: tokio::sync::Mutex<()>,
    generations: std::sync::atomic::AtomicU64,
    closing: AtomicBool,
}

impl Service {
    /// Opens the data directory (made if missing) and its database.
    pub fn open(data_dir: &Path, max_concurrent: usize) -> Result<Arc<Service>, ServeError> {
        std::fs::create_dir_all(data_dir.join("jobs"))
            .map_err(|e| ServeError::Internal(format!("cannot make `{}`: {e}", data_dir.display())))?;
        let data_dir = data_dir
            .canonicalize()
            .map_err(|e| ServeError::Internal(format!("cannot read `{}`: {e}", data_dir.display())))?;
        let db = data_dir.join(crate::store::DB_FILE);
        // Present while an index is rebuilt: a database left half-built is built again.
        let rebuilding = data_dir.join(".rebuilding");
        let lost = !db.exists() || rebuilding.exists();
        if lost {
            // A write-ahead log left by a database that is gone belongs to nothing.
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(db.with_file_name(format!("{}{suffix}", crate::store::DB_FILE)));
            }
        }
        let store = Arc::new(Store::open(&data_dir)?);
        if lost {
            let marker = std::fs::write(&rebuilding, b"");
            let indexed = rebuild::index(&store, &data_dir.join("jobs"));
            if marker.is_ok() {
                let _ = std::fs::remove_file(&rebuilding);
            }
            if indexed > 0 {
                tracing::info!(jobs = indexed, "the database was missing: indexed again from the job directories");
            }
        }
        Ok(Arc::new(Service {
            data_dir,
            store,
            shared: SharedLimit::new(max_concurrent),
            running: std::sync::Mutex::new(HashMap::new()),
            sync_lock: tokio::sync::Mutex::new(()),
            reopening: tokio::sync::Mutex::new(()),
            generations: std::sync::atomic::AtomicU64::new(0),
            closing: AtomicBool::new(false),
        }))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn shared_limit(&self) -> &SharedLimit {
        &self.shared
    }

    fn jobs_dir(&self) -> PathBuf {
        self.data_dir.join("jobs")
    }

    fn running(&self, job_id: &str) -> Option<Running> {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).get(job_id).cloned()
    }

    /// Resumes every job that had not ended when the service last stopped.
    pub async fn recover(self: &Arc<Self>) -> usize {
        let mut resumed = 0;
        for job in self.store.jobs().unwrap_or_default() {
            if state::is_terminal(&job.state) {
                continue;
            }
            match self.reopen(&job, job.paused).await {
                Ok(()) => resumed += 1,
                Err(e) => tracing::error!(job = %job.id, error = %e, "could not resume the job"),
            }
        }
        resumed
    }

    /// Stops taking work (answers 503 from now on).
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    fn require_open(&self) -> Result<(), ServeError> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(ServeError::Unavailable("The service is shutting down.".into()));
        }
        Ok(())
    }

    /// The job file a submission stands for, placed in the data directory under `id`.
    fn spec_for(&self, config: &Value, id: &str) -> Result<JobSpec, ServeError> {
        let overrides = Overrides {
            job_name: Some(id.to_string()),
            jobs_dir: Some(self.jobs_dir()),
            quiet: Some(true),
            ..Overrides::default()
        };
        // JSON is YAML: the submitted config loads through the same path as a job file.
        JobSpec::from_yaml(Path::new("config"), &config.to_string(), &overrides)
            .map_err(|e| ServeError::BadRequest(format!("body.{e}")))
    }

    /// `POST /jobs/submit`.
    pub async fn submit(
        self: &Arc<Self>,
        config: Value,
        dry_run: bool,
        key: Option<String>,
    ) -> Result<Value, ServeError> {
        self.require_open()?;
        if let (false, Some(key)) = (dry_run, &key)
            && let Some(first) = self.store.idempotent("submit_job", key)?
        {
            return Err(used_key(first));
        }
        if !config.is_object() {
            return Err(ServeError::BadRequest("body.config: Input should be a valid dictionary".into()));
        }
        if config.get("trials").is_some() {
            return Err(ServeError::BadRequest(
                "body.config: Value error, Explicit JobConfig.trials is not supported yet.".into(),
            ));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let spec = self.spec_for(&config, &id)?;
        for (idx, agent) in spec.agents.iter().enumerate() {
            if let Some(settings) = terminus_actors::llm::agent_provider_settings(agent)
                && let Err(e) = settings.check()
            {
                return Err(ServeError::BadRequest(format!("body.config.agents.{idx}.model_name: {e}")));
            }
        }
        let plan = JobPlan::new(spec);
        if plan.trials.is_empty() {
            return Err(ServeError::BadRequest("Either datasets or tasks must be provided.".into()));
        }
        if dry_run {
            return Ok(json!({ "n_trials": plan.trials.len() }));
        }
        let job_dir = self.jobs_dir().join(&id);
        std::fs::create_dir_all(&job_dir).map_err(|e| ServeError::Internal(e.to_string()))?;
        let agents: Vec<(String, Option<String>)> =
            plan.agents().iter().map(|a| (a.name.clone(), a.model_name.clone())).collect();
        let status = self.start(&id, plan, StartMode::New, false).await?;
        let mut stored = config.clone();
        terminus_core::secrets::redact_json(&mut stored);
        let name = config.get("job_name").and_then(Value::as_str).unwrap_or(&id).to_string();
        let lock_uri = file_uri(&job_dir.join("config.json"), false);
        let job =
            NewJob { id: &id, name: &name, config: &stored, lock_uri: &lock_uri, dir: &job_dir, created_at: None };
        let owned: Vec<_> = status.trials.iter().map(|t| rollouts::first(&id, &job_dir, t, &agents)).collect();
        let rows: Vec<NewRollout<'_>> = owned.iter().map(rollouts::Planned::row).collect();
        let response = json!({ "job_id": id });
        self.store.insert_job(&job, &rows, key.as_deref().map(|k| (k, &response)))?;
        self.keep_record(&id);
        self.nudge(&id);
        Ok(response)
    }

    /// Starts (or resumes) a job's Supervisor and its pump; returns its first status.
    async fn start(
        self: &Arc<Self>,
        id: &str,
        plan: JobPlan,
        mode: StartMode,
        paused: bool,
    ) -> Result<JobStatus, ServeError> {
        let job_dir = self.jobs_dir().join(id);
        let lock = JobLock::acquire(&job_dir).map_err(|e| match e {
            LockError::Busy { .. } => ServeError::conflict(e.to_string()),
            LockError::Io { .. } => ServeError::Internal(e.to_string()),
        })?;
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = plan.backend().clone();
        let job_id = id.parse().map(terminus_core::ids::JobId).ok();
        let options = StartOptions { shared: Some(self.shared.clone()), paused, job_id };
        let handle = terminus_actors::start_job_with(plan, events, mode, lock, options)
            .await
            .map_err(|e| ServeError::Unavailable(e.to_string()))?;
        let controller = handle.controller();
        let status = controller.ask(JobControl::Status).await.map_err(|e| ServeError::Internal(e.to_string()))?;
        let (nudge, nudged) = tokio::sync::mpsc::unbounded_channel();
        let generation = self.generations.fetch_add(1, Ordering::SeqCst);
        let running = Running { backend, controller, canceller: handle.canceller(), nudge, generation };
        self.running.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), running.clone());
        tokio::spawn(pump::run(self.clone(), id.to_string(), handle, rx, nudged, running.controller));
        Ok(status)
    }

    /// Runs a job again from its directory (after a restart, or to retry a trial of a job that
    /// had ended).
    async fn reopen(self: &Arc<Self>, job: &JobRow, paused: bool) -> Result<(), ServeError> {
        let dir = PathBuf::from(&job.dir);
        let overrides = Overrides { quiet: Some(true), ..Overrides::default() };
        let spec = JobSpec::from_job_dir(&dir, &overrides).map_err(|e| ServeError::conflict(e.to_string()))?;
        // A trial cancelled before it ran (or by a forced cancel) left no result, only its
        // row: read before the job's pump rewrites the rows from the Supervisor.
        let rows = self.store.rollouts_of(&job.id)?;
        let mut latest: HashMap<&str, &RolloutRow> = HashMap::new();
        for row in &rows {
            let slot = latest.entry(row.trial_key.as_str()).or_insert(row);
            if row.retry_index > slot.retry_index {
                *slot = row;
            }
        }
        // Only what has no result runs: a cancelled trial was cancelled by a user of the
        // service (its own stop leaves running trials without a result).
        let mode = StartMode::Resume { only: Some(Only::Unfinished) };
        // Started paused, so that nothing the users cancelled starts before it is cancelled
        // again, in the Supervisor this time.
        let status = self.start(&job.id, JobPlan::new(spec), mode, true).await?;
        for trial in status.trials.iter().filter(|t| !t.state.is_terminal()) {
            let cancelled =
                trial.key.as_deref().and_then(|k| latest.get(k)).is_some_and(|r| r.state == state::CANCELLED);
            if cancelled {
                let _ = self.ask(&job.id, JobControl::CancelTrial(trial.name.clone())).await;
            }
        }
        if !paused {
            let _ = self.ask(&job.id, JobControl::Resume).await;
        }
        self.nudge(&job.id);
        Ok(())
    }

    /// Writes the job's record into its directory, where an index rebuild finds it.
    fn keep_record(&self, job_id: &str) {
        let Ok(Some(job)) = self.store.job(job_id) else { return };
        if let Err(e) = record::JobRecord::of(&job).write(Path::new(&job.dir)) {
            tracing::error!(job = %job_id, error = %e, "could not write the job's record");
        }
    }

    fn nudge(&self, job_id: &str) {
        if let Some(running) = self.running(job_id) {
            let _ = running.nudge.send(());
        }
    }

    /// The job's row, or 404.
    pub fn job(&self, id: &str) -> Result<JobRow, ServeError> {
        self.store.job(id)?.ok_or_else(|| ServeError::NotFound(format!("Unknown job ID: {id}")))
    }

    pub fn rollout(&self, id: &str) -> Result<RolloutRow, ServeError> {
        self.store.rollout(id)?.ok_or_else(|| ServeError::NotFound(format!("Unknown rollout ID: {id}")))
    }

    /// Sends a control to a running job; a job that has ended refuses as closed.
    async fn ask(&self, job_id: &str, control: JobControl) -> Result<Option<JobStatus>, ControlRefusal> {
        let Some(running) = self.running(job_id) else { return Ok(None) };
        let answer = running.controller.ask(control).await;
        let _ = running.nudge.send(());
        match answer {
            Ok(status) => Ok(Some(status)),
            Err(ControlError::Refused(refusal)) => Err(refusal),
            Err(ControlError::Gone) => Ok(None),
        }
    }

    /// `POST /jobs/{id}/pause` and `/resume`.
    pub async fn pause_job(self: &Arc<Self>, id: &str, pause: bool) -> Result<(), ServeError> {
        self.require_open()?;
        let job = self.job(id)?;
        let control = if pause { JobControl::Pause } else { JobControl::Resume };
        let asked = self.ask(id, control).await;
        if !pause && matches!(asked, Ok(None)) && !state::is_terminal(&job.state) {
            // Ended with trials left (halted, or paused when the service stopped): run them.
            self.reopen(&job, false).await?;
        }
        self.store.set_job_flags(id, Some(pause), None)?;
        self.keep_record(id);
        self.sync_now(id).await;
        Ok(())
    }

    /// `POST /jobs/{id}/cancel`: `force` stops running trials too; otherwise they finish and
    /// nothing more starts.
    pub async fn cancel_job(self: &Arc<Self>, id: &str, force: bool) -> Result<(), ServeError> {
        self.require_open()?;
        let job = self.job(id)?;
        if state::is_terminal(&job.state) {
            return Ok(());
        }
        self.store.set_job_flags(id, None, Some(if force { "hard" } else { "soft" }))?;
        self.keep_record(id);
        match self.running(id) {
            Some(running) if force => running.canceller.cancel(),
            Some(_) => {
                if let Ok(Some(status)) = self.ask(id, JobControl::Status).await {
                    for trial in status.trials.iter().filter(|t| !t.state.is_terminal() && t.state != RUNNING) {
                        let _ = self.ask(id, JobControl::CancelTrial(trial.name.clone())).await;
                    }
                }
            }
            None => {}
        }
        if self.running(id).is_none() {
            rollouts::cancel_unstarted(&self.store, id)?;
        }
        self.sync_now(id).await;
        Ok(())
    }

    /// `POST /rollouts/{id}/cancel`.
    pub async fn cancel_rollout(self: &Arc<Self>, id: &str) -> Result<(), ServeError> {
        self.require_open()?;
        let rollout = self.rollout(id)?;
        if state::is_terminal(&rollout.state) {
            return Ok(());
        }
        match self.ask(&rollout.job_id, JobControl::CancelTrial(TrialName(rollout.name.clone()))).await {
            Ok(Some(_)) | Err(ControlRefusal::AlreadyFinished(_)) => {}
            Ok(None) => rollouts::cancel_one(&self.store, &rollout)?,
            Err(refusal) => return Err(ServeError::conflict(refusal.to_string())),
        }
        self.sync_now(&rollout.job_id).await;
        Ok(())
    }

    /// `POST /rollouts/{id}/pause` and `/resume`: terminus pauses whole jobs, not one trial.
    pub fn pause_rollout(&self, id: &str, pause: bool) -> Result<(), ServeError> {
        let rollout = self.rollout(id)?;
        match rollout.state.as_str() {
            state::RUNNING | state::CANCELLING if pause => {
                Err(ServeError::conflict("Only queued rollouts can be paused."))
            }
            state::QUEUED if pause => Err(ServeError::conflict(
                "terminus pauses whole jobs, not single rollouts: pause the rollout's job (POST /jobs/{id}/pause)",
            )),
            state::PAUSED if !pause => {
                Err(ServeError::conflict("the rollout waits for its job: resume the job (POST /jobs/{id}/resume)"))
            }
            _ => Ok(()),
        }
    }

    /// `POST /rollouts/{id}/retry`: a new attempt of the rollout's trial; returns its id.
    pub async fn retry_rollout(self: &Arc<Self>, id: &str, key: Option<String>) -> Result<Value, ServeError> {
        self.require_open()?;
        if let Some(key) = &key
            && let Some(first) = self.store.idempotent("retry_rollout", key)?
        {
            return Err(used_key(first));
        }
        let rollout = self.rollout(id)?;
        if !state::is_terminal(&rollout.state) {
            return Err(ServeError::conflict("Retry requires a finished/cancelled attempt after cleanup."));
        }
        let job = self.job(&rollout.job_id)?;
        let latest = self.store.latest(&job.id, &rollout.trial_key)?.unwrap_or_else(|| rollout.clone());
        if !state::is_terminal(&latest.state) {
            return Err(ServeError::conflict("Retry requires a finished/cancelled attempt after cleanup."));
        }
        // Held from the ask to the new row: a sync in between would add the attempt itself.
        let mut guard = self.sync_lock.lock().await;
        let retry = JobControl::RetryTrial(TrialName(latest.name.clone()));
        let asked_of = self.running(&job.id).map(|r| r.generation);
        let mut asked = self.ask(&job.id, retry.clone()).await;
        if matches!(asked, Ok(None) | Err(ControlRefusal::Closed)) {
            // The job has ended, or is ending: once it has, it runs again, paused, so the
            // retry is all that starts. The lock is let go meanwhile: an ending job's pump
            // syncs before it lets the job go.
            drop(guard);
            self.until_ended(&job.id, asked_of).await?;
            // Another retry may have reopened it meanwhile.
            let _reopening = self.reopening.lock().await;
            if self.running(&job.id).is_none() {
                self.reopen(&job, true).await?;
            }
            guard = self.sync_lock.lock().await;
            // A trial that never ran is named anew by the reopened job: found by its key.
            let mut retry = retry;
            if let Ok(Some(status)) = self.ask(&job.id, JobControl::Status).await
                && let Some(trial) = status.trials.iter().find(|t| t.key.as_deref() == Some(latest.trial_key.as_str()))
            {
                retry = JobControl::RetryTrial(trial.name.clone());
            }
            asked = self.ask(&job.id, retry).await;
        }
        match asked {
            Ok(Some(_)) => {}
            Ok(None) => return Err(ServeError::Unavailable("the rollout's job could not be reopened".into())),
            Err(refusal) => return Err(ServeError::conflict(refusal.to_string())),
        }
        let new_id = uuid::Uuid::new_v4().to_string();
        let response = json!({ "rollout_id": new_id });
        let next = rollouts::next_attempt(&latest, &new_id, &rollout.id);
        self.store.insert_retry(&next.row(), key.as_deref().map(|k| (k, &response)))?;
        drop(guard);
        self.keep_record(&job.id);
        if !job.paused {
            let _ = self.ask(&job.id, JobControl::Resume).await;
        }
        self.sync_now(&job.id).await;
        Ok(response)
    }

    /// Waits until a job that is ending has ended (its Supervisor sweeps its containers first).
    /// Waits until the job's start `generation` (None: none) no longer runs.
    async fn until_ended(&self, job_id: &str, generation: Option<u64>) -> Result<(), ServeError> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        while generation.is_some() && self.running(job_id).map(|r| r.generation) == generation {
            if tokio::time::Instant::now() > deadline {
                return Err(ServeError::conflict("Retry requires completed cleanup."));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Brings a job's rows up to date now (a control's answer shows its effect).
    async fn sync_now(self: &Arc<Self>, job_id: &str) {
        let controller = self.running(job_id).map(|r| r.controller);
        pump::sync(self, job_id, controller.as_ref(), &HashMap::new()).await;
    }

    /// Removes the containers of every running job (the service is stopping; the next start
    /// runs their trials again).
    pub async fn stop_running(&self) {
        let running: Vec<(String, Running)> = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (id, job) in running {
            if let Err(e) = terminus_actors::sweep_job_containers(&job.backend, &id).await {
                tracing::warn!(job = %id, error = %e, "could not remove the job's containers");
            }
        }
    }

    pub(crate) fn forget(&self, job_id: &str) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(job_id);
        self.shared.leave(&terminus_core::ids::JobId(job_id.parse().unwrap_or_default()));
    }
}

const RUNNING: terminus_core::control::TrialState = terminus_core::control::TrialState::Running;

/// The 409 of a reused idempotency key: the first answer's members come with it.
fn used_key(first: Value) -> ServeError {
    let extra: Map<String, Value> = match first {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    ServeError::Conflict { detail: "Idempotency-Key has already been used.".into(), extra }
}
