//! The oracle preflight: every task's own solution, run once with the `oracle` agent as a job of
//! its own (`<job_name>__oracle-preflight`, beside the job), before any model call. Tasks whose
//! solution does not score 1 are named; a job with `preflight: oracle` runs without them, one
//! with `preflight: strict` is refused. `tasks check --oracle` runs the same check alone.

use terminus_actors::resume::StartMode;
use terminus_config::job::{Overrides, PreflightMode};
use terminus_config::{JobPlan, JobSpec};
use terminus_core::layout::JobDir;
use terminus_core::stats::{JobResult, PreflightReport};

use crate::args::TaskCheckArgs;
use crate::{exit, job};

/// For a job with a preflight: its verdict, from the job's own `result.json` when a resumed job
/// recorded one (the job keeps the tasks it started with), else from running the oracle job.
/// A refused job, or an oracle job that could not run, gives the exit code instead.
pub async fn before_job(spec: &JobSpec, mode: &StartMode) -> Result<Option<PreflightReport>, u8> {
    if spec.preflight == PreflightMode::None {
        return Ok(None);
    }
    if matches!(mode, StartMode::Resume { .. })
        && let Some(report) = recorded(spec)
    {
        if report.failed.is_empty() {
            eprintln!("preflight: every task's solution scored 1 when the job started ({})", report.job_dir);
        } else {
            eprintln!("preflight: as when the job started, the job runs without {}", names(&report));
        }
        return Ok(Some(report));
    }
    // A new job checks the tasks as they are now: an earlier preflight's trials (a refused run,
    // a deleted job) are moved aside, never read as this one's.
    let oracle = spec.oracle_preflight();
    if matches!(mode, StartMode::New) {
        set_aside(&oracle.job_dir())?;
    }
    let report = run_oracle(oracle).await?;
    if report.failed.is_empty() {
        eprintln!("preflight: every task's solution scores 1 ({} tasks)", report.n_tasks);
        return Ok(Some(report));
    }
    print_failures(&report);
    if spec.preflight == PreflightMode::Strict {
        eprintln!("error: the job is refused (`preflight: strict`); nothing else was run");
        eprintln!("hint: fix or leave out those tasks, or use `preflight: oracle` to run the job without them");
        return Err(exit::PREFLIGHT);
    }
    if report.failed.len() as u64 == report.n_tasks {
        eprintln!("error: no task is left to run; nothing else was run");
        return Err(exit::PREFLIGHT);
    }
    eprintln!("preflight: the job runs without {}", names(&report));
    Ok(Some(report))
}

/// Moves an earlier oracle job's directory to `<dir>.<time>`, saying so; a directory that
/// cannot be moved stops the command.
fn set_aside(dir: &std::path::Path) -> Result<(), u8> {
    if !dir.exists() {
        return Ok(());
    }
    let stamp = terminus_core::time::now().format("%Y%m%dT%H%M%S");
    let aside = dir.with_file_name(format!("{}.{stamp}", dir.file_name().unwrap_or_default().to_string_lossy()));
    match std::fs::rename(dir, &aside) {
        Ok(()) => {
            eprintln!("preflight: an earlier preflight's trials moved to {}", aside.display());
            Ok(())
        }
        Err(e) => {
            eprintln!("error: cannot move the earlier preflight {} aside: {e}", dir.display());
            Err(exit::INVALID)
        }
    }
}

/// The verdict the job recorded in its `result.json` when it started, if it did.
fn recorded(spec: &JobSpec) -> Option<PreflightReport> {
    let text = std::fs::read_to_string(JobDir::new(spec.job_dir()).result_json()).ok()?;
    serde_json::from_str::<JobResult>(&text).ok()?.preflight
}

/// Runs `oracle` (an oracle job, continued when its directory exists) and judges its trials.
/// An oracle job that was interrupted or could not start gives its exit code.
async fn run_oracle(oracle: JobSpec) -> Result<PreflightReport, u8> {
    let dir = oracle.job_dir();
    let tasks = oracle.task_names();
    let mode = if JobDir::new(&dir).config_json().exists() { StartMode::Resume { only: None } } else { StartMode::New };
    eprintln!("preflight: running the solution of {} tasks ({})", tasks.len(), dir.display());
    let (code, _) = job::run(oracle, JobPlan::new, mode, None).await;
    // Trials with errors are what the preflight looks for; anything else stops the command.
    if code != exit::OK && code != exit::TRIAL_ERRORS {
        eprintln!("error: the oracle preflight did not finish ({})", dir.display());
        return Err(code);
    }
    Ok(PreflightReport::judge(&dir.display().to_string(), &tasks, &job::trial_results(&dir)))
}

fn print_failures(report: &PreflightReport) {
    eprintln!(
        "preflight: {} of {} tasks' solutions do not score 1 (their trials: {}):",
        report.failed.len(),
        report.n_tasks,
        report.job_dir
    );
    let width = report.failed.iter().map(|f| f.task.len()).max().unwrap_or(0);
    for failed in &report.failed {
        eprintln!("  {:width$}  {}", failed.task, failed.reason);
    }
}

fn names(report: &PreflightReport) -> String {
    report.excluded().map(|name| format!("`{name}`")).collect::<Vec<_>>().join(", ")
}

/// `terminus tasks check --oracle`: the tasks of PATHS (or of a registry dataset) run their own
/// solutions once, all under the given concurrency; each task is listed with its verdict. Exit
/// 0 when every solution scores 1, 1 when one does not.
pub async fn tasks_check(args: TaskCheckArgs) -> u8 {
    let overrides = Overrides {
        paths: args.paths.clone(),
        datasets: args.dataset.iter().cloned().collect(),
        registry_path: args.registry.registry_path.clone(),
        registry_url: args.registry.registry_url.clone(),
        repo: args.registry.repo.clone(),
        agent: Some("oracle".into()),
        jobs_dir: Some(args.jobs_dir.clone()),
        job_name: Some(format!("tasks-check__{}", terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S"))),
        n_attempts: Some(1),
        n_concurrent_trials: Some(args.n_concurrent as usize),
        ..Overrides::default()
    };
    let spec = match JobSpec::from_flags(&overrides) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    if let Err(code) = crate::datasets::fetch_tasks(&spec.tasks, spec.quiet).await {
        return code;
    }
    let tasks = spec.task_names();
    let report = match run_oracle(spec).await {
        Ok(report) => report,
        Err(code) => return code,
    };
    let failed: Vec<&str> = report.excluded().collect();
    for task in &tasks {
        match report.failed.iter().find(|f| &f.task == task) {
            Some(failure) => println!("FAILED  {task}: {}", failure.reason),
            None => println!("ok      {task}"),
        }
    }
    println!("oracle trials: {}", report.job_dir);
    println!("{} of {} tasks' solutions score 1", report.n_tasks - failed.len() as u64, report.n_tasks);
    if failed.is_empty() { exit::OK } else { exit::TRIAL_ERRORS }
}
