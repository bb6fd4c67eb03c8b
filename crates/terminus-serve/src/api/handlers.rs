//! The routes of single jobs and rollouts, submission, queries, and the features we do not
//! serve (answered in Harbor's own error shapes).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::{App, json_body, ok, problem};
use crate::error::ServeError;
use crate::query;
use crate::store::state;
use crate::wire;

/// A path's id, which must be a UUID.
pub(super) fn uuid_of(what: &str, text: &str) -> Result<String, Response> {
    uuid::Uuid::parse_str(text)
        .map(|u| u.to_string())
        .map_err(|e| ServeError::BadRequest(format!("path.{what}: Input should be a valid UUID, {e}")).into_response())
}

/// The query string's pairs, `+` read as a space.
pub(super) fn query_pairs(raw: Option<&str>) -> Result<Vec<(String, String)>, Response> {
    serde_urlencoded::from_str(raw.unwrap_or_default())
        .map_err(|e| ServeError::BadRequest(format!("query: {e}")).into_response())
}

/// An optional `Idempotency-Key` (an empty one is refused).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, Response> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let text = value.to_str().unwrap_or_default();
    if text.is_empty() || text.len() > 200 {
        return Err(ServeError::BadRequest("header.Idempotency-Key: String should have 1 to 200 characters".into())
            .into_response());
    }
    Ok(Some(text.to_string()))
}

fn body_object(value: Option<Value>, allowed: &[&str]) -> Result<Map<String, Value>, Response> {
    let map = match value {
        None => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(ServeError::BadRequest("body: Input should be a valid dictionary".into()).into_response());
        }
    };
    let extra: Vec<String> = map
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .map(|k| format!("body.{k}: Extra inputs are not permitted"))
        .collect();
    if !extra.is_empty() {
        return Err(ServeError::BadRequest(extra.join("; ")).into_response());
    }
    Ok(map)
}

fn flag(map: &Map<String, Value>, key: &str, default: bool) -> Result<bool, Response> {
    match map.get(key) {
        None => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ServeError::BadRequest(format!("body.{key}: Input should be a valid boolean")).into_response()),
    }
}

pub(super) async fn agents() -> Response {
    ok(json!({ "agents": ["nop", "oracle", "terminus-2"] }))
}

pub(super) async fn sandboxes() -> Response {
    ok(json!({ "sandboxes": ["docker"] }))
}

pub(super) async fn no_options(Path(name): Path<String>) -> Response {
    ServeError::NotFound(format!("The agent '{name}' does not declare an options schema.")).into_response()
}

pub(super) async fn upload(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    let id = match uuid_of("job_id", &id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    match app.service.job(&id) {
        Err(e) => e.into_response(),
        Ok(job) if !state::is_terminal(&job.state) => {
            problem(StatusCode::CONFLICT, "conflict", "The job must finish before uploading.", Map::new())
        }
        Ok(_) => problem(
            StatusCode::BAD_GATEWAY,
            "hub_authentication_required",
            "terminus serve does not upload to Harbor Hub; the job's files are under the server's data directory.",
            Map::new(),
        ),
    }
}

pub(super) async fn mcp() -> Response {
    ServeError::Unavailable("The service is not running.".into()).into_response()
}

pub(super) async fn submit(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let body = match json_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let map = match body_object(body, &["config", "dry_run", "relay_inference", "session_id"]) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(config) = map.get("config").cloned() else {
        return ServeError::BadRequest("body.config: Field required".into()).into_response();
    };
    let dry_run = match flag(&map, "dry_run", false) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if matches!(flag(&map, "relay_inference", false), Ok(true)) {
        return ServeError::BadRequest("Start the server with --relay-url to enable inference relay.".into())
            .into_response();
    }
    if map.get("session_id").is_some_and(|s| !s.is_null()) {
        return ServeError::BadRequest("session_id requires relay_inference.".into()).into_response();
    }
    let key = match idempotency_key(&headers) {
        Ok(k) => k,
        Err(r) => return r,
    };
    match app.service.submit(config, dry_run, key).await {
        Ok(value) => ok(value),
        Err(e) => e.into_response(),
    }
}

fn job_answer(app: &App, id: &str) -> Response {
    let job = match app.service.job(id) {
        Ok(job) => job,
        Err(e) => return e.into_response(),
    };
    match app.service.store().rollouts_of(id) {
        Ok(rows) => ok(json!({ "job": wire::job_detail(&job, &rows.iter().collect::<Vec<_>>()) })),
        Err(e) => ServeError::from(e).into_response(),
    }
}

fn rollout_answer(app: &App, id: &str) -> Response {
    let build = || -> Result<Value, ServeError> {
        let row = app.service.rollout(id)?;
        let attempts = app.service.store().rollouts_of(&row.job_id)?;
        let artifacts = app.service.store().artifacts(&row.id)?;
        let attempts: Vec<_> = attempts.iter().collect();
        Ok(json!({ "rollout": wire::rollout_detail(&row, &attempts, &artifacts) }))
    };
    match build() {
        Ok(value) => ok(value),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn job(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match uuid_of("job_id", &id) {
        Ok(id) => job_answer(&app, &id),
        Err(r) => r,
    }
}

pub(super) async fn rollout(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match uuid_of("rollout_id", &id) {
        Ok(id) => rollout_answer(&app, &id),
        Err(r) => r,
    }
}

async fn job_control(app: Arc<App>, id: String, pause: Option<bool>, cancel: Option<bool>) -> Response {
    let id = match uuid_of("job_id", &id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let done = match (pause, cancel) {
        (Some(pause), _) => app.service.pause_job(&id, pause).await,
        (None, Some(force)) => app.service.cancel_job(&id, force).await,
        (None, None) => Ok(()),
    };
    match done {
        Ok(()) => job_answer(&app, &id),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn pause_job(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    job_control(app, id, Some(true), None).await
}

pub(super) async fn resume_job(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    job_control(app, id, Some(false), None).await
}

/// The `force` of a cancel's optional body (true when left out).
async fn force_of(body: Body) -> Result<bool, Response> {
    let map = body_object(json_body(body).await?, &["force"])?;
    flag(&map, "force", true)
}

pub(super) async fn cancel_job(State(app): State<Arc<App>>, Path(id): Path<String>, body: Body) -> Response {
    match force_of(body).await {
        Ok(force) => job_control(app, id, None, Some(force)).await,
        Err(r) => r,
    }
}

async fn rollout_control(app: Arc<App>, id: String, action: RolloutAction) -> Response {
    let id = match uuid_of("rollout_id", &id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let done = match action {
        RolloutAction::Pause(pause) => app.service.pause_rollout(&id, pause),
        RolloutAction::Cancel => app.service.cancel_rollout(&id).await,
    };
    match done {
        Ok(()) => rollout_answer(&app, &id),
        Err(e) => e.into_response(),
    }
}

enum RolloutAction {
    Pause(bool),
    Cancel,
}

pub(super) async fn pause_rollout(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    rollout_control(app, id, RolloutAction::Pause(true)).await
}

pub(super) async fn resume_rollout(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    rollout_control(app, id, RolloutAction::Pause(false)).await
}

pub(super) async fn cancel_rollout(State(app): State<Arc<App>>, Path(id): Path<String>, body: Body) -> Response {
    // Either way the rollout stops: a running trial is stopped at once.
    match force_of(body).await {
        Ok(_) => rollout_control(app, id, RolloutAction::Cancel).await,
        Err(r) => r,
    }
}

pub(super) async fn retry_rollout(State(app): State<Arc<App>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let id = match uuid_of("rollout_id", &id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let key = match idempotency_key(&headers) {
        Ok(k) => k,
        Err(r) => return r,
    };
    match app.service.retry_rollout(&id, key).await {
        Ok(value) => ok(value),
        Err(e) => e.into_response(),
    }
}

pub(super) async fn query(State(app): State<Arc<App>>, body: Body) -> Response {
    let body = match json_body(body).await {
        Ok(Some(b)) => b,
        Ok(None) => return ServeError::BadRequest("body: Field required".into()).into_response(),
        Err(r) => return r,
    };
    let batch = match query::parse_batch(&body) {
        Ok(batch) => batch,
        Err(e) => return ServeError::BadRequest(e).into_response(),
    };
    let db = app.service.store().path().to_path_buf();
    match tokio::task::spawn_blocking(move || query::run(&db, &batch)).await {
        Ok(Ok(results)) => ok(json!({ "results": results })),
        Ok(Err(e)) => ServeError::Unavailable(format!("the database could not be read: {e}")).into_response(),
        Err(e) => ServeError::Internal(e.to_string()).into_response(),
    }
}

pub(super) async fn query_schema(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let pairs = match query_pairs(raw.as_deref()) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut view = None;
    for (key, value) in pairs {
        match key.as_str() {
            "view" => view = Some(value),
            other => {
                return ServeError::BadRequest(format!("query.{other}: Extra inputs are not permitted"))
                    .into_response();
            }
        }
    }
    if let Some(v) = &view
        && !query::PUBLIC_VIEWS.contains(&v.as_str())
    {
        return ServeError::BadRequest("Unknown public view.".into()).into_response();
    }
    let db = app.service.store().path().to_path_buf();
    match tokio::task::spawn_blocking(move || query::schema(&db, view.as_deref())).await {
        Ok(Ok(value)) => ok(value),
        Ok(Err(e)) => ServeError::Internal(e.to_string()).into_response(),
        Err(e) => ServeError::Internal(e.to_string()).into_response(),
    }
}
