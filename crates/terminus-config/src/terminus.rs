//! The options of the Terminus 2 agent, read from an agent's `kwargs` with the reference's names
//! and defaults (terminus2-reference §1).

use serde_json::{Map, Value};
use terminus_core::models::ModelInfo;

/// Terminus 2 settings after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Terminus2Options {
    /// Episode cap: `max_turns`, else `max_episodes`, else `episodes`, else effectively none.
    pub max_turns: u64,
    pub temperature: f64,
    /// `json` or `xml`: the reply format the prompt asks for and the parser expects.
    pub parser_name: String,
    pub api_base: Option<String>,
    pub pane_width: u32,
    pub pane_height: u32,
    pub enable_summarize: bool,
    pub proactive_summarization_threshold: u64,
    pub record_terminal_session: bool,
    /// Extra fields sent with every request (`llm_call_kwargs`).
    pub llm_call_kwargs: Map<String, Value>,
    pub session_id: Option<String>,
    /// Limits and prices: the built-in entry for the model with `model_info` applied.
    pub model_info_overrides: Map<String, Value>,
    /// `trajectory_config.raw_content`: record replies verbatim, without tool calls.
    pub raw_content: bool,
    /// `trajectory_config.linear_history`: split the trajectory at each summarization.
    pub linear_history: bool,
    /// Carry the model's reasoning text in the history it is sent back.
    pub interleaved_thinking: bool,
    /// Put the whole chat in `agent_result.metadata.all_messages`.
    pub store_all_messages: bool,
    /// The variable holding the API key (default: by provider, e.g. `OPENAI_API_KEY`).
    pub api_key_env: Option<String>,
    /// Passed to the provider as is.
    pub reasoning_effort: Option<String>,
    /// Extended thinking budget for Anthropic models.
    pub max_thinking_tokens: Option<u64>,
    /// Keep token ids and log-probabilities where the provider returns them.
    pub collect_rollout_details: bool,
    /// Stop the agent (cleanly, then verify) once the trial has cost this much.
    pub max_cost_usd: Option<f64>,
    /// End a command's wait as soon as the shell is idle again (prompt back, pane stable)
    /// instead of always waiting the full duration. Off by default, as in the reference.
    pub early_return: bool,
    /// The protocol, when the agent's `model_api_format` names one; else the model name's
    /// `provider/` prefix decides.
    pub api_format: Option<ModelApiFormat>,
}

/// Harbor 0.26's `model_api_format` values that terminus speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelApiFormat {
    /// `openai_chat_completions`: OpenAI chat completions (vLLM, OpenRouter, proxies…).
    OpenAiChatCompletions,
    /// `anthropic_messages`: the Anthropic Messages API.
    AnthropicMessages,
}

impl ModelApiFormat {
    /// Harbor's formats that no provider of terminus speaks.
    const UNSUPPORTED: [&str; 3] = ["openai_responses", "google_generate_content", "bedrock_converse"];

    /// Reads Harbor's name; Err is the message for an error on the key.
    pub fn from_harbor_name(name: &str) -> Result<ModelApiFormat, String> {
        match name {
            "openai_chat_completions" => Ok(ModelApiFormat::OpenAiChatCompletions),
            "anthropic_messages" => Ok(ModelApiFormat::AnthropicMessages),
            other if Self::UNSUPPORTED.contains(&other) => Err(format!(
                "{other:?} is not supported; terminus speaks openai_chat_completions and anthropic_messages"
            )),
            other => Err(format!(
                "unknown format {other:?}; Harbor's are openai_chat_completions, anthropic_messages, {}",
                Self::UNSUPPORTED.join(", ")
            )),
        }
    }
}

/// Whether `name` can be an environment variable's name.
pub(crate) fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Terminus2Options {
    /// The model's limits and prices for `model_name`, with this agent's `model_info` applied.
    pub fn model_info(&self, model_name: &str) -> ModelInfo {
        // Validated when the options were read, so the overrides apply cleanly.
        ModelInfo::builtin(model_name)
            .with_overrides(&self.model_info_overrides)
            .unwrap_or_else(|_| ModelInfo::builtin(model_name))
    }
}

impl Default for Terminus2Options {
    fn default() -> Self {
        Terminus2Options {
            max_turns: 1_000_000,
            temperature: 0.7,
            parser_name: "json".to_string(),
            api_base: None,
            // Seed 004: the agent stage sizes the pane 200x50 when the kwargs omit it (the
            // terminal session's own constructor defaults, 160x40, are never reached).
            pane_width: 200,
            pane_height: 50,
            enable_summarize: true,
            proactive_summarization_threshold: 8000,
            record_terminal_session: true,
            llm_call_kwargs: Map::new(),
            session_id: None,
            model_info_overrides: Map::new(),
            raw_content: false,
            linear_history: false,
            interleaved_thinking: false,
            store_all_messages: false,
            api_key_env: None,
            reasoning_effort: None,
            max_thinking_tokens: None,
            collect_rollout_details: false,
            max_cost_usd: None,
            early_return: false,
            api_format: None,
        }
    }
}

/// Keys of `kwargs` we know. Anything else gets a warning that names it.
const KNOWN: &[&str] = &[
    "max_turns",
    "max_episodes",
    "episodes",
    "temperature",
    "parser_name",
    "api_base",
    "tmux_pane_width",
    "tmux_pane_height",
    "enable_summarize",
    "proactive_summarization_threshold",
    "record_terminal_session",
    "llm_call_kwargs",
    "session_id",
    "suppress_max_turns_warning",
    "model_info",
    "trajectory_config",
    "interleaved_thinking",
    "store_all_messages",
    "api_key_env",
    "reasoning_effort",
    "max_thinking_tokens",
    "collect_rollout_details",
    "max_cost_usd",
    "early_return",
];

/// The values the reference accepts for `reasoning_effort`.
const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max", "default"];

impl Terminus2Options {
    /// Reads the options. `Err((key, message))` names the offending kwarg; `warnings` collects
    /// the names of kwargs we do not know.
    pub fn from_kwargs(
        kwargs: &Map<String, Value>,
        warnings: &mut Vec<String>,
    ) -> Result<Terminus2Options, (String, String)> {
        let mut opts = Terminus2Options::default();
        for key in kwargs.keys() {
            if !KNOWN.contains(&key.as_str()) {
                warnings.push(format!("kwargs.{key}: unknown Terminus 2 option, ignored"));
            }
        }
        for key in ["episodes", "max_episodes", "max_turns"] {
            if let Some(value) = kwargs.get(key).filter(|v| !v.is_null()) {
                opts.max_turns = positive_int(key, value)?;
            }
        }
        if let Some(value) = kwargs.get("temperature") {
            opts.temperature =
                value.as_f64().ok_or_else(|| ("temperature".to_string(), "must be a number".to_string()))?;
        }
        if let Some(value) = kwargs.get("parser_name") {
            let name = value.as_str().unwrap_or_default();
            match name {
                "json" | "xml" => {}
                other => {
                    return Err(("parser_name".into(), format!("unknown parser_name: {other}. Use 'json' or 'xml'.")));
                }
            }
            opts.parser_name = name.to_string();
        }
        if let Some(value) = kwargs.get("api_base").filter(|v| !v.is_null()) {
            opts.api_base = Some(
                value.as_str().ok_or_else(|| ("api_base".to_string(), "must be a string".to_string()))?.to_string(),
            );
        }
        // The reference coerces pane sizes through int() and rejects non-positive values.
        if let Some(value) = kwargs.get("tmux_pane_width") {
            opts.pane_width = pane_size("tmux_pane_width", value)?;
        }
        if let Some(value) = kwargs.get("tmux_pane_height") {
            opts.pane_height = pane_size("tmux_pane_height", value)?;
        }
        if let Some(value) = kwargs.get("enable_summarize") {
            opts.enable_summarize = boolean("enable_summarize", value)?;
        }
        if let Some(value) = kwargs.get("proactive_summarization_threshold") {
            opts.proactive_summarization_threshold = value.as_u64().ok_or_else(|| {
                ("proactive_summarization_threshold".to_string(), "must be a non-negative integer".to_string())
            })?;
        }
        if let Some(value) = kwargs.get("record_terminal_session") {
            opts.record_terminal_session = boolean("record_terminal_session", value)?;
        }
        if let Some(value) = kwargs.get("llm_call_kwargs").filter(|v| !v.is_null()) {
            opts.llm_call_kwargs = value
                .as_object()
                .cloned()
                .ok_or_else(|| ("llm_call_kwargs".to_string(), "must be a mapping".to_string()))?;
        }
        if let Some(value) = kwargs.get("model_info").filter(|v| !v.is_null()) {
            let map = value.as_object().ok_or_else(|| ("model_info".to_string(), "must be a mapping".to_string()))?;
            ModelInfo::default()
                .with_overrides(map)
                .map_err(|(key, message)| (format!("model_info.{key}"), message))?;
            opts.model_info_overrides = map.clone();
        }
        if let Some(value) = kwargs.get("trajectory_config").filter(|v| !v.is_null()) {
            let map =
                value.as_object().ok_or_else(|| ("trajectory_config".to_string(), "must be a mapping".to_string()))?;
            for (key, value) in map {
                let key_path = format!("trajectory_config.{key}");
                match key.as_str() {
                    "raw_content" => opts.raw_content = boolean(&key_path, value)?,
                    "linear_history" => opts.linear_history = boolean(&key_path, value)?,
                    _ => warnings.push(format!("kwargs.{key_path}: unknown option, ignored")),
                }
            }
        }
        if let Some(value) = kwargs.get("interleaved_thinking") {
            opts.interleaved_thinking = boolean("interleaved_thinking", value)?;
        }
        if let Some(value) = kwargs.get("store_all_messages") {
            opts.store_all_messages = boolean("store_all_messages", value)?;
        }
        if let Some(value) = kwargs.get("api_key_env").filter(|v| !v.is_null()) {
            let name = value.as_str().filter(|n| is_variable_name(n));
            opts.api_key_env = Some(
                name.ok_or_else(|| ("api_key_env".to_string(), "must be an environment variable name".to_string()))?
                    .to_string(),
            );
        }
        if let Some(value) = kwargs.get("reasoning_effort").filter(|v| !v.is_null()) {
            let effort = value.as_str().filter(|e| REASONING_EFFORTS.contains(e)).ok_or_else(|| {
                ("reasoning_effort".to_string(), format!("must be one of {}", REASONING_EFFORTS.join(", ")))
            })?;
            opts.reasoning_effort = Some(effort.to_string());
        }
        if let Some(value) = kwargs.get("max_thinking_tokens").filter(|v| !v.is_null()) {
            opts.max_thinking_tokens = Some(positive_int("max_thinking_tokens", value)?);
        }
        if let Some(value) = kwargs.get("collect_rollout_details") {
            opts.collect_rollout_details = boolean("collect_rollout_details", value)?;
        }
        if let Some(value) = kwargs.get("max_cost_usd").filter(|v| !v.is_null()) {
            let cost = value.as_f64().filter(|c| c.is_finite() && *c > 0.0);
            opts.max_cost_usd =
                Some(cost.ok_or_else(|| ("max_cost_usd".to_string(), "must be a positive number".to_string()))?);
        }
        if let Some(value) = kwargs.get("early_return") {
            opts.early_return = boolean("early_return", value)?;
        }
        if let Some(value) = kwargs.get("session_id").filter(|v| !v.is_null()) {
            opts.session_id = Some(value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string()));
        }
        Ok(opts)
    }
}

fn positive_int(key: &str, value: &Value) -> Result<u64, (String, String)> {
    value.as_u64().filter(|n| *n > 0).ok_or_else(|| (key.to_string(), "must be a positive integer".to_string()))
}

fn boolean(key: &str, value: &Value) -> Result<bool, (String, String)> {
    value.as_bool().ok_or_else(|| (key.to_string(), "must be true or false".to_string()))
}

/// Accepts integers and integer-looking strings or floats, like Python's `int()`.
fn pane_size(key: &str, value: &Value) -> Result<u32, (String, String)> {
    let parsed = match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f.trunc() as i64)),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    };
    match parsed {
        None => Err((key.to_string(), "pane_width and pane_height must be valid integers".to_string())),
        Some(n) if n <= 0 || n > u32::MAX as i64 => {
            Err((key.to_string(), "pane_width and pane_height must be positive integers".to_string()))
        }
        Some(n) => Ok(n as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Terminus2Options, (String, String)> {
        Terminus2Options::from_kwargs(value.as_object().unwrap(), &mut Vec::new())
    }

    #[test]
    fn defaults_match_the_reference() {
        let opts = parse(json!({})).unwrap();
        assert_eq!(opts.max_turns, 1_000_000);
        assert_eq!(opts.temperature, 0.7);
        assert_eq!((opts.pane_width, opts.pane_height), (200, 50), "seed 004");
        assert_eq!(opts.proactive_summarization_threshold, 8000);
    }

    #[test]
    fn max_turns_takes_precedence_over_episodes() {
        assert_eq!(parse(json!({"episodes": 3, "max_turns": 5})).unwrap().max_turns, 5);
        assert_eq!(parse(json!({"episodes": 3})).unwrap().max_turns, 3);
    }

    #[test]
    fn pane_sizes_are_validated() {
        assert_eq!(parse(json!({"tmux_pane_width": "120"})).unwrap().pane_width, 120);
        assert_eq!(parse(json!({"tmux_pane_width": 0})).unwrap_err().0, "tmux_pane_width");
        assert!(parse(json!({"tmux_pane_height": "tall"})).unwrap_err().1.contains("valid integers"));
        assert!(parse(json!({"tmux_pane_height": -3})).unwrap_err().1.contains("positive"));
    }

    #[test]
    fn trajectory_and_model_options() {
        let opts = parse(json!({
            "parser_name": "xml",
            "trajectory_config": {"raw_content": true, "linear_history": true},
            "model_info": {"max_input_tokens": 7000, "max_output_tokens": 4096},
            "interleaved_thinking": true
        }))
        .unwrap();
        assert_eq!(opts.parser_name, "xml");
        assert!(opts.raw_content && opts.linear_history && opts.interleaved_thinking);
        assert_eq!(opts.model_info("openai/gpt-4o").context_limit(), 7000);
        assert_eq!(
            parse(json!({"model_info": {"max_input_tokens": -1}})).unwrap_err().0,
            "model_info.max_input_tokens"
        );
        assert_eq!(parse(json!({"parser_name": "yaml"})).unwrap_err().0, "parser_name");
    }

    #[test]
    fn provider_options() {
        let opts = parse(json!({"api_key_env": "MY_KEY", "reasoning_effort": "high", "max_thinking_tokens": 2048, "collect_rollout_details": true, "max_cost_usd": 0.5})).unwrap();
        assert_eq!(opts.api_key_env.as_deref(), Some("MY_KEY"));
        assert_eq!(opts.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(opts.max_thinking_tokens, Some(2048));
        assert!(opts.collect_rollout_details);
        assert_eq!(opts.max_cost_usd, Some(0.5));
        assert_eq!(parse(json!({"reasoning_effort": "extreme"})).unwrap_err().0, "reasoning_effort");
        assert_eq!(parse(json!({"max_cost_usd": -1})).unwrap_err().0, "max_cost_usd");
        assert_eq!(parse(json!({"api_key_env": "not a name"})).unwrap_err().0, "api_key_env");
    }

    #[test]
    fn unknown_kwargs_are_named_in_warnings() {
        let mut warnings = Vec::new();
        Terminus2Options::from_kwargs(json!({"nope": 1}).as_object().unwrap(), &mut warnings).unwrap();
        assert_eq!(warnings, vec!["kwargs.nope: unknown Terminus 2 option, ignored".to_string()]);
    }
}
