//! `node-loss`: a job on the swarm test bed (`scripts/swarm.sh`) while workers' dockerd are
//! killed with SIGKILL and started again, one after the other. Every trial must be present
//! once, rewarded, and nothing of the job may be left on the manager or any node.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::json;
use terminus_bench::{JobFile, Tally, hello_world_script, job_id, spawn_terminus, trial_results};
use terminus_mock_llm::MockServer;
use terminus_sandbox::swarm::{SwarmSettings, TlsFiles};
use terminus_sandbox::{Backend, LABEL_JOB_ID};

use crate::case::{Case, Ctx, JOB_DEADLINE, errored, wait_bounded};

const TRIALS: usize = 30;
const LOSSES: usize = 2;

struct Bed {
    manager: String,
    node_port: u16,
    registry: String,
    script: PathBuf,
    workers: usize,
    /// The client's certificates (`ca.pem`, `cert.pem`, `key.pem`).
    tls: PathBuf,
}

fn bed() -> anyhow::Result<Bed> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| anyhow::anyhow!("{name} is not set: run through scripts/chaos.sh node-loss"))
    };
    Ok(Bed {
        manager: var("TERMINUS_SWARM_MANAGER")?,
        node_port: var("TERMINUS_SWARM_NODE_PORT")?.parse()?,
        registry: var("TERMINUS_SWARM_REGISTRY")?,
        script: PathBuf::from(var("TERMINUS_SWARM_SCRIPT")?),
        workers: var("TERMINUS_SWARM_WORKERS")?.parse()?,
        tls: PathBuf::from(var("TERMINUS_SWARM_TLS_DIR")?),
    })
}

/// The workers (`wK`) running a container of the job now.
async fn workers_running_the_job(bed: &Bed, tls: &TlsFiles, job_dir: &std::path::Path) -> Vec<String> {
    let Some(id) = job_id(job_dir) else { return Vec::new() };
    let mut busy = Vec::new();
    for k in 1..=bed.workers {
        // The bed's addresses: the manager at .10, worker K at .(10 + K).
        let host = bed.manager.trim_start_matches("tcp://").split(':').next().unwrap_or_default();
        let Some((prefix, _)) = host.rsplit_once('.') else { continue };
        let address = format!("tcp://{prefix}.{}:{}", 10 + k, bed.node_port);
        let Ok(engine) = terminus_sandbox::swarm::connect_daemon(&address, Some(tls)).await else { continue };
        let running = engine.running_with_label(&format!("{LABEL_JOB_ID}={id}")).await.unwrap_or_default();
        if !running.is_empty() {
            busy.push(format!("w{k}"));
        }
    }
    busy
}

pub async fn node_loss(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let bed = bed()?;
    let dir = ctx.case_dir("node-loss")?;
    let server = MockServer::start(hello_world_script(1.5), 0).await?;
    let api_base = server.api_base();
    let tls = TlsFiles { ca: bed.tls.join("ca.pem"), cert: bed.tls.join("cert.pem"), key: bed.tls.join("key.pem") };
    let environment = format!(
        "environment:\n  type: swarm\n  swarm:\n    manager: {}\n    tls: {}\n    node_port: {}\n    registry: {}\n    constraints: [\"node.role==worker\"]\nsupervision:\n  max_restarts: 5\n  intensity_max_restarts: 100\n",
        bed.manager,
        bed.tls.display(),
        bed.node_port,
        bed.registry
    );
    let config = JobFile {
        dir: &dir,
        name: "job",
        api_base: &api_base,
        task: &ctx.hello,
        attempts: TRIALS,
        concurrency: 9,
        kwargs: "",
        extra: &environment,
    }
    .write()?;
    let job_dir = dir.join("job");
    let log = dir.join("terminus.log");
    let mut child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
    let mut rng = rand::rng();
    let mut losses = Vec::new();
    let deadline = Instant::now() + JOB_DEADLINE;
    for _ in 0..LOSSES {
        // Somewhere in the job, a worker running trials of it goes; it comes back 15 s later
        // (after the manager has marked it down).
        tokio::time::sleep(Duration::from_secs_f64(rng.random_range(2.0..5.0))).await;
        let mut busy = Vec::new();
        while busy.is_empty() && child.try_wait()?.is_none() && Instant::now() < deadline {
            busy = workers_running_the_job(&bed, &tls, &job_dir).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if child.try_wait()?.is_some() || busy.is_empty() {
            break;
        }
        let worker = busy[rng.random_range(0..busy.len())].clone();
        let stopped = std::process::Command::new(&bed.script).args(["stop-node", &worker]).status()?.success();
        let done_at_loss = trial_results(&job_dir).len();
        tokio::time::sleep(Duration::from_secs(15)).await;
        let back = std::process::Command::new(&bed.script).args(["start-node", &worker]).status()?.success();
        losses.push(json!({"worker": worker, "stopped": stopped, "back": back, "finished_at_loss": done_at_loss}));
    }
    let code = wait_bounded(child, JOB_DEADLINE).await;
    server.shutdown();
    // Leftovers on the whole swarm: services on the manager, containers on every node, once the
    // returned nodes have been swept (the sweep runs when the job's watcher sees them back, or at
    // the job's end).
    let settings = SwarmSettings {
        manager: bed.manager.clone(),
        tls: Some(tls.clone()),
        node_port: bed.node_port,
        node_tls: Some(tls),
        registry: None,
        constraints: Vec::new(),
        labels: Default::default(),
    };
    let backend = Backend::swarm(settings).await?;
    let id = job_id(&job_dir).unwrap_or_default();
    let leaked = backend
        .labelled(LABEL_JOB_ID)
        .await
        .map(|items| items.iter().filter(|i| i.labels.get(LABEL_JOB_ID) == Some(&id)).count())
        .unwrap_or(usize::MAX);
    let local = terminus_bench::tally(&job_dir, TRIALS, &ctx.engine).await;
    let tally = Tally { leaked: local.leaked + leaked, ..local };
    let errors = errored(&job_dir);
    let restarts: u64 = trial_results(&job_dir).iter().map(|r| r["restarts"].as_u64().unwrap_or(0)).sum();
    Ok(Case {
        name: "node-loss",
        tally,
        checks: vec![
            (format!("{} workers lost and back", losses.len()), losses.len() == LOSSES),
            (format!("the job exited {code:?} (expected 0)"), code == Some(0)),
            (format!("{errors} trials errored"), errors == 0),
            (format!("{restarts} trials restarted on another node"), restarts > 0),
        ],
        figures: json!({"losses": losses, "restarts": restarts, "exit_code": code}),
        seconds: started.elapsed().as_secs_f64(),
    })
}
