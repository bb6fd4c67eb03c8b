//! The providers a model name can start with, as LiteLLM users write them (`groq/llama-3.3-70b`):
//! which protocol each speaks, its usual endpoint and the variables its key and endpoint are
//! read from. Every provider here answers OpenAI's chat completions (Azure at its deployment's
//! URL) or, for `anthropic/`, the Messages API. A prefix that is not here — a provider with a
//! protocol of its own (`bedrock/`, `vertex_ai/`, `sagemaker/`…) or a typo — is refused when the
//! job loads, with the way out: an OpenAI-compatible endpoint named `openai/<model>` plus
//! `api_base`.
//!
//! Endpoints and variables are LiteLLM's, with three departures where LiteLLM does not speak
//! chat completions or has no endpoint to default to: `gemini/` goes to Google's
//! OpenAI-compatible endpoint (LiteLLM uses Gemini's own API; the same key works for both),
//! `ollama/` to Ollama's `/v1` (LiteLLM uses `/api/chat`), and `hosted_vllm/` and `lm_studio/`
//! need an endpoint (LiteLLM would fall back to OpenAI's with a placeholder key).

/// How a provider is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// `POST {base}/chat/completions`, key as a bearer token.
    OpenAi,
    /// Azure OpenAI: `POST {base}/openai/deployments/{model}/chat/completions?api-version=…`,
    /// key in the `api-key` header.
    Azure,
    /// Anthropic's Messages API.
    Anthropic,
}

/// One provider prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProviderEntry {
    pub prefix: &'static str,
    pub wire: Wire,
    /// The endpoint when neither `api_base` nor a variable names one (None: one must be given).
    pub default_base: Option<&'static str>,
    /// Variables that name the endpoint, in the order they are tried.
    pub base_vars: &'static [&'static str],
    /// Variables that hold the key, in the order they are tried.
    pub key_vars: &'static [&'static str],
    /// Whether a call without a key is pointless (a local server needs none).
    pub key_required: bool,
}

const fn entry(
    prefix: &'static str,
    wire: Wire,
    default_base: Option<&'static str>,
    base_vars: &'static [&'static str],
    key_vars: &'static [&'static str],
    key_required: bool,
) -> ProviderEntry {
    ProviderEntry { prefix, wire, default_base, base_vars, key_vars, key_required }
}

/// Azure's `api-version` when neither the kwarg nor `AZURE_API_VERSION` names one (LiteLLM's).
/// Every variable a provider's API key is read from: what no task may read unless the job
/// names it (see `terminus_config::host_env`).
pub fn key_variables() -> impl Iterator<Item = &'static str> {
    PROVIDERS.iter().flat_map(|p| p.key_vars.iter().copied())
}

pub const AZURE_DEFAULT_API_VERSION: &str = "2025-02-01-preview";

/// The table. `openai` also serves a model name without a prefix.
pub const PROVIDERS: &[ProviderEntry] = &[
    entry(
        "openai",
        Wire::OpenAi,
        Some("https://api.openai.com/v1"),
        &["OPENAI_BASE_URL", "OPENAI_API_BASE"],
        &["OPENAI_API_KEY"],
        true,
    ),
    entry(
        "anthropic",
        Wire::Anthropic,
        Some("https://api.anthropic.com"),
        &["ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"],
        &["ANTHROPIC_API_KEY"],
        true,
    ),
    entry(
        "azure",
        Wire::Azure,
        None,
        &["AZURE_API_BASE", "AZURE_OPENAI_ENDPOINT"],
        &["AZURE_OPENAI_API_KEY", "AZURE_API_KEY"],
        true,
    ),
    entry(
        "gemini",
        Wire::OpenAi,
        Some("https://generativelanguage.googleapis.com/v1beta/openai"),
        &[],
        &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        true,
    ),
    entry(
        "deepseek",
        Wire::OpenAi,
        Some("https://api.deepseek.com/beta"),
        &["DEEPSEEK_API_BASE"],
        &["DEEPSEEK_API_KEY"],
        true,
    ),
    entry("groq", Wire::OpenAi, Some("https://api.groq.com/openai/v1"), &["GROQ_API_BASE"], &["GROQ_API_KEY"], true),
    entry(
        "together_ai",
        Wire::OpenAi,
        Some("https://api.together.xyz/v1"),
        &["TOGETHER_AI_API_BASE"],
        &["TOGETHER_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHERAI_API_KEY", "TOGETHER_AI_TOKEN"],
        true,
    ),
    entry(
        "fireworks_ai",
        Wire::OpenAi,
        Some("https://api.fireworks.ai/inference/v1"),
        &["FIREWORKS_API_BASE"],
        &["FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKSAI_API_KEY", "FIREWORKS_AI_TOKEN"],
        true,
    ),
    entry(
        "mistral",
        Wire::OpenAi,
        Some("https://api.mistral.ai/v1"),
        &["MISTRAL_API_BASE"],
        &["MISTRAL_API_KEY"],
        true,
    ),
    entry("xai", Wire::OpenAi, Some("https://api.x.ai/v1"), &["XAI_API_BASE"], &["XAI_API_KEY"], true),
    entry(
        "cerebras",
        Wire::OpenAi,
        Some("https://api.cerebras.ai/v1"),
        &["CEREBRAS_API_BASE"],
        &["CEREBRAS_API_KEY"],
        true,
    ),
    entry(
        "perplexity",
        Wire::OpenAi,
        Some("https://api.perplexity.ai"),
        &["PERPLEXITY_API_BASE"],
        &["PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"],
        true,
    ),
    entry(
        "deepinfra",
        Wire::OpenAi,
        Some("https://api.deepinfra.com/v1/openai"),
        &["DEEPINFRA_API_BASE"],
        &["DEEPINFRA_API_KEY"],
        true,
    ),
    entry(
        "openrouter",
        Wire::OpenAi,
        Some("https://openrouter.ai/api/v1"),
        &["OPENROUTER_API_BASE"],
        &["OPENROUTER_API_KEY", "OR_API_KEY"],
        true,
    ),
    entry("hosted_vllm", Wire::OpenAi, None, &["HOSTED_VLLM_API_BASE"], &["HOSTED_VLLM_API_KEY"], false),
    entry("lm_studio", Wire::OpenAi, None, &["LM_STUDIO_API_BASE"], &["LM_STUDIO_API_KEY"], false),
    entry("ollama", Wire::OpenAi, Some("http://127.0.0.1:11434/v1"), &["OLLAMA_API_BASE"], &["OLLAMA_API_KEY"], false),
    entry(
        "ollama_chat",
        Wire::OpenAi,
        Some("http://127.0.0.1:11434/v1"),
        &["OLLAMA_API_BASE"],
        &["OLLAMA_API_KEY"],
        false,
    ),
];

/// LiteLLM prefixes whose providers speak a protocol of their own (named in the refusal).
const OWN_PROTOCOL: &[&str] = &[
    "bedrock",
    "bedrock_converse",
    "vertex_ai",
    "vertex_ai_beta",
    "sagemaker",
    "sagemaker_chat",
    "cohere",
    "cohere_chat",
    "replicate",
    "watsonx",
    "predibase",
    "cloudflare",
    "clarifai",
    "databricks",
    "triton",
    "petals",
    "nlp_cloud",
    "aleph_alpha",
    "palm",
];

/// Why a model name cannot be reached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error(
        "model `{model}`: terminus does not speak the `{prefix}` provider's own protocol; serve the model behind an OpenAI-compatible endpoint (a LiteLLM proxy, vLLM…) and name it `openai/<model>` with `api_base`"
    )]
    OwnProtocol { model: String, prefix: String },
    #[error(
        "model `{model}`: unknown provider `{prefix}`; known: {known}. For any OpenAI-compatible endpoint, name the model `openai/<model>` and give `api_base`"
    )]
    Unknown { model: String, prefix: String, known: String },
    #[error("model `{model}`: the `{prefix}` provider has no default endpoint; give `api_base` or set {vars}")]
    NoEndpoint { model: String, prefix: String, vars: String },
}

/// The provider of `prefix` (`""`: a model name without one, which is OpenAI's).
pub fn lookup(prefix: &str) -> Option<&'static ProviderEntry> {
    let prefix = if prefix.is_empty() { "openai" } else { prefix };
    PROVIDERS.iter().find(|p| p.prefix == prefix)
}

/// The provider of `model` (its prefix, lower-cased), or why there is none. `api_base` and
/// `named_protocol` (the job named the protocol) are what the job gives besides the name.
pub fn resolve(model: &str, api_base: Option<&str>, named_protocol: bool) -> Result<ProviderEntry, ProviderError> {
    let prefix = model.split_once('/').map(|(p, _)| p.to_ascii_lowercase()).unwrap_or_default();
    let Some(entry) = lookup(&prefix) else {
        // With the protocol named, the name is only passed on (the endpoint is the job's).
        if named_protocol && api_base.is_some_and(|b| !b.is_empty()) {
            return Ok(ProviderEntry { prefix: "", ..PROVIDERS[0] });
        }
        if OWN_PROTOCOL.contains(&prefix.as_str()) {
            return Err(ProviderError::OwnProtocol { model: model.to_string(), prefix });
        }
        let known = PROVIDERS.iter().map(|p| p.prefix).collect::<Vec<_>>().join(", ");
        return Err(ProviderError::Unknown { model: model.to_string(), prefix, known });
    };
    let given = api_base.is_some_and(|b| !b.is_empty()) || entry.base_vars.iter().any(|v| env(v).is_some());
    if entry.default_base.is_none() && !given {
        let vars = entry.base_vars.join(" or ");
        return Err(ProviderError::NoEndpoint { model: model.to_string(), prefix: entry.prefix.to_string(), vars });
    }
    Ok(*entry)
}

/// A variable's value, when set and not empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_openai_compatible_prefix_is_known_and_others_are_refused_by_name() {
        for prefix in [
            "gemini",
            "deepseek",
            "groq",
            "together_ai",
            "fireworks_ai",
            "mistral",
            "xai",
            "cerebras",
            "perplexity",
            "deepinfra",
            "openrouter",
            "ollama",
            "openai",
        ] {
            let entry = resolve(&format!("{prefix}/m"), None, false).unwrap();
            assert_eq!(entry.wire, Wire::OpenAi, "{prefix}");
            assert!(entry.default_base.is_some_and(|b| b.starts_with("http")), "{prefix}");
        }
        assert_eq!(resolve("gpt-4o", None, false).unwrap().prefix, "openai");
        assert_eq!(resolve("azure/dep", Some("https://x.openai.azure.com"), false).unwrap().wire, Wire::Azure);
        for local in ["hosted_vllm", "lm_studio"] {
            let err = resolve(&format!("{local}/m"), None, false).unwrap_err();
            assert!(err.to_string().contains("api_base"), "{err}");
            assert!(resolve(&format!("{local}/m"), Some("http://127.0.0.1:8000/v1"), false).is_ok());
        }
        let bedrock = resolve("bedrock/anthropic.claude-3", None, false).unwrap_err();
        assert!(matches!(bedrock, ProviderError::OwnProtocol { .. }), "{bedrock}");
        assert!(bedrock.to_string().contains("`openai/<model>`") && bedrock.to_string().contains("api_base"));
        let typo = resolve("opeani/gpt-4o", Some("http://x"), false).unwrap_err();
        assert!(matches!(typo, ProviderError::Unknown { .. }) && typo.to_string().contains("`opeani`"), "{typo}");
        assert!(resolve("custom/x", Some("http://x"), true).is_ok(), "a named protocol passes the name on");
    }
}
