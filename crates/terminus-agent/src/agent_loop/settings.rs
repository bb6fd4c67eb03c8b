//! What a loop is configured with ([`LoopSettings`]): model and context limits, parser,
//! prompts, summarization switches, and the request fields the reference fixes.

use crate::prompts::Format;
use crate::trajectory::AtifVersion;
use serde_json::{Map, Value};
use std::sync::Arc;
use terminus_core::texts::Texts;

/// What the loop needs to know about its configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopSettings {
    pub model_name: String,
    /// `None`: no `temperature` in any request and none in `agent.extra`.
    pub temperature: Option<f64>,
    pub max_turns: u64,
    pub llm_call_kwargs: Map<String, Value>,
    /// `llm_kwargs`: fields the reference gives its LLM when it is made, so every request
    /// carries them under the per-call ones; recorded in `agent.extra.llm_kwargs`.
    pub llm_kwargs: Map<String, Value>,
    /// Every text the model is shown (ours, or the user's `texts` and `prompt_template`).
    pub texts: Arc<Texts>,
    /// `model_view: reference`: where what the model is shown differs from the reference's,
    /// the reference's is shown (its parser's scanner, its double output limiting, its
    /// proactive-summarization gate).
    pub reference: bool,
    pub session_id: String,
    /// Whether the session id was the user's (`session_id` kwarg): then every request carries
    /// it as `extra_body.session_id`, as the reference's LiteLLM sends it (a generated id is
    /// not sent).
    pub send_session_id: bool,
    /// Header names that carry the session id on every request (`session_id_headers`).
    pub session_id_headers: Vec<String>,
    pub format: Format,
    pub raw_content: bool,
    pub linear_history: bool,
    pub interleaved_thinking: bool,
    pub store_all_messages: bool,
    pub enable_summarize: bool,
    pub proactive_summarization_threshold: u64,
    pub context_limit: u64,
    pub output_limit: Option<u64>,
    /// The agent stops (without an error) once its cost reaches this.
    pub max_cost_usd: Option<f64>,
    /// The most model calls the run makes, summarization calls included; then the agent ends
    /// with `LlmCallLimitExceededError` (and the trial is still verified).
    pub max_llm_calls: u64,
    /// `trajectory_config.schema_version`: the ATIF version trajectories are written in.
    pub atif: AtifVersion,
}

impl LoopSettings {
    /// Settings with the reference's defaults for everything but the model and session.
    pub fn new(model_name: &str, session_id: &str) -> LoopSettings {
        LoopSettings {
            model_name: model_name.to_string(),
            temperature: None,
            max_turns: 1_000_000,
            llm_call_kwargs: Map::new(),
            llm_kwargs: Map::new(),
            texts: Texts::ours(),
            reference: false,
            session_id: session_id.to_string(),
            send_session_id: false,
            session_id_headers: Vec::new(),
            format: Format::Json,
            raw_content: false,
            linear_history: false,
            interleaved_thinking: false,
            store_all_messages: false,
            enable_summarize: true,
            proactive_summarization_threshold: 8000,
            context_limit: terminus_core::models::DEFAULT_CONTEXT_LIMIT,
            output_limit: None,
            max_cost_usd: None,
            max_llm_calls: u64::MAX,
            atif: AtifVersion::default(),
        }
    }
}

/// Request fields the reference's LiteLLM sets after spreading `llm_kwargs`, so an entry of
/// `llm_kwargs` never replaces them.
pub(super) const FIXED_REQUEST_FIELDS: &[&str] = &[
    "model",
    "messages",
    "temperature",
    "api_base",
    "drop_params",
    "logger_fn",
    "response_format",
    "reasoning_effort",
];

impl LoopSettings {
    /// The `temperature` requests carry: the agent's, else a number in `llm_kwargs` (the
    /// reference builds its LLM from `llm_kwargs` and sets the agent's temperature over it),
    /// else none, so the backend's default applies. `agent.extra` records the agent's alone.
    pub fn request_temperature(&self) -> Option<f64> {
        self.temperature.or_else(|| self.llm_kwargs.get("temperature").and_then(Value::as_f64))
    }

    /// The extra fields of every request (main chat, subagents, short summary): `llm_kwargs`
    /// but the fixed fields, then `llm_call_kwargs` over them, `extra_body` merged key by key
    /// (the reference's order and deep merge). `extra_headers` holds HTTP headers, not body
    /// fields: the `session_id_headers` (each carrying the session id), and `X-Session-ID` when
    /// the id is the user's, as the reference's LiteLLM sets it beside `extra_body.session_id`.
    pub fn request_extra(&self) -> Map<String, Value> {
        let mut extra: Map<String, Value> = self
            .llm_kwargs
            .iter()
            .filter(|(key, _)| !FIXED_REQUEST_FIELDS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        for (key, value) in &self.llm_call_kwargs {
            match (extra.get_mut(key).and_then(Value::as_object_mut), value.as_object()) {
                (Some(base), Some(over)) if key == "extra_body" => base.extend(over.clone()),
                _ => {
                    extra.insert(key.clone(), value.clone());
                }
            }
        }
        if self.send_session_id {
            let body = extra.entry("extra_body").or_insert_with(|| Value::Object(Map::new()));
            if let Some(body) = body.as_object_mut() {
                body.insert("session_id".into(), Value::String(self.session_id.clone()));
            }
        }
        let mut headers: Vec<(&str, &String)> =
            self.session_id_headers.iter().map(|h| (h.as_str(), &self.session_id)).collect();
        if self.send_session_id {
            headers.push(("X-Session-ID", &self.session_id));
        }
        if !headers.is_empty() {
            let map = extra.entry("extra_headers").or_insert_with(|| Value::Object(Map::new()));
            if let Some(map) = map.as_object_mut() {
                for (name, value) in headers {
                    map.insert(name.to_string(), Value::String(value.clone()));
                }
            }
        }
        extra
    }
}
