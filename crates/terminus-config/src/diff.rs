//! Comparing a job's stored `config.json` with the configuration of a new run of the same job,
//! ignoring what does not change results: where the model server listens, how many trials run at
//! once, limits and retries of model calls, budgets, display and logging options.

use serde_json::Value;

/// Top-level keys that only change how a job runs, not what it computes.
const RUNTIME_KEYS: &[&str] = &[
    "job_name",
    "jobs_dir",
    "n_concurrent_trials",
    "admission",
    "quiet",
    "debug",
    "llm",
    "grace_period_sec",
    "stall_warning_sec",
    "max_trial_disk_mb",
    "terminal_timeout_sec",
    "supervision",
    "budget",
    // Both conventions' scores are computed whatever it is; it picks the one shown first.
    "score_convention",
];

/// The differences that matter, as `path: old -> new` lines (empty when the runs are the same job).
pub fn config_diff(old: &Value, new: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    walk("", &normalize(old), &normalize(new), &mut lines);
    lines
}

/// A copy without runtime-only fields, with `api_base` reduced to its scheme and path.
fn normalize(config: &Value) -> Value {
    let mut value = config.clone();
    if let Some(map) = value.as_object_mut() {
        for key in RUNTIME_KEYS {
            map.remove(*key);
        }
        if let Some(orchestrator) = map.get_mut("orchestrator").and_then(Value::as_object_mut) {
            orchestrator.remove("n_concurrent_trials");
            orchestrator.remove("quiet");
        }
        if let Some(agents) = map.get_mut("agents").and_then(Value::as_array_mut) {
            for agent in agents {
                if let Some(agent) = agent.as_object_mut() {
                    agent.remove("llm");
                    agent.remove("budget");
                    if let Some(base) = agent.get_mut("kwargs").and_then(|k| k.get_mut("api_base"))
                        && let Some(text) = base.as_str()
                    {
                        *base = Value::String(strip_host(text));
                    }
                }
            }
        }
    }
    value
}

/// `http://127.0.0.1:8000/v1` → `http:///v1`: the host and port may change between runs.
fn strip_host(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let path = rest.find('/').map_or("", |i| &rest[i..]);
            format!("{scheme}://{path}")
        }
        None => url.to_string(),
    }
}

fn walk(path: &str, old: &Value, new: &Value, lines: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                walk(&child, a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null), lines);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (idx, (x, y)) in a.iter().zip(b).enumerate() {
                walk(&format!("{path}[{idx}]"), x, y, lines);
            }
        }
        // A secret is stored redacted, as a template or a mask depending on the environment of
        // the run that wrote it: two redacted forms say nothing about the values.
        (Value::String(a), Value::String(b)) if redacted(path, a) && redacted(path, b) => {}
        (a, b) if a != b => lines.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

/// Whether `text`, stored at `path`, is a secret in its redacted form.
fn redacted(path: &str, text: &str) -> bool {
    let key = path.rsplit('.').next().unwrap_or(path);
    terminus_core::secrets::is_secret_key(key)
        && (text.starts_with("${") && text.ends_with('}') || text.contains("****"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runtime_fields_are_ignored_and_real_changes_named() {
        let old = json!({
            "job_name": "a", "n_concurrent_trials": 4, "n_attempts": 2,
            "agents": [{"name": "terminus-2", "model_name": "openai/x", "kwargs": {"api_base": "http://127.0.0.1:8000/v1", "max_turns": 5}}]
        });
        let mut new = old.clone();
        new["n_concurrent_trials"] = json!(16);
        new["agents"][0]["kwargs"]["api_base"] = json!("http://127.0.0.1:9999/v1");
        new["score_convention"] = json!("harbor-0.26");
        assert!(config_diff(&old, &new).is_empty());
        new["agents"][0]["kwargs"]["max_turns"] = json!(6);
        new["n_attempts"] = json!(3);
        assert_eq!(config_diff(&old, &new), ["agents[0].kwargs.max_turns: 5 -> 6", "n_attempts: 2 -> 3"]);
        // A secret redacted one way then the other is the same job.
        let mut secret = old.clone();
        secret["environment"] = json!({"env": {"HF_TOKEN": "hf****a6"}});
        let mut templated = old.clone();
        templated["environment"] = json!({"env": {"HF_TOKEN": "${HF_TOKEN}"}});
        assert!(config_diff(&secret, &templated).is_empty());
        new["agents"][0]["kwargs"]["api_base"] = json!("http://127.0.0.1:9999/v2");
        assert!(config_diff(&old, &new).iter().any(|l| l.starts_with("agents[0].kwargs.api_base")));
    }
}
