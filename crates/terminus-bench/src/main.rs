//! `terminus-bench`: measures terminus against the Docker floor on this machine.
//!
//! It runs trials of `examples/tasks/hello-world` with the real `terminus` binary against the
//! mock model (which answers at once and asks for one wait of `--duration` seconds after a
//! command that ends at once), and in the same run measures the floor: create, start, one exec
//! and remove of the same image through the same engine, alone and with C loops at once. Runs: M
//! trials at concurrency 1 and N at concurrency C, each without and with `early_return`. For
//! each it prints, and writes as JSON, the per-trial orchestration overhead (trial wall time −
//! model time − the waits) with its ratio to the floor at the same concurrency and its split by
//! phase, the per-episode loop overhead, tmux round trips, trials per minute, CPU seconds per
//! trial and peak memory of the orchestrator, peak containers and dockerd's memory. `--scale`
//! runs 200 trials at concurrency 200; `--hostile` measures hostile agents instead (see
//! [`hostile_bench`]); `--long` long trials (see [`long_bench`]; with `--scale`, 200 × 50);
//! `--view` the viewer opening a 1 GB job (see [`view_bench`]); `--swarm` the plain job on the
//! local engine and on a 3-node swarm test bed (`scripts/swarm.sh`) in the same run.
//!
//! `--realistic` runs 26-episode trials at several fixed concurrencies (see [`realistic_bench`]).
//! Run with: `scripts/bench.sh [--scale] [--realistic] [--hostile | --long [--episodes E] [--output-kb K] [--repeat R]] [--trials N] [--concurrency C]`

mod hostile_bench;
mod long_bench;
mod realistic_bench;
mod runaway_bench;
mod serve_bench;
mod view_bench;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The phases of a trial result, with the label the bench prints.
const PHASES: [(&str, &str); 4] = [
    ("environment setup", "environment_setup"),
    ("agent setup", "agent_setup"),
    ("agent loop (minus model and waits)", "agent_execution"),
    ("verifier", "verifier"),
];
use terminus_bench::{
    JobFile, dockerd_rss_mib, hello_world_script, median_p90, repo_root, spawn_terminus, trial_results, wait_with_usage,
};
use terminus_sandbox::{ContainerSpec, Engine, ExecOptions, ImageBuilder};

struct Options {
    trials: usize,
    /// The wait the mock model asks for after its command (the command itself ends at once, so
    /// early_return can cut it short).
    duration: f64,
    /// Trials of the extra run at concurrency 1 (0 skips it).
    solo_trials: usize,
    concurrency: usize,
    floor_samples: usize,
    out: Option<PathBuf>,
    scale: bool,
    hostile: bool,
    long: bool,
    /// `--runaway`: disk and memory of a trial of long replies at two sizes (see [`runaway_bench`]).
    runaway: bool,
    /// `--trials` was given (for `--long`, whose default differs).
    trials_given: bool,
    episodes: Option<usize>,
    output_kb: usize,
    /// Runs of `--long`, whose medians are reported (its gap ratio moves from run to run).
    repeat: usize,
    /// `--view`: the viewer on a large synthetic job (see [`view_bench`]).
    view: bool,
    view_mb: usize,
    cold: bool,
    /// `--swarm`: the plain job on the local engine and on the test bed's swarm, side by side.
    swarm: bool,
    /// `--realistic`: 26-episode trials at several fixed concurrencies (see [`realistic_bench`]).
    realistic: bool,
    concurrencies: Vec<usize>,
    /// `--concurrencies …,auto`: also an adaptive run.
    auto: bool,
    latency: f64,
    /// `--no-record`: `--realistic` with `record_terminal_session: false`.
    no_record: bool,
    /// `--serve`: `terminus serve` against `terminus run`, and 4 jobs under one limit (see
    /// [`serve_bench`]).
    serve: bool,
}

fn parse_args() -> anyhow::Result<Options> {
    let mut options = Options {
        trials: 40,
        duration: 1.0,
        solo_trials: 10,
        concurrency: 8,
        floor_samples: 10,
        out: None,
        scale: false,
        hostile: false,
        long: false,
        runaway: false,
        trials_given: false,
        episodes: None,
        output_kb: 8,
        repeat: 1,
        view: false,
        view_mb: 1024,
        cold: false,
        swarm: false,
        realistic: false,
        serve: false,
        concurrencies: vec![50, 100, 200],
        auto: true,
        latency: 2.0,
        no_record: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match arg.as_str() {
            "--trials" => {
                options.trials = value("--trials")?.parse()?;
                options.trials_given = true;
            }
            "--long" => options.long = true,
            "--episodes" => options.episodes = Some(value("--episodes")?.parse()?),
            "--output-kb" => options.output_kb = value("--output-kb")?.parse()?,
            "--repeat" => options.repeat = value("--repeat")?.parse::<usize>()?.max(1),
            "--concurrency" => options.concurrency = value("--concurrency")?.parse()?,
            "--solo-trials" => options.solo_trials = value("--solo-trials")?.parse()?,
            "--duration" => options.duration = value("--duration")?.parse()?,
            "--floor-samples" => options.floor_samples = value("--floor-samples")?.parse()?,
            "--out" => options.out = Some(PathBuf::from(value("--out")?)),
            "--scale" => {
                options.scale = true;
                options.trials = 200;
                options.concurrency = 200;
                options.floor_samples = 2;
            }
            "--hostile" => options.hostile = true,
            "--realistic" => options.realistic = true,
            "--serve" => options.serve = true,
            "--concurrencies" => {
                // A list of numbers, `auto` among them to run adaptive admission too.
                let list = value("--concurrencies")?;
                let words: Vec<&str> = list.split(',').map(str::trim).collect();
                options.auto = words.contains(&"auto");
                options.concurrencies =
                    words.iter().filter(|w| **w != "auto").map(|c| c.parse()).collect::<Result<_, _>>()?
            }
            "--latency" => options.latency = value("--latency")?.parse()?,
            "--no-record" => options.no_record = true,
            "--runaway" => options.runaway = true,
            "--view" => options.view = true,
            "--view-mb" => options.view_mb = value("--view-mb")?.parse()?,
            "--cold" => options.cold = true,
            "--swarm" => {
                options.swarm = true;
                options.solo_trials = 0;
            }
            "-h" | "--help" => {
                println!(
                    "usage: terminus-bench [--trials N] [--concurrency C] [--duration SEC] [--solo-trials M] [--scale] [--hostile] [--runaway [--episodes E]] [--long] [--episodes E] [--output-kb K] [--repeat R] [--view [--view-mb MB] [--cold]] [--swarm] [--realistic [--concurrencies A,B,C[,auto]] [--latency SEC] [--no-record]] [--serve] [--floor-samples K] [--out FILE]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(options)
}

/// One floor sample: seconds for create + start, the exec, the removal, and in total.
#[derive(Clone, Copy)]
struct FloorSample {
    start: f64,
    exec: f64,
    remove: f64,
    total: f64,
}

/// The floor: what the engine itself costs for one short-lived container, measured by
/// `parallel` loops at once (1 = uncontended; C = as contended as the trials of the job).
async fn docker_floor(
    engine: &Engine,
    image: &str,
    samples: usize,
    parallel: usize,
) -> anyhow::Result<Vec<FloorSample>> {
    let mut loops = tokio::task::JoinSet::new();
    for worker in 0..parallel {
        let (engine, image) = (engine.clone(), image.to_string());
        loops.spawn(async move { floor_loop(&engine, &image, samples, worker).await });
    }
    let mut out = Vec::new();
    while let Some(result) = loops.join_next().await {
        out.extend(result??);
    }
    Ok(out)
}

async fn floor_loop(engine: &Engine, image: &str, samples: usize, worker: usize) -> anyhow::Result<Vec<FloorSample>> {
    let mut out = Vec::new();
    for i in 0..samples {
        let spec = ContainerSpec {
            gpus: 0,
            aliases: Vec::new(),
            binds: Vec::new(),
            image: image.to_string(),
            name: format!("terminus-bench-floor-{}-{worker}-{i}", std::process::id()),
            labels: HashMap::from([("terminus.bench".to_string(), "floor".to_string())]),
            cpus: Some(1.0),
            memory_mb: Some(1024),
            ..ContainerSpec::default()
        };
        let t0 = Instant::now();
        let container = engine.start_container(&spec).await?;
        let t1 = Instant::now();
        container.exec("true", &ExecOptions::default()).await?;
        let t2 = Instant::now();
        container.remove().await?;
        let t3 = Instant::now();
        out.push(FloorSample {
            start: (t1 - t0).as_secs_f64(),
            exec: (t2 - t1).as_secs_f64(),
            remove: (t3 - t2).as_secs_f64(),
            total: (t3 - t0).as_secs_f64(),
        });
    }
    Ok(out)
}

/// Median and p90 of the floor and the median of each of its steps.
fn floor_figures(samples: &[FloorSample]) -> (f64, f64, Value) {
    let pick = |f: fn(&FloorSample) -> f64| samples.iter().map(f).collect::<Vec<_>>();
    let (median, p90) = median_p90(&pick(|s| s.total));
    let steps = json!({
        "create_start": median_p90(&pick(|s| s.start)).0,
        "exec": median_p90(&pick(|s| s.exec)).0,
        "remove": median_p90(&pick(|s| s.remove)).0,
    });
    (median, p90, steps)
}

struct Run {
    figures: Value,
    wall: f64,
    errors: usize,
}

/// One job of the bench: `trials` at `concurrency`.
struct JobShape {
    label: &'static str,
    duration: f64,
    trials: usize,
    concurrency: usize,
    early_return: bool,
    /// The floor median measured at the same concurrency.
    floor_median: f64,
    /// The job file's `environment` block (YAML), for a backend other than the local engine.
    environment: Option<String>,
}

async fn run_job(shape: &JobShape, engine: &Engine) -> anyhow::Result<Run> {
    let early_return = shape.early_return;
    let server = terminus_mock_llm::MockServer::start(hello_world_script(shape.duration), 0).await?;
    let JobPaths { config, job_dir, log } = write_job_file(shape, &server.api_base())?;

    // Sample the engine while the job runs: containers of the job, dockerd's memory.
    let running = Arc::new(AtomicBool::new(true));
    let sampler = sample_engine(engine, &running);
    let dockerd_before = dockerd_rss_mib();
    let started = Instant::now();
    let child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &repo_root(), &log)?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    running.store(false, Ordering::Relaxed);
    let (peak_containers, peak_dockerd) = sampler.await?;
    server.shutdown();

    let results = trial_results(&job_dir);
    let times = TrialTimes::of(&results);
    let errors = times.errors;
    let (overhead_median, overhead_p90) = median_p90(&times.overheads);
    let (loop_median, loop_p90) = median_p90(&times.loop_overheads);
    let (send_median, send_p90) = median_p90(&times.sends);
    let (capture_median, capture_p90) = median_p90(&times.captures);
    let walls = &times.walls;
    let wall = usage.wall.as_secs_f64();
    let phase_medians: serde_json::Map<String, Value> =
        times.phases.iter().map(|(k, v)| (k.to_string(), json!(median_p90(v).0))).collect();
    let floor_median = shape.floor_median;
    let figures = json!({
        "label": shape.label,
        "backend": if shape.environment.is_some() { "swarm" } else { "docker" },
        "early_return": early_return,
        "trials": shape.trials,
        "concurrency": shape.concurrency,
        "phase_overhead_median_sec": phase_medians,
        "floor_median_sec": floor_median,
        "exit_code": usage.exit_code,
        "trials_with_results": results.len(),
        "errors": errors,
        "job_wall_sec": wall,
        "trial_wall_sec": {"median": median_p90(walls).0, "p90": median_p90(walls).1},
        "model_wait_requested_sec": shape.duration,
        "trials_per_minute": shape.trials as f64 / wall * 60.0,
        "trial_overhead_sec": {"median": overhead_median, "p90": overhead_p90, "ratio_to_floor_median": overhead_median / floor_median},
        "loop_overhead_msec": {"median": loop_median, "p90": loop_p90, "episodes": times.loop_overheads.len()},
        "tmux_send_keys_msec": {"median": send_median, "p90": send_p90},
        "tmux_capture_msec": {"median": capture_median, "p90": capture_p90},
        "orchestrator_cpu_sec_per_trial": usage.cpu_seconds / shape.trials as f64,
        "orchestrator_peak_rss_mib": usage.max_rss_mib,
        "peak_containers": peak_containers,
        "dockerd_rss_mib": {"before": dockerd_before, "peak": peak_dockerd},
        "job_dir": job_dir.display().to_string(),
    });
    Ok(Run { figures, wall, errors })
}

/// Where a job of the bench keeps its files.
struct JobPaths {
    config: PathBuf,
    job_dir: PathBuf,
    log: PathBuf,
}

/// Writes the job file of `shape` under `target/bench/jobs`, its model at `api_base`.
fn write_job_file(shape: &JobShape, api_base: &str) -> anyhow::Result<JobPaths> {
    let dir = repo_root().join("target/bench/jobs");
    std::fs::create_dir_all(&dir)?;
    let name = format!("bench-{}-{}", shape.label, chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let task = repo_root().join("examples/tasks/hello-world");
    let kwargs = if shape.early_return { "      early_return: true\n" } else { "" };
    let mut extra = format!("llm:\n  max_concurrent_requests: {}\n", shape.concurrency.max(8));
    if let Some(environment) = &shape.environment {
        extra.push_str(environment);
    }
    let config = JobFile {
        dir: &dir,
        name: &name,
        api_base,
        task: &task,
        attempts: shape.trials,
        concurrency: shape.concurrency,
        kwargs,
        extra: &extra,
    }
    .write()?;
    let log = dir.join(format!("{name}.log"));
    let job_dir = dir.join(&name);
    Ok(JobPaths { config, job_dir, log })
}

/// Samples the engine every 250 ms until `running` is cleared; yields the peak count of job
/// containers and dockerd's peak memory (MiB).
fn sample_engine(engine: &Engine, running: &Arc<AtomicBool>) -> tokio::task::JoinHandle<(usize, f64)> {
    let (engine, running) = (engine.clone(), running.clone());
    tokio::spawn(async move {
        let (mut peak_containers, mut peak_dockerd) = (0usize, 0f64);
        while running.load(Ordering::Relaxed) {
            if let Ok(list) = engine.containers_with_label(terminus_sandbox::LABEL_JOB_ID, None).await {
                peak_containers = peak_containers.max(list.len());
            }
            peak_dockerd = peak_dockerd.max(dockerd_rss_mib());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        (peak_containers, peak_dockerd)
    })
}

/// The times of a job's trials, from their results.
#[derive(Default)]
struct TrialTimes {
    /// Each trial's wall time less the model's time and the waits it asked for.
    overheads: Vec<f64>,
    walls: Vec<f64>,
    loop_overheads: Vec<f64>,
    sends: Vec<f64>,
    captures: Vec<f64>,
    /// Trials that ended with an error.
    errors: usize,
    /// Seconds of each phase (the bench's label), trial by trial.
    phases: std::collections::BTreeMap<&'static str, Vec<f64>>,
}

impl TrialTimes {
    /// The times of the trials of `results`.
    fn of(results: &[Value]) -> TrialTimes {
        let mut times = TrialTimes::default();
        let time = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default()).ok();
        for result in results {
            if !result["exception_info"].is_null() {
                times.errors += 1;
            }
            let (Some(start), Some(end)) = (time(&result["started_at"]), time(&result["finished_at"])) else {
                continue;
            };
            let wall = (end - start).num_microseconds().unwrap_or(0) as f64 / 1e6;
            let metadata = &result["agent_result"]["metadata"];
            let llm: f64 = metadata["api_request_times_msec"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).sum::<f64>() / 1000.0)
                .unwrap_or(0.0);
            let waited = metadata["timings"]["waited_sec"].as_f64().unwrap_or(0.0);
            times.overheads.push(wall - llm - waited);
            times.walls.push(wall);
            for (phase, key) in PHASES {
                if let (Some(a), Some(b)) = (time(&result[key]["started_at"]), time(&result[key]["finished_at"])) {
                    let seconds = (b - a).num_microseconds().unwrap_or(0) as f64 / 1e6;
                    // The agent phase holds the model's time and the waits it asked for: leave them out.
                    let seconds = if key == "agent_execution" { seconds - llm - waited } else { seconds };
                    times.phases.entry(phase).or_default().push(seconds);
                }
            }
            if let (Some(a), Some(b)) = (time(&result["verifier"]["finished_at"]), Some(end)) {
                times
                    .phases
                    .entry("teardown (logs, remove)")
                    .or_default()
                    .push((b - a).num_microseconds().unwrap_or(0) as f64 / 1e6);
            }
            let list = |key: &str| {
                metadata["timings"][key]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
                    .unwrap_or_default()
            };
            times.loop_overheads.extend(list("loop_overhead_msec"));
            times.sends.extend(list("tmux_send_keys_msec"));
            times.captures.extend(list("tmux_capture_msec"));
        }
        times
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let options = parse_args()?;
    if options.view {
        // No engine needed: the viewer reads files.
        return view_report(&options).await;
    }
    let engine = Engine::connect().await?;
    let engine_version = engine.version().await?;
    let out = options.out.clone().unwrap_or_else(|| default_out(&options));
    if options.runaway {
        let figures = runaway_bench::run_runaway(options.episodes.unwrap_or(10)).await?;
        return write_report(&out, &kind_report(&engine_version, "runaway", figures));
    }
    if options.hostile {
        print_machine(&engine_version);
        let figures = hostile_bench::run_hostile().await?;
        return write_report(&out, &kind_report(&engine_version, "hostile", figures));
    }
    if options.realistic {
        print_machine(&engine_version);
        let shape = realistic_bench::RealisticShape {
            trials: if options.trials_given { options.trials } else { 200 },
            concurrencies: options.concurrencies.clone(),
            auto: options.auto,
            latency: options.latency,
            record: !options.no_record,
        };
        let figures = realistic_bench::run_realistic(&shape).await?;
        return write_report(&out, &kind_report(&engine_version, "realistic", figures));
    }
    if options.serve {
        print_machine(&engine_version);
        let figures = serve_bench::run_serve(options.trials, options.concurrency, 16).await?;
        return write_report(&out, &kind_report(&engine_version, "serve", figures));
    }
    if options.long {
        let figures = long_figures(&options, &engine_version).await?;
        return write_report(&out, &kind_report(&engine_version, "long", figures));
    }
    bench(&options, &engine, &engine_version, &out).await
}

/// Prints the machine's cores and the engine's version.
fn print_machine(engine_version: &str) {
    println!(
        "machine: {} cores, engine {engine_version}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
}

/// `--view`: runs the viewer bench and writes its report.
async fn view_report(options: &Options) -> anyhow::Result<()> {
    let trials = if options.trials_given { options.trials } else { 500 };
    let (view_mb, cold) = (options.view_mb, options.cold);
    let figures = tokio::task::spawn_blocking(move || view_bench::run_view(trials, view_mb, cold)).await??;
    let report = json!({
        "date": chrono::Utc::now().to_rfc3339(),
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "view": figures,
    });
    let out = options.out.clone().unwrap_or_else(|| {
        repo_root().join(format!("target/bench/view-{}.json", chrono::Utc::now().format("%Y%m%d-%H%M%S")))
    });
    write_report(&out, &report)
}

/// Where the report goes without `--out`: `target/bench/<kind>-<time>.json`.
fn default_out(options: &Options) -> PathBuf {
    let kind = if options.hostile {
        "hostile"
    } else if options.runaway {
        "runaway"
    } else if options.long {
        "long"
    } else if options.realistic {
        "realistic"
    } else if options.serve {
        "serve"
    } else {
        "bench"
    };
    repo_root().join(format!("target/bench/{kind}-{}.json", chrono::Utc::now().format("%Y%m%d-%H%M%S")))
}

/// `--long`: the figures of one run, or with `--repeat` the medians of several.
async fn long_figures(options: &Options, engine_version: &str) -> anyhow::Result<Value> {
    // Defaults: 20 × 80 × 8 KB; with --scale, 200 × 50.
    let shape = long_bench::LongShape {
        trials: if options.trials_given || options.scale { options.trials } else { 20 },
        episodes: options.episodes.unwrap_or(if options.scale { 50 } else { 80 }),
        output_kb: options.output_kb,
    };
    print_machine(engine_version);
    if options.repeat > 1 { repeated_long(options.repeat) } else { long_bench::run_long(&shape).await }
}

/// The medians of `repeat` runs of the long bench, each in a fresh process of its own: a
/// child's peak RSS (wait4) includes what its parent held when it was spawned, and a run's mock
/// keeps every request.
fn repeated_long(repeat: usize) -> anyhow::Result<Value> {
    let mut runs = Vec::new();
    for run in 0..repeat {
        let out = repo_root().join(format!("target/bench/long-repeat-{run}.json"));
        let args = args_of_one_run();
        let status =
            std::process::Command::new(std::env::current_exe()?).args(&args).arg("--out").arg(&out).status()?;
        anyhow::ensure!(status.success(), "run {run} of the long bench failed ({status})");
        let report: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
        runs.push(report["long"].clone());
    }
    Ok(long_bench::medians(runs))
}

/// This command's arguments without `--repeat` and `--out` (and their values).
fn args_of_one_run() -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        if arg == "--repeat" || arg == "--out" {
            given.next();
        } else {
            args.push(arg);
        }
    }
    args
}

/// The plain bench: the floor alone and at the jobs' concurrency, then each job, printed as it
/// ends; writes the report to `out` and fails if any trial ended with an error.
async fn bench(options: &Options, engine: &Engine, engine_version: &str, out: &std::path::Path) -> anyhow::Result<()> {
    let task = terminus_config::Task::load(&repo_root().join("examples/tasks/hello-world"))?;
    let hash = terminus_config::task::dir_hash(&task.environment_dir())?;
    let image = ImageBuilder::tag_for(&task.name, &hash);
    ImageBuilder::new(engine.clone()).ensure(&image, &task.environment_dir(), false, Duration::from_secs(600)).await?;

    print_machine(engine_version);
    let (solo, busy) = floors(engine, &image, options).await?;
    let shapes = job_shapes(options, solo.median, busy.median)?;
    let mut runs = Vec::new();
    for shape in &shapes {
        println!(
            "job {}: {} trials at concurrency {}, early_return {}",
            shape.label, shape.trials, shape.concurrency, shape.early_return
        );
        let run = run_job(shape, engine).await?;
        print_run(shape, &run);
        runs.push(run);
    }
    let report = json!({
        "date": chrono::Utc::now().to_rfc3339(),
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "engine": engine_version},
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "floor_sec": {
            "alone": {"median": solo.median, "p90": solo.p90, "samples": solo.samples, "step_medians": solo.steps},
            "concurrent": {"parallel": options.concurrency, "median": busy.median, "p90": busy.p90, "samples": busy.samples, "step_medians": busy.steps},
        },
        "runs": runs.iter().map(|r| r.figures.clone()).collect::<Vec<_>>(),
    });
    write_report(out, &report)?;
    let errors: usize = runs.iter().map(|r| r.errors).sum();
    if errors > 0 {
        anyhow::bail!("{errors} trials ended with an error");
    }
    Ok(())
}

/// The floor's figures at one concurrency.
struct Floor {
    median: f64,
    p90: f64,
    samples: usize,
    /// The median of each step.
    steps: Value,
}

/// Measures and prints the floor alone and at the jobs' concurrency.
async fn floors(engine: &Engine, image: &str, options: &Options) -> anyhow::Result<(Floor, Floor)> {
    println!("floor: create + start + exec `true` + remove of {image}");
    let solo_floor = docker_floor(engine, image, options.floor_samples, 1).await?;
    let (solo_median, solo_p90, solo_steps) = floor_figures(&solo_floor);
    println!(
        "  alone: median {solo_median:.3} s, p90 {solo_p90:.3} s ({} samples); steps {solo_steps}",
        solo_floor.len()
    );
    let busy_floor = docker_floor(engine, image, options.floor_samples.div_ceil(2), options.concurrency).await?;
    let (busy_median, busy_p90, busy_steps) = floor_figures(&busy_floor);
    println!(
        "  {} at once: median {busy_median:.3} s, p90 {busy_p90:.3} s ({} samples); steps {busy_steps}",
        options.concurrency,
        busy_floor.len()
    );
    Ok((
        Floor { median: solo_median, p90: solo_p90, samples: solo_floor.len(), steps: solo_steps },
        Floor { median: busy_median, p90: busy_p90, samples: busy_floor.len(), steps: busy_steps },
    ))
}

/// The jobs to run: alone (unless `--solo-trials 0`), at the concurrency without and with
/// early_return, and with `--swarm` the plain job on the swarm.
fn job_shapes(options: &Options, solo_median: f64, busy_median: f64) -> anyhow::Result<Vec<JobShape>> {
    let mut shapes = Vec::new();
    if options.solo_trials > 0 {
        for early_return in [false, true] {
            shapes.push(JobShape {
                label: if early_return { "alone-early-return" } else { "alone" },
                duration: options.duration,
                trials: options.solo_trials,
                concurrency: 1,
                early_return,
                floor_median: solo_median,
                environment: None,
            });
        }
    }
    for early_return in [false, true] {
        if options.swarm && early_return {
            continue;
        }
        shapes.push(JobShape {
            label: if early_return { "early-return" } else { "plain" },
            duration: options.duration,
            trials: options.trials,
            concurrency: options.concurrency,
            early_return,
            floor_median: busy_median,
            environment: None,
        });
    }
    if options.swarm {
        // The same job on the test bed's swarm (scripts/bench.sh --swarm brings it up), in the
        // same run. The floor is the local engine's: every node shares this machine's cores.
        shapes.push(JobShape {
            label: "swarm",
            duration: options.duration,
            trials: options.trials,
            concurrency: options.concurrency,
            early_return: false,
            floor_median: busy_median,
            environment: Some(swarm_environment()?),
        });
    }
    Ok(shapes)
}

/// The job file's `environment` block for the test bed's swarm, from the variables
/// `scripts/bench.sh --swarm` sets.
fn swarm_environment() -> anyhow::Result<String> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| anyhow::anyhow!("{name} is not set (run through scripts/bench.sh --swarm)"))
    };
    let tls = PathBuf::from(var("TERMINUS_SWARM_TLS_DIR")?);
    Ok(format!(
        "environment:\n  type: swarm\n  swarm:\n    manager: {}\n    tls: {}\n    node_port: {}\n    registry: {}\n    constraints: [\"node.role==worker\"]\n",
        var("TERMINUS_SWARM_MANAGER")?,
        tls.display(),
        var("TERMINUS_SWARM_NODE_PORT")?,
        var("TERMINUS_SWARM_REGISTRY")?
    ))
}

/// Prints what a job of the bench measured.
fn print_run(shape: &JobShape, run: &Run) {
    let f = &run.figures;
    println!(
        "  wall {:.1} s, {:.1} trials/min, errors {}; trial wall time median {:.2} s (the model asks to wait {} s)",
        run.wall,
        f["trials_per_minute"].as_f64().unwrap_or(0.0),
        run.errors,
        f["trial_wall_sec"]["median"].as_f64().unwrap_or(f64::NAN),
        shape.duration
    );
    println!(
        "  per-trial overhead median {:.3} s (p90 {:.3}) = {:.2} × the floor at the same concurrency",
        f["trial_overhead_sec"]["median"].as_f64().unwrap_or(f64::NAN),
        f["trial_overhead_sec"]["p90"].as_f64().unwrap_or(f64::NAN),
        f["trial_overhead_sec"]["ratio_to_floor_median"].as_f64().unwrap_or(f64::NAN)
    );
    if let Some(phases) = f["phase_overhead_median_sec"].as_object() {
        let parts: Vec<String> =
            phases.iter().map(|(k, v)| format!("{k} {:.3}", v.as_f64().unwrap_or(f64::NAN))).collect();
        println!("    by phase (median s): {}", parts.join(", "));
    }
    println!(
        "  per-episode loop overhead median {:.1} ms (p90 {:.1})",
        f["loop_overhead_msec"]["median"].as_f64().unwrap_or(f64::NAN),
        f["loop_overhead_msec"]["p90"].as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "  tmux send-keys median {:.1} ms (p90 {:.1}), capture median {:.1} ms (p90 {:.1})",
        f["tmux_send_keys_msec"]["median"].as_f64().unwrap_or(f64::NAN),
        f["tmux_send_keys_msec"]["p90"].as_f64().unwrap_or(f64::NAN),
        f["tmux_capture_msec"]["median"].as_f64().unwrap_or(f64::NAN),
        f["tmux_capture_msec"]["p90"].as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "  orchestrator: {:.3} CPU s per trial, peak RSS {:.1} MiB; peak containers {}, dockerd {:.0} MiB at peak",
        f["orchestrator_cpu_sec_per_trial"].as_f64().unwrap_or(f64::NAN),
        f["orchestrator_peak_rss_mib"].as_f64().unwrap_or(f64::NAN),
        f["peak_containers"],
        f["dockerd_rss_mib"]["peak"].as_f64().unwrap_or(f64::NAN)
    );
}

/// The report of one kind of run: when, on what, by which command, and its figures under `kind`.
fn kind_report(engine_version: &str, kind: &str, figures: Value) -> Value {
    json!({
        "date": chrono::Utc::now().to_rfc3339(),
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "engine": engine_version},
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        kind: figures,
    })
}

fn write_report(out: &std::path::Path, report: &Value) -> anyhow::Result<()> {
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(out, serde_json::to_string_pretty(report)?)?;
    println!("figures written to {}", out.display());
    Ok(())
}
