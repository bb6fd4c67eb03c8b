//! Harbor 0.26's resource shapes, made from the database's rows: `JobSummary`/`JobDetail`,
//! `RolloutSummary`/`RolloutDetail`, and their pages.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use crate::store::{JobRow, RolloutRow, state};

/// A stored timestamp as the API sends it (`…Z`).
pub fn api_time(stored: &str) -> Value {
    Value::String(match stored.strip_suffix("+00:00") {
        Some(head) => format!("{head}Z"),
        None => stored.to_string(),
    })
}

fn api_time_opt(stored: &Option<String>) -> Value {
    stored.as_deref().map_or(Value::Null, api_time)
}

/// The per-state counts Harbor calls `RolloutCounts` (every attempt counted).
fn counts(rollouts: &[&RolloutRow]) -> Value {
    let n = |s: &str| rollouts.iter().filter(|r| r.state == s).count();
    json!({
        "n_total": rollouts.len(),
        "n_queued": n(state::QUEUED),
        "n_running": n(state::RUNNING),
        "n_paused": n(state::PAUSED),
        "n_cancelling": n(state::CANCELLING),
        "n_cancelled": n(state::CANCELLED),
        "n_finished": n(state::FINISHED),
    })
}

fn distinct(rollouts: &[&RolloutRow], field: impl Fn(&RolloutRow) -> Option<&String>) -> Vec<String> {
    rollouts.iter().filter_map(|r| field(r).cloned()).collect::<BTreeSet<_>>().into_iter().collect()
}

/// The newest attempt of each trial.
fn latest<'a>(rollouts: &[&'a RolloutRow]) -> Vec<&'a RolloutRow> {
    let mut newest: HashMap<&str, &RolloutRow> = HashMap::new();
    for r in rollouts {
        let slot = newest.entry(r.trial_key.as_str()).or_insert(r);
        if r.retry_index > slot.retry_index {
            *slot = r;
        }
    }
    newest.into_values().collect()
}

fn rewards_summary(rollouts: &[&RolloutRow]) -> Value {
    let mut keys: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for r in latest(rollouts) {
        let Some(Value::Object(rewards)) = &r.rewards else { continue };
        for (key, value) in rewards {
            let entry = keys.entry(key.clone()).or_insert((0.0, 0));
            if r.state == state::FINISHED
                && r.reward_valid
                && let Some(x) = value.as_f64()
            {
                entry.0 += x;
                entry.1 += 1;
            }
        }
    }
    let map: Map<String, Value> = keys
        .into_iter()
        .map(|(k, (sum, n))| {
            (k, json!({ "mean": if n > 0 { json!(sum / n as f64) } else { Value::Null }, "count": n }))
        })
        .collect();
    Value::Object(map)
}

fn usage_summary(rollouts: &[&RolloutRow]) -> Value {
    let ints = |f: fn(&RolloutRow) -> Option<i64>| {
        let values: Vec<i64> = rollouts.iter().filter_map(|r| f(r)).collect();
        json!({ "sum": if values.is_empty() { Value::Null } else { json!(values.iter().sum::<i64>()) }, "count": values.len() })
    };
    let costs: Vec<f64> = rollouts.iter().filter_map(|r| r.cost_usd).collect();
    json!({
        "n_input_tokens": ints(|r| r.n_input_tokens),
        "n_cached_input_tokens": ints(|r| r.n_cached_input_tokens),
        "n_output_tokens": ints(|r| r.n_output_tokens),
        "cost_usd": { "sum": if costs.is_empty() { Value::Null } else { json!(costs.iter().sum::<f64>()) }, "count": costs.len() },
    })
}

/// `JobSummary`.
pub fn job_summary(job: &JobRow, rollouts: &[&RolloutRow]) -> Value {
    json!({
        "created_at": api_time(&job.created_at),
        "updated_at": api_time(&job.updated_at),
        "started_at": api_time_opt(&job.started_at),
        "finished_at": api_time_opt(&job.finished_at),
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "rollouts": counts(rollouts),
        "n_retries": rollouts.iter().filter(|r| r.retry_of.is_some()).count(),
        "n_errors": rollouts.iter().map(|r| r.n_errors as usize).sum::<usize>(),
        "agent_names": distinct(rollouts, |r| r.agent_name.as_ref()),
        "model_names": distinct(rollouts, |r| r.model_name.as_ref()),
        "model_providers": distinct(rollouts, |r| r.model_provider.as_ref()),
        "reasoning_efforts": distinct(rollouts, |r| r.reasoning_effort.as_ref()),
        "sources": distinct(rollouts, |r| r.task_source.as_ref()),
        "rewards": rewards_summary(rollouts),
        "usage": usage_summary(rollouts),
    })
}

/// `JobDetail`.
pub fn job_detail(job: &JobRow, rollouts: &[&RolloutRow]) -> Value {
    let mut value = job_summary(job, rollouts);
    value["lock_uri"] = json!(job.lock_uri);
    value["config"] = job.config.clone();
    value["session_id"] = Value::Null;
    value
}

/// `RolloutSummary`; `attempts` are every attempt of the same trial.
pub fn rollout_summary(r: &RolloutRow, attempts: &[&RolloutRow]) -> Value {
    let mut ids: Vec<&&RolloutRow> = attempts.iter().filter(|a| a.trial_key == r.trial_key).collect();
    ids.sort_by_key(|a| std::cmp::Reverse(a.retry_index));
    let live = r.state == state::RUNNING || r.state == state::CANCELLING;
    let rewards = match &r.rewards {
        Some(Value::Object(map)) if r.state == state::FINISHED && r.reward_valid => Value::Object(map.clone()),
        Some(Value::Object(map)) => Value::Object(map.keys().map(|k| (k.clone(), Value::Null)).collect()),
        _ => Value::Null,
    };
    json!({
        "created_at": api_time(&r.created_at),
        "updated_at": api_time(&r.updated_at),
        "started_at": api_time_opt(&r.started_at),
        "finished_at": api_time_opt(&r.finished_at),
        "id": r.id,
        "job_id": r.job_id,
        "name": r.name,
        "state": r.state,
        "retry_ids": ids.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
        "phase": if live { json!(r.phase.clone().unwrap_or_else(|| "environment_setup".into())) } else { Value::Null },
        "task": { "name": r.task_name, "digest": r.task_digest, "source": r.task_source },
        "agent": { "name": r.agent_name, "version": r.agent_version },
        "model": { "name": r.model_name, "provider": r.model_provider, "reasoning_effort": r.reasoning_effort },
        "rewards": rewards,
        "usage": {
            "n_input_tokens": r.n_input_tokens,
            "n_cached_input_tokens": r.n_cached_input_tokens,
            "n_output_tokens": r.n_output_tokens,
            "cost_usd": r.cost_usd,
        },
        "error_type": r.error_type,
    })
}

/// `RolloutDetail`: the summary, its lock, its artifacts and its result.
pub fn rollout_detail(r: &RolloutRow, attempts: &[&RolloutRow], artifacts: &[(String, String)]) -> Value {
    let mut value = rollout_summary(r, attempts);
    value["lock"] = r.lock.clone();
    value["artifacts"] = Value::Object(artifacts.iter().map(|(p, u)| (p.clone(), json!(u))).collect());
    value["storage_error"] = Value::Null;
    value["result"] = r.result.clone().unwrap_or(Value::Null);
    value
}
