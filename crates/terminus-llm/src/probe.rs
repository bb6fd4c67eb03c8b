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
//!   sets one, else `model_info["<arch>.context_length"]`.
//!
//! `{root}` is the api_base without its `/v1`. The three questions are asked at once, each with
//! a short time limit, and any failure (refused, 404, late, not JSON, no such field) is simply no
//! answer: the caller falls back to the table. The key, when there is one, travels as it does
//! with a chat request, to the same host only, and is never logged.

use std::time::Duration;

use serde_json::{Value, json};
use terminus_core::models::{ServerKind, ServerLimits};
use terminus_core::secrets::redact_url;

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
    let (models, props, show) = tokio::join!(models, props, show);
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
    let found = ordered.into_iter().find_map(|(via, context)| context.map(|context| ServerLimits { context, via }));
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
    let mut response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.ok()? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_PROBE_BYTES {
            return None;
        }
    }
    serde_json::from_slice(&body).ok()
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

    /// A server that refuses, answers 404 or is not there at all is no answer, quickly.
    #[tokio::test]
    async fn failures_are_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let settings =
            ProviderSettings { api_base: Some(format!("http://{addr}/v1")), ..ProviderSettings::new("hosted_vllm/m") };
        let started = std::time::Instant::now();
        assert_eq!(server_limits(&settings, Duration::from_secs(2)).await, None);
        assert!(started.elapsed() < Duration::from_secs(3));
        // A server that accepts and never answers costs one time limit, not three.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let settings = ProviderSettings {
            api_base: Some(format!("http://{}/v1", silent.local_addr().unwrap())),
            ..ProviderSettings::new("hosted_vllm/m")
        };
        let started = std::time::Instant::now();
        assert_eq!(server_limits(&settings, Duration::from_millis(300)).await, None);
        assert!(started.elapsed() < Duration::from_millis(800), "{:?}", started.elapsed());
        drop(silent);
        let anthropic = ProviderSettings::new("anthropic/claude-sonnet-4-5");
        assert_eq!(server_limits(&anthropic, Duration::from_millis(1)).await, None, "not asked");
    }
}
