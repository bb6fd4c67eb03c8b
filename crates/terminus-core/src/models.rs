//! What we know about models: context and output limits and prices per token. A built-in table
//! covers common models; an agent's `model_info` kwarg (LiteLLM's field names) overrides or
//! completes it. Unknown models get the reference's defaults: a 1,000,000-token context, no output
//! limit, and no price (results then show no cost rather than a wrong one).

use serde_json::{Map, Value};

/// The context limit assumed for unknown models (the reference's fallback).
pub const DEFAULT_CONTEXT_LIMIT: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelInfo {
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub input_cost_per_token: Option<f64>,
    pub output_cost_per_token: Option<f64>,
    /// Price of a cached prompt token (defaults to the input price).
    pub cache_read_input_token_cost: Option<f64>,
}

/// (name, context, output, input $/token, output $/token, cached input $/token)
type Row = (&'static str, u64, u64, f64, f64, f64);

const TABLE: &[Row] = &[
    ("gpt-4o-mini", 128_000, 16_384, 1.5e-7, 6e-7, 7.5e-8),
    ("gpt-4o", 128_000, 16_384, 2.5e-6, 1e-5, 1.25e-6),
    ("gpt-4.1-nano", 1_047_576, 32_768, 1e-7, 4e-7, 2.5e-8),
    ("gpt-4.1-mini", 1_047_576, 32_768, 4e-7, 1.6e-6, 1e-7),
    ("gpt-4.1", 1_047_576, 32_768, 2e-6, 8e-6, 5e-7),
    ("gpt-5-mini", 272_000, 128_000, 2.5e-7, 2e-6, 2.5e-8),
    ("gpt-5", 272_000, 128_000, 1.25e-6, 1e-5, 1.25e-7),
    ("o3-mini", 200_000, 100_000, 1.1e-6, 4.4e-6, 5.5e-7),
    ("o4-mini", 200_000, 100_000, 1.1e-6, 4.4e-6, 2.75e-7),
    ("o3", 200_000, 100_000, 2e-6, 8e-6, 5e-7),
    ("claude-3-5-haiku", 200_000, 8_192, 8e-7, 4e-6, 8e-8),
    ("claude-3-5-sonnet", 200_000, 8_192, 3e-6, 1.5e-5, 3e-7),
    ("claude-3-7-sonnet", 200_000, 64_000, 3e-6, 1.5e-5, 3e-7),
    ("claude-sonnet-4", 200_000, 64_000, 3e-6, 1.5e-5, 3e-7),
    ("claude-opus-4", 200_000, 32_000, 1.5e-5, 7.5e-5, 1.5e-6),
    ("deepseek-chat", 65_536, 8_192, 2.7e-7, 1.1e-6, 7e-8),
];

impl ModelInfo {
    /// The built-in entry for a model name (provider prefixes ignored; dated variants such as
    /// `gpt-4o-2024-08-06` match their family; the longest family name wins).
    pub fn builtin(model_name: &str) -> ModelInfo {
        let name = model_name.rsplit('/').next().unwrap_or(model_name);
        let row = TABLE
            .iter()
            .filter(|(family, ..)| name == *family || name.starts_with(&format!("{family}-")))
            .max_by_key(|(family, ..)| family.len());
        match row {
            Some(&(_, context, output, input, out, cached)) => ModelInfo {
                max_input_tokens: Some(context),
                max_output_tokens: Some(output),
                input_cost_per_token: Some(input),
                output_cost_per_token: Some(out),
                cache_read_input_token_cost: Some(cached),
            },
            None => ModelInfo::default(),
        }
    }

    /// Applies a `model_info` mapping; `Err((key, message))` names a bad entry. `max_tokens` is
    /// accepted as LiteLLM accepts it (the context size when `max_input_tokens` is absent).
    pub fn with_overrides(mut self, overrides: &Map<String, Value>) -> Result<ModelInfo, (String, String)> {
        let int = |key: &str, value: &Value| {
            value.as_u64().filter(|n| *n > 0).ok_or_else(|| (key.to_string(), "must be a positive integer".to_string()))
        };
        let float = |key: &str, value: &Value| {
            value
                .as_f64()
                .filter(|f| *f >= 0.0)
                .ok_or_else(|| (key.to_string(), "must be a non-negative number".to_string()))
        };
        for (key, value) in overrides {
            match key.as_str() {
                "max_input_tokens" => self.max_input_tokens = Some(int(key, value)?),
                "max_tokens" if !overrides.contains_key("max_input_tokens") => {
                    self.max_input_tokens = Some(int(key, value)?)
                }
                "max_tokens" => {}
                "max_output_tokens" => self.max_output_tokens = Some(int(key, value)?),
                "input_cost_per_token" => self.input_cost_per_token = Some(float(key, value)?),
                "output_cost_per_token" => self.output_cost_per_token = Some(float(key, value)?),
                "cache_read_input_token_cost" => self.cache_read_input_token_cost = Some(float(key, value)?),
                // LiteLLM metadata that does not change our behaviour.
                "litellm_provider" | "mode" | "supports_function_calling" | "supports_vision" => {}
                other => return Err((other.to_string(), "unknown model_info key".to_string())),
            }
        }
        Ok(self)
    }

    /// The prompt size the model accepts.
    pub fn context_limit(&self) -> u64 {
        self.max_input_tokens.unwrap_or(DEFAULT_CONTEXT_LIMIT)
    }

    /// Cost of one call; 0 when the model has no price.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64, cache_tokens: u64) -> f64 {
        let input = self.input_cost_per_token.unwrap_or(0.0);
        let cached = self.cache_read_input_token_cost.unwrap_or(input);
        let output = self.output_cost_per_token.unwrap_or(0.0);
        prompt_tokens.saturating_sub(cache_tokens) as f64 * input
            + cache_tokens as f64 * cached
            + completion_tokens as f64 * output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpt_4o_matches_the_reference_goldens() {
        // 682 prompt + 100 completion tokens cost 0.002705 in the reference's golden trajectory.
        let info = ModelInfo::builtin("openai/gpt-4o");
        assert!((info.cost(682, 100, 0) - 0.002705).abs() < 1e-12);
        assert_eq!(info.context_limit(), 128_000);
        assert!(ModelInfo::builtin("gpt-4o-mini").input_cost_per_token < info.input_cost_per_token);
        assert_eq!(ModelInfo::builtin("gpt-4o-2024-08-06"), info);
    }

    #[test]
    fn unknown_models_use_the_reference_defaults() {
        let info = ModelInfo::builtin("hosted_vllm/my-model");
        assert_eq!(info.context_limit(), 1_000_000);
        assert_eq!(info.max_output_tokens, None);
        assert_eq!(info.cost(10, 10, 0), 0.0);
    }

    #[test]
    fn overrides_apply_and_bad_keys_are_named() {
        let overrides = json!({"max_input_tokens": 7000, "max_output_tokens": 4096, "input_cost_per_token": 1e-6});
        let info = ModelInfo::builtin("x").with_overrides(overrides.as_object().unwrap()).unwrap();
        assert_eq!((info.context_limit(), info.max_output_tokens), (7000, Some(4096)));
        assert!((info.cost(1000, 0, 0) - 1e-3).abs() < 1e-12);
        let err =
            ModelInfo::default().with_overrides(json!({"max_input_tokens": "big"}).as_object().unwrap()).unwrap_err();
        assert_eq!(err.0, "max_input_tokens");
        let err = ModelInfo::default().with_overrides(json!({"colour": 1}).as_object().unwrap()).unwrap_err();
        assert_eq!(err.0, "colour");
    }
}
