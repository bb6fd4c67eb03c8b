//! `GET`/`HEAD /download?uri=`: a registered file, and only that. A URI is served when it is
//! exactly a job's lock URI (or the job's `result.json` beside it) or an artifact an ended
//! rollout registered, names a regular file inside the data directory with no symlink on its
//! way, and is not a directory entry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::App;
use super::handlers::query_pairs;
use crate::error::ServeError;
use crate::service::unquote;

pub(super) async fn get(State(app): State<Arc<App>>, RawQuery(raw): RawQuery, headers: HeaderMap) -> Response {
    serve(&app, raw.as_deref(), &headers, true).await
}

pub(super) async fn head(State(app): State<Arc<App>>, RawQuery(raw): RawQuery, headers: HeaderMap) -> Response {
    serve(&app, raw.as_deref(), &headers, false).await
}

/// The file a registered URI names, checked against the data directory.
fn local_file(data_dir: &Path, uri: &str) -> Result<PathBuf, ServeError> {
    let rejected = || ServeError::BadRequest("Storage rejected the registered URI.".into());
    let rest = uri.strip_prefix("file://").ok_or_else(rejected)?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') || rest.contains(['?', '#']) {
        return Err(rejected());
    }
    let path = PathBuf::from(unquote(rest).ok_or_else(rejected)?);
    if !path.starts_with(data_dir) || path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(rejected());
    }
    match path.canonicalize() {
        // A symlink anywhere on the way makes the real path differ.
        Ok(real) if real == path => {}
        Ok(_) => return Err(rejected()),
        Err(_) => return Err(ServeError::NotFound("The registered artifact is unavailable.".into())),
    }
    if !path.is_file() {
        return Err(rejected());
    }
    Ok(path)
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` against a length; Err(()) when unsatisfiable.
fn range(text: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = text.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (from, to) = spec.split_once('-')?;
    let span = match (from.trim(), to.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            if n == 0 || len == 0 {
                return Some(Err(()));
            }
            (len.saturating_sub(n), len - 1)
        }
        (a, "") => (a.parse().ok()?, len.saturating_sub(1)),
        (a, b) => (a.parse().ok()?, b.parse::<u64>().ok()?.min(len.saturating_sub(1))),
    };
    if span.0 >= len || span.0 > span.1 {
        return Some(Err(()));
    }
    Some(Ok(span))
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or_default() {
        "json" => "application/json",
        "txt" | "log" => "text/plain; charset=utf-8",
        "html" => "text/html; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "jsonl" => "application/jsonl",
        "mp4" => "video/mp4",
        "cast" => "application/x-asciicast",
        _ => "application/octet-stream",
    }
}

fn disposition(path: &Path) -> String {
    let name: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "artifact".into())
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect();
    if name.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ') {
        format!("attachment; filename=\"{name}\"")
    } else {
        format!("attachment; filename*=utf-8''{}", crate::service::quote(&name))
    }
}

async fn serve(app: &App, raw: Option<&str>, headers: &HeaderMap, with_body: bool) -> Response {
    let pairs = match query_pairs(raw) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut uri = None;
    for (key, value) in pairs {
        match key.as_str() {
            "uri" => uri = Some(value),
            other => {
                return ServeError::BadRequest(format!("query.{other}: Extra inputs are not permitted"))
                    .into_response();
            }
        }
    }
    let Some(uri) = uri.filter(|u| !u.is_empty() && u.len() <= 8192) else {
        return ServeError::BadRequest("query.uri: Field required".into()).into_response();
    };
    match app.service.store().registered(&uri) {
        Ok(true) => {}
        Ok(false) => return ServeError::NotFound("Unknown artifact URI.".into()).into_response(),
        Err(e) => return ServeError::from(e).into_response(),
    }
    if uri.ends_with('/') {
        return ServeError::BadRequest("Download a file URI; directory URIs are not files.".into()).into_response();
    }
    let path = match local_file(app.service.data_dir(), &uri) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let Ok(meta) = std::fs::metadata(&path) else {
        return ServeError::NotFound("The registered artifact is unavailable.".into()).into_response();
    };
    let len = meta.len();
    let modified = meta.modified().ok().map(chrono::DateTime::<chrono::Utc>::from);
    let mtime = modified.map(|m| m.timestamp_nanos_opt().unwrap_or_default()).unwrap_or_default();
    let etag = format!("\"{}\"", &format!("{:x}", Sha256::digest(format!("{mtime}-{len}")))[..32]);
    let if_range_ok = headers.get(header::IF_RANGE).and_then(|v| v.to_str().ok()).is_none_or(|v| v == etag);
    let wanted =
        headers.get(header::RANGE).and_then(|v| v.to_str().ok()).filter(|_| if_range_ok).and_then(|r| range(r, len));
    let mut response = match wanted {
        Some(Err(())) => {
            let mut r = (StatusCode::RANGE_NOT_SATISFIABLE, "").into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{len}")).unwrap_or(HeaderValue::from_static("bytes */0")),
            );
            return r;
        }
        Some(Ok((from, to))) => {
            let body = if with_body { read_span(&path, from, to - from + 1).await } else { Ok(Vec::new()) };
            let Ok(bytes) = body else {
                return ServeError::NotFound("The registered artifact is unavailable.".into()).into_response();
            };
            let mut r = (StatusCode::PARTIAL_CONTENT, bytes).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {from}-{to}/{len}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(to - from + 1));
            r
        }
        None => {
            let body = if with_body { tokio::fs::read(&path).await } else { Ok(Vec::new()) };
            let Ok(bytes) = body else {
                return ServeError::NotFound("The registered artifact is unavailable.".into()).into_response();
            };
            let mut r = (StatusCode::OK, bytes).into_response();
            r.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            r
        }
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&path)));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(&disposition(&path)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(m) = modified
        && let Ok(v) = HeaderValue::from_str(&m.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
    {
        h.insert(header::LAST_MODIFIED, v);
    }
    response
}

async fn read_span(path: &Path, from: u64, n: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(std::io::SeekFrom::Start(from)).await?;
    let mut out = vec![0; n as usize];
    file.read_exact(&mut out).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_http_says() {
        assert_eq!(range("bytes=2-5", 13), Some(Ok((2, 5))));
        assert_eq!(range("bytes=10-", 13), Some(Ok((10, 12))));
        assert_eq!(range("bytes=-3", 13), Some(Ok((10, 12))));
        assert_eq!(range("bytes=2-99", 13), Some(Ok((2, 12))));
        assert_eq!(range("bytes=13-", 13), Some(Err(())));
        assert_eq!(range("bytes=5-2", 13), Some(Err(())));
        assert_eq!(range("items=1-2", 13), None);
    }

    #[test]
    fn only_plain_files_inside_the_data_directory_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().canonicalize().unwrap();
        std::fs::write(data.join("a b.json"), "{}").unwrap();
        std::fs::create_dir(data.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", data.join("link")).unwrap();
        let uri = |p: &str| format!("file://{}", crate::service::quote(&format!("{}/{p}", data.display())));
        assert!(local_file(&data, &uri("a b.json")).is_ok());
        assert!(local_file(&data, &uri("link")).is_err());
        assert!(local_file(&data, &uri("sub")).is_err());
        assert!(local_file(&data, &uri("sub/../a b.json")).is_err());
        assert!(local_file(&data, "file:///etc/passwd").is_err());
        assert!(local_file(&data, &format!("http://x{}/a b.json", data.display())).is_err());
        assert!(matches!(local_file(&data, &uri("gone.json")), Err(ServeError::NotFound(_))));
    }
}
