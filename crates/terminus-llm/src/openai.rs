//! OpenAI-compatible chat completions (`POST {api_base}/chat/completions`), the protocol of
//! OpenAI, vLLM, Ollama, OpenRouter and most proxies.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::error::{LlmError, preview};
use crate::settings::ProviderSettings;
use crate::wire::{Body, Field};
use terminus_core::llm::{LlmRequest, LlmResponse, LoggedPrefix, Usage};

/// The client. The key is held privately and never printed (see the `Debug` impl).
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    settings: ProviderSettings,
    api_base: String,
    api_key: Option<String>,
    /// Parameters this endpoint refused for this model: no request of any trial sends them
    /// again (LiteLLM's `drop_params`, learnt from the first refusal).
    dropped: Arc<Mutex<BTreeSet<String>>>,
}

/// What OpenAI's reasoning models refuse and LiteLLM's `drop_params` leaves out for them (a
/// temperature is sent only when it is 1, their one accepted value).
const REASONING_UNSUPPORTED: &[&str] = &["logprobs", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs"];

/// The most parameters one call drops before it gives up (each drop costs a request).
const MAX_DROPS: usize = 4;

/// Fields a refusal never drops: without them there is no request.
const ESSENTIAL: &[&str] = &["model", "messages"];

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("api_base", &self.api_base)
            .field("model", &self.settings.model_name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl OpenAiClient {
    pub fn new(settings: ProviderSettings) -> Result<OpenAiClient, LlmError> {
        let http = crate::http::http_client(settings.request_timeout)?;
        let api_base = settings.resolved_api_base().trim_end_matches('/').to_string();
        let api_key = settings.api_key();
        Ok(OpenAiClient { http, settings, api_base, api_key, dropped: Arc::default() })
    }

    pub fn model_info(&self) -> terminus_core::models::ModelInfo {
        self.settings.model_info
    }

    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// Sends one request. A parameter the server refuses by name (a reasoning model's
    /// `temperature`, plain OpenAI's `return_token_ids`) is dropped and the request sent again;
    /// the client remembers the drop for every later request, and the response lists what is
    /// dropped so the trial can say so. A refused field the server does not name is taken for
    /// the rollout fields when they were sent.
    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let mut rollout = self.settings.collect_rollout_details;
        let mut attempts = 0;
        loop {
            let dropped = self.dropped.lock().map(|d| d.clone()).unwrap_or_default();
            let body = self.body(request, rollout, &dropped);
            let refused = match self.send(&body, request).await {
                Ok(mut response) => {
                    response.dropped_params = dropped.into_iter().collect();
                    return Ok(response);
                }
                Err(LlmError::UnsupportedParam { param, message }) => (param, message),
                Err(other) => return Err(other),
            };
            attempts += 1;
            match refused {
                (Some(param), _)
                    if attempts <= MAX_DROPS && body.has(&param) && !ESSENTIAL.contains(&param.as_str()) =>
                {
                    tracing::warn!(model = %self.settings.model_name, api_base = %self.api_base, %param, "the endpoint does not take this parameter; it is no longer sent");
                    if let Ok(mut set) = self.dropped.lock() {
                        set.insert(param);
                    }
                }
                (None, _) if rollout => rollout = false,
                (_, message) => return Err(LlmError::BadRequest(message)),
            }
        }
    }

    /// Where requests go: `{api_base}/chat/completions`, or an Azure deployment's URL (the
    /// deployment is the model name after `azure/`).
    fn url(&self) -> String {
        if !self.settings.is_azure() {
            return format!("{}/chat/completions", self.api_base);
        }
        let version = self.settings.azure_api_version();
        if self.api_base.contains("/openai/deployments/") {
            return format!("{}/chat/completions?api-version={version}", self.api_base);
        }
        format!(
            "{}/openai/deployments/{}/chat/completions?api-version={version}",
            self.api_base,
            self.settings.wire_model()
        )
    }

    /// Parameters this client no longer sends.
    pub fn dropped_params(&self) -> Vec<String> {
        self.dropped.lock().map(|d| d.iter().cloned().collect()).unwrap_or_default()
    }

    /// Serialises the body once for the wire; `debug.json` is made from the same borrowed body.
    async fn send(&self, body: &Body<'_>, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let logged: Option<&LoggedPrefix> = request.logged.as_ref();
        let mut builder =
            self.http.post(self.url()).header(reqwest::header::CONTENT_TYPE, "application/json").body(body.to_bytes());
        builder = crate::wire::with_extra_headers(builder, &request.extra);
        if let Some(key) = &self.api_key {
            builder = if self.settings.is_azure() { builder.header("api-key", key) } else { builder.bearer_auth(key) };
        }
        let reply = crate::http::send_json(builder).await?;
        let mut response = self.parse_reply(&reply)?;
        response.debug = Some(crate::wire::debug_record(&self.api_base, body, logged, reply));
        Ok(response)
    }

    fn body<'a>(&self, request: &'a LlmRequest, rollout: bool, dropped: &BTreeSet<String>) -> Body<'a> {
        let mut body = Body::default();
        body.set_json("model", Value::String(self.settings.wire_model()));
        body.set("messages", Field::Messages(&request.messages, self.settings.cached_tail()));
        let reasoning = self.settings.is_openai_reasoning_model();
        if let Some(t) = request.temperature.filter(|t| !reasoning || *t == 1.0) {
            body.set_json("temperature", json!(t));
        }
        if let Some(effort) = &self.settings.reasoning_effort {
            body.set_json("reasoning_effort", json!(effort));
        }
        if rollout {
            body.set_json("logprobs", json!(true));
            body.set_json("return_token_ids", json!(true));
        }
        for (key, value) in &request.extra {
            // `extra_body` is LiteLLM's way of adding raw fields; flatten it into the body.
            if key == "extra_body" {
                if let Some(map) = value.as_object() {
                    for (k, v) in map {
                        body.set_json(k, v.clone());
                    }
                }
            } else if key == crate::wire::EXTRA_HEADERS {
                // Sent as HTTP headers.
            } else {
                body.set_json(key, value.clone());
            }
        }
        for param in dropped {
            body.remove(param);
        }
        if reasoning {
            for param in REASONING_UNSUPPORTED {
                body.remove(param);
            }
        }
        body
    }

    fn parse_reply(&self, reply: &Value) -> Result<LlmResponse, LlmError> {
        let choice = reply
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| LlmError::InvalidResponse(format!("no choices: {}", preview(&reply.to_string()))))?;
        let message = choice.get("message").cloned().unwrap_or(Value::Null);
        let content = message.get("content").and_then(Value::as_str).unwrap_or("").to_string();
        let reasoning_content = message
            .get("reasoning_content")
            .or_else(|| message.get("reasoning"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
        // Usage the provider does not state as counts (missing, strings, negatives, numbers past
        // u64) is none: the caller estimates it.
        let usage = reply.get("usage").filter(|u| u.is_object()).and_then(|u| {
            let prompt_tokens = u.get("prompt_tokens").and_then(Value::as_u64)?;
            let completion_tokens = u.get("completion_tokens").and_then(Value::as_u64)?;
            let cache_tokens = u
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(prompt_tokens);
            // Cache writes, as proxies in front of Anthropic's models report them (LiteLLM's
            // field, or OpenRouter's).
            let cache_writes = u
                .get("cache_creation_input_tokens")
                .or_else(|| u.pointer("/prompt_tokens_details/cache_write_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let cost_usd = self.settings.model_info.cost_with_cache_writes(
                prompt_tokens,
                completion_tokens,
                cache_tokens,
                cache_writes,
            );
            Some(Usage { prompt_tokens, completion_tokens, cache_tokens, cost_usd, estimated: false })
        });
        if finish_reason.as_deref() == Some("length") {
            return Err(LlmError::OutputLengthExceeded { truncated: content, usage });
        }
        let ids = |v: Option<&Value>| {
            v.and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<u64>>())
        };
        let provider_extra = if self.settings.collect_rollout_details { provider_extra(choice) } else { None };
        let (prompt_token_ids, completion_token_ids, logprobs) = if self.settings.collect_rollout_details {
            (
                ids(reply.get("prompt_token_ids")).or_else(|| ids(choice.get("prompt_token_ids"))),
                ids(choice.get("token_ids")).or_else(|| ids(choice.pointer("/provider_specific_fields/token_ids"))),
                choice
                    .pointer("/logprobs/content")
                    .and_then(Value::as_array)
                    .map(|tokens| tokens.iter().filter_map(|t| t.get("logprob").and_then(Value::as_f64)).collect()),
            )
        } else {
            (None, None, None)
        };
        Ok(LlmResponse {
            content,
            reasoning_content,
            model_name: reply.get("model").and_then(Value::as_str).map(str::to_string),
            usage,
            finish_reason,
            prompt_token_ids,
            completion_token_ids,
            logprobs,
            provider_extra,
            debug: None,
            dropped_params: Vec::new(),
        })
    }
}

/// The fields of a reply's choice that are the provider's own: every key but the standard
/// ones (`index`, `message`, `finish_reason`, `logprobs`) and the token ids, with those a
/// `provider_specific_fields` object already holds; `None` when there are none.
fn provider_extra(choice: &Value) -> Option<serde_json::Map<String, Value>> {
    const STANDARD: &[&str] =
        &["index", "message", "finish_reason", "logprobs", "provider_specific_fields", "token_ids"];
    let object = choice.as_object()?;
    let mut extra: serde_json::Map<String, Value> = object
        .get("provider_specific_fields")
        .and_then(Value::as_object)
        .map(|fields| fields.iter().filter(|(k, _)| *k != "token_ids").map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (key, value) in object {
        if !STANDARD.contains(&key.as_str()) {
            extra.insert(key.clone(), value.clone());
        }
    }
    (!extra.is_empty()).then_some(extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::llm::ChatMessage;
    use terminus_core::models::ModelInfo;

    fn client(model: &str, rollout: bool) -> OpenAiClient {
        let settings = ProviderSettings {
            api_base: Some("http://x/v1/".into()),
            collect_rollout_details: rollout,
            reasoning_effort: Some("high".into()),
            model_info: ModelInfo::builtin(model),
            ..ProviderSettings::new(model)
        };
        OpenAiClient::new(settings).unwrap()
    }

    #[test]
    fn the_provider_prefix_is_stripped_and_kwargs_merged() {
        let client = client("openai/gpt-4o", false);
        let mut request = LlmRequest { temperature: Some(0.5), ..Default::default() };
        request.extra.insert("extra_body".into(), json!({"top_k": 3}));
        request.extra.insert("max_tokens".into(), json!(100));
        let body = client.body(&request, false, &BTreeSet::new()).to_value();
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["top_k"], 3);
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["reasoning_effort"], "high");
        assert!(body.get("logprobs").is_none());
        assert_eq!(client.api_base(), "http://x/v1");
    }

    /// A Claude model behind an OpenAI-compatible route (OpenRouter, a proxy) gets the same
    /// cache breakpoints as on Anthropic's own API; `extra_headers` are headers, not fields.
    #[test]
    fn claude_through_an_openai_route_marks_the_last_four_messages() {
        let messages: Vec<ChatMessage> =
            (0..6).map(|n| ChatMessage::new(if n % 2 == 0 { "user" } else { "assistant" }, format!("m{n}"))).collect();
        let mut request = LlmRequest { messages, ..Default::default() };
        request.extra.insert("extra_headers".into(), json!({"X-Session-ID": "s"}));
        let claude = client("openrouter/anthropic/claude-sonnet-4", false);
        let body = claude.body(&request, false, &BTreeSet::new()).to_value();
        assert!(body.get("extra_headers").is_none());
        let sent = body["messages"].as_array().unwrap();
        assert_eq!(sent[1], json!({"role": "assistant", "content": "m1"}));
        assert_eq!(
            sent[2],
            json!({"role": "user", "content": [{"type": "text", "text": "m2", "cache_control": {"type": "ephemeral"}}]})
        );
        assert_eq!(sent.iter().filter(|m| m["content"].is_array()).count(), 4);
        let gpt = client("openai/gpt-4o", false).body(&request, false, &BTreeSet::new()).to_value();
        assert!(gpt["messages"].as_array().unwrap().iter().all(|m| m["content"].is_string()));
    }

    #[test]
    fn a_reasoning_model_is_sent_no_temperature_but_1_as_litellm_drops_it() {
        let reasoner = client("openai/o3-mini", true);
        let mut request = LlmRequest { temperature: Some(0.7), ..Default::default() };
        request.extra.insert("top_p".into(), json!(0.9));
        let body = reasoner.body(&request, true, &BTreeSet::new()).to_value();
        assert!(body.get("temperature").is_none() && body.get("top_p").is_none() && body.get("logprobs").is_none());
        assert_eq!(body["return_token_ids"], true);
        request.temperature = Some(1.0);
        assert_eq!(reasoner.body(&request, false, &BTreeSet::new()).to_value()["temperature"], 1.0);
        let plain = client("openai/gpt-4o", false);
        request.temperature = Some(0.7);
        assert_eq!(plain.body(&request, false, &BTreeSet::new()).to_value()["temperature"], 0.7);
    }

    #[test]
    fn replies_are_parsed_with_usage_cost_and_rollout() {
        let client = client("openai/gpt-4o", true);
        let reply = json!({
            "model": "gpt-4o-2024",
            "prompt_token_ids": [1, 2, 3],
            "choices": [{
                "message": {"role": "assistant", "content": "hi", "reasoning_content": "think"},
                "finish_reason": "stop",
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "h", "logprob": -0.1}, {"token": "i", "logprob": -0.2}]}
            }],
            "usage": {"prompt_tokens": 682, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}
        });
        let response = client.parse_reply(&reply).unwrap();
        assert_eq!(response.content, "hi");
        assert_eq!(response.reasoning_content.as_deref(), Some("think"));
        assert_eq!(response.model_name.as_deref(), Some("gpt-4o-2024"));
        let usage = response.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (682, 100));
        assert!((usage.cost_usd - 0.002705).abs() < 1e-12);
        assert_eq!(response.prompt_token_ids, Some(vec![1, 2, 3]));
        assert_eq!(response.completion_token_ids, Some(vec![7, 8]));
        assert_eq!(response.logprobs, Some(vec![-0.1, -0.2]));
        let truncated = json!({"choices": [{"message": {"content": "{\"analysis\": \"a"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 9}});
        match client.parse_reply(&truncated) {
            Err(LlmError::OutputLengthExceeded { truncated, usage }) => {
                assert_eq!(truncated, "{\"analysis\": \"a");
                assert_eq!(usage.unwrap().completion_tokens, 9, "the truncated call's usage is kept");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Counts that are not counts make no usage (the caller estimates it), never zeros.
    #[test]
    fn usage_that_is_no_count_is_none() {
        let client = client("openai/gpt-4o", false);
        for usage in [
            json!({"prompt_tokens": "lots", "completion_tokens": 3}),
            json!({"prompt_tokens": -5, "completion_tokens": 3}),
            json!({"prompt_tokens": 1.8446744073709552e19, "completion_tokens": 3}),
            json!({"completion_tokens": 3}),
        ] {
            let reply = json!({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage});
            assert_eq!(client.parse_reply(&reply).unwrap().usage, None, "{usage}");
        }
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        // SAFETY-free: the variable is read, not set, by the client.
        let settings = ProviderSettings {
            api_key_env: Some("TERMINUS_TEST_UNSET_KEY_VAR".into()),
            ..ProviderSettings::new("openai/gpt-4o")
        };
        let client = OpenAiClient::new(settings).unwrap();
        assert!(format!("{client:?}").contains("api_key: None"));
        let mut with_key = client.clone();
        with_key.api_key = Some("sk-secret".into());
        assert!(!format!("{with_key:?}").contains("sk-secret"));
    }
}
