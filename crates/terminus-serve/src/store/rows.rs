//! Rows of the internal tables as the service reads them.

use rusqlite::{Connection, OptionalExtension, Row, ToSql};
use serde_json::Value;

use super::StoreError;

#[derive(Clone, Debug)]
pub struct JobRow {
    pub seq: i64,
    pub id: String,
    pub name: String,
    pub state: String,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub config: Value,
    pub lock_uri: String,
    pub dir: String,
    pub cancel_mode: Option<String>,
    pub paused: bool,
}

#[derive(Clone, Debug)]
pub struct RolloutRow {
    pub seq: i64,
    pub id: String,
    pub job_id: String,
    pub trial_key: String,
    pub retry_index: u32,
    pub retry_of: Option<String>,
    pub name: String,
    pub state: String,
    pub phase: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub task_name: String,
    pub task_digest: String,
    pub task_source: Option<String>,
    pub agent_name: Option<String>,
    pub agent_version: Option<String>,
    pub model_name: Option<String>,
    pub model_provider: Option<String>,
    pub reasoning_effort: Option<String>,
    pub error_type: Option<String>,
    pub n_errors: u32,
    pub n_input_tokens: Option<i64>,
    pub n_cached_input_tokens: Option<i64>,
    pub n_output_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub rewards: Option<Value>,
    pub reward_valid: bool,
    pub config: Value,
    pub lock: Value,
    pub result: Option<Value>,
    pub dir: String,
}

const JOB_COLUMNS: &str =
    "seq, id, name, state, created_at, updated_at, started_at, finished_at, config, lock_uri, dir, cancel_mode, paused";

const ROLLOUT_COLUMNS: &str =
    "seq, id, job_id, trial_key, retry_index, retry_of, name, state, phase, created_at, updated_at,
    started_at, finished_at, task_name, task_digest, task_source, agent_name, agent_version, model_name, model_provider,
    reasoning_effort, error_type, n_errors, n_input_tokens, n_cached_input_tokens, n_output_tokens, cost_usd, rewards,
    reward_valid, config, lock, result, dir";

fn json(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

fn job_row(row: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        seq: row.get(0)?,
        id: row.get(1)?,
        name: row.get(2)?,
        state: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
        started_at: row.get(6)?,
        finished_at: row.get(7)?,
        config: json(row.get(8)?).unwrap_or_else(|| Value::Object(Default::default())),
        lock_uri: row.get(9)?,
        dir: row.get(10)?,
        cancel_mode: row.get(11)?,
        paused: row.get(12)?,
    })
}

fn rollout_row(row: &Row<'_>) -> rusqlite::Result<RolloutRow> {
    Ok(RolloutRow {
        seq: row.get(0)?,
        id: row.get(1)?,
        job_id: row.get(2)?,
        trial_key: row.get(3)?,
        retry_index: row.get(4)?,
        retry_of: row.get(5)?,
        name: row.get(6)?,
        state: row.get(7)?,
        phase: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        started_at: row.get(11)?,
        finished_at: row.get(12)?,
        task_name: row.get(13)?,
        task_digest: row.get(14)?,
        task_source: row.get(15)?,
        agent_name: row.get(16)?,
        agent_version: row.get(17)?,
        model_name: row.get(18)?,
        model_provider: row.get(19)?,
        reasoning_effort: row.get(20)?,
        error_type: row.get(21)?,
        n_errors: row.get(22)?,
        n_input_tokens: row.get(23)?,
        n_cached_input_tokens: row.get(24)?,
        n_output_tokens: row.get(25)?,
        cost_usd: row.get(26)?,
        rewards: json(row.get(27)?),
        reward_valid: row.get(28)?,
        config: json(row.get(29)?).unwrap_or(Value::Null),
        lock: json(row.get(30)?).unwrap_or(Value::Null),
        result: json(row.get(31)?),
        dir: row.get(32)?,
    })
}

pub(super) fn job(conn: &Connection, id: &str) -> Result<Option<JobRow>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM internal_job WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], job_row).optional()?)
}

pub(super) fn jobs(conn: &Connection) -> Result<Vec<JobRow>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM internal_job ORDER BY seq");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], job_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn rollout(conn: &Connection, id: &str) -> Result<Option<RolloutRow>, StoreError> {
    let sql = format!("SELECT {ROLLOUT_COLUMNS} FROM internal_rollout WHERE id = ?1");
    Ok(conn.query_row(&sql, [id], rollout_row).optional()?)
}

pub(super) fn rollouts_where(
    conn: &Connection,
    predicate: &str,
    args: &[&dyn ToSql],
) -> Result<Vec<RolloutRow>, StoreError> {
    let order = if predicate.contains("ORDER BY") { "" } else { " ORDER BY seq" };
    let sql = format!("SELECT {ROLLOUT_COLUMNS} FROM internal_rollout WHERE {predicate}{order}");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(args, rollout_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}
