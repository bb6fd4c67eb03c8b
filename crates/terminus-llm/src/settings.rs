//! How a provider is configured: chosen by the `provider/` prefix of the model name, as LiteLLM
//! users write it, with the usual key variables and default endpoints.

use std::time::Duration;

use terminus_core::models::ModelInfo;

use crate::providers::{self, ProviderEntry, ProviderError, Wire};

/// The model name that selects the offline oracle.
pub const ORACLE_MODEL: &str = "oracle";

/// The protocol a model is reached with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI chat completions: `openai/`, `hosted_vllm/`, `openrouter/`, `ollama/`, or anything
    /// else with an `api_base`.
    OpenAiCompatible,
    /// The native Anthropic Messages API: `anthropic/`.
    Anthropic,
    /// The offline oracle model.
    Oracle,
}

/// Everything needed to build a provider.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderSettings {
    pub model_name: String,
    pub api_base: Option<String>,
    /// The environment variable holding the key (default: by provider).
    pub api_key_env: Option<String>,
    pub reasoning_effort: Option<String>,
    /// Anthropic extended thinking budget (at least 1024).
    pub max_thinking_tokens: Option<u64>,
    /// Ask for token ids and log-probabilities.
    pub collect_rollout_details: bool,
    pub request_timeout: Duration,
    pub model_info: ModelInfo,
    /// The protocol when the job names one (Harbor's `model_api_format`); else the prefix decides.
    pub protocol: Option<ProviderKind>,
}

/// The most cache breakpoints Anthropic takes in one request.
pub const ANTHROPIC_CACHE_BREAKPOINTS: usize = 4;

impl ProviderSettings {
    pub fn new(model_name: &str) -> ProviderSettings {
        ProviderSettings {
            model_name: model_name.to_string(),
            api_base: None,
            api_key_env: None,
            reasoning_effort: None,
            max_thinking_tokens: None,
            collect_rollout_details: false,
            request_timeout: Duration::from_secs(600),
            model_info: ModelInfo::builtin(model_name),
            protocol: None,
        }
    }

    /// The `provider` part of `provider/model`, lower-cased (empty when there is none).
    pub fn prefix(&self) -> String {
        match self.model_name.split_once('/') {
            Some((prefix, _)) => prefix.to_ascii_lowercase(),
            None => String::new(),
        }
    }

    pub fn kind(&self) -> ProviderKind {
        if self.model_name == ORACLE_MODEL {
            return ProviderKind::Oracle;
        }
        if let Some(protocol) = self.protocol {
            return protocol;
        }
        match self.entry().map(|e| e.wire) {
            Some(Wire::Anthropic) => ProviderKind::Anthropic,
            _ => ProviderKind::OpenAiCompatible,
        }
    }

    /// The provider of the prefix, from the table (None: not one we know).
    pub fn entry(&self) -> Option<&'static ProviderEntry> {
        providers::lookup(&self.prefix())
    }

    /// Whether requests go to an Azure OpenAI deployment (its URL and `api-key` header).
    pub fn is_azure(&self) -> bool {
        self.protocol.is_none() && self.entry().is_some_and(|e| e.wire == Wire::Azure)
    }

    /// Whether the model is one of OpenAI's reasoning models (o1, o3, o4 and gpt-5, but not
    /// gpt-5-chat), by LiteLLM's own rule: on OpenAI or Azure, an o-series name the model table
    /// knows, or a gpt-5 name. They take no temperature but 1 (see `openai.rs`).
    /// How many trailing messages carry an ephemeral cache breakpoint: the last 4 (Anthropic's
    /// most) for every model whose name says `anthropic` or `claude`, whatever the route (a
    /// proxy or OpenRouter passes them on), none for others, as the reference marks them.
    pub fn cached_tail(&self) -> usize {
        let name = self.model_name.to_lowercase();
        if name.contains("anthropic") || name.contains("claude") { ANTHROPIC_CACHE_BREAKPOINTS } else { 0 }
    }

    pub fn is_openai_reasoning_model(&self) -> bool {
        let openai = self.protocol.is_none() && self.entry().is_some_and(|e| matches!(e.prefix, "openai" | "azure"));
        if !openai {
            return false;
        }
        let name = self.wire_model().to_ascii_lowercase();
        let o_series = ["o1", "o3", "o4"].iter().any(|p| name.starts_with(p)) && ModelInfo::is_listed(&name);
        o_series || (name.contains("gpt-5") && !name.contains("gpt-5-chat"))
    }

    /// Whether this model can be reached as configured (see [`providers::resolve`]).
    pub fn check(&self) -> Result<(), ProviderError> {
        if self.kind() == ProviderKind::Oracle {
            return Ok(());
        }
        providers::resolve(&self.model_name, self.api_base.as_deref(), self.protocol.is_some()).map(|_| ())
    }

    /// The model name on the wire: the configured one without its `provider/` prefix.
    pub fn wire_model(&self) -> String {
        match self.model_name.split_once('/') {
            Some((_, rest)) => rest.to_string(),
            None => self.model_name.clone(),
        }
    }

    /// The endpoint: `api_base`, else the provider's variables, else its public default
    /// (empty when it has none: [`Self::check`] refuses that before any call).
    pub fn resolved_api_base(&self) -> String {
        if let Some(base) = self.api_base.as_ref().filter(|b| !b.is_empty()) {
            return base.clone();
        }
        let entry = match self.kind() {
            ProviderKind::Anthropic => providers::lookup("anthropic"),
            _ => self.entry().or_else(|| providers::lookup("openai")),
        };
        let Some(entry) = entry else { return String::new() };
        match entry.base_vars.iter().find_map(|v| providers::env(v)) {
            // Ollama's variable names the server; its OpenAI-compatible API is under `/v1`.
            Some(base) if entry.prefix.starts_with("ollama") => format!("{}/v1", base.trim_end_matches('/')),
            Some(base) => base,
            None => entry.default_base.unwrap_or_default().to_string(),
        }
    }

    /// The variable the key is read from: the one the job names, else the first of the
    /// provider's that is set, else its first.
    pub fn key_variable(&self) -> String {
        if let Some(name) = &self.api_key_env {
            return name.clone();
        }
        let entry = match self.kind() {
            ProviderKind::Anthropic => providers::lookup("anthropic"),
            _ => self.entry().or_else(|| providers::lookup("openai")),
        };
        let vars = entry.map(|e| e.key_vars).unwrap_or(&["OPENAI_API_KEY"]);
        vars.iter().find(|v| providers::env(v).is_some()).or(vars.first()).map(|v| v.to_string()).unwrap_or_default()
    }

    /// Azure's `api-version`: `AZURE_API_VERSION`, else LiteLLM's default.
    pub fn azure_api_version(&self) -> String {
        providers::env("AZURE_API_VERSION").unwrap_or_else(|| providers::AZURE_DEFAULT_API_VERSION.to_string())
    }

    /// The key, read from the environment at call-construction time (never stored elsewhere).
    pub fn api_key(&self) -> Option<String> {
        std::env::var(self.key_variable()).ok().filter(|k| !k.is_empty())
    }

    /// What identifies a shared LLM actor: protocol, model and endpoint.
    pub fn identity(&self) -> (ProviderKind, String, String) {
        (self.kind(), self.model_name.clone(), self.resolved_api_base())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_follow_the_prefix() {
        let s = ProviderSettings::new("anthropic/claude-sonnet-4-20250514");
        assert_eq!(s.kind(), ProviderKind::Anthropic);
        assert_eq!(s.wire_model(), "claude-sonnet-4-20250514");
        assert_eq!(s.key_variable(), "ANTHROPIC_API_KEY");
        let s = ProviderSettings::new("openrouter/anthropic/claude-3.5-sonnet");
        assert_eq!(s.kind(), ProviderKind::OpenAiCompatible);
        assert_eq!(s.wire_model(), "anthropic/claude-3.5-sonnet");
        assert_eq!(s.key_variable(), "OPENROUTER_API_KEY");
        let s = ProviderSettings {
            api_key_env: Some("MY_KEY".into()),
            ..ProviderSettings::new("hosted_vllm/Qwen/Qwen3-8B")
        };
        assert_eq!(s.wire_model(), "Qwen/Qwen3-8B");
        assert_eq!(s.key_variable(), "MY_KEY");
        assert_eq!(ProviderSettings::new("oracle").kind(), ProviderKind::Oracle);
        let s = ProviderSettings {
            api_base: Some("http://127.0.0.1:9/v1".into()),
            ..ProviderSettings::new("ollama/llama3")
        };
        assert_eq!(s.resolved_api_base(), "http://127.0.0.1:9/v1");
    }

    #[test]
    fn openai_reasoning_models_are_known_by_litellms_rule() {
        for name in ["openai/o3-mini", "o1", "openai/gpt-5", "gpt-5-mini", "azure/gpt-5"] {
            assert!(ProviderSettings::new(name).is_openai_reasoning_model(), "{name}");
        }
        for name in ["openai/gpt-4o", "openai/gpt-5-chat-latest", "openai/o3-custom-finetune", "groq/openai/gpt-5"] {
            assert!(!ProviderSettings::new(name).is_openai_reasoning_model(), "{name}");
        }
    }

    #[test]
    fn a_named_protocol_wins_over_the_prefix() {
        let s = ProviderSettings {
            protocol: Some(ProviderKind::Anthropic),
            ..ProviderSettings::new("hosted_vllm/claude-proxy")
        };
        assert_eq!(s.kind(), ProviderKind::Anthropic);
        assert_eq!(s.key_variable(), "ANTHROPIC_API_KEY");
        let s = ProviderSettings {
            protocol: Some(ProviderKind::OpenAiCompatible),
            ..ProviderSettings::new("anthropic/claude-sonnet-4-5")
        };
        assert_eq!(s.kind(), ProviderKind::OpenAiCompatible);
    }
}
