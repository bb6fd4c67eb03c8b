//! A scripted model server for tests, benchmarks and dry runs. It listens on 127.0.0.1 only and
//! speaks two protocols: OpenAI chat completions (`POST /v1/chat/completions`, and an Azure
//! deployment's `/openai/deployments/<name>/chat/completions`) and Anthropic
//! messages (`POST /v1/messages`). Replies come from a YAML script:
//!
//! ```yaml
//! conversations:
//!   - when: "hello.txt"          # chosen when the first user message contains this text
//!     turns:                     # reply N answers a request with N assistant messages before it
//!       - content: '{"analysis": "…", "plan": "…", "commands": [], "task_complete": true}'
//!         usage: {prompt_tokens: 100, completion_tokens: 20, cached_tokens: 0}
//!       - status: 429            # or an error: any status, optional body and retry_after_sec
//!         retry_after_sec: 1
//!       - drop: true             # or close the connection without answering
//!       - malformed: true        # or answer 200 with a body that is not JSON
//!       - content: "cut off"     # or a reply truncated at the output limit
//!         finish_reason: length
//! rules:                         # checked first, in order; the first that matches answers
//!   - when_last: "hand your work over"   # the last message contains this text
//!     when_any: "…"                      # and/or some message contains it
//!     when_body: "\"user\":\"a\""        # and/or the raw request body contains it
//!     reply: {content: "…"}
//! default:                       # when nothing matches (else HTTP 400)
//!   content: "…"
//! models:                        # served at GET /v1/models, as vLLM lists its models (else 404)
//!   - id: my-model
//!     max_model_len: 4000
//! props_n_ctx: 4096              # served at GET /props, as llama.cpp reports its context (else 404)
//! context_chars: 256000          # a request whose messages hold more characters is refused as
//!                                # too long (HTTP 400, the protocol's context-overflow error)
//! faults:                        # random faults before any routing (seeded, so reproducible)
//!   seed: 7
//!   rate_limited: 0.2            # HTTP 429 with Retry-After
//!   retry_after_sec: 0.05
//!   server_error: 0.1            # HTTP 500
//!   dropped: 0.05                # connection closed without a response
//!   malformed: 0.0               # HTTP 200 with a body that is not JSON
//! ```
//!
//! Selection is stateless (rules look at the messages, turns count the assistant messages), so
//! retries and concurrent trials each get the reply their history calls for. Past the last turn,
//! the last one repeats. A turn may wait (`delay_ms`) before answering. Every request is recorded,
//! with the usage of each successful reply, so tests can check token totals exactly; requests
//! for anything else (the model listing, `/props`, Ollama's `/api/show`) are recorded apart, as
//! [`MockServer::probes`].
//!
//! The HTTP/1.1 server is hand-written (keep-alive, Content-Length bodies) so that faults such as
//! a dropped connection can be injected at the socket.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The whole script.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Script {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default)]
    pub conversations: Vec<Conversation>,
    /// Conversations whose turns are served in the order requests arrive, each once (the last
    /// one repeats), whatever the chat holds: a summarization, which starts a fresh chat, does
    /// not start them again. Looked at before `conversations`; recorded as conversation
    /// `conversations.len() + index`.
    #[serde(default)]
    pub sequential: Vec<Conversation>,
    #[serde(default)]
    pub default: Option<Turn>,
    #[serde(default)]
    pub faults: Option<Faults>,
    /// The model listing at `GET /v1/models` (404 when None, as from a server without one).
    #[serde(default)]
    pub models: Option<Vec<ListedModel>>,
    /// llama.cpp's `default_generation_settings.n_ctx` at `GET /props` (404 when None).
    #[serde(default)]
    pub props_n_ctx: Option<u64>,
    /// The model's context, in characters of the request's messages: a request holding more
    /// is refused with the protocol's context-overflow error (recorded as fault `too_long`).
    #[serde(default)]
    pub context_chars: Option<usize>,
}

/// One model of the listing, with vLLM's `max_model_len` when set.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListedModel {
    pub id: String,
    #[serde(default)]
    pub max_model_len: Option<u64>,
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

/// The replies for conversations whose first user message contains `when`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Conversation {
    pub when: String,
    pub turns: Vec<Turn>,
}

/// One reply: content with usage, an HTTP error, a dropped connection or a malformed body.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub usage: Option<UsageSpec>,
    /// An HTTP status other than 200 makes this turn an error reply.
    #[serde(default)]
    pub status: Option<u16>,
    /// The error body for `status` (default: the protocol's error object).
    #[serde(default)]
    pub body: Option<String>,
    /// Sent as the `Retry-After` header of an error reply.
    #[serde(default)]
    pub retry_after_sec: Option<f64>,
    /// `length` makes the reply a truncated one (`stop_reason: max_tokens` for Anthropic).
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Wait this long before answering.
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Close the connection without answering.
    #[serde(default)]
    pub drop: bool,
    /// Answer 200 with a body that is not JSON.
    #[serde(default)]
    pub malformed: bool,
    /// The reply's `usage` as given, instead of one made from `usage` (null: no `usage` at
    /// all), for servers that omit it or send what they like.
    #[serde(default)]
    pub raw_usage: Option<Value>,
}

/// Token usage of a reply. `prompt_tokens` includes the cached ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageSpec {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    #[serde(default)]
    pub cached_tokens: u64,
}

/// Random faults, drawn per request before routing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Faults {
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub rate_limited: f64,
    #[serde(default)]
    pub retry_after_sec: Option<f64>,
    #[serde(default)]
    pub server_error: f64,
    #[serde(default)]
    pub dropped: f64,
    #[serde(default)]
    pub malformed: f64,
}

impl Rule {
    fn matches(&self, request: &Request) -> bool {
        let last = request.messages.last().map(|(_, c)| c.as_str()).unwrap_or("");
        self.when_last.as_ref().is_none_or(|t| last.contains(t.as_str()))
            && self.when_any.as_ref().is_none_or(|t| request.messages.iter().any(|(_, c)| c.contains(t.as_str())))
            && self.when_body.as_ref().is_none_or(|t| request.raw.contains(t.as_str()))
    }
}

impl Script {
    pub fn from_yaml(text: &str) -> anyhow::Result<Script> {
        Ok(serde_yaml::from_str(text)?)
    }
}

/// Which protocol a request used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    OpenAi,
    Anthropic,
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub protocol: Protocol,
    pub body: Value,
    /// `Authorization` (OpenAI), `api-key` (Azure OpenAI) or `x-api-key` (Anthropic) as
    /// received.
    pub authorization: Option<String>,
    /// Every header as received, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The request's path and query.
    pub path: String,
    /// Which rule answered, if one did.
    pub rule: Option<usize>,
    /// Which conversation answered (`None`: a rule, the default, a fault, or no match).
    pub conversation: Option<usize>,
    pub turn: usize,
    /// The random fault injected instead of a reply, if any.
    pub fault: Option<&'static str>,
    /// The usage of the reply, when a successful (200) reply was sent.
    pub served_usage: Option<UsageSpec>,
    /// When it arrived (for the gaps between a reply and the next request).
    pub received: std::time::Instant,
}

/// A request decoded to what routing needs.
struct Request {
    raw: String,
    body: Value,
    /// (role, text) in order; Anthropic content blocks are joined.
    messages: Vec<(String, String)>,
}

struct Shared {
    script: Script,
    requests: Mutex<Vec<RecordedRequest>>,
    rng: Mutex<rand::rngs::StdRng>,
    /// Requests served so far by each sequential conversation.
    served: Mutex<Vec<usize>>,
    /// `METHOD path` of every request that was no model call.
    probes: Mutex<Vec<String>>,
}

/// A running server. It stops with [`MockServer::shutdown`] or when the runtime ends.
pub struct MockServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MockServer {
    /// Starts on 127.0.0.1 (port 0 picks a free one).
    pub async fn start(script: Script, port: u16) -> anyhow::Result<MockServer> {
        let seed = script.faults.as_ref().map_or(0, |f| f.seed);
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)),
            served: Mutex::new(vec![0; script.sequential.len()]),
            probes: Mutex::new(Vec::new()),
            script,
        });
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let server = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let shared = server.clone();
                        tokio::spawn(async move { serve_connection(stream, shared).await });
                    }
                }
            }
        });
        Ok(MockServer { addr, shared, stop: Some(stop) })
    }

    /// The OpenAI-style `api_base`: `http://127.0.0.1:PORT/v1`.
    pub fn api_base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Anthropic-style base URL: `http://127.0.0.1:PORT` (the client adds `/v1/messages`).
    pub fn anthropic_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `METHOD path` of every request that was no model call (the limits questions), in order.
    pub fn probes(&self) -> Vec<String> {
        self.shared.probes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The summed usage of every successful reply sent.
    pub fn served_usage(&self) -> UsageSpec {
        self.requests().iter().filter_map(|r| r.served_usage).fold(UsageSpec::default(), |acc, u| UsageSpec {
            prompt_tokens: acc.prompt_tokens + u.prompt_tokens,
            completion_tokens: acc.completion_tokens + u.completion_tokens,
            cached_tokens: acc.cached_tokens + u.cached_tokens,
        })
    }

    pub fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// What to do with one request.
enum Action {
    Respond { status: u16, headers: Vec<(String, String)>, body: String },
    Drop,
}

async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let Some((head, body)) = read_request(&mut stream, &mut buffer).await else { return };
        let mut lines = head.lines();
        let request_line = lines.next().unwrap_or("");
        let mut parts = request_line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())))
            .collect();
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let route = path.split('?').next().unwrap_or("").trim_end_matches('/');
        let azure = route.starts_with("/openai/deployments/") && route.ends_with("/chat/completions");
        let action = match (method, route) {
            ("POST", "/v1/chat/completions" | "/chat/completions") => {
                handle(&shared, Protocol::OpenAi, body, header("authorization"), &headers, path).await
            }
            ("POST", _) if azure => handle(&shared, Protocol::OpenAi, body, header("api-key"), &headers, path).await,
            ("POST", "/v1/messages" | "/messages") => {
                handle(&shared, Protocol::Anthropic, body, header("x-api-key"), &headers, path).await
            }
            _ => {
                shared.probes.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{method} {path}"));
                server_info(&shared.script, method, path.trim_end_matches('/'))
            }
        };
        match action {
            Action::Drop => return,
            Action::Respond { status, headers, body } => {
                let mut response = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                    reason(status),
                    body.len()
                );
                for (k, v) in headers {
                    response.push_str(&format!("{k}: {v}\r\n"));
                }
                response.push_str(if close { "connection: close\r\n\r\n" } else { "\r\n" });
                response.push_str(&body);
                if stream.write_all(response.as_bytes()).await.is_err() || close {
                    return;
                }
            }
        }
    }
}

/// Reads one request (head and Content-Length body); None when the peer closed the connection.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(String, String)> {
    let head_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("content-length")))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buffer[body_start..body_start + length]).into_owned();
    buffer.drain(..body_start + length);
    Some((head, body))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Text of a message's content: a string, or the text blocks of a list.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

async fn handle(
    shared: &Shared,
    protocol: Protocol,
    raw: String,
    authorization: Option<String>,
    headers: &[(String, String)],
    path: &str,
) -> Action {
    let Ok(body) = serde_json::from_str::<Value>(&raw) else {
        return error_response(protocol, 400, "body is not JSON", None);
    };
    let messages: Vec<(String, String)> = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|m| {
                    (
                        m.get("role").and_then(Value::as_str).unwrap_or("").to_string(),
                        content_text(m.get("content").unwrap_or(&Value::Null)),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let request = Request { raw, body, messages };
    let turn = request.messages.iter().filter(|(role, _)| role == "assistant").count();
    let mut record = RecordedRequest {
        protocol,
        body: request.body.clone(),
        authorization,
        headers: headers.to_vec(),
        path: path.to_string(),
        rule: None,
        conversation: None,
        turn,
        fault: None,
        served_usage: None,
        received: std::time::Instant::now(),
    };

    if let Some(fault) = draw_fault(shared) {
        record.fault = Some(fault);
        shared.requests.lock().unwrap_or_else(|p| p.into_inner()).push(record);
        let retry_after = shared.script.faults.as_ref().and_then(|f| f.retry_after_sec);
        return match fault {
            "rate_limited" => error_response(protocol, 429, "Rate limit reached (injected)", retry_after),
            "server_error" => error_response(protocol, 500, "The server had an error (injected)", None),
            "malformed" => Action::Respond { status: 200, headers: Vec::new(), body: "{\"choices\": [".into() },
            _ => Action::Drop,
        };
    }

    let script = &shared.script;
    let chars: usize = request.messages.iter().map(|(_, text)| text.chars().count()).sum();
    if let Some(limit) = script.context_chars.filter(|limit| chars > *limit) {
        record.fault = Some("too_long");
        shared.requests.lock().unwrap_or_else(|p| p.into_inner()).push(record);
        return context_overflow(protocol, chars, limit);
    }
    let first_user = request.messages.iter().find(|(role, _)| role == "user").map(|(_, c)| c.as_str()).unwrap_or("");
    record.rule = script.rules.iter().position(|r| r.matches(&request));
    let sequential = match record.rule {
        Some(_) => None,
        None => script.sequential.iter().position(|c| first_user.contains(&c.when)),
    };
    if record.rule.is_none() && sequential.is_none() {
        record.conversation = script.conversations.iter().position(|c| first_user.contains(&c.when));
    }
    let chosen = match (record.rule, sequential, record.conversation) {
        (Some(idx), _, _) => Some(script.rules[idx].reply.clone()),
        (None, Some(idx), _) => {
            record.conversation = Some(script.conversations.len() + idx);
            let mut served = shared.served.lock().unwrap_or_else(|p| p.into_inner());
            let turns = &script.sequential[idx].turns;
            let reply = turns.get(served[idx]).or(turns.last()).cloned();
            served[idx] += 1;
            reply
        }
        (None, None, Some(idx)) => {
            let turns = &script.conversations[idx].turns;
            turns.get(turn).or(turns.last()).cloned()
        }
        (None, None, None) => script.default.clone(),
    };
    let action = match &chosen {
        None => error_response(protocol, 400, "the mock script has no reply for this conversation", None),
        Some(reply) => scripted_action(protocol, reply, &request.body, turn, &mut record),
    };
    // Recorded before any delay, so a test can see a request that is still being answered.
    shared.requests.lock().unwrap_or_else(|p| p.into_inner()).push(record);
    if let Some(delay) = chosen.as_ref().and_then(|t| t.delay_ms) {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    action
}

/// The answer a scripted turn gives: a dropped connection, a malformed body, its error status,
/// or a reply (whose usage `record` keeps).
fn scripted_action(
    protocol: Protocol,
    reply: &Turn,
    body: &Value,
    turn: usize,
    record: &mut RecordedRequest,
) -> Action {
    if reply.drop {
        return Action::Drop;
    }
    if reply.malformed {
        return Action::Respond { status: 200, headers: Vec::new(), body: "<html>gateway</html>".into() };
    }
    if let Some(status) = reply.status.filter(|s| *s != 200) {
        return match &reply.body {
            Some(body) => {
                Action::Respond { status, headers: retry_after_header(reply.retry_after_sec), body: body.clone() }
            }
            None => error_response(protocol, status, &format!("scripted error {status}"), reply.retry_after_sec),
        };
    }
    let usage = reply.usage.unwrap_or_default();
    record.served_usage = Some(usage);
    Action::Respond { status: 200, headers: Vec::new(), body: success_body(protocol, body, reply, usage, turn) }
}

/// What the server says about itself: the scripted model listing or llama.cpp's `/props`, else
/// 404 (as from an OpenAI-compatible server that has neither).
fn server_info(script: &Script, method: &str, path: &str) -> Action {
    let found = |body: Value| Action::Respond { status: 200, headers: Vec::new(), body: body.to_string() };
    match (method, path, &script.models, script.props_n_ctx) {
        ("GET", "/v1/models" | "/models", Some(models), _) => {
            let data: Vec<Value> = models
                .iter()
                .map(|m| {
                    let mut entry = json!({"id": m.id, "object": "model", "owned_by": "mock"});
                    if let Some(len) = m.max_model_len {
                        entry["max_model_len"] = json!(len);
                    }
                    entry
                })
                .collect();
            found(json!({"object": "list", "data": data}))
        }
        ("GET", "/props", _, Some(n_ctx)) => {
            found(json!({"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1}))
        }
        _ => Action::Respond {
            status: 404,
            headers: Vec::new(),
            body: json!({"error": {"message": "not found"}}).to_string(),
        },
    }
}

fn draw_fault(shared: &Shared) -> Option<&'static str> {
    let faults = shared.script.faults.as_ref()?;
    let roll: f64 = shared.rng.lock().unwrap_or_else(|p| p.into_inner()).random();
    let mut edge = 0.0;
    for (p, name) in [
        (faults.rate_limited, "rate_limited"),
        (faults.server_error, "server_error"),
        (faults.dropped, "dropped"),
        (faults.malformed, "malformed"),
    ] {
        edge += p;
        if roll < edge {
            return Some(name);
        }
    }
    None
}

fn retry_after_header(retry_after: Option<f64>) -> Vec<(String, String)> {
    retry_after.map(|s| vec![("retry-after".to_string(), format!("{s}"))]).unwrap_or_default()
}

fn error_response(protocol: Protocol, status: u16, message: &str, retry_after: Option<f64>) -> Action {
    let body = match protocol {
        Protocol::OpenAi => {
            let kind = match status {
                429 => "rate_limit_exceeded",
                400..=499 => "invalid_request_error",
                _ => "server_error",
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
        Protocol::Anthropic => {
            let kind = match status {
                401 => "authentication_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                400..=499 => "invalid_request_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    Action::Respond { status, headers: retry_after_header(retry_after), body: body.to_string() }
}

/// The error each protocol's servers send for a request longer than the context.
fn context_overflow(protocol: Protocol, chars: usize, limit: usize) -> Action {
    let body = match protocol {
        Protocol::OpenAi => json!({"error": {
            "message": format!("This model's maximum context length is {limit} characters. However, your messages resulted in {chars} characters. Please reduce the length of the messages."),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
        Protocol::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": format!("prompt is too long: {chars} characters > {limit} maximum")}}),
    };
    Action::Respond { status: 400, headers: Vec::new(), body: body.to_string() }
}

fn success_body(protocol: Protocol, request: &Value, reply: &Turn, usage: UsageSpec, turn: usize) -> String {
    let mut body: Value = serde_json::from_str(&made_body(protocol, request, reply, usage, turn)).unwrap_or_default();
    match (&reply.raw_usage, body.as_object_mut()) {
        (Some(Value::Null), Some(map)) => {
            map.remove("usage");
        }
        (Some(raw), Some(map)) => {
            map.insert("usage".into(), raw.clone());
        }
        _ => {}
    }
    body.to_string()
}

fn made_body(protocol: Protocol, request: &Value, reply: &Turn, usage: UsageSpec, turn: usize) -> String {
    let model = request.get("model").cloned().unwrap_or(json!("mock"));
    let truncated = reply.finish_reason.as_deref() == Some("length");
    match protocol {
        Protocol::OpenAi => {
            let mut message = json!({"role": "assistant", "content": reply.content});
            if let Some(reasoning) = &reply.reasoning_content {
                message["reasoning_content"] = json!(reasoning);
            }
            json!({
                "id": format!("chatcmpl-mock-{turn}"),
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason.clone().unwrap_or_else(|| "stop".into())}],
                "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}
                }
            })
            .to_string()
        }
        Protocol::Anthropic => {
            let mut content = Vec::new();
            if let Some(reasoning) = &reply.reasoning_content {
                content.push(json!({"type": "thinking", "thinking": reasoning, "signature": "mock-signature"}));
            }
            content.push(json!({"type": "text", "text": reply.content}));
            json!({
                "id": format!("msg_mock_{turn}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": if truncated { "max_tokens" } else { "end_turn" },
                "stop_sequence": null,
                "usage": {
                    "input_tokens": usage.prompt_tokens - usage.cached_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": usage.cached_tokens,
                    "output_tokens": usage.completion_tokens
                }
            })
            .to_string()
        }
    }
}

#[cfg(test)]
mod tests;
