//! The registry's unit tests: locations, parsing, picking a dataset and version, its tasks.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks").join(name)
}

/// A registry file in a fresh directory, with a local task `local/hello-world` beside it.
fn registry(datasets: serde_json::Value) -> (tempfile::TempDir, RegistryLocation) {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("local/hello-world");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    for file in ["task.toml", "instruction.md", "environment/Dockerfile"] {
        std::fs::copy(example("hello-world").join(file), task.join(file)).unwrap();
    }
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::copy(example("hello-world").join("tests/test.sh"), task.join("tests/test.sh")).unwrap();
    std::fs::write(dir.path().join("registry.json"), datasets.to_string()).unwrap();
    let location = RegistryLocation::from_keys(None, Some(dir.path())).unwrap();
    (dir, location)
}

fn dataset(name: &str, version: &str, tasks: serde_json::Value) -> serde_json::Value {
    json!({"name": name, "version": version, "description": format!("{name} {version}"), "tasks": tasks})
}

#[test]
fn locations_are_picked_as_harbors_client_factory_picks_them() {
    let (dir, by_dir) = registry(json!([]));
    assert_eq!(by_dir.path(), Some(dir.path().join("registry.json").as_path()), "a directory means its registry.json");
    let file_url = format!("file://{}", dir.path().join("registry.json").display());
    assert_eq!(RegistryLocation::from_keys(Some(&file_url), None).unwrap(), by_dir);
    // Harbor's default registry URL, and no registry at all, mean the hub's read API.
    for hub in [RegistryLocation::from_keys(Some(HARBOR_HUB_URL), None), RegistryLocation::from_keys(None, None)] {
        let RegistryLocation::Hub(api) = hub.unwrap() else { panic!("not the hub") };
        assert!(api.url.starts_with("https://") || std::env::var(remote::HUB_URL_ENV).is_ok(), "{api:?}");
        assert!(!format!("{api:?}").contains(&api.key), "the key stays out of debug output");
    }
    let url = "https://example.com/registry.json";
    assert_eq!(RegistryLocation::from_keys(Some(url), None).unwrap(), RegistryLocation::Json(url.into()));
    let bad = RegistryLocation::from_keys(Some("ftp://example.com/r.json"), None).unwrap_err();
    assert!(matches!(&bad, RegistryError::BadUrl { url } if url == "ftp://example.com/r.json"), "{bad}");
    assert!(matches!(RegistryLocation::from_keys(Some(&file_url), Some(dir.path())), Err(RegistryError::BothGiven)));
    // A network registry with no resolver installed is named, not asked.
    let err = resolve(&RegistryLocation::Json(url.into()), "hello", None).unwrap_err();
    assert!(matches!(&err, RegistryError::NoResolver { registry } if registry == url), "{err}");
}

#[test]
fn unreadable_and_malformed_registries_name_the_file() {
    let missing = RegistryLocation::from_keys(None, Some(Path::new("/nonexistent/registry.json"))).unwrap();
    let err = Registry::read(&missing).unwrap_err();
    assert!(matches!(err, RegistryError::Unreadable { .. }));
    assert!(err.to_string().contains("/nonexistent/registry.json"), "{err}");
    let (_dir, location) =
        registry(json!([{"name": "a", "version": "1", "description": "", "tasks": [{"name": "t"}]}]));
    let err = Registry::read(&location).unwrap_err();
    let RegistryError::Malformed { message, .. } = &err else { panic!("{err:?}") };
    assert!(message.contains("[0].tasks[0]") && message.contains("path"), "{message}");
}

#[test]
fn datasets_are_found_by_name_and_version_or_the_best_version() {
    let (_dir, location) = registry(json!([
        dataset("hello", "1.0", json!([])),
        dataset("hello", "1.10", json!([])),
        dataset("hello", "1.9", json!([])),
        dataset("other", "head", json!([])),
        dataset("other", "3.0", json!([])),
    ]));
    let registry = Registry::read(&location).unwrap();
    assert_eq!(registry.dataset("hello", Some("1.9")).unwrap().version, "1.9");
    assert_eq!(registry.dataset("hello", None).unwrap().version, "1.10");
    assert_eq!(registry.dataset("other", None).unwrap().version, "head");
    let err = registry.dataset("helo", None).unwrap_err();
    let RegistryError::UnknownDataset { known, .. } = &err else { panic!("{err:?}") };
    assert_eq!(known, &["hello", "other"]);
    assert!(err.to_string().contains("it lists: hello, other"), "{err}");
    let err = registry.dataset("hello", Some("2.0")).unwrap_err();
    let RegistryError::UnknownVersion { versions, .. } = &err else { panic!("{err:?}") };
    assert_eq!(versions, &["1.0", "1.10", "1.9"]);
    assert!(err.to_string().contains("its versions: 1.0, 1.10, 1.9"), "{err}");
    assert!(matches!(registry.dataset("org/hello", None), Err(RegistryError::Package { .. })));
}

#[test]
fn tasks_are_git_entries_in_the_cache_or_directories_beside_the_registry() {
    let (dir, location) = registry(json!([dataset(
        "hello",
        "1.0",
        json!([
            {"name": "remote", "git_url": "file:///r.git", "git_commit_id": COMMIT, "path": "tasks/hello-world"},
            {"name": "here", "path": "local/hello-world"},
        ])
    )]));
    let registry = Registry::read(&location).unwrap();
    let spec = registry.dataset("hello", Some("1.0")).unwrap();
    let cache = TaskCache::at(Path::new("/cache"));
    let tasks = spec.task_refs(&location, Some(&cache)).unwrap();
    let (name, remote) = &tasks[0];
    assert_eq!(name, "hello-world", "filtered by the directory's name, as Harbor does");
    let git = remote.git.clone().unwrap();
    assert_eq!(remote.path, cache.entry(&git));
    assert_eq!((remote.source.as_deref(), remote.dataset_version.as_deref()), (Some("hello"), Some("1.0")));
    let record = remote.record();
    assert_eq!(
        (record.path.as_str(), record.git_url.as_deref(), record.git_commit_id.as_deref()),
        ("tasks/hello-world", Some("file:///r.git"), Some(COMMIT))
    );
    let (_, local) = &tasks[1];
    assert_eq!(local.path, std::path::absolute(dir.path().join("local/hello-world")).unwrap());
    assert!(local.git.is_none() && local.record().git_url.is_none());
    spec.check_local(&location, local).unwrap();
    assert!(matches!(spec.task_refs(&location, None), Err(RegistryError::NoCache)));
}

#[test]
fn unpinned_and_missing_tasks_are_named() {
    let (_dir, location) = registry(json!([
        dataset("loose", "1", json!([{"name": "t", "git_url": "file:///r.git", "path": "t"}])),
        dataset("gone", "1", json!([{"name": "nothing", "path": "local/nothing"}])),
    ]));
    let registry = Registry::read(&location).unwrap();
    let cache = TaskCache::at(Path::new("/cache"));
    let err = registry.dataset("loose", None).unwrap().task_refs(&location, Some(&cache)).unwrap_err();
    assert!(
        matches!(&err, RegistryError::Task { task, problem: TaskProblem::Git(GitSourceError::Unpinned), .. } if task == "t")
    );
    assert!(err.to_string().contains("dataset `loose@1`"), "{err}");
    let gone = registry.dataset("gone", None).unwrap();
    let tasks = gone.task_refs(&location, Some(&cache)).unwrap();
    let err = gone.check_local(&location, &tasks[0].1).unwrap_err();
    assert!(matches!(&err, RegistryError::Task { problem: TaskProblem::NotATask { .. }, .. }), "{err:?}");
}

#[test]
fn a_registry_must_be_a_regular_file_of_bounded_size() {
    let dir = tempfile::tempdir().unwrap();
    let read = |path: &Path| Registry::read(&RegistryLocation::from_keys(None, Some(path)).unwrap());
    let zero = dir.path().join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    assert!(matches!(read(&zero), Err(RegistryError::NotAFile { .. })), "a link to a device");
    let big = dir.path().join("big.json");
    std::fs::File::create(&big).unwrap().set_len(MAX_REGISTRY_BYTES + 1).unwrap();
    let err = read(&big).unwrap_err();
    assert!(matches!(err, RegistryError::TooLarge { .. }) && err.to_string().contains("big.json"), "{err}");
    let fifo = dir.path().join("fifo.json");
    #[expect(clippy::disallowed_methods, reason = "the test makes a named pipe with mkfifo(1)")]
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Refused before it is opened: reading a fifo nobody writes would block here.
    assert!(matches!(read(&fifo), Err(RegistryError::NotAFile { .. })));
}

#[test]
fn a_local_task_s_path_stays_in_the_registry_s_directory() {
    let outside = tempfile::tempdir().unwrap();
    for path in ["/srv/other-task", "../..", "local/../../x", "escape"] {
        let (dir, location) = registry(json!([dataset("d", "1", json!([{"name": "t", "path": path}]))]));
        std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
        let registry = Registry::read(&location).unwrap();
        let err = registry.dataset("d", None).unwrap().task_refs(&location, None).unwrap_err();
        assert!(
            matches!(&err, RegistryError::Task { problem: TaskProblem::OutsideRegistry { .. }, .. }),
            "{path}: {err}"
        );
    }
    let (_dir, location) =
        registry(json!([dataset("d", "1", json!([{"name": "t", "path": "local/./x/../hello-world"}]))]));
    let registry = Registry::read(&location).unwrap();
    assert!(registry.dataset("d", None).unwrap().task_refs(&location, None).is_ok(), "inside, however spelled");
}
