//! `terminus-bench --long`: what long trials cost the orchestrator. T trials at concurrency T,
//! each E episodes whose command prints about K KB, against a mock model that answers at once;
//! each trial has its own conversation (its own task), so its requests can be told apart.
//!
//! Reported: the orchestrator's CPU per model call and peak RSS (`wait4`), and for each trial
//! the gap from one reply to its next request less the 0.1 s wait the reply asked for —
//! the median gap of episodes 1–9 against the median of the last ten, and their ratio, measured
//! in the same run. The model's context is set large (`model_info.max_input_tokens`) so that no
//! summarization starts: the per-episode cost of the loop is what is measured.

use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::hostile::{TESTS_42, conversation, done, run, write_task};
use terminus_bench::{median_p90, repo_root, spawn_terminus, trial_results, wait_with_usage};
use terminus_mock_llm::{MockServer, Script};

/// The wait each episode's command asks for.
const WAIT: f64 = 0.1;

pub struct LongShape {
    pub trials: usize,
    pub episodes: usize,
    pub output_kb: usize,
}

pub async fn run_long(shape: &LongShape) -> anyhow::Result<Value> {
    let dir = repo_root().join("target/bench/long");
    let tasks_dir = dir.join("tasks");
    std::fs::create_dir_all(&tasks_dir)?;
    // base64 of N random bytes is 4N/3 characters, in lines of 76.
    let bytes = shape.output_kb * 1024 * 3 / 4;
    let command = format!("head -c {bytes} /dev/urandom | base64\n");
    let mut tasks = Vec::new();
    let mut conversations = Vec::new();
    for i in 0..shape.trials {
        let marker = format!("LONG-TRIAL-{i:04}-");
        tasks.push(write_task(&tasks_dir, &format!("long-{i:04}"), &marker, TESTS_42, "")?);
        let mut turns: Vec<_> = (0..shape.episodes.saturating_sub(3)).map(|_| run(&command, WAIT)).collect();
        turns.extend([run("echo 42 > /app/answer.txt\n", WAIT), done(), done()]);
        conversations.push(conversation(&marker, turns));
    }
    let server = MockServer::start(Script { conversations, ..Script::default() }, 0).await?;
    let name = format!("long-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let mut yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_concurrent_trials: {}\nllm:\n  max_concurrent_requests: {}\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      model_info:\n        max_input_tokens: 100000000\ntasks:\n",
        dir.display(),
        shape.trials,
        shape.trials,
        server.api_base()
    );
    for task in &tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let started = Instant::now();
    let child =
        spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], &dir, &dir.join(format!("{name}.log")))?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let requests = server.requests();
    server.shutdown();
    // One image per trial's task. The default run's 20 are kept (so the next run's trials all
    // start at once and early and late episodes see the same load); the 200 of
    // `--scale --long` are removed, nothing else reuses them.
    if shape.trials > 50
        && let Ok(engine) = terminus_sandbox::Engine::connect().await
    {
        for image in engine.images_with_prefix("terminus-task-long-").await.unwrap_or_default() {
            let _ = engine.remove_image(&image).await;
        }
    }

    let (mut early, mut late) = (Vec::new(), Vec::new());
    for i in 0..shape.trials {
        let times: Vec<Instant> = requests.iter().filter(|r| r.conversation == Some(i)).map(|r| r.received).collect();
        let gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]).as_secs_f64() - WAIT).collect();
        // Episodes 1–9 (the first gap follows episode 0's reply) and the last ten of the
        // commands (the claims at the end do not run a command).
        let commands = gaps.len().saturating_sub(2);
        early.extend(gaps.iter().take(commands.min(9)).skip(1).copied());
        late.extend(gaps[..commands].iter().rev().take(10).copied());
    }
    let results = trial_results(&dir.join(&name));
    let errors = results.iter().filter(|r| !r["exception_info"].is_null()).count();
    let rewarded = results.iter().filter(|r| r["verifier_result"]["rewards"]["reward"] == 1.0).count();
    let (early_median, early_p90) = median_p90(&early);
    let (late_median, late_p90) = median_p90(&late);
    let calls = requests.len().max(1);
    let figures = json!({
        "trials": shape.trials,
        "episodes": shape.episodes,
        "output_kb": shape.output_kb,
        "exit_code": usage.exit_code,
        "errors": errors,
        "rewarded": rewarded,
        "job_wall_sec": usage.wall.as_secs_f64(),
        "model_calls": requests.len(),
        "orchestrator_cpu_sec": usage.cpu_seconds,
        "orchestrator_cpu_msec_per_call": usage.cpu_seconds * 1000.0 / calls as f64,
        "orchestrator_peak_rss_mib": usage.max_rss_mib,
        "gap_sec": {
            "early": {"median": early_median, "p90": early_p90, "episodes": "1-9"},
            "late": {"median": late_median, "p90": late_p90, "episodes": "last 10"},
            "late_over_early": late_median / early_median,
        },
        "job_dir": dir.join(&name).display().to_string(),
    });
    println!(
        "{} trials × {} episodes × {} KB: exit {:?}, {} errors, {} rewarded, wall {:.0} s",
        shape.trials,
        shape.episodes,
        shape.output_kb,
        usage.exit_code,
        errors,
        rewarded,
        usage.wall.as_secs_f64()
    );
    println!(
        "  orchestrator: {:.1} ms CPU per model call ({} calls), peak RSS {:.0} MiB",
        usage.cpu_seconds * 1000.0 / calls as f64,
        requests.len(),
        usage.max_rss_mib
    );
    println!(
        "  reply-to-request gap less the wait: episodes 1-9 median {:.3} s, last 10 median {:.3} s, ratio {:.2}",
        early_median,
        late_median,
        late_median / early_median
    );
    Ok(figures)
}

/// The medians of several runs' headline figures, with every run kept under `runs`.
pub fn medians(runs: Vec<Value>) -> Value {
    let median_of = |pointer: &str| -> f64 {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.pointer(pointer).and_then(Value::as_f64)).collect();
        median_p90(&values).0
    };
    let figures = json!({
        "orchestrator_cpu_msec_per_call": median_of("/orchestrator_cpu_msec_per_call"),
        "orchestrator_peak_rss_mib": median_of("/orchestrator_peak_rss_mib"),
        "late_over_early": median_of("/gap_sec/late_over_early"),
    });
    println!(
        "median of {} runs: {:.1} ms CPU per model call, peak RSS {:.0} MiB, late/early gap ratio {:.2}",
        runs.len(),
        figures["orchestrator_cpu_msec_per_call"].as_f64().unwrap_or(0.0),
        figures["orchestrator_peak_rss_mib"].as_f64().unwrap_or(0.0),
        figures["late_over_early"].as_f64().unwrap_or(0.0)
    );
    json!({"median": figures, "runs": runs})
}
