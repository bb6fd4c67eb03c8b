//! An ended attempt as the database keeps it: read from its `result.json`, with the files of
//! its directory registered as artifacts under `file://` URIs.

use std::path::Path;

use serde_json::Value;

use crate::store::{Outcome, state};

/// Characters a path keeps in a URI (Python's `quote` with `/` safe).
fn keeps(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/')
}

/// Percent-encodes a path for a URI.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if keeps(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Undoes [`quote`] (and any other percent-encoding); None for a broken escape or non-UTF-8.
pub fn unquote(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `file://` URI of a directory (with its trailing `/`) or a file.
pub fn file_uri(path: &Path, dir: bool) -> String {
    let mut uri = format!("file://{}", quote(&path.display().to_string()));
    if dir && !uri.ends_with('/') {
        uri.push('/');
    }
    uri
}

/// A timestamp from a result (`…Z`) as the database keeps it.
fn stored_time(value: Option<&Value>) -> Option<String> {
    let text = value?.as_str()?;
    let parsed = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(parsed.with_timezone(&chrono::Utc).format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string())
}

/// Reads the attempt in `dir`; None while it has no readable `result.json`. `archived`: the
/// attempt's own `attempts/` directory (of later attempts) is left out of its artifacts.
pub fn read(dir: &Path, skip_attempts: bool) -> Option<Outcome> {
    let text = std::fs::read_to_string(dir.join("result.json")).ok()?;
    let mut result: Value = serde_json::from_str(&text).ok()?;
    result["trial_uri"] = Value::String(file_uri(dir, true));
    let text_at = |pointer: &str| result.pointer(pointer).and_then(Value::as_str).map(str::to_string);
    let int_at = |pointer: &str| result.pointer(pointer).and_then(Value::as_i64);
    let error_type = text_at("/exception_info/exception_type");
    let cancelled = error_type.as_deref() == Some("CancelledError");
    let rewards = result.pointer("/verifier_result/rewards").filter(|v| v.is_object()).cloned();
    Some(Outcome {
        state: if cancelled { state::CANCELLED } else { state::FINISHED },
        n_errors: u32::from(error_type.is_some() && !cancelled),
        error_type,
        agent_name: text_at("/agent_info/name"),
        agent_version: text_at("/agent_info/version").filter(|v| !v.is_empty()),
        model_name: text_at("/agent_info/model_info/name"),
        model_provider: text_at("/agent_info/model_info/provider"),
        n_input_tokens: int_at("/agent_result/n_input_tokens"),
        n_cached_input_tokens: int_at("/agent_result/n_cache_tokens"),
        n_output_tokens: int_at("/agent_result/n_output_tokens"),
        cost_usd: result.pointer("/agent_result/cost_usd").and_then(Value::as_f64),
        reward_valid: result.get("reward_valid").and_then(Value::as_bool).unwrap_or(rewards.is_some()),
        rewards,
        started_at: stored_time(result.get("started_at")),
        finished_at: stored_time(result.get("finished_at")),
        artifacts: artifacts(dir, skip_attempts),
        dir: Some(dir.display().to_string()),
        result: Some(result),
    })
}

/// Every file and directory under `dir` (directories with a trailing `/`), as (relative path,
/// URI); symlinks and `*.tmp` files are left out.
pub fn artifacts(dir: &Path, skip_attempts: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else { continue };
            let key = format!("{rel}{name}");
            if kind.is_dir() {
                if skip_attempts && rel.is_empty() && name == terminus_core::layout::names::ATTEMPTS_DIR {
                    continue;
                }
                out.push((format!("{key}/"), format!("{}{}/", file_uri(dir, true), quote(&key))));
                stack.push((entry.path(), format!("{key}/")));
            } else if kind.is_file() && !name.ends_with(".tmp") {
                out.push((key.clone(), format!("{}{}", file_uri(dir, true), quote(&key))));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_survive_the_trip_through_a_uri() {
        for text in ["/srv/data/jobs/a b/x.json", "/tmp/ü/%41/#?", "plain/path"] {
            let quoted = quote(text);
            assert!(!quoted.contains(' ') && !quoted.contains('#') && !quoted.contains('?'), "{quoted}");
            assert_eq!(unquote(&quoted).as_deref(), Some(text));
        }
        assert_eq!(unquote("%zz"), None);
        assert_eq!(file_uri(Path::new("/a b"), true), "file:///a%20b/");
    }

    #[test]
    fn an_attempt_registers_its_files_and_directories_but_not_later_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let trial = dir.path().join("hello__x");
        std::fs::create_dir_all(trial.join("agent")).unwrap();
        std::fs::create_dir_all(trial.join("attempts/0")).unwrap();
        std::fs::write(trial.join("agent/trajectory.json"), "{}").unwrap();
        std::fs::write(trial.join("agent/partial.tmp"), "").unwrap();
        std::fs::write(
            trial.join("result.json"),
            r#"{"trial_uri":"x","exception_info":{"exception_type":"CancelledError"},
               "verifier_result":{"rewards":{"reward":1.0}},"reward_valid":false,
               "agent_info":{"name":"oracle","version":"1.0"},"started_at":"2026-01-01T00:00:00Z"}"#,
        )
        .unwrap();
        let outcome = read(&trial, true).unwrap();
        let paths: Vec<&str> = outcome.artifacts.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["agent/", "agent/trajectory.json", "result.json"]);
        assert_eq!(outcome.state, state::CANCELLED);
        assert_eq!(outcome.n_errors, 0);
        assert!(!outcome.reward_valid);
        assert_eq!(outcome.started_at.as_deref(), Some("2026-01-01T00:00:00.000000+00:00"));
        let uri = &outcome.artifacts[1].1;
        assert!(uri.starts_with("file:///") && uri.ends_with("/hello__x/agent/trajectory.json"), "{uri}");
        assert_eq!(outcome.result.unwrap()["trial_uri"], file_uri(&trial, true));
        assert!(read(&dir.path().join("missing"), true).is_none());
    }
}
