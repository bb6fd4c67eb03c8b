//! `terminus serve` driven by Harbor 0.26's own client and CLI (tests/helpers/
//! harbor_serve_client.py; `harbor run --server URL --watch`), its bad-input answers, and its
//! restart after `kill -9` in the middle of two jobs.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_mock_llm::MockServer;

use crate::orchestrator::hello;
use crate::support::{BoundedChild, BoundedCommand, ReapOnDrop};
use crate::support::{docker, example, harbor_required, harbor_runtime, heavy_lock, repo_root, temp_dir, terminus_bin};

/// A running `terminus serve` and its address.
struct Served {
    child: ReapOnDrop,
    url: String,
}

/// Starts `terminus serve` on a free port over `data`; its log goes to `data/../serve.log`.
fn serve(data: &Path) -> Served {
    let log = std::fs::File::create(data.with_extension("log")).unwrap();
    let child = Command::new(terminus_bin())
        .args(["serve", "--port", "0", "--max-concurrent", "3", "--data-dir"])
        .arg(data)
        .env_remove("HARBOR_API_KEY")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("terminus serve starts");
    let (child, line) = first_line(child, 120);
    let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("{line}"));
    Served { child, url: url.to_string() }
}

/// The child, reaped on drop, and the first line it prints (where it listens), waited for at
/// most `secs`.
fn first_line(mut child: Child, secs: u64) -> (ReapOnDrop, String) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let child = ReapOnDrop::new(child);
    let line = rx.recv_timeout(Duration::from_secs(secs)).expect("the child prints its address");
    (child, line)
}

/// One request over a plain socket: the status and the body as JSON (Null when not JSON).
fn http(url: &str, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> (u16, Value) {
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    write!(stream, "{head}\r\n{body}").unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn job_of(url: &str, id: &str) -> Value {
    let (status, body) = http(url, "GET", &format!("/jobs/{id}"), &[], None);
    assert_eq!(status, 200, "{body}");
    body["job"].clone()
}

fn oracle_config(name: &str, task: &Path, attempts: u32, concurrent: u32) -> Value {
    json!({"job_name": name, "tasks": [{"path": task}], "agents": [{"name": "oracle"}],
           "n_attempts": attempts, "n_concurrent_trials": concurrent})
}

fn model_config(name: &str, task: &Path, api_base: &str, attempts: u32) -> Value {
    json!({"job_name": name, "tasks": [{"path": task}],
           "agents": [{"name": "terminus-2", "model_name": "openai/gpt-4o",
                       "kwargs": {"api_base": api_base, "record_terminal_session": false}}],
           "n_attempts": attempts, "n_concurrent_trials": 2})
}

async fn leftover_containers(docker: &bollard::Docker, job_ids: &[String]) -> usize {
    let mut n = 0;
    for id in job_ids {
        n += crate::support::containers_of_job(docker, id).await;
    }
    n
}

/// Harbor 0.26's Python client and CLI against `terminus serve`: two jobs submitted, listed,
/// read, paused and resumed, a rollout cancelled and another retried, SQL by state, a
/// trajectory downloaded (every answer parsed by Harbor's models), then `harbor run --server
/// URL --watch` to the end.
#[tokio::test(flavor = "multi_thread")]
async fn harbors_client_and_cli_drive_terminus_serve() {
    let _heavy = heavy_lock().await;
    let Some(docker) = docker().await else { return };
    let Some(harbor) = harbor_runtime("0.26.0") else {
        assert!(!harbor_required(), "Harbor 0.26.0 is required");
        return;
    };
    let dir = temp_dir("serve-harbor");
    let model = MockServer::start(hello(1500), 0).await.unwrap();
    let served = serve(&dir.path().join("data"));
    let task = example("hello-world");
    let out = Command::new(&harbor.python)
        .arg(repo_root().join("tests/helpers/harbor_serve_client.py"))
        .args([&served.url, task.to_str().unwrap(), &model.api_base(), dir.path().to_str().unwrap()])
        .output_bounded()
        .expect("Harbor's python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["states"], json!({"cancelled": 1, "finished": 5}), "{summary}");
    assert_eq!(summary["rewards_a"], json!(1.0), "{summary}");

    // Harbor's CLI: submit a job file and watch it to the end.
    let job_file = dir.path().join("watched.yaml");
    std::fs::write(&job_file, oracle_config("watched", &task, 3, 2).to_string()).unwrap();
    let watched = Command::new(harbor.python.with_file_name("harbor"))
        .args(["run", "-c"])
        .arg(&job_file)
        .args(["--server", &served.url, "--watch"])
        .env("COLUMNS", "120")
        .output_bounded()
        .expect("Harbor's CLI runs");
    let text = String::from_utf8_lossy(&watched.stdout);
    assert_eq!(watched.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&watched.stderr));
    assert!(text.contains("Finished") && text.contains("3/3"), "{text}");

    // Our CLI against the same service: a YAML job file, `-k` applied, watched to the end.
    let yaml_file = dir.path().join("ours.yaml");
    let yaml = format!("job_name: ours\nagents: [{{name: oracle}}]\ntasks:\n  - path: {}\n", task.display());
    std::fs::write(&yaml_file, yaml).unwrap();
    let ours = Command::new(terminus_bin())
        .args(["run", "-c"])
        .arg(&yaml_file)
        .args(["-k", "2", "--server", &served.url, "--watch"])
        .env_remove("HARBOR_API_KEY")
        .output_bounded()
        .expect("terminus runs");
    let text = String::from_utf8_lossy(&ours.stdout);
    assert_eq!(ours.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&ours.stderr));
    assert!(text.contains("finished after") && text.contains("over 2 scored"), "{text}");
    let ours_id = text.lines().find_map(|l| l.strip_prefix("Job ID: ")).expect("the job's id is printed");
    let job = job_of(&served.url, ours_id);
    assert_eq!(job["rollouts"]["n_finished"], json!(2), "{job}");

    // A server that is not there: exit 8, nothing submitted.
    let gone = Command::new(terminus_bin())
        .args(["run", "-c"])
        .arg(&yaml_file)
        .args(["--server", "http://127.0.0.1:9"])
        .output_bounded()
        .expect("terminus runs");
    assert_eq!(gone.status.code(), Some(8), "{}", String::from_utf8_lossy(&gone.stderr));

    let (_, jobs) = http(&served.url, "GET", "/jobs?page_size=10", &[], None);
    let ids: Vec<String> =
        jobs["items"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 4, "{jobs}");
    let mut child = served.child.take();
    child.reap();
    assert_eq!(leftover_containers(&docker, &ids).await, 0, "containers outlived their jobs");
}

/// A request and what it must be answered: method, path, headers, body, status, `_tag`.
type BadCase = (&'static str, String, Vec<(&'static str, &'static str)>, Option<Value>, u16, &'static str);

/// What a client may get wrong: each answer is Harbor's status and tag, and nothing is run.
#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_harbors_answers_and_run_nothing() {
    let dir = temp_dir("serve-bad");
    let data = dir.path().join("data");
    let served = serve(&data);
    let url = &served.url;
    let task = example("hello-world");
    let cases: Vec<BadCase> = vec![
        ("POST", "/jobs/submit".into(), vec![], Some(json!({"confi": {}})), 400, "BadRequest"),
        (
            "POST",
            "/jobs/submit".into(),
            vec![],
            Some(json!({"config": {"tasks": [{"path": "/nope"}]}})),
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/jobs/submit".into(),
            vec![],
            Some(json!({"config": {"agents": [{"name": "oracle"}], "tasks": [{"path": task}], "n_attempts": "x"}})),
            400,
            "BadRequest",
        ),
        ("GET", "/jobs/not-a-uuid".into(), vec![], None, 400, "BadRequest"),
        ("GET", "/jobs/2fbeed32-fc94-4228-98ef-4135262cdc63".into(), vec![], None, 404, "NotFound"),
        ("GET", "/jobs?foo=1".into(), vec![], None, 400, "BadRequest"),
        ("GET", "/jobs?page_token=garbage".into(), vec![], None, 400, "InvalidPageToken"),
        ("GET", "/jobs".into(), vec![("Harbor-API-Version", "2020-01-01")], None, 400, "BadRequest"),
        ("GET", "/jobs".into(), vec![("Origin", "https://evil.example")], None, 403, "Forbidden"),
        ("GET", "/download?uri=file%3A%2F%2F%2Fetc%2Fpasswd".into(), vec![], None, 404, "NotFound"),
        ("POST", "/query".into(), vec![], Some(json!({"statements": []})), 400, "BadRequest"),
        ("GET", "/query/schema?view=internal_job".into(), vec![], None, 400, "BadRequest"),
        ("HEAD", "/jobs".into(), vec![], None, 405, ""),
        ("POST", "/mcp".into(), vec![], Some(json!({})), 503, "ServiceUnavailable"),
        ("GET", "/inference/v1/models".into(), vec![], None, 404, "NotFound"),
        ("POST", "/hub/jobs/2fbeed32-fc94-4228-98ef-4135262cdc63/upload".into(), vec![], None, 404, "NotFound"),
        ("GET", "/agents/oracle/options".into(), vec![], None, 404, "NotFound"),
        (
            "POST",
            "/jobs/submit".into(),
            vec![],
            Some(json!({"config": {}, "relay_inference": true})),
            400,
            "BadRequest",
        ),
        ("GET", "/nowhere".into(), vec![], None, 404, "NotFound"),
    ];
    for (method, path, headers, body, status, tag) in cases {
        let (got, answer) = http(url, method, &path, &headers, body.as_ref());
        assert_eq!(got, status, "{method} {path}: {answer}");
        if !tag.is_empty() {
            assert_eq!(answer["_tag"], tag, "{method} {path}: {answer}");
        }
    }
    // A Host that is not loopback is refused keyless (a rebound page).
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET /jobs HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    // A body over the limit.
    let big = json!({"config": {"x": "a".repeat(17 * 1024 * 1024)}});
    assert_eq!(http(url, "POST", "/jobs/submit", &[], Some(&big)).0, 413);
    // Queries that write, read the internal tables or run away are refused, one by one.
    let (status, answer) = http(
        url,
        "POST",
        "/query",
        &[],
        Some(&json!([
            "DELETE FROM job",
            "SELECT * FROM internal_job",
            "PRAGMA table_info(job)",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
            "SELECT count(*) AS n FROM job"
        ])),
    );
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    for refused in &results[..4] {
        assert!(refused["error_v2"]["message"].is_string(), "{answer}");
    }
    assert_eq!(results[4]["rows"], json!([{"n": 0}]), "{answer}");
    let jobs = std::fs::read_dir(data.join("jobs")).unwrap().count();
    assert_eq!(jobs, 0, "a refused submission left a job directory");
}

/// `kill -9` of the service in the middle of two jobs, three times, each time started again
/// over the same data: every job finishes, every trial exactly once, nothing left on the engine.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_service_resumes_its_jobs_and_runs_every_trial_once() {
    let _heavy = heavy_lock().await;
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("serve-kill");
    let data = dir.path().join("data");
    let model = MockServer::start(hello(700), 0).await.unwrap();
    let task = example("hello-world");
    let served = serve(&data);
    let mut ids = Vec::new();
    for config in [oracle_config("kill-oracle", &task, 6, 2), model_config("kill-model", &task, &model.api_base(), 6)] {
        let (status, answer) = http(&served.url, "POST", "/jobs/submit", &[], Some(&json!({"config": config})));
        assert_eq!(status, 200, "{answer}");
        ids.push(answer["job_id"].as_str().unwrap().to_string());
    }
    let mut served = Some(served);
    for round in 0..3 {
        let current = served.take().unwrap();
        // Let some trials run, then kill the service where it stands.
        let finished = |url: &str| -> u64 {
            ids.iter().map(|id| job_of(url, id)["rollouts"]["n_finished"].as_u64().unwrap_or(0)).sum()
        };
        let target = 2 + round * 3;
        let deadline = Instant::now() + Duration::from_secs(180);
        while finished(&current.url) < target && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let at_kill = finished(&current.url);
        assert!(at_kill < 12, "round {round}: the jobs ended before the kill ({at_kill} of 12 finished)");
        let mut child = current.child.take();
        kill9(&mut child);
        served = Some(serve(&data));
    }
    let served = served.unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while ids.iter().any(|id| job_of(&served.url, id)["state"] != "finished") {
        assert!(Instant::now() < deadline, "the jobs did not finish after the restarts");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let job = job_of(&served.url, id);
        assert_eq!(job["rollouts"]["n_total"], 6, "{job}");
        assert_eq!(job["rollouts"]["n_finished"], 6, "{job}");
        assert_eq!(job["rewards"]["reward"], json!({"mean": 1.0, "count": 6}), "{job}");
        // Each trial once on disk: six results, and no rerun left two.
        let job_dir = data.join("jobs").join(id);
        let results: Vec<PathBuf> = std::fs::read_dir(&job_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("result.json").is_file())
            .collect();
        assert_eq!(results.len(), 6, "{}: {results:?}", job_dir.display());
    }
    let mut child = served.child.take();
    child.reap();
    assert_eq!(leftover_containers(&docker, &ids).await, 0, "containers outlived the service");
}

/// Polls until `done` holds for the job, or panics naming `what` after `secs`.
async fn wait_for(url: &str, id: &str, secs: u64, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let job = job_of(url, id);
        if done(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "{what}: {job}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The database is deleted while the service is down (after a `kill -9` mid-job): the service
/// indexes the job directories again, an ended job stays as it ended, a cancelled rollout stays
/// cancelled, and the job that was running finishes with every trial run once.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_database_is_rebuilt_from_the_job_directories() {
    let _heavy = heavy_lock().await;
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("serve-rebuild");
    let data = dir.path().join("data");
    let task = example("hello-world");
    let served = serve(&data);
    let submit = |config: Value| {
        let (status, answer) = http(&served.url, "POST", "/jobs/submit", &[], Some(&json!({"config": config})));
        assert_eq!(status, 200, "{answer}");
        answer["job_id"].as_str().unwrap().to_string()
    };
    let ended = submit(oracle_config("ended-before", &task, 1, 1));
    wait_for(&served.url, &ended, 120, "the first job did not finish", |j| j["state"] == "finished").await;
    let running = submit(oracle_config("running-at-the-kill", &task, 4, 1));
    // The last queued rollout is cancelled by its user.
    let (_, listed) = http(&served.url, "GET", &format!("/rollouts?job_ids={running}&page_size=10"), &[], None);
    let queued: Vec<&Value> = listed["items"].as_array().unwrap().iter().filter(|r| r["state"] == "queued").collect();
    assert!(queued.len() >= 2, "{listed}");
    let cancelled = queued.last().unwrap()["id"].as_str().unwrap().to_string();
    let (status, answer) = http(&served.url, "POST", &format!("/rollouts/{cancelled}/cancel"), &[], Some(&json!({})));
    assert_eq!(status, 200, "{answer}");
    let cancelled_name = {
        let (_, answer) = http(&served.url, "GET", &format!("/rollouts/{cancelled}"), &[], None);
        let rollout = &answer["rollout"];
        assert_eq!(rollout["state"], "cancelled", "{rollout}");
        rollout["name"].as_str().unwrap().to_string()
    };
    let at_kill =
        wait_for(&served.url, &running, 120, "no trial finished", |j| j["rollouts"]["n_finished"].as_u64() >= Some(1))
            .await;
    assert!(at_kill["rollouts"]["n_finished"].as_u64() < Some(3), "the job ended before the kill: {at_kill}");
    let mut child = served.child.take();
    kill9(&mut child);
    for file in ["terminus.sqlite3", "terminus.sqlite3-wal", "terminus.sqlite3-shm"] {
        let _ = std::fs::remove_file(data.join(file));
    }

    let served = serve(&data);
    let job = wait_for(&served.url, &running, 240, "the rebuilt job did not finish", |j| {
        j["state"] == "finished" || j["state"] == "cancelled"
    })
    .await;
    assert_eq!(job["name"], "running-at-the-kill", "{job}");
    assert_eq!(job["state"], "finished", "{job}");
    assert_eq!(job["rollouts"]["n_total"], 4, "{job}");
    assert_eq!(job["rollouts"]["n_cancelled"], 1, "{job}");
    assert_eq!(job["rollouts"]["n_finished"], 3, "{job}");
    assert_eq!(job["rewards"]["reward"], json!({"mean": 1.0, "count": 3}), "{job}");
    let first = job_of(&served.url, &ended);
    assert_eq!((first["name"].as_str(), first["state"].as_str()), (Some("ended-before"), Some("finished")));
    assert_eq!(first["rewards"]["reward"], json!({"mean": 1.0, "count": 1}), "{first}");

    // On disk: every trial once, the cancelled one as it was cancelled.
    let results = |id: &str| -> Vec<PathBuf> {
        let job_dir = data.join("jobs").join(id);
        let dirs = std::fs::read_dir(job_dir).unwrap().flatten().map(|e| e.path());
        dirs.filter(|p| p.join("result.json").is_file()).collect()
    };
    assert_eq!(results(&ended).len(), 1);
    assert_eq!(results(&running).len(), 4, "{:?}", results(&running));
    let kept = std::fs::read_to_string(data.join("jobs").join(&running).join(&cancelled_name).join("result.json"));
    let kept: Value = serde_json::from_str(&kept.expect("the cancelled trial's result is kept")).unwrap();
    assert_eq!(kept["exception_info"]["exception_type"], "CancelledError", "{kept}");

    // The rebuilt rows serve their files.
    let (_, listed) = http(&served.url, "GET", &format!("/rollouts?job_ids={running}&states=finished"), &[], None);
    let finished = listed["items"][0]["id"].as_str().unwrap().to_string();
    let (_, answer) = http(&served.url, "GET", &format!("/rollouts/{finished}"), &[], None);
    let rollout = &answer["rollout"];
    let uri = rollout["artifacts"]["result.json"].as_str().expect("result.json is an artifact").to_string();
    let (status, body) = http(&served.url, "GET", &format!("/download?uri={}", encode(&uri)), &[], None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["trial_name"], rollout["name"], "{body}");

    let mut child = served.child.take();
    child.reap();
    assert_eq!(leftover_containers(&docker, &[ended, running]).await, 0, "containers outlived the service");
}

/// A job cancelled with force leaves its unstarted trials cancelled in the database only; a
/// retry of one of them reopens the job and runs that one alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_in_a_cancelled_job_runs_only_what_was_retried() {
    let _heavy = heavy_lock().await;
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("serve-cancelled-retry");
    let data = dir.path().join("data");
    let task = example("hello-world");
    let served = serve(&data);
    let (status, answer) = http(
        &served.url,
        "POST",
        "/jobs/submit",
        &[],
        Some(&json!({"config": oracle_config("cancelled", &task, 4, 1)})),
    );
    assert_eq!(status, 200, "{answer}");
    let id = answer["job_id"].as_str().unwrap().to_string();
    wait_for(&served.url, &id, 120, "no trial started", |j| j["rollouts"]["n_running"].as_u64() >= Some(1)).await;
    let (status, answer) = http(&served.url, "POST", &format!("/jobs/{id}/cancel"), &[], Some(&json!({"force": true})));
    assert_eq!(status, 200, "{answer}");
    let job = wait_for(&served.url, &id, 120, "the job was not cancelled", |j| j["state"] == "cancelled").await;
    // The first trial may have ended just before the cancel.
    let before = job["rollouts"]["n_finished"].as_u64().unwrap();
    assert_eq!(job["rollouts"]["n_cancelled"].as_u64(), Some(4 - before), "{job}");
    let (_, listed) = http(&served.url, "GET", &format!("/rollouts?job_ids={id}"), &[], None);
    let dirs = |id: &str| {
        std::fs::read_dir(data.join("jobs").join(id)).unwrap().flatten().filter(|e| e.path().is_dir()).count()
    };
    // A trial that never started: no directory of its own.
    let unstarted: Vec<&Value> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !data.join("jobs").join(&id).join(r["name"].as_str().unwrap()).exists())
        .collect();
    assert!(unstarted.len() >= 2, "{listed}");
    let retried = unstarted[0]["id"].as_str().unwrap().to_string();
    let (status, answer) = http(&served.url, "POST", &format!("/rollouts/{retried}/retry"), &[], None);
    assert_eq!(status, 200, "{answer}");
    wait_for(&served.url, &id, 120, "the retry did not end", |j| {
        j["rollouts"]["n_finished"] == before + 1 && j["state"] == "finished"
    })
    .await;
    // Anything else the reopened job would start has had time to.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = job_of(&served.url, &id);
    assert_eq!(job["rollouts"]["n_total"], 5, "{job}");
    assert_eq!(job["rollouts"]["n_finished"], before + 1, "only the retried trial ran: {job}");
    assert_eq!(job["rollouts"]["n_cancelled"], 4 - before, "{job}");
    // On disk: one trial rewarded; no other trial ran.
    let rewarded = std::fs::read_dir(data.join("jobs").join(&id))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("result.json")).ok())
        .filter(|t| serde_json::from_str::<Value>(t).is_ok_and(|r| r["verifier_result"]["rewards"]["reward"] == 1.0))
        .count();
    assert_eq!(rewarded as u64, before + 1, "{} trial directories", dirs(&id));
    let mut child = served.child.take();
    child.reap();
    assert_eq!(leftover_containers(&docker, std::slice::from_ref(&id)).await, 0, "containers outlived the service");
}

/// `terminus view --server URL`: the service's jobs browsed through the viewer, a retried
/// trial with its earlier attempt, a job submitted while the viewer runs appearing in it.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_browses_the_service() {
    let _heavy = heavy_lock().await;
    let Some(docker) = docker().await else { return };
    let dir = temp_dir("serve-view");
    let data = dir.path().join("data");
    let task = example("hello-world");
    let served = serve(&data);
    let submit = |config: Value| {
        let (status, answer) = http(&served.url, "POST", "/jobs/submit", &[], Some(&json!({"config": config})));
        assert_eq!(status, 200, "{answer}");
        answer["job_id"].as_str().unwrap().to_string()
    };
    let first = submit(oracle_config("browsed", &task, 2, 2));
    wait_for(&served.url, &first, 120, "the job did not finish", |j| j["state"] == "finished").await;
    let (_, listed) = http(&served.url, "GET", &format!("/rollouts?job_ids={first}"), &[], None);
    let retried = listed["items"][0].clone();
    let (status, answer) =
        http(&served.url, "POST", &format!("/rollouts/{}/retry", retried["id"].as_str().unwrap()), &[], None);
    assert_eq!(status, 200, "{answer}");
    wait_for(&served.url, &first, 120, "the retry did not finish", |j| {
        j["state"] == "finished" && j["rollouts"]["n_total"] == 3
    })
    .await;

    let viewer = Command::new(terminus_bin())
        .args(["view", "--port", "0", "--server", &served.url])
        .env_remove("HARBOR_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("terminus view starts");
    let (viewer, line) = first_line(viewer, 60);
    let base = line.split_whitespace().last().unwrap_or_default().to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    let page = |path: &str| http(&base, "GET", path, &[], None);
    let wait_page = |path: String, done: &dyn Fn(&Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = page(&path);
            if status == 200 && done(&body) {
                return body;
            }
            assert!(Instant::now() < deadline, "{path}: {status} {body}");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let job = wait_page(format!("/api/jobs/{first}"), &|b| {
        b["trials"].as_array().is_some_and(|t| t.len() == 2) && b["job"]["state"] == "finished"
    });
    assert_eq!(job["job"]["n_total"], 2, "{job}");
    for trial in job["trials"].as_array().unwrap() {
        assert_eq!(trial["reward"], json!(1.0), "{trial}");
    }
    let name = retried["name"].as_str().unwrap();
    let (status, trial) = page(&format!("/api/jobs/{first}/trials/{name}"));
    assert_eq!(status, 200, "{trial}");
    assert_eq!(trial["roots"].as_array().map(Vec::len), Some(2), "the retried trial keeps its first attempt: {trial}");

    // A job submitted while the viewer runs shows up, running and then finished.
    let second = submit(oracle_config("later", &task, 1, 1));
    let job = wait_page(format!("/api/jobs/{second}"), &|b| b["job"]["state"] == "finished");
    assert_eq!(job["trials"].as_array().map(Vec::len), Some(1), "{job}");

    drop(viewer);
    let mut child = served.child.take();
    child.reap();
    assert_eq!(leftover_containers(&docker, &[first, second]).await, 0, "containers outlived the service");
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// SIGKILL (what `Child::kill` sends), and the reaping of the process.
fn kill9(child: &mut Child) {
    child.kill().expect("the service is killed");
    let _ = child.wait_bounded();
}
