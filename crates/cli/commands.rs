//! The subcommands. Each returns an exit code (see `main.rs`).

use std::path::{Path, PathBuf};

use terminus_actors::lock::{JobLock, host_identity};
use terminus_actors::resume::{Only, StartMode};
use terminus_config::job::{Overrides, PreflightMode};
use terminus_config::{ConfigError, JobPlan, JobSpec, Task};
use terminus_core::layout::JobDir;
use terminus_core::stats::{JobResult, JobStats, JobSummary, LiveCounts};
use terminus_llm::preflight;
use terminus_sandbox::{Engine, ImageBuilder, LABEL_HOST, LABEL_JOB_DIR, LABEL_JOB_ID, LABEL_PID};

use crate::args::{
    GcArgs, ImportHarborArgs, JobFlags, OnlyArg, PreflightArg, ResumeArgs, RunArgs, SummarizeArgs, TaskCheckArgs,
    TrialStartArgs, ViewArgs, ViewFlags,
};
use crate::exit;
use crate::exit::invalid;
use crate::job;
use crate::reporter;

/// `--ak key=value`, the value read as JSON when it parses, else as a string.
fn parse_kwargs(pairs: &[String]) -> Result<Vec<(String, serde_json::Value)>, String> {
    pairs
        .iter()
        .map(|pair| {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("--ak {pair:?}: expected KEY=VALUE"))?;
            let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
            Ok((key.trim().to_string(), value))
        })
        .collect()
}

impl JobFlags {
    fn overrides(&self) -> Result<Overrides, String> {
        Ok(Overrides {
            job_name: self.job_name.clone(),
            jobs_dir: self.jobs_dir.clone(),
            n_concurrent_trials: self.n_concurrent,
            n_attempts: self.n_attempts,
            quiet: self.quiet.then_some(true),
            paths: self.paths.clone(),
            datasets: self.datasets.clone(),
            registry_path: self.registry.registry_path.clone(),
            registry_url: self.registry.registry_url.clone(),
            repo: self.registry.repo.clone(),
            include_tasks: self.include.clone(),
            exclude_tasks: self.exclude.clone(),
            agent: self.agent.clone(),
            models: self.models.clone(),
            agent_kwargs: parse_kwargs(&self.agent_kwargs)?,
            force_build: self.force_build.then_some(true),
            skip_credential_checks: self.skip_credential_checks,
            preflight: self.preflight.map(|mode| match mode {
                PreflightArg::None => PreflightMode::None,
                PreflightArg::Oracle => PreflightMode::Oracle,
                PreflightArg::Strict => PreflightMode::Strict,
            }),
            budget_cost_usd: self.budget.max_cost_usd,
            budget_tokens: self.budget.max_tokens,
        })
    }
}

/// Refuses to continue a job with a different configuration, naming each difference.
fn check_same_job(job_dir: &Path, spec: &JobSpec) -> Result<(), String> {
    let stored_path = JobDir::new(job_dir).config_json();
    let stored: serde_json::Value = std::fs::read_to_string(&stored_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or_else(|| format!("`{}` is unreadable", stored_path.display()))?;
    let diff = terminus_config::diff::config_diff(&stored, &spec.raw);
    if diff.is_empty() {
        return Ok(());
    }
    Err(format!(
        "`{}` holds a job with a different configuration; choose another job_name, or undo these changes:\n  {}",
        job_dir.display(),
        diff.join("\n  ")
    ))
}

pub async fn run(args: RunArgs) -> u8 {
    if let Some(server) = &args.server {
        return crate::remote::run_on_server(&args, server).await;
    }
    let overrides = match args.job.overrides() {
        Ok(overrides) => overrides,
        Err(e) => return invalid(e),
    };
    let spec = match (&args.config, overrides.paths.is_empty() && overrides.datasets.is_empty()) {
        (Some(path), _) => JobSpec::load(path, &overrides),
        (None, false) => JobSpec::from_flags(&overrides),
        (None, true) => {
            return invalid(
                "give a job file (-c job.yaml), a task or dataset directory (-p DIR) or a registry dataset (-d NAME@VERSION)",
            );
        }
    };
    let spec = match spec {
        Ok(spec) => spec,
        Err(e) => return invalid(e),
    };
    let job_dir = spec.job_dir();
    let mode = if JobDir::new(&job_dir).config_json().exists() {
        if let Err(e) = check_same_job(&job_dir, &spec) {
            return invalid(e);
        }
        eprintln!("`{}` exists with the same configuration: continuing it", job_dir.display());
        StartMode::Resume { only: None }
    } else {
        StartMode::New
    };
    execute(spec, mode, Some(&args.view)).await.0
}

pub async fn resume(args: ResumeArgs) -> u8 {
    if !JobDir::new(&args.job_dir).config_json().is_file() {
        return invalid(format!("`{}` is not a job directory (it has no config.json)", args.job_dir.display()));
    }
    let overrides = Overrides {
        n_concurrent_trials: args.n_concurrent,
        quiet: args.quiet.then_some(true),
        budget_cost_usd: args.budget.max_cost_usd,
        budget_tokens: args.budget.max_tokens,
        ..Overrides::default()
    };
    let spec = match &args.config {
        Some(path) => JobSpec::load(path, &overrides.clone().placed_at(&args.job_dir)),
        None => JobSpec::from_job_dir(&args.job_dir, &overrides),
    };
    let spec = spec.map_err(|e| e.to_string());
    let spec = match spec.and_then(|spec| check_same_job(&args.job_dir, &spec).map(|()| spec)) {
        Ok(spec) => spec,
        Err(e) => {
            // Refused before it starts: what the killed run left is reaped all the same.
            reap_dead_run(&args.job_dir).await;
            return invalid(e);
        }
    };
    let only = args.only.map(|o| match o {
        OnlyArg::Errored => Only::Errored,
        OnlyArg::Cancelled => Only::Cancelled,
    });
    execute(spec, StartMode::Resume { only }, Some(&args.view)).await.0
}

/// Removes the containers an earlier run of the job in `job_dir` left on the local engine, when
/// no process runs that job (its directory's lock is free). Quiet when there is no engine.
/// How many times a refused resume looks for what the killed run left.
const REAP_ROUNDS: usize = 6;

async fn reap_dead_run(job_dir: &Path) {
    let Ok(job_dir) = std::path::absolute(job_dir) else { return };
    if JobLock::is_held(&job_dir) {
        return;
    }
    let backend = terminus_config::cluster::BackendSpec::Docker;
    let Ok(backend) = terminus_sandbox::Backend::connect(&backend).await else { return };
    let Ok(items) = backend.labelled(LABEL_JOB_DIR).await else { return };
    let (here, dir) = (host_identity(), job_dir.display().to_string());
    let ours = |item: &&terminus_sandbox::placement::Labelled| {
        item.labels.get(LABEL_JOB_DIR) == Some(&dir) && item.labels.get(LABEL_HOST).is_none_or(|host| *host == here)
    };
    let mut removed = 0;
    let mut items = items;
    // A create the killed run had sent may land after the first listing, and a container the
    // engine was already removing is still listed: looked at again until none is left.
    for _ in 0..REAP_ROUNDS {
        let left: Vec<_> = items.iter().filter(ours).collect();
        if left.is_empty() {
            break;
        }
        for item in left {
            if backend.remove_labelled(item).await.is_ok() {
                removed += 1;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let Ok(again) = backend.labelled(LABEL_JOB_DIR).await else { break };
        items = again;
    }
    if removed > 0 {
        eprintln!("removed {removed} container(s) the earlier run of this job left");
    }
}

pub async fn trial_start(args: TrialStartArgs) -> u8 {
    let agent_kwargs = match parse_kwargs(&args.agent_kwargs) {
        Ok(kwargs) => kwargs,
        Err(e) => return invalid(e),
    };
    let task_name = args.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "task".into());
    let overrides = Overrides {
        paths: vec![args.path.clone()],
        agent: Some(args.agent.clone()),
        models: args.model.iter().cloned().collect(),
        agent_kwargs,
        jobs_dir: Some(args.trials_dir.clone()),
        job_name: Some(format!("{task_name}__{}", terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S"))),
        n_attempts: Some(1),
        ..Overrides::default()
    };
    if !Task::is_task_dir(&args.path) {
        return invalid(format!("`{}` is not a task directory", args.path.display()));
    }
    let spec = match JobSpec::from_flags(&overrides) {
        Ok(spec) => spec,
        Err(e) => return invalid(e),
    };
    execute(spec, StartMode::New, None).await.0
}

/// Runs a job: its keys and endpoints checked, its git tasks fetched, its oracle preflight
/// run (for a job with one), then the job itself. Returns the exit code and the summary.
async fn execute(spec: JobSpec, mode: StartMode, view: Option<&ViewFlags>) -> (u8, Option<JobSummary>) {
    if let Err(code) = check_providers(&spec) {
        return (code, None);
    }
    if let Err(code) = check_credentials(&spec).await {
        return (code, None);
    }
    // Tasks from git, before anything else: a task that cannot be fetched stops the command.
    if let Err(code) = crate::datasets::fetch_tasks(&spec.tasks, spec.quiet).await {
        return (code, None);
    }
    let preflight = match crate::preflight::before_job(&spec, &mode).await {
        Ok(report) => report,
        Err(code) => return (code, None),
    };
    let plan = |spec| match preflight {
        Some(report) => JobPlan::after_preflight(spec, report),
        None => JobPlan::new(spec),
    };
    job::run(spec, plan, mode, view).await
}

/// A model no provider of ours can reach stops the job before anything runs: the exit code
/// then, its reason printed.
fn check_providers(spec: &JobSpec) -> Result<(), u8> {
    for (idx, agent) in spec.agents.iter().enumerate() {
        if let Some(settings) = terminus_actors::llm::agent_provider_settings(agent)
            && let Err(e) = settings.check()
        {
            return Err(invalid(format!("agents[{idx}].model_name: {e}")));
        }
    }
    Ok(())
}

/// Before any container starts: each agent's key is set and its endpoint answers (each
/// endpoint asked once, all at once), unless the job skips the check.
async fn check_credentials(spec: &JobSpec) -> Result<(), u8> {
    if spec.skip_credential_checks {
        return Ok(());
    }
    let mut asked = std::collections::HashSet::new();
    let mut checks = Vec::new();
    for (idx, agent) in spec.agents.iter().enumerate() {
        let Some(settings) = terminus_actors::llm::agent_provider_settings(agent) else { continue };
        if !asked.insert(settings.identity()) {
            continue;
        }
        checks.push(async move {
            let checked = match preflight::check_key(&settings) {
                Ok(()) => preflight::check_endpoint(&settings, preflight::PREFLIGHT_TIMEOUT).await,
                Err(e) => Err(e),
            };
            checked.map_err(|e| format!("agents[{idx}] ({}): {e}", settings.model_name))
        });
    }
    let failures: Vec<String> =
        futures_util::future::join_all(checks).await.into_iter().filter_map(Result::err).collect();
    if failures.is_empty() {
        return Ok(());
    }
    for failure in &failures {
        eprintln!("error: {failure}");
    }
    eprintln!(
        "hint: `skip_credential_checks: true` in the job file (or --skip-credential-checks) starts without this check"
    );
    Err(exit::INVALID)
}

pub async fn tasks_check(args: TaskCheckArgs) -> u8 {
    if args.oracle {
        return crate::preflight::tasks_check(args).await;
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for path in &args.paths {
        let found = task_dirs(path);
        if found.is_empty() {
            return invalid(format!("`{}` holds no task (no task.toml found)", path.display()));
        }
        dirs.extend(found);
    }
    let engine = if args.build {
        match Engine::connect().await {
            Ok(engine) => Some(engine),
            Err(e) => {
                eprintln!("error: {e}");
                return exit::NO_DOCKER;
            }
        }
    } else {
        None
    };
    let mut bad = 0;
    for dir in &dirs {
        let outcome = check_task(dir, engine.as_ref()).await;
        match outcome {
            Ok(note) => println!("ok       {} {note}", dir.display()),
            Err(e) => {
                bad += 1;
                println!("INVALID  {}: {e}", dir.display());
            }
        }
    }
    println!("{} of {} tasks valid", dirs.len() - bad, dirs.len());
    if bad > 0 { exit::INVALID } else { exit::OK }
}

/// `path` itself when it is a task directory, else the task directories in it, sorted.
fn task_dirs(path: &Path) -> Vec<PathBuf> {
    if path.join("task.toml").is_file() {
        return vec![path.to_path_buf()];
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)
        .map(|entries| {
            entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.join("task.toml").is_file()).collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// A compose file read as a trial reads it, with a stand-in for the image name a build gives.
fn read_compose(
    dir: &Path,
    env: &std::collections::BTreeMap<String, String>,
    config: &terminus_config::task::EnvironmentSection,
) -> Result<(), String> {
    let image = config.docker_image.clone().unwrap_or_else(|| "terminus-task-check".to_string());
    // The file's shape is checked, not the host's values: no variable of the host is read.
    let host_vars = std::collections::BTreeMap::new();
    let infra = terminus_config::compose::Infra {
        task_env: env,
        host_vars: &host_vars,
        main_image: &image,
        prebuilt: config.docker_image.is_some(),
        cpus: config.cpus,
        memory_mb: Some(config.memory_mb().unwrap_or(2048)),
    };
    terminus_config::compose::read(dir, &infra).map(|_| ())
}

async fn check_task(dir: &Path, engine: Option<&Engine>) -> Result<String, String> {
    let task = Task::load(dir).map_err(|e: ConfigError| e.to_string())?;
    // Harbor's layout rules: per-step tests, `test.bat` for Windows, a separate verifier's own.
    let missing = Task::missing_parts(dir);
    if !missing.is_empty() {
        return Err(format!("missing {}", missing.join(", ")));
    }
    // The compose file is read as a trial reads it, so what a run would refuse shows here.
    // Checked without the host's values (a task gets only what its job passes, see below).
    let no_host = terminus_config::host_env::HostEnv::default();
    let env = terminus_config::task::resolve_host_env("environment.env", &task.config.environment.env, &no_host)
        .unwrap_or_default();
    read_compose(&task.environment_dir(), &env, &task.config.environment)?;
    let mut note = format!("({})", task.name);
    if !task.solution_dir().join("solve.sh").is_file() {
        note.push_str(" [no solution/solve.sh: the oracle cannot run it]");
    }
    // Harbor accepts these tasks, so this does too; what a run will not do is said by key.
    if let Some(reason) = task.unrunnable() {
        note.push_str(&format!("\n         cannot run here: {reason}"));
    }
    for notice in &task.notices {
        note.push_str(&format!("\n         note: task.toml {notice}"));
    }
    // What the task reads from the host: a job passes it only when `environment.host_env` says so.
    for read in task.host_reads() {
        let default = if read.has_default { " (it has a default)" } else { "" };
        note.push_str(&format!("\n         reads from the host: `{}` in `{}`{default}", read.var, read.key));
    }
    // A separate verifier: where its image comes from, whether it brings the tests; its
    // compose file is read as a trial would read it.
    let verifier = task.verifier_environment();
    if let Some(verifier) = &verifier {
        let rel = verifier.dir.strip_prefix(&task.dir).unwrap_or(&verifier.dir).display().to_string();
        let image = match &verifier.config.docker_image {
            Some(image) => format!("image {image}"),
            None => format!("image built from {rel}/"),
        };
        let tests = if verifier.bundled_tests { "which brings the tests" } else { "tests/ uploaded" };
        note.push_str(&format!("\n         verifier: a separate environment, {image}, {tests}"));
        let env = terminus_config::task::resolve_host_env("verifier.environment.env", &verifier.config.env, &no_host)
            .unwrap_or_default();
        read_compose(&verifier.dir, &env, &verifier.config)?;
    }
    if task.unrunnable().is_some() {
        // Nothing to build for a task that will not run.
    } else if let (Some(engine), Some(image)) = (engine, &task.config.environment.docker_image) {
        let timeout = std::time::Duration::from_secs_f64(task.config.environment.build_timeout_sec);
        ImageBuilder::new(engine.clone()).ensure_prebuilt(image, timeout).await.map_err(|e| e.to_string())?;
        note.push_str(&format!(" prebuilt image {image}"));
    } else if let Some(engine) = engine {
        let hash = terminus_config::task::dir_hash(&task.environment_dir()).map_err(|e| e.to_string())?;
        let tag = ImageBuilder::tag_for(&task.name, &hash);
        let timeout = std::time::Duration::from_secs_f64(task.config.environment.build_timeout_sec);
        ImageBuilder::new(engine.clone())
            .ensure(&tag, &task.environment_dir(), false, timeout)
            .await
            .map_err(|e| e.to_string())?;
        note.push_str(&format!(" image {tag}"));
    }
    // The separate verifier's own image, tagged as a trial tags it.
    if let (Some(engine), Some(verifier), None) = (engine, &verifier, task.unrunnable()) {
        let timeout = std::time::Duration::from_secs_f64(task.config.environment.build_timeout_sec);
        let images = ImageBuilder::new(engine.clone());
        if let Some(image) = &verifier.config.docker_image {
            images.ensure_prebuilt(image, timeout).await.map_err(|e| e.to_string())?;
            note.push_str(&format!(" verifier image {image}"));
        } else if verifier.dir != task.environment_dir() && verifier.dir.join("Dockerfile").is_file() {
            let hash = terminus_config::task::dir_hash(&verifier.dir).map_err(|e| e.to_string())?;
            let tag = ImageBuilder::tag_for(&format!("{}-verifier", task.name), &hash);
            images.ensure(&tag, &verifier.dir, false, timeout).await.map_err(|e| e.to_string())?;
            note.push_str(&format!(" verifier image {tag}"));
        }
    }
    Ok(note)
}

/// `terminus jobs summarize`: the summary tables of a job directory, from its files.
pub fn summarize(args: SummarizeArgs) -> u8 {
    match job_summary(&args.job_dir) {
        Ok(summary) => {
            reporter::print_summary(&summary);
            exit::OK
        }
        Err(e) => invalid(e),
    }
}

/// The summary of a job directory from its `result.json` and its trials' (a trial's result
/// that does not parse is skipped, with a warning).
fn job_summary(dir: &Path) -> Result<JobSummary, String> {
    let path = JobDir::new(dir).result_json();
    let job: JobResult = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| format!("`{}` is not a readable job result: {e}", path.display()))?;
    let results = job::trial_results(dir);
    let live = LiveCounts {
        n_total: job.n_total_trials,
        n_running: 0,
        n_pending: job.n_total_trials.saturating_sub(results.len() as u64),
        n_retries: job.stats.n_retries,
        n_restarts: job.stats.n_restarts,
    };
    // The headline is the job's own convention (0.25 for a result that names none).
    let stats = JobStats::compute(&results, live, &["mean"], job.stats.score_convention);
    Ok(JobSummary::from_stats(&dir.display().to_string(), job.n_total_trials, &stats, &results))
}

/// `terminus gc`: containers of jobs whose orchestrator is gone, and optionally task images.
pub async fn gc(args: GcArgs) -> u8 {
    // Where to look: the local engine, or the backend a job file names (a swarm: its services
    // and every node's containers).
    let backend_spec = match &args.config {
        Some(path) => match JobSpec::load(path, &Overrides::default()) {
            Ok(spec) => spec.backend,
            Err(e) => return invalid(e),
        },
        None => terminus_config::cluster::BackendSpec::Docker,
    };
    let backend = match terminus_sandbox::Backend::connect(&backend_spec).await {
        Ok(backend) => backend,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::NO_DOCKER;
        }
    };
    let items = match backend.labelled(LABEL_JOB_ID).await {
        Ok(list) => list,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::NO_DOCKER;
        }
    };
    let (mut removed, mut kept) = (0, 0);
    let here = host_identity();
    for item in &items {
        let labels = &item.labels;
        let alive = match (labels.get(LABEL_HOST), labels.get(LABEL_JOB_DIR)) {
            // Another machine's job: its lock is not ours to judge.
            (Some(host), _) if *host != here => true,
            // The job's directory lock says whether its orchestrator still runs (a reused pid
            // cannot fool it, and it is released however the process ended).
            (_, Some(job_dir)) => JobLock::is_held(Path::new(job_dir)),
            // Containers of older versions carry only the pid.
            _ => labels.get(LABEL_PID).and_then(|pid| pid.parse::<u32>().ok()).is_some_and(orchestrator_alive),
        };
        if alive {
            kept += 1;
        } else if backend.remove_labelled(item).await.is_ok() {
            removed += 1;
        }
    }
    let Some(engine) = backend.local() else {
        println!(
            "removed {removed} service(s) and container(s) of jobs that are not running; kept {kept} of running jobs"
        );
        return exit::OK;
    };
    println!("removed {removed} container(s) of jobs that are not running; kept {kept} of running jobs");
    // The jobs' own networks, once their containers are gone.
    let mut n_networks = 0;
    for (name, labels) in engine.labelled_networks(LABEL_JOB_DIR).await.unwrap_or_default() {
        let elsewhere = labels.get(LABEL_HOST).is_some_and(|host| *host != here);
        let running = labels.get(LABEL_JOB_DIR).is_some_and(|dir| JobLock::is_held(Path::new(dir)));
        if !elsewhere && !running && engine.remove_network(&name).await.is_ok() {
            n_networks += 1;
        }
    }
    if n_networks > 0 {
        println!("removed {n_networks} network(s) of jobs that are not running");
    }
    if args.images {
        // A running job may still need any of them.
        if kept > 0 {
            println!("kept task images: a job is running");
        } else {
            let mut n_images = 0;
            for tag in engine.images_with_prefix("terminus-task-").await.unwrap_or_default() {
                if engine.remove_image(&tag).await.is_ok() {
                    n_images += 1;
                }
            }
            println!("removed {n_images} task image(s)");
        }
    }
    exit::OK
}

/// Whether `pid` is a live terminus process (a reused pid of another program does not count).
fn orchestrator_alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| String::from_utf8_lossy(&cmdline).contains("terminus"))
        .unwrap_or(false)
}

/// `terminus view`: serves the viewer until Ctrl-C.
pub async fn view(args: ViewArgs) -> u8 {
    if let Some(server) = &args.server {
        return crate::remote::view_server(&args, server).await;
    }
    if !args.jobs_dir.is_dir() {
        return invalid(format!(
            "`{}` is not a directory (give the jobs_dir of your job files)",
            args.jobs_dir.display()
        ));
    }
    // One job's directory: its parent is served and the job's page is the address given.
    let resolved = args.jobs_dir.canonicalize().ok();
    let (jobs_dir, job) = match resolved.as_deref() {
        Some(dir) if JobDir::new(dir).config_json().is_file() => match (dir.parent(), dir.file_name()) {
            (Some(parent), Some(name)) => (parent.to_path_buf(), Some(name.to_string_lossy().into_owned())),
            _ => (args.jobs_dir.clone(), None),
        },
        _ => (args.jobs_dir.clone(), None),
    };
    let server = match terminus_view::start(&jobs_dir, args.listen.host, args.listen.port, None).await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("error: {e}");
            if matches!(e, terminus_view::StartError::Bind { .. }) {
                eprintln!("hint: choose another --port (0 takes any free port)");
            }
            return exit::INVALID;
        }
    };
    let page = job.map(|name| format!("/jobs/{name}")).unwrap_or_default();
    let at = match (&server.token, page.is_empty()) {
        (None, _) => format!("{}{page}", server.url()),
        (Some(_), true) => server.page_url("/"),
        (Some(_), false) => server.page_url(&page),
    };
    println!("terminus view: {} at {at}", jobs_dir.display());
    if !terminus_view::assets::present() {
        eprintln!(
            "note: this binary was built without the viewer's browser assets: it serves a plain page and the JSON API"
        );
        eprintln!("hint: run scripts/setup.sh (it builds them with npm), then cargo build --release");
    }
    if !args.listen.host.is_loopback() {
        eprintln!(
            "note: listening on {}: every request needs the access token in the address above (keep it private)",
            args.listen.host
        );
    }
    tokio::select! {
        _ = server.wait() => exit::TRIAL_ERRORS,
        _ = job::interrupt() => exit::OK,
    }
}

/// The script `texts import-harbor` runs with the user's Python.
const IMPORT_HARBOR: &str = include_str!("import_harbor.py");

#[expect(clippy::disallowed_methods, reason = "reading a Harbor job needs Harbor's own Python models")]
pub fn import_harbor(args: ImportHarborArgs) -> u8 {
    let out = std::process::Command::new(&args.python)
        .arg("-c")
        .arg(IMPORT_HARBOR)
        .arg(&args.out)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => return invalid(format!("cannot run `{}`: {e}", args.python.display())),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reason = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it failed").to_string();
        return invalid(format!("texts import-harbor with `{}`: {reason}", args.python.display()));
    }
    let report = String::from_utf8_lossy(&out.stdout);
    let last = report.lines().last().unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(last).unwrap_or_default();
    // What was written must load as the agent will load it.
    if let Err(e) = terminus_core::texts::Texts::load(&args.out) {
        return invalid(format!("the texts written to `{}` do not load: {e}", args.out.display()));
    }
    let written = parsed["written"].as_array().map(Vec::len).unwrap_or(0);
    println!(
        "wrote {written} texts of Harbor {} to {} (from {})",
        parsed["harbor"].as_str().unwrap_or("?"),
        args.out.display(),
        parsed["source"].as_str().unwrap_or("?")
    );
    exit::OK
}

#[cfg(test)]
mod tests;
