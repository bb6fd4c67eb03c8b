//! Search across the steps of trajectories: one trial's, or every trial's of a job.
//!
//! Case-insensitive substring search in what a reader looks for: a step's message (analysis and
//! plan), its reasoning, the keystrokes of its tool calls, and its observation. A file whose
//! raw text cannot contain the query is skipped without parsing (only when the query survives
//! JSON escaping unchanged: plain ASCII without quotes or backslashes — Harbor's writer escapes
//! every other character).

use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use terminus_core::layout::names;

use crate::trial::entries;

/// Hits returned at most.
pub const MAX_HITS: usize = 500;
/// Files larger than this are skipped (and named).
const MAX_FILE: u64 = 64 * 1024 * 1024;

/// One match.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    pub trial: String,
    /// The trajectory file, below the trial directory.
    pub path: String,
    /// The step's position in its file (0-based) and its `step_id`.
    pub step_index: usize,
    pub step_id: Option<u64>,
    /// `message`, `reasoning`, `keystrokes` or `observation`.
    pub field: &'static str,
    pub snippet: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SearchResult {
    pub query: String,
    pub hits: Vec<Hit>,
    pub files_searched: usize,
    /// More hits exist than were returned.
    pub truncated: bool,
    /// Files not searched, and why.
    pub skipped: Vec<String>,
}

/// The trajectory files of a trial: its own agent directory's and each step's.
fn trajectory_files(trial_dir: &Path) -> Vec<String> {
    let sorted = |dir: &Path, keep: &dyn Fn(&str, bool) -> bool| {
        let mut names: Vec<String> =
            entries(dir).into_iter().filter(|(n, is_dir)| keep(n, *is_dir)).map(|(n, _)| n).collect();
        names.sort();
        names
    };
    let steps = sorted(&trial_dir.join(names::STEPS_DIR), &|_, is_dir| is_dir);
    let dirs = std::iter::once(names::AGENT_DIR.to_string())
        .chain(steps.into_iter().map(|s| format!("{}/{s}/{}", names::STEPS_DIR, names::AGENT_DIR)));
    let is_trajectory = |n: &str, is_dir: bool| !is_dir && n.starts_with("trajectory") && n.ends_with(".json");
    dirs.flat_map(|dir| sorted(&trial_dir.join(&dir), &is_trajectory).into_iter().map(move |f| format!("{dir}/{f}")))
        .collect()
}

/// A window of `text` around byte `at` (the match of `len` bytes), on character boundaries.
fn snippet(text: &str, at: usize, len: usize) -> String {
    let mut start = at.saturating_sub(80);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (at + len + 80).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&text[start..end].replace('\n', " ⏎ "));
    if end < text.len() {
        out.push('…');
    }
    out
}

/// The searchable texts of a step, by field.
fn step_texts(step: &Value) -> Vec<(&'static str, &str)> {
    let mut out = Vec::new();
    if let Some(m) = step.get("message").and_then(Value::as_str) {
        out.push(("message", m));
    }
    if let Some(r) = step.get("reasoning_content").and_then(Value::as_str) {
        out.push(("reasoning", r));
    }
    for call in step.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        if let Some(k) = call.pointer("/arguments/keystrokes").and_then(Value::as_str) {
            out.push(("keystrokes", k));
        }
    }
    for result in step.pointer("/observation/results").and_then(Value::as_array).into_iter().flatten() {
        if let Some(c) = result.get("content").and_then(Value::as_str) {
            out.push(("observation", c));
        }
    }
    out
}

/// Where `needle` (lower case) occurs in `text`, case-insensitively: its byte offset in `text`.
fn find_ci(text: &str, needle: &str) -> Option<usize> {
    if text.is_ascii() && needle.is_ascii() {
        let (hay, pat) = (text.as_bytes(), needle.as_bytes());
        return hay.windows(pat.len()).position(|w| w.eq_ignore_ascii_case(pat));
    }
    // Lower-casing may change lengths outside ASCII: map back through char offsets.
    let lower: String = text.to_lowercase();
    let at = lower.find(needle)?;
    let chars_before = lower[..at].chars().count();
    Some(text.char_indices().nth(chars_before).map_or(text.len(), |(i, _)| i))
}

/// Searches the trajectories of the given trials (`(name, dir)`), up to `max_hits`.
pub fn search(trials: &[(String, std::path::PathBuf)], query: &str, max_hits: usize) -> SearchResult {
    let needle = query.to_lowercase();
    let mut out = SearchResult { query: query.to_string(), ..SearchResult::default() };
    if needle.is_empty() {
        return out;
    }
    let raw_check = needle.is_ascii() && !needle.contains(['"', '\\']) && !needle.chars().any(char::is_control);
    for (trial, dir) in trials {
        for rel in trajectory_files(dir) {
            let path = dir.join(&rel);
            if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > MAX_FILE {
                out.skipped.push(format!("{trial}/{rel}: larger than {MAX_FILE} bytes"));
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else { continue };
            out.files_searched += 1;
            if raw_check && !bytes.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes())) {
                continue;
            }
            let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
                out.skipped.push(format!("{trial}/{rel}: not JSON"));
                continue;
            };
            for (index, step) in doc.get("steps").and_then(Value::as_array).into_iter().flatten().enumerate() {
                for (field, text) in step_texts(step) {
                    if let Some(at) = find_ci(text, &needle) {
                        if out.hits.len() >= max_hits {
                            out.truncated = true;
                            return out;
                        }
                        out.hits.push(Hit {
                            trial: trial.clone(),
                            path: rel.clone(),
                            step_index: index,
                            step_id: step.get("step_id").and_then(Value::as_u64),
                            field,
                            snippet: snippet(text, at, needle.len()),
                        });
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_field_case_insensitively_and_skips_files_without_the_text() {
        let dir = tempfile::tempdir().unwrap();
        let trial = dir.path().join("t1");
        std::fs::create_dir_all(trial.join("agent")).unwrap();
        std::fs::create_dir_all(trial.join("steps/s2/agent")).unwrap();
        let doc = serde_json::json!({"steps": [
            {"step_id": 1, "source": "user", "message": "Count the ERROR lines"},
            {"step_id": 2, "source": "agent", "message": "Analysis: nothing", "tool_calls": [
                {"arguments": {"keystrokes": "grep -c ERROR server.log\n"}}],
             "observation": {"results": [{"content": "12 errors found"}]}},
        ]});
        std::fs::write(trial.join("agent/trajectory.json"), doc.to_string()).unwrap();
        std::fs::write(
            trial.join("steps/s2/agent/trajectory.json"),
            serde_json::json!({"steps": [{"step_id": 1, "message": "Ünïcode Error here"}]}).to_string(),
        )
        .unwrap();
        std::fs::write(trial.join("agent/trajectory.cont-1.json"), r#"{"steps": []}"#).unwrap();
        let trials = vec![("t1".to_string(), trial.clone())];
        let result = search(&trials, "error", 100);
        let fields: Vec<(&str, &str, usize)> =
            result.hits.iter().map(|h| (h.path.as_str(), h.field, h.step_index)).collect();
        assert_eq!(
            fields,
            [
                ("agent/trajectory.json", "message", 0),
                ("agent/trajectory.json", "keystrokes", 1),
                ("agent/trajectory.json", "observation", 1),
                ("steps/s2/agent/trajectory.json", "message", 0),
            ]
        );
        assert_eq!(result.files_searched, 3);
        assert!(result.hits[3].snippet.contains("Error here"));
        // Outside ASCII, the raw pre-check is skipped (the file escapes it) and the match found.
        assert_eq!(search(&trials, "ünïcode", 10).hits.len(), 1);
        let capped = search(&trials, "error", 2);
        assert!(capped.truncated && capped.hits.len() == 2);
    }
}
