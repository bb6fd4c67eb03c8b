//! Asking the model server itself how large the model's context is.
//!
//! Self-hosted servers know the one fact no table can: the context they were started with
//! (`--max-model-len`, `-c`, `num_ctx`). Three servers say it, each in its own place:
//!
//! - vLLM (and SGLang): `GET {api_base}/models` → `data[i].max_model_len` for the model's id;
//!   OpenAI-style listings that say `context_length` or `context_window` (OpenRouter, Groq)
//!   count too;
//! - llama.cpp server: `GET {root}/props` → `default_generation_settings.n_ctx` (older builds:
//!   top-level `n_ctx`);
//! - Ollama: `POST {root}/api/show {"model": name}` → `num_ctx` in `parameters` when the model
//!   sets one, else `model_info["<arch>.context_length"]`;
//! - llama-cpp-python's server (`python -m llama_cpp.server`, not llama.cpp's own
//!   `llama-server`): its `/v1/models` lists only ids and it has no `/props`, so its `n_ctx`
//!   shows only in the 400 it answers to a prompt that does not fit. When `GET
//!   {root}/openapi.json` names it (`info.title` "🦙 llama.cpp Python API") and nothing else
//!   answered, one `POST {api_base}/completions` with a prompt longer than any context it can
//!   hold (`max_tokens: 1`) is sent, and the context is read from the error's "maximum context
//!   length is N tokens" ([`crate::error::stated_context_limit`]). The server rejects it after
//!   tokenizing, before evaluating anything.
//!
//! `{root}` is the api_base without its `/v1`. The first four questions are asked at once, each
//! with a short time limit, and any failure (refused, 404, late, not JSON, no such field) is simply
//! no answer: the caller falls back to the table. The key, when there is one, travels as it does
//! with a chat request, to the same host only, and is never logged.

use std::time::Duration;

use serde_json::{Value, json};
use terminus_core::models::{ServerKind, ServerLimits};
use terminus_core::secrets::redact_url;

use crate::error::stated_context_limit;
use crate::settings::{ProviderKind, ProviderSettings};

/// The time limit of one question (the three run at once).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// A model listing of a big gateway (OpenRouter's) is a few megabytes; nothing we ask needs more.
const MAX_PROBE_BYTES: usize = 16 * 1024 * 1024;

/// Asks the server behind `settings` for the model's context size; None when no server says.
/// Anthropic's API and the offline oracle report none, so they are not asked.
pub async fn server_limits(settings: &ProviderSettings, timeout: Duration) -> Option<ServerLimits> {
    if settings.kind() != ProviderKind::OpenAiCompatible {
        return None;
    }
    let client = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout).build().ok()?;
    let base = settings.resolved_api_base().trim_end_matches('/').to_string();
    let root = base.strip_suffix("/v1").unwrap_or(&base).to_string();
    let model = settings.wire_model();
    let key = settings.api_key();
    let authorized = |request: reqwest::RequestBuilder| match &key {
        Some(key) => request.bearer_auth(key),
        None => request,
    };
    let models = fetch(authorized(client.get(format!("{base}/models"))));
    let props = fetch(authorized(client.get(format!("{root}/props"))));
    let show = fetch(authorized(client.post(format!("{root}/api/show")).json(&json!({"model": model}))));
    let openapi = fetch(authorized(client.get(format!("{root}/openapi.json"))));
    let (models, props, show, openapi) = tokio::join!(models, props, show, openapi);
    let answers = [
        (ServerKind::OpenAiModels, models.as_ref().and_then(|v| context_from_models(v, &model))),
        (ServerKind::LlamaCppProps, props.as_ref().and_then(context_from_props)),
        (ServerKind::OllamaShow, show.as_ref().and_then(context_from_ollama_show)),
    ];
    // An `ollama/` model is Ollama's to describe; otherwise the listing that names the model is
    // the most specific answer, and llama.cpp's one-model server the next.
    let ollama_first = settings.prefix() == "ollama";
    let mut ordered: Vec<_> = answers.into_iter().collect();
    if ollama_first {
        ordered.rotate_right(1);
    }
    let mut found = ordered.into_iter().find_map(|(via, context)| context.map(|context| ServerLimits { context, via }));
    if found.is_none() && openapi.as_ref().is_some_and(is_llama_cpp_python) {
        let overflow = authorized(client.post(format!("{base}/completions")).json(&overflow_request(&model)));
        found = fetch_error(overflow)
            .await
            .and_then(|(status, body)| stated_context_limit(status, &body))
            .map(|context| ServerLimits { context, via: ServerKind::LlamaCppPython });
    }
    match &found {
        Some(limits) => tracing::info!(
            model = %settings.model_name,
            api_base = %redact_url(&base),
            context = limits.context,
            via = ?limits.via,
            "the model server reports its context size"
        ),
        None => {
            tracing::debug!(model = %settings.model_name, api_base = %redact_url(&base), "the model server reports no context size")
        }
    }
    found
}

/// The JSON body of a 2xx reply, or None for anything else.
async fn fetch(request: reqwest::RequestBuilder) -> Option<Value> {
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    serde_json::from_slice(&read_capped(response).await?).ok()
}

/// A reply's body, or None past [`MAX_PROBE_BYTES`] (a probe never reads a large answer).
async fn read_capped(mut response: reqwest::Response) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_PROBE_BYTES {
            return None;
        }
    }
    Some(body)
}

/// The status and body of a 4xx reply (the answer a question that is meant to fail wants),
/// or None for anything else.
async fn fetch_error(request: reqwest::RequestBuilder) -> Option<(u16, String)> {
    let response = request.send().await.ok()?;
    let status = response.status();
    if !status.is_client_error() {
        return None;
    }
    let body = read_capped(response).await?;
    Some((status.as_u16(), String::from_utf8_lossy(&body).into_owned()))
}

/// The title llama-cpp-python's server gives its OpenAPI document.
const LLAMA_CPP_PYTHON_TITLE: &str = "llama.cpp Python API";

/// Whether an OpenAPI document is llama-cpp-python's server's.
pub fn is_llama_cpp_python(openapi: &Value) -> bool {
    openapi.pointer("/info/title").and_then(Value::as_str).is_some_and(|t| t.contains(LLAMA_CPP_PYTHON_TITLE))
}

/// Words of the prompt that asks llama-cpp-python for its context: each `" a"` is at least one
/// token in every tokenizer, so the prompt is longer than the contexts such a server is run with
/// (its `n_ctx` is 2,048 unless set; 262,144 covers the training context of today's open models,
/// used when `n_ctx` is 0). Two bytes a word: a 512 KiB request, answered once tokenized (0.7 s
/// on a loaded 2-core machine; four times as many words took longer than [`PROBE_TIMEOUT`]). A
/// server with a larger context evaluates the prompt instead, and the probe gives up at its
/// time limit: no answer.
pub const OVERFLOW_PROBE_WORDS: usize = 1 << 18;

/// The completion request whose error states the context.
pub fn overflow_request(model: &str) -> Value {
    json!({"model": model, "prompt": " a".repeat(OVERFLOW_PROBE_WORDS), "max_tokens": 1, "temperature": 0})
}

fn positive(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n > 0)
}

/// `data[i]` whose `id` is the model: its `max_model_len` (vLLM), `context_length` or
/// `context_window`.
pub fn context_from_models(body: &Value, model: &str) -> Option<u64> {
    let entry = body.get("data")?.as_array()?.iter().find(|m| m.get("id").and_then(Value::as_str) == Some(model))?;
    ["max_model_len", "context_length", "context_window"].iter().find_map(|key| entry.get(*key).and_then(positive))
}

/// llama.cpp's `/props`: `default_generation_settings.n_ctx`, or `n_ctx` at the top.
pub fn context_from_props(body: &Value) -> Option<u64> {
    body.get("default_generation_settings")
        .and_then(|s| s.get("n_ctx"))
        .and_then(positive)
        .or_else(|| body.get("n_ctx").and_then(positive))
}

/// Ollama's `/api/show`: `num_ctx` in the `parameters` text when the model sets it (what the
/// server will use), else the architecture's `context_length` (what the weights support).
pub fn context_from_ollama_show(body: &Value) -> Option<u64> {
    let from_parameters = body.get("parameters").and_then(Value::as_str).and_then(|text| {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u64>().ok()).flatten()
        })
    });
    let from_info = || {
        let info = body.get("model_info")?.as_object()?;
        let arch = info.get("general.architecture").and_then(Value::as_str);
        match arch {
            Some(arch) => info.get(&format!("{arch}.context_length")).and_then(positive),
            None => info.iter().find(|(k, _)| k.ends_with(".context_length")).and_then(|(_, v)| positive(v)),
        }
    };
    from_parameters.filter(|n| *n > 0).or_else(from_info)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn vllm_listings_name_the_model() {
        let body = json!({"object": "list", "data": [
            {"id": "other", "max_model_len": 9},
            {"id": "Qwen/Qwen3-8B", "object": "model", "max_model_len": 2048},
        ]});
        assert_eq!(context_from_models(&body, "Qwen/Qwen3-8B"), Some(2048));
        assert_eq!(context_from_models(&body, "absent"), None);
        let openrouter = json!({"data": [{"id": "acme/m", "context_length": 131072}]});
        assert_eq!(context_from_models(&openrouter, "acme/m"), Some(131_072));
        assert_eq!(context_from_models(&json!({"data": [{"id": "m"}]}), "m"), None, "OpenAI's own listing");
        assert_eq!(context_from_models(&json!({"data": [{"id": "m", "max_model_len": 0}]}), "m"), None);
        assert_eq!(context_from_models(&json!([1, 2]), "m"), None);
    }

    #[test]
    fn llama_cpp_props_in_both_shapes() {
        assert_eq!(context_from_props(&json!({"default_generation_settings": {"n_ctx": 4096}})), Some(4096));
        assert_eq!(context_from_props(&json!({"n_ctx": 8192})), Some(8192));
        assert_eq!(context_from_props(&json!({"default_generation_settings": {}})), None);
        assert_eq!(context_from_props(&json!({"n_ctx": "big"})), None);
    }

    #[test]
    fn ollama_prefers_the_configured_num_ctx() {
        let info = json!({"general.architecture": "llama", "llama.context_length": 131072});
        let set =
            json!({"parameters": "stop \"<|eot_id|>\"\nnum_ctx                        16384", "model_info": info});
        assert_eq!(context_from_ollama_show(&set), Some(16_384));
        let unset = json!({"parameters": "stop x", "model_info": info});
        assert_eq!(context_from_ollama_show(&unset), Some(131_072));
        let no_arch = json!({"model_info": {"qwen2.context_length": 32768}});
        assert_eq!(context_from_ollama_show(&no_arch), Some(32_768));
        assert_eq!(context_from_ollama_show(&json!({"error": "model not found"})), None);
    }

    /// The bodies llama-cpp-python 0.3.36's server sends (`llama_cpp/server/app.py`, `errors.py`).
    const LLAMA_CPP_PYTHON_MODELS: &str = r#"{"object":"list","data":[{"id":"smollm2-135m-instruct","object":"model","owned_by":"me","permissions":[]}]}"#;
    fn llama_cpp_python_overflow(n_ctx: usize, prompt_tokens: usize) -> String {
        json!({"error": {
            "message": format!("This model's maximum context length is {n_ctx} tokens, however you requested {} tokens ({prompt_tokens} in your prompt; 1 for the completion). Please reduce your prompt; or completion length.", prompt_tokens + 1),
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
        .to_string()
    }

    /// A loopback server answering as llama-cpp-python's does (`title` its OpenAPI title),
    /// recording the requests it saw (`METHOD path`).
    async fn fake_server(title: &'static str, n_ctx: usize) -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let log = log.clone();
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut chunk = [0u8; 65536];
                    let (head, body_start) = loop {
                        let n = stream.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&chunk[..n]);
                        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                            break (String::from_utf8_lossy(&data[..i]).into_owned(), i + 4);
                        }
                    };
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    while data.len() < body_start + length {
                        let n = stream.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&chunk[..n]);
                    }
                    let body = &data[body_start..body_start + length];
                    let request_line: Vec<&str> = head.lines().next().unwrap_or("").split(' ').collect();
                    let (method, path) = (request_line[0], request_line.get(1).copied().unwrap_or(""));
                    log.lock().unwrap().push(format!("{method} {path}"));
                    let (status, reply) = match (method, path) {
                        ("GET", "/openapi.json") => (
                            200,
                            json!({"openapi": "3.1.0", "info": {"title": title, "version": "0.3.36"}}).to_string(),
                        ),
                        ("GET", "/v1/models") => (200, LLAMA_CPP_PYTHON_MODELS.to_string()),
                        ("POST", "/v1/completions") => {
                            let request: Value = serde_json::from_slice(body).unwrap();
                            let tokens = request["prompt"].as_str().unwrap().split_whitespace().count();
                            assert_eq!(request["max_tokens"], 1);
                            if tokens >= n_ctx {
                                (400, llama_cpp_python_overflow(n_ctx, tokens))
                            } else {
                                (200, json!({"choices": [{"text": "a", "finish_reason": "length"}]}).to_string())
                            }
                        }
                        _ => (404, r#"{"detail":"Not Found"}"#.to_string()),
                    };
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                        reply.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        (base, seen)
    }

    /// llama-cpp-python's server says its context only in the error of a prompt too long for
    /// it: the probe recognises the server by its OpenAPI title and reads that error. Other
    /// servers (another title) are never sent the long prompt.
    #[tokio::test]
    async fn llama_cpp_python_states_its_context_in_the_overflow_error() {
        let (base, seen) = fake_server("🦙 llama.cpp Python API", 2048).await;
        let settings = ProviderSettings { api_base: Some(base), ..ProviderSettings::new("openai/nobody-knows-me") };
        let limits = server_limits(&settings, Duration::from_secs(5)).await;
        assert_eq!(limits, Some(ServerLimits { context: 2048, via: ServerKind::LlamaCppPython }));
        let mut seen = seen.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            ["GET /openapi.json", "GET /props", "GET /v1/models", "POST /api/show", "POST /v1/completions"]
        );

        let (base, seen) = fake_server("vLLM", 2048).await;
        let settings = ProviderSettings { api_base: Some(base), ..ProviderSettings::new("openai/nobody-knows-me") };
        assert_eq!(server_limits(&settings, Duration::from_secs(5)).await, None);
        assert!(!seen.lock().unwrap().iter().any(|r| r.contains("completions")), "{seen:?}");
    }

    #[test]
    fn only_llama_cpp_python_is_recognised_by_its_title() {
        assert!(is_llama_cpp_python(&json!({"info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"}})));
        assert!(!is_llama_cpp_python(&json!({"info": {"title": "vLLM API"}})));
        assert!(!is_llama_cpp_python(&json!({"detail": "Not Found"})));
        let request = overflow_request("m");
        assert_eq!(request["prompt"].as_str().unwrap().split_whitespace().count(), OVERFLOW_PROBE_WORDS);
        assert_eq!((request["model"].as_str(), request["max_tokens"].as_u64()), (Some("m"), Some(1)));
    }

    /// A server that refuses or never answers is no answer, within one time limit: the silent
    /// one costs exactly one (its four requests wait side by side), not none and not four. The clock is tokio's paused one: the time limits are timers it runs ahead to, so
    /// the figures below are the probe's own, not the machine's speed.
    #[tokio::test(start_paused = true)]
    async fn failures_are_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let settings =
            ProviderSettings { api_base: Some(format!("http://{addr}/v1")), ..ProviderSettings::new("hosted_vllm/m") };
        let started = tokio::time::Instant::now();
        assert_eq!(server_limits(&settings, Duration::from_secs(2)).await, None);
        assert!(started.elapsed() <= Duration::from_secs(2), "{:?}", started.elapsed());
        // A server that accepts and never answers costs one time limit, not three.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let settings = ProviderSettings {
            api_base: Some(format!("http://{}/v1", silent.local_addr().unwrap())),
            ..ProviderSettings::new("hosted_vllm/m")
        };
        let started = tokio::time::Instant::now();
        assert_eq!(server_limits(&settings, Duration::from_millis(300)).await, None);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(600), "{took:?}");
        drop(silent);
        let anthropic = ProviderSettings::new("anthropic/claude-sonnet-4-5");
        assert_eq!(server_limits(&anthropic, Duration::from_millis(1)).await, None, "not asked");
    }
}
