//! `trials replay` and `jobs regrade`: recorded trials run again in fresh containers, their
//! model's recorded replies read back instead of asking any model (so no key is needed), then
//! graded. Each replay is a new trial with `replay_of` naming the original and a `replay.json`
//! comparing what its model was shown, episode by episode, with the recording; a regrade also
//! writes `regrade.json`, the rewards that changed per task. Originals are never written to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use terminus_actors::resume::StartMode;
use terminus_config::job::Overrides;
use terminus_config::{JobPlan, JobSpec};
use terminus_core::layout::{JobDir, TrialDir};
use terminus_core::replay::{self, RegradeReport, ReplayReport};
use terminus_core::result::TrialResult;

use crate::args::{RegradeArgs, TrialReplayArgs};
use crate::exit::invalid;
use crate::tasks_from::TasksFrom;
use crate::{exit, job};

/// What identifies a trial across runs of its job: the task's identity, agent index, attempt.
type TrialKey = (String, usize, u32);

/// A recorded trial: its result and its key, or why it cannot be replayed.
fn recorded(dir: &Path) -> Result<(TrialResult, TrialKey), String> {
    let trial = TrialDir::new(dir);
    let text = std::fs::read_to_string(trial.result_json())
        .map_err(|e| format!("`{}` is not a finished trial (its result.json: {e})", dir.display()))?;
    let result: TrialResult = serde_json::from_str(&text)
        .map_err(|e| format!("`{}` is not a trial result: {e}", trial.result_json().display()))?;
    let key = result.config.trial_key().ok_or_else(|| {
        format!("`{}` was not run by terminus (its config has no agent index or attempt)", dir.display())
    })?;
    Ok((result, key))
}

/// The job `job_dir` recorded, to run again in `new_job_dir`.
fn job_of(job_dir: &Path, new_job_dir: &Path) -> Result<JobSpec, String> {
    let mut spec = JobSpec::from_job_dir(job_dir, &Overrides::default()).map_err(|e| e.to_string())?;
    let name = std::path::absolute(new_job_dir).ok().and_then(|p| p.file_name().map(|n| n.to_owned()));
    if name.is_none() {
        return Err(format!("`{}` cannot be a job directory", new_job_dir.display()));
    }
    spec.relocate(new_job_dir);
    // Nothing of the original job's own preflight: its trials are replayed as they ran.
    spec.preflight = terminus_config::job::PreflightMode::None;
    if let serde_json::Value::Object(raw) = &mut spec.raw {
        raw.remove("preflight");
    }
    Ok(spec)
}

/// `--tasks-from DIR`: the task directory of each trial to replay, found in DIR by the name its
/// result records; the first task DIR lacks or holds twice is the error.
fn tasks_from(
    dir: &Path,
    originals: &HashMap<TrialKey, (PathBuf, String)>,
) -> Result<HashMap<TrialKey, PathBuf>, String> {
    let index = TasksFrom::index(dir)?;
    let names: std::collections::BTreeSet<&str> = originals.values().map(|(_, name)| name.as_str()).collect();
    index.check(names)?;
    originals.iter().map(|(key, (_, name))| Ok((key.clone(), index.find(name)?.to_path_buf()))).collect()
}

/// Runs the trials of `spec` that `originals` names, each replaying its recorded trial (its
/// task from `task_dirs` when given); a regrade's result names the job it regrades.
async fn run_replays(
    spec: JobSpec,
    originals: HashMap<TrialKey, (PathBuf, String)>,
    task_dirs: Option<HashMap<TrialKey, PathBuf>>,
    regrade_of: Option<PathBuf>,
) -> u8 {
    let mode = if JobDir::new(spec.job_dir()).config_json().exists() {
        StartMode::Resume { only: None }
    } else {
        StartMode::New
    };
    // Tasks from git come from the task cache, fetched again where it lacks them.
    if task_dirs.is_none()
        && let Err(code) = crate::datasets::fetch_tasks(&spec.tasks, spec.quiet).await
    {
        return code;
    }
    let plan = move |spec: JobSpec| {
        let mut plan = JobPlan::new(spec);
        plan.trials.retain_mut(|trial| {
            let key = trial.key();
            let Some((original, _)) = originals.get(&key) else { return false };
            trial.replay_of = Some(original.clone());
            if let Some(dir) = task_dirs.as_ref().and_then(|dirs| dirs.get(&key)) {
                trial.task.path = dir.clone();
            }
            true
        });
        match regrade_of {
            Some(original) => plan.regrading(original),
            None => plan,
        }
    };
    job::run(spec, plan, mode, None).await.0
}

/// Compares each replay in `job_dir` with the trial it replays and writes its `replay.json`;
/// returns (original, replay, report) per replay.
fn compare_replays(job_dir: &Path) -> Vec<(TrialResult, TrialResult, ReplayReport)> {
    let mut compared = Vec::new();
    for result in job::trial_results(job_dir) {
        let Some(original_dir) = result.replay_of.clone() else { continue };
        let Ok((original, _)) = recorded(Path::new(&original_dir)) else { continue };
        let steps: Vec<String> = original.step_results.iter().flatten().map(|s| s.step_name.clone()).collect();
        let new_dir = TrialDir::new(job_dir.join(result.trial_name.to_string()));
        let report = replay::compare(
            &original_dir,
            &replay::trial_prompts(&TrialDir::new(&original_dir), &steps),
            &replay::trial_prompts(&new_dir, &steps),
        );
        let path = new_dir.path().join("replay.json");
        if let Err(e) = std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap_or_default()) {
            eprintln!("warning: could not write {}: {e}", path.display());
        }
        compared.push((original, result, report));
    }
    compared
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn reward_text(result: &TrialResult) -> String {
    match (&result.exception_info, result.reward()) {
        (Some(e), _) => format!("error {}: {}", e.exception_type, e.exception_message.lines().next().unwrap_or("")),
        (None, Some(r)) => format!("{r}"),
        (None, None) => "none".into(),
    }
}

/// `terminus trials replay TRIAL_DIR [-o OUT] [--tasks-from DIR]`.
pub async fn trial(args: TrialReplayArgs) -> u8 {
    let trial_dir = std::path::absolute(&args.trial_dir).unwrap_or(args.trial_dir.clone());
    let (original, key) = match recorded(&trial_dir) {
        Ok(found) => found,
        Err(e) => return invalid(e),
    };
    let Some(job_dir) = trial_dir.parent() else { return invalid("the trial directory has no job directory") };
    let stamp = terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S");
    let new_job = args.output.join(format!("{}__replay-{stamp}", original.trial_name));
    let spec = match job_of(job_dir, &new_job) {
        Ok(spec) => spec,
        Err(e) => return invalid(e),
    };
    if !JobPlan::new(spec.clone()).trials.iter().any(|t| t.key() == key) {
        return invalid(format!(
            "`{}`: its task, agent and attempt are no longer in its job's configuration (`{}`)",
            trial_dir.display(),
            JobDir::new(job_dir).config_json().display()
        ));
    }
    let originals = HashMap::from([(key, (trial_dir.clone(), original.task_name.clone()))]);
    let task_dirs = match args.tasks_from.as_deref().map(|dir| tasks_from(dir, &originals)).transpose() {
        Ok(dirs) => dirs,
        Err(e) => return invalid(e),
    };
    let code = run_replays(spec, originals, task_dirs, None).await;
    let compared = compare_replays(&new_job);
    let Some((original, replayed, report)) = compared.first() else {
        eprintln!("error: the replay left no result in {}", new_job.display());
        return if code == exit::OK { exit::TRIAL_ERRORS } else { code };
    };
    println!("replay of {}", trial_dir.display());
    println!("replay:   {}", new_job.join(replayed.trial_name.to_string()).display());
    println!("reward:   {} (recorded: {})", reward_text(replayed), reward_text(original));
    print_report(report);
    code
}

fn print_report(report: &ReplayReport) {
    match &report.first_divergence {
        None => println!("prompts:  all {} episodes match the recording", report.n_episodes),
        Some(d) => {
            let step = d.step.as_ref().map(|s| format!("step {s}, ")).unwrap_or_default();
            println!(
                "prompts:  {} of {} episodes match; the first divergence is at {step}episode {}",
                report.n_matching, report.n_episodes, d.episode
            );
            println!("--- recorded (last lines)\n{}", tail(&d.recorded, 20));
            println!("--- replayed (last lines)\n{}", tail(&d.replayed, 20));
        }
    }
}

/// `terminus jobs regrade JOB_DIR [-o NEW_JOB] [--tasks-from DIR] [-n N]`.
pub async fn regrade(args: RegradeArgs) -> u8 {
    let job_dir = std::path::absolute(&args.job_dir).unwrap_or(args.job_dir.clone());
    if !JobDir::new(&job_dir).config_json().is_file() {
        return invalid(format!("`{}` is not a job directory (it has no config.json)", job_dir.display()));
    }
    let new_job = args.output.clone().unwrap_or_else(|| {
        let stamp = terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S");
        let name = job_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        job_dir.with_file_name(format!("{name}__regrade-{stamp}"))
    });
    if let Err(e) = check_regrade_dir(&job_dir, &new_job) {
        return invalid(e);
    }
    let mut spec = match job_of(&job_dir, &new_job) {
        Ok(spec) => spec,
        Err(e) => return invalid(e),
    };
    if let Some(n) = args.n_concurrent {
        spec.n_concurrent_trials = n as usize;
    }
    // Trials that finished without an error are replayed; the others are named.
    let mut originals = HashMap::new();
    let mut report = RegradeReport { regrade_of: job_dir.display().to_string(), ..RegradeReport::default() };
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(&job_dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    entries.sort();
    for dir in entries.iter().filter(|p| TrialDir::new(p).config_json().is_file()) {
        match recorded(dir) {
            Ok((result, key)) if result.exception_info.is_none() && result.error_kind().is_none() => {
                originals.insert(key, (dir.clone(), result.task_name.clone()));
            }
            Ok((result, _)) => report.not_regraded.push(result.trial_name.to_string()),
            Err(_) => report.not_regraded.push(dir.file_name().unwrap_or_default().to_string_lossy().into_owned()),
        }
    }
    if originals.is_empty() {
        return invalid(format!("`{}` has no trial that finished without an error to regrade", job_dir.display()));
    }
    let task_dirs = match args.tasks_from.as_deref().map(|dir| tasks_from(dir, &originals)).transpose() {
        Ok(dirs) => dirs,
        Err(e) => return invalid(e),
    };
    let code = run_replays(spec, originals, task_dirs, Some(job_dir.clone())).await;
    let compared = compare_replays(&new_job);
    let mut diverged = 0;
    for (original, regraded, replay) in &compared {
        report.add(original, regraded, replay.first_divergence.is_some());
        diverged += usize::from(replay.first_divergence.is_some());
    }
    let path = new_job.join("regrade.json");
    if let Err(e) = std::fs::write(&path, serde_json::to_vec_pretty(&report).unwrap_or_default()) {
        eprintln!("warning: could not write {}: {e}", path.display());
    }
    print_regrade(&report, compared.len(), diverged, &new_job);
    code
}

/// A regrade goes into a new directory, or continues its own earlier run: never into the job it
/// regrades, nor into another job.
fn check_regrade_dir(job_dir: &Path, new_job: &Path) -> Result<(), String> {
    let new_abs = std::path::absolute(new_job).unwrap_or(new_job.to_path_buf());
    if new_abs == job_dir {
        return Err("-o names the job being regraded; a regrade writes a new job directory".into());
    }
    if !new_abs.exists() {
        return Ok(());
    }
    let result: Option<terminus_core::stats::JobResult> =
        std::fs::read_to_string(JobDir::new(&new_abs).result_json()).ok().and_then(|t| serde_json::from_str(&t).ok());
    match result.and_then(|r| r.regrade_of) {
        Some(of) if Path::new(&of) == job_dir => Ok(()),
        _ => Err(format!(
            "`{}` exists and is not a regrade of `{}`: give -o a new directory",
            new_abs.display(),
            job_dir.display()
        )),
    }
}

fn print_regrade(report: &RegradeReport, n_replayed: usize, diverged: usize, new_job: &Path) {
    println!("regrade of {} → {}", report.regrade_of, new_job.display());
    let width = report.tasks.keys().map(String::len).max().unwrap_or(4).max(4);
    println!("  {:width$}  trials  flipped  up  down  errors  diverged", "task");
    for (task, flips) in &report.tasks {
        println!(
            "  {task:width$}  {:>6}  {:>7}  {:>2}  {:>4}  {:>6}  {:>8}",
            flips.n_trials,
            flips.n_flipped(),
            flips.n_up,
            flips.n_down,
            flips.n_errors,
            flips.n_diverged
        );
    }
    let flipped: u64 = report.tasks.values().map(|f| f.n_flipped()).sum();
    println!(
        "{flipped} of {n_replayed} rewards changed; {diverged} replays diverged from their recording (replay.json in each)"
    );
    if !report.not_regraded.is_empty() {
        println!("not regraded (ended with an error or unfinished): {}", report.not_regraded.join(", "));
    }
}
