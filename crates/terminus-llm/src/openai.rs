//! OpenAI-compatible chat completions (`POST {api_base}/chat/completions`), the protocol of
//! OpenAI, vLLM, Ollama, OpenRouter and most proxies.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::error::LlmError;
use crate::models::ModelInfo;
use crate::types::{LlmRequest, LlmResponse, Usage};

/// The client. The key is held privately and never printed (see the `Debug` impl).
#[derive(Clone)]
pub struct OpenAiClient {
    http: reqwest::Client,
    api_base: String,
    /// The model name as sent on the wire: the configured name minus its `provider/` prefix.
    wire_model: String,
    /// Limits and prices of the model, for cost.
    info: ModelInfo,
    api_key: Option<String>,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("api_base", &self.api_base)
            .field("wire_model", &self.wire_model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Phrases providers use for "the prompt is longer than the context window".
const CONTEXT_PHRASES: &[&str] = &[
    "context length exceeded",
    "context_length_exceeded",
    "maximum context length",
    "`inputs` tokens + `max_new_tokens`",
    "model's context length",
    "context window",
    "prompt is too long",
];

impl OpenAiClient {
    /// `api_base` like `http://127.0.0.1:8000/v1`; `model_name` like `openai/gpt-4o`.
    pub fn new(
        api_base: &str,
        model_name: &str,
        info: ModelInfo,
        api_key: Option<String>,
        request_timeout: Duration,
    ) -> Result<OpenAiClient, LlmError> {
        let http = reqwest::Client::builder()
            .timeout(request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| LlmError::BadRequest(format!("cannot build the HTTP client: {e}")))?;
        let wire_model = match model_name.split_once('/') {
            Some((_, rest)) => rest.to_string(),
            None => model_name.to_string(),
        };
        Ok(OpenAiClient {
            http,
            api_base: api_base.trim_end_matches('/').to_string(),
            wire_model,
            info,
            api_key: api_key.filter(|k| !k.is_empty()),
        })
    }

    pub fn api_base(&self) -> &str {
        &self.api_base
    }

    /// Sends one request.
    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        let body = self.body(request);
        let mut builder = self.http.post(format!("{}/chat/completions", self.api_base)).json(&body);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(Duration::from_secs_f64);
        let text = response.text().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))?;
        if !status.is_success() {
            return Err(classify_error(status.as_u16(), &text, retry_after));
        }
        let reply: Value =
            serde_json::from_str(&text).map_err(|e| LlmError::InvalidResponse(format!("{e}: {}", preview(&text))))?;
        self.parse_reply(body, reply)
    }

    fn body(&self, request: &LlmRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), Value::String(self.wire_model.clone()));
        body.insert("messages".into(), serde_json::to_value(&request.messages).unwrap_or(Value::Null));
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        for (key, value) in &request.extra {
            // `extra_body` is LiteLLM's way of adding raw fields; flatten it into the body.
            if key == "extra_body" {
                if let Some(map) = value.as_object() {
                    for (k, v) in map {
                        body.insert(k.clone(), v.clone());
                    }
                }
            } else {
                body.insert(key.clone(), value.clone());
            }
        }
        Value::Object(body)
    }

    fn parse_reply(&self, sent: Value, reply: Value) -> Result<LlmResponse, LlmError> {
        let choice = reply
            .get("choices")
            .and_then(|c| c.get(0))
            .ok_or_else(|| LlmError::InvalidResponse(format!("no choices: {}", preview(&reply.to_string()))))?;
        let message = choice.get("message").cloned().unwrap_or(Value::Null);
        let content = message.get("content").and_then(Value::as_str).unwrap_or("").to_string();
        let reasoning_content = message.get("reasoning_content").and_then(Value::as_str).map(str::to_string);
        let finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
        let usage = reply.get("usage").filter(|u| u.is_object()).map(|u| {
            let prompt_tokens = u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
            let completion_tokens = u.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0);
            let cache_tokens = u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0);
            let cost_usd = self.info.cost(prompt_tokens, completion_tokens, cache_tokens);
            Usage { prompt_tokens, completion_tokens, cache_tokens, cost_usd }
        });
        if finish_reason.as_deref() == Some("length") {
            return Err(LlmError::OutputLengthExceeded { truncated: content, usage });
        }
        Ok(LlmResponse {
            content,
            reasoning_content,
            model_name: reply.get("model").and_then(Value::as_str).map(str::to_string),
            usage,
            finish_reason,
            debug: Some(json!({"api_base": self.api_base, "request": sent, "response": reply})),
        })
    }
}

/// Maps an HTTP error status and body to an error kind.
pub fn classify_error(status: u16, body: &str, retry_after: Option<Duration>) -> LlmError {
    let lower = body.to_lowercase();
    let message = format!("HTTP {status}: {}", preview(body));
    if CONTEXT_PHRASES.iter().any(|p| lower.contains(&p.to_lowercase())) {
        return LlmError::ContextLengthExceeded(message);
    }
    match status {
        401 | 403 => LlmError::Authentication(message),
        408 | 409 | 425 => LlmError::Transient(message),
        429 => LlmError::RateLimited { retry_after, message },
        400..=499 => LlmError::BadRequest(message),
        _ => LlmError::Transient(message),
    }
}

fn describe_reqwest(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

fn preview(text: &str) -> String {
    let mut out: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_by_status_and_body() {
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens","type":"BadRequestError","code":400}"#;
        assert!(matches!(classify_error(400, vllm, None), LlmError::ContextLengthExceeded(_)));
        let openai =
            r#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert!(matches!(classify_error(400, openai, None), LlmError::ContextLengthExceeded(_)));
        assert!(matches!(classify_error(401, "{}", None), LlmError::Authentication(_)));
        let limited = classify_error(429, "slow down", Some(Duration::from_secs(2)));
        assert_eq!(
            limited,
            LlmError::RateLimited { retry_after: Some(Duration::from_secs(2)), message: "HTTP 429: slow down".into() }
        );
        assert!(matches!(classify_error(503, "", None), LlmError::Transient(_)));
        assert!(matches!(classify_error(422, "nope", None), LlmError::BadRequest(_)));
    }

    #[test]
    fn the_provider_prefix_is_stripped_and_kwargs_merged() {
        let client = OpenAiClient::new(
            "http://x/v1/",
            "openai/gpt-4o",
            ModelInfo::default(),
            Some("sk-secret".into()),
            Duration::from_secs(5),
        )
        .unwrap();
        let mut request = LlmRequest { temperature: Some(0.5), ..Default::default() };
        request.extra.insert("extra_body".into(), json!({"top_k": 3}));
        request.extra.insert("max_tokens".into(), json!(100));
        let body = client.body(&request);
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["top_k"], 3);
        assert_eq!(body["max_tokens"], 100);
        assert!(!format!("{client:?}").contains("sk-secret"));
    }

    #[test]
    fn replies_are_parsed_with_usage_and_cost() {
        let client = OpenAiClient::new(
            "http://x/v1",
            "openai/gpt-4o",
            ModelInfo::builtin("openai/gpt-4o"),
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        let reply = json!({
            "model": "gpt-4o-2024",
            "choices": [{"message": {"role": "assistant", "content": "hi", "reasoning_content": "think"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 682, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 0}}
        });
        let response = client.parse_reply(Value::Null, reply).unwrap();
        assert_eq!(response.content, "hi");
        assert_eq!(response.reasoning_content.as_deref(), Some("think"));
        assert_eq!(response.model_name.as_deref(), Some("gpt-4o-2024"));
        let usage = response.usage.unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (682, 100));
        assert!((usage.cost_usd - 0.002705).abs() < 1e-12);
        let truncated = json!({"choices": [{"message": {"content": "{\"analysis\": \"a"}, "finish_reason": "length"}]});
        assert!(matches!(client.parse_reply(Value::Null, truncated), Err(LlmError::OutputLengthExceeded { .. })));
    }
}
