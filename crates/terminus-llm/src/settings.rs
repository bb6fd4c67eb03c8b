//! How a provider is configured: chosen by the `provider/` prefix of the model name, as LiteLLM
//! users write it, with the usual key variables and default endpoints.

use std::time::Duration;

use terminus_core::models::ModelInfo;

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
        match self.prefix().as_str() {
            "anthropic" => ProviderKind::Anthropic,
            _ => ProviderKind::OpenAiCompatible,
        }
    }

    /// The model name on the wire: the configured one without its `provider/` prefix.
    pub fn wire_model(&self) -> String {
        match self.model_name.split_once('/') {
            Some((_, rest)) => rest.to_string(),
            None => self.model_name.clone(),
        }
    }

    /// The endpoint: `api_base`, else the provider's usual variable, else its public default.
    pub fn resolved_api_base(&self) -> String {
        if let Some(base) = self.api_base.as_ref().filter(|b| !b.is_empty()) {
            return base.clone();
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        match (self.kind(), self.prefix().as_str()) {
            (ProviderKind::Anthropic, _) => {
                env("ANTHROPIC_API_BASE").unwrap_or_else(|| "https://api.anthropic.com".into())
            }
            (_, "openrouter") => env("OPENROUTER_API_BASE").unwrap_or_else(|| "https://openrouter.ai/api/v1".into()),
            (_, "ollama") => env("OLLAMA_API_BASE")
                .map(|b| format!("{}/v1", b.trim_end_matches('/')))
                .unwrap_or_else(|| "http://127.0.0.1:11434/v1".into()),
            _ => env("OPENAI_API_BASE").unwrap_or_else(|| "https://api.openai.com/v1".into()),
        }
    }

    /// The variable the key is read from.
    pub fn key_variable(&self) -> String {
        if let Some(name) = &self.api_key_env {
            return name.clone();
        }
        match (self.kind(), self.prefix().as_str()) {
            (ProviderKind::Anthropic, _) => "ANTHROPIC_API_KEY".into(),
            (_, "openrouter") => "OPENROUTER_API_KEY".into(),
            _ => "OPENAI_API_KEY".into(),
        }
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
