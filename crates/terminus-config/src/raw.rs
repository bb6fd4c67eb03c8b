//! The job file exactly as users write it (Harbor's `JobConfig` schema).
//!
//! Every field has Harbor's name and default. Keys we read but do not act on yet are listed in
//! [`NOT_YET_SUPPORTED`] so that using them gives a warning instead of silence.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Top-level keys accepted for compatibility that do not change behaviour yet.
pub const NOT_YET_SUPPORTED: &[&str] = &["retry", "metrics", "artifacts"];

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawJob {
    pub job_name: Option<String>,
    pub jobs_dir: Option<PathBuf>,
    pub n_attempts: Option<i64>,
    pub n_concurrent_trials: Option<i64>,
    /// Legacy block; its values apply only where the top-level keys are absent.
    pub orchestrator: Option<RawOrchestrator>,
    pub timeout_multiplier: Option<f64>,
    pub agent_timeout_multiplier: Option<f64>,
    pub verifier_timeout_multiplier: Option<f64>,
    pub agent_setup_timeout_multiplier: Option<f64>,
    pub environment_build_timeout_multiplier: Option<f64>,
    pub debug: Option<bool>,
    pub quiet: Option<bool>,
    pub environment: RawEnvironment,
    pub verifier: RawVerifier,
    pub agents: Option<Vec<RawAgent>>,
    pub datasets: Vec<RawDataset>,
    pub tasks: Vec<RawTask>,
    pub retry: Option<Value>,
    pub metrics: Option<Value>,
    pub artifacts: Option<Value>,
    /// Limits and retries of model calls (our extension; per-agent `llm` blocks override it).
    pub llm: Option<RawLlm>,
}

/// The `llm:` block: shared limits and the retry policy of model calls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawLlm {
    pub max_concurrent_requests: Option<i64>,
    pub adaptive_concurrency: Option<bool>,
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
    pub max_attempts: Option<i64>,
    pub base_delay_sec: Option<f64>,
    pub max_delay_sec: Option<f64>,
    pub request_timeout_sec: Option<f64>,
}

impl RawLlm {
    /// This block with `over`'s fields taking precedence.
    pub fn overlaid(&self, over: &RawLlm) -> RawLlm {
        RawLlm {
            max_concurrent_requests: over.max_concurrent_requests.or(self.max_concurrent_requests),
            adaptive_concurrency: over.adaptive_concurrency.or(self.adaptive_concurrency),
            requests_per_minute: over.requests_per_minute.or(self.requests_per_minute),
            tokens_per_minute: over.tokens_per_minute.or(self.tokens_per_minute),
            max_attempts: over.max_attempts.or(self.max_attempts),
            base_delay_sec: over.base_delay_sec.or(self.base_delay_sec),
            max_delay_sec: over.max_delay_sec.or(self.max_delay_sec),
            request_timeout_sec: over.request_timeout_sec.or(self.request_timeout_sec),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawOrchestrator {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub n_concurrent_trials: Option<i64>,
    pub quiet: Option<bool>,
    pub retry: Option<Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default)]
pub struct RawEnvironment {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub force_build: bool,
    pub delete: bool,
    pub override_cpus: Option<f64>,
    pub override_memory_mb: Option<i64>,
    pub env: BTreeMap<String, String>,
    pub kwargs: Map<String, Value>,
}

impl Default for RawEnvironment {
    fn default() -> Self {
        RawEnvironment {
            kind: None,
            force_build: false,
            delete: true,
            override_cpus: None,
            override_memory_mb: None,
            env: BTreeMap::new(),
            kwargs: Map::new(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawVerifier {
    pub override_timeout_sec: Option<f64>,
    pub max_timeout_sec: Option<f64>,
    pub env: BTreeMap<String, String>,
    pub disable: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawAgent {
    pub name: Option<String>,
    pub import_path: Option<String>,
    pub model_name: Option<String>,
    pub override_timeout_sec: Option<f64>,
    pub override_setup_timeout_sec: Option<f64>,
    pub max_timeout_sec: Option<f64>,
    pub kwargs: Map<String, Value>,
    pub env: BTreeMap<String, String>,
    /// Overrides of the job's `llm:` block for this agent.
    pub llm: Option<RawLlm>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawDataset {
    pub path: Option<PathBuf>,
    pub name: Option<String>,
    pub task_names: Option<Vec<String>>,
    pub exclude_task_names: Option<Vec<String>>,
    pub n_tasks: Option<i64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RawTask {
    pub path: Option<PathBuf>,
    pub name: Option<String>,
    pub source: Option<String>,
}
