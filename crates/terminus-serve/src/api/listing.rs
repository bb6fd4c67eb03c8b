//! `GET /jobs`, `GET /rollouts` and their `/filters`: Harbor's filters (lists are repeated
//! keys, values of one list are alternatives, different filters all apply), its sort fields,
//! and opaque page tokens bound to the filters they were made for.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::handlers::query_pairs;
use super::{App, ok, problem};
use crate::error::ServeError;
use crate::store::{JobRow, RolloutRow, state};
use crate::wire;

const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;

const FILTERS: [&str; 15] = [
    "task",
    "state",
    "name",
    "q",
    "agent_name",
    "agent_version",
    "model_name",
    "model_provider",
    "reasoning_effort",
    "error_type",
    "source",
    "created_after",
    "created_before",
    "page_size",
    "page_token",
];
const ROLLOUT_FILTERS: [&str; 3] = ["states", "rollout_ids", "job_ids"];
const JOB_SORTS: [&str; 7] = ["id", "name", "state", "created_at", "updated_at", "started_at", "finished_at"];
const ROLLOUT_SORTS: [&str; 11] = [
    "task_name",
    "agent_name",
    "agent_version",
    "model_name",
    "model_provider",
    "reasoning_effort",
    "source",
    "n_input_tokens",
    "n_cached_input_tokens",
    "n_output_tokens",
    "cost_usd",
];
const FIELDS: [&str; 9] = [
    "state",
    "task",
    "agent_name",
    "agent_version",
    "model_name",
    "model_provider",
    "reasoning_effort",
    "error_type",
    "source",
];

/// The query's parameters by key (empty values are left out, as a form's blank fields).
struct Params(BTreeMap<String, Vec<String>>);

impl Params {
    fn read(raw: Option<&str>, rollouts: bool, extra: &[&str]) -> Result<Params, Response> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, value) in query_pairs(raw)? {
            let known = FILTERS.contains(&key.as_str())
                || key == "sort"
                || extra.contains(&key.as_str())
                || (rollouts && ROLLOUT_FILTERS.contains(&key.as_str()));
            if !known {
                return Err(bad(format!("query.{key}: Extra inputs are not permitted")));
            }
            if !value.is_empty() {
                map.entry(key).or_default().push(value);
            }
        }
        for key in map.get("states").into_iter().flatten().chain(map.get("state").into_iter().flatten()) {
            if !state::ALL.contains(&key.as_str()) {
                return Err(bad(format!(
                    "query.state: Input should be 'queued', 'running', 'paused', 'cancelling', 'finished' or 'cancelled', not '{key}'"
                )));
            }
        }
        for key in ["created_after", "created_before"] {
            if let Some(v) = map.get(key).and_then(|v| v.first())
                && parse_time(v).is_none()
            {
                return Err(bad(format!("query.{key}: Input should be a valid datetime")));
            }
        }
        Ok(Params(map))
    }

    fn one(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.first()).map(String::as_str)
    }

    fn list(&self, key: &str) -> Option<&[String]> {
        self.0.get(key).map(Vec::as_slice)
    }

    /// Page size (0 means the default; more than the most is the most) and where to start.
    fn page(&self, scope: &str) -> Result<(usize, usize), Response> {
        let size = match self.one("page_size") {
            None => DEFAULT_PAGE,
            Some(text) => match text.parse::<usize>() {
                Ok(0) => DEFAULT_PAGE,
                Ok(n) => n.min(MAX_PAGE),
                Err(_) => return Err(bad("query.page_size: Input should be greater than or equal to 0".into())),
            },
        };
        let start = match self.one("page_token") {
            None => 0,
            Some(token) => {
                token.split_once('.').filter(|(_, s)| *s == scope).and_then(|(n, _)| n.parse().ok()).ok_or_else(
                    || {
                        problem(
                            StatusCode::BAD_REQUEST,
                            "InvalidPageToken",
                            "Use a current page token with the same filters and sort, or restart from the first page.",
                            Map::new(),
                        )
                    },
                )?
            }
        };
        Ok((size, start))
    }

    /// What a page token is bound to: every parameter but the page's own.
    fn scope(&self, table: &str) -> String {
        let mut hasher = Sha256::new();
        hasher.update(table.as_bytes());
        for (key, values) in self.0.iter().filter(|(k, _)| *k != "page_size" && *k != "page_token") {
            hasher.update(format!("\n{key}={}", values.join("\u{1f}")).as_bytes());
        }
        format!("{:x}", hasher.finalize())[..16].to_string()
    }
}

fn bad(detail: String) -> Response {
    ServeError::BadRequest(detail).into_response()
}

fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .ok()
        .or_else(|| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").ok().map(|t| t.and_utc()))
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| t.and_utc())
        })
}

/// A rollout's value of a filter field.
fn field_of(r: &RolloutRow, field: &str) -> Option<String> {
    match field {
        "state" => Some(r.state.clone()),
        "task" => Some(format!("{}@{}", r.task_name, r.task_digest)),
        "agent_name" => r.agent_name.clone(),
        "agent_version" => r.agent_version.clone(),
        "model_name" => r.model_name.clone(),
        "model_provider" => r.model_provider.clone(),
        "reasoning_effort" => r.reasoning_effort.clone(),
        "error_type" => r.error_type.clone(),
        "source" => r.task_source.clone(),
        _ => None,
    }
}

/// Whether a rollout passes the metadata filters (all but `skip`).
fn rollout_matches(r: &RolloutRow, p: &Params, skip: &str) -> bool {
    let listed = |key: &str, value: Option<&String>| {
        key == skip || p.list(key).is_none_or(|wanted| value.is_some_and(|v| wanted.contains(v)))
    };
    let task_ok = skip == "task"
        || p.list("task").is_none_or(|wanted| {
            wanted.iter().any(|t| match t.split_once('@') {
                Some((_, digest)) => digest.eq_ignore_ascii_case(&r.task_digest),
                None => *t == r.task_name,
            })
        });
    task_ok
        && listed("agent_name", r.agent_name.as_ref())
        && listed("agent_version", r.agent_version.as_ref())
        && listed("model_name", r.model_name.as_ref())
        && listed("model_provider", r.model_provider.as_ref())
        && listed("reasoning_effort", r.reasoning_effort.as_ref())
        && listed("error_type", r.error_type.as_ref())
        && listed("source", r.task_source.as_ref())
}

fn created_ok(created: &str, p: &Params) -> bool {
    let at = parse_time(created);
    let after = p.one("created_after").and_then(parse_time);
    let before = p.one("created_before").and_then(parse_time);
    after.is_none_or(|a| at.is_some_and(|t| t >= a)) && before.is_none_or(|b| at.is_some_and(|t| t < b))
}

fn q_ok(p: &Params, texts: &[&str]) -> bool {
    p.one("q").is_none_or(|q| {
        let q = q.to_ascii_lowercase();
        texts.iter().any(|t| t.to_ascii_lowercase().contains(&q))
    })
}

/// Sort key and direction; `allowed` extends the common fields.
fn sort_of(p: &Params, default: &str, extra: &[&str]) -> Result<(String, bool), Response> {
    let text = p.one("sort").unwrap_or(default);
    let (desc, field) = match text.strip_prefix('-') {
        Some(f) => (true, f),
        None => (false, text),
    };
    if !JOB_SORTS.contains(&field) && !extra.contains(&field) {
        let mut all: Vec<&str> = JOB_SORTS.to_vec();
        all.extend(extra);
        return Err(bad(format!(
            "query.sort: Value error, Sort must be a supported field, optionally prefixed with '-': {}",
            all.join(", ")
        )));
    }
    Ok((field.to_string(), desc))
}

/// Orders by a sortable value (missing values last), then by insertion.
fn order<T>(items: &mut [T], desc: bool, key: impl Fn(&T) -> (Option<Value>, i64)) {
    items.sort_by(|a, b| {
        let ((va, sa), (vb, sb)) = (key(a), key(b));
        let by_value = match (&va, &vb) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Greater,
            (Some(_), None) => return std::cmp::Ordering::Less,
            (Some(x), Some(y)) => match (x.as_f64(), y.as_f64()) {
                (Some(fx), Some(fy)) => fx.total_cmp(&fy),
                _ => x.as_str().unwrap_or_default().cmp(y.as_str().unwrap_or_default()),
            },
        };
        let ordering = by_value.then(sa.cmp(&sb));
        if desc { ordering.reverse() } else { ordering }
    });
}

fn page(items: Vec<Value>, size: usize, start: usize, scope: &str) -> Value {
    let total = items.len();
    let end = (start + size).min(total);
    let next = if end < total { format!("{end}.{scope}") } else { String::new() };
    let slice: Vec<Value> = items.into_iter().skip(start).take(size).collect();
    json!({ "items": slice, "total": total, "next_page_token": next })
}

fn job_value(j: &JobRow, field: &str) -> Option<Value> {
    match field {
        "id" => Some(json!(j.id)),
        "name" => Some(json!(j.name)),
        "state" => Some(json!(j.state)),
        "created_at" => Some(json!(j.created_at)),
        "updated_at" => Some(json!(j.updated_at)),
        "started_at" => j.started_at.as_ref().map(|v| json!(v)),
        "finished_at" => j.finished_at.as_ref().map(|v| json!(v)),
        _ => None,
    }
}

fn rollout_value(r: &RolloutRow, field: &str) -> Option<Value> {
    match field {
        "id" => Some(json!(r.id)),
        "name" => Some(json!(r.name)),
        "state" => Some(json!(r.state)),
        "created_at" => Some(json!(r.created_at)),
        "updated_at" => Some(json!(r.updated_at)),
        "started_at" => r.started_at.as_ref().map(|v| json!(v)),
        "finished_at" => r.finished_at.as_ref().map(|v| json!(v)),
        "task_name" => Some(json!(r.task_name)),
        "source" => r.task_source.as_ref().map(|v| json!(v)),
        "n_input_tokens" => r.n_input_tokens.map(|v| json!(v)),
        "n_cached_input_tokens" => r.n_cached_input_tokens.map(|v| json!(v)),
        "n_output_tokens" => r.n_output_tokens.map(|v| json!(v)),
        "cost_usd" => r.cost_usd.map(|v| json!(v)),
        other => field_of(r, other).map(|v| json!(v)),
    }
}

/// The jobs passing the filters (but `skip`), with their rollouts.
fn matching_jobs(app: &App, p: &Params, skip: &str) -> Result<Vec<(JobRow, Vec<RolloutRow>)>, ServeError> {
    let mut by_job: HashMap<String, Vec<RolloutRow>> = HashMap::new();
    for r in app.service.store().all_rollouts()? {
        by_job.entry(r.job_id.clone()).or_default().push(r);
    }
    let metadata = [
        "task",
        "agent_name",
        "agent_version",
        "model_name",
        "model_provider",
        "reasoning_effort",
        "error_type",
        "source",
    ];
    let filtered = metadata.iter().any(|k| *k != skip && p.list(k).is_some());
    let mut out = Vec::new();
    for job in app.service.store().jobs()? {
        let rollouts = by_job.remove(&job.id).unwrap_or_default();
        let keep = (skip == "state" || p.one("state").is_none_or(|s| s == job.state))
            && p.one("name").is_none_or(|n| n == job.name)
            && q_ok(p, &[&job.name, &job.id])
            && created_ok(&job.created_at, p)
            && (!filtered || rollouts.iter().any(|r| rollout_matches(r, p, skip)));
        if keep {
            out.push((job, rollouts));
        }
    }
    Ok(out)
}

/// The rollouts passing the filters (but `skip`); an unknown job id is a 404.
fn matching_rollouts(app: &App, p: &Params, skip: &str) -> Result<Vec<RolloutRow>, ServeError> {
    if let Some(ids) = p.list("job_ids") {
        for id in ids {
            app.service.job(id)?;
        }
    }
    let rows = app.service.store().all_rollouts()?;
    Ok(rows
        .into_iter()
        .filter(|r| {
            (skip == "state"
                || p.one("state").is_none_or(|s| s == r.state) && p.list("states").is_none_or(|s| s.contains(&r.state)))
                && p.list("job_ids").is_none_or(|ids| ids.contains(&r.job_id))
                && p.list("rollout_ids").is_none_or(|ids| ids.contains(&r.id))
                && p.one("name").is_none_or(|n| n == r.name)
                && q_ok(p, &[&r.name, &r.id, &r.task_name])
                && created_ok(&r.created_at, p)
                && rollout_matches(r, p, skip)
        })
        .collect())
}

pub(super) async fn jobs(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let run = || -> Result<Value, Response> {
        let p = Params::read(raw.as_deref(), false, &[])?;
        let (field, desc) = sort_of(&p, "-created_at", &[])?;
        let scope = p.scope("job");
        let (size, start) = p.page(&scope)?;
        let mut jobs = matching_jobs(&app, &p, "").map_err(IntoResponse::into_response)?;
        order(&mut jobs, desc, |(j, _)| (job_value(j, &field), j.seq));
        let items = jobs.iter().map(|(j, rs)| wire::job_summary(j, &rs.iter().collect::<Vec<_>>())).collect();
        Ok(page(items, size, start, &scope))
    };
    run().map_or_else(|r| r, ok)
}

pub(super) async fn rollouts(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let run = || -> Result<Value, Response> {
        let p = Params::read(raw.as_deref(), true, &[])?;
        let (field, desc) = sort_of(&p, "created_at", &ROLLOUT_SORTS)?;
        let scope = p.scope("rollout");
        let (size, start) = p.page(&scope)?;
        let mut rows = matching_rollouts(&app, &p, "").map_err(IntoResponse::into_response)?;
        let all = app.service.store().all_rollouts().map_err(|e| ServeError::from(e).into_response())?;
        order(&mut rows, desc, |r| (rollout_value(r, &field), r.seq));
        let by_job: Vec<&RolloutRow> = all.iter().collect();
        let items = rows
            .iter()
            .map(|r| {
                let same: Vec<&RolloutRow> = by_job.iter().copied().filter(|a| a.job_id == r.job_id).collect();
                wire::rollout_summary(r, &same)
            })
            .collect();
        Ok(page(items, size, start, &scope))
    };
    run().map_or_else(|r| r, ok)
}

/// `field` and `limit` of a filters request.
fn field_and_limit(p: &Params) -> Result<(String, usize), Response> {
    let Some(field) = p.one("field") else { return Err(bad("query.field: Field required".into())) };
    if !FIELDS.contains(&field) {
        return Err(bad(format!("query.field: Input should be one of {}", FIELDS.join(", "))));
    }
    let limit = match p.one("limit") {
        None => 100,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| bad("query.limit: Input should be between 1 and 1000".into()))?,
    };
    Ok((field.to_string(), limit))
}

fn values(counts: BTreeMap<String, usize>, field: &str, limit: usize) -> Value {
    let truncated = counts.len() > limit;
    let values: Vec<Value> =
        counts.into_iter().take(limit).map(|(value, count)| json!({ "value": value, "count": count })).collect();
    let mut out = json!({ "field": field, "values": values });
    if truncated {
        out["truncated"] = json!(true);
    }
    out
}

pub(super) async fn job_filters(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let run = || -> Result<Value, Response> {
        let p = Params::read(raw.as_deref(), false, &["field", "limit"])?;
        let (field, limit) = field_and_limit(&p)?;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (job, rollouts) in matching_jobs(&app, &p, &field).map_err(IntoResponse::into_response)? {
            let mut seen: Vec<String> = if field == "state" {
                vec![job.state.clone()]
            } else {
                rollouts.iter().filter(|r| rollout_matches(r, &p, &field)).filter_map(|r| field_of(r, &field)).collect()
            };
            seen.sort();
            seen.dedup();
            for value in seen {
                *counts.entry(value).or_default() += 1;
            }
        }
        Ok(values(counts, &field, limit))
    };
    run().map_or_else(|r| r, ok)
}

pub(super) async fn rollout_filters(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let run = || -> Result<Value, Response> {
        let p = Params::read(raw.as_deref(), true, &["field", "limit"])?;
        let (field, limit) = field_and_limit(&p)?;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in matching_rollouts(&app, &p, &field).map_err(IntoResponse::into_response)? {
            if let Some(value) = field_of(&r, &field) {
                *counts.entry(value).or_default() += 1;
            }
        }
        Ok(values(counts, &field, limit))
    };
    run().map_or_else(|r| r, ok)
}
