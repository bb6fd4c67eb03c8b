//! Registry datasets through the real binary: `datasets list`, `datasets fetch` from a local
//! bare repository reached by `file://` (a fetch killed midway leaves no entry, the next one
//! redoes it, and a third runs no git at all), the errors of `run -d` (exit 2, naming what is
//! wrong), and — with Docker — a job of `-d hello@1.0` run by the oracle, and a run of a
//! two-repository dataset killed in its fetch, which the next run finishes and a third needs no
//! git for.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{docker, example, heavy_lock, read_json, temp_dir, terminus_bin, trial_dirs, wait_until};

/// Runs a shell script in `dir`; its stdout.
fn shell(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").args(["-ec", script]).current_dir(dir).output_bounded().expect("sh runs");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A registry in `dir`: `hello@1.0` (hello-world from a bare repository in `dir`, by
/// `file://`), `hello@0.1` (a local copy beside the file), `broken@1.0` (a commit the
/// repository does not have); its path and the commit.
fn registry(dir: &Path) -> (PathBuf, String) {
    let hello = example("hello-world");
    let commit = shell(
        dir,
        &format!(
            "mkdir -p src/tasks local && cp -r {hello} src/tasks/ && cp -r {hello} local/
             cd src && git init --quiet && git add . && git -c user.name=t -c user.email=t@t commit --quiet -m hello
             git rev-parse HEAD && cd .. && git clone --quiet --bare src bare.git",
            hello = hello.display()
        ),
    );
    let url = format!("file://{}", dir.join("bare.git").display());
    let gone = "0123456789abcdef0123456789abcdef01234567";
    let task = |commit: &str| serde_json::json!({"name": "hello-world", "git_url": url, "git_commit_id": commit, "path": "tasks/hello-world"});
    let registry = serde_json::json!([
        {"name": "hello", "version": "1.0", "description": "Hello from git.", "tasks": [task(&commit)]},
        {"name": "hello", "version": "0.1", "description": "Hello, local.", "tasks": [{"name": "hello-world", "path": "local/hello-world"}]},
        {"name": "broken", "version": "1.0", "description": "A commit that is gone.", "tasks": [task(gone)]},
    ]);
    let path = dir.join("registry.json");
    std::fs::write(&path, serde_json::to_string_pretty(&registry).unwrap()).unwrap();
    (path, commit)
}

/// A registry file `pair.json` in `dir` whose dataset `pair@1.0` has two tasks, each in a bare
/// repository of its own (`pair-a.git`, `pair-b.git`); its path and the two commits.
fn pair_registry(dir: &Path) -> (PathBuf, [String; 2]) {
    let hello = example("hello-world");
    let commit = |name: &str| {
        shell(
            dir,
            &format!(
                "rm -rf {name}-src && mkdir -p {name}-src/tasks && cp -r {hello} {name}-src/tasks/{name}
                 cd {name}-src && git init --quiet && git add . && git -c user.name=t -c user.email=t@t commit --quiet -m {name}
                 git rev-parse HEAD && cd .. && git clone --quiet --bare {name}-src {name}.git",
                hello = hello.display()
            ),
        )
    };
    let commits = [commit("pair-a"), commit("pair-b")];
    let task = |name: &str, commit: &str| {
        let url = format!("file://{}", dir.join(format!("{name}.git")).display());
        serde_json::json!({"name": name, "git_url": url, "git_commit_id": commit, "path": format!("tasks/{name}")})
    };
    let registry = serde_json::json!([{"name": "pair", "version": "1.0", "description": "Two repositories.",
        "tasks": [task("pair-a", &commits[0]), task("pair-b", &commits[1])]}]);
    let path = dir.join("pair.json");
    std::fs::write(&path, serde_json::to_string_pretty(&registry).unwrap()).unwrap();
    (path, commits)
}

/// A `git` first on PATH that logs each call to `$GIT_LOG`, and with `$GIT_STALL` set, at a call
/// that checks out (`sparse-checkout`) once `$GIT_STALL_AFTER` (default 0) checkouts are done,
/// writes its pid there and sleeps: a fetch caught midway.
fn git_wrapper(dir: &Path) -> PathBuf {
    let real = Command::new("sh").args(["-c", "command -v git"]).output_bounded().unwrap();
    let real = String::from_utf8_lossy(&real.stdout).trim().to_string();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"$*\" >> \"$GIT_LOG\"\nn=$(grep -c -- '--detach' \"$GIT_LOG\")\ncase \"$*\" in *sparse-checkout*) if [ -n \"$GIT_STALL\" ] && [ \"$n\" -ge \"${{GIT_STALL_AFTER:-0}}\" ]; then echo $$ > \"$GIT_STALL\"; exec sleep 60; fi;; esac\nexec {real} \"$@\"\n"
    );
    std::fs::write(bin.join("git"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `terminus args…` with the cache in `dir/cache` and the wrapper first on PATH.
fn terminus(dir: &Path, args: &[&str], stall: Option<&Path>) -> Command {
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new(terminus_bin());
    command
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .env("TERMINUS_CACHE_DIR", dir.join("cache"))
        .env("GIT_LOG", dir.join("git.log"))
        .env_remove("GIT_STALL");
    if let Some(stall) = stall {
        command.env("GIT_STALL", stall);
    }
    command
}

/// Starts `command` (its git wrapper set to stall, writing its pid to `stall`), waits for the
/// stall, then kills the command and the stalled git: a fetch killed midway.
async fn kill_when_stalled(mut command: Command, stall: &Path) {
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_until("the fetch to reach its stalled checkout", Duration::from_secs(60), || {
        std::fs::read_to_string(stall).is_ok_and(|pid| !pid.trim().is_empty())
    })
    .await;
    child.kill().unwrap();
    child.wait_bounded().unwrap();
    let sleeper = std::fs::read_to_string(stall).unwrap().trim().parse::<i32>().unwrap();
    let _ = Command::new("kill").arg(sleeper.to_string()).status_bounded();
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The cache's tasks directory's entries, leftovers (`.tmp-*`, `.work-*`) included.
fn cache_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("cache/tasks"))
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|n| n != ".lock");
    names.sort();
    names
}

#[test]
fn datasets_are_listed_from_a_registry_file_and_local_tasks_found_beside_it() {
    let dir = temp_dir("datasets-list");
    let (registry, _) = registry(dir.path());
    let out =
        terminus(dir.path(), &["datasets", "list", "--registry-path"], None).arg(&registry).output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("NAME    VERSION  TASKS  DESCRIPTION\n"), "{stdout}");
    assert!(stdout.contains("hello   1.0          1  Hello from git."), "{stdout}");
    assert!(stdout.contains("3 datasets, 3 tasks in "), "{stdout}");
    let url = format!("file://{}", registry.display());
    let by_url = terminus(dir.path(), &["datasets", "list", "--registry-url", &url], None).output_bounded().unwrap();
    assert_eq!(String::from_utf8_lossy(&by_url.stdout), stdout, "a file:// URL is the same file");
    // No registry flag, or Harbor's default registry URL, asks the Harbor hub; here it is a
    // loopback port nothing listens on, so the answer does not depend on this machine's network.
    let hub_api = "http://127.0.0.1:9";
    for args in [
        &["datasets", "list"][..],
        &[
            "datasets",
            "list",
            "--registry-url",
            "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json",
        ],
    ] {
        let out = terminus(dir.path(), args, None).env("HARBOR_SUPABASE_URL", hub_api).output_bounded().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let said = text(&out);
        assert!(said.contains("Harbor hub") && said.contains(hub_api), "{said}");
        assert!(said.contains("cannot be reached") && said.contains("--registry-path"), "{said}");
    }
    let out =
        terminus(dir.path(), &["datasets", "list", "--registry-path", "nowhere.json"], None).output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("nowhere.json"), "{}", text(&out));
    // A local task of a registry is where the registry file says, beside it.
    let out = terminus(dir.path(), &["datasets", "fetch", "hello@0.1", "--registry-path"], None)
        .arg(&registry)
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let local = dir.path().join("local/hello-world");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("hello-world\t{}\n", local.display()));
}

/// A fetch killed during its checkout leaves no cache entry; the next one removes its leftovers
/// and fetches; a third finds the task in the cache and runs no git.
#[tokio::test(flavor = "multi_thread")]
async fn a_fetch_killed_midway_is_redone_and_a_fetched_task_is_not_fetched_again() {
    let dir = temp_dir("datasets-fetch");
    let (registry, commit) = registry(dir.path());
    git_wrapper(dir.path());
    let registry = registry.display().to_string();
    let fetch_args = ["datasets", "fetch", "hello@1.0", "--registry-path", registry.as_str()];
    let stall = dir.path().join("stalled.pid");
    kill_when_stalled(terminus(dir.path(), &fetch_args, Some(&stall)), &stall).await;
    let left = cache_entries(dir.path());
    assert!(left.iter().all(|n| n.starts_with(".work-")) && !left.is_empty(), "only a checkout is left: {left:?}");

    let out = terminus(dir.path(), &fetch_args, None).output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (name, path) = stdout.trim().split_once('\t').unwrap();
    assert_eq!(name, "hello-world");
    let entries = cache_entries(dir.path());
    assert_eq!(entries.len(), 1, "the entry alone, the leftovers gone: {entries:?}");
    assert!(Path::new(path).join("task.toml").is_file() && path.contains(&entries[0]), "{path}");
    let log = std::fs::read_to_string(dir.path().join("git.log")).unwrap();
    assert!(log.lines().any(|l| l.contains(&format!("checkout --quiet --detach {commit}"))), "{log}");

    std::fs::remove_file(dir.path().join("git.log")).unwrap();
    let out = terminus(dir.path(), &fetch_args, None).output_bounded().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), stdout, "the same task, where it was");
    assert!(text(&out).contains("0 fetched, 1 already in the cache"), "{}", text(&out));
    assert!(!dir.path().join("git.log").exists(), "a cached task runs no git");
}

#[test]
fn datasets_that_cannot_be_had_exit_2_naming_what_is_wrong() {
    let dir = temp_dir("datasets-errors");
    let (registry, _) = registry(dir.path());
    let registry = registry.display().to_string();
    let run = |args: &[&str]| {
        let out = terminus(dir.path(), &[&["run", "-a", "oracle", "--registry-path", &registry], args].concat(), None)
            .output_bounded()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        text(&out)
    };
    let seen = run(&["-d", "hello@2.0"]);
    assert!(seen.contains("datasets[0].version") && seen.contains("its versions: 1.0, 0.1"), "{seen}");
    let seen = run(&["-d", "helo"]);
    assert!(seen.contains("datasets[0].name") && seen.contains("it lists: broken, hello"), "{seen}");
    let seen = run(&["-d", "broken@1.0"]);
    assert!(seen.contains("has no commit 0123456789abcdef0123456789abcdef01234567"), "{seen}");
    std::fs::rename(dir.path().join("bare.git"), dir.path().join("moved.git")).unwrap();
    let seen = run(&["-d", "hello@1.0"]);
    assert!(seen.contains("cannot be reached") && seen.contains("bare.git"), "{seen}");
    let out = terminus(
        dir.path(),
        &["run", "-a", "oracle", "-d", "hello", "--registry-url", "ftp://example.com/r.json"],
        None,
    )
    .output_bounded()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("`ftp://example.com/r.json` is not a registry address"), "{}", text(&out));
}

/// `terminus run -d hello@1.0 --registry-path …` with the oracle: the task comes from git, the
/// trial scores 1, and its records name the dataset, its version, the repository and the commit.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_dataset_runs_from_its_git_commit() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("datasets-run");
    let (registry, commit) = registry(dir.path());
    let jobs = dir.path().join("jobs");
    let mut command = terminus(dir.path(), &["run", "-q", "-a", "oracle", "-d", "hello@1.0", "--registry-path"], None);
    command.arg(&registry).arg("--jobs-dir").arg(&jobs).args(["--job-name", "registry"]);
    let out = tokio::task::spawn_blocking(move || command.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let trials = trial_dirs(&jobs.join("registry"));
    assert_eq!(trials.len(), 1);
    let result = read_json(&trials[0].join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    let task = &read_json(&trials[0].join("config.json"))["task"];
    let url = format!("file://{}", dir.path().join("bare.git").display());
    assert_eq!(task["path"], "tasks/hello-world", "{task}");
    assert_eq!(task["git_url"], url.as_str(), "{task}");
    assert_eq!(task["git_commit_id"], commit.as_str(), "{task}");
    assert_eq!((task["source"].as_str(), task["dataset_version"].as_str()), (Some("hello"), Some("1.0")), "{task}");
    assert_eq!(result["task_id"]["git_commit_id"], commit.as_str(), "{result}");
    assert_eq!(result["source"], "hello");
    // Resumed, the finished trial is recognised by its repository, commit and path, and kept.
    let mut command = terminus(dir.path(), &["resume", "-q"], None);
    command.arg(jobs.join("registry"));
    let out = tokio::task::spawn_blocking(move || command.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(trial_dirs(&jobs.join("registry")), trials, "the same trial");
    assert_eq!(read_json(&trials[0].join("result.json"))["id"], result["id"], "not run again");
    // The oracle check of the same dataset, by name: its one task's solution scores 1.
    let mut command = terminus(dir.path(), &["tasks", "check", "--oracle", "-d", "hello@1.0", "--registry-path"], None);
    command.arg(&registry).arg("-o").arg(&jobs);
    let out = tokio::task::spawn_blocking(move || command.output_bounded().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stdout.contains("ok      hello-world") && stdout.contains("1 of 1 tasks' solutions score 1"), "{stdout}");
}

/// `run -d` of a dataset in two repositories, killed while it fetches the second: the next run
/// fetches only that one (the first is in the cache) and runs both tasks; a run after it runs no
/// git at all.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_run_killed_in_its_fetch_fetches_the_rest_and_then_nothing() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("datasets-resume");
    let (registry, commits) = pair_registry(dir.path());
    git_wrapper(dir.path());
    let jobs = dir.path().join("jobs");
    let run = |name: &str, stall: Option<&Path>| {
        let mut command =
            terminus(dir.path(), &["run", "-q", "-a", "oracle", "-d", "pair@1.0", "--registry-path"], stall);
        command.arg(&registry).arg("--jobs-dir").arg(&jobs).args(["--job-name", name]).env("GIT_STALL_AFTER", "1");
        command
    };
    let stall = dir.path().join("stalled.pid");
    kill_when_stalled(run("killed", Some(&stall)), &stall).await;
    let left = cache_entries(dir.path());
    let placed: Vec<&String> = left.iter().filter(|n| !n.starts_with(".work-")).collect();
    assert_eq!(placed.len(), 1, "the first task is in the cache, the second's checkout left: {left:?}");
    assert_eq!(left.len(), 2, "{left:?}");

    std::fs::remove_file(dir.path().join("git.log")).unwrap();
    let mut command = run("pair", None);
    let out = tokio::task::spawn_blocking(move || command.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let log = std::fs::read_to_string(dir.path().join("git.log")).unwrap();
    let checkouts: Vec<&str> = log.lines().filter(|l| l.contains("--detach")).collect();
    assert_eq!(checkouts.len(), 1, "only the missing task is fetched: {log}");
    assert!(checkouts[0].contains(&commits[1]), "the second repository's commit: {log}");
    assert_eq!(cache_entries(dir.path()).len(), 2, "both tasks placed, the leftover gone");
    let rewarded = |job: &str| {
        let trials = trial_dirs(&jobs.join(job));
        assert_eq!(trials.len(), 2, "{job}: one trial per task");
        trials
            .iter()
            .filter(|t| read_json(&t.join("result.json"))["verifier_result"]["rewards"]["reward"] == 1.0)
            .count()
    };
    assert_eq!(rewarded("pair"), 2);

    std::fs::remove_file(dir.path().join("git.log")).unwrap();
    let mut command = run("again", None);
    let out = tokio::task::spawn_blocking(move || command.output_bounded().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!dir.path().join("git.log").exists(), "a run of cached tasks runs no git");
    assert_eq!(rewarded("again"), 2);
}
