//! The HTTP routes: a read-only JSON API under `/api`, server-sent event streams for live
//! updates, the embedded assets under `/assets`, and the application page for every other path
//! (so `/jobs/<job>`, `/jobs/<job>/trials/<trial>` and `/compare/<a>/<b>` open directly).
//!
//! Every handler's file work runs on the blocking pool; every path comes from `confine`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use terminus_core::secrets;
use terminus_sandbox::Engine;
use tokio::sync::{broadcast, mpsc};

use crate::assets;
use crate::compare;
use crate::error::ViewError;
use crate::live::{self, LiveHub, LiveMessage, TrialLive};
use crate::scan::{self, Catalog, ErrorGroup, GridRow, JobRow, JobState, TrialRow};
use crate::search;
use crate::terminal;
use crate::trial::{self, TrajectoryCache, TrialDetail};

/// What every handler shares.
pub struct AppState {
    pub catalog: Catalog,
    pub trajectories: TrajectoryCache,
    /// The job this process runs, under `terminus run --view`.
    pub hub: Option<Arc<LiveHub>>,
    /// Connected on first use (only the live terminal needs it), and again after a failure.
    pub engine: tokio::sync::Mutex<Option<Engine>>,
    /// Requests must name this server as their host (see [`host_allowed`]).
    pub loopback_only: bool,
    /// Off loopback, the access token every request must carry (a `token` query parameter,
    /// which sets the cookie, or the cookie). Always set off loopback.
    pub token: Option<String>,
    /// What a live control must present (the `token` query parameter, which sets the cookie, or
    /// the cookie): the access token off loopback, a token of its own on loopback under `run
    /// --view` (any local user may reach a loopback viewer; only its owner saw the address).
    pub control_token: Option<String>,
    /// Requests served at once (event streams aside); more wait, so one client cannot make the
    /// viewer read many large files at the same time.
    pub permits: Arc<tokio::sync::Semaphore>,
    /// Event streams open at once.
    pub streams: Arc<tokio::sync::Semaphore>,
}

/// The cookie that carries the access token after the first page.
pub const TOKEN_COOKIE: &str = "terminus_view_token";
/// Requests served at once.
pub const MAX_CONCURRENT_REQUESTS: usize = 8;
/// Event streams open at once.
pub const MAX_STREAMS: usize = 32;

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/api/jobs", get(jobs))
        .route("/api/jobs/{job}", get(job))
        .route("/api/jobs/{job}/events", get(job_events))
        .route("/api/jobs/{job}/search", get(job_search))
        .route("/api/jobs/{job}/control", post(control))
        .route("/api/jobs/{job}/trials/{trial}", get(trial_detail))
        .route("/api/jobs/{job}/trials/{trial}/trajectory", get(trajectory))
        .route("/api/jobs/{job}/trials/{trial}/file", get(file))
        .route("/api/jobs/{job}/trials/{trial}/terminal", get(terminal_events))
        .route("/api/compare/{a}/{b}", get(compare_jobs))
        .route("/api/{*rest}", get(no_api))
        .route("/assets/{*path}", get(asset))
        .fallback(get(page))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Headers on every response, and the host check: the browser may run nothing but our own
/// scripts, may not frame the pages, and must not guess types (a file an agent wrote is never
/// rendered as HTML). A page served on loopback answers only requests addressed to loopback, so
/// a web page elsewhere cannot reach it through DNS rebinding.
async fn guard(State(state): State<Shared>, request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if state.loopback_only && !host_allowed(request.headers()) {
        return (StatusCode::MISDIRECTED_REQUEST, "this viewer answers only on loopback addresses").into_response();
    }
    if !state.loopback_only && !address_host(request.headers()) {
        return (StatusCode::MISDIRECTED_REQUEST, "address this viewer by its IP address").into_response();
    }
    let mut set_cookie = None;
    if state.token.is_none()
        && let Some(control) = &state.control_token
        && let Some((given, true)) = presented_token(&request)
        && same(given.as_bytes(), control.as_bytes())
    {
        set_cookie = Some(format!("{TOKEN_COOKIE}={control}; HttpOnly; SameSite=Strict; Path=/"));
    }
    if let Some(token) = &state.token {
        match presented_token(&request) {
            Some((given, from_query)) if same(given.as_bytes(), token.as_bytes()) => {
                if from_query {
                    set_cookie = Some(format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"));
                }
            }
            _ => {
                return (StatusCode::UNAUTHORIZED, "this viewer needs its access token: open the address it printed")
                    .into_response();
            }
        }
    }
    let path = request.uri().path();
    let streaming = path.ends_with("/events") || path.ends_with("/terminal");
    let semaphore = if streaming { &state.streams } else { &state.permits };
    let permit = if streaming {
        // A stream holds its slot while it is open: past the limit, the client is told so.
        match semaphore.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => return (StatusCode::SERVICE_UNAVAILABLE, "too many open event streams").into_response(),
        }
    } else {
        match semaphore.clone().acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        }
    };
    let mut response = next.run(request).await;
    if streaming {
        // The slot is held by the body: released when the stream ends or the client goes away.
        let (parts, body) = response.into_parts();
        let body = futures_util::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _held = &permit;
            chunk
        });
        response = Response::from_parts(parts, axum::body::Body::from_stream(body));
    } else {
        drop(permit);
    }
    if let Some(cookie) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: header::HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; \
         img-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "no-referrer");
    response
}

/// The token a request carries: from its `token` query parameter (true), else its cookie.
fn presented_token(request: &axum::extract::Request) -> Option<(String, bool)> {
    token_in(request.uri().query(), request.headers())
}

/// The token in a query string (`true`) or, without one there, the cookie (`false`).
fn token_in(query: Option<&str>, headers: &HeaderMap) -> Option<(String, bool)> {
    if let Some(query) = query {
        for pair in query.split('&') {
            if let Some(value) = pair.strip_prefix("token=") {
                return Some((value.to_string(), true));
            }
        }
    }
    let cookies = headers.get_all(header::COOKIE);
    for header in cookies.iter().filter_map(|h| h.to_str().ok()) {
        for cookie in header.split(';') {
            if let Some(value) = cookie.trim().strip_prefix(TOKEN_COOKIE).and_then(|v| v.strip_prefix('=')) {
                return Some((value.to_string(), false));
            }
        }
    }
    None
}

/// Equal bytes, compared in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Off loopback, the `Host` must be an IP address (a name could be any site's, rebound to
/// this address).
fn address_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else { return false };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.parse::<std::net::IpAddr>().is_ok()
}

/// Whether the request's `Host` is a loopback name or address.
fn host_allowed(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else { return false };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => {
            host.rsplit_once(':').map_or(host, |(name, port)| if port.parse::<u16>().is_ok() { name } else { host })
        }
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Runs file work off the async workers.
async fn blocking<T: Send + 'static>(
    state: &Shared,
    work: impl FnOnce(&AppState) -> Result<T, ViewError> + Send + 'static,
) -> Result<T, ViewError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || work(&state))
        .await
        .unwrap_or_else(|e| Err(ViewError::Unreadable { path: "request".into(), message: e.to_string() }))
}

#[derive(Serialize)]
struct JobsList {
    jobs_dir: String,
    assets: bool,
    live_job: Option<String>,
    jobs: Vec<JobRow>,
}

async fn jobs(State(state): State<Shared>) -> Result<axum::Json<JobsList>, ViewError> {
    blocking(&state, |s| {
        Ok(JobsList {
            jobs_dir: s.catalog.root().path().display().to_string(),
            assets: assets::present(),
            live_job: s.hub.as_ref().map(|h| h.job().to_string()),
            jobs: s.catalog.job_rows(),
        })
    })
    .await
    .map(axum::Json)
}

#[derive(Serialize)]
struct JobDetail {
    job: JobRow,
    config: Option<Value>,
    trials: Vec<TrialRow>,
    n_attempts: u32,
    grid: Vec<GridRow>,
    errors: Vec<ErrorGroup>,
    /// This process runs the job: live rows come over `/events` from its hub.
    live: bool,
    /// Another process runs it: `/events` says when its files change.
    watched: bool,
    /// This process runs it and its controls are installed: `POST /control` reaches it.
    controllable: bool,
    live_trials: Vec<TrialLive>,
}

fn job_detail(s: &AppState, name: &str) -> Result<JobDetail, ViewError> {
    let dir = s.catalog.root().job(name)?;
    let row = s.catalog.job_row(name)?;
    let running = row.state == JobState::Running;
    let trials = s.catalog.trial_rows(&dir, running);
    let (n_attempts, grid) = scan::grid(&trials, row.score_convention);
    let mut config = s.catalog.job_files(&dir).config.clone();
    if let Some(config) = &mut config {
        // Stored redacted already; redacted again so no page depends on how it was written.
        secrets::redact_json(config);
    }
    let hub = s.hub.as_ref().filter(|h| h.job() == name);
    Ok(JobDetail {
        errors: scan::error_groups(&trials),
        job: row,
        config,
        trials,
        n_attempts,
        grid,
        live: hub.is_some(),
        watched: hub.is_none() && running,
        controllable: hub.is_some_and(|h| h.controls().is_some()),
        live_trials: hub.map(|h| h.trials()).unwrap_or_default(),
    })
}

async fn job(
    State(state): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<axum::Json<JobDetail>, ViewError> {
    // The buttons are offered to the browser that opened the printed address only.
    let owner = holds_control_token(&state, &token_in(None, &headers));
    let mut detail = blocking(&state, move |s| job_detail(s, &name)).await?;
    detail.controllable &= owner;
    Ok(axum::Json(detail))
}

/// Whether `presented` is the token live controls need.
fn holds_control_token(state: &AppState, presented: &Option<(String, bool)>) -> bool {
    match (&state.control_token, presented) {
        (Some(token), Some((given, _))) => same(given.as_bytes(), token.as_bytes()),
        _ => false,
    }
}

/// A live control of the job this process runs (`terminus run --view`): the request as JSON
/// (`"pause"`, `{"cancel_trial": "<trial>"}`, …), answered with the job's status, or 409 with
/// why it was refused. A browser sends JSON from another origin only after a preflight, which
/// is never allowed, and a page of another origin that says so is refused; the host and token
/// checks of every request apply.
async fn control(
    State(state): State<Shared>,
    Path(name): Path<String>,
    request: axum::extract::Request,
) -> Result<axum::Json<terminus_core::control::JobStatus>, ViewError> {
    if !holds_control_token(&state, &presented_token(&request)) {
        return Err(ViewError::ControlToken);
    }
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|e| ViewError::BadRequest(format!("the control could not be read: {e}")))?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")));
    if !json {
        return Err(ViewError::BadRequest("a control is sent as application/json".into()));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let own = ["http://", "https://"].iter().any(|scheme| origin.to_str().ok() == Some(&format!("{scheme}{host}")));
        if !own {
            return Err(ViewError::CrossOrigin);
        }
    }
    let controls = state.hub.as_ref().filter(|h| h.job() == name).and_then(|h| h.controls());
    let Some(controls) = controls else { return Err(ViewError::NotControllable(name)) };
    let request: terminus_core::control::JobControl =
        serde_json::from_slice(&body).map_err(|e| ViewError::BadRequest(format!("not a control: {e}")))?;
    Ok(axum::Json(controls.ask(request).await?))
}

fn sse_event(message: LiveMessage) -> Result<Event, Infallible> {
    Ok(Event::default().event(message.event).data(message.data))
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

fn from_mpsc(rx: mpsc::Receiver<LiveMessage>) -> EventStream {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (sse_event(m), rx)) }))
}

fn from_hub(snapshot: LiveMessage, rx: broadcast::Receiver<LiveMessage>) -> EventStream {
    let first = futures_util::stream::once(async move { sse_event(snapshot) });
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(message) => Some((sse_event(message), rx)),
            // A slow page missed events: it re-reads the job instead.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                Some((sse_event(LiveMessage { event: "changed", data: "\"lagged\"".into() }), rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    Box::pin(futures_util::StreamExt::chain(first, rest))
}

fn done_stream() -> EventStream {
    Box::pin(futures_util::stream::once(async { sse_event(LiveMessage { event: "done", data: "\"\"".into() }) }))
}

async fn job_events(State(state): State<Shared>, Path(name): Path<String>) -> Result<Response, ViewError> {
    let dir = blocking(&state, {
        let name = name.clone();
        move |s| s.catalog.root().job(&name)
    })
    .await?;
    let stream = match state.hub.as_ref().filter(|h| h.job() == name) {
        Some(hub) => {
            let sub = hub.subscribe();
            from_hub(sub.snapshot, sub.rx)
        }
        None if terminus_core::lock::JobLock::is_held(&dir) => from_mpsc(live::watch_files(dir)),
        None => done_stream(),
    };
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

#[derive(Deserialize)]
struct SearchQuery {
    q: String,
    trial: Option<String>,
    limit: Option<usize>,
}

async fn job_search(
    State(state): State<Shared>,
    Path(name): Path<String>,
    Query(query): Query<SearchQuery>,
) -> Result<axum::Json<search::SearchResult>, ViewError> {
    blocking(&state, move |s| {
        let dir = s.catalog.root().job(&name)?;
        let trials: Vec<(String, std::path::PathBuf)> = match &query.trial {
            Some(trial) => vec![(trial.clone(), s.catalog.root().trial(&name, trial)?)],
            None => s.catalog.trial_names(&dir).into_iter().map(|t| (t.clone(), dir.join(&t))).collect(),
        };
        let limit = query.limit.unwrap_or(search::MAX_HITS).min(search::MAX_HITS);
        Ok(search::search(&trials, query.q.trim(), limit))
    })
    .await
    .map(axum::Json)
}

#[derive(Deserialize)]
struct RootQuery {
    #[serde(default)]
    root: String,
}

async fn trial_detail(
    State(state): State<Shared>,
    Path((job, name)): Path<(String, String)>,
    Query(query): Query<RootQuery>,
) -> Result<axum::Json<TrialDetail>, ViewError> {
    blocking(&state, move |s| {
        let running = s.catalog.job_row(&job)?.state == JobState::Running;
        trial::detail(&s.catalog, &job, &name, &query.root, running)
    })
    .await
    .map(axum::Json)
}

#[derive(Deserialize)]
struct PageQuery {
    path: String,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

async fn trajectory(
    State(state): State<Shared>,
    Path((job, name)): Path<(String, String)>,
    Query(query): Query<PageQuery>,
) -> Result<axum::Json<trial::TrajectoryPage>, ViewError> {
    blocking(&state, move |s| {
        let dir = s.catalog.root().trial(&job, &name)?;
        s.trajectories.page(&dir, &query.path, query.offset, query.limit.unwrap_or(200).min(2000))
    })
    .await
    .map(axum::Json)
}

#[derive(Deserialize)]
struct FileQuery {
    path: String,
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
}

async fn file(
    State(state): State<Shared>,
    Path((job, name)): Path<(String, String)>,
    Query(query): Query<FileQuery>,
) -> Result<Response, ViewError> {
    let slice = blocking(&state, move |s| {
        let dir = s.catalog.root().trial(&job, &name)?;
        trial::read_slice(&dir, &query.path, query.offset, query.limit)
    })
    .await?;
    // Never a type a browser would render or run: an agent wrote these files.
    let kind = if slice.binary {
        "application/octet-stream"
    } else if slice.name.ends_with(".json") {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let headers = [
        (header::CONTENT_TYPE, kind.to_string()),
        (header::HeaderName::from_static("x-total-size"), slice.total.to_string()),
        (header::HeaderName::from_static("x-offset"), slice.offset.to_string()),
        (header::CONTENT_DISPOSITION, "inline".to_string()),
    ];
    Ok((headers, slice.bytes).into_response())
}

async fn terminal_events(
    State(state): State<Shared>,
    Path((job, name)): Path<(String, String)>,
) -> Result<Response, ViewError> {
    let pane = blocking(&state, {
        let (job, name) = (job.clone(), name.clone());
        move |s| Ok(trial::pane_size(&s.catalog.root().trial(&job, &name)?))
    })
    .await?;
    let engine = {
        let mut engine = state.engine.lock().await;
        if engine.is_none() {
            *engine = Engine::connect().await.ok();
        }
        engine.clone()
    };
    let stream = from_mpsc(terminal::stream(engine, name, pane));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

async fn compare_jobs(
    State(state): State<Shared>,
    Path((a, b)): Path<(String, String)>,
) -> Result<axum::Json<compare::Comparison>, ViewError> {
    blocking(&state, move |s| {
        let side = |name: &str| -> Result<(JobRow, Vec<TrialRow>), ViewError> {
            let dir = s.catalog.root().job(name)?;
            let row = s.catalog.job_row(name)?;
            let rows = s.catalog.trial_rows(&dir, row.state == JobState::Running);
            Ok((row, rows))
        };
        let ((a, a_rows), (b, b_rows)) = (side(&a)?, side(&b)?);
        Ok(compare::compare(a, &a_rows, b, &b_rows))
    })
    .await
    .map(axum::Json)
}

async fn no_api(Path(rest): Path<String>) -> ViewError {
    ViewError::NoFile(format!("/api/{rest}"))
}

async fn asset(Path(path): Path<String>) -> Response {
    match assets::get(&path) {
        Some(bytes) => {
            let headers = [(header::CONTENT_TYPE, assets::content_type(&path)), (header::CACHE_CONTROL, "no-cache")];
            (headers, bytes).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The application page for every other path; the plain page when the assets are missing.
async fn page(State(state): State<Shared>) -> Response {
    match assets::get("index.html") {
        Some(bytes) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], bytes).into_response(),
        None => {
            let jobs = blocking(&state, |s| {
                Ok(s.catalog.job_rows().into_iter().map(|r| (r.name, r.state.label().to_string())).collect::<Vec<_>>())
            })
            .await
            .unwrap_or_default();
            Html(assets::fallback_page(&jobs)).into_response()
        }
    }
}

/// The address a server was asked to listen on, for messages.
pub fn display_addr(addr: &SocketAddr) -> String {
    match addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
        std::net::IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass() {
        let with = |host: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            host_allowed(&headers)
        };
        assert!(with("127.0.0.1:8420") && with("localhost:1") && with("[::1]:80") && with("localhost"));
        assert!(!with("evil.example:8420") && !with("10.0.0.1") && !with("127.0.0.1.evil.example"));
        assert!(!host_allowed(&HeaderMap::new()));
    }
}
