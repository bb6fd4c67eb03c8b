//! Training traces from a job's trajectories, the rows Harbor 0.26's `harbor traces export`
//! builds for a HuggingFace dataset: one row per episode of each trial's main trajectory
//! (its continuation segments followed through `continued_trajectory_ref`, episodes numbered
//! across them), one row per subagent trajectory (`trajectory.<kind>.json`, the whole
//! conversation), each with the run's metadata and the trial's result; optionally a ShareGPT
//! column. Rows keep Harbor's column order, and a table has the columns of its first row, as a
//! dataset built from a list of rows has.
//!
//! Text is made exactly as Harbor's exporter makes it: JSON embedded in a message (tool calls,
//! tool definitions, non-text content) is Python's `json.dumps(…, ensure_ascii=False)`, rewards
//! are Python's `str(float(…))`, and verifier logs are read as Python reads text (universal
//! newlines).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::text::{self, dumps};

/// One exported row: column name to value, in Harbor's column order.
pub type Row = Map<String, Value>;

/// What to export.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Look for trials below the root (else the root must be one).
    pub recursive: bool,
    /// Only each trial's last main episode.
    pub last_episode_only: bool,
    /// Add `conversations_sharegpt`.
    pub sharegpt: bool,
    /// Keep only trials that succeeded (`Some(true)`) or failed (`Some(false)`).
    pub success: Option<bool>,
    /// Export subagent trajectories too (then every row has `trace_source`).
    pub subagents: bool,
    /// Add `instruction`.
    pub instruction: bool,
    /// Add `verifier_output`.
    pub verifier_output: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            recursive: true,
            last_episode_only: false,
            sharegpt: false,
            success: None,
            subagents: true,
            instruction: false,
            verifier_output: false,
        }
    }
}

/// An export: its rows, and what was found and left out.
#[derive(Debug, Default)]
pub struct Export {
    pub rows: Vec<Map<String, Value>>,
    pub n_trials: usize,
    /// Trials left out, and why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Why nothing was exported.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trajectory `{}` holds images or audio: a text export would lose them", .0.display())]
    Multimodal(PathBuf),
}

/// Exports the trials at or below `root`.
pub fn export(root: &Path, options: &ExportOptions) -> Result<Export, TraceError> {
    let trials = trial_dirs(root, options.recursive);
    let mut export = Export { n_trials: trials.len(), ..Export::default() };
    let mut main: Vec<Map<String, Value>> = Vec::new();
    let mut subagents: Vec<(String, Vec<Map<String, Value>>)> = Vec::new();
    for trial in &trials {
        let meta = match run_metadata(trial) {
            Ok(meta) => meta,
            Err(why) => {
                export.skipped.push((trial.clone(), why));
                continue;
            }
        };
        if let Some(wanted) = options.success {
            match trial_is_success(trial) {
                None => {
                    export.skipped.push((trial.clone(), "no result.json, and a filter is set".into()));
                    continue;
                }
                Some(success) if success != wanted => continue,
                Some(_) => {}
            }
        }
        main.extend(main_rows(trial, &meta, options)?);
        if options.subagents {
            for (kind, row) in subagent_rows(trial, &meta, options)? {
                match subagents.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, rows)) => rows.push(row),
                    None => subagents.push((kind, vec![row])),
                }
            }
        }
    }
    let with_sharegpt = |rows: Vec<Map<String, Value>>| {
        let mut rows = as_table(rows);
        if options.sharegpt {
            for row in &mut rows {
                let sharegpt = to_sharegpt(row.get("conversations").unwrap_or(&Value::Null));
                row.insert("conversations_sharegpt".into(), sharegpt);
            }
        }
        rows
    };
    let main = with_sharegpt(main);
    if subagents.is_empty() {
        export.rows = main;
        return Ok(export);
    }
    // Merged into one table, each row saying where it came from.
    let source = |mut rows: Vec<Map<String, Value>>, name: &str| {
        for row in &mut rows {
            row.insert("trace_source".into(), Value::String(name.to_string()));
        }
        rows
    };
    export.rows = source(main, "main");
    for (kind, rows) in subagents {
        export.rows.extend(source(with_sharegpt(rows), &kind));
    }
    Ok(export)
}

/// Rows as a table made from a list has them: the first row's columns, in its order; a missing
/// value is null and a column the first row lacks is dropped.
fn as_table(rows: Vec<Map<String, Value>>) -> Vec<Map<String, Value>> {
    let Some(first) = rows.first() else { return rows };
    let columns: Vec<String> = first.keys().cloned().collect();
    rows.into_iter()
        .map(|mut row| columns.iter().map(|c| (c.clone(), row.remove(c).unwrap_or(Value::Null))).collect())
        .collect()
}

/// The trial directories at or below `root`: a directory with an `agent/` directory. Below the
/// root every directory is looked at (trials inside trials too), in name order.
pub fn trial_dirs(root: &Path, recursive: bool) -> Vec<PathBuf> {
    let is_trial = |dir: &Path| dir.join("agent").exists();
    if is_trial(root) {
        return vec![root.to_path_buf()];
    }
    let mut found = Vec::new();
    if !recursive {
        return found;
    }
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut children: Vec<PathBuf> =
            entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
        children.sort();
        for child in children.iter().rev() {
            pending.push(child.clone());
        }
        if dir != root && is_trial(&dir) {
            found.push(dir);
        }
    }
    found.sort();
    found
}

/// What every row of a trial carries.
#[derive(Clone, Debug)]
struct RunMeta {
    agent_name: String,
    model_name: String,
    model_provider: String,
    start_time: Value,
    run_id: Value,
    task_name: Value,
    trial_name: Value,
}

/// Python's truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The first truthy of `values` (Python's `a or b or …`), else `default`.
fn first_of(values: &[Option<&Value>], default: &str) -> Value {
    values.iter().flatten().find(|v| truthy(v)).map(|v| (*v).clone()).unwrap_or_else(|| json!(default))
}

fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => dumps(other, false),
    }
}

fn read_json(path: &Path) -> Option<Value> {
    std::fs::read(path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// The trial's `result.json`: in it, or up to three directories above.
fn result_json(trial: &Path) -> Option<Value> {
    let mut dir = trial;
    for _ in 0..4 {
        if dir.join("result.json").exists() {
            return read_json(&dir.join("result.json")).filter(Value::is_object);
        }
        dir = dir.parent()?;
    }
    None
}

/// The job's `result.json` (the first above the trial with `stats`).
fn job_result_json(trial: &Path) -> Option<Value> {
    let mut dir = trial.parent()?;
    for _ in 0..6 {
        if let Some(data) = read_json(&dir.join("result.json"))
            && data.get("stats").is_some()
        {
            return Some(data);
        }
        dir = dir.parent()?;
    }
    None
}

fn run_metadata(trial: &Path) -> Result<RunMeta, String> {
    let raw = result_json(trial).ok_or("no result.json")?;
    let empty = Value::Object(Map::new());
    let object = |v: Option<&Value>| v.filter(|v| v.is_object()).cloned().unwrap_or_else(|| empty.clone());
    let config = object(raw.get("config"));
    let agent_cfg = match config.get("agent") {
        Some(agent) if agent.is_object() => agent.clone(),
        _ => config
            .get("agents")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .map_or(empty.clone(), |a| object(Some(a))),
    };
    let agent_info = object(raw.get("agent_info"));
    let model_info = object(agent_info.get("model_info"));
    let agent_name = first_of(
        &[agent_cfg.get("name"), agent_info.get("name"), config.get("agent_name"), raw.get("agent_name")],
        "unknown-agent",
    );
    if agent_name == "unknown-agent" {
        return Err("its result.json names no agent".into());
    }
    Ok(RunMeta {
        agent_name: as_text(&agent_name),
        model_name: as_text(&first_of(
            &[model_info.get("name"), agent_cfg.get("model_name"), agent_info.get("model_name"), config.get("engine")],
            "unknown-model",
        )),
        model_provider: as_text(&first_of(
            &[model_info.get("provider"), agent_cfg.get("provider"), agent_info.get("provider"), config.get("engine")],
            "unknown-provider",
        )),
        start_time: first_of(&[raw.get("started_at"), raw.get("startedAt")], ""),
        run_id: first_of(
            &[
                config.get("job_id"),
                config.get("job_name"),
                raw.get("job_id"),
                raw.get("run_id"),
                raw.get("trial_name"),
            ],
            "unknown-run",
        ),
        task_name: first_of(&[raw.get("task_name"), config.get("task_name")], "unknown-task"),
        trial_name: first_of(&[raw.get("trial_name"), config.get("trial_name")], "unknown-trial"),
    })
}

/// Python's `str(float(value))`, or the value itself when it is no number.
fn reward_text(value: &Value) -> Value {
    let number = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => text::parse_python_float(s),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    };
    match number {
        Some(f) => Value::String(terminus_agent::pyjson::py_float_repr(f)),
        None => value.clone(),
    }
}

/// The trial's result: the exception's name, else its reward as text (the job's `stats` first,
/// then the trial's own `result.json`).
fn trial_result(trial: &Path, trial_name: &str) -> Value {
    let listed = |entries: &Value| entries.as_array().is_some_and(|a| a.iter().any(|e| e == trial_name));
    if let Some(job) = job_result_json(trial)
        && let Some(evals) = job.get("stats").and_then(|s| s.get("evals")).and_then(Value::as_object)
    {
        for eval in evals.values().filter_map(Value::as_object) {
            if let Some(exceptions) = eval.get("exception_stats").and_then(Value::as_object)
                && let Some((name, _)) = exceptions.iter().find(|(_, entries)| listed(entries))
            {
                return Value::String(name.clone());
            }
            let rewards = eval.get("reward_stats").and_then(|r| r.get("reward")).and_then(Value::as_object);
            if let Some((value, _)) = rewards.and_then(|r| r.iter().find(|(_, entries)| listed(entries))) {
                return match reward_text(&Value::String(value.clone())) {
                    Value::String(s) => Value::String(s),
                    other => Value::String(as_text(&other)),
                };
            }
        }
    }
    if let Some(data) = result_json(trial) {
        if let Some(kind) = data.get("exception_info").and_then(|e| e.get("exception_type")).filter(|k| truthy(k)) {
            return Value::String(as_text(kind));
        }
        let reward = data.get("verifier_result").and_then(|v| v.get("rewards")).and_then(|r| r.get("reward"));
        if let Some(reward) = reward.filter(|r| !r.is_null()) {
            return Value::String(as_text(&reward_text(reward)));
        }
    }
    Value::Null
}

/// Whether the trial succeeded (its result a number above 0); None without a result.json.
fn trial_is_success(trial: &Path) -> Option<bool> {
    let name = trial.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match trial_result(trial, &name) {
        Value::String(text) => Some(text::parse_python_float(&text).is_some_and(|f| f > 0.0)),
        _ => {
            let data = result_json(trial)?;
            let reward = data.get("verifier_result").and_then(|v| v.get("reward")).and_then(Value::as_f64);
            Some(reward.is_some_and(|r| r > 0.0))
        }
    }
}

/// The first non-empty text message of the trial's first trajectory file by name (subagent
/// summaries left out), stripped.
fn instruction(trial: &Path) -> Value {
    let agent = trial.join("agent");
    let mut files: Vec<String> = std::fs::read_dir(&agent)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("trajectory") && n.ends_with(".json") && !n.contains(".summarization"))
        .collect();
    files.sort();
    let Some(first) = files.first().and_then(|name| read_json(&agent.join(name))) else { return Value::Null };
    let steps = first.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    steps
        .iter()
        .filter_map(|s| s.get("message").and_then(Value::as_str))
        .map(str::trim)
        .find(|m| !m.is_empty())
        .map_or(Value::Null, |m| Value::String(m.to_string()))
}

/// The verifier's stdout then stderr, read as Python reads text; null when neither exists.
fn verifier_output(trial: &Path) -> Value {
    let mut out = String::new();
    let mut any = false;
    for name in ["test-stdout.txt", "test-stderr.txt"] {
        if let Ok(bytes) = std::fs::read(trial.join("verifier").join(name)) {
            any = true;
            out.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n").replace('\r', "\n"));
        }
    }
    if any { Value::String(out) } else { Value::Null }
}

/// The rows of the trial's main trajectory and its continuations.
fn main_rows(trial: &Path, meta: &RunMeta, options: &ExportOptions) -> Result<Vec<Map<String, Value>>, TraceError> {
    let agent = trial.join("agent");
    let mut files = vec![agent.join("trajectory.json")];
    if !files[0].exists() {
        return Ok(Vec::new());
    }
    while let Some(next) = read_json(files.last().unwrap_or(&files[0]))
        .and_then(|t| t.get("continued_trajectory_ref").filter(|r| truthy(r)).map(as_text))
    {
        let path = agent.join(next);
        if !path.exists() || files.contains(&path) {
            break;
        }
        files.push(path);
    }
    let mut rows = Vec::new();
    for file in &files {
        // Numbered across the files: a file's episode n follows the rows of the files before.
        let offset = rows.len();
        for (n, mut row) in file_episodes(file, meta)? {
            row.insert("episode".into(), Value::String(format!("episode-{}", offset + n)));
            rows.push(row);
        }
    }
    if options.last_episode_only
        && let Some(last) = rows.pop()
    {
        rows = vec![last];
    }
    let result = trial_result(trial, &as_text(&meta.trial_name));
    let instruction = options.instruction.then(|| instruction(trial));
    let verifier = options.verifier_output.then(|| verifier_output(trial));
    for row in &mut rows {
        fill(row, meta, &result, instruction.as_ref(), verifier.as_ref());
    }
    Ok(rows)
}

fn fill(
    row: &mut Map<String, Value>,
    meta: &RunMeta,
    result: &Value,
    instruction: Option<&Value>,
    verifier: Option<&Value>,
) {
    row.insert("task".into(), meta.task_name.clone());
    row.insert("trial_name".into(), meta.trial_name.clone());
    row.insert("result".into(), result.clone());
    if let Some(instruction) = instruction {
        row.insert("instruction".into(), instruction.clone());
    }
    if let Some(verifier) = verifier {
        row.insert("verifier_output".into(), verifier.clone());
    }
}

/// A trajectory file's steps and its agent's name, model and tool definitions; None when it
/// cannot be read.
fn trajectory(file: &Path) -> Result<Option<(Vec<Value>, Value)>, TraceError> {
    let Some(data) = read_json(file) else { return Ok(None) };
    let steps = data.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    if steps.iter().any(has_media) {
        return Err(TraceError::Multimodal(file.to_path_buf()));
    }
    Ok(Some((steps, data.get("agent").cloned().unwrap_or(Value::Null))))
}

fn has_media(step: &Value) -> bool {
    let media = |content: Option<&Value>| {
        content.and_then(Value::as_array).is_some_and(|parts| {
            parts.iter().any(|p| matches!(p.get("type").and_then(Value::as_str), Some("image" | "audio")))
        })
    };
    let results = step.get("observation").and_then(|o| o.get("results")).and_then(Value::as_array);
    media(step.get("message")) || results.is_some_and(|r| r.iter().any(|r| media(r.get("content"))))
}

/// One row per episode of a trajectory file, with its number there: an episode ends with each
/// agent step that is not copied context, and holds every step up to it.
fn file_episodes(file: &Path, meta: &RunMeta) -> Result<Vec<(usize, Row)>, TraceError> {
    let Some((steps, agent)) = trajectory(file)? else { return Ok(Vec::new()) };
    let name = agent.get("name").filter(|v| truthy(v)).map(as_text).unwrap_or_else(|| meta.agent_name.clone());
    let model = agent.get("model_name").filter(|v| truthy(v)).map(as_text).unwrap_or_else(|| meta.model_name.clone());
    let tools = agent.get("tool_definitions").filter(|v| truthy(v)).cloned();
    let ends: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| source(s) == "agent" && !s.get("is_copied_context").is_some_and(truthy))
        .map(|(i, _)| i)
        .collect();
    let mut rows = Vec::new();
    for (n, end) in ends.into_iter().enumerate() {
        let episode = &steps[..=end];
        let mut row = header(&name, &model, meta, &format!("episode-{n}"));
        if let Some(tools) = &tools {
            row.insert("tool_definitions".into(), tools.clone());
        }
        let conversation = episode_conversation(episode, tools.as_ref());
        if conversation.is_empty() {
            continue;
        }
        row.insert("conversations".into(), Value::Array(conversation));
        rows.push((n, row));
    }
    Ok(rows)
}

/// A row's first columns, in Harbor's order; `task` and `trial_name` filled later.
fn header(agent: &str, model: &str, meta: &RunMeta, episode: &str) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("conversations".into(), Value::Array(Vec::new()));
    row.insert("agent".into(), json!(agent));
    row.insert("model".into(), json!(model));
    row.insert("model_provider".into(), json!(meta.model_provider));
    row.insert("date".into(), meta.start_time.clone());
    row.insert("task".into(), Value::Null);
    row.insert("episode".into(), json!(episode));
    row.insert("run_id".into(), meta.run_id.clone());
    row.insert("trial_name".into(), Value::Null);
    row
}

fn source(step: &Value) -> &str {
    step.get("source").and_then(Value::as_str).unwrap_or_default()
}

fn message(role: &str, content: Value) -> Value {
    json!({"role": role, "content": content})
}

/// An episode as chat messages: system and user steps as the user's, agent steps as the
/// assistant's, and each agent step's observation as the user's except the episode's last.
fn episode_conversation(steps: &[Value], tools: Option<&Value>) -> Vec<Value> {
    let last_agent = steps.iter().rposition(|s| source(s) == "agent");
    let mut out = Vec::new();
    let mut tools_added = false;
    for (i, step) in steps.iter().enumerate() {
        let text = step.get("message").cloned().unwrap_or(Value::String(String::new()));
        match source(step) {
            "system" => {
                let content = match tools {
                    Some(tools) if !tools_added => {
                        tools_added = true;
                        Value::String(format!("<tools>\n{}\n</tools>\n\n{}", dumps(tools, true), as_text(&text)))
                    }
                    _ => text,
                };
                out.push(message("user", content));
            }
            "user" => out.push(message("user", text)),
            "agent" => {
                out.push(message("assistant", Value::String(assistant_text(step, &text))));
                if Some(i) != last_agent
                    && let Some(observation) = observation_text(step)
                {
                    out.push(message("user", Value::String(observation)));
                }
            }
            _ => {}
        }
    }
    out
}

/// An agent step as the assistant's text: `<think>…</think>`, the message (an orphaned
/// `</think>` given its opening tag), then each tool call as `<tool_call>` JSON.
fn assistant_text(step: &Value, text: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(reasoning) = step.get("reasoning_content").filter(|r| truthy(r)) {
        parts.push(format!("<think>{}</think>", as_text(reasoning)));
    }
    if truthy(text) {
        let mut text = as_text(text);
        if text.contains("</think>") && !text.contains("<think>") {
            text.insert_str(0, "<think>");
        }
        parts.push(text);
    }
    for call in step.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        let mut object = Map::new();
        object.insert("name".into(), call.get("function_name").cloned().unwrap_or(Value::Null));
        object.insert("arguments".into(), call.get("arguments").cloned().unwrap_or_else(|| json!({})));
        parts.push(format!("<tool_call>\n{}\n</tool_call>", dumps(&Value::Object(object), false)));
    }
    parts.join("\n")
}

/// An observation's results' contents, one per line; None when it has none.
fn observation_text(step: &Value) -> Option<String> {
    let results = step.get("observation").filter(|o| o.is_object())?.get("results")?.as_array()?;
    let contents: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_object().and_then(|r| r.get("content")))
        .map(|c| normalize_content(Some(c)))
        .collect();
    (!contents.is_empty()).then(|| contents.join("\n"))
}

/// Harbor's `normalize_message_content`: text as is, the first part's `text` of a part list,
/// anything else as JSON.
fn normalize_content(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) if !parts.is_empty() => match parts[0].get("text") {
            Some(Value::String(s)) if parts[0].is_object() => s.clone(),
            Some(other) if parts[0].is_object() => dumps(other, false),
            _ => dumps(&Value::Array(parts.clone()), false),
        },
        Some(other) => dumps(other, false),
    }
}

/// The ShareGPT form of a conversation: `{from: human|gpt|system, value}`, other roles dropped.
fn to_sharegpt(conversation: &Value) -> Value {
    let messages = conversation.as_array().cloned().unwrap_or_default();
    let converted = messages.iter().filter_map(|m| {
        let from = match m.get("role").and_then(Value::as_str)? {
            "user" => "human",
            "assistant" => "gpt",
            "system" => "system",
            _ => return None,
        };
        Some(json!({"from": from, "value": normalize_content(m.get("content"))}))
    });
    Value::Array(converted.collect())
}

/// One row per subagent trajectory of the trial (`trajectory.<kind>.json`, continuations left
/// out), the whole conversation, under the main agent's name.
fn subagent_rows(trial: &Path, meta: &RunMeta, options: &ExportOptions) -> Result<Vec<(String, Row)>, TraceError> {
    let agent_dir = trial.join("agent");
    let mut names: Vec<String> = std::fs::read_dir(&agent_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("trajectory.") && n.ends_with(".json") && !n.contains(".cont-"))
        .filter(|n| n.len() >= "trajectory..json".len())
        .collect();
    names.sort();
    let result = trial_result(trial, &as_text(&meta.trial_name));
    let instruction = options.instruction.then(|| instruction(trial));
    let verifier = options.verifier_output.then(|| verifier_output(trial));
    let mut rows = Vec::new();
    for name in names {
        let kind = name["trajectory.".len()..name.len() - ".json".len()].to_string();
        let Some((steps, agent)) = trajectory(&agent_dir.join(&name))? else { continue };
        if steps.is_empty() {
            continue;
        }
        let model =
            agent.get("model_name").filter(|v| truthy(v)).map(as_text).unwrap_or_else(|| meta.model_name.clone());
        let mut row = header(&meta.agent_name, &model, meta, "episode-0");
        let mut conversation = Vec::new();
        for step in &steps {
            let text = step.get("message").cloned().unwrap_or(Value::String(String::new()));
            match source(step) {
                "system" | "user" => conversation.push(message("user", text)),
                "agent" => {
                    conversation.push(message("assistant", Value::String(assistant_text(step, &text))));
                    if let Some(observation) = observation_text(step) {
                        conversation.push(message("user", Value::String(observation)));
                    }
                }
                _ => {}
            }
        }
        if !conversation.iter().any(|m| m["role"] == "assistant") {
            continue;
        }
        row.insert("conversations".into(), Value::Array(conversation));
        fill(&mut row, meta, &result, instruction.as_ref(), verifier.as_ref());
        rows.push((kind, row));
    }
    Ok(rows)
}
