//! `terminus-bench --serve`: what `terminus serve` costs over `terminus run`, and many jobs under
//! its one limit.
//!
//! 1. The same job (N hello-world trials at concurrency C against the mock model) through
//!    `terminus run`, then submitted to `terminus serve` and followed until its state is
//!    `finished`: wall time of each, and the ratio (the goal: within 5 %).
//! 2. 200 trials as 4 jobs of 50, each allowing 50 at once, submitted together to a service
//!    whose `--max-concurrent` is L: wall time, the most rollouts seen running at once over all
//!    jobs (never above L), every trial rewarded.

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_bench::{JobFile, hello_world_script, repo_root, spawn_terminus, terminus_bin};
use terminus_mock_llm::MockServer;

/// One request to the service over a plain socket; the body as JSON.
fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<(u16, Value)> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, serde_json::from_str(body).unwrap_or(Value::Null)))
}

/// A started `terminus serve` and its `host:port`.
struct Service {
    child: std::process::Child,
    addr: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        // SIGINT: the service removes its running trials' containers and exits.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn start_service(data: &Path, max_concurrent: usize) -> anyhow::Result<Service> {
    let log = std::fs::File::create(data.with_extension("log"))?;
    let mut child = Command::new(terminus_bin())
        .args(["serve", "--port", "0", "--max-concurrent", &max_concurrent.to_string(), "--data-dir"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .ok_or_else(|| anyhow::anyhow!("terminus serve did not print its address: {line:?}"))?
        .to_string();
    Ok(Service { child, addr })
}

/// A job of `attempts` hello-world trials as the service takes it.
fn config(name: &str, task: &Path, api_base: &str, attempts: usize, concurrency: usize) -> Value {
    json!({"config": {"job_name": name, "tasks": [{"path": task}], "n_attempts": attempts,
        "n_concurrent_trials": concurrency,
        "agents": [{"name": "terminus-2", "model_name": "openai/gpt-4o", "kwargs": {"api_base": api_base}}]}})
}

fn submit(service: &Service, body: &Value) -> anyhow::Result<String> {
    let (status, answer) = http(&service.addr, "POST", "/jobs/submit", Some(body))?;
    anyhow::ensure!(status == 200, "submission refused: {answer}");
    Ok(answer["job_id"].as_str().unwrap_or_default().to_string())
}

/// Waits until every job has ended; returns the most rollouts seen running at once and the
/// mean reward over the jobs' rollouts.
async fn follow(service: &Service, ids: &[String]) -> anyhow::Result<(u64, f64, u64)> {
    let (mut peak, deadline) = (0u64, Instant::now() + Duration::from_secs(1800));
    loop {
        let mut running = 0;
        let mut ended = 0;
        let (mut sum, mut count) = (0.0, 0u64);
        for id in ids {
            let (_, answer) = http(&service.addr, "GET", &format!("/jobs/{id}"), None)?;
            let job = &answer["job"];
            running += job["rollouts"]["n_running"].as_u64().unwrap_or(0)
                + job["rollouts"]["n_cancelling"].as_u64().unwrap_or(0);
            if matches!(job["state"].as_str(), Some("finished" | "cancelled")) {
                ended += 1;
                let reward = &job["rewards"]["reward"];
                let n = reward["count"].as_u64().unwrap_or(0);
                sum += reward["mean"].as_f64().unwrap_or(0.0) * n as f64;
                count += n;
            }
        }
        peak = peak.max(running);
        if ended == ids.len() {
            return Ok((peak, if count > 0 { sum / count as f64 } else { 0.0 }, count));
        }
        anyhow::ensure!(Instant::now() < deadline, "the jobs did not end in 30 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The figures of both parts.
pub async fn run_serve(trials: usize, concurrency: usize, limit: usize) -> anyhow::Result<Value> {
    let dir = repo_root().join("target/bench/serve");
    // A fresh directory each run: the jobs' names repeat.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let task = repo_root().join("examples/tasks/hello-world");
    let server = MockServer::start(hello_world_script(0.3), 0).await?;
    let api_base = server.api_base();

    // Part 1: one job through `run`, then through the service.
    let job = JobFile {
        dir: dir.as_path(),
        name: "direct",
        api_base: &api_base,
        task: &task,
        attempts: trials,
        concurrency,
        kwargs: "",
        extra: "",
    }
    .write()?;
    let started = Instant::now();
    let mut child = spawn_terminus(
        &["run", "-q", "-c", job.to_str().unwrap_or_default()],
        dir.as_path(),
        &dir.as_path().join("run.log"),
    )?;
    let status = child.wait()?;
    let run_wall = started.elapsed().as_secs_f64();
    anyhow::ensure!(status.success(), "terminus run failed: {status}");
    let service = start_service(&dir.as_path().join("data"), concurrency)?;
    let started = Instant::now();
    let id = submit(&service, &config("served", &task, &api_base, trials, concurrency))?;
    let (_, reward, scored) = follow(&service, std::slice::from_ref(&id)).await?;
    let serve_wall = started.elapsed().as_secs_f64();
    drop(service);
    let ratio = serve_wall / run_wall;
    println!(
        "same job, {trials} trials at {concurrency}: run {run_wall:.1} s, serve {serve_wall:.1} s ({:+.1} %), {scored} scored, mean {reward:.2}",
        (ratio - 1.0) * 100.0
    );

    // Part 2: 200 trials as 4 jobs under one limit.
    let service = start_service(&dir.as_path().join("data-many"), limit)?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(submit(&service, &config(&format!("many-{n}"), &task, &api_base, 50, 50))?);
    }
    let (peak, mean, count) = follow(&service, &ids).await?;
    let many_wall = started.elapsed().as_secs_f64();
    drop(service);
    // The limit's own count, which the service logs when it stops (the rows lag by up to
    // 200 ms per job, so `peak` may count a trial that just ended beside one just started).
    let log = std::fs::read_to_string(dir.join("data-many.log")).unwrap_or_default();
    let counted: Option<u64> = log
        .lines()
        .filter_map(|l| l.split("peak_running=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .next_back();
    println!(
        "200 trials as 4 jobs, limit {limit}: {many_wall:.1} s, at most {} running at once by the limit's count ({peak} in the rows), {count} scored, mean {mean:.2}",
        counted.map_or("?".to_string(), |n| n.to_string())
    );
    server.shutdown();
    Ok(json!({
        "same_job": {"trials": trials, "concurrency": concurrency, "run_wall_s": run_wall, "serve_wall_s": serve_wall,
                     "overhead_pct": (ratio - 1.0) * 100.0, "scored": scored, "mean_reward": reward},
        "four_jobs": {"trials": 200, "limit": limit, "wall_s": many_wall, "peak_running_rows": peak,
                      "peak_running": counted, "within_limit": counted.is_some_and(|n| n <= limit as u64), "scored": count, "mean_reward": mean},
    }))
}
