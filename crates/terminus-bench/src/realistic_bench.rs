//! `terminus-bench --realistic`: the load of a real benchmark run on this host. T trials of
//! hello-world, each 26 episodes (Terminus 2's median on Terminal-Bench) against a mock model
//! that answers after LATENCY seconds, run once per fixed concurrency and once with
//! `n_concurrent_trials: auto` (admission by measured host capacity). For each: how many
//! trials were rewarded, the wall time, the orchestrator's CPU (share of one core), the
//! per-episode loop overhead (median of the first and of the last five episodes), and the CPU
//! the engine's daemons (dockerd, containerd) spent meanwhile. It shows where the host, not the
//! orchestrator, makes trials fail: a level past which trials hit their agent limit. The `auto`
//! run also says how its limit moved (from the job's log: the highest and the last limit, and
//! how many cuts for saturation).

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
    /// Also run with `n_concurrent_trials: auto`.
    pub auto: bool,
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

/// Host CPU by process name over a run, from /proc read every [`SAMPLE_EVERY`]. Each process's
/// own CPU counts as last read (one that lived between two readings is missed, one that exited
/// loses at most its last interval), and so does what it got back from its children when they
/// ended (`cutime`/`cstime`): short-lived helpers — the engine's re-executions of itself for
/// archive copies and network set-up, the runtime per exec, a tmux client per command — show
/// under the process that started them. Processes are told apart by PID and start time (PIDs are
/// reused when hundreds of short execs run).
struct ProcessCpu {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Readings>,
    before: Readings,
}

/// (pid, start time) → (name, own clock ticks, ended children's clock ticks).
type Readings = std::collections::HashMap<(u32, u64), (String, u64, u64)>;

const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Every process now.
fn processes() -> Readings {
    let mut found = Readings::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        let Some((_, comm)) = head.split_once(" (") else { continue };
        // After the command, state is field 3: utime, stime, cutime, cstime and starttime are
        // fields 14 to 17 and 22.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        found.insert((pid, field(22)), (comm.to_string(), field(14) + field(15), field(16) + field(17)));
    }
    found
}

/// CPU seconds per process name, largest first.
type ByName = Vec<(String, f64)>;

impl ProcessCpu {
    fn start() -> ProcessCpu {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let before = processes();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Readings::new();
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                seen.extend(processes());
                std::thread::sleep(SAMPLE_EVERY);
            }
            seen.extend(processes());
            seen
        });
        ProcessCpu { stop, thread, before }
    }

    /// Over the run: each name's own CPU, and its ended children's.
    fn finish(self) -> (ByName, ByName) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let seen = self.thread.join().unwrap_or_default();
        let mut own: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        let mut children: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for (key, (comm, ticks, reaped)) in seen {
            let (earlier, earlier_reaped) = self.before.get(&key).map_or((0, 0), |(_, t, c)| (*t, *c));
            *own.entry(comm.clone()).or_default() += ticks.saturating_sub(earlier);
            *children.entry(comm).or_default() += reaped.saturating_sub(earlier_reaped);
        }
        // Clock ticks per second: 100 on Linux for /proc's stat fields.
        let seconds = |by: std::collections::BTreeMap<String, u64>| {
            let mut named: ByName =
                by.into_iter().filter(|(_, t)| *t > 0).map(|(n, t)| (n, t as f64 / 100.0)).collect();
            named.sort_by(|a, b| b.1.total_cmp(&a.1));
            named
        };
        (seconds(own), seconds(children))
    }
}

/// The limits adaptive admission set, in order, and how many of the changes were cuts, from a
/// job's log (`admission: …` lines with `to=N`).
fn admission_changes(log: &str) -> (Vec<usize>, usize) {
    let mut limits = Vec::new();
    let mut cuts = 0;
    for line in log.lines().filter(|l| l.contains("admission:")) {
        let to = line.split_whitespace().find_map(|w| w.strip_prefix("to=")).and_then(|n| n.parse().ok());
        if let Some(to) = to {
            limits.push(to);
            cuts += usize::from(line.contains("saturated"));
        }
    }
    (limits, cuts)
}

/// One run at `concurrency` (None: `auto`): its figures.
async fn run_at(shape: &RealisticShape, concurrency: Option<usize>) -> anyhow::Result<Value> {
    let label = concurrency.map_or("auto".to_string(), |n| n.to_string());
    let max_requests = concurrency.unwrap_or(shape.trials);
    let dir = repo_root().join("target/bench/realistic");
    std::fs::create_dir_all(&dir)?;
    let server = MockServer::start(script(shape.latency), 0).await?;
    let name = format!("realistic-{label}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"));
    let task = repo_root().join("examples/tasks/hello-world");
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_attempts: {}\nn_concurrent_trials: {label}\nllm:\n  max_concurrent_requests: {max_requests}\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: {}\n      model_info:\n        max_input_tokens: 100000000\ntasks:\n  - path: {}\n",
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
    let profile = ProcessCpu::start();
    let started = Instant::now();
    let child =
        spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], &dir, &dir.join(format!("{name}.log")))?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let daemons_cpu = daemons() - daemons_before;
    let (by_process, by_parent) = profile.finish();
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
    let log = std::fs::read_to_string(dir.join(&name).join("job.log")).unwrap_or_default();
    let (limits, cuts) = admission_changes(&log);
    let saturated = log.contains("the host is saturated");
    let figures = json!({
        "concurrency": label,
        "admission_limits": limits,
        "admission_cuts": cuts,
        "saturation_warned": saturated,
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
        "host_cpu_sec_by_process": by_process.iter().take(12).map(|(n, s)| json!({"process": n, "cpu_sec": s})).collect::<Vec<_>>(),
        "host_cpu_sec_of_ended_children_by_parent": by_parent.iter().take(8).map(|(n, s)| json!({"parent": n, "cpu_sec": s})).collect::<Vec<_>>(),
        "job_dir": dir.join(&name).display().to_string(),
    });
    let admission = match (concurrency, limits.iter().max(), limits.last()) {
        (None, Some(peak), Some(last)) => format!(", admission: peak {peak}, last {last}, {cuts} cuts"),
        (None, _, _) => ", admission: the limit never moved".to_string(),
        (Some(_), _, _) if saturated => ", the host said saturated".to_string(),
        _ => String::new(),
    };
    println!(
        "  {label:>4} at once: {rewarded}/{} rewarded ({timeouts} agent timeouts), wall {wall:.0} s, orchestrator {:.1} % of one core, loop overhead {:.0} / {:.0} ms (first / last 5 episodes), dockerd+containerd {daemons_cpu:.1} CPU s{admission}",
        shape.trials,
        100.0 * usage.cpu_seconds / wall,
        median_p90(&first).0,
        median_p90(&last).0,
    );
    let episodes = (shape.trials * EPISODES) as f64;
    let top = |named: &ByName| -> String {
        let top: Vec<String> = named
            .iter()
            .take(6)
            .map(|(name, sec)| format!("{name} {sec:.1} s ({:.1} ms/episode)", 1000.0 * sec / episodes))
            .collect();
        top.join(", ")
    };
    println!("        host CPU by process: {}", top(&by_process));
    println!("        host CPU of ended children, by parent: {}", top(&by_parent));
    Ok(figures)
}

pub async fn run_realistic(shape: &RealisticShape) -> anyhow::Result<Value> {
    println!(
        "realistic: {} trials × {EPISODES} episodes of hello-world, the model answering in {} s, at {:?} at once{}, recording {}",
        shape.trials,
        shape.latency,
        shape.concurrencies,
        if shape.auto { " and auto" } else { "" },
        if shape.record { "on" } else { "off" }
    );
    let mut runs = Vec::new();
    for &concurrency in &shape.concurrencies {
        runs.push(run_at(shape, Some(concurrency)).await?);
    }
    if shape.auto {
        runs.push(run_at(shape, None).await?);
    }
    Ok(
        json!({"episodes": EPISODES, "latency_sec": shape.latency, "record_terminal_session": shape.record, "runs": runs}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_changes_are_read_from_the_job_log() {
        let log = "2026-12-04T22:00:01Z  INFO terminus_actors::supervisor: admission: the host keeps up from=8 to=12 running=8\n\
                   2026-12-04T22:00:03Z  WARN something else to=99\n\
                   2026-12-04T22:00:05Z  INFO terminus_actors::supervisor: admission: saturated: terminal round trip 300 ms (median) from=12 to=9 running=12\n";
        assert_eq!(admission_changes(log), (vec![12, 9], 1));
        assert_eq!(admission_changes(""), (Vec::new(), 0));
    }
}
