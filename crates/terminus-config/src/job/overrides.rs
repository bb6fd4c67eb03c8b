//! Command-line values that replace a job file's.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::raw::{RawAgent, RawDataset, RawJob, RawTask};
use crate::task::Task;

/// Command-line values that replace the file's.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub job_name: Option<String>,
    pub jobs_dir: Option<PathBuf>,
    pub n_concurrent_trials: Option<usize>,
    pub n_attempts: Option<u32>,
    pub quiet: Option<bool>,
    /// `-p`: task or dataset directories; they replace the file's `tasks` and `datasets`.
    pub paths: Vec<PathBuf>,
    /// `-d NAME[@VERSION]`: registry datasets; with `-p`, they replace the file's `tasks` and
    /// `datasets`.
    pub datasets: Vec<String>,
    /// `--registry-path` / `--registry-url`: the registry of every dataset given by name.
    pub registry_path: Option<PathBuf>,
    pub registry_url: Option<String>,
    /// `--repo`: a git repository whose registry lists every dataset given by name.
    pub repo: Option<String>,
    /// `-t` / `-x`: task-name globs applied to every dataset.
    pub include_tasks: Vec<String>,
    pub exclude_tasks: Vec<String>,
    /// `-a`: replaces the agents (one per `-m` model, or one without a model).
    pub agent: Option<String>,
    /// `-m`: with `-a`, one agent per model; without, the model of every configured agent.
    pub models: Vec<String>,
    /// `--ak key=value`: merged into every agent's kwargs (values parsed as JSON when they can be).
    pub agent_kwargs: Vec<(String, Value)>,
    pub force_build: Option<bool>,
    /// `--skip-credential-checks`.
    pub skip_credential_checks: bool,
    /// `--preflight[=strict]`.
    pub preflight: Option<super::spec::PreflightMode>,
    /// `--max-cost-usd` / `--max-tokens`: the job's budget, in place of the file's.
    pub budget_cost_usd: Option<f64>,
    pub budget_tokens: Option<u64>,
}

impl Overrides {
    /// These overrides, with `jobs_dir` and `job_name` pointing at `job_dir`.
    pub fn placed_at(mut self, job_dir: &Path) -> Overrides {
        let abs = std::path::absolute(job_dir).unwrap_or_else(|_| job_dir.to_path_buf());
        self.job_name = abs.file_name().map(|n| n.to_string_lossy().into_owned());
        self.jobs_dir = abs.parent().map(Path::to_path_buf);
        self
    }

    /// Applies the command-line values to the file's.
    pub(super) fn apply(&self, raw: &mut RawJob) {
        if !self.paths.is_empty() || !self.datasets.is_empty() {
            raw.tasks.clear();
            raw.datasets.clear();
            for path in &self.paths {
                if Task::is_task_dir(path) {
                    raw.tasks.push(RawTask { path: Some(path.clone()), ..Default::default() });
                } else {
                    raw.datasets.push(RawDataset { path: Some(path.clone()), ..Default::default() });
                }
            }
            for named in &self.datasets {
                let (name, version) = match named.split_once('@') {
                    Some((name, version)) => (name, Some(version.to_string())),
                    None => (named.as_str(), None),
                };
                raw.datasets.push(RawDataset { name: Some(name.to_string()), version, ..Default::default() });
            }
        }
        if self.registry_path.is_some() || self.registry_url.is_some() || self.repo.is_some() {
            for dataset in raw.datasets.iter_mut().filter(|d| d.name.is_some()) {
                dataset.registry_path = self.registry_path.clone();
                dataset.registry_url = self.registry_url.clone();
                dataset.repo = self.repo.clone();
                dataset.registry = None;
            }
        }
        for dataset in &mut raw.datasets {
            if !self.include_tasks.is_empty() {
                dataset.task_names = Some(self.include_tasks.clone());
            }
            if !self.exclude_tasks.is_empty() {
                dataset.exclude_task_names = Some(self.exclude_tasks.clone());
            }
        }
        if let Some(agent) = &self.agent {
            let models: Vec<Option<String>> =
                if self.models.is_empty() { vec![None] } else { self.models.iter().cloned().map(Some).collect() };
            raw.agents = Some(
                models
                    .into_iter()
                    .map(|model_name| RawAgent { name: Some(agent.clone()), model_name, ..RawAgent::default() })
                    .collect(),
            );
        } else if let Some(model) = self.models.first() {
            for agent in raw.agents.iter_mut().flatten() {
                agent.model_name = Some(model.clone());
            }
        }
        for agent in raw.agents.iter_mut().flatten() {
            for (key, value) in &self.agent_kwargs {
                agent.kwargs.insert(key.clone(), value.clone());
            }
        }
        if let Some(force_build) = self.force_build {
            raw.environment.force_build = force_build;
        }
        if self.skip_credential_checks {
            raw.skip_credential_checks = Some(true);
        }
        // `none` is the default: left out, a job run with and without it is the same job.
        match self.preflight {
            Some(super::spec::PreflightMode::None) => raw.preflight = None,
            Some(mode) => raw.preflight = Some(mode.name().to_string()),
            None => {}
        }
        if self.budget_cost_usd.is_some() || self.budget_tokens.is_some() {
            let budget = raw.budget.get_or_insert_with(Default::default);
            if let Some(cost) = self.budget_cost_usd {
                budget.max_cost_usd = Some(cost);
            }
            if let Some(tokens) = self.budget_tokens {
                budget.max_tokens = Some(tokens.min(i64::MAX as u64) as i64);
            }
        }
    }
}
