//! `terminus-chaos`: breaks things on purpose and counts what survives.
//!
//! Every case drives the real `terminus` binary against the real engine with the mock model on
//! loopback, then prints expected / present / duplicated / leaked:
//!
//! - `kill9`: kill -9 of the orchestrator at random moments of a 100-trial job, then
//!   `terminus resume`, ten times, and a last resume to the end;
//! - `container-kills`: the engine's API kills a random running trial container, 20 times in one job;
//! - `llm-faults`: the mock model answers with 429 + Retry-After, 500, garbage bodies and dropped
//!   connections; token totals must equal what the server sent;
//! - `dockerd-restart`: dockerd is stopped and started again in the middle of a job (trials may
//!   error or restart; none may be lost or run twice);
//! - `bad-inputs`: 20 malformed job files and 20 malformed tasks, each a clear error with the
//!   documented exit code and nothing written outside the job directory;
//! - `adversary`: hostile models, agents and tasks beside ordinary trials (degenerate replies,
//!   dash-led keys, planted rewards and survivors, a terminal flood, a log and file-count bomb,
//!   a fork bomb, task links), two runs of one job directory, a full loop-mounted disk, and a
//!   stopped dockerd (see [`adversary`]);
//! - `lost-lines`: 48 trials at 24 at once, then 100 at once, whose terminals print numbered
//!   lines at random delays while the agent looks: every line of each pane log must be in the
//!   trial's observations, in order (see [`lost_lines`]);
//! - `runaway`: degenerate replies, summaries larger than the context, a model that never says
//!   done, a budget reached mid-job, each a job that must end by itself with bounded calls,
//!   disk and orchestrator memory (see [`runaway`]);
//! - `trust`: verdict forgery under `agent_processes: kill`, agents that end their own
//!   container, a model that repeats itself after every summary, hostile Dockerfiles, providers
//!   that state no usable usage against a budget, a planted episode record (see [`trust`]).
//!
//! For a trial job, "present" counts the planned trials that have a result and "leaked" the
//! job's containers left on the engine. For `bad-inputs`, "present" counts the inputs answered
//! with the expected exit code and a message naming the culprit, and "leaked" counts files
//! written outside the job directory plus containers left.
//!
//! Run with: `scripts/chaos.sh [CASE...]`

use serde_json::json;
use terminus_bench::repo_root;
use terminus_sandbox::Engine;

mod adversary;
mod hostile_tasks;
mod lost_lines;
mod node_loss;
mod runaway;
mod trust;

mod bad_inputs;
mod case;
mod faults;

use bad_inputs::bad_inputs;
use case::Ctx;
use faults::{container_kills, dockerd_restart, kill9, llm_faults};

const CASES: [&str; 11] = [
    "kill9",
    "container-kills",
    "llm-faults",
    "dockerd-restart",
    "bad-inputs",
    "adversary",
    "lost-lines",
    "runaway",
    "hostile-tasks",
    "node-loss",
    "trust",
];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut selected: Vec<String> = std::env::args().skip(1).collect();
    if selected.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: terminus-chaos [CASE...]   cases: {}", CASES.join(", "));
        return Ok(());
    }
    if let Some(unknown) = selected.iter().find(|a| !CASES.contains(&a.as_str())) {
        anyhow::bail!("unknown case {unknown:?}; cases: {}", CASES.join(", "));
    }
    if selected.is_empty() {
        selected = CASES.iter().map(|c| c.to_string()).collect();
    }
    let engine = Engine::connect().await?;
    let engine_version = engine.version().await?;
    let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string();
    let ctx = Ctx {
        engine,
        root: repo_root().join("target/chaos").join(&stamp),
        hello: repo_root().join("examples/tasks/hello-world"),
    };
    let ctx = Ctx { hello: ctx.hello.canonicalize()?, ..ctx };
    println!(
        "chaos suite: {} cores, engine {engine_version}; files under {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        ctx.root.display()
    );
    let mut reports = Vec::new();
    let mut all_ok = true;
    for name in &selected {
        println!("case {name}");
        let outcome = match name.as_str() {
            "kill9" => kill9(&ctx).await,
            "container-kills" => container_kills(&ctx).await,
            "llm-faults" => llm_faults(&ctx).await,
            "dockerd-restart" => dockerd_restart(&ctx).await,
            "adversary" => adversary::adversary(&ctx).await,
            "lost-lines" => lost_lines::lost_lines(&ctx).await,
            "runaway" => runaway::runaway(&ctx).await,
            "hostile-tasks" => hostile_tasks::hostile_tasks(&ctx).await,
            "node-loss" => node_loss::node_loss(&ctx).await,
            "trust" => trust::trust(&ctx).await,
            _ => bad_inputs(&ctx).await,
        };
        match outcome {
            Ok(case) => {
                let ok = case.ok();
                all_ok &= ok;
                println!("  {} — {} ({:.0} s)", if ok { "ok" } else { "FAILED" }, case.tally, case.seconds);
                for (check, held) in &case.checks {
                    println!("    [{}] {check}", if *held { "x" } else { " " });
                }
                reports.push(json!({
                    "case": case.name,
                    "ok": ok,
                    "expected": case.tally.expected,
                    "present": case.tally.present,
                    "duplicated": case.tally.duplicated,
                    "leaked": case.tally.leaked,
                    "checks": case.checks.iter().map(|(c, ok)| json!({"check": c, "ok": ok})).collect::<Vec<_>>(),
                    "figures": case.figures,
                    "seconds": case.seconds,
                }));
            }
            Err(e) => {
                all_ok = false;
                println!("  FAILED — {e:#}");
                reports.push(json!({"case": name, "ok": false, "error": format!("{e:#}")}));
            }
        }
    }
    let report = json!({
        "date": chrono::Utc::now().to_rfc3339(),
        "machine": {"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0), "engine": engine_version},
        "cases": reports,
    });
    std::fs::create_dir_all(&ctx.root)?;
    let out = ctx.root.join("chaos.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)?)?;
    println!("report written to {}", out.display());
    if !all_ok {
        anyhow::bail!("some chaos cases failed");
    }
    Ok(())
}
