//! Trials on a real multi-node Docker Swarm: the test bed of `scripts/swarm.sh up` —
//! a manager and three workers, each its own dockerd in its own network namespace, and a
//! registry. `scripts/swarm.sh test` brings it up, runs these tests and tears it down.
//!
//! Without the bed's settings (`TERMINUS_SWARM_MANAGER`…, printed by `scripts/swarm.sh env`)
//! the tests are skipped, unless `TERMINUS_REQUIRE_SWARM=1`, which makes them fail.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bollard::Docker;
use serde_json::json;
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    cmd, example, heavy_lock, job_id, poll, read_json, reply, repo_root, temp_dir, terminus_bin, trial_dirs, usage,
    wait_until, write_job,
};

/// The test bed, as `scripts/swarm.sh env` describes it.
struct Bed {
    manager: String,
    /// The manager's own socket (the orchestrator on the manager's machine).
    manager_socket: String,
    node_port: u16,
    registry: String,
    script: PathBuf,
    /// The client's certificates: `ca.pem`, `cert.pem`, `key.pem`.
    tls: PathBuf,
}

fn bed() -> Option<Bed> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let bed = (|| {
        Some(Bed {
            manager: var("TERMINUS_SWARM_MANAGER")?,
            manager_socket: var("TERMINUS_SWARM_MANAGER_SOCKET")?,
            node_port: var("TERMINUS_SWARM_NODE_PORT")?.parse().ok()?,
            registry: var("TERMINUS_SWARM_REGISTRY")?,
            script: PathBuf::from(var("TERMINUS_SWARM_SCRIPT")?),
            tls: PathBuf::from(var("TERMINUS_SWARM_TLS_DIR")?),
        })
    })();
    if bed.is_none() {
        if std::env::var("TERMINUS_REQUIRE_SWARM").as_deref() == Ok("1") {
            panic!("TERMINUS_REQUIRE_SWARM=1 but no swarm test bed is described; run scripts/swarm.sh test");
        }
        crate::support::skip("swarm", "no swarm test bed (scripts/swarm.sh test runs these tests)");
    }
    bed
}

/// A daemon of the bed, over TLS with the client's certificates.
async fn connect(bed: &Bed, address: &str) -> Docker {
    let host = address.trim_start_matches("tcp://");
    let docker = Docker::connect_with_ssl(
        host,
        &bed.tls.join("key.pem"),
        &bed.tls.join("cert.pem"),
        &bed.tls.join("ca.pem"),
        30,
        bollard::API_DEFAULT_VERSION,
    )
    .unwrap();
    docker.negotiate_version().await.unwrap()
}

/// Every daemon of the swarm that answers: the manager and each node (by hostname).
async fn daemons(bed: &Bed) -> Vec<(String, Docker)> {
    let manager = connect(bed, &bed.manager).await;
    let nodes = manager.list_nodes(None::<bollard::query_parameters::ListNodesOptions>).await.unwrap();
    let mut out = Vec::new();
    for node in nodes {
        let host = node.description.and_then(|d| d.hostname).unwrap_or_default();
        let addr = node.status.and_then(|s| s.addr).unwrap_or_default();
        let docker = connect(bed, &format!("tcp://{addr}:{}", bed.node_port)).await;
        if docker.ping().await.is_ok() {
            out.push((host, docker));
        }
    }
    out
}

/// What the job left on the swarm: its services, and its containers on each node that answers.
async fn leftovers(bed: &Bed, job_id: &str) -> (usize, Vec<(String, usize)>) {
    let filter = HashMap::from([("label".to_string(), vec![format!("terminus.job_id={job_id}")])]);
    let manager = connect(bed, &bed.manager).await;
    let options = bollard::query_parameters::ListServicesOptionsBuilder::default().filters(&filter).build();
    let services = manager.list_services(Some(options)).await.unwrap().len();
    let mut containers = Vec::new();
    for (host, docker) in daemons(bed).await {
        let options =
            bollard::query_parameters::ListContainersOptionsBuilder::default().all(true).filters(&filter).build();
        let n = docker.list_containers(Some(options)).await.unwrap().len();
        if n > 0 {
            containers.push((host, n));
        }
    }
    (services, containers)
}

/// A job on the bed: its manager over TLS (or `manager`), the nodes over TLS, the registry.
fn job_yaml(dir: &Path, bed: &Bed, name: &str, extra: &str, agent: &str, tasks: &[PathBuf]) -> PathBuf {
    job_yaml_with(dir, bed, &bed.manager, name, extra, agent, tasks)
}

fn job_yaml_with(
    dir: &Path,
    bed: &Bed,
    manager: &str,
    name: &str,
    extra: &str,
    agent: &str,
    tasks: &[PathBuf],
) -> PathBuf {
    let tls = |key: &str| format!("    {key}: {}\n", bed.tls.display());
    // TLS applies to a tcp:// manager; the nodes are always reached over TLS.
    let manager_tls = if manager.starts_with("tcp://") { tls("tls") } else { String::new() };
    let extra = format!(
        "{extra}environment:\n  type: swarm\n  swarm:\n    manager: {manager}\n{manager_tls}{}    node_port: {}\n    registry: {}\n    constraints: [\"node.role==worker\"]\n",
        tls("node_tls"),
        bed.node_port,
        bed.registry,
    );
    write_job(dir, name, &extra, agent, tasks)
}

const ORACLE: &str = "  - name: terminus-2\n    model_name: oracle\n";

/// `terminus run -c config` in the background.
fn spawn_run(config: &Path) -> std::process::Child {
    Command::new(terminus_bin())
        .args(["run", "-c"])
        .arg(config)
        .current_dir(repo_root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(terminus_bin()).args(args).current_dir(repo_root()).output_bounded().expect("terminus runs")
}

/// Each trial's (host, reward), and that no trial ran twice.
fn outcomes(job_dir: &Path) -> Vec<(String, Option<f64>, u64)> {
    outcomes_with_notes(job_dir).into_iter().map(|(host, reward, restarts, _)| (host, reward, restarts)).collect()
}

/// [`outcomes`] with each trial's warnings.
fn outcomes_with_notes(job_dir: &Path) -> Vec<(String, Option<f64>, u64, Vec<String>)> {
    let mut keys = HashSet::new();
    trial_dirs(job_dir)
        .iter()
        .map(|trial| {
            let config = read_json(&trial.join("config.json"));
            let key = (config["task"]["path"].as_str().unwrap().to_string(), config["attempt"].as_u64().unwrap());
            assert!(keys.insert(key.clone()), "{key:?} ran twice");
            let result = read_json(&trial.join("result.json"));
            (
                result["host"].as_str().unwrap_or_default().to_string(),
                result["verifier_result"]["rewards"]["reward"].as_f64(),
                result["restarts"].as_u64().unwrap_or(0),
                result["warnings"]
                    .as_array()
                    .map(|w| w.iter().filter_map(|n| n.as_str().map(String::from)).collect())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// Each errored trial's exception, for a failure's message.
fn errors_of(job_dir: &Path) -> Vec<String> {
    trial_dirs(job_dir)
        .iter()
        .filter_map(|t| {
            let result = read_json(&t.join("result.json"));
            let e = &result["exception_info"];
            (!e.is_null()).then(|| format!("{} on {}: {}", e["exception_type"], result["host"], e["exception_message"]))
        })
        .collect()
}

/// 30 trials over three workers: every reward right, trials on every worker, nothing left.
#[tokio::test(flavor = "multi_thread")]
async fn thirty_trials_spread_over_every_worker_and_leave_nothing() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let dir = temp_dir("swarm-30");
    let config = job_yaml(
        dir.path(),
        &bed,
        "thirty",
        "n_attempts: 10\nn_concurrent_trials: 12\n",
        ORACLE,
        &[example("hello-world"), example("count-errors"), example("fix-python-bug")],
    );
    let out = tokio::task::spawn_blocking(move || run(&["run", "-c", config.to_str().unwrap()])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("thirty");
    let trials = outcomes(&job_dir);
    assert_eq!(trials.len(), 30);
    assert!(trials.iter().all(|(_, reward, _)| *reward == Some(1.0)), "{trials:?}");
    let hosts: HashSet<&str> = trials.iter().map(|(host, _, _)| host.as_str()).collect();
    for worker in ["tsw-w1", "tsw-w2", "tsw-w3"] {
        assert!(hosts.contains(worker), "no trial ran on {worker}: {hosts:?}");
    }
    assert!(!hosts.contains("tsw-m"), "the constraint keeps trials off the manager");
    assert_eq!(leftovers(&bed, &job_id(&job_dir)).await, (0, vec![]));
}

/// Reservations larger than the cluster holds: Swarm queues the trials (said, with its reason)
/// and they all finish. No registry here: the task's image is streamed to the workers.
#[tokio::test(flavor = "multi_thread")]
async fn reservations_beyond_the_cluster_queue_trials_until_they_fit() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let dir = temp_dir("swarm-queue");
    // Each node offers this machine's two CPUs: 1.5 per trial fits one trial per worker.
    let task = dir.path().join("tasks/big");
    std::fs::create_dir_all(dir.path().join("tasks")).unwrap();
    let status = Command::new("cp").arg("-r").arg(example("hello-world")).arg(&task).status_bounded().unwrap();
    assert!(status.success());
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap().replace("cpus = 1\n", "cpus = 1.5\n");
    assert!(toml.contains("cpus = 1.5"), "{toml}");
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let config = job_yaml(dir.path(), &bed, "queue", "n_attempts: 6\nn_concurrent_trials: 6\n", ORACLE, &[task]);
    // Without a registry: the image is streamed from the manager to each worker that lacks it.
    let yaml = std::fs::read_to_string(&config).unwrap();
    let yaml = yaml.replace(&format!("    registry: {}\n", bed.registry), "");
    assert!(!yaml.contains("registry"), "{yaml}");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run(&["run", "-c", config.to_str().unwrap()])).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.lines().any(|l| l.contains("queued on the cluster") && l.contains("insufficient resources")),
        "no trial was queued with Swarm's reason:\n{stdout}"
    );
    let job_dir = dir.path().join("queue");
    let trials = outcomes(&job_dir);
    assert_eq!(trials.len(), 6);
    assert!(trials.iter().all(|(_, reward, _)| *reward == Some(1.0)), "{trials:?}");
    assert_eq!(leftovers(&bed, &job_id(&job_dir)).await, (0, vec![]));
}

/// Slow trials (the model answers after `delay_ms`), for the tests that break things mid-job.
async fn slow_model(delay_ms: u64, episodes: usize) -> MockServer {
    let reply = |commands: serde_json::Value, complete: bool| Turn {
        usage: usage(10, 5),
        delay_ms: Some(delay_ms),
        ..reply(commands, complete)
    };
    let mut turns: Vec<Turn> = (0..episodes).map(|i| reply(cmd(&format!("echo tick {i}\n"), 0.1), false)).collect();
    turns.push(reply(cmd("printf 'Hello, world!\\n' > hello.txt\n", 0.1), false));
    turns.push(reply(json!([]), true));
    turns.push(reply(json!([]), true));
    let script = Script { conversations: vec![Conversation { when: "hello.txt".into(), turns }], ..Script::default() };
    MockServer::start(script, 0).await.unwrap()
}

fn mock_agent(server: &MockServer) -> String {
    format!("  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n", server.api_base())
}

/// How many of the job's containers run on the node with hostname `host`.
async fn trials_on(bed: &Bed, job_dir: &Path, host: &str) -> usize {
    let Some(id) = std::fs::read_to_string(job_dir.join("result.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v["id"].as_str().map(String::from))
    else {
        return 0;
    };
    let filter = HashMap::from([("label".to_string(), vec![format!("terminus.job_id={id}")])]);
    for (name, docker) in daemons(bed).await {
        if name == host {
            let options = bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filter).build();
            return docker.list_containers(Some(options)).await.map(|l| l.len()).unwrap_or(0);
        }
    }
    0
}

/// A worker's dockerd killed mid-job: its trials run again on the other workers, the job
/// completes with every trial once, and when the worker comes back nothing of the job is left
/// on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_worker_s_trials_run_again_elsewhere_and_nothing_is_left_when_it_returns() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let server = slow_model(2500, 10).await;
    let dir = temp_dir("swarm-node-loss");
    let config = job_yaml(
        dir.path(),
        &bed,
        "loss",
        "n_attempts: 6\nn_concurrent_trials: 6\nsupervision:\n  max_restarts: 3\n",
        &mock_agent(&server),
        &[example("hello-world")],
    );
    let job_dir = dir.path().join("loss");
    let mut child = spawn_run(&config);
    // Wait for a trial to run on w2, then kill w2's daemon.
    let on_w2 = async || match trials_on(&bed, &job_dir, "tsw-w2").await {
        0 => Err("none yet".to_string()),
        n => Ok(n),
    };
    poll("a trial on tsw-w2", Duration::from_secs(120), Duration::from_millis(300), on_w2).await;
    let status = Command::new(&bed.script).args(["stop-node", "w2"]).status_bounded().unwrap();
    assert!(status.success());
    // The manager marks it down (after about ten seconds); it comes back while the job runs.
    poll("the manager to mark tsw-w2 down", Duration::from_secs(60), Duration::from_millis(500), async || {
        match node_state(&bed, "tsw-w2").await {
            Some(bollard::models::NodeState::READY) => Err("still ready".to_string()),
            state => Ok(state),
        }
    })
    .await;
    let status = Command::new(&bed.script).args(["start-node", "w2"]).status_bounded().unwrap();
    assert!(status.success());
    let status = tokio::task::spawn_blocking(move || child.wait_bounded()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0), "errors: {:?}", errors_of(&job_dir));
    let trials = outcomes(&job_dir);
    assert_eq!(trials.len(), 6, "{trials:?}");
    assert!(trials.iter().all(|(_, reward, _)| *reward == Some(1.0)), "{trials:?}");
    // Each trial of the lost node either lost its container (restarted in a fresh one) or was
    // placed again before its container ran there (said in its result).
    let moved = outcomes_with_notes(&job_dir)
        .into_iter()
        .filter(|(_, _, restarts, notes)| *restarts > 0 || notes.iter().any(|n| n.contains("`tsw-w2` was lost")))
        .count();
    assert!(moved > 0, "no trial of the lost node ran again elsewhere: {trials:?}");
    // What the lost node ran is reaped once it is back (its dockerd stopped the containers at
    // its restart; the orchestrator's node watch removes them).
    let id = job_id(&job_dir);
    poll("nothing of the job left on the swarm", Duration::from_secs(60), Duration::from_secs(1), async || {
        match leftovers(&bed, &id).await {
            (0, left) if left.is_empty() => Ok(()),
            left => Err(format!("left: {left:?}")),
        }
    })
    .await;
}

/// The state the manager gives the node with hostname `host`, if it lists it.
async fn node_state(bed: &Bed, host: &str) -> Option<bollard::models::NodeState> {
    let manager = connect(bed, &bed.manager).await;
    let nodes = manager.list_nodes(None::<bollard::query_parameters::ListNodesOptions>).await.unwrap();
    nodes
        .into_iter()
        .find(|n| n.description.as_ref().and_then(|d| d.hostname.as_deref()) == Some(host))
        .and_then(|n| n.status?.state)
}

/// kill -9 of the orchestrator mid-job: `gc` removes the job's services and containers from
/// the manager and every node; `resume` then runs every trial exactly once and leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_then_gc_and_resume_on_the_swarm() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let server = slow_model(400, 3).await;
    let dir = temp_dir("swarm-kill9");
    let config = job_yaml(
        dir.path(),
        &bed,
        "kill9",
        "n_attempts: 8\nn_concurrent_trials: 4\n",
        &mock_agent(&server),
        &[example("hello-world")],
    );
    let job_dir = dir.path().join("kill9");
    let mut child = spawn_run(&config);
    wait_until("a finished trial", Duration::from_secs(120), || !trial_dirs(&job_dir).is_empty()).await;
    let id = job_id(&job_dir);
    poll("a trial in flight to interrupt", Duration::from_secs(60), Duration::from_millis(200), async || {
        match leftovers(&bed, &id).await.0 {
            0 => Err("no service".to_string()),
            n => Ok(n),
        }
    })
    .await;
    child.kill().unwrap();
    child.wait_bounded().unwrap();
    let finished_before = trial_dirs(&job_dir).len();
    assert!(finished_before < 8, "the kill came mid-job");
    assert!(leftovers(&bed, &id).await.0 > 0, "the killed run left services behind");
    let gc = tokio::task::spawn_blocking({
        let config = config.clone();
        move || run(&["gc", "-c", config.to_str().unwrap()])
    })
    .await
    .unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", String::from_utf8_lossy(&gc.stderr));
    assert_eq!(leftovers(&bed, &id).await, (0, vec![]), "gc: {}", String::from_utf8_lossy(&gc.stdout));
    let resumed = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || run(&["resume", job_dir.to_str().unwrap()])
    })
    .await
    .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let trials = outcomes(&job_dir);
    assert_eq!(trials.len(), 8);
    assert!(trials.iter().all(|(_, reward, _)| *reward == Some(1.0)), "{trials:?}");
    assert_eq!(job_id(&job_dir), id, "the resumed job keeps its id");
    assert_eq!(leftovers(&bed, &id).await, (0, vec![]));
}

/// The orchestrator on the manager's own machine: the manager through its unix socket, the
/// nodes over TLS, and a placement that the job's constraints and a wrong certificate decide.
#[tokio::test(flavor = "multi_thread")]
async fn a_manager_reached_through_its_socket_runs_trials_on_the_nodes_over_tls() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let dir = temp_dir("swarm-socket");
    let config = job_yaml_with(
        dir.path(),
        &bed,
        &bed.manager_socket,
        "socket",
        "n_attempts: 3\nn_concurrent_trials: 3\n",
        ORACLE,
        &[example("hello-world")],
    );
    let out = tokio::task::spawn_blocking(move || run(&["run", "-c", config.to_str().unwrap()])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("socket");
    let trials = outcomes(&job_dir);
    assert_eq!(trials.len(), 3);
    assert!(trials.iter().all(|(host, reward, _)| host.starts_with("tsw-w") && *reward == Some(1.0)), "{trials:?}");
    assert_eq!(leftovers(&bed, &job_id(&job_dir)).await, (0, vec![]));
    // A client certificate the nodes do not trust: the manager answers, no node does, and the
    // trials fail with the reason named instead of hanging.
    let other = temp_dir("swarm-badcert");
    let status = Command::new("sh")
        .arg("-c")
        .arg("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=stranger -keyout key.pem -out cert.pem 2>/dev/null && cp cert.pem ca.pem")
        .current_dir(other.path())
        .status_bounded()
        .unwrap();
    assert!(status.success());
    let yaml = std::fs::read_to_string(dir.path().join("socket.yaml"))
        .unwrap()
        .replace(&format!("node_tls: {}", bed.tls.display()), &format!("node_tls: {}", other.path().display()));
    let yaml = yaml.replace("job_name: socket", "job_name: stranger").replace("n_attempts: 3", "n_attempts: 1");
    let config = dir.path().join("stranger.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run(&["run", "-c", config.to_str().unwrap()])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "the trial errs: {}", String::from_utf8_lossy(&out.stdout));
    let errors = errors_of(&dir.path().join("stranger"));
    assert!(errors.len() == 1 && errors[0].contains("node"), "{errors:?}");
}

/// Untrusted trials on a swarm: nodes without TLS are refused (naming the key); a trial's
/// container reaches no node's API, the manager's swarm port or the registry, each of which
/// first answers from this machine; it gets the job's confinement (pids, capabilities), and
/// what the nodes' engine does not apply (no-new-privileges before API 1.46) is said in its
/// result, not assumed.
#[tokio::test(flavor = "multi_thread")]
async fn trials_are_confined_and_reach_no_node_api_or_registry() {
    let Some(bed) = bed() else { return };
    let _heavy = heavy_lock().await;
    let dir = temp_dir("swarm-confined");
    // Nodes on plain TCP: refused before anything starts.
    let plain = job_yaml_with(dir.path(), &bed, &bed.manager_socket, "plain", "", ORACLE, &[example("hello-world")]);
    let yaml = std::fs::read_to_string(&plain).unwrap().replace(&format!("    node_tls: {}\n", bed.tls.display()), "");
    std::fs::write(&plain, yaml).unwrap();
    let out = run(&["run", "-c", plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("environment.swarm.node_tls") && said.contains("insecure_nodes"), "{said}");
    // The targets, each answering from here first (the orchestrator's side of the network).
    let manager_host = bed.manager.trim_start_matches("tcp://").split(':').next().unwrap().to_string();
    let prefix = manager_host.rsplit_once('.').unwrap().0.to_string();
    let mut targets: Vec<String> = (10..=13).map(|n| format!("{prefix}.{n}:{}", bed.node_port)).collect();
    targets.push(format!("{manager_host}:2377"));
    targets.push(bed.registry.clone());
    for target in &targets {
        let addr: std::net::SocketAddr = target.parse().unwrap();
        assert!(
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok(),
            "{target} answers from this machine"
        );
    }
    let probe = format!(
        "for t in {}; do if timeout 3 bash -c \"</dev/tcp/${{t%:*}}/${{t#*:}}\" 2>/dev/null; then echo \"$t reached\"; else echo \"$t blocked\"; fi; done > /app/probe.txt; \
         grep -E '^(NoNewPrivs|CapBnd):' /proc/self/status >> /app/probe.txt; \
         echo \"pids $(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max)\" >> /app/probe.txt",
        targets.join(" ")
    );
    let task = crate::support::base_task(
        &dir.path().join("tasks"),
        "probe",
        "",
        &probe,
        "cp /app/probe.txt /logs/verifier/probe.txt; echo 1 > /logs/verifier/reward.txt",
    );
    let config = job_yaml(dir.path(), &bed, "confined", "", ORACLE, &[task]);
    let out = tokio::task::spawn_blocking(move || run(&["run", "-c", config.to_str().unwrap()])).await.unwrap();
    let job_dir = dir.path().join("confined");
    assert_eq!(out.status.code(), Some(0), "{:?}", errors_of(&job_dir));
    let trial = trial_dirs(&job_dir).remove(0);
    let probe = std::fs::read_to_string(trial.join("verifier/probe.txt")).unwrap();
    for target in &targets {
        assert!(probe.contains(&format!("{target} blocked")), "{target} is out of a trial's reach:\n{probe}");
    }
    let field =
        |name: &str| probe.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default();
    assert_eq!(field("pids"), "4096", "the job's pids limit:\n{probe}");
    let bounding = u64::from_str_radix(&field("CapBnd:"), 16).unwrap();
    assert_eq!(bounding & (1 << 13), 0, "NET_RAW dropped:\n{probe}");
    let result = read_json(&trial.join("result.json"));
    let warnings: Vec<String> =
        result["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str().map(String::from)).collect();
    let said_unapplied = warnings.iter().any(|w| w.contains("no-new-privileges is not applied"));
    match field("NoNewPrivs:").as_str() {
        "1" => assert!(!said_unapplied, "applied, yet said not to be: {warnings:?}"),
        _ => assert!(said_unapplied, "not applied, and the result does not say so: {warnings:?}"),
    }
}
