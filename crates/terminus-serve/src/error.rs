//! What a request can fail with, by kind; the API turns each into Harbor's problem+json (its
//! `_tag` and status).

use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The request is malformed or asks for what cannot be run; the text names the key.
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// The state of the job or rollout does not allow it now, or the idempotency key was used
    /// (`extra` then holds the first answer's members).
    #[error("{detail}")]
    Conflict { detail: String, extra: Map<String, Value> },
    /// The service is shutting down, or the engine could not be reached.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl ServeError {
    pub fn conflict(detail: impl Into<String>) -> ServeError {
        ServeError::Conflict { detail: detail.into(), extra: Map::new() }
    }
}

impl From<crate::store::StoreError> for ServeError {
    fn from(e: crate::store::StoreError) -> ServeError {
        ServeError::Internal(e.to_string())
    }
}
