//! `terminus view` in a real browser: Debian's chromium driven by the playwright-core
//! package (tests/browser/*.test.mjs) against jobs this suite runs for real — one with a
//! summarization and a recording, an errored task, a comparison job — and a Harbor-written job;
//! then `terminus run --view` while its job runs.
//!
//! Without chromium or the playwright-core package (`scripts/setup.sh --browser` installs both)
//! the tests are skipped, unless `TERMINUS_REQUIRE_BROWSER=1` (set by `scripts/test.sh`).
//! Screenshots land in `target/view-screenshots/`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::golden::{long_turn, long_turns, summarization_rules};

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    docker, heavy_lock, instructed_task, read_json, repo_root, run_terminus, temp_dir, terminus_bin, trial_dirs,
};

const SUM_MARKER: &str = "VIEW-SUMMARIZED-TASK";
const FAIL_MARKER: &str = "VIEW-FAILING-TASK";
const LIVE_MARKER: &str = "VIEW-LIVE-TASK";
/// What the job's model key is: it must reach no page and no file the viewer serves.
const SECRET: &str = "sk-view-test-8f3a1c5e9b7d2f4a6c8e0b1d3f5a7c9e";

/// Whether the browser and its driver are installed (else skipped, or failed when required).
fn browser_ready() -> bool {
    let ready = Path::new("/usr/bin/chromium").is_file()
        && repo_root().join("tests/browser/node_modules/playwright-core/package.json").is_file()
        && Command::new("node").arg("--version").output_bounded().is_ok_and(|o| o.status.success());
    if !ready && std::env::var("TERMINUS_REQUIRE_BROWSER").as_deref() == Ok("1") {
        panic!(
            "TERMINUS_REQUIRE_BROWSER=1 but chromium, node or playwright-core is missing; run scripts/setup.sh --browser"
        );
    }
    if !ready {
        crate::support::skip(
            "browser",
            "no browser (scripts/setup.sh --browser installs chromium and playwright-core)",
        );
    }
    ready
}

fn screenshots() -> PathBuf {
    repo_root().join("target/view-screenshots")
}

/// Runs one of tests/browser/*.test.mjs; panics with its report when a check fails.
fn run_browser_test(script: &str, env: &[(&str, String)]) {
    let mut command = Command::new("node");
    command.arg(repo_root().join("tests/browser").join(script)).current_dir(repo_root());
    command.env("VIEW_SHOTS", screenshots());
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output_bounded().expect("node runs");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{script}:\n{report}");
    assert!(out.status.success(), "browser checks failed ({script}):\n{report}");
}

/// A running `terminus view`, stopped when dropped.
pub(crate) struct Viewer {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Viewer {
    fn drop(&mut self) {
        self.child.reap();
    }
}

pub(crate) fn start_viewer(jobs_dir: &Path) -> Viewer {
    start_viewer_on(jobs_dir, "127.0.0.1")
}

fn start_viewer_on(jobs_dir: &Path, host: &str) -> Viewer {
    let mut child = Command::new(terminus_bin())
        .args(["view", "--port", "0", "--host", host])
        .arg(jobs_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("terminus view starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.split(" at ").nth(1).map(|u| u.trim().to_string()).unwrap_or_else(|| {
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        panic!("no address from terminus view: {line:?} {err}")
    });
    Viewer { child, url }
}

/// A task with `instruction` and an agent limit of 300 s (see [`instructed_task`]).
fn task(root: &Path, name: &str, instruction: &str, solve: &str, test_sh: &str) -> PathBuf {
    instructed_task(root, name, instruction, "[agent]\ntimeout_sec = 300.0\n", solve, test_sh)
}

/// Each trial's name, reward and state, as its own files say (the viewer must show the same).
fn expected_trials(job_dir: &Path) -> Vec<Value> {
    trial_dirs(job_dir)
        .iter()
        .map(|dir| {
            let result = read_json(&dir.join("result.json"));
            let reward = result.pointer("/verifier_result/rewards/reward").cloned().unwrap_or(Value::Null);
            let state = if result["exception_info"].is_null() { "finished" } else { "errored" };
            json!({"name": dir.file_name().unwrap().to_string_lossy(), "reward": reward, "state": state})
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_shows_jobs_trials_recordings_and_comparisons_in_a_real_browser() {
    if docker().await.is_none() || !browser_ready() {
        return;
    }
    let _heavy = heavy_lock().await;
    let dir = temp_dir("view");
    let (tasks, jobs) = (dir.path().join("tasks"), dir.path().join("jobs"));
    let summarized = task(
        &tasks,
        "summarized",
        &format!("{SUM_MARKER}: write 42 to /app/answer.txt"),
        "echo 42 > /app/answer.txt",
        "[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    );
    let failing = task(
        &tasks,
        "failing",
        &format!("{FAIL_MARKER}: write hello to /app/hello.txt"),
        "echo hello > /app/hello.txt",
        "[ \"$(cat /app/hello.txt)\" = hello ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
    );
    let broken = task(&tasks, "broken", "never runs", "true", "true");
    std::fs::write(broken.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN false\n").unwrap();

    // Two attempts of the summarized task, one after the other: its turns are served in order.
    let mut sequential = long_turns();
    sequential.extend(long_turns());
    let wrong = |i| long_turn(json!([{"keystrokes": "echo wrong > /app/hello.txt\n", "duration": 0.2}]), false, i);
    let script = Script {
        rules: summarization_rules(),
        sequential: vec![Conversation { when: SUM_MARKER.into(), turns: sequential }],
        conversations: vec![Conversation {
            when: FAIL_MARKER.into(),
            turns: vec![wrong(0), long_turn(json!([]), true, 1), long_turn(json!([]), true, 2)],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let job_a = format!(
        "jobs_dir: {jobs}\njob_name: view-a\nn_attempts: 2\nn_concurrent_trials: 1\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api}\n      record_terminal_session: true\n      model_info:\n        max_input_tokens: 6000\n      proactive_summarization_threshold: 2000\ntasks:\n  - path: {s}\n  - path: {f}\n  - path: {b}\n",
        jobs = jobs.display(),
        api = server.api_base(),
        s = summarized.display(),
        f = failing.display(),
        b = broken.display(),
    );
    let job_b = format!(
        "jobs_dir: {jobs}\njob_name: view-b\nn_concurrent_trials: 2\nagents:\n  - name: terminus-2\n    model_name: oracle\ntasks:\n  - path: {s}\n  - path: {f}\n",
        jobs = jobs.display(),
        s = summarized.display(),
        f = failing.display(),
    );
    for (name, yaml, code) in [("a", job_a, 1), ("b", job_b, 0)] {
        let config = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        let out =
            tokio::task::spawn_blocking(move || run_terminus(&config, &[("OPENAI_API_KEY", SECRET)])).await.unwrap();
        assert_eq!(out.status.code(), Some(code), "job {name}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // A Harbor-written job beside ours, as Harbor 0.26 lays it out.
    let harbor = repo_root().join("tests/fixtures/harbor-0.26-job/harbor-written");
    let copy = Command::new("cp").arg("-r").arg(&harbor).arg(&jobs).status_bounded().unwrap();
    assert!(copy.success());

    let (a_dir, b_dir) = (jobs.join("view-a"), jobs.join("view-b"));
    let trials_a = expected_trials(&a_dir);
    let summarized_trial = trials_a
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .find(|n| {
            n.starts_with("summarized__")
                && a_dir.join(n).join("agent/trajectory.summarization-1-summary.json").is_file()
        })
        .expect("a summarized trial with its subagent trajectories");
    assert!(a_dir.join(&summarized_trial).join("agent/recording.cast").is_file(), "the trial was recorded");
    // A link an agent could leave in its own directory, pointing out of the jobs directory.
    std::os::unix::fs::symlink("/etc/passwd", a_dir.join(&summarized_trial).join("agent/escape")).unwrap();
    let errored = trials_a.iter().filter(|t| t["state"] == "errored").count();
    assert_eq!(errored, 2, "the broken task's two attempts: {trials_a:?}");
    // Job a's mean reward over its six trials, an errored one counting 0 (Harbor's mean): the
    // summarized task's two attempts pass, the failing task's two fail, the broken task's two
    // err. Its interval is terminus_core's, the one the viewer shows.
    let rewards: Vec<f64> = trials_a.iter().map(|t| t["reward"].as_f64().unwrap_or(0.0)).collect();
    assert_eq!(rewards.len(), 6, "{trials_a:?}");
    let mean_a = rewards.iter().sum::<f64>() / rewards.len() as f64;
    assert!((mean_a - 2.0 / 6.0).abs() < 1e-12, "{trials_a:?}");
    let interval = terminus_core::stats::mean_interval(&rewards).unwrap();
    let mean_a_shown = format!("{:.3} [{:.3}, {:.3}]", mean_a, interval.low, interval.high);

    let viewer = start_viewer(&jobs);
    let expect = json!({
        "job_a": "view-a",
        "job_b": "view-b",
        "harbor_job": "harbor-written",
        // Every trial directory, the one still running when Harbor wrote the job included.
        "harbor_trials": std::fs::read_dir(jobs.join("harbor-written")).unwrap().flatten().filter(|e| e.path().join("config.json").is_file()).count(),
        "trials": {"view-a": trials_a, "view-b": expected_trials(&b_dir)},
        "summarized": summarized_trial,
        "failing_task": "failing",
        "errored": errored,
        "mean_a": mean_a_shown,
        "secret": SECRET,
    });
    let url = viewer.url.clone();
    tokio::task::spawn_blocking(move || {
        run_browser_test("viewer.test.mjs", &[("VIEW_URL", url), ("VIEW_EXPECT", expect.to_string())])
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn run_with_view_shows_the_running_job_change_in_the_browser() {
    if docker().await.is_none() || !browser_ready() {
        return;
    }
    let _heavy = heavy_lock().await;
    let dir = temp_dir("view-live");
    let jobs = dir.path().join("jobs");
    let live = task(
        &dir.path().join("tasks"),
        "live",
        &format!("{LIVE_MARKER}: print ticks"),
        "true",
        "echo 1 > /logs/verifier/reward.txt",
    );
    // Slow replies, so the page sees each trial through several episodes. Each prints
    // `LIVE-VIEW-42-TICK <i>`, which only running it shows: the typed line holds `$((6*7))`.
    let tick = |i: u64| Turn {
        delay_ms: Some(1200),
        ..long_turn(json!([{"keystrokes": format!("echo LIVE-VIEW-$((6*7))-TICK {i}\n"), "duration": 0.3}]), false, i)
    };
    let mut turns: Vec<Turn> = (0..7).map(tick).collect();
    turns.push(long_turn(json!([]), true, 7));
    turns.push(long_turn(json!([]), true, 8));
    let script = Script { conversations: vec![Conversation { when: LIVE_MARKER.into(), turns }], ..Script::default() };
    let server = MockServer::start(script, 0).await.unwrap();
    let yaml = format!(
        "jobs_dir: {}\njob_name: live\nn_attempts: 2\nn_concurrent_trials: 2\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\ntasks:\n  - path: {}\n",
        jobs.display(),
        server.api_base(),
        live.display()
    );
    let config = dir.path().join("live.yaml");
    std::fs::write(&config, yaml).unwrap();
    let (mut child, url, _, rx) = run_with_view(&config);
    // A second viewer in its own process: it sees the job only through its files.
    let files_viewer = start_viewer(&jobs);
    let (browser_url, files_url) = (url.clone(), files_viewer.url.clone());
    tokio::task::spawn_blocking(move || {
        run_browser_test(
            "live.test.mjs",
            &[("VIEW_URL", browser_url), ("VIEW_URL_FILES", files_url), ("VIEW_JOB", "live".into())],
        )
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait_bounded()).await.unwrap().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert_eq!(status.code(), Some(0), "the job with its viewer: {}", rest.join("\n"));
    // The viewer stopped with the job.
    assert!(std::net::TcpStream::connect(url.trim_start_matches("http://")).is_err(), "the viewer outlived its job");
}

/// `terminus run --view -c <config>` with the model key set: the process, the viewer's address
/// (the first thing it says) and its further lines of stderr, drained meanwhile.
fn run_with_view(config: &Path) -> (Child, String, String, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(terminus_bin())
        .args(["run", "--view", "--view-port", "0", "-c"])
        .arg(config)
        .current_dir(repo_root())
        .env("OPENAI_API_KEY", SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("terminus run starts");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let started = Instant::now();
    let printed = loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).expect("terminus run prints the viewer's address");
        if let Some(rest) = line.strip_prefix("viewer: ") {
            break rest.split(' ').next().unwrap().to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no viewer address");
    };
    let base = printed.split("/jobs/").next().unwrap().to_string();
    (child, base, printed, rx)
}

/// Under `terminus run --view`, the job page pauses the job, cancels a running trial, retries
/// it and resumes the job (tests/browser/control.test.mjs); the job ends with both trials
/// solved, the retried one's cancelled attempt kept under attempts/0.
#[tokio::test(flavor = "multi_thread")]
async fn run_with_view_cancels_and_retries_a_trial_from_the_job_page() {
    if docker().await.is_none() || !browser_ready() {
        return;
    }
    let _heavy = heavy_lock().await;
    let dir = temp_dir("view-control");
    let jobs = dir.path().join("jobs");
    let task = task(
        &dir.path().join("tasks"),
        "steered",
        &format!("{LIVE_MARKER}: print ticks"),
        "true",
        "echo 1 > /logs/verifier/reward.txt",
    );
    // Slow replies: each trial runs long enough to be cancelled from the page.
    let tick = |i: u64| Turn {
        delay_ms: Some(1500),
        ..long_turn(json!([{"keystrokes": format!("echo TICK {i}\n"), "duration": 0.2}]), false, i)
    };
    let mut turns: Vec<Turn> = (0..6).map(tick).collect();
    turns.push(long_turn(json!([]), true, 6));
    turns.push(long_turn(json!([]), true, 7));
    let script = Script { conversations: vec![Conversation { when: LIVE_MARKER.into(), turns }], ..Script::default() };
    let server = MockServer::start(script, 0).await.unwrap();
    let yaml = format!(
        "jobs_dir: {}\njob_name: steered\nn_attempts: 2\nn_concurrent_trials: 2\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\ntasks:\n  - path: {}\n",
        jobs.display(),
        server.api_base(),
        task.display()
    );
    let config = dir.path().join("steered.yaml");
    std::fs::write(&config, yaml).unwrap();
    let (child, url, printed, rx) = run_with_view(&config);
    let child = crate::support::ReapOnDrop::new(child);
    assert!(printed.contains("?token="), "the printed address carries the controls' token: {printed}");
    tokio::task::spawn_blocking(move || {
        run_browser_test(
            "control.test.mjs",
            &[("VIEW_URL", url), ("VIEW_PAGE", printed), ("VIEW_JOB", "steered".into())],
        )
    })
    .await
    .unwrap();
    let mut child = child.take();
    let status = tokio::task::spawn_blocking(move || child.wait_bounded()).await.unwrap().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert_eq!(status.code(), Some(0), "the job ends with both trials solved: {}", rest.join("\n"));
    let job_dir = jobs.join("steered");
    let retried: Vec<PathBuf> =
        trial_dirs(&job_dir).into_iter().filter(|d| d.join("attempts/0/result.json").is_file()).collect();
    assert_eq!(retried.len(), 1, "one trial was retried");
    let attempt = read_json(&retried[0].join("attempts/0/result.json"));
    assert_eq!(attempt["exception_info"]["exception_type"], "CancelledError");
    let result = read_json(&retried[0].join("result.json"));
    assert_eq!(
        (result["retries"].as_u64(), result["verifier_result"]["rewards"]["reward"].as_f64()),
        (Some(1), Some(1.0))
    );
}

/// One GET over a plain socket: the status and the body (the viewer's answers are small here).
fn http_get(base: &str, path: &str, host: &str) -> (u16, String) {
    let (status, _, body) = http_get_with(base, path, host, "");
    (status, body)
}

/// [`http_get`] with extra header lines (each ending in CRLF); also the response's headers.
fn http_get_with(base: &str, path: &str, host: &str, headers: &str) -> (u16, String, String) {
    use std::io::Write;
    let addr = base.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    // A file's bytes need not be text: the head is.
    let response = String::from_utf8_lossy(&bytes).into_owned();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (status, head.to_string(), body.to_string())
}

/// Off loopback, the viewer prints an address with a random access token and refuses every
/// request that carries neither it nor the cookie its first page sets; a host name is refused.
#[test]
fn a_viewer_off_loopback_needs_its_token() {
    let dir = temp_dir("view-token");
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(jobs.join("j")).unwrap();
    std::fs::write(jobs.join("j/config.json"), "{}").unwrap();
    let viewer = start_viewer_on(&jobs, "0.0.0.0");
    let (base, token) = viewer.url.split_once("/?token=").expect("the printed address carries a token");
    assert_eq!(token.len(), 32, "128 random bits: {token}");
    let host = base.trim_start_matches("http://").replace("0.0.0.0", "127.0.0.1");
    let base = format!("http://{host}");
    // Not even the jobs list without it, a wrong one, or one of the right length.
    for (path, headers) in [
        ("/api/jobs", String::new()),
        ("/", String::new()),
        ("/api/jobs?token=wrong", String::new()),
        ("/api/jobs", format!("Cookie: terminus_view_token={}\r\n", "0".repeat(32))),
    ] {
        let (status, _, body) = http_get_with(&base, path, &host, &headers);
        assert_eq!(status, 401, "{path} {headers:?}: {body}");
    }
    // The printed address lets in and sets the cookie; the cookie alone then does.
    let (status, head, _) = http_get_with(&base, &format!("/api/jobs?token={token}"), &host, "");
    assert_eq!(status, 200);
    assert!(head.contains(&format!("terminus_view_token={token}; HttpOnly; SameSite=Strict")), "{head}");
    let cookie = format!("Cookie: terminus_view_token={token}\r\n");
    assert_eq!(http_get_with(&base, "/api/jobs", &host, &cookie).0, 200);
    // A name (a rebound site's) is refused even with the token.
    assert_eq!(http_get_with(&base, "/api/jobs", "attacker.example", &cookie).0, 421);
}

/// Without a browser or an engine: every route refuses a path that leaves the jobs directory,
/// and a request addressed to another host name is refused (DNS rebinding).
#[test]
fn the_viewer_refuses_paths_out_of_the_jobs_directory_and_foreign_hosts() {
    let dir = temp_dir("view-refusals");
    let jobs = dir.path().join("jobs");
    let trial = jobs.join("j/t__abcdefg");
    std::fs::create_dir_all(trial.join("agent")).unwrap();
    std::fs::write(jobs.join("j/config.json"), "{}").unwrap();
    std::fs::write(trial.join("config.json"), "{}").unwrap();
    std::fs::write(trial.join("agent/trajectory.json"), r#"{"steps": []}"#).unwrap();
    std::fs::write(dir.path().join("outside.txt"), "OUTSIDE-THE-JOBS-DIR").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), trial.join("agent/link.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path(), jobs.join("linked-job")).unwrap();
    let viewer = start_viewer(&jobs);
    let base = viewer.url.clone();
    let host = base.trim_start_matches("http://").to_string();
    assert_eq!(http_get(&base, "/api/jobs/j/trials/t__abcdefg/file?path=agent/trajectory.json", &host).0, 200);
    for path in [
        "/api/jobs/j/trials/t__abcdefg/file?path=../../../outside.txt",
        "/api/jobs/j/trials/t__abcdefg/file?path=agent/link.txt",
        "/api/jobs/j/trials/t__abcdefg/file?path=%2Fetc%2Fpasswd",
        "/api/jobs/j/trials/t__abcdefg/trajectory?path=..%2F..%2F..%2Foutside.txt",
        "/api/jobs/..%2F..%2F/trials/x",
        "/api/jobs/j/trials/..%2F..",
        "/api/jobs/linked-job",
        "/api/jobs/.terminus.lock",
        "/api/jobs/j/search?q=x&trial=..%2F..",
    ] {
        let (status, body) = http_get(&base, path, &host);
        assert!(status == 403 || status == 404, "{path}: {status} {body}");
        assert!(!body.contains("OUTSIDE-THE-JOBS-DIR"), "{path} leaked the file");
    }
    let (status, _) = http_get(&base, "/api/jobs", "attacker.example");
    assert_eq!(status, 421, "a foreign Host is refused");
}

/// A trial whose trajectory is a gigabyte (2,600 steps of 430 KB) and that ended in an error:
/// its page shows the result, the error and the first steps in under 2 s, and pages further on
/// request (the trajectory is indexed, never parsed whole).
#[tokio::test(flavor = "multi_thread")]
async fn a_trial_with_a_gigabyte_trajectory_opens_at_once() {
    if docker().await.is_none() || !browser_ready() {
        return;
    }
    let _heavy = heavy_lock().await;
    let dir = temp_dir("view-big");
    let jobs = dir.path().join("jobs");
    let big = task(&dir.path().join("tasks"), "big", "write a lot", "true", "echo 1 > /logs/verifier/reward.txt");
    let yaml = format!(
        "jobs_dir: {}\njob_name: big\nagents:\n  - name: nop\ntasks:\n  - path: {}\n",
        jobs.display(),
        big.display()
    );
    let config = dir.path().join("big.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || crate::support::run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trial = trial_dirs(&jobs.join("big")).remove(0);
    // The trial as a runaway agent leaves it: an error, and a trajectory of a gigabyte.
    let mut result = read_json(&trial.join("result.json"));
    result["exception_info"] = json!({
        "exception_type": "TrialDiskLimitExceededError",
        "exception_message": "the agent's files in the trial directory reached max_trial_disk_mb (1024 MB)",
        "exception_traceback": "",
        "occurred_at": result["finished_at"].clone(),
    });
    std::fs::write(trial.join("result.json"), serde_json::to_vec_pretty(&result).unwrap()).unwrap();
    std::fs::create_dir_all(trial.join("agent")).unwrap();
    const STEPS: usize = 2600;
    {
        use std::io::Write;
        let file = std::fs::File::create(trial.join("agent/trajectory.json")).unwrap();
        let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
        let message: String =
            (0..8192).map(|i| format!("line {i:05} of a reply that goes on and on .........\n")).collect();
        let message = serde_json::to_string(&message).unwrap();
        write!(out, "{{\n  \"schema_version\": \"ATIF-v1.8\",\n  \"session_id\": \"big\",\n  \"agent\": {{\"name\": \"terminus-2\", \"version\": \"2.0.0\"}},\n  \"steps\": [").unwrap();
        for i in 0..STEPS {
            let sep = if i == 0 { "\n" } else { ",\n" };
            write!(out, "{sep}    {{\"step_id\": {}, \"source\": \"agent\", \"message\": {message}}}", i + 1).unwrap();
        }
        write!(out, "\n  ],\n  \"final_metrics\": {{\"total_prompt_tokens\": 1}}\n}}\n").unwrap();
        out.flush().unwrap();
    }
    let size = std::fs::metadata(trial.join("agent/trajectory.json")).unwrap().len();
    assert!(size > 1 << 30, "{size} bytes");
    let viewer = start_viewer(&jobs);
    let name = trial.file_name().unwrap().to_string_lossy().into_owned();
    run_browser_test(
        "big.test.mjs",
        &[
            ("VIEW_URL", viewer.url.clone()),
            ("VIEW_JOB", "big".to_string()),
            ("VIEW_TRIAL", name),
            ("VIEW_STEPS", STEPS.to_string()),
        ],
    );
}

/// Files an agent wrote are served as data, never as a page a browser would render or run:
/// HTML, XHTML, SVG and a file without a name's end come as plain text, JSON as JSON, bytes as
/// bytes; every answer says `nosniff` and carries the policy that runs no script but the
/// viewer's own.
#[test]
fn agent_files_are_never_served_as_a_page() {
    let dir = temp_dir("view-pages");
    let jobs = dir.path().join("jobs");
    let trial = jobs.join("j/t__abcdefg");
    std::fs::create_dir_all(trial.join("agent")).unwrap();
    std::fs::write(jobs.join("j/config.json"), "{}").unwrap();
    std::fs::write(trial.join("config.json"), "{}").unwrap();
    let page = "<!doctype html><html><body><script>document.title='RAN'</script></body></html>\n";
    let files: [(&str, &[u8], &str); 7] = [
        ("page.html", page.as_bytes(), "text/plain; charset=utf-8"),
        ("page.htm", page.as_bytes(), "text/plain; charset=utf-8"),
        ("page.xhtml", page.as_bytes(), "text/plain; charset=utf-8"),
        (
            "drawing.svg",
            b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>",
            "text/plain; charset=utf-8",
        ),
        ("index", page.as_bytes(), "text/plain; charset=utf-8"),
        ("data.json", page.as_bytes(), "application/json"),
        ("blob.html", b"\0\x9f<html><script>alert(1)</script>", "application/octet-stream"),
    ];
    for (name, bytes, _) in &files {
        std::fs::write(trial.join("agent").join(name), bytes).unwrap();
    }
    let viewer = start_viewer(&jobs);
    let base = viewer.url.clone();
    let host = base.trim_start_matches("http://").to_string();
    for (name, _, expected) in files {
        let path = format!("/api/jobs/j/trials/t__abcdefg/file?path=agent/{name}");
        let (status, head, _) = http_get_with(&base, &path, &host, "");
        assert_eq!(status, 200, "{name}: {head}");
        let header = |wanted: &str| {
            head.lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(wanted)).map(|(_, v)| v.trim()))
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(header("content-type"), expected, "{name}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{name}");
        assert!(header("content-security-policy").contains("script-src 'self'"), "{name}: {head}");
    }
}
