//! `terminus run --server URL [--watch]`: the job file submitted to a job service speaking
//! Harbor 0.26's API (`terminus serve`, `harbor serve`), then followed with a progress bar;
//! `terminus view --server URL` ([`mirror`]): the viewer over the service's jobs. The HTTP
//! client is [`client`].
//!
//! The job file is sent as written (YAML read as JSON, `--job-name` and `-k`/`-n` applied);
//! the server resolves and checks it, so task paths are paths on the server's machine. Plain
//! `http://` only: over another network, put the service behind a TLS proxy.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::args::RunArgs;
use crate::exit;

mod client;
mod mirror;

use client::{RemoteError, address, request};
pub use mirror::view_server;

/// The job file as the server takes it.
fn job_config(args: &RunArgs) -> Result<Value, String> {
    let Some(path) = &args.config else { return Err("--server needs a job file (-c job.yaml)".into()) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let mut config: Value = serde_yaml::from_str(&text).map_err(|e| format!("`{}`: {e}", path.display()))?;
    if !config.is_object() {
        return Err(format!("`{}`: a job file is a mapping", path.display()));
    }
    if let Some(name) = &args.job.job_name {
        config["job_name"] = json!(name);
    }
    if let Some(n) = args.job.n_concurrent {
        config["n_concurrent_trials"] = json!(n);
    }
    if let Some(k) = args.job.n_attempts {
        config["n_attempts"] = json!(k);
    }
    Ok(config)
}

fn fail(e: &RemoteError) -> u8 {
    eprintln!("error: {e}");
    match e {
        RemoteError::BadUrl(_) => exit::INVALID,
        RemoteError::Unreachable { .. } => exit::NOT_RUNNING,
        RemoteError::Refused { status: 400 | 404 | 413, .. } => exit::INVALID,
        RemoteError::Refused { .. } | RemoteError::Garbled(_) | RemoteError::TooLarge(_) => exit::REFUSED,
    }
}

pub async fn run_on_server(args: &RunArgs, server: &str) -> u8 {
    let addr = match address(server) {
        Ok(addr) => addr,
        Err(e) => return fail(&e),
    };
    let config = match job_config(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let key = uuid::Uuid::new_v4().to_string();
    let body = json!({"config": config, "dry_run": false, "relay_inference": false, "session_id": null});
    let submitted = {
        let addr = addr.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || request(&addr, "POST", "/jobs/submit", Some(&body), Some(&key))).await
    };
    let job_id = match submitted {
        Ok(Ok(answer)) => answer["job_id"].as_str().unwrap_or_default().to_string(),
        Ok(Err(e @ RemoteError::Unreachable { .. })) => {
            eprintln!(
                "the submission may have been accepted (Idempotency-Key={key}): check the server before submitting again"
            );
            return fail(&e);
        }
        Ok(Err(e)) => return fail(&e),
        Err(_) => return exit::INVALID,
    };
    println!("Job ID: {job_id}");
    if !args.watch {
        return exit::OK;
    }
    eprintln!("watching the job; Ctrl-C stops watching and leaves it running");
    let mut interrupts = crate::job::Interrupts::listen();
    tokio::select! {
        code = watch(addr, job_id) => code,
        _ = interrupts.next() => {
            eprintln!("disconnected: the job goes on on the server");
            exit::INTERRUPTED
        }
    }
}

/// A job's progress line: its state and the counts that are not zero.
fn describe(job: &Value) -> String {
    let counts = &job["rollouts"];
    let mut parts = vec![job["state"].as_str().unwrap_or("?").to_string()];
    for key in ["running", "queued", "paused", "cancelling", "cancelled"] {
        let n = counts[format!("n_{key}")].as_u64().unwrap_or(0);
        if n > 0 {
            parts.push(format!("{n} {key}"));
        }
    }
    if let Some(n) = job["n_errors"].as_u64().filter(|n| *n > 0) {
        parts.push(format!("{n} error{}", if n == 1 { "" } else { "s" }));
    }
    parts.join(", ")
}

/// Follows the job until it ends; prints its scores; the exit code of `harbor run --watch`.
async fn watch(addr: String, job_id: String) -> u8 {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let job = loop {
        let (a, id) = (addr.clone(), job_id.clone());
        let answer = tokio::task::spawn_blocking(move || request(&a, "GET", &format!("/jobs/{id}"), None, None)).await;
        let job = match answer {
            Ok(Ok(answer)) => answer["job"].clone(),
            Ok(Err(e)) => {
                bar.abandon();
                return fail(&e);
            }
            Err(_) => return exit::INVALID,
        };
        let counts = &job["rollouts"];
        bar.set_length(counts["n_total"].as_u64().unwrap_or(0));
        bar.set_position(counts["n_finished"].as_u64().unwrap_or(0) + counts["n_cancelled"].as_u64().unwrap_or(0));
        bar.set_message(describe(&job));
        if matches!(job["state"].as_str(), Some("finished" | "cancelled")) {
            break job;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    bar.finish();
    println!("\n{} after {:.0?}: {}", job["state"].as_str().unwrap_or("?"), started.elapsed(), describe(&job));
    if let Some(rewards) = job["rewards"].as_object() {
        for (key, figures) in rewards {
            let mean = figures["mean"].as_f64().map_or("—".to_string(), |m| format!("{m:.3}"));
            println!("{key}: {mean} over {} scored", figures["count"].as_u64().unwrap_or(0));
        }
    }
    if let Some(cost) = job["usage"]["cost_usd"]["sum"].as_f64() {
        println!("cost: ${cost:.2}");
    }
    println!("job: {job_id}");
    let failed = job["state"] == "cancelled"
        || job["rollouts"]["n_cancelled"].as_u64().unwrap_or(0) > 0
        || job["n_errors"].as_u64().unwrap_or(0) > 0;
    if failed { exit::TRIAL_ERRORS } else { exit::OK }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_names_the_counts_that_matter() {
        let job = json!({"state": "running", "n_errors": 1,
            "rollouts": {"n_running": 2, "n_queued": 0, "n_paused": 1, "n_cancelling": 0, "n_cancelled": 0}});
        assert_eq!(describe(&job), "running, 2 running, 1 paused, 1 error");
    }
}
