//! What a request can fail with, by kind; each kind is one HTTP status and names the thing it
//! is about (job, trial, file).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("no job `{0}` in the jobs directory")]
    NoJob(String),
    #[error("no trial `{trial}` in job `{job}`")]
    NoTrial { job: String, trial: String },
    #[error("no file `{0}` here")]
    NoFile(String),
    /// A name or path that would leave the jobs directory (or is not a plain name).
    #[error("refused path `{0}`: only plain names inside the jobs directory are served")]
    Refused(String),
    #[error("`{path}` is {size} bytes, more than this view reads at once ({limit} bytes)")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("`{path}` cannot be read: {message}")]
    Unreadable { path: String, message: String },
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A control for a job this process does not run (only `terminus run --view` controls, and
    /// only its own job).
    #[error("this viewer does not run job `{0}`: only `terminus run --view` controls its own job")]
    NotControllable(String),
    /// A control without the token of the address the job's owner was shown.
    #[error("controls need the address `terminus run --view` printed (it carries their token)")]
    ControlToken,
    /// A control sent from a page of another origin.
    #[error("controls are accepted from this viewer's own pages only")]
    CrossOrigin,
    #[error(transparent)]
    ControlRefused(#[from] terminus_core::control::ControlRefusal),
}

impl ViewError {
    fn status(&self) -> StatusCode {
        match self {
            ViewError::NoJob(_) | ViewError::NoTrial { .. } | ViewError::NoFile(_) => StatusCode::NOT_FOUND,
            ViewError::Refused(_) => StatusCode::FORBIDDEN,
            ViewError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ViewError::Unreadable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ViewError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ViewError::NotControllable(_) | ViewError::ControlRefused(_) => StatusCode::CONFLICT,
            ViewError::CrossOrigin | ViewError::ControlToken => StatusCode::FORBIDDEN,
        }
    }

    /// The kind's name in the JSON error body, for the browser side to act on.
    fn kind(&self) -> &'static str {
        match self {
            ViewError::NoJob(_) => "no_job",
            ViewError::NoTrial { .. } => "no_trial",
            ViewError::NoFile(_) => "no_file",
            ViewError::Refused(_) => "refused",
            ViewError::TooLarge { .. } => "too_large",
            ViewError::Unreadable { .. } => "unreadable",
            ViewError::BadRequest(_) => "bad_request",
            ViewError::NotControllable(_) => "not_controllable",
            ViewError::CrossOrigin => "cross_origin",
            ViewError::ControlToken => "control_token",
            ViewError::ControlRefused(_) => "control_refused",
        }
    }
}

impl IntoResponse for ViewError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string(), "kind": self.kind() });
        (self.status(), axum::Json(body)).into_response()
    }
}
