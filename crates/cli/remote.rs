//! `terminus run --server URL [--watch]`: the job file submitted to a job service speaking
//! Harbor 0.26's API (`terminus serve`, `harbor serve`), then followed with a progress bar.
//!
//! The job file is sent as written (YAML read as JSON, `--job-name` and `-k`/`-n` applied);
//! the server resolves and checks it, so task paths are paths on the server's machine. Plain
//! `http://` only: over another network, put the service behind a TLS proxy.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::args::RunArgs;
use crate::exit;

/// Harbor's API version, sent with every request.
const API_VERSION: &str = "2026-10-30";

/// Why a request to the server got no answer we can use.
#[derive(Debug, thiserror::Error)]
enum RemoteError {
    #[error("`{0}` is not an http:// URL (host and port, no path)")]
    BadUrl(String),
    #[error("cannot reach {addr}: {source}")]
    Unreachable { addr: String, source: std::io::Error },
    #[error("the server answered HTTP {status}: {detail}")]
    Refused { status: u16, detail: String },
}

/// `host:port` of an `http://` URL.
fn address(url: &str) -> Result<String, RemoteError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| RemoteError::BadUrl(url.into()))?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains(['/', '?', '#', '@']) {
        return Err(RemoteError::BadUrl(url.into()));
    }
    Ok(if host.rsplit_once(':').is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit())) && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:80")
    })
}

/// One request, its JSON answer; an error status is [`RemoteError::Refused`] with its detail.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> Result<Value, RemoteError> {
    let unreachable = |source| RemoteError::Unreachable { addr: addr.to_string(), source };
    let socket = std::net::ToSocketAddrs::to_socket_addrs(addr).map_err(unreachable)?.next();
    let socket = socket.ok_or_else(|| unreachable(std::io::Error::other("no address")))?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(10)).map_err(unreachable)?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(unreachable)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nHarbor-API-Version: {API_VERSION}\r\nHarbor-Client: cli\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Ok(token) = std::env::var("HARBOR_API_KEY")
        && !token.is_empty()
    {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(key) = key {
        head.push_str(&format!("Idempotency-Key: {key}\r\n"));
    }
    stream.write_all(format!("{head}\r\n{body}").as_bytes()).map_err(unreachable)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).map_err(unreachable)?;
    let text = String::from_utf8_lossy(&bytes);
    let status: u16 = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let answer: Value = serde_json::from_str(text.split_once("\r\n\r\n").map_or("", |(_, b)| b)).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let detail =
            answer["detail"].as_str().map_or_else(|| text.lines().next().unwrap_or("").to_string(), str::to_string);
        return Err(RemoteError::Refused { status, detail });
    }
    Ok(answer)
}

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
        RemoteError::Refused { .. } => exit::REFUSED,
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
    fn only_plain_http_host_and_port_urls_are_taken() {
        assert_eq!(address("http://127.0.0.1:8390").unwrap(), "127.0.0.1:8390");
        assert_eq!(address("http://127.0.0.1:8390/").unwrap(), "127.0.0.1:8390");
        assert_eq!(address("http://example.com").unwrap(), "example.com:80");
        for bad in ["https://x:1", "127.0.0.1:8390", "http://x:1/api", "http://u@x:1", "http://"] {
            assert!(matches!(address(bad), Err(RemoteError::BadUrl(_))), "{bad}");
        }
    }

    #[test]
    fn the_progress_line_names_the_counts_that_matter() {
        let job = json!({"state": "running", "n_errors": 1,
            "rollouts": {"n_running": 2, "n_queued": 0, "n_paused": 1, "n_cancelling": 0, "n_cancelled": 0}});
        assert_eq!(describe(&job), "running, 2 running, 1 paused, 1 error");
    }
}
