-- The service's database: internal tables (written by the service only) and the public views
-- that `POST /query` may read. Column names of the views are Harbor 0.26's.
CREATE TABLE IF NOT EXISTS internal_job (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner_id TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    config TEXT NOT NULL,
    lock_uri TEXT NOT NULL,
    dir TEXT NOT NULL,
    cancel_mode TEXT,
    paused INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS internal_rollout (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    job_id TEXT NOT NULL REFERENCES internal_job(id),
    trial_key TEXT NOT NULL,
    retry_index INTEGER NOT NULL,
    retry_of TEXT,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    phase TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    task_name TEXT NOT NULL,
    task_digest TEXT NOT NULL,
    task_source TEXT,
    agent_name TEXT,
    agent_version TEXT,
    model_name TEXT,
    model_provider TEXT,
    reasoning_effort TEXT,
    environment_type TEXT,
    error_type TEXT,
    n_errors INTEGER NOT NULL DEFAULT 0,
    n_input_tokens INTEGER,
    n_cached_input_tokens INTEGER,
    n_output_tokens INTEGER,
    cost_usd REAL,
    rewards TEXT,
    reward_valid INTEGER NOT NULL DEFAULT 0,
    config TEXT NOT NULL,
    lock TEXT NOT NULL,
    result TEXT,
    dir TEXT NOT NULL,
    UNIQUE (job_id, trial_key, retry_index)
);
CREATE INDEX IF NOT EXISTS internal_rollout_job ON internal_rollout (job_id, state);
CREATE TABLE IF NOT EXISTS internal_artifact (
    uri TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    path TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS internal_artifact_rollout ON internal_artifact (rollout_id);
CREATE TABLE IF NOT EXISTS internal_request (
    owner_id TEXT NOT NULL,
    method TEXT NOT NULL,
    request_id TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (owner_id, method, request_id)
);

DROP VIEW IF EXISTS job;
CREATE VIEW job AS
SELECT id, name, state, created_at, updated_at, started_at, finished_at, config, lock_uri
FROM internal_job WHERE owner_id = current_owner_id();

DROP VIEW IF EXISTS rollout;
CREATE VIEW rollout AS
SELECT r.id AS id, r.job_id AS job_id, r.name AS name, r.state AS state,
    CASE WHEN r.state IN ('running', 'cancelling') THEN r.phase END AS phase,
    r.created_at AS created_at, r.updated_at AS updated_at, r.started_at AS started_at,
    r.finished_at AS finished_at, r.retry_index AS retry_index,
    (r.retry_index = (SELECT max(x.retry_index) FROM internal_rollout x
        WHERE x.job_id = r.job_id AND x.trial_key = r.trial_key)) AS is_latest_attempt,
    (SELECT json_group_array(y.id) FROM (SELECT x.id AS id FROM internal_rollout x
        WHERE x.job_id = r.job_id AND x.trial_key = r.trial_key ORDER BY x.retry_index DESC) y) AS retry_ids,
    r.task_name AS task_name, r.task_digest AS task_digest, r.task_source AS task_source,
    r.agent_name AS agent_name, r.agent_version AS agent_version, r.model_name AS model_name,
    r.model_provider AS model_provider, r.reasoning_effort AS reasoning_effort,
    r.environment_type AS environment_type, r.error_type AS error_type,
    NULL AS storage_error_type, r.n_input_tokens AS n_input_tokens,
    r.n_cached_input_tokens AS n_cached_input_tokens, r.n_output_tokens AS n_output_tokens,
    r.cost_usd AS cost_usd, r.config AS config, r.lock AS lock
FROM internal_rollout r JOIN job j ON j.id = r.job_id;

DROP VIEW IF EXISTS rollout_reward;
CREATE VIEW rollout_reward AS
SELECT r.id AS rollout_id, e.key AS reward_key,
    CASE WHEN r.state = 'finished' AND r.reward_valid THEN e.value END AS value
FROM internal_rollout r JOIN job j ON j.id = r.job_id, json_each(r.rewards) e
WHERE r.rewards IS NOT NULL;

DROP VIEW IF EXISTS rollout_step;
CREATE VIEW rollout_step AS
SELECT r.id AS rollout_id, s.key + 1 AS step_index, json_extract(s.value, '$.step_name') AS step_name,
    json_extract(s.value, '$.agent_execution.started_at') AS agent_started_at,
    json_extract(s.value, '$.agent_execution.finished_at') AS agent_finished_at,
    json_extract(s.value, '$.verifier.started_at') AS verifier_started_at,
    json_extract(s.value, '$.verifier.finished_at') AS verifier_finished_at,
    json_extract(s.value, '$.agent_result.n_input_tokens') AS n_input_tokens,
    json_extract(s.value, '$.agent_result.n_cache_tokens') AS n_cached_input_tokens,
    json_extract(s.value, '$.agent_result.n_output_tokens') AS n_output_tokens,
    json_extract(s.value, '$.agent_result.cost_usd') AS cost_usd
FROM internal_rollout r JOIN job j ON j.id = r.job_id, json_each(r.result, '$.step_results') s
WHERE r.result IS NOT NULL AND json_type(r.result, '$.step_results') = 'array';

DROP VIEW IF EXISTS rollout_error;
CREATE VIEW rollout_error AS
SELECT r.id AS rollout_id, NULL AS step_index, r.error_type AS error_type,
    json_extract(r.result, '$.exception_info.occurred_at') AS occurred_at,
    (r.error_type = 'CancelledError') AS is_cancellation,
    (r.error_type LIKE '%TimeoutError') AS is_timeout
FROM internal_rollout r JOIN job j ON j.id = r.job_id
WHERE r.error_type IS NOT NULL;

DROP VIEW IF EXISTS rollout_artifact;
CREATE VIEW rollout_artifact AS
SELECT a.rollout_id AS rollout_id, a.path AS path, a.uri AS uri
FROM internal_artifact a JOIN internal_rollout r ON r.id = a.rollout_id JOIN job j ON j.id = r.job_id;
