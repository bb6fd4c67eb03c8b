//! The service's database: jobs, their rollouts (one row per attempt of a trial), the artifacts
//! each finished attempt registered, and the idempotency keys already answered.
//!
//! One writer connection, behind a mutex: every write is a short statement or transaction, so
//! holding it never waits on anything but SQLite. The job directories stay the truth: a row's
//! figures are read from the trial's `result.json` and can be rebuilt from it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

mod rows;

pub use rows::{JobRow, RolloutRow};

/// The owner every row belongs to (the service has one user: whoever holds its key).
pub const OWNER: &str = "local";

/// The database file in the data directory.
pub const DB_FILE: &str = "terminus.sqlite3";

const SCHEMA: &str = include_str!("schema.sql");

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database `{path}`: {source}")]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// Harbor's run states.
pub mod state {
    pub const QUEUED: &str = "queued";
    pub const RUNNING: &str = "running";
    pub const PAUSED: &str = "paused";
    pub const CANCELLING: &str = "cancelling";
    pub const FINISHED: &str = "finished";
    pub const CANCELLED: &str = "cancelled";
    pub const ALL: [&str; 6] = [QUEUED, RUNNING, PAUSED, CANCELLING, FINISHED, CANCELLED];

    pub fn is_terminal(state: &str) -> bool {
        state == FINISHED || state == CANCELLED
    }
}

/// A timestamp as the database keeps it (Python's `isoformat()` of an aware UTC time).
pub fn stamp() -> String {
    terminus_core::time::now().format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

/// A new job's row.
pub struct NewJob<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub config: &'a Value,
    pub lock_uri: &'a str,
    pub dir: &'a Path,
    /// When it was submitted (now, unless the job is indexed again from its record).
    pub created_at: Option<&'a str>,
}

/// A new attempt's row (its figures come when it ends).
pub struct NewRollout<'a> {
    pub id: &'a str,
    pub job_id: &'a str,
    pub trial_key: &'a str,
    pub retry_index: u32,
    pub retry_of: Option<&'a str>,
    pub name: &'a str,
    pub task_name: &'a str,
    pub task_digest: &'a str,
    pub task_source: Option<&'a str>,
    pub agent_name: Option<&'a str>,
    pub model_name: Option<&'a str>,
    pub model_provider: Option<&'a str>,
    pub reasoning_effort: Option<&'a str>,
    pub config: &'a Value,
    pub lock: &'a Value,
    pub dir: &'a Path,
    pub state: &'a str,
}

/// What an ended attempt's `result.json` says, as the columns hold it.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub state: &'static str,
    pub error_type: Option<String>,
    pub n_errors: u32,
    pub agent_name: Option<String>,
    pub agent_version: Option<String>,
    pub model_name: Option<String>,
    pub model_provider: Option<String>,
    pub n_input_tokens: Option<i64>,
    pub n_cached_input_tokens: Option<i64>,
    pub n_output_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub rewards: Option<Value>,
    pub reward_valid: bool,
    pub result: Option<Value>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// (relative path, URI) of every file and directory of the attempt.
    pub artifacts: Vec<(String, String)>,
    /// Where the attempt's files are now (an earlier attempt's move under `attempts/<n>/`).
    pub dir: Option<String>,
}

pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (or makes) the database in WAL mode, with its tables and views.
    pub fn open(data_dir: &Path) -> Result<Store, StoreError> {
        let path = data_dir.join(DB_FILE);
        let open = |source| StoreError::Open { path: path.clone(), source };
        let conn = Connection::open(&path).map_err(open)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(open)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(open)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(open)?;
        // The views ask whose rows to show; the writer is nobody's, so a view read through it
        // shows nothing (the service reads the internal tables).
        conn.create_scalar_function("current_owner_id", 0, rusqlite::functions::FunctionFlags::SQLITE_UTF8, |_| {
            Ok(None::<String>)
        })
        .map_err(open)?;
        conn.execute_batch(SCHEMA).map_err(open)?;
        Ok(Store { path, conn: Mutex::new(conn) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer recorded for an idempotency key, if the key was used.
    pub fn idempotent(&self, method: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let text: Option<String> = self
            .conn()
            .query_row(
                "SELECT response FROM internal_request WHERE owner_id = ?1 AND method = ?2 AND request_id = ?3",
                params![OWNER, method, key],
                |row| row.get(0),
            )
            .optional()?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Records a job, its first attempts and (if given) the key that asked for it, at once.
    pub fn insert_job(
        &self,
        job: &NewJob<'_>,
        rollouts: &[NewRollout<'_>],
        key: Option<(&str, &Value)>,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let now = stamp();
        tx.execute(
            "INSERT INTO internal_job (id, owner_id, name, state, created_at, updated_at, config, lock_uri, dir)
             VALUES (?1, ?2, ?3, 'queued', coalesce(?8, ?4), ?4, ?5, ?6, ?7)",
            params![
                job.id,
                OWNER,
                job.name,
                now,
                job.config.to_string(),
                job.lock_uri,
                job.dir.display().to_string(),
                job.created_at
            ],
        )?;
        for rollout in rollouts {
            insert_rollout(&tx, rollout, &now)?;
        }
        if let Some((key, response)) = key {
            record_key(&tx, "submit_job", key, response, &now)?;
        }
        refresh_job(&tx, job.id)?;
        tx.commit()?;
        Ok(())
    }

    /// Records an automatic retry's new attempt.
    pub fn insert_attempt(&self, rollout: &NewRollout<'_>) -> Result<(), StoreError> {
        let conn = self.conn();
        insert_rollout(&conn, rollout, &stamp())?;
        refresh_job(&conn, rollout.job_id)?;
        Ok(())
    }

    /// Records a new attempt of a trial (a retry), with the key that asked for it.
    pub fn insert_retry(&self, rollout: &NewRollout<'_>, key: Option<(&str, &Value)>) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let now = stamp();
        insert_rollout(&tx, rollout, &now)?;
        if let Some((key, response)) = key {
            record_key(&tx, "retry_rollout", key, response, &now)?;
        }
        // A retried job is open again, whatever ended it.
        tx.execute("UPDATE internal_job SET cancel_mode = NULL WHERE id = ?1", params![rollout.job_id])?;
        refresh_job(&tx, rollout.job_id)?;
        tx.commit()?;
        Ok(())
    }

    pub fn job(&self, id: &str) -> Result<Option<JobRow>, StoreError> {
        rows::job(&self.conn(), id)
    }

    pub fn jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        rows::jobs(&self.conn())
    }

    pub fn rollout(&self, id: &str) -> Result<Option<RolloutRow>, StoreError> {
        rows::rollout(&self.conn(), id)
    }

    /// Every attempt of a job, in insertion order.
    pub fn rollouts_of(&self, job_id: &str) -> Result<Vec<RolloutRow>, StoreError> {
        rows::rollouts_where(&self.conn(), "job_id = ?1", &[&job_id])
    }

    pub fn all_rollouts(&self) -> Result<Vec<RolloutRow>, StoreError> {
        rows::rollouts_where(&self.conn(), "1", &[])
    }

    /// The newest attempt of a trial.
    pub fn latest(&self, job_id: &str, trial_key: &str) -> Result<Option<RolloutRow>, StoreError> {
        let mut found = rows::rollouts_where(
            &self.conn(),
            "job_id = ?1 AND trial_key = ?2 ORDER BY retry_index DESC LIMIT 1",
            &[&job_id, &trial_key],
        )?;
        Ok(found.pop())
    }

    /// Moves a live attempt to `state` (and `phase`, and the name its run goes by).
    pub fn set_live(
        &self,
        id: &str,
        state: &str,
        phase: Option<&str>,
        name: &str,
        dir: &Path,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let now = stamp();
        let dir = dir.display().to_string();
        let changed = conn.execute(
            "UPDATE internal_rollout SET state = ?2, phase = ?3, name = ?4, dir = ?6, updated_at = ?5,
                 started_at = CASE WHEN ?2 IN ('running', 'cancelling') THEN coalesce(started_at, ?5) ELSE started_at END
             WHERE id = ?1 AND (state IS NOT ?2 OR phase IS NOT ?3 OR name IS NOT ?4 OR dir IS NOT ?6)",
            params![id, state, phase, name, now, dir],
        )?;
        if changed > 0 {
            let job: String =
                conn.query_row("SELECT job_id FROM internal_rollout WHERE id = ?1", [id], |r| r.get(0))?;
            if state == state::RUNNING {
                conn.execute(
                    "UPDATE internal_job SET started_at = coalesce(started_at, ?2) WHERE id = ?1",
                    params![job, now],
                )?;
            }
            refresh_job(&conn, &job)?;
        }
        Ok(())
    }

    /// Records how an attempt ended, with its artifacts.
    pub fn set_outcome(&self, id: &str, outcome: &Outcome) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let now = stamp();
        tx.execute(
            "UPDATE internal_rollout SET state = ?2, phase = NULL, updated_at = ?3,
                 started_at = coalesce(started_at, ?4, ?3), finished_at = coalesce(?5, ?3),
                 error_type = ?6, n_errors = ?7, agent_name = coalesce(?8, agent_name), agent_version = ?9,
                 model_name = coalesce(?10, model_name), model_provider = coalesce(?11, model_provider),
                 n_input_tokens = ?12, n_cached_input_tokens = ?13, n_output_tokens = ?14, cost_usd = ?15,
                 rewards = ?16, reward_valid = ?17, result = ?18, dir = coalesce(?19, dir)
             WHERE id = ?1",
            params![
                id,
                outcome.state,
                now,
                outcome.started_at,
                outcome.finished_at,
                outcome.error_type,
                outcome.n_errors,
                outcome.agent_name,
                outcome.agent_version,
                outcome.model_name,
                outcome.model_provider,
                outcome.n_input_tokens,
                outcome.n_cached_input_tokens,
                outcome.n_output_tokens,
                outcome.cost_usd,
                outcome.rewards.as_ref().map(Value::to_string),
                outcome.reward_valid,
                outcome.result.as_ref().map(Value::to_string),
                outcome.dir,
            ],
        )?;
        tx.execute("DELETE FROM internal_artifact WHERE rollout_id = ?1", [id])?;
        for (path, uri) in &outcome.artifacts {
            tx.execute(
                "INSERT OR REPLACE INTO internal_artifact (uri, rollout_id, path) VALUES (?1, ?2, ?3)",
                params![uri, id, path],
            )?;
        }
        let job: String = tx.query_row("SELECT job_id FROM internal_rollout WHERE id = ?1", [id], |r| r.get(0))?;
        refresh_job(&tx, &job)?;
        tx.commit()?;
        Ok(())
    }

    /// A job-level control: its queued attempts paused (or paused ones queued again), its
    /// cancel mode set.
    pub fn set_job_flags(
        &self,
        job_id: &str,
        paused: Option<bool>,
        cancel_mode: Option<&str>,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let now = stamp();
        if let Some(paused) = paused {
            let (from, to) = if paused { (state::QUEUED, state::PAUSED) } else { (state::PAUSED, state::QUEUED) };
            conn.execute("UPDATE internal_job SET paused = ?2 WHERE id = ?1", params![job_id, paused])?;
            conn.execute(
                "UPDATE internal_rollout SET state = ?3, updated_at = ?4 WHERE job_id = ?1 AND state = ?2",
                params![job_id, from, to, now],
            )?;
        }
        if let Some(mode) = cancel_mode {
            conn.execute(
                "UPDATE internal_job SET cancel_mode = CASE WHEN cancel_mode = 'hard' THEN 'hard' ELSE ?2 END WHERE id = ?1",
                params![job_id, mode],
            )?;
        }
        refresh_job(&conn, job_id)?;
        Ok(())
    }

    /// Recomputes a job's state and marks it updated (its job directory changed: the job's
    /// Supervisor has ended and written its result).
    pub fn touch_job(&self, job_id: &str) -> Result<(), StoreError> {
        refresh_job(&self.conn(), job_id)?;
        Ok(())
    }

    /// Whether `uri` is a registered download: a job's lock, the job's `result.json` beside it
    /// (what `terminus view --server` shows of a job), or an attempt's artifact.
    pub fn registered(&self, uri: &str) -> Result<bool, StoreError> {
        if let Some(dir) = uri.strip_suffix("/result.json")
            && self.registered(&format!("{dir}/config.json"))?
        {
            return Ok(true);
        }
        let conn = self.conn();
        let artifact: Option<i64> =
            conn.query_row("SELECT 1 FROM internal_artifact WHERE uri = ?1", [uri], |r| r.get(0)).optional()?;
        if artifact.is_some() {
            return Ok(true);
        }
        let lock: Option<i64> = conn
            .query_row("SELECT 1 FROM internal_job WHERE lock_uri = ?1 AND owner_id = ?2", params![uri, OWNER], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(lock.is_some())
    }

    /// The artifacts an attempt registered: (relative path, URI), in path order.
    pub fn artifacts(&self, rollout_id: &str) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT path, uri FROM internal_artifact WHERE rollout_id = ?1 ORDER BY path")?;
        let rows = stmt.query_map([rollout_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn insert_rollout(conn: &Connection, r: &NewRollout<'_>, now: &str) -> Result<(), rusqlite::Error> {
    conn.execute(
        "INSERT INTO internal_rollout (id, job_id, trial_key, retry_index, retry_of, name, state, created_at, updated_at,
             task_name, task_digest, task_source, agent_name, model_name, model_provider, reasoning_effort,
             environment_type, config, lock, dir)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, 'docker', ?16, ?17, ?18)",
        params![
            r.id,
            r.job_id,
            r.trial_key,
            r.retry_index,
            r.retry_of,
            r.name,
            r.state,
            now,
            r.task_name,
            r.task_digest,
            r.task_source,
            r.agent_name,
            r.model_name,
            r.model_provider,
            r.reasoning_effort,
            r.config.to_string(),
            r.lock.to_string(),
            r.dir.display().to_string(),
        ],
    )?;
    Ok(())
}

fn record_key(conn: &Connection, method: &str, key: &str, response: &Value, now: &str) -> Result<(), rusqlite::Error> {
    conn.execute(
        "INSERT INTO internal_request (owner_id, method, request_id, response, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![OWNER, method, key, response.to_string(), now],
    )?;
    Ok(())
}

/// A job's state from its attempts' states and its cancel mode, as Harbor derives it.
fn refresh_job(conn: &Connection, job_id: &str) -> Result<(), rusqlite::Error> {
    let count = |state: &str| -> Result<i64, rusqlite::Error> {
        conn.query_row(
            "SELECT count(*) FROM internal_rollout WHERE job_id = ?1 AND state = ?2",
            params![job_id, state],
            |r| r.get(0),
        )
    };
    let cancel_mode: Option<String> =
        conn.query_row("SELECT cancel_mode FROM internal_job WHERE id = ?1", [job_id], |r| r.get(0))?;
    let draining = cancel_mode.is_some() && count(state::RUNNING)? > 0;
    let state = if count(state::CANCELLING)? > 0 || draining {
        state::CANCELLING
    } else if count(state::RUNNING)? > 0 {
        state::RUNNING
    } else if count(state::QUEUED)? > 0 {
        state::QUEUED
    } else if count(state::PAUSED)? > 0 {
        state::PAUSED
    } else if cancel_mode.is_some() {
        state::CANCELLED
    } else {
        state::FINISHED
    };
    let now = stamp();
    conn.execute(
        "UPDATE internal_job SET state = ?2, updated_at = ?3,
             finished_at = CASE WHEN ?2 IN ('finished', 'cancelled') THEN coalesce(finished_at, ?3) END
         WHERE id = ?1",
        params![job_id, state, now],
    )?;
    Ok(())
}
