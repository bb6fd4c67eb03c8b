//! The subcommands' own logic, without Docker: agent kwargs, flags turned into overrides, the
//! same-job check, compose files and tasks checked as a trial reads them, a job directory's
//! summary, and every refusal that comes before anything runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{Value, json};

use super::*;
use crate::args::{Cli, Command};
use terminus_core::layout::TrialDir;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example_task(name: &str) -> PathBuf {
    root().join("examples/tasks").join(name)
}

/// A job directory Harbor wrote: 8 trials, 7 of them with a result.
fn harbor_job() -> PathBuf {
    root().join("tests/fixtures/harbor-0.26-job/harbor-written")
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn run_args(argv: &[&str]) -> RunArgs {
    match Cli::try_parse_from([&["terminus", "run"], argv].concat()).unwrap().command {
        Command::Run(args) => *args,
        other => panic!("not run: {other:?}"),
    }
}

fn resume_args(job_dir: &Path) -> ResumeArgs {
    let argv = ["terminus", "resume", job_dir.to_str().unwrap()];
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Resume(args) => args,
        other => panic!("not resume: {other:?}"),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

// --- --ak ---

#[test]
fn agent_kwargs_are_read_as_json_when_they_parse() {
    let parsed = parse_kwargs(&strings(&[
        "max_turns=7",
        "temperature=0.5",
        "enabled=true",
        "stop=[\"a\",\"b\"]",
        "extra={\"k\":1}",
        "limit=null",
    ]))
    .unwrap();
    assert_eq!(
        parsed,
        [
            ("max_turns".to_string(), json!(7)),
            ("temperature".to_string(), json!(0.5)),
            ("enabled".to_string(), json!(true)),
            ("stop".to_string(), json!(["a", "b"])),
            ("extra".to_string(), json!({"k": 1})),
            ("limit".to_string(), Value::Null),
        ]
    );
}

#[test]
fn agent_kwargs_that_are_not_json_stay_strings() {
    let parsed = parse_kwargs(&strings(&["model=openai/gpt-4o", "empty=", "flags=--x=1", "quoted=\"7\""])).unwrap();
    assert_eq!(
        parsed,
        [
            ("model".to_string(), json!("openai/gpt-4o")),
            ("empty".to_string(), json!("")),
            // Split at the first `=`: the value keeps its own.
            ("flags".to_string(), json!("--x=1")),
            // A JSON string is a string, not the number in it.
            ("quoted".to_string(), json!("7")),
        ]
    );
}

#[test]
fn an_agent_kwarg_key_is_trimmed() {
    assert_eq!(parse_kwargs(&strings(&[" max_turns =3"])).unwrap(), [("max_turns".to_string(), json!(3))]);
}

#[test]
fn an_agent_kwarg_without_an_equals_sign_is_refused_naming_it() {
    let err = parse_kwargs(&strings(&["max_turns=3", "verbose"])).unwrap_err();
    assert_eq!(err, "--ak \"verbose\": expected KEY=VALUE");
    assert!(parse_kwargs(&[]).unwrap().is_empty());
}

// --- flags to overrides ---

#[test]
fn job_flags_become_the_overrides_of_the_same_names() {
    let args = run_args(&[
        "-p",
        "tasks",
        "-t",
        "a*",
        "-x",
        "b*",
        "-a",
        "terminus-2",
        "-m",
        "m1",
        "-m",
        "m2",
        "--ak",
        "max_turns=4",
        "--job-name",
        "j",
        "-o",
        "out",
        "-n",
        "6",
        "-k",
        "2",
        "--max-cost-usd",
        "1.5",
        "--max-tokens",
        "500",
    ]);
    let overrides = args.job.overrides().unwrap();
    assert_eq!(overrides.paths, [PathBuf::from("tasks")]);
    assert_eq!((overrides.include_tasks, overrides.exclude_tasks), (strings(&["a*"]), strings(&["b*"])));
    assert_eq!(overrides.agent.as_deref(), Some("terminus-2"));
    assert_eq!(overrides.models, ["m1", "m2"]);
    assert_eq!(overrides.agent_kwargs, [("max_turns".to_string(), json!(4))]);
    assert_eq!((overrides.job_name.as_deref(), overrides.jobs_dir), (Some("j"), Some(PathBuf::from("out"))));
    assert_eq!((overrides.n_concurrent_trials, overrides.n_attempts), (Some(6), Some(2)));
    assert_eq!((overrides.budget_cost_usd, overrides.budget_tokens), (Some(1.5), Some(500)));
}

#[test]
fn switches_override_only_when_given() {
    let unset = run_args(&["-p", "tasks"]).job.overrides().unwrap();
    assert_eq!((unset.quiet, unset.force_build), (None, None));
    let set = run_args(&["-p", "tasks", "-q", "--force-build"]).job.overrides().unwrap();
    assert_eq!((set.quiet, set.force_build), (Some(true), Some(true)));
}

#[test]
fn job_flags_with_a_malformed_agent_kwarg_make_no_overrides() {
    let err = run_args(&["-p", "tasks", "--ak", "oops"]).job.overrides().unwrap_err();
    assert!(err.contains("\"oops\""), "{err}");
}

// --- the same job ---

/// A job of the hello-world task by the oracle, placed at `jobs_dir/j`.
fn oracle_job(jobs_dir: &Path) -> JobSpec {
    let overrides = Overrides {
        paths: vec![example_task("hello-world")],
        agent: Some("oracle".into()),
        jobs_dir: Some(jobs_dir.to_path_buf()),
        job_name: Some("j".into()),
        ..Overrides::default()
    };
    JobSpec::from_flags(&overrides).unwrap()
}

fn store_config(job_dir: &Path, config: &Value) {
    std::fs::create_dir_all(job_dir).unwrap();
    std::fs::write(JobDir::new(job_dir).config_json(), config.to_string()).unwrap();
}

#[test]
fn a_job_directory_holding_the_same_configuration_is_the_same_job() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = oracle_job(tmp.path());
    let job_dir = spec.job_dir();
    store_config(&job_dir, &spec.raw);
    assert_eq!(check_same_job(&job_dir, &spec), Ok(()));
    // How the job runs is not what it computes.
    let mut faster = spec.raw.clone();
    faster["n_concurrent_trials"] = json!(64);
    store_config(&job_dir, &faster);
    assert_eq!(check_same_job(&job_dir, &spec), Ok(()));
}

#[test]
fn a_job_directory_holding_another_configuration_is_refused_naming_each_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = oracle_job(tmp.path());
    let job_dir = spec.job_dir();
    let mut stored = spec.raw.clone();
    stored["n_attempts"] = json!(5);
    store_config(&job_dir, &stored);
    let err = check_same_job(&job_dir, &spec).unwrap_err();
    assert!(err.contains(&job_dir.display().to_string()), "{err}");
    assert!(err.contains("choose another job_name"), "{err}");
    assert!(err.contains(&format!("n_attempts: 5 -> {}", spec.raw["n_attempts"])), "{err}");
}

#[test]
fn a_job_directory_without_a_readable_configuration_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = oracle_job(tmp.path());
    let job_dir = spec.job_dir();
    let config = JobDir::new(&job_dir).config_json();
    let err = check_same_job(&job_dir, &spec).unwrap_err();
    assert_eq!(err, format!("`{}` is unreadable", config.display()));
    std::fs::create_dir_all(&job_dir).unwrap();
    std::fs::write(&config, "{ not json").unwrap();
    assert_eq!(check_same_job(&job_dir, &spec).unwrap_err(), format!("`{}` is unreadable", config.display()));
}

// --- compose files and tasks, as a trial reads them ---

fn environment(docker_image: Option<&str>) -> terminus_config::task::EnvironmentSection {
    terminus_config::task::EnvironmentSection { docker_image: docker_image.map(str::to_string), ..Default::default() }
}

fn with_compose(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(terminus_config::compose::FILE_NAME), text).unwrap();
    dir
}

#[test]
fn an_environment_without_a_compose_file_reads_fine() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_compose(dir.path(), &BTreeMap::new(), &environment(None)), Ok(()));
}

#[test]
fn a_compose_file_outside_the_subset_is_refused_naming_the_key() {
    let dir = with_compose("services:\n  db:\n    image: x\n    privileged: true\n");
    let err = read_compose(dir.path(), &BTreeMap::new(), &environment(None)).unwrap_err();
    assert!(err.contains("services.db.privileged"), "{err}");
}

#[test]
fn the_main_image_of_a_compose_file_is_the_tasks_prebuilt_one_or_a_stand_in() {
    let dir = with_compose("services:\n  main:\n    image: ubuntu:24.04\n");
    assert_eq!(read_compose(dir.path(), &BTreeMap::new(), &environment(Some("ubuntu:24.04"))), Ok(()));
    let err = read_compose(dir.path(), &BTreeMap::new(), &environment(None)).unwrap_err();
    assert!(err.contains("services.main.image"), "{err}");
    let dir = with_compose("services:\n  main:\n    image: ${MAIN_IMAGE_NAME}\n");
    assert_eq!(read_compose(dir.path(), &BTreeMap::new(), &environment(None)), Ok(()));
}

#[tokio::test]
async fn a_complete_task_checks_without_an_engine_and_is_named() {
    let note = check_task(&example_task("hello-world"), None).await.unwrap();
    assert_eq!(note, "(hello-world)");
}

#[tokio::test]
async fn a_task_without_its_tests_is_invalid_naming_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("hello-world");
    copy_dir(&example_task("hello-world"), &task);
    std::fs::remove_file(task.join("tests/test.sh")).unwrap();
    let err = check_task(&task, None).await.unwrap_err();
    assert!(err.starts_with("missing ") && err.contains("tests/test.sh"), "{err}");
}

#[tokio::test]
async fn a_task_without_a_solution_is_valid_but_says_the_oracle_cannot_run_it() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("hello-world");
    copy_dir(&example_task("hello-world"), &task);
    std::fs::remove_file(task.join("solution/solve.sh")).unwrap();
    let note = check_task(&task, None).await.unwrap();
    assert!(note.starts_with("(hello-world)") && note.contains("no solution/solve.sh"), "{note}");
}

#[tokio::test]
async fn tasks_check_without_build_needs_no_engine() {
    let args = check_args(example_task("hello-world"));
    assert_eq!(tasks_check(args).await, exit::OK);
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("broken");
    copy_dir(&example_task("hello-world"), &task);
    std::fs::write(task.join("task.toml"), "[environment]\ncpus = \"many\"\n").unwrap();
    assert_eq!(tasks_check(check_args(tmp.path().into())).await, exit::INVALID);
}

#[tokio::test]
async fn tasks_check_of_a_directory_without_tasks_is_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(tasks_check(check_args(tmp.path().into())).await, exit::INVALID);
}

// --- jobs summarize ---

#[test]
fn a_job_summary_counts_the_trials_from_their_files() {
    let summary = job_summary(&harbor_job()).unwrap();
    assert_eq!(summary.job_dir, harbor_job().display().to_string());
    assert_eq!(summary.n_total, 8);
    // One trial has no result.json: it has not finished.
    assert_eq!(summary.n_pending, 1);
    assert_eq!(summary.n_finished + summary.n_errored + summary.n_cancelled, 7);
    assert_eq!(summary.n_cancelled, 1);
    assert_eq!(summary.task_rewards.keys().collect::<Vec<_>>(), ["harbor/fix-bug", "hello-world"]);
}

#[test]
fn a_trial_result_that_does_not_parse_is_skipped_and_counted_as_not_run() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&harbor_job(), tmp.path());
    let trial = TrialDir::new(tmp.path().join("hello-world__h000001"));
    std::fs::write(trial.result_json(), "{ truncated").unwrap();
    let summary = job_summary(tmp.path()).unwrap();
    assert_eq!(summary.n_pending, 2);
    assert_eq!(summary.n_finished + summary.n_errored + summary.n_cancelled, 6);
}

#[test]
fn a_directory_without_a_job_result_has_no_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let err = job_summary(tmp.path()).unwrap_err();
    let path = JobDir::new(tmp.path()).result_json();
    assert!(err.starts_with(&format!("`{}` is not a readable job result: ", path.display())), "{err}");
    assert_eq!(summarize(SummarizeArgs { job_dir: tmp.path().into() }), exit::INVALID);
    std::fs::write(&path, "[]").unwrap();
    assert!(job_summary(tmp.path()).is_err());
}

// --- refusals before anything runs ---

#[tokio::test]
async fn run_needs_a_job_file_or_a_task_directory() {
    assert_eq!(run(run_args(&[])).await, exit::INVALID);
    assert_eq!(run(run_args(&["-a", "oracle"])).await, exit::INVALID);
}

#[tokio::test]
async fn run_refuses_a_malformed_agent_kwarg_a_missing_job_file_and_a_missing_task() {
    assert_eq!(run(run_args(&["-p", "tasks", "--ak", "oops"])).await, exit::INVALID);
    assert_eq!(run(run_args(&["-c", "/nonexistent/job.yaml"])).await, exit::INVALID);
    assert_eq!(run(run_args(&["-p", "/nonexistent/tasks"])).await, exit::INVALID);
}

#[tokio::test]
async fn run_refuses_to_continue_a_job_directory_of_another_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = oracle_job(tmp.path());
    let mut stored = spec.raw.clone();
    stored["n_attempts"] = json!(9);
    store_config(&spec.job_dir(), &stored);
    let task = example_task("hello-world");
    let jobs_dir = tmp.path().to_str().unwrap();
    let args = run_args(&["-p", task.to_str().unwrap(), "-a", "oracle", "-o", jobs_dir, "--job-name", "j"]);
    assert_eq!(run(args).await, exit::INVALID);
}

#[tokio::test]
async fn resume_needs_a_job_directory_with_a_readable_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(resume(resume_args(tmp.path())).await, exit::INVALID);
    store_config(tmp.path(), &json!("not a job"));
    assert_eq!(resume(resume_args(tmp.path())).await, exit::INVALID);
}

#[tokio::test]
async fn trial_start_refuses_a_malformed_agent_kwarg_and_a_directory_that_is_no_task() {
    let tmp = tempfile::tempdir().unwrap();
    let args = |path: PathBuf, agent_kwargs: Vec<String>| TrialStartArgs {
        path,
        trials_dir: tmp.path().join("trials"),
        agent: "oracle".into(),
        model: None,
        agent_kwargs,
    };
    assert_eq!(trial_start(args(example_task("hello-world"), strings(&["oops"]))).await, exit::INVALID);
    assert_eq!(trial_start(args(tmp.path().into(), Vec::new())).await, exit::INVALID);
    assert!(!tmp.path().join("trials").exists(), "nothing was written");
}

#[tokio::test]
async fn view_of_a_path_that_is_not_a_directory_is_invalid() {
    let args = |jobs_dir: PathBuf| ViewArgs {
        jobs_dir,
        listen: crate::args::ListenFlags { port: 0, host: std::net::Ipv4Addr::LOCALHOST.into() },
        server: None,
    };
    assert_eq!(view(args("/nonexistent/jobs".into())).await, exit::INVALID);
    assert_eq!(view(args(example_task("hello-world").join("task.toml"))).await, exit::INVALID);
}

#[test]
fn import_harbor_with_an_interpreter_that_does_not_exist_is_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let args = ImportHarborArgs { python: "/nonexistent/python3".into(), out: tmp.path().join("texts") };
    assert_eq!(import_harbor(args), exit::INVALID);
    assert!(!tmp.path().join("texts").exists());
}

// --- gc ---

#[test]
fn a_pid_is_a_live_orchestrator_only_when_it_runs_terminus() {
    // This test binary is `terminus-<hash>`.
    assert!(orchestrator_alive(std::process::id()));
    assert!(!orchestrator_alive(u32::MAX), "no such process");
}

/// `tasks check PATH`, without building or running anything.
fn check_args(path: PathBuf) -> TaskCheckArgs {
    TaskCheckArgs {
        paths: vec![path],
        build: false,
        oracle: false,
        dataset: None,
        registry: Default::default(),
        n_concurrent: 4,
        jobs_dir: "jobs".into(),
    }
}
