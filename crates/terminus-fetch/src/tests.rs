//! Fetching from local bare repositories (`file://`), made with the git command line: fetched
//! once, reused offline, leftovers of an interrupted fetch removed, each failure named.

use std::path::{Path, PathBuf};
use std::process::Command;

use terminus_config::registry::{GitSource, TaskCache};

use super::*;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks").join(name)
}

/// Runs `script` with `sh` in `dir`; its stdout.
fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").args(["-ec", script]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository holding `tasks/hello-world` and `tasks/sort-numbers` (and `linked`, a link
/// to `tasks`) at its first commit (returned), a second commit on top that removes them; and its
/// `file://` URL.
fn repository(root: &Path) -> (String, String) {
    let script = format!(
        "mkdir -p src/tasks && cp -r {hello} {sort} src/tasks/ && echo 'not a task' > src/README && ln -s tasks src/linked && cd src
         git init --quiet && git add . && git -c user.name=t -c user.email=t@t commit --quiet -m tasks
         git rm -r --quiet tasks && git -c user.name=t -c user.email=t@t commit --quiet -m gone
         git rev-parse HEAD~1 && cd .. && git clone --quiet --bare src bare.git",
        hello = example("hello-world").display(),
        sort = example("sort-numbers").display(),
    );
    let first = sh(root, &script);
    (format!("file://{}", root.join("bare.git").display()), first)
}

fn task(cache: &TaskCache, url: &str, commit: &str, path: &str) -> TaskRef {
    TaskRef::fetched(cache, GitSource::new(url, Some(commit), path).unwrap(), Some("d".into()))
}

fn fetch_all(tasks: &[TaskRef]) -> (Result<FetchReport, FetchError>, Vec<FetchEvent>) {
    let mut events = Vec::new();
    let result = fetch(tasks, &mut |e| events.push(e));
    (result, events)
}

fn leftovers(cache: &TaskCache) -> Vec<String> {
    std::fs::read_dir(cache.tasks_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-") || n.starts_with(".work-"))
        .collect()
}

#[test]
fn tasks_are_fetched_at_their_commit_once_and_then_used_offline() {
    let root = tempfile::tempdir().unwrap();
    let (url, first) = repository(root.path());
    let cache = TaskCache::at(&root.path().join("cache"));
    let tasks = [task(&cache, &url, &first, "tasks/hello-world"), task(&cache, &url, &first, "tasks/sort-numbers")];
    let (report, events) = fetch_all(&tasks);
    assert_eq!(report.unwrap(), FetchReport { fetched: 2, cached: 0 });
    let checkouts = events.iter().filter(|e| matches!(e, FetchEvent::Checkout { .. })).count();
    assert_eq!(checkouts, 1, "one checkout for both tasks of the commit: {events:?}");
    for task in &tasks {
        assert!(Task::is_task_dir(&task.path), "{}", task.path.display());
    }
    assert!(!tasks[0].path.parent().unwrap().join("sort-numbers").exists(), "one task per entry");
    assert!(leftovers(&cache).is_empty(), "{:?}", leftovers(&cache));

    // Without the repository: the cache is enough, and nothing runs git.
    std::fs::remove_dir_all(root.path().join("bare.git")).unwrap();
    let (report, events) = fetch_all(&tasks);
    assert_eq!(report.unwrap(), FetchReport { fetched: 0, cached: 2 });
    assert_eq!(events, [FetchEvent::Planned { tasks: 2, missing: 0 }]);
}

#[test]
fn what_an_interrupted_fetch_left_is_removed_and_the_fetch_done_again() {
    let root = tempfile::tempdir().unwrap();
    let (url, first) = repository(root.path());
    let cache = TaskCache::at(&root.path().join("cache"));
    let hello = task(&cache, &url, &first, "tasks/hello-world");
    let key = hello.git.as_ref().unwrap().key();
    // As a fetch killed between its checkout and its rename leaves them.
    let staged = cache.tasks_dir().join(format!(".tmp-{key}/hello-world"));
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::write(staged.join("task.toml"), "half").unwrap();
    std::fs::create_dir_all(cache.tasks_dir().join(".work-0123/.git")).unwrap();
    let (report, _) = fetch_all(std::slice::from_ref(&hello));
    assert_eq!(report.unwrap().fetched, 1);
    assert!(leftovers(&cache).is_empty(), "{:?}", leftovers(&cache));
    let toml = std::fs::read_to_string(hello.path.join("task.toml")).unwrap();
    assert_eq!(toml, std::fs::read_to_string(example("hello-world").join("task.toml")).unwrap());
}

#[test]
fn unreachable_repositories_missing_commits_and_paths_are_named() {
    let root = tempfile::tempdir().unwrap();
    let (url, first) = repository(root.path());
    let cache = TaskCache::at(&root.path().join("cache"));
    let gone_repo = format!("file://{}", root.path().join("nowhere.git").display());
    let (result, _) = fetch_all(&[task(&cache, &gone_repo, &first, "tasks/hello-world")]);
    let err = result.unwrap_err();
    assert!(matches!(&err, FetchError::Unreachable { url, .. } if *url == gone_repo), "{err:?}");
    assert!(err.to_string().contains("nowhere.git"), "{err}");

    let never = "0123456789abcdef0123456789abcdef01234567";
    let (result, _) = fetch_all(&[task(&cache, &url, never, "tasks/hello-world")]);
    let err = result.unwrap_err();
    assert!(matches!(&err, FetchError::CommitGone { commit, .. } if commit == never), "{err:?}");

    let (result, _) = fetch_all(&[task(&cache, &url, &first, "tasks/no-such-task")]);
    let err = result.unwrap_err();
    assert!(matches!(&err, FetchError::PathMissing { path, .. } if path == "tasks/no-such-task"), "{err:?}");
    assert!(err.to_string().contains(&first), "{err}");

    let (result, _) = fetch_all(&[task(&cache, &url, &first, "linked/hello-world")]);
    let err = result.unwrap_err();
    assert!(matches!(&err, FetchError::PathMissing { .. }), "a link in the path is not followed: {err:?}");

    let (result, _) = fetch_all(&[task(&cache, &url, &first, "tasks")]);
    let err = result.unwrap_err();
    assert!(matches!(&err, FetchError::NotATask { path, .. } if path == "tasks"), "{err:?}");
    assert!(leftovers(&cache).is_empty(), "a failed fetch leaves no checkout: {:?}", leftovers(&cache));
    assert_eq!(std::fs::read_dir(cache.tasks_dir()).unwrap().count(), 1, "only the lock file");
}
