//! What we know about models: context and output limits and prices per token, and where each
//! fact came from.
//!
//! Facts come, in this order of precedence, from the agent's `model_info` kwarg (LiteLLM's field
//! names), from the model server itself (asked once per job: see `terminus_llm::probe`), from
//! the table generated from LiteLLM's model database (`data/models.tsv`, made by
//! `scripts/gen-model-table.py`), and for the context alone from [`DEFAULT_CONTEXT_LIMIT`].
//! A model with no price has none (results then show no cost rather than a wrong one).

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The context limit assumed when neither `model_info`, the server nor the table knows the
/// model. The reference assumes 1,000,000 tokens, which for a small local model means the
/// proactive summarization never fires and the first overflow is the server's error; 32,768 is
/// the smallest context common among current open models served locally, so a run on an unknown
/// model summarizes early rather than overflows late. A warning names the model whenever it is
/// used.
pub const DEFAULT_CONTEXT_LIMIT: u64 = 32_768;

/// The generated table: one model per line, tab-separated (see the header of the file).
const TABLE_TSV: &str = include_str!("../data/models.tsv");

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModelInfo {
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub input_cost_per_token: Option<f64>,
    pub output_cost_per_token: Option<f64>,
    /// Price of a cached prompt token (defaults to the input price).
    pub cache_read_input_token_cost: Option<f64>,
    /// Price of a prompt token written to the provider's cache (Anthropic's cache writes;
    /// defaults to the input price).
    pub cache_creation_input_token_cost: Option<f64>,
}

/// The table, keyed by lower-cased model name, parsed on first use.
fn table() -> &'static HashMap<String, ModelInfo> {
    static TABLE: OnceLock<HashMap<String, ModelInfo>> = OnceLock::new();
    TABLE.get_or_init(|| parse_table(TABLE_TSV))
}

/// Parses the TSV. The file is generated and checked by a unit test, so a malformed cell is a
/// build-time mistake; it is read as "not stated" rather than taking the process down.
fn parse_table(text: &str) -> HashMap<String, ModelInfo> {
    let mut rows = HashMap::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut cells = line.split('\t');
        let Some(name) = cells.next() else { continue };
        let mut next = || cells.next().filter(|c| !c.is_empty());
        let int = |cell: Option<&str>| cell.and_then(|c| c.parse::<u64>().ok()).filter(|n| *n > 0);
        let float = |cell: Option<&str>| cell.and_then(|c| c.parse::<f64>().ok()).filter(|f| f.is_finite());
        let info = ModelInfo {
            max_input_tokens: int(next()),
            max_output_tokens: int(next()),
            input_cost_per_token: float(next()),
            output_cost_per_token: float(next()),
            cache_read_input_token_cost: float(next()),
            cache_creation_input_token_cost: float(next()),
        };
        if info.max_input_tokens.is_some() {
            rows.insert(name.to_ascii_lowercase(), info);
        }
    }
    rows
}

/// The longest key that `name` extends by a `-suffix` (`gpt-4o-2099-01-01` → `gpt-4o`): a dated
/// or otherwise suffixed variant LiteLLM does not list is taken to be its family.
fn family(rows: &HashMap<String, ModelInfo>, name: &str) -> Option<ModelInfo> {
    let mut prefix = name;
    while let Some((shorter, _)) = prefix.rsplit_once('-') {
        if let Some(info) = rows.get(shorter) {
            return Some(*info);
        }
        prefix = shorter;
    }
    None
}

/// Where a fact about a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    /// The agent's `model_info` kwarg.
    ModelInfo,
    /// The model server, asked at the job's start.
    Server,
    /// The table generated from LiteLLM's model database.
    Table,
    /// [`DEFAULT_CONTEXT_LIMIT`], because nothing else knew (the job warned).
    Default,
    /// Nobody knows, and nothing is assumed (no output limit, no price).
    Unknown,
}

/// Which kind of server reported a context size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// `GET {api_base}/models` → `data[].max_model_len` (vLLM, SGLang) for the model's id.
    OpenAiModels,
    /// `GET {root}/props` → `n_ctx` (llama.cpp server).
    LlamaCppProps,
    /// `POST {root}/api/show` → `num_ctx` or `<arch>.context_length` (Ollama).
    OllamaShow,
    /// llama-cpp-python's server, which reports its `n_ctx` only in the context-length error of
    /// a prompt too long for it (`POST {api_base}/completions`).
    LlamaCppPython,
}

/// What a model server said about the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    pub context: u64,
    pub via: ServerKind,
}

/// One fact and its source, as the trial's `config.json` records it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fact<T> {
    pub value: Option<T>,
    pub source: LimitSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<ServerKind>,
}

impl<T> Fact<T> {
    fn unknown() -> Fact<T> {
        Fact { value: None, source: LimitSource::Unknown, via: None }
    }

    fn of(value: Option<T>, source: LimitSource) -> Fact<T> {
        let source = if value.is_some() { source } else { LimitSource::Unknown };
        Fact { value, source, via: None }
    }
}

/// Every fact about a model with its source: `agent.model_limits` in the trial's `config.json`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelLimits {
    pub max_input_tokens: Fact<u64>,
    pub max_output_tokens: Fact<u64>,
    pub input_cost_per_token: Fact<f64>,
    pub output_cost_per_token: Fact<f64>,
    pub cache_read_input_token_cost: Fact<f64>,
    /// Absent from records written before cache writes were priced.
    #[serde(default = "Fact::unknown")]
    pub cache_creation_input_token_cost: Fact<f64>,
}

impl ModelLimits {
    /// The facts as one [`ModelInfo`] (the context always known, perhaps by assumption).
    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            max_input_tokens: self.max_input_tokens.value,
            max_output_tokens: self.max_output_tokens.value,
            input_cost_per_token: self.input_cost_per_token.value,
            output_cost_per_token: self.output_cost_per_token.value,
            cache_read_input_token_cost: self.cache_read_input_token_cost.value,
            cache_creation_input_token_cost: self.cache_creation_input_token_cost.value,
        }
    }

    /// Whether the context limit is [`DEFAULT_CONTEXT_LIMIT`] for want of any fact.
    pub fn context_assumed(&self) -> bool {
        self.max_input_tokens.source == LimitSource::Default
    }
}

impl ModelInfo {
    /// The table's entry for a model name, found as LiteLLM finds it: the exact name, then the
    /// name without its `provider/` prefix (`openai/gpt-4o` → `gpt-4o`), then its last segment
    /// (`openrouter/anthropic/claude-sonnet-4-5` → `claude-sonnet-4-5`, for gateways LiteLLM's
    /// table does not list); failing all three, the family of a suffixed variant
    /// (`gpt-4o-2099-01-01` → `gpt-4o`) of each in the same order. Case is ignored.
    pub fn lookup(model_name: &str) -> Option<ModelInfo> {
        let rows = table();
        let full = model_name.to_ascii_lowercase();
        let mut names = vec![full.as_str()];
        names.extend(full.split_once('/').map(|(_, rest)| rest));
        names.extend(full.rsplit_once('/').map(|(_, last)| last));
        names.dedup();
        names.iter().find_map(|n| rows.get(*n).copied()).or_else(|| names.iter().find_map(|n| family(rows, n)))
    }

    /// Whether the table lists this exact name (no family match).
    pub fn is_listed(model_name: &str) -> bool {
        table().contains_key(model_name.to_ascii_lowercase().as_str())
    }

    /// The table's entry, or nothing known.
    pub fn builtin(model_name: &str) -> ModelInfo {
        ModelInfo::lookup(model_name).unwrap_or_default()
    }

    /// Every fact about `model_name` with its source: `model_info` (`overrides`) first, then
    /// what the server reported (the context only), then the table, then for the context
    /// [`DEFAULT_CONTEXT_LIMIT`]. `overrides` must have been validated ([`Self::with_overrides`]).
    pub fn resolve(model_name: &str, overrides: &Map<String, Value>, server: Option<ServerLimits>) -> ModelLimits {
        let given = ModelInfo::default().with_overrides(overrides).unwrap_or_default();
        let table = ModelInfo::lookup(model_name).unwrap_or_default();
        let pick = |given: Option<f64>, table: Option<f64>| match given {
            Some(v) => Fact::of(Some(v), LimitSource::ModelInfo),
            None => Fact::of(table, LimitSource::Table),
        };
        let max_input_tokens = match (given.max_input_tokens, server, table.max_input_tokens) {
            (Some(v), _, _) => Fact::of(Some(v), LimitSource::ModelInfo),
            (None, Some(s), _) => Fact { value: Some(s.context), source: LimitSource::Server, via: Some(s.via) },
            (None, None, Some(v)) => Fact::of(Some(v), LimitSource::Table),
            (None, None, None) => Fact::of(Some(DEFAULT_CONTEXT_LIMIT), LimitSource::Default),
        };
        let max_output_tokens = match given.max_output_tokens {
            Some(v) => Fact::of(Some(v), LimitSource::ModelInfo),
            None => Fact::of(table.max_output_tokens, LimitSource::Table),
        };
        ModelLimits {
            max_input_tokens,
            max_output_tokens,
            input_cost_per_token: pick(given.input_cost_per_token, table.input_cost_per_token),
            output_cost_per_token: pick(given.output_cost_per_token, table.output_cost_per_token),
            cache_read_input_token_cost: pick(given.cache_read_input_token_cost, table.cache_read_input_token_cost),
            cache_creation_input_token_cost: pick(
                given.cache_creation_input_token_cost,
                table.cache_creation_input_token_cost,
            ),
        }
    }

    /// Whether `overrides` settle the context size, so the server need not be asked.
    pub fn overrides_set_context(overrides: &Map<String, Value>) -> bool {
        overrides.contains_key("max_input_tokens") || overrides.contains_key("max_tokens")
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
                "cache_creation_input_token_cost" => self.cache_creation_input_token_cost = Some(float(key, value)?),
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
        self.cost_with_cache_writes(prompt_tokens, completion_tokens, cache_tokens, 0)
    }

    /// Cost of one call whose prompt (`prompt_tokens`, every kind counted) holds `cache_tokens`
    /// read from the provider's cache and `cache_writes` written to it, each at its own price
    /// (LiteLLM's: a cache write costs more than plain input for Anthropic's models).
    pub fn cost_with_cache_writes(
        &self,
        prompt_tokens: u64,
        completion_tokens: u64,
        cache_tokens: u64,
        cache_writes: u64,
    ) -> f64 {
        let input = self.input_cost_per_token.unwrap_or(0.0);
        let cached = self.cache_read_input_token_cost.unwrap_or(input);
        let written = self.cache_creation_input_token_cost.unwrap_or(input);
        let output = self.output_cost_per_token.unwrap_or(0.0);
        prompt_tokens.saturating_sub(cache_tokens).saturating_sub(cache_writes) as f64 * input
            + cache_tokens as f64 * cached
            + cache_writes as f64 * written
            + completion_tokens as f64 * output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn none() -> Map<String, Value> {
        Map::new()
    }

    #[test]
    fn gpt_4o_matches_the_reference_goldens() {
        // 682 prompt + 100 completion tokens cost 0.002705 in the reference's golden trajectory.
        let info = ModelInfo::builtin("openai/gpt-4o");
        assert!((info.cost(682, 100, 0) - 0.002705).abs() < 1e-12);
        assert_eq!(info.context_limit(), 128_000);
        assert_eq!(info.max_output_tokens, Some(16_384));
        assert!(ModelInfo::builtin("gpt-4o-mini").input_cost_per_token < info.input_cost_per_token);
        assert_eq!(ModelInfo::builtin("gpt-4o-2024-08-06"), info);
    }

    #[test]
    fn every_row_of_the_generated_table_parses() {
        let rows = TABLE_TSV.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count();
        assert!(rows > 1000, "the table has {rows} rows");
        // Keys differing only in case would shadow each other.
        assert_eq!(table().len(), rows, "a row did not parse, or two names differ only in case");
        for line in TABLE_TSV.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split('\t').count(), 7, "{line}");
        }
        // Cache writes have their own price where LiteLLM states one (Anthropic's models).
        let sonnet = ModelInfo::builtin("anthropic/claude-sonnet-4-5");
        assert_eq!(sonnet.cache_creation_input_token_cost, Some(3.75e-6));
        let cost = sonnet.cost_with_cache_writes(1_000, 0, 0, 1_000);
        assert!((cost - 3.75e-3).abs() < 1e-12, "{cost}");
    }

    #[test]
    fn lookups_resolve_names_as_litellm_does() {
        // The exact key, provider prefix and all.
        let llama = ModelInfo::lookup("ollama/llama3").unwrap();
        assert_eq!((llama.max_input_tokens, llama.input_cost_per_token), (Some(8192), Some(0.0)));
        // Without the provider prefix.
        let sonnet = ModelInfo::lookup("anthropic/claude-sonnet-4-5").unwrap();
        assert_eq!((sonnet.max_input_tokens, sonnet.max_output_tokens), (Some(200_000), Some(64_000)));
        assert_eq!(ModelInfo::lookup("Anthropic/Claude-Sonnet-4-5"), Some(sonnet), "case is ignored");
        // A gateway's name for it: the last segment.
        assert_eq!(ModelInfo::lookup("openrouter/anthropic/claude-sonnet-4-5"), Some(sonnet));
        // A dated variant the table does not list is its family.
        assert_eq!(ModelInfo::lookup("openai/gpt-4o-2099-01-01"), ModelInfo::lookup("gpt-4o"));
        assert_eq!(ModelInfo::lookup("gpt-4o-mini-2099-01-01"), ModelInfo::lookup("gpt-4o-mini"));
        // Names nobody lists.
        assert_eq!(ModelInfo::lookup("hosted_vllm/my-model"), None);
        assert_eq!(ModelInfo::lookup("openrouter/acme/unheard-of"), None);
    }

    #[test]
    fn unknown_models_get_the_documented_default_and_no_price() {
        let limits = ModelInfo::resolve("hosted_vllm/my-model", &none(), None);
        assert!(limits.context_assumed());
        let info = limits.info();
        assert_eq!(info.context_limit(), DEFAULT_CONTEXT_LIMIT);
        assert_eq!(DEFAULT_CONTEXT_LIMIT, 32_768);
        assert_eq!(info.max_output_tokens, None);
        assert_eq!(limits.max_output_tokens.source, LimitSource::Unknown);
        assert_eq!(info.cost(10, 10, 0), 0.0);
        assert_eq!(ModelInfo::default().context_limit(), DEFAULT_CONTEXT_LIMIT);
    }

    #[test]
    fn precedence_is_model_info_then_server_then_table_then_default() {
        let server = Some(ServerLimits { context: 2048, via: ServerKind::OpenAiModels });
        let kwarg = json!({"max_input_tokens": 7000});
        let kwarg = kwarg.as_object().unwrap();

        // model_info beats the server, which beats the table.
        let limits = ModelInfo::resolve("openai/gpt-4o", kwarg, server);
        assert_eq!(
            (limits.max_input_tokens.value, limits.max_input_tokens.source),
            (Some(7000), LimitSource::ModelInfo)
        );
        let limits = ModelInfo::resolve("openai/gpt-4o", &none(), server);
        assert_eq!(
            limits.max_input_tokens,
            Fact { value: Some(2048), source: LimitSource::Server, via: server.map(|s| s.via) }
        );
        // The server tells only the context: the rest still comes from the table.
        assert_eq!(
            (limits.max_output_tokens.value, limits.max_output_tokens.source),
            (Some(16_384), LimitSource::Table)
        );
        assert_eq!(limits.input_cost_per_token.source, LimitSource::Table);
        let limits = ModelInfo::resolve("openai/gpt-4o", &none(), None);
        assert_eq!(
            (limits.max_input_tokens.value, limits.max_input_tokens.source),
            (Some(128_000), LimitSource::Table)
        );
        assert!(!limits.context_assumed());
        // An unknown model with a server that knows it is no assumption either.
        let limits = ModelInfo::resolve("hosted_vllm/my-model", &none(), server);
        assert_eq!(limits.info().context_limit(), 2048);
        assert!(!limits.context_assumed());
        // max_tokens stands for the context when max_input_tokens is absent, as in LiteLLM.
        let legacy = json!({"max_tokens": 4000, "input_cost_per_token": 1e-6});
        let limits = ModelInfo::resolve("x", legacy.as_object().unwrap(), server);
        assert_eq!(limits.max_input_tokens.value, Some(4000));
        assert_eq!(limits.input_cost_per_token, Fact { value: Some(1e-6), source: LimitSource::ModelInfo, via: None });
        assert!(ModelInfo::overrides_set_context(legacy.as_object().unwrap()));
        assert!(!ModelInfo::overrides_set_context(json!({"input_cost_per_token": 1e-6}).as_object().unwrap()));
    }

    #[test]
    fn the_record_has_a_value_and_a_source_per_fact() {
        let server = Some(ServerLimits { context: 2048, via: ServerKind::LlamaCppProps });
        let record = serde_json::to_value(ModelInfo::resolve("hosted_vllm/my-model", &none(), server)).unwrap();
        assert_eq!(record["max_input_tokens"], json!({"value": 2048, "source": "server", "via": "llama_cpp_props"}));
        assert_eq!(record["max_output_tokens"], json!({"value": null, "source": "unknown"}));
        let back: ModelLimits = serde_json::from_value(record).unwrap();
        assert_eq!(back.max_input_tokens.value, Some(2048));
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
