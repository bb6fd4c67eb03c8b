//! `terminus-bench --hostile`: what a hostile agent costs the orchestrator, each case alone in
//! its own job against the real engine and the mock model:
//! - a quiet trial (the baseline);
//! - a terminal flood: 2 M lines, then ten `echo hi` of 0.1 s, each turn timed from the model's
//!   reply to the next request, less its wait;
//! - a log bomb: 1.5 GB in one file and 25 000 files under `/logs/agent`.
//!
//! For each: the job's wall time, the orchestrator's CPU seconds and peak RSS (`wait4`), and the
//! trial's reward and warnings.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::hostile::{TESTS_42, conversation, done, flood, log_bomb, quick_turn_costs, run, write_task};
use terminus_bench::{median_p90, repo_root, spawn_terminus, trial_results, wait_with_usage};
use terminus_mock_llm::{MockServer, Script};

/// Quick commands timed after the flood.
const QUICK_TURNS: usize = 10;

/// Runs one job of `task` against `script` and returns its figures and the mock server (for its
/// request times).
async fn job(dir: &Path, name: &str, task: &Path, script: Script) -> anyhow::Result<(Value, MockServer)> {
    let server = MockServer::start(script, 0).await?;
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      early_return: true\ntasks:\n  - path: {}\n",
        dir.display(),
        server.api_base(),
        task.display()
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let job_dir = dir.join(name);
    let _ = std::fs::remove_dir_all(&job_dir);
    let started = Instant::now();
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &dir.join(format!("{name}.log")))?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let result = trial_results(&job_dir).into_iter().next().unwrap_or(Value::Null);
    let figures = json!({
        "exit_code": usage.exit_code,
        "job_wall_sec": usage.wall.as_secs_f64(),
        "orchestrator_cpu_sec": usage.cpu_seconds,
        "orchestrator_peak_rss_mib": usage.max_rss_mib,
        "reward": result["verifier_result"]["rewards"]["reward"],
        "error": result["exception_info"]["exception_type"],
        "warnings": result["warnings"],
        "job_dir": job_dir.display().to_string(),
    });
    Ok((figures, server))
}

/// The three jobs, printed as they finish; their figures as JSON.
pub async fn run_hostile() -> anyhow::Result<Value> {
    let dir = repo_root().join("target/bench/hostile");
    let tasks = dir.join("tasks");
    std::fs::create_dir_all(&tasks)?;
    let quiet_task = write_task(&tasks, "quiet", "WRITE-42", TESTS_42, "")?;
    let quiet = Script {
        conversations: vec![conversation("WRITE-42", vec![run("echo 42 > /app/answer.txt\n", 0.1), done(), done()])],
        ..Script::default()
    };
    let (quiet, _) = job(&dir, "quiet", &quiet_task, quiet).await?;
    print_job("quiet trial", &quiet);

    let flood_task = write_task(&tasks, "flood", terminus_bench::hostile::FLOOD_MARKER, TESTS_42, "")?;
    let script = Script { conversations: vec![flood(2_000_000, QUICK_TURNS)], ..Script::default() };
    let (mut flooded, server) = job(&dir, "flood", &flood_task, script).await?;
    let turns = quick_turn_costs(&server.requests(), 0, QUICK_TURNS);
    let (median, p90) = median_p90(&turns);
    let worst = turns.iter().copied().fold(f64::NAN, f64::max);
    flooded["quick_turn_sec"] = json!({"median": median, "p90": p90, "max": worst, "turns": turns});
    print_job("flood of 2 M lines", &flooded);
    println!("  after it, a 0.1 s command's turn costs {median:.3} s median, {p90:.3} s p90, {worst:.3} s at most");

    let bomb_task = write_task(&tasks, "log-bomb", terminus_bench::hostile::LOG_BOMB_MARKER, TESTS_42, "")?;
    let script = Script { conversations: vec![log_bomb(1536, 25_000)], ..Script::default() };
    let (bomb, _) = job(&dir, "log-bomb", &bomb_task, script).await?;
    print_job("log bomb of 1.5 GB and 25 000 files", &bomb);
    Ok(json!({"quiet": quiet, "flood": flooded, "log_bomb": bomb}))
}

fn print_job(what: &str, figures: &Value) {
    println!(
        "{what}: reward {}, error {}, wall {:.1} s, orchestrator {:.2} CPU s, peak RSS {:.0} MiB",
        figures["reward"],
        figures["error"],
        figures["job_wall_sec"].as_f64().unwrap_or(f64::NAN),
        figures["orchestrator_cpu_sec"].as_f64().unwrap_or(f64::NAN),
        figures["orchestrator_peak_rss_mib"].as_f64().unwrap_or(f64::NAN)
    );
    if let Some(warnings) = figures["warnings"].as_array().filter(|w| !w.is_empty()) {
        println!("  warnings: {warnings:?}");
    }
}
