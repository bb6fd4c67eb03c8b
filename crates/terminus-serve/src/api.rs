//! Harbor 0.26's HTTP API over the [`Service`]: the routes, the checks every route makes
//! (bearer key or loopback, browser origin, `Harbor-API-Version`), request size, and errors as
//! RFC 9457 problem+json with Harbor's `_tag`.
#![expect(
    clippy::result_large_err,
    reason = "a refused request's error is its answer: built once, returned at once, never stored"
)]

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::error::ServeError;
use crate::service::Service;

mod download;
mod handlers;
mod listing;

/// Harbor's API version; a request naming another is refused.
pub const API_VERSION: &str = "2026-10-30";
/// The largest request body read.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
const LOCAL_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

pub struct App {
    pub service: Arc<Service>,
    /// The bearer key; None: only loopback clients, by address and `Host`.
    pub api_key: Option<String>,
}

pub fn router(app: Arc<App>) -> Router {
    let api = Router::new()
        .route("/agents", get(handlers::agents))
        .route("/agents/{name}/options", get(handlers::no_options))
        .route("/sandboxes", get(handlers::sandboxes))
        .route("/sandboxes/{name}/options", get(handlers::no_options))
        .route("/query", post(handlers::query))
        .route("/query/schema", get(handlers::query_schema))
        .route("/download", get(download::get).head(download::head))
        .route("/jobs/submit", post(handlers::submit))
        .route("/jobs/filters", get(listing::job_filters))
        .route("/rollouts/filters", get(listing::rollout_filters))
        .route("/jobs", get(listing::jobs))
        .route("/jobs/{id}", get(handlers::job))
        .route("/jobs/{id}/pause", post(handlers::pause_job))
        .route("/jobs/{id}/resume", post(handlers::resume_job))
        .route("/jobs/{id}/cancel", post(handlers::cancel_job))
        .route("/rollouts", get(listing::rollouts))
        .route("/rollouts/{id}", get(handlers::rollout))
        .route("/rollouts/{id}/pause", post(handlers::pause_rollout))
        .route("/rollouts/{id}/resume", post(handlers::resume_rollout))
        .route("/rollouts/{id}/cancel", post(handlers::cancel_rollout))
        .route("/rollouts/{id}/retry", post(handlers::retry_rollout))
        .route("/hub/jobs/{id}/upload", post(handlers::upload))
        .route("/mcp", post(handlers::mcp))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), authorize));
    api.fallback(|| async { problem(StatusCode::NOT_FOUND, "NotFound", "Not Found", Map::new()) })
        .method_not_allowed_fallback(|| async {
            problem(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "Method Not Allowed", Map::new())
        })
        .with_state(app)
}

/// A problem+json response.
pub fn problem(status: StatusCode, tag: &str, detail: &str, extra: Map<String, Value>) -> Response {
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
        "_tag": tag,
    });
    if let Value::Object(map) = &mut body {
        map.extend(extra);
    }
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

impl IntoResponse for ServeError {
    fn into_response(self) -> Response {
        match self {
            ServeError::BadRequest(d) => problem(StatusCode::BAD_REQUEST, "BadRequest", &d, Map::new()),
            ServeError::NotFound(d) => problem(StatusCode::NOT_FOUND, "NotFound", &d, Map::new()),
            ServeError::Conflict { detail, extra } => problem(StatusCode::CONFLICT, "Conflict", &detail, extra),
            ServeError::Unavailable(d) => {
                problem(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", &d, Map::new())
            }
            ServeError::Internal(d) => {
                tracing::error!(error = %d, "request failed");
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalServerError",
                    "An unexpected error occurred",
                    Map::new(),
                )
            }
        }
    }
}

/// A JSON answer.
pub fn ok(value: Value) -> Response {
    let mut response = (StatusCode::OK, value.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Reads a request body, refusing one over the limit with 413.
pub async fn read_body(body: Body) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, MAX_REQUEST_BYTES).await.map_err(|_| {
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "ContentTooLarge",
            "Request body exceeds the configured limit.",
            Map::new(),
        )
    })
}

/// A JSON body (or None for an empty one); a body that is not JSON is a 400.
pub async fn json_body(body: Body) -> Result<Option<Value>, Response> {
    let bytes = read_body(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        problem(StatusCode::BAD_REQUEST, "BadRequest", &format!("body: JSON decode error: {e}"), Map::new())
    })
}

fn host_name(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next()?.to_string(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h).to_string(),
    };
    Some(name.to_ascii_lowercase())
}

/// Whether a browser `Origin` may call: the service's own address, or a loopback one.
fn origin_allowed(origin: &str, headers: &HeaderMap) -> bool {
    let own = headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(|h| format!("http://{h}"));
    if own.as_deref() == Some(origin) {
        return true;
    }
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else { return false };
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split_once(']'),
        None => Some(rest.split_once(':').map_or((rest, ""), |(h, p)| (h, p))),
    };
    match host {
        Some((h, port)) => {
            let port = port.strip_prefix(':').unwrap_or(port);
            LOCAL_HOSTS.contains(&h) && port.chars().all(|c| c.is_ascii_digit()) && !rest.contains('/')
        }
        None => false,
    }
}

/// Every API route: who may call, from which page, speaking which version.
async fn authorize(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    if app.api_key.is_none() {
        let local_peer = peer.is_some_and(|ip| ip.is_loopback());
        let local_host = host_name(headers).is_some_and(|h| LOCAL_HOSTS.contains(&h.as_str()));
        if !(local_peer && local_host) {
            return problem(
                StatusCode::FORBIDDEN,
                "Forbidden",
                "Keyless access is restricted to localhost.",
                Map::new(),
            );
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok())
        && !origin_allowed(origin, headers)
    {
        return problem(StatusCode::FORBIDDEN, "Forbidden", "Browser origin is not allowed.", Map::new());
    }
    if let Some(key) = &app.api_key {
        let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
        if !constant_time_eq(given, format!("Bearer {key}").as_bytes()) {
            return problem(StatusCode::UNAUTHORIZED, "Unauthorized", "A valid bearer token is required.", Map::new());
        }
    }
    if let Some(version) = headers.get("harbor-api-version")
        && version.as_bytes() != API_VERSION.as_bytes()
    {
        let detail = format!("Harbor-API-Version must be {API_VERSION}.");
        return problem(StatusCode::BAD_REQUEST, "BadRequest", &detail, Map::new());
    }
    let head = request.method() == Method::HEAD;
    if head && request.uri().path() != "/download" {
        // Only downloads answer HEAD, as Harbor's routes do.
        return problem(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", "Method Not Allowed", Map::new());
    }
    let mut response = next.run(request).await;
    if head {
        *response.body_mut() = Body::empty();
    }
    response
}

/// Compares a secret without an early exit on the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_pages_and_the_service_itself_are_allowed_origins() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("10.0.0.5:8390"));
        assert!(origin_allowed("http://10.0.0.5:8390", &headers));
        assert!(origin_allowed("http://localhost:3000", &headers));
        assert!(origin_allowed("http://[::1]:80", &headers));
        assert!(origin_allowed("https://127.0.0.1", &headers));
        assert!(!origin_allowed("http://localhost.evil.com", &headers));
        assert!(!origin_allowed("http://127.0.0.1:80/x", &headers));
        assert!(!origin_allowed("https://example.com", &headers));
        assert!(!origin_allowed("null", &headers));
    }

    #[test]
    fn the_host_name_is_read_without_its_port() {
        let mut headers = HeaderMap::new();
        for (host, name) in [("127.0.0.1:8390", "127.0.0.1"), ("[::1]:8390", "::1"), ("LocalHost", "localhost")] {
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            assert_eq!(host_name(&headers).as_deref(), Some(name));
        }
        assert!(constant_time_eq(b"Bearer k", b"Bearer k"));
        assert!(!constant_time_eq(b"Bearer k", b"bearer k"));
        assert!(!constant_time_eq(b"Bearer k", b"Bearer kk"));
    }
}
