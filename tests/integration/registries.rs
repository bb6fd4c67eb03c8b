//! Datasets by name from Harbor's registries on the network, against a stand-in on 127.0.0.1
//! (tests/helpers/registry_standin.py) that serves the Harbor hub's read API and a JSON
//! registry. Harbor 0.25's and 0.26's own clients are pointed at the same stand-in: all three
//! must resolve each name to the same version, repositories, commits and paths. Then `run -d`
//! runs the tasks (from local bare repositories), a second run with the stand-in stopped
//! resolves from the cache, and a stand-in that hangs, answers 500 or sends 64 MB of junk ends
//! the run with exit 2, naming the URL and what came back.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    docker, example, harbor_runtime, heavy_lock, read_json, repo_root, temp_dir, terminus_bin, trial_dirs,
};

/// The publishable key the stand-in asks for.
const KEY: &str = "sb_publishable_standin";

/// The stand-in registry, stopped when dropped.
struct Standin {
    child: Child,
    port: u16,
}

impl Standin {
    fn start(registry: &Path, mode: &str) -> Standin {
        let mut child = Command::new("python3")
            .arg(repo_root().join("tests/helpers/registry_standin.py"))
            .arg(registry)
            .arg(KEY)
            .arg(mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the stand-in's port, not {line:?}"));
        // It logs each request to stdout: read on, so that it never writes into a closed pipe.
        std::thread::spawn(move || reader.lines().map_while(Result::ok).for_each(drop));
        Standin { child, port }
    }

    fn hub(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn json_registry(&self) -> String {
        format!("http://127.0.0.1:{}/registry.json", self.port)
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        self.child.reap();
    }
}

fn shell(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").args(["-ec", script]).current_dir(dir).output_bounded().expect("sh runs");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository holding two copies of hello-world, and the registry the stand-in serves:
/// `hello-bench@9.0` (one task) and `hello-bench@10.0` (both, one row listed twice, as the hub's
/// legacy rows can be). Harbor's rule picks 10.0 for the bare name (a lexical pick would take
/// 9.0).
fn fixture(dir: &Path) -> PathBuf {
    let hello = example("hello-world");
    let commit = shell(
        dir,
        &format!(
            "mkdir -p src/tasks && cp -r {hello} src/tasks/hello-a && cp -r {hello} src/tasks/hello-b
             cd src && git init --quiet && git add . && git -c user.name=t -c user.email=t@t commit --quiet -m tasks
             git rev-parse HEAD && cd .. && git clone --quiet --bare src bare.git",
            hello = hello.display()
        ),
    );
    let url = format!("file://{}", dir.join("bare.git").display());
    let task = |name: &str| json!({"name": format!("hbbench/{name}"), "git_url": url, "git_commit_id": commit, "path": format!("tasks/{name}")});
    let registry = json!([
        {"name": "hello-bench", "version": "9.0", "description": "One task.", "tasks": [task("hello-a")],
         "metrics": [{"type": "mean"}]},
        {"name": "hello-bench", "version": "10.0", "description": "Two tasks.",
         "tasks": [task("hello-a"), task("hello-b"), task("hello-b")]},
    ]);
    let path = dir.join("served.json");
    std::fs::write(&path, serde_json::to_string_pretty(&registry).unwrap()).unwrap();
    path
}

/// `terminus ARGS` pointed at the stand-in hub `hub`, its cache in `cache`.
fn terminus(dir: &Path, cache: &Path, hub: &str, args: &[&str]) -> Command {
    let mut command = Command::new(terminus_bin());
    command
        .args(args)
        .current_dir(dir)
        .env("TERMINUS_CACHE_DIR", cache)
        .env("HARBOR_SUPABASE_URL", hub)
        .env("HARBOR_SUPABASE_PUBLISHABLE_KEY", KEY);
    command
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A resolution as (version, [(git_url, git_commit_id, path)]).
fn tasks_of(resolved: &Value) -> (String, Vec<(String, String, String)>) {
    let field = |task: &Value, key: &str| task[key].as_str().unwrap_or_default().to_string();
    let tasks = resolved["tasks"].as_array().unwrap_or_else(|| panic!("no tasks in {resolved}"));
    let tasks = tasks.iter().map(|t| (field(t, "git_url"), field(t, "git_commit_id"), field(t, "path"))).collect();
    (resolved["version"].as_str().unwrap_or_default().to_string(), tasks)
}

#[tokio::test(flavor = "multi_thread")]
async fn harbor_and_terminus_resolve_the_same_names_and_terminus_runs_them() {
    let Some(_docker) = docker().await else { return };
    let dir = temp_dir("registries");
    let dir = dir.path();
    let served = fixture(dir);
    let standin = Standin::start(&served, "ok");
    let cache = dir.join("cache");
    let cases: [(&str, Option<String>); 4] = [
        ("hello-bench", None),
        ("hello-bench@9.0", None),
        ("hello-bench", Some(standin.json_registry())),
        ("hello-bench@9.0", Some(standin.json_registry())),
    ];
    let mut resolved_by_terminus = Vec::new();
    for (name, url) in &cases {
        let mut args = vec!["datasets", "show", "--json", name];
        if let Some(url) = url {
            args.extend(["--registry-url", url]);
        }
        let out = terminus(dir, &cache, &standin.hub(), &args).output_bounded().unwrap();
        assert_eq!(out.status.code(), Some(0), "{name} {url:?}: {}", text(&out));
        resolved_by_terminus.push(tasks_of(&serde_json::from_slice(&out.stdout).unwrap()));
    }
    let (version, tasks) = &resolved_by_terminus[0];
    assert_eq!((version.as_str(), tasks.len()), ("10.0", 2), "the best version, each task once: {tasks:?}");
    for harbor_version in ["0.25.0", "0.26.0"] {
        let Some(harbor) = harbor_runtime(harbor_version) else { return };
        for ((name, url), ours) in cases.iter().zip(&resolved_by_terminus) {
            let mut command = Command::new(&harbor.python);
            command
                .arg(repo_root().join("tests/helpers/harbor_resolve.py"))
                .arg(name)
                .args(url.iter())
                .current_dir(dir)
                .env("HARBOR_SUPABASE_URL", standin.hub())
                .env("HARBOR_SUPABASE_PUBLISHABLE_KEY", KEY);
            let out = command.output_bounded().unwrap();
            assert!(out.status.success(), "Harbor {harbor_version} {name} {url:?}: {}", text(&out));
            let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string();
            let theirs = tasks_of(&serde_json::from_str(&last).unwrap());
            assert_eq!(&theirs, ours, "Harbor {harbor_version} and terminus resolve {name} ({url:?}) alike");
        }
    }

    // `run -d` runs what the name resolved to, from the bare repository.
    let _guard = heavy_lock().await;
    let jobs = dir.join("jobs");
    let hub = standin.hub();
    let run = |job: &str| {
        let mut command = terminus(dir, &cache, &hub, &["run", "-a", "oracle", "-d", "hello-bench@10.0"]);
        command.arg("--jobs-dir").arg(&jobs).args(["--job-name", job]);
        command
    };
    let mut first = run("first");
    let out = tokio::task::spawn_blocking(move || first.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let trials = trial_dirs(&jobs.join("first"));
    assert_eq!(trials.len(), 2);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        let task = &read_json(&trial.join("config.json"))["task"];
        assert_eq!(task["git_url"], resolved_by_terminus[0].1[0].0.as_str(), "{task}");
        assert_eq!((task["source"].as_str(), task["dataset_version"].as_str()), (Some("hello-bench"), Some("10.0")));
    }

    // The stand-in stopped: the name resolves from the cache, and the run says so.
    drop(standin);
    let mut second = run("second");
    let out = tokio::task::spawn_blocking(move || second.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("hello-bench@10.0 resolved from the cache") && said.contains("cannot be reached"), "{said}");
    assert!(said.contains(&hub), "{said}");
    assert_eq!(trial_dirs(&jobs.join("second")).len(), 2);
}

#[test]
fn registries_that_hang_fail_or_send_junk_end_the_run_with_exit_2() {
    let dir = temp_dir("registries-bad");
    let dir = dir.path();
    let served = fixture(dir);
    for (mode, said) in [
        ("hang", "did not answer within 3 s"),
        ("error", "answered HTTP 500: \"upstream exploded\\n\""),
        ("junk", "sent what is not the hub's list of versions"),
    ] {
        let standin = Standin::start(&served, mode);
        // A cache of its own: nothing of an earlier answer stands in.
        let cache = dir.join(format!("cache-{mode}"));
        let mut command = terminus(dir, &cache, &standin.hub(), &["run", "-a", "oracle", "-d", "hello-bench"]);
        command.arg("--jobs-dir").arg(dir.join("jobs")).env("TERMINUS_REGISTRY_TIMEOUT_SEC", "3");
        let started = Instant::now();
        let out = command.output_bounded().unwrap();
        let took = started.elapsed();
        let seen = text(&out);
        assert_eq!(out.status.code(), Some(2), "{mode}: {seen}");
        assert!(seen.contains(&standin.hub()) && seen.contains(said), "{mode}: {seen}");
        assert!(seen.lines().all(|l| l.len() < 2000), "{mode}: the answer is cut short");
        // Bounded by the timeout, not by the stand-in (which would hang for an hour).
        assert!(took < Duration::from_secs(60), "{mode}: {took:?}");
        assert!(!dir.join("jobs").exists(), "{mode}: nothing ran");
    }
    // Junk where Harbor's JSON registry is expected, named as that.
    let standin = Standin::start(&served, "junk");
    let url = standin.json_registry();
    let out = terminus(
        dir,
        &dir.join("cache-json"),
        &standin.hub(),
        &["datasets", "show", "hello-bench", "--registry-url", &url],
    )
    .output_bounded()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("sent what is not a Harbor registry (a JSON list of datasets)"), "{}", text(&out));
    assert!(text(&out).contains("<junk><junk>"), "{}", text(&out));
}

/// `git daemon` serving `dir/served` on a free loopback port, stopped when dropped.
struct GitDaemon {
    child: Child,
    port: u16,
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.child.reap();
    }
}

fn git_daemon(base: &Path) -> GitDaemon {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new("git")
        .args(["daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(base)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("git daemon runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "git daemon did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    GitDaemon { child, port }
}

/// A git repository registry (Harbor's `--repo`): a repository whose registry.json lists
/// tasks by path alone (they are the repository's, at the commit the registry was read at),
/// served by `git daemon`. Harbor 0.25's and 0.26's clients and terminus resolve it alike, and
/// `run -d NAME --repo SOURCE` runs the tasks.
#[tokio::test(flavor = "multi_thread")]
async fn a_git_repository_registry_resolves_as_harbors_and_runs() {
    let Some(_docker) = docker().await else { return };
    let dir = temp_dir("registries-repo");
    let dir = dir.path();
    let hello = example("hello-world");
    let registry = json!([
        {"name": "hello-bench", "version": "1.0", "description": "", "tasks": [
            {"name": "hbbench/hello-a", "path": "tasks/hello-a"}]},
        {"name": "hello-bench", "version": "2.0", "description": "", "tasks": [
            {"name": "hbbench/hello-a", "path": "tasks/hello-a"}, {"name": "hbbench/hello-b", "path": "tasks/hello-b"}]},
    ]);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/registry.json"), registry.to_string()).unwrap();
    let commit = shell(
        dir,
        &format!(
            "mkdir -p src/tasks served/org && cp -r {hello} src/tasks/hello-a && cp -r {hello} src/tasks/hello-b
             cd src && git init --quiet && git add . && git -c user.name=t -c user.email=t@t commit --quiet -m tasks
             git rev-parse HEAD && cd .. && git clone --quiet --bare src served/org/bench.git
             git -C served/org/bench.git config uploadpack.allowFilter true
             git -C served/org/bench.git config uploadpack.allowAnySHA1InWant true",
            hello = hello.display()
        ),
    );
    let daemon = git_daemon(&dir.join("served"));
    let source = format!("git://127.0.0.1:{}/org/bench.git", daemon.port);
    let cache = dir.join("cache");
    let out =
        terminus(dir, &cache, "http://127.0.0.1:9", &["datasets", "show", "--json", "hello-bench", "--repo", &source])
            .output_bounded()
            .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let ours = tasks_of(&serde_json::from_slice(&out.stdout).unwrap());
    assert_eq!(ours.0, "2.0");
    assert_eq!(
        ours.1,
        ["tasks/hello-a", "tasks/hello-b"].map(|p| (source.clone(), commit.clone(), p.to_string())).to_vec(),
        "the repository's tasks at the commit read"
    );
    for harbor_version in ["0.25.0", "0.26.0"] {
        let Some(harbor) = harbor_runtime(harbor_version) else { return };
        let out = Command::new(&harbor.python)
            .arg(repo_root().join("tests/helpers/harbor_resolve.py"))
            .args(["hello-bench", "--repo", &source])
            .current_dir(dir)
            .output_bounded()
            .unwrap();
        assert!(out.status.success(), "Harbor {harbor_version}: {}", text(&out));
        let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string();
        assert_eq!(tasks_of(&serde_json::from_str(&last).unwrap()), ours, "Harbor {harbor_version} and terminus alike");
    }
    let _guard = heavy_lock().await;
    let jobs = dir.join("jobs");
    let mut run = terminus(
        dir,
        &cache,
        "http://127.0.0.1:9",
        &["run", "-q", "-a", "oracle", "-d", "hello-bench@1.0", "--repo", &source],
    );
    run.arg("--jobs-dir").arg(&jobs).args(["--job-name", "repo"]);
    let out = tokio::task::spawn_blocking(move || run.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let trials = trial_dirs(&jobs.join("repo"));
    assert_eq!(trials.len(), 1);
    assert_eq!(read_json(&trials[0].join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(read_json(&trials[0].join("config.json"))["task"]["git_commit_id"], commit.as_str());
    // A repository without the registry file is named, with the commit read.
    let out = terminus(
        dir,
        &dir.join("cache-2"),
        "http://127.0.0.1:9",
        &["datasets", "show", "hello-bench", "--repo", &source, "--registry-path", "sets"],
    )
    .output_bounded()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains(&format!("has no `sets/registry.json` at commit {commit}")), "{}", text(&out));
}
