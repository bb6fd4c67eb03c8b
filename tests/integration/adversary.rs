//! Hostile agents and models against the real engine: what they try must not change a reward,
//! crash the job, or outlive the trial.

use std::path::PathBuf;

use serde_json::json;
use terminus_mock_llm::{Conversation, MockServer, Script};

use crate::support::BoundedCommand;
use crate::support::{
    containers_of_job, docker, heavy_lock, instructed_task, job_yaml, read_json, reply, run_terminus, temp_dir,
    trial_dirs,
};

/// A conversation chosen by `when` in the instruction: run `keys`, then claim and confirm.
fn agent_that_runs(when: &str, keys: &str, wait: f64) -> Conversation {
    Conversation {
        when: when.into(),
        turns: vec![reply(json!([{"keystrokes": keys, "duration": wait}]), false), reply(json!([]), true)],
    }
}

/// A task under `dir/tasks` whose instruction is `marker` and whose tests are `test_sh`.
fn task(dir: &std::path::Path, name: &str, marker: &str, test_sh: &str) -> PathBuf {
    instructed_task(&dir.join("tasks"), name, marker, "[agent]\ntimeout_sec = 120.0\n", "", test_sh)
}

/// The tests of the tasks whose answer is 42 in `/app/answer.txt`.
const ANSWER_42: &str =
    "[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";

/// The task names of a job's trials, sorted.
fn task_names(trials: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> =
        trials.iter().map(|t| read_json(&t.join("result.json"))["task_name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

/// The agent plants the verdict it wants — a `reward.txt` of 1 where the tests write
/// `reward.json`, a `setsid` loop that keeps rewriting it, a file in `/tests` that flips the
/// tests — and an ordinary trial runs beside it. With `verifier.agent_processes: kill` the
/// planted 1 never counts: before the tests, every agent process is killed and `/tests` and
/// `/logs/verifier` are emptied.
#[tokio::test(flavor = "multi_thread")]
async fn planted_rewards_and_surviving_processes_do_not_count() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("planted");
    // The honest verdict of this task is 0; a planted /tests/planted.txt would make it 1.
    let tests = "if [ -e /tests/planted.txt ]; then echo '{\"reward\": 1}'; else echo '{\"reward\": 0}'; fi > /logs/verifier/reward.json";
    let hostile = task(dir.path(), "hostile", "PLANT-A-REWARD", tests);
    let plant = "mkdir -p /tests && touch /tests/planted.txt && echo 1 > /logs/verifier/reward.txt && \
                 (setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' </dev/null >/dev/null 2>&1 &) && \
                 (nohup sh -c 'kill -STOP $$; echo 1 > /logs/verifier/reward.txt' </dev/null >/dev/null 2>&1 &)\n";
    let honest = task(dir.path(), "honest", "WRITE-42", ANSWER_42);
    let script = Script {
        conversations: vec![
            agent_that_runs("PLANT-A-REWARD", plant, 1.0),
            agent_that_runs("WRITE-42", "echo 42 > /app/answer.txt\n", 0.3),
        ],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let extra = "n_concurrent_trials: 4\nverifier:\n  agent_processes: kill\n";
    let config = job_yaml(dir.path(), "planted", &server.api_base(), extra, &[hostile, honest]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("planted");
    let trials = trial_dirs(&job_dir);
    assert_eq!(task_names(&trials), ["honest", "hostile"], "one trial of each task");
    for trial in trials {
        let result = read_json(&trial.join("result.json"));
        let expected = if result["task_name"] == "hostile" { 0.0 } else { 1.0 };
        assert_eq!(result["verifier_result"]["rewards"]["reward"], expected, "{result}");
        assert!(result["exception_info"].is_null(), "{result}");
        if result["task_name"] == "hostile" {
            assert!(!trial.join("verifier/reward.txt").exists(), "the planted file was removed before the tests");
        }
    }
    let id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    assert_eq!(containers_of_job(&docker, &id).await, 0);
}

/// Keystrokes that start with `-` are typed, not read as tmux flags (which ended the trial with
/// `unknown flag`): the trial goes on and is graded.
#[tokio::test(flavor = "multi_thread")]
async fn dash_led_keystrokes_are_typed() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("dashes");
    let tests = "[ \"$(cat /app/answer.txt)\" = '-la --help' ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";
    let task = task(dir.path(), "dashes", "TYPE-DASHES", tests);
    let keys = json!([
        {"keystrokes": "echo ", "duration": 0.1},
        {"keystrokes": "-la", "duration": 0.1},
        {"keystrokes": " --help > /app/answer.txt", "duration": 0.1},
        {"keystrokes": "\n", "duration": 0.3}
    ]);
    let script = Script {
        conversations: vec![Conversation {
            when: "TYPE-DASHES".into(),
            turns: vec![reply(keys, false), reply(json!([]), true)],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = job_yaml(dir.path(), "dashes", &server.api_base(), "n_concurrent_trials: 4\n", &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result = read_json(&trial_dirs(&dir.path().join("dashes"))[0].join("result.json"));
    assert!(result["exception_info"].is_null(), "{}", result["exception_info"]);
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
}

/// A tmpfs mounted for one test, unmounted however the test ends.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(path: PathBuf, size: &str) -> SmallDisk {
        std::fs::create_dir_all(&path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .status_bounded()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs needs root (the test suite runs as root)");
        SmallDisk(path)
    }

    fn grow(&self, size: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status_bounded()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status_bounded();
    }
}

/// A full disk under the job directory halts the job resumably (exit 4) instead of restarting
/// trials that cannot write their record; once there is room, `terminus resume` finishes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_halts_the_job_resumably() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("full-disk");
    let disk = SmallDisk::mount(dir.path().join("jobs"), "120k");
    let task = task(dir.path(), "fill", "WRITE-42", ANSWER_42);
    let script = Script {
        conversations: vec![agent_that_runs("WRITE-42", "echo 42 > /app/answer.txt\n", 0.2)],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let yaml = format!(
        "jobs_dir: {}\njob_name: full\nn_attempts: 6\nn_concurrent_trials: 2\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\ntasks:\n  - path: {}\n",
        disk.0.display(),
        server.api_base(),
        task.display()
    );
    let config = dir.path().join("full.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("the disk is full"), "{stderr}");
    let job_dir = disk.0.join("full");
    assert!(trial_dirs(&job_dir).len() < 6, "the disk filled up before the end");
    disk.grow("64m");
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || crate::support::resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 6);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        assert_eq!(result["restarts"], 0, "no trial was restarted for a full disk");
    }
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
}

/// A task directory holding a link to a file outside it (a host key) is refused, naming the
/// link, before anything is built or uploaded; its sibling runs as usual. `tasks check` says so.
#[tokio::test(flavor = "multi_thread")]
async fn task_links_that_leave_the_task_are_refused() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("links");
    let secret = dir.path().join("id_ed25519");
    std::fs::write(&secret, "-----BEGIN OPENSSH PRIVATE KEY----- not for images\n").unwrap();
    let tests = "echo 1 > /logs/verifier/reward.txt";
    let leaky = task(dir.path(), "leaky", "LEAKY", tests);
    std::os::unix::fs::symlink(&secret, leaky.join("environment/key")).unwrap();
    std::fs::write(leaky.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nCOPY key /root/key\n").unwrap();
    let fine = task(dir.path(), "fine", "FINE", tests);
    // A link that stays inside the task is fine.
    std::os::unix::fs::symlink("Dockerfile", fine.join("environment/Dockerfile.link")).unwrap();
    let script = Script {
        conversations: vec![agent_that_runs("LEAKY", "true\n", 0.1), agent_that_runs("FINE", "true\n", 0.1)],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = job_yaml(dir.path(), "links", &server.api_base(), "n_concurrent_trials: 4\n", &[leaky.clone(), fine]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let trials = trial_dirs(&dir.path().join("links"));
    assert_eq!(task_names(&trials), ["fine", "leaky"], "one trial of each task, the refused one too");
    for trial in trials {
        let result = read_json(&trial.join("result.json"));
        if result["task_name"] == "leaky" {
            assert_eq!(result["exception_info"]["exception_type"], "TaskLoadError", "{result}");
            let message = result["exception_info"]["exception_message"].as_str().unwrap();
            assert!(message.contains("environment/key") && message.contains("outside the task"), "{message}");
        } else {
            assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        }
    }
    let check = std::process::Command::new(crate::support::terminus_bin())
        .args(["tasks", "check"])
        .arg(&leaky)
        .output_bounded()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&check.stdout).contains("environment/key"));
}

/// The peak resident memory of a child process, read from /proc until it exits (killed, and the
/// test failed, if it has not within `deadline`).
async fn peak_rss_mib(child: &mut std::process::Child, deadline: std::time::Duration) -> (Option<i32>, f64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0.0f64;
    let started = std::time::Instant::now();
    loop {
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("terminus did not end within {deadline:?}");
        }
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(line) = text.lines().find(|l| l.starts_with("VmHWM:"))
        {
            let kib: f64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0.0);
            peak = peak.max(kib / 1024.0);
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), peak);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An agent that fills `/logs/agent` — one huge file and thousands of small ones — costs the
/// orchestrator no more memory than a quiet one: the logs stream to disk within the job's copy
/// limits, what is cut is named in the result, and the verdict still arrives.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_bomb_is_cut_at_the_limits_without_the_memory() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("log-bomb");
    let bomb = task(dir.path(), "bomb", "LOG-BOMB", ANSWER_42);
    let keys = "head -c 400M /dev/zero > /logs/agent/big; mkdir -p /logs/agent/many && (cd /logs/agent/many && seq 1 6000 | xargs touch); echo 42 > /app/answer.txt\n";
    let script = Script { conversations: vec![agent_that_runs("LOG-BOMB", keys, 8.0)], ..Script::default() };
    let server = MockServer::start(script, 0).await.unwrap();
    let limits = "environment:\n  max_log_mb: 64\n  max_log_files: 2000\n";
    let config = job_yaml(dir.path(), "bomb", &server.api_base(), limits, &[bomb]);
    let mut child = std::process::Command::new(crate::support::terminus_bin())
        .args(["run", "-c"])
        .arg(&config)
        .current_dir(crate::support::repo_root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (code, peak) = peak_rss_mib(&mut child, std::time::Duration::from_secs(900)).await;
    assert_eq!(code, Some(0));
    assert!(peak < 200.0, "peak RSS {peak:.0} MiB with a 400 MiB log");
    let trial = &trial_dirs(&dir.path().join("bomb"))[0];
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    let warnings = result["warnings"].as_array().expect("the cut is named in the result");
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("/logs/agent")), "{warnings:?}");
    let copied: u64 = crate::support::all_files(&trial.join("agent")).iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(copied <= 64 * 1024 * 1024 + 1024 * 1024, "{copied} bytes copied");
    assert!(
        !crate::support::all_files(trial).iter().any(|f| f.to_string_lossy().contains(".download-")),
        "no temporary file left"
    );
}

/// Debug and trace logging (`TERMINUS_LOG=trace`) never writes the container's or the
/// verifier's environment to `job.log`: the engine client's request and reply bodies hold them.
#[tokio::test(flavor = "multi_thread")]
async fn trace_logs_do_not_dump_environments() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("trace-env");
    let tests = "[ \"$VERIFIER_TOKEN\" = v-secret-4711 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";
    let task = task(dir.path(), "env", "USE-THE-ENV", tests);
    let script = Script {
        conversations: vec![agent_that_runs("USE-THE-ENV", "echo $CONTAINER_TOKEN > /tmp/seen\n", 0.2)],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let extra = "n_concurrent_trials: 4\nenvironment:\n  env:\n    CONTAINER_TOKEN: c-secret-0815\nverifier:\n  env:\n    VERIFIER_TOKEN: v-secret-4711\n";
    let config = job_yaml(dir.path(), "trace", &server.api_base(), extra, &[task]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[("TERMINUS_LOG", "trace")])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("trace");
    let result = read_json(&trial_dirs(&job_dir)[0].join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "the verifier saw its environment");
    let log = std::fs::read_to_string(job_dir.join("job.log")).unwrap();
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "the log is verbose");
    for secret in ["c-secret-0815", "v-secret-4711"] {
        assert!(!log.contains(secret), "{secret} is in job.log");
    }
}

/// Agents that end their own container: a `kill -9 -1` under an image with an `ENTRYPOINT`
/// (the engine's init stays PID 1 and exits once its child is gone). Each such trial ends with
/// its own error (`AgentEndedEnvironmentError`, written as Harbor's `RuntimeError`), is not
/// restarted and counts toward no restart intensity; the ordinary trials beside them are all
/// rewarded and the job ends normally.
#[tokio::test(flavor = "multi_thread")]
async fn agents_that_end_their_own_container_stay_in_their_trial() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("self-destruct");
    let killer = task(dir.path(), "entrypoint-killer", "KILL-EVERYTHING", ANSWER_42);
    std::fs::write(
        killer.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /app\nWORKDIR /app\nENTRYPOINT [\"/bin/sh\", \"-c\", \"exec \\\"$@\\\"\", \"--\"]\n",
    )
    .unwrap();
    let honest = task(dir.path(), "honest", "WRITE-42", ANSWER_42);
    let script = Script {
        conversations: vec![
            agent_that_runs("KILL-EVERYTHING", "kill -9 -1\n", 1.0),
            agent_that_runs("WRITE-42", "echo 42 > /app/answer.txt\n", 0.3),
        ],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let extra = "n_concurrent_trials: 4\nn_attempts: 6\n";
    let config = job_yaml(dir.path(), "self-destruct", &server.api_base(), extra, &[killer, honest]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("self-destruct");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 12, "every trial has a result");
    for trial in trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["restarts"], 0, "{result}");
        if result["task_name"] == "honest" {
            assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        } else {
            assert_eq!(result["exception_info"]["kind"], "AgentEndedEnvironmentError", "{result}");
            assert_eq!(result["exception_info"]["exception_type"], "RuntimeError", "{result}");
        }
    }
    let id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    assert_eq!(containers_of_job(&docker, &id).await, 0);
}

/// Third-party Dockerfiles that fork without end or allocate without end fail their own
/// trial's build (`EnvironmentBuildError`), within the job's build limits
/// (`environment.build_memory_mb`, `build_cpus`) and the task's build time limit; the build is
/// cancelled, the engine removes what of it still runs within seconds, and the ordinary trial
/// beside them is rewarded.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_dockerfiles_fail_their_own_build() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("hostile-builds");
    let hostile = |name: &str, run: &str| {
        let task = task(dir.path(), name, "NEVER-ASKED", ANSWER_42);
        std::fs::write(task.join("environment/Dockerfile"), format!("FROM terminus-base:bookworm\nRUN {run}\n"))
            .unwrap();
        std::fs::write(task.join("task.toml"), "version = \"1.0\"\n[environment]\nbuild_timeout_sec = 30.0\n").unwrap();
        task
    };
    // A foreground fork bomb (each call waits for its pipeline) and a reader that keeps
    // everything it reads (a line without end).
    let bomb = hostile("fork-bomb", "bash -c 'f() { f | f & f | f; }; f'");
    let hog = hostile("memory-hog", "head -c 64G /dev/zero | tail -c 1");
    let honest = task(dir.path(), "honest", "WRITE-42", ANSWER_42);
    let script = Script {
        conversations: vec![agent_that_runs("WRITE-42", "echo 42 > /app/answer.txt\n", 0.3)],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let extra = "n_concurrent_trials: 3\nenvironment:\n  build_memory_mb: 256\n  build_cpus: 1\n";
    let config = job_yaml(dir.path(), "hostile-builds", &server.api_base(), extra, &[bomb, hog, honest]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    let job_dir = dir.path().join("hostile-builds");
    for trial in trial_dirs(&job_dir) {
        let result = read_json(&trial.join("result.json"));
        if result["task_name"] == "honest" {
            assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        } else {
            assert_eq!(result["exception_info"]["kind"], "EnvironmentBuildError", "{result}");
        }
    }
    // Nothing of the builds runs on. A cancelled build's step is killed and removed by the engine
    // once the build's connection closes, which for a fork bomb takes it a few seconds; the job
    // does not wait for that, so the check gives the engine a bounded while.
    let cancelled = std::time::Instant::now();
    loop {
        let running = docker.list_containers(None::<bollard::query_parameters::ListContainersOptions>).await.unwrap();
        let builds: Vec<_> = running
            .iter()
            .filter(|c| c.command.as_deref().is_some_and(|cmd| cmd.contains("f | f") || cmd.contains("/dev/zero")))
            .map(|c| (c.id.clone(), c.command.clone(), c.status.clone()))
            .collect();
        if builds.is_empty() {
            break;
        }
        assert!(
            cancelled.elapsed() < std::time::Duration::from_secs(60),
            "build steps still running 60 s after the job ended: {builds:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    eprintln!("the cancelled builds were gone {:.1} s after the job ended", cancelled.elapsed().as_secs_f64());
}
