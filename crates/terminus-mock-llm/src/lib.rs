//! A scripted OpenAI-compatible model server for tests and dry runs. It listens on 127.0.0.1
//! only and answers `POST /v1/chat/completions` from a script:
//!
//! ```yaml
//! conversations:
//!   - when: "hello.txt"          # chosen when the first user message contains this text
//!     turns:                     # reply N answers a request with N assistant messages before it
//!       - content: '{"analysis": "…", "plan": "…", "commands": [], "task_complete": true}'
//!         usage: {prompt_tokens: 100, completion_tokens: 20}
//!       - status: 500            # or an HTTP error
//! rules:                         # checked first, in order; the first that matches answers
//!   - when_last: "hand your work over"   # the last message contains this text
//!     when_any: "…"                      # and/or some message contains this text
//!     reply: {content: "…"}
//! default:                       # when nothing matches (else HTTP 400)
//!   content: "…"
//! ```
//!
//! Selection is stateless (rules look at the messages, turns count the assistant messages in the
//! request), so retries and concurrent trials of the same task each get the reply their history
//! calls for. Past the last turn, the last one repeats. A turn may wait (`delay_ms`) before
//! answering. Every request is recorded for assertions.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The whole script.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Script {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub conversations: Vec<Conversation>,
    #[serde(default)]
    pub default: Option<Turn>,
}

/// A reply chosen by message content, whatever the turn.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rule {
    /// The last message contains this text.
    #[serde(default)]
    pub when_last: Option<String>,
    /// Some message of the request contains this text.
    #[serde(default)]
    pub when_any: Option<String>,
    /// The raw request body contains this text (e.g. a tag sent through `llm_call_kwargs`).
    #[serde(default)]
    pub when_body: Option<String>,
    pub reply: Turn,
}

impl Rule {
    fn matches(&self, messages: &[Value], raw_body: &str) -> bool {
        let content = |m: &Value| m.get("content").and_then(Value::as_str).unwrap_or("").to_string();
        let last = messages.last().map(content).unwrap_or_default();
        self.when_last.as_ref().is_none_or(|t| last.contains(t.as_str()))
            && self.when_any.as_ref().is_none_or(|t| messages.iter().any(|m| content(m).contains(t.as_str())))
            && self.when_body.as_ref().is_none_or(|t| raw_body.contains(t.as_str()))
    }
}

/// The replies for conversations whose first user message contains `when`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Conversation {
    pub when: String,
    pub turns: Vec<Turn>,
}

/// One reply: content with usage, or an HTTP error.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// An HTTP status other than 200 makes this turn an error reply.
    #[serde(default)]
    pub status: Option<u16>,
    /// The error body for `status` (default: an OpenAI-style error object).
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Wait this long before answering.
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct UsageSpec {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    #[serde(default)]
    pub cached_tokens: u64,
}

impl Script {
    pub fn from_yaml(text: &str) -> anyhow::Result<Script> {
        Ok(serde_yaml::from_str(text)?)
    }
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub body: Value,
    pub authorization: Option<String>,
    /// Which rule answered, if one did.
    pub rule: Option<usize>,
    /// Which conversation answered (`None`: a rule, the default, or no match).
    pub conversation: Option<usize>,
    pub turn: usize,
}

struct Shared {
    script: Script,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A running server. Dropping it does not stop it; call [`MockServer::shutdown`] or let the
/// runtime end.
pub struct MockServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MockServer {
    /// Starts on 127.0.0.1 (port 0 picks a free one).
    pub async fn start(script: Script, port: u16) -> anyhow::Result<MockServer> {
        let shared = Arc::new(Shared { script, requests: Mutex::new(Vec::new()) });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/chat/completions", post(chat_completions))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(MockServer { addr, shared, stop: Some(stop) })
    }

    /// The `api_base` to configure: `http://127.0.0.1:PORT/v1`.
    pub fn api_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn chat_completions(State(shared): State<Arc<Shared>>, headers: axum::http::HeaderMap, body: String) -> Response {
    let raw_body = body;
    let Ok(body) = serde_json::from_str::<Value>(&raw_body) else {
        return (
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "body is not JSON", "type": "invalid_request_error"}}).to_string(),
        )
            .into_response();
    };
    let messages = body.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let first_user = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let turn = messages.iter().filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant")).count();
    let rule = shared.script.rules.iter().position(|r| r.matches(&messages, &raw_body));
    let conversation = match rule {
        Some(_) => None,
        None => shared.script.conversations.iter().position(|c| first_user.contains(&c.when)),
    };
    let chosen = match (rule, conversation) {
        (Some(idx), _) => Some(shared.script.rules[idx].reply.clone()),
        (None, Some(idx)) => {
            let turns = &shared.script.conversations[idx].turns;
            turns.get(turn).or(turns.last()).cloned()
        }
        (None, None) => shared.script.default.clone(),
    };
    shared.requests.lock().unwrap_or_else(|p| p.into_inner()).push(RecordedRequest {
        body: body.clone(),
        authorization: headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string),
        rule,
        conversation,
        turn,
    });
    if let Some(delay) = chosen.as_ref().and_then(|t| t.delay_ms) {
        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
    }
    let Some(reply) = chosen else {
        return (StatusCode::BAD_REQUEST, json!({"error": {"message": "the mock script has no reply for this conversation", "type": "invalid_request_error"}}).to_string()).into_response();
    };
    if let Some(status) = reply.status.filter(|s| *s != 200) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let text = reply.body.clone().unwrap_or_else(|| {
            json!({"error": {"message": format!("scripted error {status}"), "type": "server_error"}}).to_string()
        });
        return (status, [("content-type", "application/json")], text).into_response();
    }
    let usage = reply.usage.unwrap_or_default();
    let mut message = json!({"role": "assistant", "content": reply.content});
    if let Some(reasoning) = &reply.reasoning_content {
        message["reasoning_content"] = json!(reasoning);
    }
    let response = json!({
        "id": format!("chatcmpl-mock-{turn}"),
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model").cloned().unwrap_or(json!("mock")),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason.clone().unwrap_or_else(|| "stop".into())}],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}
        }
    });
    ([("content-type", "application/json")], response.to_string()).into_response()
}
