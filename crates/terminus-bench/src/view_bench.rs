//! `--view`: how fast the viewer opens a large job. A synthetic job of `--trials` trials whose
//! trajectories add up to about `--view-mb` megabytes (1 GB by default: 500 trials × 2 MB) is
//! written under `target/bench/view-jobs/` (once per shape), then the real `terminus view`
//! binary is started on it and each page's API call is timed over loopback: the first call
//! (the viewer's caches empty, and with `--cold` the kernel's page cache dropped too) and the
//! median of the next five.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_bench::{dir_bytes, median_p90, repo_root, terminus_bin};
use terminus_core::ids::{JobId, TrialName};
use terminus_core::result::{
    AgentContext, AgentInfo, ModelInfo, TaskIdRecord, TrialConfig, TrialResult, VerifierResult,
};
use terminus_core::stats::{JobResult, JobStats, LiveCounts};

/// One step of a synthetic trajectory: an agent reply with a command and its output.
fn step(id: u64, observation: &str) -> Value {
    json!({
        "step_id": id,
        "timestamp": "2026-01-01T00:00:00.000000+00:00",
        "source": "agent",
        "model_name": "gpt-4o",
        "message": format!("Analysis: step {id} of a long run.\nPlan: print more lines."),
        "tool_calls": [{"tool_call_id": format!("call_{id}"), "function_name": "bash_command",
            "arguments": {"keystrokes": "seq 1 500\n", "duration": 1.0}}],
        "observation": {"results": [{"content": observation}]},
        "metrics": {"prompt_tokens": 1000 + id, "completion_tokens": 50},
        "llm_call_count": 1
    })
}

fn trial_result(name: &TrialName, task: &str, reward: f64) -> TrialResult {
    let now = terminus_core::time::now();
    let agent = AgentInfo {
        name: "terminus-2".into(),
        version: "2.0.0".into(),
        model_info: Some(ModelInfo::from_model_name("openai/gpt-4o")),
    };
    let task_id = TaskIdRecord { path: format!("/tasks/{task}"), git_url: None, git_commit_id: None };
    TrialResult {
        id: JobId::new().to_string(),
        source: Some("bench".into()),
        agent_result: Some(AgentContext {
            n_input_tokens: Some(120_000),
            n_output_tokens: Some(5_000),
            cost_usd: Some(0.35),
            ..AgentContext::default()
        }),
        verifier_result: Some(VerifierResult { rewards: Some([("reward".to_string(), reward)].into()) }),
        started_at: Some(now),
        finished_at: Some(now),
        ..TrialResult::new(name.clone(), task.to_string(), task_id, TrialConfig::default(), agent)
    }
}

/// Writes the synthetic job (unless a finished one of the same shape is there); returns its
/// directory and the name of one trial.
fn write_job(root: &Path, trials: usize, trajectory_bytes: usize) -> anyhow::Result<(PathBuf, String)> {
    let job = root.join("big");
    let marker = job.join(".bench-shape");
    let shape = format!("{trials} {trajectory_bytes}");
    let first = TrialName::with_suffix("task-0000", "aaaaaaa").to_string();
    if std::fs::read_to_string(&marker).is_ok_and(|s| s == shape) {
        return Ok((job, first));
    }
    let _ = std::fs::remove_dir_all(&job);
    std::fs::create_dir_all(&job)?;
    let observation = "a line of terminal output, as long as usual\n".repeat(480);
    let per_step = serde_json::to_string(&step(1, &observation))?.len();
    let steps = (trajectory_bytes / per_step).max(1) as u64;
    let mut results = Vec::new();
    for i in 0..trials {
        let task = format!("task-{:04}", i / 2);
        let suffix = if i == 0 { "aaaaaaa".to_string() } else { format!("{:07}", i) };
        let name = TrialName::with_suffix(&task, &suffix);
        let dir = job.join(name.as_str());
        std::fs::create_dir_all(dir.join("agent"))?;
        std::fs::create_dir_all(dir.join("verifier"))?;
        let doc = json!({
            "schema_version": "ATIF-v1.8",
            "session_id": name.as_str(),
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "gpt-4o"},
            "steps": (1..=steps).map(|id| step(id, &observation)).collect::<Vec<_>>(),
        });
        std::fs::write(dir.join("agent/trajectory.json"), serde_json::to_vec(&doc)?)?;
        std::fs::write(dir.join("verifier/reward.txt"), "1\n")?;
        let result = trial_result(&name, &task, if i % 3 == 0 { 0.0 } else { 1.0 });
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&result.config)?)?;
        std::fs::write(dir.join("result.json"), serde_json::to_vec_pretty(&result)?)?;
        results.push(result);
    }
    let live = LiveCounts { n_total: trials as u64, ..LiveCounts::default() };
    let stats = JobStats::compute(&results, live, &["mean"], terminus_core::stats::ScoreConvention::Harbor025);
    let now = terminus_core::time::now();
    let result = JobResult {
        id: JobId::new().to_string(),
        started_at: now,
        updated_at: Some(now),
        finished_at: Some(now),
        n_total_trials: trials as u64,
        stats,
        budget: None,
        preflight: None,
        regrade_of: None,
    };
    std::fs::write(job.join("result.json"), serde_json::to_vec_pretty(&result)?)?;
    std::fs::write(
        job.join("config.json"),
        serde_json::to_vec_pretty(
            &json!({"job_name": "big", "agents": [{"name": "terminus-2", "model_name": "openai/gpt-4o"}]}),
        )?,
    )?;
    std::fs::write(&marker, shape)?;
    Ok((job, first))
}

/// One GET over loopback: seconds until the whole body was read, the status and the size.
fn get(addr: &str, path: &str) -> anyhow::Result<(f64, u16, usize)> {
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(addr)?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut body = Vec::new();
    stream.read_to_end(&mut body)?;
    let seconds = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&body[..body.len().min(64)]);
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((seconds, status, body.len()))
}

/// Drops the kernel's page cache (root only), so the first read comes from the disk.
fn drop_page_cache() -> bool {
    // SAFETY-free: plain file writes. `sync` first, so dirty pages can be dropped too.
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

pub fn run_view(trials: usize, total_mb: usize, cold: bool) -> anyhow::Result<Value> {
    let root = repo_root().join("target/bench/view-jobs");
    let trajectory_bytes = total_mb * 1024 * 1024 / trials.max(1);
    println!("view: writing (or reusing) a job of {trials} trials × {} KB trajectories", trajectory_bytes / 1024);
    let (job, trial) = write_job(&root, trials, trajectory_bytes)?;
    let bytes = dir_bytes(&job);
    println!("view: the job holds {:.2} GB", bytes as f64 / 1e9);
    let dropped = cold && drop_page_cache();
    let mut child = std::process::Command::new(terminus_bin())
        .args(["view", "--port", "0"])
        .arg(&root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("piped")), &mut line)?;
    let addr = line
        .split(" at http://")
        .nth(1)
        .map(|s| s.trim().to_string())
        .ok_or_else(|| anyhow::anyhow!("no address from terminus view: {line:?}"))?;
    let pages = [
        ("the page itself (/)", "/".to_string()),
        ("jobs list (/api/jobs)", "/api/jobs".to_string()),
        ("job page: every trial's row (/api/jobs/big)", "/api/jobs/big".to_string()),
        ("trial page (/api/jobs/big/trials/<t>)", format!("/api/jobs/big/trials/{trial}")),
        (
            "trajectory, first 200 steps",
            format!("/api/jobs/big/trials/{trial}/trajectory?path=agent%2Ftrajectory.json&offset=0&limit=200"),
        ),
    ];
    let mut figures = Vec::new();
    for (label, path) in &pages {
        let (first, status, size) = get(&addr, path)?;
        anyhow::ensure!(status == 200, "{path}: status {status}");
        let mut warm = Vec::new();
        for _ in 0..5 {
            warm.push(get(&addr, path)?.0);
        }
        let (median, _) = median_p90(&warm);
        println!("  {label:<48} first {:>7.1} ms   then {:>6.1} ms   ({} KB)", first * 1e3, median * 1e3, size / 1024);
        figures.push(json!({"page": label, "path": path, "first_ms": first * 1e3, "warm_median_ms": median * 1e3, "bytes": size}));
    }
    let _ = child.kill();
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(10));
    Ok(json!({
        "trials": trials,
        "job_bytes": bytes,
        "page_cache_dropped": dropped,
        "pages": figures,
    }))
}
