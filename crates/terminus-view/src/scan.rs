//! Job directories read into the rows the pages show: one [`JobRow`] per job for the list, one
//! [`TrialRow`] per trial for a job's table.
//!
//! What it reads, and what it never reads: a job's row comes from its `config.json` and
//! `result.json` alone (the job result's `reward_stats` give every reward, so the mean's interval
//! needs no trial file); a job's table reads each trial's `result.json` (or `config.json` while it
//! runs) — a few kilobytes each. Trajectories, recordings and logs are opened only on a trial's
//! page. Rows are cached by the size and modification time of the files they come from, so an
//! unchanged job costs one `stat` per file on the next request.
//!
//! Harbor-written directories read the same way: the records are Harbor's; what only terminus
//! writes (the lock, the attempt index) is optional.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;
use terminus_core::error::TrialErrorKind;
use terminus_core::layout::{TrialDir, names};
use terminus_core::lock::JobLock;
use terminus_core::result::TrialResult;
use terminus_core::stats::{self, BudgetStatus, Interval, ScoreConvention, Scores};

use crate::confine::{JobsRoot, is_plain_name};
use crate::error::ViewError;

/// Where a job stands, from its files and its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// A `terminus` holds its lock.
    Running,
    /// Every trial ran (`finished_at` is set).
    Finished,
    /// It stopped dispatching with trials left (too many restarts, a full disk): nothing was
    /// running when it wrote its result last.
    Halted,
    /// Cancelled, or its process died with trials running; `terminus resume` continues it.
    Interrupted,
    /// No readable result yet.
    Unknown,
}

impl JobState {
    /// Its name, as the JSON API spells it.
    pub fn label(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Halted => "halted",
            JobState::Interrupted => "interrupted",
            JobState::Unknown => "unknown",
        }
    }
}

/// One group of Harbor's `evals` (agent × model × dataset).
#[derive(Clone, Debug, Serialize)]
pub struct EvalRow {
    pub key: String,
    pub agent: String,
    pub model: Option<String>,
    pub dataset: String,
    pub n_trials: u64,
    pub n_errors: u64,
    /// The headline mean and pass@k (the job's `score_convention`).
    pub mean: Option<f64>,
    pub pass_at_k: BTreeMap<String, f64>,
    /// The other convention's mean, what it counts and leaves out, and its pass@k (results
    /// written before both were kept have none).
    pub beside: Option<String>,
}

/// A job in the list.
#[derive(Clone, Debug, Serialize)]
pub struct JobRow {
    pub name: String,
    pub state: JobState,
    pub started_at: Option<String>,
    pub updated_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_sec: Option<f64>,
    pub n_total: u64,
    /// Trials with a result (finished, errored or cancelled).
    pub n_completed: u64,
    pub n_errors: u64,
    pub n_cancelled: u64,
    pub n_running: u64,
    pub n_pending: u64,
    /// The headline mean with its interval: under `harbor-0.25` over every completed trial,
    /// errors counted as 0; under `harbor-0.26` over the trials with a valid reward.
    pub mean_reward: Option<Interval>,
    /// Whose rule makes the headline (`harbor-0.25` for a result that names none).
    pub score_convention: ScoreConvention,
    /// Both conventions' scores over every completed trial, when the result holds them.
    pub scores: Option<Scores>,
    /// The other convention's figures, shown beside the headline: `harbor-0.26: 0.667 over 6 of
    /// 8; 2 left out: 1 RateLimitError, 1 no reward`.
    pub beside: Option<String>,
    pub evals: Vec<EvalRow>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    /// The job's budget and its spend (a job with `budget:`), as its result records it.
    pub budget: Option<BudgetStatus>,
    pub agents: Vec<String>,
    pub models: Vec<String>,
    pub datasets: Vec<String>,
    /// Why some of it could not be read.
    pub problem: Option<String>,
}

/// Where a trial stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialState {
    Running,
    /// Finished without an error (whatever its reward).
    Finished,
    Errored,
    Cancelled,
    /// Started, no result, and its job is not running: a resume runs it again.
    Interrupted,
    Unreadable,
}

/// A trial's recorded error, classified.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorCell {
    /// Harbor's exception name (`AgentTimeoutError`).
    pub kind: String,
    /// `infrastructure` (the environment or the orchestrator failed), `agent` (the agent, its
    /// model or the task), or `unknown` (a name terminus does not produce).
    pub class: &'static str,
    pub message: String,
}

/// A trial in a job's table.
#[derive(Clone, Debug, Serialize)]
pub struct TrialRow {
    pub name: String,
    pub task: String,
    pub agent: String,
    pub model: Option<String>,
    /// 1-based; Harbor-written trials get theirs from their order within the task.
    pub attempt: Option<u32>,
    pub state: TrialState,
    pub reward: Option<f64>,
    pub rewards: Option<BTreeMap<String, f64>>,
    /// Harbor 0.26 counts its reward (it has one, and no error spoils it).
    pub reward_valid: bool,
    pub episodes: Option<u64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub duration_sec: Option<f64>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub error: Option<ErrorCell>,
    pub retries: u32,
    pub restarts: u32,
    pub problem: Option<String>,
}

impl TrialRow {
    /// A row with only its identity and state: what is known before any file is read.
    fn blank(name: &str, task: &str, state: TrialState) -> TrialRow {
        TrialRow {
            name: name.into(),
            task: task.into(),
            agent: String::new(),
            model: None,
            attempt: None,
            state,
            reward: None,
            rewards: None,
            reward_valid: false,
            episodes: None,
            input_tokens: None,
            output_tokens: None,
            cache_tokens: None,
            cost_usd: None,
            duration_sec: None,
            started_at: None,
            finished_at: None,
            error: None,
            retries: 0,
            restarts: 0,
            problem: None,
        }
    }

    /// A finished trial of agent `a` with nothing else recorded, for tests.
    #[cfg(test)]
    pub(crate) fn finished_for_test(name: &str, task: &str, attempt: Option<u32>, reward: Option<f64>) -> TrialRow {
        TrialRow {
            agent: "a".into(),
            attempt,
            reward,
            reward_valid: reward.is_some(),
            ..TrialRow::blank(name, task, TrialState::Finished)
        }
    }
}

/// The size and modification time a cached row was read at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp(Option<(SystemTime, u64)>);

fn stamp(path: &Path) -> Stamp {
    Stamp(std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
}

/// What was read from a directory, with the stamps of its `config.json` and `result.json`.
type Cached<T> = Mutex<HashMap<PathBuf, ((Stamp, Stamp), Arc<T>)>>;

/// The jobs directory and what has been read of it.
pub struct Catalog {
    root: JobsRoot,
    jobs: Cached<JobFiles>,
    trials: Cached<TrialRow>,
}

/// A job directory's own two files.
#[derive(Debug, Default)]
pub struct JobFiles {
    pub config: Option<Value>,
    pub result: Option<Value>,
    pub problem: Option<String>,
}

/// The largest JSON file parsed whole (results, configs, rewards: all far smaller, unless a
/// trial's agent inflated one).
const MAX_JSON: u64 = 32 << 20;

/// A JSON file, or why not. Missing is `Ok(None)`; one over [`MAX_JSON`] is not read.
pub fn read_json(path: &Path) -> Result<Option<Value>, String> {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() > MAX_JSON
    {
        return Err(format!(
            "{}: {} MiB, over the {} MiB read for a JSON file",
            path.display(),
            meta.len() >> 20,
            MAX_JSON >> 20
        ));
    }
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

impl Catalog {
    pub fn new(root: JobsRoot) -> Catalog {
        Catalog { root, jobs: Mutex::default(), trials: Mutex::default() }
    }

    pub fn root(&self) -> &JobsRoot {
        &self.root
    }

    /// Every job directory's name (a directory holding a `config.json` or `result.json`).
    pub fn job_names(&self) -> Vec<String> {
        dirs_with_records(self.root.path())
    }

    /// A job's `config.json` and `result.json`, from the cache while they are unchanged.
    pub fn job_files(&self, dir: &Path) -> Arc<JobFiles> {
        let (config_path, result_path) = (dir.join(names::CONFIG_JSON), dir.join(names::RESULT_JSON));
        let key = (stamp(&config_path), stamp(&result_path));
        if let Some((seen, files)) = self.jobs.lock().expect("not poisoned").get(dir)
            && *seen == key
        {
            return files.clone();
        }
        let mut files = JobFiles::default();
        let mut problems = Vec::new();
        match read_json(&config_path) {
            Ok(config) => files.config = config,
            Err(e) => problems.push(e),
        }
        match read_json(&result_path) {
            Ok(result) => files.result = result,
            Err(e) => problems.push(e),
        }
        files.problem = (!problems.is_empty()).then(|| problems.join("; "));
        let files = Arc::new(files);
        self.jobs.lock().expect("not poisoned").insert(dir.to_path_buf(), (key, files.clone()));
        files
    }

    /// A job's row.
    pub fn job_row(&self, name: &str) -> Result<JobRow, ViewError> {
        let dir = self.root.job(name)?;
        let files = self.job_files(&dir);
        Ok(job_row(name, &files, JobLock::is_held(&dir), SystemTime::now()))
    }

    /// Every job's row, newest first.
    pub fn job_rows(&self) -> Vec<JobRow> {
        let mut rows: Vec<JobRow> = self.job_names().iter().filter_map(|name| self.job_row(name).ok()).collect();
        rows.sort_by(|a, b| b.started_at.cmp(&a.started_at).then_with(|| a.name.cmp(&b.name)));
        rows
    }

    /// The names of a job's trial directories.
    pub fn trial_names(&self, job_dir: &Path) -> Vec<String> {
        dirs_with_records(job_dir)
    }

    /// A trial's row; `job_running` decides whether a trial without a result is running or
    /// was interrupted.
    pub fn trial_row(&self, dir: &Path, job_running: bool) -> Arc<TrialRow> {
        let trial = TrialDir::new(dir);
        let key = (stamp(&trial.config_json()), stamp(&trial.result_json()));
        if let Some((seen, row)) = self.trials.lock().expect("not poisoned").get(dir)
            && *seen == key
            && (key.1.0.is_some() || (row.state == TrialState::Running) == job_running)
        {
            return row.clone();
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let row = Arc::new(read_trial_row(&name, &trial, job_running));
        self.trials.lock().expect("not poisoned").insert(dir.to_path_buf(), (key, row.clone()));
        row
    }

    /// Every trial's row of a job, attempts numbered where the files do not say.
    pub fn trial_rows(&self, job_dir: &Path, job_running: bool) -> Vec<TrialRow> {
        let mut rows: Vec<TrialRow> = self
            .trial_names(job_dir)
            .iter()
            .map(|name| (*self.trial_row(&job_dir.join(name), job_running)).clone())
            .collect();
        number_attempts(&mut rows);
        rows
    }
}

/// The plain subdirectories of `dir` that hold a `config.json` or a `result.json` (jobs in a
/// jobs directory, trials in a job), sorted.
fn dirs_with_records(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            (is_plain_name(&name)
                && path.is_dir()
                && (path.join(names::CONFIG_JSON).is_file() || path.join(names::RESULT_JSON).is_file()))
            .then_some(name)
        })
        .collect();
    found.sort();
    found
}

/// Harbor-written trials carry no attempt index: number them within (task, agent, model) in the
/// order they started.
fn number_attempts(rows: &mut [TrialRow]) {
    if rows.iter().all(|r| r.attempt.is_some()) {
        return;
    }
    let mut order: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].attempt.is_none()).collect();
    order.sort_by(|a, b| rows[*a].started_at.cmp(&rows[*b].started_at).then_with(|| rows[*a].name.cmp(&rows[*b].name)));
    let mut next: HashMap<(String, String, Option<String>), u32> = HashMap::new();
    for i in order {
        let counter = next.entry((rows[i].task.clone(), rows[i].agent.clone(), rows[i].model.clone())).or_default();
        *counter += 1;
        rows[i].attempt = Some(*counter);
    }
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(value, |v, key| v.get(key))?.as_str()
}

fn u64_at(value: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(value, |v, key| v.get(key))?.as_u64()
}

fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<f64> {
    let from = terminus_core::time::parse(from?).ok()?;
    let to = terminus_core::time::parse(to?).ok()?;
    Some((to - from).num_milliseconds() as f64 / 1000.0)
}

/// Splits Harbor's eval key `agent__model__dataset` (or `agent__dataset`).
fn split_eval_key(key: &str) -> (String, Option<String>, String) {
    let parts: Vec<&str> = key.split("__").collect();
    match parts.as_slice() {
        [agent, dataset] => (agent.to_string(), None, dataset.to_string()),
        [agent, middle @ .., dataset] if !middle.is_empty() => {
            (agent.to_string(), Some(middle.join("__")), dataset.to_string())
        }
        _ => (key.to_string(), None, String::new()),
    }
}

/// A job's row from its two files.
pub fn job_row(name: &str, files: &JobFiles, lock_held: bool, now: SystemTime) -> JobRow {
    let empty = Value::Null;
    let result = files.result.as_ref().unwrap_or(&empty);
    let config = files.config.as_ref().unwrap_or(&empty);
    let stats = result.get("stats").unwrap_or(&empty);
    let count = |key: &str| u64_at(stats, &[key]).unwrap_or(0);
    let (n_completed, n_running, n_pending) =
        (count("n_completed_trials"), count("n_running_trials"), count("n_pending_trials"));
    let n_total = u64_at(result, &["n_total_trials"]).unwrap_or(0);
    let started_at = str_at(result, &["started_at"]).map(str::to_string);
    let finished_at = str_at(result, &["finished_at"]).map(str::to_string);
    let updated_at = str_at(result, &["updated_at"]).map(str::to_string);
    let state = if lock_held {
        JobState::Running
    } else if files.result.is_none() {
        JobState::Unknown
    } else if finished_at.is_some() {
        JobState::Finished
    } else if n_running == 0 && n_pending > 0 && count("n_cancelled_trials") == 0 {
        JobState::Halted
    } else {
        JobState::Interrupted
    };
    let duration_sec =
        job_duration(state, started_at.as_deref(), finished_at.as_deref().or(updated_at.as_deref()), now);
    let convention: ScoreConvention =
        stats.get("score_convention").and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default();
    let scores: Option<Scores> = stats.get("scores").and_then(|s| serde_json::from_value(s.clone()).ok());
    let mut evals = Evals::of(stats, convention);
    // Harbor 0.25's mean counts the completed trials without a reward as 0; `reward_stats`
    // names only the trials 0.26 counts under its rule.
    if convention == ScoreConvention::Harbor025 {
        let rewarded = evals.rewards.len() as u64;
        evals.rewards.extend(std::iter::repeat_n(0.0, n_completed.saturating_sub(rewarded) as usize));
    }
    evals.name_from_config(config);
    let cost_usd = stats.get("cost_usd").and_then(Value::as_f64);
    JobRow {
        name: name.to_string(),
        state,
        started_at,
        updated_at,
        finished_at,
        duration_sec,
        n_total,
        n_completed,
        n_errors: count("n_errored_trials"),
        n_cancelled: count("n_cancelled_trials"),
        n_running,
        n_pending,
        mean_reward: stats::mean_interval(&evals.rewards),
        beside: scores.as_ref().map(|s| beside(s, convention, false)),
        score_convention: convention,
        scores,
        evals: evals.rows,
        input_tokens: u64_at(stats, &["n_input_tokens"]),
        output_tokens: u64_at(stats, &["n_output_tokens"]),
        cache_tokens: u64_at(stats, &["n_cache_tokens"]),
        cost_usd,
        budget: result.get("budget").and_then(|b| serde_json::from_value(b.clone()).ok()),
        agents: evals.agents.into_iter().collect(),
        models: evals.models.into_iter().collect(),
        datasets: evals.datasets.into_iter().collect(),
        problem: files.problem.clone(),
    }
}

/// How long a job has run: until `now` while it runs, else from its start to `ended_at` (its
/// end, or its result's last update).
fn job_duration(state: JobState, started_at: Option<&str>, ended_at: Option<&str>, now: SystemTime) -> Option<f64> {
    match state {
        JobState::Running => started_at.and_then(|s| {
            let started = terminus_core::time::parse(s).ok()?;
            let now: terminus_core::time::Timestamp = now.into();
            Some((now - started).num_milliseconds() as f64 / 1000.0)
        }),
        _ => seconds_between(started_at, ended_at),
    }
}

/// What a job result's `evals` say: the rewards of its rewarded trials, a row per group, and
/// the agents, models and datasets the groups name.
#[derive(Default)]
struct Evals {
    rewards: Vec<f64>,
    rows: Vec<EvalRow>,
    agents: BTreeSet<String>,
    models: BTreeSet<String>,
    datasets: BTreeSet<String>,
}

impl Evals {
    /// Every completed trial's reward, from the job result alone: the rewarded trials are named
    /// under `reward_stats.reward` (the others count 0, as in Harbor's mean, and are the
    /// caller's to add).
    fn of(stats: &Value, convention: ScoreConvention) -> Evals {
        let mut evals = Evals::default();
        if let Some(groups) = stats.get("evals").and_then(Value::as_object) {
            for (key, eval) in groups {
                if let Some(by_value) = eval.pointer("/reward_stats/reward").and_then(Value::as_object) {
                    for (value, trials) in by_value {
                        if let Ok(value) = value.parse::<f64>() {
                            let n = trials.as_array().map_or(0, Vec::len);
                            evals.rewards.extend(std::iter::repeat_n(value, n));
                        }
                    }
                }
                let row = eval_row(key, eval, convention);
                evals.agents.insert(row.agent.clone());
                if let Some(model) = &row.model {
                    evals.models.insert(model.clone());
                }
                evals.datasets.insert(row.dataset.clone());
                evals.rows.push(row);
            }
        }
        evals
    }

    /// Before any trial finished, the facets come from the job file: its agents, models and
    /// datasets, each where the results name none.
    fn name_from_config(&mut self, config: &Value) {
        for agent in config.get("agents").and_then(Value::as_array).into_iter().flatten() {
            if self.agents.is_empty()
                && let Some(name) = agent.get("name").and_then(Value::as_str)
            {
                self.agents.insert(name.to_string());
            }
            if let Some(model) = agent.get("model_name").and_then(Value::as_str)
                && self.models.is_empty()
            {
                self.models.insert(terminus_core::result::ModelInfo::from_model_name(model).name);
            }
        }
        if self.datasets.is_empty() {
            for dataset in config.get("datasets").and_then(Value::as_array).into_iter().flatten() {
                let name = dataset.get("name").and_then(Value::as_str).map(str::to_string).or_else(|| {
                    let path = dataset.get("path").and_then(Value::as_str)?;
                    Path::new(path).file_name().map(|n| n.to_string_lossy().into_owned())
                });
                self.datasets.extend(name);
            }
        }
    }
}

/// What the headline leaves out, if anything, then the other convention's figures of `scores`:
/// `over 8 of 18; 10 left out: … · harbor-0.25: 0.389`, with the other's pass@k when
/// `with_pass_at_k`.
fn beside(scores: &Scores, headline: ScoreConvention, with_pass_at_k: bool) -> String {
    let counted = stats::counted_text(scores.get(headline));
    let other = scores.get(headline.other());
    let mut text = if counted.is_empty() { String::new() } else { format!("{counted} · ") };
    text.push_str(&format!("{}: {}", headline.other().name(), stats::score_text(other)));
    if with_pass_at_k && !other.pass_at_k.is_empty() {
        let mut ks: Vec<(u64, f64)> = other.pass_at_k.iter().filter_map(|(k, v)| Some((k.parse().ok()?, *v))).collect();
        ks.sort_by_key(|(k, _)| *k);
        let ks: Vec<String> = ks.iter().map(|(k, v)| format!("@{k} {v:.2}")).collect();
        text.push_str(&format!("; pass {}", ks.join(" · ")));
    }
    text
}

/// The row of one group of `evals`, under its key.
fn eval_row(key: &str, eval: &Value, convention: ScoreConvention) -> EvalRow {
    let (agent, model, dataset) = split_eval_key(key);
    let scores: Option<Scores> = eval.get("scores").and_then(|s| serde_json::from_value(s.clone()).ok());
    EvalRow {
        key: key.to_string(),
        agent,
        model,
        dataset,
        n_trials: u64_at(eval, &["n_trials"]).unwrap_or(0),
        n_errors: u64_at(eval, &["n_errors"]).unwrap_or(0),
        mean: eval
            .get("metrics")
            .and_then(Value::as_array)
            .and_then(|m| m.iter().find_map(|m| m.get("mean")?.as_f64())),
        pass_at_k: eval
            .get("pass_at_k")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect())
            .unwrap_or_default(),
        beside: scores.as_ref().map(|s| beside(s, convention, true)),
    }
}

/// Classifies an error by terminus's kind name (else, in Harbor's records, the exception name).
pub fn error_class(kind: &str) -> &'static str {
    match TrialErrorKind::from_name(kind) {
        Some(kind) if kind.is_infrastructure() => "infrastructure",
        Some(_) => "agent",
        None => "unknown",
    }
}

/// The first line of a message, at most 300 characters.
fn headline(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

fn read_trial_row(name: &str, trial: &TrialDir, job_running: bool) -> TrialRow {
    let task = name.rsplit_once("__").map_or(name, |(task, _)| task);
    let state = if job_running { TrialState::Running } else { TrialState::Interrupted };
    let mut row = TrialRow::blank(name, task, state);
    // Who it is comes from the config, which exists from the trial's start.
    match read_json(&trial.config_json()) {
        Ok(Some(config)) => {
            if let Some(task) = str_at(&config, &["task", "path"]).and_then(|p| Path::new(p).file_name()) {
                row.task = task.to_string_lossy().into_owned();
            }
            row.agent = str_at(&config, &["agent", "name"]).unwrap_or_default().to_string();
            // As the result will name it: `openai/gpt-4o` is model `gpt-4o`.
            row.model = str_at(&config, &["agent", "model_name"])
                .map(|m| terminus_core::result::ModelInfo::from_model_name(m).name);
            row.attempt = u64_at(&config, &["attempt"]).map(|a| a as u32 + 1);
        }
        Ok(None) => {}
        Err(e) => row.problem = Some(e),
    }
    let text = match std::fs::read(trial.result_json()) {
        Ok(text) => text,
        Err(_) => return row,
    };
    let result: TrialResult = match serde_json::from_slice(&text) {
        Ok(result) => result,
        Err(e) => {
            row.state = TrialState::Unreadable;
            row.problem = Some(format!("result.json: {e}"));
            return row;
        }
    };
    row.task = result.task_name.clone();
    row.agent = result.agent_info.name.clone();
    if let Some(model) = &result.agent_info.model_info {
        row.model = Some(model.name.clone());
    }
    row.reward = result.reward();
    row.rewards = result.verifier_result.as_ref().and_then(|v| v.rewards.clone());
    row.reward_valid = result.reward_valid();
    let (mut input, mut output, mut cache, mut cost, mut episodes) = (None, None, None, None, None);
    for agent in result.agent_results() {
        let add = |total: &mut Option<u64>, value: Option<u64>| {
            if let Some(value) = value {
                *total.get_or_insert(0) += value;
            }
        };
        add(&mut input, agent.n_input_tokens);
        add(&mut output, agent.n_output_tokens);
        add(&mut cache, agent.n_cache_tokens);
        add(&mut episodes, agent.metadata.as_ref().and_then(|m| m.get("n_episodes")).and_then(Value::as_u64));
        if let Some(c) = agent.cost_usd {
            *cost.get_or_insert(0.0) += c;
        }
    }
    (row.input_tokens, row.output_tokens, row.cache_tokens, row.cost_usd, row.episodes) =
        (input, output, cache, cost, episodes);
    row.started_at = result.started_at.as_ref().map(terminus_core::time::iso);
    row.finished_at = result.finished_at.as_ref().map(terminus_core::time::iso);
    row.duration_sec = match (&result.started_at, &result.finished_at) {
        (Some(a), Some(b)) => Some((*b - *a).num_milliseconds() as f64 / 1000.0),
        _ => None,
    };
    row.retries = result.retries;
    row.restarts = result.restarts;
    row.error = result.recorded_errors().next().map(|info| ErrorCell {
        kind: info.kind.clone().unwrap_or_else(|| info.exception_type.clone()),
        class: error_class(info.kind.as_deref().unwrap_or(&info.exception_type)),
        message: headline(&info.exception_message),
    });
    row.state = match &row.error {
        _ if result.is_cancelled() => TrialState::Cancelled,
        Some(_) => TrialState::Errored,
        None => TrialState::Finished,
    };
    row
}

/// One cell of the task × attempt grid.
#[derive(Clone, Debug, Serialize)]
pub struct GridCell {
    pub trial: String,
    pub state: TrialState,
    pub reward: Option<f64>,
}

/// One row of the grid: a task (with its agent and model when a job has several).
#[derive(Clone, Debug, Serialize)]
pub struct GridRow {
    pub task: String,
    pub agent: String,
    pub model: Option<String>,
    /// By attempt (index 0 = attempt 1); `None` where that attempt has no directory yet.
    pub cells: Vec<Option<GridCell>>,
    /// The headline mean: under `harbor-0.25` over its completed trials, errors as 0; under
    /// `harbor-0.26` over those with a valid reward.
    pub mean: Option<f64>,
    /// The other convention's mean.
    pub mean_beside: Option<f64>,
    /// pass@k for k = 1..n over the trials the headline counts; empty when a reward is not 0
    /// or 1.
    pub pass_at_k: BTreeMap<String, f64>,
}

/// Errors of one kind.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorGroup {
    pub kind: String,
    pub class: &'static str,
    pub trials: Vec<String>,
    /// The first trial's message.
    pub example: String,
}

/// The mean and pass@k of one task's completed trials under `convention`.
fn task_score(done: &[&&TrialRow], convention: ScoreConvention) -> (Option<f64>, BTreeMap<String, f64>) {
    let counted: Vec<&&&TrialRow> = match convention {
        ScoreConvention::Harbor025 => done.iter().collect(),
        ScoreConvention::Harbor026 => done.iter().filter(|t| t.reward_valid).collect(),
    };
    let mean = (!counted.is_empty())
        .then(|| counted.iter().map(|t| t.reward.unwrap_or(0.0)).sum::<f64>() / counted.len() as f64);
    let binary = counted.iter().all(|t| matches!(t.reward, None | Some(0.0) | Some(1.0)));
    let n = counted.len() as u64;
    let c = counted.iter().filter(|t| t.reward == Some(1.0)).count() as u64;
    let pass_at_k = if binary && n > 0 {
        (1..=n).map(|k| (k.to_string(), stats::pass_at_k(n, c, k))).collect()
    } else {
        BTreeMap::new()
    };
    (mean, pass_at_k)
}

/// The task × attempt grid of a job's trials, its figures by `convention` (the other's mean
/// beside).
pub fn grid(rows: &[TrialRow], convention: ScoreConvention) -> (u32, Vec<GridRow>) {
    let n_attempts = rows.iter().filter_map(|r| r.attempt).max().unwrap_or(0);
    let mut by_key: BTreeMap<(String, String, Option<String>), Vec<&TrialRow>> = BTreeMap::new();
    for row in rows {
        by_key.entry((row.task.clone(), row.agent.clone(), row.model.clone())).or_default().push(row);
    }
    let grid = by_key
        .into_iter()
        .map(|((task, agent, model), trials)| {
            let mut cells = vec![None; n_attempts as usize];
            for trial in &trials {
                if let Some(attempt) = trial.attempt.filter(|a| *a >= 1) {
                    cells[attempt as usize - 1] =
                        Some(GridCell { trial: trial.name.clone(), state: trial.state, reward: trial.reward });
                }
            }
            let done: Vec<&&TrialRow> = trials
                .iter()
                .filter(|t| matches!(t.state, TrialState::Finished | TrialState::Errored | TrialState::Cancelled))
                .collect();
            let (mean, pass_at_k) = task_score(&done, convention);
            let (mean_beside, _) = task_score(&done, convention.other());
            GridRow { task, agent, model, cells, mean, mean_beside, pass_at_k }
        })
        .collect();
    (n_attempts, grid)
}

/// A job's errors grouped by kind, most frequent first.
pub fn error_groups(rows: &[TrialRow]) -> Vec<ErrorGroup> {
    let mut groups: BTreeMap<String, ErrorGroup> = BTreeMap::new();
    for row in rows {
        if let Some(error) = &row.error {
            groups
                .entry(error.kind.clone())
                .or_insert_with(|| ErrorGroup {
                    kind: error.kind.clone(),
                    class: error.class,
                    trials: Vec::new(),
                    example: error.message.clone(),
                })
                .trials
                .push(row.name.clone());
        }
    }
    let mut groups: Vec<ErrorGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.trials.len().cmp(&a.trials.len()).then_with(|| a.kind.cmp(&b.kind)));
    groups
}

#[cfg(test)]
mod tests;
