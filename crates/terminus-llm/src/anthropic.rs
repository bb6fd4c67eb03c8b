//! The native Anthropic Messages API (`POST {base}/v1/messages`): the system prompt apart from
//! the messages, content blocks, extended thinking, prompt caching and its token counts.

use serde_json::{Map, Value, json};

use crate::error::{LlmError, preview};
use crate::settings::ProviderSettings;
use terminus_core::llm::{ChatMessage, LlmRequest, LlmResponse, Usage};

/// The API version header every request carries.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is required; used when the model's output limit is unknown.
const DEFAULT_MAX_TOKENS: u64 = 8192;
/// The smallest thinking budget the API accepts.
const MIN_THINKING_BUDGET: u64 = 1024;

#[derive(Clone)]
pub struct AnthropicClient {
    http: reqwest::Client,
    settings: ProviderSettings,
    base: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("base", &self.base)
            .field("model", &self.settings.model_name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl AnthropicClient {
    pub fn new(settings: ProviderSettings) -> Result<AnthropicClient, LlmError> {
        let http = crate::http::http_client(settings.request_timeout)?;
        // Accept bases given with or without the `/v1` suffix.
        let base = settings.resolved_api_base().trim_end_matches('/').trim_end_matches("/v1").to_string();
        let api_key = settings.api_key();
        Ok(AnthropicClient { http, settings, base, api_key })
    }

    pub fn model_info(&self) -> terminus_core::models::ModelInfo {
        self.settings.model_info
    }

    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = self.body(request);
        let mut builder = self
            .http
            .post(format!("{}/v1/messages", self.base))
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&body);
        builder = crate::wire::with_extra_headers(builder, &request.extra);
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        let reply = crate::http::send_json(builder).await?;
        let mut response = self.parse_reply(&reply)?;
        // The system prompt is not among the body's messages.
        let logged = request.logged.as_ref().map(|prefix| {
            let skip = request.messages[..prefix.n_messages.min(request.messages.len())]
                .iter()
                .filter(|m| m.role != "system")
                .count();
            (prefix, skip)
        });
        response.debug = Some(crate::wire::debug_record_of_value(&self.base, body, logged, reply));
        Ok(response)
    }

    fn body(&self, request: &LlmRequest) -> Value {
        let system: Vec<&ChatMessage> = request.messages.iter().filter(|m| m.role == "system").collect();
        let turns: Vec<&ChatMessage> = request.messages.iter().filter(|m| m.role != "system").collect();
        let n = turns.len();
        let cached_tail = self.settings.cached_tail();
        let messages: Vec<Value> = turns
            .iter()
            .enumerate()
            .map(|(idx, m)| {
                // Observations may be stored with other roles; Anthropic knows only these two.
                let role = if m.role == "assistant" { "assistant" } else { "user" };
                let mut block = json!({"type": "text", "text": m.content});
                if idx + cached_tail >= n {
                    block["cache_control"] = json!({"type": "ephemeral"});
                }
                json!({"role": role, "content": [block]})
            })
            .collect();
        let thinking = self.settings.max_thinking_tokens.map(|t| t.max(MIN_THINKING_BUDGET));
        let mut max_tokens = self.settings.model_info.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if let Some(budget) = thinking {
            // The budget counts against max_tokens and must be below it.
            max_tokens = max_tokens.max(budget + 1024);
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.settings.wire_model()));
        body.insert("max_tokens".into(), json!(max_tokens));
        body.insert("messages".into(), Value::Array(messages));
        if !system.is_empty() {
            body.insert(
                "system".into(),
                json!(system.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n\n")),
            );
        }
        match thinking {
            // Temperature must stay at its default when thinking is on.
            Some(budget) => {
                body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
            }
            None => {
                if let Some(t) = request.temperature {
                    body.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
                }
            }
        }
        for (key, value) in &request.extra {
            if key == "extra_body" {
                if let Some(map) = value.as_object() {
                    body.extend(map.clone());
                }
            } else if key == crate::wire::EXTRA_HEADERS {
                // Sent as HTTP headers.
            } else {
                body.insert(key.clone(), value.clone());
            }
        }
        Value::Object(body)
    }

    fn parse_reply(&self, reply: &Value) -> Result<LlmResponse, LlmError> {
        let blocks = reply
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| LlmError::InvalidResponse(format!("no content: {}", preview(&reply.to_string()))))?;
        let text_of = |kind: &str, field: &str| -> String {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
                .filter_map(|b| b.get(field).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        };
        let content = text_of("text", "text");
        let thinking = text_of("thinking", "thinking");
        // Counts the provider does not state as such (missing, strings, negatives, numbers past
        // u64) make no usage: the caller estimates it.
        let usage = reply.get("usage").filter(|u| u.is_object()).and_then(|u| {
            let get = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            let input = u.get("input_tokens").and_then(Value::as_u64)?;
            let (cache_read, cache_write) = (get("cache_read_input_tokens"), get("cache_creation_input_tokens"));
            // Harbor's prompt count includes cached tokens; Anthropic reports them apart.
            let prompt_tokens = input.saturating_add(cache_read).saturating_add(cache_write);
            let completion_tokens = u.get("output_tokens").and_then(Value::as_u64)?;
            let cost_usd = self.settings.model_info.cost_with_cache_writes(
                prompt_tokens,
                completion_tokens,
                cache_read,
                cache_write,
            );
            Some(Usage { prompt_tokens, completion_tokens, cache_tokens: cache_read, cost_usd, estimated: false })
        });
        let stop_reason = reply.get("stop_reason").and_then(Value::as_str).map(str::to_string);
        if stop_reason.as_deref() == Some("max_tokens") {
            return Err(LlmError::OutputLengthExceeded { truncated: content, usage });
        }
        Ok(LlmResponse {
            content,
            reasoning_content: (!thinking.is_empty()).then_some(thinking),
            model_name: reply.get("model").and_then(Value::as_str).map(str::to_string),
            usage,
            finish_reason: stop_reason,
            prompt_token_ids: None,
            completion_token_ids: None,
            logprobs: None,
            provider_extra: None,
            debug: None,
            dropped_params: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::models::ModelInfo;

    fn client(thinking: Option<u64>) -> AnthropicClient {
        let settings = ProviderSettings {
            api_base: Some("http://127.0.0.1:1/v1".into()),
            max_thinking_tokens: thinking,
            model_info: ModelInfo::builtin("anthropic/claude-sonnet-4-5-20250929"),
            ..ProviderSettings::new("anthropic/claude-sonnet-4-20250514")
        };
        AnthropicClient::new(settings).unwrap()
    }

    #[test]
    fn requests_put_the_system_prompt_apart_and_mark_the_cache() {
        let client = client(None);
        let request = LlmRequest {
            messages: vec![
                ChatMessage::new("system", "be brief"),
                ChatMessage::user("one"),
                ChatMessage::assistant("two"),
                ChatMessage::new("tool", "three"),
                ChatMessage::assistant("four"),
                ChatMessage::user("five"),
            ],
            temperature: Some(0.7),
            ..Default::default()
        };
        let body = client.body(&request);
        assert_eq!(client.base, "http://127.0.0.1:1");
        assert_eq!(body["model"], "claude-sonnet-4-20250514");
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 64_000);
        assert_eq!(body["temperature"], 0.7);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[2]["role"], "user", "other roles travel as user");
        let cached: Vec<bool> = messages.iter().map(|m| m["content"][0].get("cache_control").is_some()).collect();
        assert_eq!(cached, [false, true, true, true, true], "the last 4, as the reference marks them");
    }

    #[test]
    fn thinking_sets_a_budget_and_drops_temperature() {
        let body = client(Some(500)).body(&LlmRequest { temperature: Some(0.7), ..Default::default() });
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn replies_carry_text_thinking_and_cache_usage() {
        let reply = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 1000, "output_tokens": 50}
        });
        let response = client(None).parse_reply(&reply).unwrap();
        assert_eq!(response.content, "hello");
        assert_eq!(response.reasoning_content.as_deref(), Some("hmm"));
        let usage = response.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.cache_tokens, usage.completion_tokens), (1120, 1000, 50));
        // 100 uncached × 3e-6 + 20 written × 3.75e-6 + 1000 cached × 3e-7 + 50 × 1.5e-5
        let expected = 100.0 * 3e-6 + 20.0 * 3.75e-6 + 1000.0 * 3e-7 + 50.0 * 1.5e-5;
        assert!((usage.cost_usd - expected).abs() < 1e-12, "{} vs {expected}", usage.cost_usd);
        let truncated = json!({"content": [{"type": "text", "text": "<response>"}], "stop_reason": "max_tokens", "usage": {"input_tokens": 1, "output_tokens": 64000}});
        assert!(matches!(client(None).parse_reply(&truncated), Err(LlmError::OutputLengthExceeded { .. })));
    }
}
