//! The options of the Terminus 2 agent, read from an agent's `kwargs` with the reference's names
//! and defaults.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};
use terminus_core::models::{ModelInfo, ModelLimits, ServerLimits};
use terminus_core::template::{PromptTemplate, TemplateError};
use terminus_core::texts::{TextName, Texts, TextsError};

/// Why the kwargs cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KwargError {
    /// A kwarg's value is not acceptable.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// `prompt_template` names a file that cannot be read or is not a usable template.
    #[error("`{file}`: {problem}")]
    PromptTemplate { file: PathBuf, problem: TemplateProblem },
    /// `texts` names a directory that cannot be read, or holds a file that is not one of the
    /// texts or not a usable template.
    #[error(transparent)]
    Texts(#[from] TextsError),
}

/// What is wrong with a `prompt_template` file.
#[derive(Debug, thiserror::Error)]
pub enum TemplateProblem {
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    #[error(transparent)]
    Invalid(#[from] TemplateError),
}

impl KwargError {
    /// The kwarg at fault, e.g. `max_turns` or `model_info.max_input_tokens`.
    pub fn key(&self) -> &str {
        match self {
            KwargError::Invalid { key, .. } => key,
            KwargError::PromptTemplate { .. } => "prompt_template",
            KwargError::Texts(_) => "texts",
        }
    }
}

impl From<(String, String)> for KwargError {
    fn from((key, message): (String, String)) -> KwargError {
        KwargError::Invalid { key, message }
    }
}

/// Terminus 2 settings after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Terminus2Options {
    /// Episode cap: `max_turns`, else `max_episodes`, else `episodes`, else effectively none.
    pub max_turns: u64,
    /// Sent only when the job sets it (`temperature: null` is unset), as the reference's
    /// LiteLLM adds it only when it is not None: the backend's default applies otherwise.
    pub temperature: Option<f64>,
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
    /// The reference's LLM constructor kwargs (`llm_kwargs`): sent with every request under
    /// `llm_call_kwargs`, and recorded in the trajectory's `agent.extra.llm_kwargs`.
    pub llm_kwargs: Map<String, Value>,
    /// `prompt_template`: a file whose text, with `{instruction}` and `{terminal_state}` filled
    /// in (Python `str.format` style), is the first prompt instead of our built-in one.
    pub prompt_template: Option<Arc<PromptTemplate>>,
    /// Every text the model is shown: ours, the files of the `texts` directory over them, and
    /// `prompt_template` over the first prompt.
    pub texts: Arc<Texts>,
    pub session_id: Option<String>,
    /// `session_id_headers`: HTTP headers every request carries with the trajectory's session
    /// id (the user's, else the trial's), as the reference's `llm_call_kwargs.extra_headers`.
    pub session_id_headers: Vec<String>,
    /// Limits and prices given in `model_info`: they win over every other source.
    pub model_info_overrides: Map<String, Value>,
    /// What the model server reported at the job's start (not a kwarg: the orchestrator asks
    /// the server once per job and fills this in before any trial starts).
    pub server_limits: Option<ServerLimits>,
    /// `trajectory_config.raw_content`: record replies verbatim, without tool calls.
    pub raw_content: bool,
    /// `trajectory_config.linear_history`: split the trajectory at each summarization.
    pub linear_history: bool,
    /// `trajectory_config.schema_version`: the ATIF version written (v1.8, as Harbor 0.26;
    /// `ATIF-v1.6` for tools that read no newer version).
    pub atif: terminus_core::atif::AtifVersion,
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
    /// The most model calls the agent makes, summarization calls included (`max_llm_calls`;
    /// by default [`default_max_llm_calls`] of `max_turns`).
    pub max_llm_calls: u64,
    /// End a command's wait as soon as the shell is idle again (prompt back, pane stable)
    /// instead of always waiting the full duration. Off by default, as in the reference.
    pub early_return: bool,
    /// The protocol, when the agent's `model_api_format` names one; else the model name's
    /// `provider/` prefix decides.
    pub api_format: Option<ModelApiFormat>,
    /// `model_view: reference`: wherever what the model is shown differs from the reference's
    /// (docs/DIFFERENCES.md), the reference's is shown: its observation (with its history limit
    /// and trailing blank rows), its pane size default, its key handling, its output limiting,
    /// its parser's scanner and its summarization gate. `ours` (the default) keeps our repairs.
    pub reference_view: bool,
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

/// The model name of the offline model that types a task's solution (it calls no server and
/// costs nothing).
pub const ORACLE_MODEL: &str = "oracle";

/// Whether `name` can be an environment variable's name.
pub(crate) fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Terminus2Options {
    /// The model's limits and prices for `model_name`, each with its source: `model_info`,
    /// then the server's report, then the table, then the default context.
    pub fn model_limits(&self, model_name: &str) -> ModelLimits {
        // The overrides were validated when the options were read.
        ModelInfo::resolve(model_name, &self.model_info_overrides, self.server_limits)
    }

    /// The model's limits and prices for `model_name` (see [`Self::model_limits`]).
    pub fn model_info(&self, model_name: &str) -> ModelInfo {
        self.model_limits(model_name).info()
    }

    /// Whether the model server should be asked for the context size: only when `model_info`
    /// does not settle it.
    pub fn wants_server_limits(&self) -> bool {
        !ModelInfo::overrides_set_context(&self.model_info_overrides)
    }
}

/// The default of `max_llm_calls`: four calls an episode (a reply, a re-asked truncated one,
/// summarization's share) plus 20 when `max_turns` is given; else 4,000 (Terminus 2's median
/// on Terminal-Bench is 26 episodes, so this only stops a run that makes no progress).
pub fn default_max_llm_calls(max_turns: Option<u64>) -> u64 {
    match max_turns {
        Some(turns) => turns.saturating_mul(4).saturating_add(20),
        None => 4_000,
    }
}

impl Default for Terminus2Options {
    fn default() -> Self {
        Terminus2Options {
            max_turns: 1_000_000,
            temperature: None,
            parser_name: "json".to_string(),
            api_base: None,
            // The agent stage of Terminus 2 sizes the pane 200x50 when the kwargs omit it (the
            // terminal session's own constructor defaults, 160x40, are never reached).
            pane_width: 200,
            pane_height: 50,
            enable_summarize: true,
            proactive_summarization_threshold: 8000,
            record_terminal_session: true,
            llm_call_kwargs: Map::new(),
            llm_kwargs: Map::new(),
            prompt_template: None,
            texts: Texts::ours(),
            session_id: None,
            session_id_headers: Vec::new(),
            model_info_overrides: Map::new(),
            server_limits: None,
            raw_content: false,
            linear_history: false,
            atif: terminus_core::atif::AtifVersion::default(),
            interleaved_thinking: false,
            store_all_messages: false,
            api_key_env: None,
            reasoning_effort: None,
            max_thinking_tokens: None,
            collect_rollout_details: false,
            max_cost_usd: None,
            max_llm_calls: default_max_llm_calls(None),
            early_return: false,
            reference_view: false,
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
    "llm_kwargs",
    "prompt_template",
    "texts",
    "session_id",
    "session_id_headers",
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
    "max_llm_calls",
    "early_return",
    "model_view",
];

/// The values the reference accepts for `reasoning_effort`.
const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh", "max", "default"];

impl Terminus2Options {
    /// Reads the options. `Err((key, message))` names the offending kwarg; `warnings` collects
    /// the names of kwargs we do not know.
    pub fn from_kwargs(
        kwargs: &Map<String, Value>,
        warnings: &mut Vec<String>,
    ) -> Result<Terminus2Options, KwargError> {
        let mut opts = Terminus2Options::default();
        for key in kwargs.keys() {
            if !KNOWN.contains(&key.as_str()) {
                warnings.push(format!("kwargs.{key}: unknown Terminus 2 option, ignored"));
            }
        }
        read_limits(kwargs, &mut opts)?;
        read_settings(kwargs, &mut opts)?;
        read_texts(kwargs, &mut opts)?;
        read_trajectory_config(kwargs, &mut opts, warnings)?;
        read_model_settings(kwargs, &mut opts)?;
        Ok(opts)
    }
}
/// The loop's limits: its turns (under any of their three names) and its model calls.
fn read_limits(kwargs: &Map<String, Value>, opts: &mut Terminus2Options) -> Result<(), KwargError> {
    let mut turns_given = None;
    for key in ["episodes", "max_episodes", "max_turns"] {
        if let Some(value) = kwargs.get(key).filter(|v| !v.is_null()) {
            opts.max_turns = positive_int(key, value)?;
            turns_given = Some(opts.max_turns);
        }
    }
    opts.max_llm_calls = match kwargs.get("max_llm_calls").filter(|v| !v.is_null()) {
        Some(value) => positive_int("max_llm_calls", value)?,
        None => default_max_llm_calls(turns_given),
    };
    Ok(())
}

/// The sampling, parser, endpoint, pane, summarization, recording and template options.
fn read_settings(kwargs: &Map<String, Value>, opts: &mut Terminus2Options) -> Result<(), KwargError> {
    if let Some(value) = kwargs.get("temperature").filter(|v| !v.is_null()) {
        let t = value.as_f64().filter(|t| t.is_finite() && *t >= 0.0);
        opts.temperature = Some(t.ok_or_else(|| {
            ("temperature".to_string(), "must be a non-negative number, or null to send none".to_string())
        })?);
    }
    if let Some(value) = kwargs.get("parser_name") {
        let name = value.as_str().unwrap_or_default();
        match name {
            "json" | "xml" => {}
            other => {
                let message = format!("unknown parser_name: {other}. Use 'json' or 'xml'.");
                return Err(("parser_name".to_string(), message).into());
            }
        }
        opts.parser_name = name.to_string();
    }
    if let Some(value) = kwargs.get("api_base").filter(|v| !v.is_null()) {
        opts.api_base =
            Some(value.as_str().ok_or_else(|| ("api_base".to_string(), "must be a string".to_string()))?.to_string());
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
    if let Some(value) = kwargs.get("llm_kwargs").filter(|v| !v.is_null()) {
        opts.llm_kwargs =
            value.as_object().cloned().ok_or_else(|| ("llm_kwargs".to_string(), "must be a mapping".to_string()))?;
    }
    if let Some(value) = kwargs.get("prompt_template").filter(|v| !v.is_null()) {
        let file = value
            .as_str()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ("prompt_template".to_string(), "must be the path of a template file".to_string()))?;
        opts.prompt_template = Some(Arc::new(read_template(PathBuf::from(file))?));
    }
    Ok(())
}

/// The texts the agent speaks with: ours, a directory of them, with a prompt template over them.
fn read_texts(kwargs: &Map<String, Value>, opts: &mut Terminus2Options) -> Result<(), KwargError> {
    let mut texts = match kwargs.get("texts").filter(|v| !v.is_null()) {
        Some(value) => {
            let dir = value
                .as_str()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| ("texts".to_string(), "must be the path of a directory of texts".to_string()))?;
            Texts::load(std::path::Path::new(dir))?
        }
        None => (*Texts::ours()).clone(),
    };
    if let Some(template) = &opts.prompt_template {
        let name = if opts.parser_name == "xml" { TextName::PromptXml } else { TextName::PromptJson };
        texts = texts.with(name, (**template).clone());
    }
    opts.texts = Arc::new(texts);
    Ok(())
}

/// `trajectory_config`: what the trajectory keeps and its schema version; unknown keys are warned about.
fn read_trajectory_config(
    kwargs: &Map<String, Value>,
    opts: &mut Terminus2Options,
    warnings: &mut Vec<String>,
) -> Result<(), KwargError> {
    if let Some(value) = kwargs.get("trajectory_config").filter(|v| !v.is_null()) {
        let map =
            value.as_object().ok_or_else(|| ("trajectory_config".to_string(), "must be a mapping".to_string()))?;
        for (key, value) in map {
            let key_path = format!("trajectory_config.{key}");
            match key.as_str() {
                "raw_content" => opts.raw_content = boolean(&key_path, value)?,
                "linear_history" => opts.linear_history = boolean(&key_path, value)?,
                "schema_version" => {
                    let versions: Vec<&str> =
                        terminus_core::atif::AtifVersion::ALL.iter().map(|v| v.as_str()).collect();
                    opts.atif = value
                        .as_str()
                        .and_then(terminus_core::atif::AtifVersion::parse)
                        .ok_or_else(|| (key_path.clone(), format!("must be one of {}", versions.join(", "))))?;
                }
                _ => warnings.push(format!("kwargs.{key_path}: unknown option, ignored")),
            }
        }
    }
    Ok(())
}

/// The model's limits and prices, its key's variable, reasoning, budget, early return, view and session.
fn read_model_settings(kwargs: &Map<String, Value>, opts: &mut Terminus2Options) -> Result<(), KwargError> {
    if let Some(value) = kwargs.get("model_info").filter(|v| !v.is_null()) {
        let map = value.as_object().ok_or_else(|| ("model_info".to_string(), "must be a mapping".to_string()))?;
        ModelInfo::default().with_overrides(map).map_err(|(key, message)| (format!("model_info.{key}"), message))?;
        opts.model_info_overrides = map.clone();
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
    if let Some(value) = kwargs.get("model_view").filter(|v| !v.is_null()) {
        opts.reference_view = match value.as_str() {
            Some("reference") => true,
            Some("ours") => false,
            _ => return Err(("model_view".to_string(), "must be `ours` or `reference`".to_string()).into()),
        };
        // The reference's pane when the kwargs do not size it.
        if opts.reference_view {
            if !kwargs.contains_key("tmux_pane_width") {
                opts.pane_width = 160;
            }
            if !kwargs.contains_key("tmux_pane_height") {
                opts.pane_height = 40;
            }
        }
    }
    if let Some(value) = kwargs.get("session_id").filter(|v| !v.is_null()) {
        opts.session_id = Some(value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string()));
    }
    if let Some(value) = kwargs.get("session_id_headers").filter(|v| !v.is_null()) {
        opts.session_id_headers = header_names(value)?;
    }
    if let Some(headers) = opts.llm_call_kwargs.get("extra_headers").filter(|v| !v.is_null())
        && !headers.is_object()
    {
        return Err(("llm_call_kwargs.extra_headers".to_string(), "must be a mapping".to_string()).into());
    }
    Ok(())
}

/// A list of HTTP header names (RFC 9110 tokens), as the reference checks `session_id_headers`.
fn header_names(value: &Value) -> Result<Vec<String>, KwargError> {
    let error = |problem: String| KwargError::from(("session_id_headers".to_string(), problem));
    let list = value.as_array().ok_or_else(|| error("must be a list of HTTP header names".into()))?;
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    list.iter()
        .map(|name| match name.as_str() {
            Some(name) if !name.is_empty() && name.chars().all(token) => Ok(name.to_string()),
            _ => Err(error(format!("{name} is not a valid HTTP header name"))),
        })
        .collect()
}

/// Reads and checks a `prompt_template` file (a relative path is taken from the current
/// directory, as the other paths of a job are).
fn read_template(file: PathBuf) -> Result<PromptTemplate, KwargError> {
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) => return Err(KwargError::PromptTemplate { file, problem: TemplateProblem::Read(e) }),
    };
    PromptTemplate::parse(&text).map_err(|e| KwargError::PromptTemplate { file, problem: e.into() })
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

    fn parse(value: Value) -> Result<Terminus2Options, KwargError> {
        Terminus2Options::from_kwargs(value.as_object().unwrap(), &mut Vec::new())
    }

    #[test]
    fn defaults_match_the_reference() {
        let opts = parse(json!({})).unwrap();
        assert_eq!(opts.max_turns, 1_000_000);
        assert_eq!(opts.temperature, None, "no temperature unless the job sets one");
        assert_eq!((opts.pane_width, opts.pane_height), (200, 50), "the pane the reference opens");
        assert_eq!(opts.proactive_summarization_threshold, 8000);
    }

    #[test]
    fn session_id_headers_are_header_names_and_extra_headers_a_mapping() {
        let opts = parse(json!({"session_id_headers": ["Modal-Session-Id", "x_trace"]})).unwrap();
        assert_eq!(opts.session_id_headers, ["Modal-Session-Id", "x_trace"]);
        for bad in [json!(["no spaces"]), json!("X-One"), json!([""]), json!([7])] {
            let error = parse(json!({"session_id_headers": bad})).unwrap_err().to_string();
            assert!(error.contains("session_id_headers"), "{error}");
        }
        let error = parse(json!({"llm_call_kwargs": {"extra_headers": ["X"]}})).unwrap_err().to_string();
        assert!(error.contains("llm_call_kwargs.extra_headers"), "{error}");
        assert!(parse(json!({"temperature": null})).unwrap().temperature.is_none());
    }

    #[test]
    fn max_turns_takes_precedence_over_episodes() {
        assert_eq!(parse(json!({"episodes": 3, "max_turns": 5})).unwrap().max_turns, 5);
        assert_eq!(parse(json!({"episodes": 3})).unwrap().max_turns, 3);
    }

    #[test]
    fn pane_sizes_are_validated() {
        assert_eq!(parse(json!({"tmux_pane_width": "120"})).unwrap().pane_width, 120);
        assert_eq!(parse(json!({"tmux_pane_width": 0})).unwrap_err().key(), "tmux_pane_width");
        assert!(parse(json!({"tmux_pane_height": "tall"})).unwrap_err().to_string().contains("valid integers"));
        assert!(parse(json!({"tmux_pane_height": -3})).unwrap_err().to_string().contains("positive"));
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
        assert_eq!(opts.atif, terminus_core::atif::AtifVersion::V1_8, "Harbor 0.26's default");
        let old = parse(json!({"trajectory_config": {"schema_version": "ATIF-v1.6"}})).unwrap();
        assert_eq!(old.atif, terminus_core::atif::AtifVersion::V1_6);
        let bad = parse(json!({"trajectory_config": {"schema_version": "ATIF-v1.5"}})).unwrap_err();
        assert_eq!(bad.key(), "trajectory_config.schema_version");
        assert_eq!(opts.model_info("openai/gpt-4o").context_limit(), 7000);
        assert!(!opts.wants_server_limits(), "model_info settles the context");
        assert!(parse(json!({})).unwrap().wants_server_limits());
        assert_eq!(
            parse(json!({"model_info": {"max_input_tokens": -1}})).unwrap_err().key(),
            "model_info.max_input_tokens"
        );
        assert_eq!(parse(json!({"parser_name": "yaml"})).unwrap_err().key(), "parser_name");
    }

    #[test]
    fn provider_options() {
        let opts = parse(json!({"api_key_env": "MY_KEY", "reasoning_effort": "high", "max_thinking_tokens": 2048, "collect_rollout_details": true, "max_cost_usd": 0.5})).unwrap();
        assert_eq!(opts.api_key_env.as_deref(), Some("MY_KEY"));
        assert_eq!(opts.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(opts.max_thinking_tokens, Some(2048));
        assert!(opts.collect_rollout_details);
        assert_eq!(opts.max_cost_usd, Some(0.5));
        assert_eq!(parse(json!({"reasoning_effort": "extreme"})).unwrap_err().key(), "reasoning_effort");
        assert_eq!(parse(json!({"max_cost_usd": -1})).unwrap_err().key(), "max_cost_usd");
        assert_eq!(parse(json!({"api_key_env": "not a name"})).unwrap_err().key(), "api_key_env");
    }

    #[test]
    fn llm_kwargs_are_a_mapping() {
        let opts = parse(json!({"llm_kwargs": {"top_p": 0.9}})).unwrap();
        assert_eq!(opts.llm_kwargs["top_p"], 0.9);
        assert_eq!(parse(json!({"llm_kwargs": [1]})).unwrap_err().key(), "llm_kwargs");
    }

    #[test]
    fn a_prompt_template_is_read_and_checked_when_the_job_loads() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.txt");
        std::fs::write(&good, "Do: {instruction}\n{{literal}}\n{terminal_state}\n").unwrap();
        let opts = parse(json!({"prompt_template": good})).unwrap();
        assert_eq!(opts.prompt_template.unwrap().render("x", "$"), "Do: x\n{literal}\n$\n");

        let missing = dir.path().join("missing.txt");
        let err = parse(json!({"prompt_template": missing})).unwrap_err();
        assert!(
            matches!(&err, KwargError::PromptTemplate { file, problem: TemplateProblem::Read(_) } if *file == missing)
        );
        assert_eq!(err.key(), "prompt_template");
        assert!(err.to_string().contains("missing.txt"), "{err}");

        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, "Do: {task}").unwrap();
        let err = parse(json!({"prompt_template": bad})).unwrap_err();
        let KwargError::PromptTemplate { problem: TemplateProblem::Invalid(e), .. } = &err else { panic!("{err:?}") };
        assert_eq!(
            *e,
            TemplateError::UnknownPlaceholder {
                name: "task".into(),
                at: 4,
                known: "{instruction}, {terminal_state}".into()
            }
        );
        assert!(err.to_string().contains("bad.txt") && err.to_string().contains("{task}"), "{err}");
        assert_eq!(parse(json!({"prompt_template": 3})).unwrap_err().key(), "prompt_template");
    }

    #[test]
    fn unknown_kwargs_are_named_in_warnings() {
        let mut warnings = Vec::new();
        Terminus2Options::from_kwargs(json!({"nope": 1}).as_object().unwrap(), &mut warnings).unwrap();
        assert_eq!(warnings, vec!["kwargs.nope: unknown Terminus 2 option, ignored".to_string()]);
    }

    #[test]
    fn max_llm_calls_follows_max_turns_unless_given() {
        assert_eq!(parse(json!({})).unwrap().max_llm_calls, 4_000);
        assert_eq!(parse(json!({"max_turns": 50})).unwrap().max_llm_calls, 220);
        assert_eq!(parse(json!({"max_turns": 50, "max_llm_calls": 7})).unwrap().max_llm_calls, 7);
        assert_eq!(parse(json!({"max_llm_calls": 0})).unwrap_err().key(), "max_llm_calls");
    }

    #[test]
    fn model_view_reference_takes_the_references_pane_unless_sized() {
        let opts = parse(json!({"model_view": "reference"})).unwrap();
        assert!(opts.reference_view);
        assert_eq!((opts.pane_width, opts.pane_height), (160, 40));
        let sized = parse(json!({"model_view": "reference", "tmux_pane_width": 100})).unwrap();
        assert_eq!((sized.pane_width, sized.pane_height), (100, 40));
        let ours = parse(json!({})).unwrap();
        assert!(!ours.reference_view);
        assert_eq!((ours.pane_width, ours.pane_height), (200, 50));
        assert_eq!(parse(json!({"model_view": "harbor"})).unwrap_err().key(), "model_view");
    }
}
