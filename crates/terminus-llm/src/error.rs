//! How each provider's HTTP errors map to the typed [`LlmError`] (defined in terminus-core, so
//! the pure agent crate can decide on it).

use std::time::Duration;

pub use terminus_core::llm::LlmError;

/// Phrases providers use for "the prompt is longer than the context window".
const CONTEXT_PHRASES: &[&str] = &[
    "context length exceeded",
    "context_length_exceeded",
    "maximum context length",
    "`inputs` tokens + `max_new_tokens`",
    "model's context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
];

/// The parameter a 400 says the model or server does not take, when it says so: OpenAI names it
/// in `error.param` with code `unsupported_parameter` or `unsupported_value` (a reasoning model
/// given a temperature); OpenAI's older wording is "Unrecognized request argument supplied: X";
/// vLLM and other pydantic servers answer `extra_forbidden` with the field's `loc`. `Some(None)`:
/// an unsupported field the body does not name.
fn unsupported_param(body: &str, lower: &str) -> Option<Option<String>> {
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    if let Some(error) = json.as_ref().and_then(|v| v.get("error")) {
        let code = error.get("code").and_then(|c| c.as_str()).unwrap_or("");
        let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("").to_lowercase();
        let named = error.get("param").and_then(|p| p.as_str()).filter(|p| !p.is_empty()).map(str::to_string);
        if matches!(code, "unsupported_parameter" | "unsupported_value")
            || message.starts_with("unsupported parameter")
            || message.starts_with("unsupported value")
        {
            return Some(named);
        }
    }
    if let Some(at) = lower.find("unrecognized request argument supplied:") {
        let rest = &body[at + "unrecognized request argument supplied:".len()..];
        let name: String =
            rest.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.').collect();
        return Some((!name.is_empty()).then_some(name));
    }
    let details = json.as_ref().and_then(|v| v.get("detail")).and_then(|d| d.as_array());
    for detail in details.into_iter().flatten() {
        if detail.get("type").and_then(|t| t.as_str()) == Some("extra_forbidden") {
            let loc = detail.get("loc").and_then(|l| l.as_array());
            let name = loc.and_then(|l| l.last()).and_then(|n| n.as_str()).map(str::to_string);
            return Some(name);
        }
    }
    None
}

/// Maps an HTTP error status and body to an error kind. Works for OpenAI, vLLM, OpenRouter,
/// Ollama and Anthropic bodies alike: the context phrases are checked first, then the
/// provider's error type when the body names one, then the status.
pub fn classify_http_error(status: u16, body: &str, retry_after: Option<Duration>) -> LlmError {
    let lower = body.to_lowercase();
    let message = format!("HTTP {status}: {}", preview(body));
    if CONTEXT_PHRASES.iter().any(|p| lower.contains(&p.to_lowercase())) || status == 413 {
        return LlmError::ContextLengthExceeded(message);
    }
    let kind = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| {
        v.pointer("/error/type").or_else(|| v.pointer("/error/code")).and_then(|t| t.as_str()).map(str::to_string)
    });
    match kind.as_deref() {
        Some("authentication_error" | "invalid_api_key") => return LlmError::Authentication(message),
        Some("permission_error") => return LlmError::PermissionDenied(message),
        Some("rate_limit_error" | "rate_limit_exceeded") => return LlmError::RateLimited { retry_after, message },
        Some("overloaded_error") => return LlmError::Server { status, message },
        Some("api_error" | "server_error") if status >= 500 => return LlmError::Server { status, message },
        _ => {}
    }
    if matches!(status, 400 | 422)
        && let Some(param) = unsupported_param(body, &lower)
    {
        return LlmError::UnsupportedParam { param, message };
    }
    match status {
        401 => LlmError::Authentication(message),
        403 => LlmError::PermissionDenied(message),
        404 => LlmError::NotFound(message),
        408 | 409 | 425 => LlmError::Server { status, message },
        429 => LlmError::RateLimited { retry_after, message },
        400..=499 => LlmError::BadRequest(message),
        _ => LlmError::Server { status, message },
    }
}

/// The context size a context-length error states, as OpenAI, vLLM, OpenRouter and
/// llama-cpp-python word it ("This model's maximum context length is 2048 tokens"). The body
/// must classify as [`LlmError::ContextLengthExceeded`] first: a number in any other error says
/// nothing about the context. Used by the probe of servers that report their context nowhere
/// else (llama-cpp-python's, see `probe.rs`).
pub fn stated_context_limit(status: u16, body: &str) -> Option<u64> {
    static STATED: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    if !matches!(classify_http_error(status, body, None), LlmError::ContextLengthExceeded(_)) {
        return None;
    }
    let stated = STATED
        .get_or_init(|| regex::Regex::new(r"(?i)maximum context length is (\d{1,12}) tokens").expect("valid regex"));
    stated.captures(body)?.get(1)?.as_str().parse::<u64>().ok().filter(|n| *n > 0)
}

/// The wait a provider asks for: `retry-after-ms`, else `retry-after` in seconds or as an HTTP
/// date (the order OpenAI's and Anthropic's SDKs read them in). A value that is no usable wait
/// (negative, not a number, unparsable) counts as absent.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    retry_after_at(headers, chrono::Utc::now())
}

fn retry_after_at(headers: &reqwest::header::HeaderMap, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let number = |name: &str| text(name).and_then(|v| v.parse::<f64>().ok()).filter(|n| n.is_finite() && *n >= 0.0);
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    if let Some(seconds) = number("retry-after") {
        return Some(Duration::from_secs_f64(seconds));
    }
    // An HTTP date (RFC 9110's IMF-fixdate is RFC 2822's form with `GMT`); one in the past means now.
    let date = chrono::DateTime::parse_from_rfc2822(text("retry-after")?).ok()?;
    Some((date.with_timezone(&chrono::Utc) - now).to_std().unwrap_or(Duration::ZERO))
}

/// A reqwest error with its chain of causes (connection reset, timeout…), and the URL it was
/// for without credentials or query values (they could carry a key into a result file).
pub fn describe_reqwest(e: &reqwest::Error) -> String {
    let url = e.url().map(|u| {
        let mut shown = u.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_query(None);
        shown.to_string()
    });
    let mut text = match &url {
        Some(url) => format!("{} ({url})", strip_url(&e.to_string())),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&terminus_core::secrets::redact_url(&inner.to_string()));
        source = inner.source();
    }
    text
}

/// reqwest's message without its `for url (…)` part (the caller adds a clean one).
fn strip_url(message: &str) -> String {
    match message.find(" for url (") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// The start of a body, for messages.
pub fn preview(text: &str) -> String {
    let mut out: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(status: u16, body: &str) -> LlmError {
        classify_http_error(status, body, Some(Duration::from_secs(2)))
    }

    #[test]
    fn retry_after_reads_milliseconds_then_seconds_then_a_date() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-10-21T07:27:30Z").unwrap().to_utc();
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = reqwest::header::HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            retry_after_at(&map, now)
        };
        assert_eq!(headers(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(headers(&[("retry-after", " 1.5 ")]), Some(Duration::from_millis(1500)));
        assert_eq!(headers(&[("retry-after-ms", "250")]), Some(Duration::from_millis(250)));
        // Both: the finer one wins, as OpenAI's and Anthropic's SDKs read them.
        assert_eq!(headers(&[("retry-after", "30"), ("retry-after-ms", "1200")]), Some(Duration::from_millis(1200)));
        // A value that is no usable wait is ignored, and the other header is read.
        assert_eq!(headers(&[("retry-after-ms", "-5"), ("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(headers(&[("retry-after-ms", "NaN"), ("retry-after", "inf")]), None);
        assert_eq!(headers(&[("retry-after", "soon")]), None);
        // An HTTP date: the time until it, none when it has passed.
        assert_eq!(headers(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]), Some(Duration::from_secs(30)));
        assert_eq!(headers(&[("retry-after", "Wed, 21 Oct 2026 07:00:00 GMT")]), Some(Duration::ZERO));
        assert_eq!(headers(&[]), None);
    }

    // The bodies below are the shapes each provider returns (messages shortened).

    #[test]
    fn openai_errors() {
        let context = r#"{"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130015 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        assert!(matches!(classify(400, context), LlmError::ContextLengthExceeded(_)));
        let limited = r#"{"error": {"message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}"#;
        assert_eq!(
            classify(429, limited),
            LlmError::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
                message: format!("HTTP 429: {limited}")
            }
        );
        let key = r#"{"error": {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}"#;
        assert!(matches!(classify(401, key), LlmError::Authentication(_)));
        let server = r#"{"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}}"#;
        assert!(matches!(classify(500, server), LlmError::Server { status: 500, .. }));
        assert_eq!(terminus_core::error::llm_exception_type(&classify(500, server)), "InternalServerError");
        let bad = r#"{"error": {"message": "Unrecognized request argument supplied: return_token_ids", "type": "invalid_request_error", "param": null, "code": null}}"#;
        assert!(
            matches!(classify(400, bad), LlmError::UnsupportedParam { param: Some(p), .. } if p == "return_token_ids"),
            "sent again without the field"
        );
        assert!(!classify(400, bad).is_retryable());
        let temperature = r#"{"error": {"message": "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}"#;
        assert!(
            matches!(classify(400, temperature), LlmError::UnsupportedParam { param: Some(p), .. } if p == "temperature")
        );
        let parameter = r#"{"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}"#;
        assert!(
            matches!(classify(400, parameter), LlmError::UnsupportedParam { param: Some(p), .. } if p == "max_tokens")
        );
        let vllm = r#"{"detail":[{"type":"extra_forbidden","loc":["body","session_id"],"msg":"Extra inputs are not permitted","input":"s"}]}"#;
        assert!(matches!(classify(422, vllm), LlmError::UnsupportedParam { param: Some(p), .. } if p == "session_id"));
        let other = r#"{"error": {"message": "Invalid value for 'messages'.", "type": "invalid_request_error", "param": "messages", "code": null}}"#;
        assert!(
            matches!(classify(400, other), LlmError::BadRequest(_)),
            "a parameter named for another reason is not dropped"
        );
        let unavailable = classify(503, "upstream connect error");
        assert!(matches!(unavailable, LlmError::Server { status: 503, .. }) && unavailable.is_retryable());
        assert_eq!(terminus_core::error::llm_exception_type(&unavailable), "ServiceUnavailableError");
    }

    #[test]
    fn vllm_openrouter_and_ollama_errors() {
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert!(matches!(classify(400, vllm), LlmError::ContextLengthExceeded(_)));
        let tgi = r#"{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 512 `max_new_tokens`","error_type":"validation"}"#;
        assert!(matches!(classify(422, tgi), LlmError::ContextLengthExceeded(_)));
        let openrouter = r#"{"error":{"message":"This endpoint's maximum context length is 8192 tokens. However, you requested about 9120 tokens (9120 of text input). Please reduce the length of either one.","code":400}}"#;
        assert!(matches!(classify(400, openrouter), LlmError::ContextLengthExceeded(_)));
        let ollama = r#"{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}"#;
        assert!(matches!(classify(404, ollama), LlmError::NotFound(_)), "a missing model is not retried");
        assert!(!classify(404, ollama).is_retryable());
        assert_eq!(terminus_core::error::llm_exception_type(&classify(404, ollama)), "NotFoundError");
    }

    /// llama-cpp-python 0.3.36's server (`llama_cpp/server/errors.py`): a prompt of `n_ctx`
    /// tokens or more is a 400 in OpenAI's shape, worded for chat or for text completions. The
    /// bodies are the server's own, captured from `scripts/real-model.sh`'s server.
    #[test]
    fn llama_cpp_python_errors() {
        let chat = r#"{"error":{"message":"This model's maximum context length is 2048 tokens. However, you requested 3039 tokens (3031 in the messages, 8 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(matches!(classify(400, chat), LlmError::ContextLengthExceeded(_)));
        assert_eq!(stated_context_limit(400, chat), Some(2048));
        let text = r#"{"error":{"message":"This model's maximum context length is 2048 tokens, however you requested 262145 tokens (262144 in your prompt; 1 for the completion). Please reduce your prompt; or completion length.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(matches!(classify(400, text), LlmError::ContextLengthExceeded(_)));
        assert_eq!(stated_context_limit(400, text), Some(2048));
        // Any other error's numbers say nothing about the context.
        let unrelated = r#"{"error":{"message":"Requested tokens (12) exceed batch size of 8","type":"internal_server_error","param":null,"code":null}}"#;
        assert_eq!(stated_context_limit(500, unrelated), None);
        assert_eq!(stated_context_limit(400, r#"{"error":{"message":"context_length_exceeded"}}"#), None, "no number");
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(stated_context_limit(400, vllm), Some(4096));
    }

    #[test]
    fn anthropic_errors() {
        let context = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert!(matches!(classify(400, context), LlmError::ContextLengthExceeded(_)));
        let limited = r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute."}}"#;
        assert!(matches!(classify(429, limited), LlmError::RateLimited { retry_after: Some(_), .. }));
        let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(matches!(classify(529, overloaded), LlmError::Server { status: 529, .. }));
        let key = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert!(matches!(classify(401, key), LlmError::Authentication(_)));
        let permission = r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#;
        assert!(matches!(classify(403, permission), LlmError::PermissionDenied(_)));
        assert_eq!(terminus_core::error::llm_exception_type(&classify(403, permission)), "PermissionDeniedError");
        let too_large = r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#;
        assert!(matches!(classify(413, too_large), LlmError::ContextLengthExceeded(_)));
        let bad = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be greater than thinking.budget_tokens"}}"#;
        assert!(matches!(classify(400, bad), LlmError::BadRequest(_)));
    }

    #[tokio::test]
    async fn transport_errors_name_the_url_without_credentials_or_query() {
        let client = reqwest::Client::new();
        let error =
            client.get("http://user:hunter22@127.0.0.1:9/v1/chat?key=sk-secret-value").send().await.unwrap_err();
        let text = describe_reqwest(&error);
        assert!(text.contains("127.0.0.1:9/v1/chat"), "{text}");
        assert!(!text.contains("hunter22") && !text.contains("sk-secret-value") && !text.contains("user"), "{text}");
    }

    #[test]
    fn only_what_may_succeed_again_is_retryable() {
        assert!(LlmError::Transient(String::new()).is_retryable());
        assert!(LlmError::RateLimited { retry_after: None, message: String::new() }.is_retryable());
        assert!(LlmError::InvalidResponse(String::new()).is_retryable());
        for permanent in [
            LlmError::ContextLengthExceeded(String::new()),
            LlmError::OutputLengthExceeded { truncated: String::new(), usage: None },
            LlmError::Authentication(String::new()),
            LlmError::BadRequest(String::new()),
            LlmError::Cancelled,
        ] {
            assert!(!permanent.is_retryable(), "{permanent:?}");
        }
    }
}
