//! `terminus-bench --realistic`: the load of a real benchmark run on this host. T trials of
//! hello-world, each 26 episodes (Terminus 2's median on Terminal-Bench) against a mock model
//! that answers after LATENCY seconds, run once per fixed concurrency. For each: how many
//! trials were rewarded, the wall time, the orchestrator's CPU (share of one core), the
//! per-episode loop overhead (median of the first and of the last five episodes), and the CPU
//! the engine's daemons (dockerd, containerd) spent meanwhile. It shows where the host, not the
//! orchestrator, makes trials fail: a level past which trials hit their agent limit.

use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::hostile::{done, run};
use terminus_bench::{median_p90, repo_root, spawn_terminus, trial_results, wait_with_usage};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

/// Terminus 2's median episodes per trial on Terminal-Bench.
pub const EPISODES: usize = 26;

pub struct RealisticShape {
    pub trials: usize,
    pub concurrencies: Vec<usize>,
    /// Seconds the model takes to answer.
    pub latency: f64,
    /// `record_terminal_session` (the product's default is on).
    pub record: bool,
}

/// The model's side of one trial: 23 quick commands, the file, then the two claims; each reply
/// after `latency`.
fn script(latency: f64) -> Script {
    let delayed = |turn: Turn| Turn { delay_ms: Some((latency * 1000.0) as u64), ..turn };
    let mut turns: Vec<Turn> = (0..EPISODES - 3).map(|i| delayed(run(&format!("echo step {i}\n"), 0.1))).collect();
    turns.push(delayed(run("printf 'Hello, world!\\n' > hello.txt\n", 0.1)));
    turns.extend([delayed(done()), delayed(done())]);
    Script { conversations: vec![Conversation { when: "hello.txt".into(), turns }], ..Script::default() }
}

/// CPU seconds (user + system) of every process whose command is `name`, from /proc.
fn daemon_cpu_seconds(name: &str) -> f64 {
    // Clock ticks per second: 100 on Linux for /proc's stat fields.
    const TICKS: f64 = 100.0;
    let mut total = 0.0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        if head.split_once(" (").map(|(_, comm)| comm) != Some(name) {
            continue;
        }
        // After the command: state is field 3; utime and stime are fields 14 and 15.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        total += (ticks(14) + ticks(15)) / TICKS;
    }
    total
}

/// One run at `concurrency`: its figures.
async fn run_at(shape: &RealisticShape, concurrency: usize) -> anyhow::Result<Value> {
    let dir = repo_root().join("target/bench/realistic");
    std::fs::create_dir_all(&dir)?;
    let server = MockServer::start(script(shape.latency), 0).await?;
    let name = format!("realistic-{concurrency}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let task = repo_root().join("examples/tasks/hello-world");
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_attempts: {}\nn_concurrent_trials: {concurrency}\nllm:\n  max_concurrent_requests: {concurrency}\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: {}\n      model_info:\n        max_input_tokens: 100000000\ntasks:\n  - path: {}\n",
        dir.display(),
        shape.trials,
        server.api_base(),
        shape.record,
        task.display()
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let daemons = || daemon_cpu_seconds("dockerd") + daemon_cpu_seconds("containerd");
    let daemons_before = daemons();
    let started = Instant::now();
    let child =
        spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], &dir, &dir.join(format!("{name}.log")))?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let daemons_cpu = daemons() - daemons_before;
    server.shutdown();

    let results = trial_results(&dir.join(&name));
    let rewarded = results.iter().filter(|r| r["verifier_result"]["rewards"]["reward"] == 1.0).count();
    let timeouts = results.iter().filter(|r| r["exception_info"]["exception_type"] == "AgentTimeoutError").count();
    let errors = results.iter().filter(|r| !r["exception_info"].is_null()).count();
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for result in &results {
        let overheads: Vec<f64> = result["agent_result"]["metadata"]["timings"]["loop_overhead_msec"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        first.extend(overheads.iter().take(5));
        last.extend(overheads.iter().rev().take(5));
    }
    let wall = usage.wall.as_secs_f64();
    let figures = json!({
        "concurrency": concurrency,
        "trials": shape.trials,
        "rewarded": rewarded,
        "errors": errors,
        "agent_timeouts": timeouts,
        "wall_sec": wall,
        "orchestrator_cpu_sec": usage.cpu_seconds,
        "orchestrator_cpu_share_of_one_core": usage.cpu_seconds / wall,
        "orchestrator_peak_rss_mib": usage.max_rss_mib,
        "loop_overhead_msec_median": {"first_5": median_p90(&first).0, "last_5": median_p90(&last).0},
        "dockerd_containerd_cpu_sec": daemons_cpu,
        "job_dir": dir.join(&name).display().to_string(),
    });
    println!(
        "  {concurrency:>4} at once: {rewarded}/{} rewarded ({timeouts} agent timeouts), wall {wall:.0} s, orchestrator {:.1} % of one core, loop overhead {:.0} / {:.0} ms (first / last 5 episodes), dockerd+containerd {daemons_cpu:.1} CPU s",
        shape.trials,
        100.0 * usage.cpu_seconds / wall,
        median_p90(&first).0,
        median_p90(&last).0,
    );
    Ok(figures)
}

pub async fn run_realistic(shape: &RealisticShape) -> anyhow::Result<Value> {
    println!(
        "realistic: {} trials × {EPISODES} episodes of hello-world, the model answering in {} s, at {:?} at once, recording {}",
        shape.trials,
        shape.latency,
        shape.concurrencies,
        if shape.record { "on" } else { "off" }
    );
    let mut runs = Vec::new();
    for &concurrency in &shape.concurrencies {
        runs.push(run_at(shape, concurrency).await?);
    }
    // Admission by measured capacity (`n_concurrent_trials: auto`) is not built yet: there is
    // no `auto` run to report.
    println!("  auto: not measured (admission by measured capacity is not built yet)");
    Ok(
        json!({"episodes": EPISODES, "latency_sec": shape.latency, "record_terminal_session": shape.record, "runs": runs}),
    )
}
