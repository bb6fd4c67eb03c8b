//! The request and response of one model call, and what can go wrong with it, independent of
//! any provider's wire format. They live here, not in terminus-llm, so the pure agent logic can
//! decide on them (summarise on overflow, salvage a truncated reply) without HTTP.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// Reasoning text carried back to providers that accept it (interleaved thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role: role.to_string(), content: content.into(), reasoning_content: None }
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }
}

/// One call: the whole conversation to send, ending with the new prompt.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LlmRequest {
    pub messages: Vec<ChatMessage>,
    pub temperature: Option<f64>,
    /// Extra top-level request fields (`llm_call_kwargs`), merged into the body as given.
    pub extra: Map<String, Value>,
    /// The first messages an earlier call's `debug.json` already holds: this call's record
    /// names that file and holds only the rest (a long chat is stored once, not per episode).
    pub logged: Option<LoggedPrefix>,
}

/// `n_messages` leading messages of a request, as `file` (relative to the agent directory)
/// recorded them: its request's messages (themselves in part in the file it names, and so on),
/// then its reply as an assistant message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoggedPrefix {
    pub n_messages: usize,
    pub file: String,
}

/// Token usage and cost of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included (the provider's count).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cache_tokens: u64,
    pub cost_usd: f64,
    /// The provider sent no usable counts: these are estimated from the request and the reply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

/// One reply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LlmResponse {
    pub content: String,
    pub reasoning_content: Option<String>,
    /// The model name the provider reported (may differ from the configured one).
    pub model_name: Option<String>,
    pub usage: Option<Usage>,
    pub finish_reason: Option<String>,
    /// Token ids of the prompt, when rollout details were asked for and the provider sent them.
    pub prompt_token_ids: Option<Vec<u64>>,
    /// Token ids of the reply, likewise.
    pub completion_token_ids: Option<Vec<u64>>,
    /// Log-probability of each reply token, likewise.
    pub logprobs: Option<Vec<f64>>,
    /// The provider's own fields on the reply's choice (vLLM's `stop_reason`, …: every key
    /// but the standard ones and the token ids), likewise; `None` when there are none.
    pub provider_extra: Option<Map<String, Value>>,
    /// `debug.json`: the request as sent and the raw reply, redacted, as pretty JSON.
    pub debug: Option<String>,
    /// Request parameters the endpoint refused and that its client no longer sends (sorted).
    pub dropped_params: Vec<String>,
}

/// What can go wrong with a model call, typed so that callers react by kind: the agent
/// summarises on context overflow, re-prompts on truncated output, and the retry layer retries
/// only what may succeed on a second try. Providers map their HTTP errors to these in
/// terminus-llm; [`crate::error::TrialErrorKind`] gives each its Harbor name.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("context length exceeded: {0}")]
    ContextLengthExceeded(String),
    /// The reply hit the output limit; `truncated` is what arrived.
    #[error("output length exceeded (the reply was truncated)")]
    OutputLengthExceeded { truncated: String, usage: Option<Usage> },
    #[error("rate limited{}: {message}", .retry_after.map(|d| format!(" (retry after {:.1} s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited { retry_after: Option<Duration>, message: String },
    /// The connection failed or broke (no HTTP status).
    #[error("transient provider error: {0}")]
    Transient(String),
    /// The call took longer than its limit.
    #[error("the call timed out: {0}")]
    TimedOut(String),
    /// The server answered with a status that may clear up (5xx, 408, 409, 425, 529).
    #[error("provider error (HTTP {status}): {message}")]
    Server { status: u16, message: String },
    #[error("authentication failed: {0}")]
    Authentication(String),
    /// The key is known but may not use this model or endpoint (HTTP 403).
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The model or endpoint does not exist (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The server does not take a field the request carried (`param`, when its error names
    /// it): a reasoning model's `temperature`, plain OpenAI's `return_token_ids`. The request
    /// may be sent again without it, as LiteLLM's `drop_params` would have left it out.
    #[error("bad request (unsupported parameter{}): {message}", .param.as_ref().map(|p| format!(" `{p}`")).unwrap_or_default())]
    UnsupportedParam { param: Option<String>, message: String },
    #[error("the call was cancelled")]
    Cancelled,
    #[error("unreadable reply: {0}")]
    InvalidResponse(String),
    /// Not sent: the job's (or the agent's) budget is spent.
    #[error("not sent: {0}")]
    BudgetReached(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Transient(_)
                | LlmError::TimedOut(_)
                | LlmError::Server { .. }
                | LlmError::InvalidResponse(_)
        )
    }
}

/// The limits on the calls to one model endpoint, shared by every trial that uses it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitSettings {
    /// The most requests in flight at once.
    pub max_concurrent: usize,
    /// Halve the in-flight cap on a rate limit and grow it back by one per window of successes.
    pub adaptive: bool,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings { max_concurrent: 16, adaptive: true, requests_per_minute: None, tokens_per_minute: None }
    }
}

/// How a failed model call is retried: attempts in all, and the exponential back-off's bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 3, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(30) }
    }
}
