//! What can go wrong with a model call, typed so that callers react by kind: the agent
//! summarises on context overflow, re-prompts on truncated output, and the retry layer retries
//! only what may succeed on a second try.

use std::time::Duration;

use crate::types::Usage;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("context length exceeded: {0}")]
    ContextLengthExceeded(String),
    /// The reply hit the output limit; `truncated` is what arrived.
    #[error("output length exceeded (the reply was truncated)")]
    OutputLengthExceeded { truncated: String, usage: Option<Usage> },
    #[error("rate limited{}: {message}", .retry_after.map(|d| format!(" (retry after {:.1} s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration>, message: String },
    #[error("transient provider error: {0}")]
    Transient(String),
    #[error("authentication failed: {0}")]
    Authentication(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("the call was cancelled")]
    Cancelled,
    #[error("unreadable reply: {0}")]
    InvalidResponse(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, LlmError::RateLimited { .. } | LlmError::Transient(_) | LlmError::InvalidResponse(_))
    }

    /// Harbor-style exception names for result files.
    pub fn exception_type(&self) -> &'static str {
        match self {
            LlmError::ContextLengthExceeded(_) => "ContextLengthExceededError",
            LlmError::OutputLengthExceeded { .. } => "OutputLengthExceededError",
            LlmError::RateLimited { .. } => "RateLimitError",
            LlmError::Transient(_) => "APIConnectionError",
            LlmError::Authentication(_) => "AuthenticationError",
            LlmError::BadRequest(_) => "BadRequestError",
            LlmError::Cancelled => "CancelledError",
            LlmError::InvalidResponse(_) => "APIError",
        }
    }
}
