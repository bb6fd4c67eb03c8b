//! The job's unit tests: loading, layering, overrides, validation messages, limits.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::load::{restore_secrets, unresolved_secret};
use super::*;
use crate::error::ConfigError;
use crate::policy::MetricKind;
use crate::task::Task;
use crate::terminus::Terminus2Options;
use crate::trial::ResolvedTrial;
use terminus_core::error::TrialErrorKind;

fn example_tasks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks")
}

fn load(yaml: &str) -> Result<JobSpec, ConfigError> {
    JobSpec::from_yaml(Path::new("job.yaml"), yaml, &Overrides::default())
}

#[test]
fn reads_a_harbor_job_with_the_legacy_orchestrator_block() {
    let yaml = format!(
        "jobs_dir: /tmp/jobs\nn_attempts: 2\norchestrator:\n  type: local\n  n_concurrent_trials: 3\nenvironment:\n  force_build: true\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: http://127.0.0.1:9/v1\n      max_turns: 7\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert_eq!(spec.n_concurrent_trials, 3);
    assert_eq!(spec.n_attempts, 2);
    assert!(spec.force_build);
    assert!(spec.tasks.len() >= 5);
    assert_eq!(spec.plan().len(), 2 * spec.tasks.len());
    let AgentKind::Terminus2(opts) = &spec.agents[0].kind else { panic!("not terminus") };
    assert_eq!(opts.max_turns, 7);
    assert_eq!(opts.api_base.as_deref(), Some("http://127.0.0.1:9/v1"));
    // Sorted task order.
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[test]
fn wrong_type_names_the_key() {
    let err = load("n_concurrent_trials: lots\n").unwrap_err().to_string();
    assert!(err.contains("n_concurrent_trials"), "{err}");
    let err = load("agents:\n  - name: terminus-2\n    model_name: m\n    kwargs:\n      max_turns: many\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("agents[0].kwargs.max_turns"), "{err}");
    let err = load("agents:\n  - name: terminus-2\n").unwrap_err().to_string();
    assert!(err.contains("agents[0].model_name"), "{err}");
    let err = load("agents:\n  - name: claude-code\n").unwrap_err().to_string();
    assert!(err.contains("agents[0].name"), "{err}");
    let err = load("environment:\n  delete: maybe\n").unwrap_err().to_string();
    assert!(err.contains("environment.delete"), "{err}");
}

#[test]
fn a_missing_prompt_template_names_the_kwarg_and_the_file() {
    let yaml =
        "agents:\n  - name: terminus-2\n    model_name: m\n    kwargs:\n      prompt_template: /nonexistent/t.txt\n";
    let err = load(yaml).unwrap_err();
    assert!(matches!(err, ConfigError::PromptTemplate { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("agents[0].kwargs.prompt_template") && text.contains("/nonexistent/t.txt"), "{text}");
}

#[test]
fn bad_values_name_the_key() {
    let tasks = example_tasks();
    let err =
        load(&format!("n_concurrent_trials: 0\ndatasets:\n  - path: {}\n", tasks.display())).unwrap_err().to_string();
    assert!(err.contains("n_concurrent_trials") && err.contains("at least 1"), "{err}");
    let err = load("datasets:\n  - path: /nonexistent/dir\n").unwrap_err().to_string();
    assert!(err.contains("datasets[0].path"), "{err}");
    let err = load("tasks: []\n").unwrap_err().to_string();
    assert!(err.contains("no task"), "{err}");
    for name in [".", "..", "a/b", "a\\b", ""] {
        let yaml = format!("job_name: {name:?}\nagents:\n  - name: nop\ndatasets:\n  - path: {}\n", tasks.display());
        assert!(load(&yaml).unwrap_err().to_string().contains("job_name"), "{name:?} is refused");
    }
}

#[test]
fn yaml_syntax_errors_name_the_file() {
    let err = load("agents: [\n").unwrap_err().to_string();
    assert!(err.contains("job.yaml") && err.contains("YAML"), "{err}");
}

#[test]
fn unknown_keys_become_warnings_with_their_path() {
    let yaml =
        format!("colour: blue\nenvironment:\n  flavour: x\ndatasets:\n  - path: {}\n", example_tasks().display());
    let spec = load(&yaml).unwrap();
    assert!(spec.warnings.iter().any(|w| w.starts_with("colour")), "{:?}", spec.warnings);
    assert!(spec.warnings.iter().any(|w| w.starts_with("environment.flavour")), "{:?}", spec.warnings);
}

#[test]
fn task_filters_and_caps_apply() {
    let yaml = format!("datasets:\n  - path: {}\n    task_names: [\"h*\"]\n", example_tasks().display());
    let spec = load(&yaml).unwrap();
    assert!(spec.tasks.iter().all(|t| t.name.starts_with('h')));
    let yaml = format!("datasets:\n  - path: {}\n    n_tasks: 2\n", example_tasks().display());
    assert_eq!(load(&yaml).unwrap().tasks.len(), 2);
    let yaml = format!("datasets:\n  - path: {}\n    task_names: [\"zzz*\"]\n", example_tasks().display());
    assert!(load(&yaml).unwrap_err().to_string().contains("datasets[0].task_names"));
}

/// Agent kwargs keep the file's order in config.json, run after run (the `config` crate's
/// maps keep insertion order with its `preserve_order` feature).
#[test]
fn kwargs_keep_the_files_order() {
    let keys = ["zeta", "temperature", "model_info", "alpha", "max_turns", "mid"];
    let mut yaml = format!(
        "datasets:\n  - path: {}\nagents:\n  - name: terminus-2\n    model_name: oracle\n    kwargs:\n",
        example_tasks().display()
    );
    for key in keys {
        let value = if key == "model_info" {
            "\n        max_output_tokens: 1\n        max_input_tokens: 2".to_string()
        } else {
            " 1".to_string()
        };
        yaml.push_str(&format!("      {key}:{value}\n"));
    }
    let spec = load(&yaml).unwrap();
    let kwargs = spec.raw["agents"][0]["kwargs"].as_object().unwrap();
    assert_eq!(kwargs.keys().map(String::as_str).collect::<Vec<_>>(), keys);
    let inner: Vec<&String> = kwargs["model_info"].as_object().unwrap().keys().collect();
    assert_eq!(inner, ["max_output_tokens", "max_input_tokens"]);
}

#[test]
fn defaults_layer_under_the_file_and_environment_over_it() {
    let yaml = format!("retry:\n  max_retries: 2\ndatasets:\n  - path: {}\n", example_tasks().display());
    let spec = load(&yaml).unwrap();
    assert_eq!(spec.retry.max_retries, 2);
    assert_eq!(spec.retry.exclude_exceptions.len(), 10, "the default exclusions stay");
    assert_eq!(spec.supervision.max_restarts, 1);
    assert_eq!(spec.metrics, vec![MetricKind::Mean]);
    assert_eq!(spec.raw["environment"]["delete"], true, "config.json records the defaults");
    assert_eq!(spec.raw["metrics"], serde_json::json!([]), "a list, as Harbor's JobConfig requires");
    assert_eq!(spec.raw["artifacts"], serde_json::json!([]));
    assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
    let legacy = format!(
        "orchestrator:\n  n_concurrent_trials: 2\n  retry:\n    max_retries: 4\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&legacy).unwrap();
    assert_eq!((spec.n_concurrent_trials, spec.retry.max_retries), (2, 4));
    let err = load("retry:\n  max_retries: -1\n").unwrap_err().to_string();
    assert!(err.contains("retry.max_retries"), "{err}");
    let err = load("metrics:\n  - type: median\n").unwrap_err().to_string();
    assert!(err.contains("metrics[0].type"), "{err}");
}

#[test]
fn the_watchdog_budget_sums_every_phase_with_slack() {
    let tasks = example_tasks();
    let yaml = format!(
        "supervision:\n  watchdog_margin_sec: 20\nagents:\n  - name: nop\n    override_timeout_sec: 100\n    override_setup_timeout_sec: 30\n  - name: nop\n    max_timeout_sec: 1\nverifier:\n  override_timeout_sec: 50\nenvironment_build_timeout_multiplier: 0.1\ntasks:\n  - path: {}\n",
        tasks.join("hello-world").display()
    );
    let spec = load(&yaml).unwrap();
    let task = Task::load(&tasks.join("hello-world")).unwrap();
    let build = task.config.environment.build_timeout_sec * 0.1;
    let phases = build + 30.0 + 100.0 + 50.0;
    let budget = ResolvedTrial::new(&spec, 0, task.clone()).limits.watchdog.unwrap().as_secs_f64();
    assert!((budget - (phases * 1.1 + 20.0)).abs() < 1e-6, "{budget} vs {phases}");
    // hello-world's own agent limit capped at 1 s, and the default set-up limit.
    let capped = ResolvedTrial::new(&spec, 1, task).limits.watchdog.unwrap().as_secs_f64();
    assert!((capped - ((build + 360.0 + 1.0 + 50.0) * 1.1 + 20.0)).abs() < 1e-6, "{capped}");
    let err = load("supervision:\n  watchdog_margin_sec: 0\n").unwrap_err().to_string();
    assert!(err.contains("supervision.watchdog_margin_sec"), "{err}");
}

#[test]
fn the_llm_block_applies_with_agent_overrides() {
    let yaml = format!(
        "n_concurrent_trials: 8\nllm:\n  max_attempts: 7\n  requests_per_minute: 100\nagents:\n  - name: terminus-2\n    model_name: openai/x\n  - name: terminus-2\n    model_name: openai/y\n    llm:\n      max_attempts: 2\n      max_concurrent_requests: 3\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert_eq!(spec.agents[0].llm.retry.max_attempts, 7);
    assert_eq!(spec.agents[0].llm.limits.max_concurrent, 8, "defaults to the trial concurrency");
    assert_eq!(spec.agents[0].llm.limits.requests_per_minute, Some(100));
    assert_eq!(spec.agents[1].llm.retry.max_attempts, 2);
    assert_eq!(spec.agents[1].llm.limits.max_concurrent, 3);
    assert_eq!(spec.agents[1].llm.limits.requests_per_minute, Some(100), "inherited from the job");
    let err = load("llm:\n  max_attempts: 0\n").unwrap_err().to_string();
    assert!(err.contains("llm.max_attempts"), "{err}");
    let err = load("llm:\n  colour: red\n").unwrap_err().to_string();
    assert!(err.contains("llm") && err.contains("colour"), "{err}");
}

#[test]
fn a_stored_secret_comes_back_from_the_environment_or_the_resume_is_refused() {
    let mut stored = serde_json::json!({
        "environment": {"env": {"HF_TOKEN": "****", "PLAIN": "****", "API_KEY": "${MY_KEY}"}},
        "agents": [{"kwargs": {"api_key": "sk****ef"}}]
    });
    let env = |name: &str| match name {
        "HF_TOKEN" => Some("hf_real".to_string()),
        "MY_KEY" => Some("k".to_string()),
        "api_key" => Some("sk-real".to_string()),
        _ => None,
    };
    restore_secrets(&mut stored, "", &env).unwrap();
    assert_eq!(stored["environment"]["env"]["HF_TOKEN"], "hf_real");
    assert_eq!(stored["environment"]["env"]["PLAIN"], "****", "not a secret's key: as stored");
    assert_eq!(stored["environment"]["env"]["API_KEY"], "k");
    assert_eq!(stored["agents"][0]["kwargs"]["api_key"], "sk-real");
    let mut missing = serde_json::json!({"verifier": {"env": {"GH_TOKEN": "${GH_TOKEN}"}}});
    let err = restore_secrets(&mut missing, "", &|_| None).unwrap_err();
    assert_eq!(err, ("verifier.env.GH_TOKEN".to_string(), "GH_TOKEN".to_string()));
    assert!(unresolved_secret("GH_TOKEN").contains("`GH_TOKEN` is not set"));
}

#[test]
fn secrets_in_kwargs_are_redacted_in_the_dump() {
    let yaml = format!(
        "agents:\n  - name: terminus-2\n    model_name: openai/x\n    kwargs:\n      api_key: sk-secretsecretsecret\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert!(!spec.raw.to_string().contains("sk-secretsecretsecret"));
}

fn t2_opts(spec: &JobSpec, idx: usize) -> &Terminus2Options {
    let AgentKind::Terminus2(opts) = &spec.agents[idx].kind else { panic!("not terminus") };
    opts
}

#[test]
fn harbor_026_job_keys_are_acted_on() {
    let yaml = format!(
        "schema_version: 1\noverride_error_policy:\n  AgentTimeoutError:\n    should_retry: true\n    should_grade: false\n  RateLimitError:\n    should_retry: false\n    should_grade: true\nextra_instructions:\n  - Be brief.\nagents:\n  - name: terminus-2\n    model_name: hosted_vllm/claude-proxy\n    base_url: http://127.0.0.1:9/v1\n    model_api_key_name: LLM_PASS\n    model_api_format: anthropic_messages\n    env:\n      LLM_PASS: plain-value-of-the-key-1234\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert!(spec.warnings.is_empty(), "{:?}", spec.warnings);
    use TrialErrorKind as K;
    assert!(!spec.retry.exclude_exceptions.contains(&K::AgentTimeout), "should_retry: true un-excludes it");
    assert!(spec.retry.exclude_exceptions.contains(&K::RateLimit), "should_retry: false excludes it");
    assert!(!spec.error_policy.still_graded(K::AgentTimeout), "should_grade: false");
    assert!(spec.error_policy.still_graded(K::RateLimit), "should_grade: true");
    assert!(!spec.error_policy.still_graded(K::Runtime), "the default for the rest");
    assert_eq!(spec.instruction("Do it."), "Do it.\n\nBe brief.");
    let opts = t2_opts(&spec, 0);
    assert_eq!(opts.api_base.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert_eq!(opts.api_key_env.as_deref(), Some("LLM_PASS"));
    assert_eq!(opts.api_format, Some(crate::ModelApiFormat::AnthropicMessages));
    // config.json records them (the variable's name kept, its value in env masked).
    assert_eq!(spec.raw["schema_version"], 1);
    assert_eq!(spec.raw["agents"][0]["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(spec.raw["agents"][0]["model_api_key_name"], "LLM_PASS");
    assert_eq!(spec.raw["override_error_policy"]["RateLimitError"]["should_grade"], true);
    assert!(!spec.raw.to_string().contains("plain-value-of-the-key-1234"), "{}", spec.raw);
    // Absent, they are written as Harbor's defaults (its JobConfig refuses nulls).
    let plain = load(&format!("datasets:\n  - path: {}\n", example_tasks().display())).unwrap();
    assert_eq!(plain.raw["override_error_policy"], serde_json::json!({}));
    assert_eq!(plain.raw["extra_instructions"], serde_json::json!([]));
    assert_eq!(plain.raw["extra_instruction_paths"], serde_json::json!([]));
    assert_eq!(plain.instruction("Do it."), "Do it.");
}

#[test]
fn harbor_026_values_terminus_cannot_honour_name_their_key() {
    let tasks = example_tasks();
    let with = |extra: &str| format!("{extra}datasets:\n  - path: {}\n", tasks.display());
    let agent = |keys: &str| with(&format!("agents:\n  - name: terminus-2\n    model_name: openai/x\n{keys}"));
    for (yaml, key) in [
        (with("schema_version: 2\n"), "schema_version"),
        (agent("    model_api_format: openai_responses\n"), "agents[0].model_api_format"),
        (agent("    model_api_format: carrier_pigeon\n"), "agents[0].model_api_format"),
        (agent("    model_api_key_name: not a name\n"), "agents[0].model_api_key_name"),
        (agent("    base_url: http://a/v1\n    kwargs:\n      api_base: http://b/v1\n"), "agents[0].base_url"),
        (agent("    load_trajectory: /t.json\n"), "agents[0].load_trajectory"),
        (with("install_only: true\n"), "install_only"),
        (with("source_jobs:\n  - {action: regrade, type: local, path: /j}\n"), "source_jobs"),
        (with("environment:\n  mounts:\n    - {type: bind, source: /a, target: /b}\n"), "environment.mounts"),
        (with("environment:\n  import_path: my:Env\n"), "environment.import_path"),
        (with("verifier:\n  import_path: my:Verifier\n"), "verifier.import_path"),
        (with("override_error_policy:\n  AgentTimeoutError:\n    retry: true\n"), "override_error_policy"),
        (with("extra_instruction_paths:\n  - /nonexistent/extra.md\n"), "extra_instruction_paths[0]"),
    ] {
        let err = load(&yaml).unwrap_err().to_string();
        assert!(err.contains(&format!("key `{key}")), "{key}: {err}");
    }
    let err = load(&with("tasks:\n  - path: /x\n    git_url: https://g\n")).unwrap_err().to_string();
    assert!(err.contains("key `tasks[0].git_commit_id`") && err.contains("pinned"), "{err}");
    let err = load("datasets:\n  - name: hello\n").unwrap_err().to_string();
    // No registry named: the Harbor hub, which this crate alone (no resolver installed) cannot ask.
    assert!(err.contains("key `datasets[0].name`") && err.contains("Harbor hub"), "{err}");
}

#[test]
fn harbor_026_keys_without_effect_are_warned_about_by_name() {
    let yaml = format!(
        "skip_credential_checks: true\noverride_error_policy:\n  NoSuchError:\n    should_retry: true\n  CancelledError:\n    should_retry: true\n  AgentTimeoutError:\n    has_valid_reward: false\nenvironment:\n  stream: true\n  cpu_enforcement_policy: limit\nverifier:\n  include_logs: [\"*.txt\"]\nagents:\n  - name: terminus-2\n    model_name: openai/x\n    n_concurrent: 2\n    mcp_servers:\n      - {{name: m, transport: stdio, command: x}}\n  - name: oracle\n    base_url: http://x/v1\ndatasets:\n  - path: {}\n    version: \"2.0\"\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert!(spec.skip_credential_checks);
    for key in [
        "override_error_policy.NoSuchError:",
        "override_error_policy.CancelledError.should_retry:",
        "environment.stream:",
        "environment.cpu_enforcement_policy:",
        "verifier.include_logs:",
        "agents[0].n_concurrent:",
        "agents[1].base_url:",
        "datasets[0].version:",
    ] {
        assert!(spec.warnings.iter().any(|w| w.starts_with(key)), "{key} in {:#?}", spec.warnings);
    }
    assert_eq!(spec.warnings.len(), 8, "{:#?}", spec.warnings);
    assert_eq!(spec.agents[0].mcp_servers[0].command.as_deref(), Some("x"), "agent-level MCP servers are read");
    assert!(spec.warnings.iter().all(|w| !w.contains("unknown key")), "{:#?}", spec.warnings);
    // Acted on in Harbor 0.26's score: the entry reaches every trial's config, unknown names too.
    let timeout = &spec.error_policy.overrides["AgentTimeoutError"];
    assert_eq!(timeout.has_valid_reward, Some(false));
    assert!(spec.error_policy.overrides.contains_key("NoSuchError"));
}

#[test]
fn explicit_retry_exclusions_win_over_override_error_policy() {
    let yaml = format!(
        "retry:\n  exclude_exceptions: [RuntimeError]\noverride_error_policy:\n  AgentTimeoutError:\n    should_retry: false\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    // Harbor's RuntimeError is what its tmux session and Docker environment raise too.
    use TrialErrorKind as K;
    let expected = vec![K::TmuxSession, K::Runtime, K::EnvironmentBuild, K::EnvironmentStart, K::AgentEndedEnvironment];
    assert_eq!(load(&yaml).unwrap().retry.exclude_exceptions, expected);
}

#[test]
fn extra_instruction_files_come_before_the_inline_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("extra.md");
    std::fs::write(&file, "From the file.").unwrap();
    let yaml = format!(
        "extra_instruction_paths: [{}]\nextra_instructions: [Inline.]\ndatasets:\n  - path: {}\n",
        file.display(),
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert_eq!(spec.instruction("Task."), "Task.\n\nFrom the file.\n\nInline.");
}

/// Harbor 0.26's own `config.json` (the fixture tests/helpers/harbor_job_fixture.py wrote with
/// Harbor's models: every key present, at its default) reads as a job file: no key is
/// unknown, none at its default draws a warning; only the exception names Harbor's default
/// retry exclusions hold that terminus never records are pointed out.
#[test]
fn a_harbor_026_config_json_reads_with_every_key_known() {
    let text = include_str!("../../../../tests/fixtures/harbor-0.26-job/harbor-written/config.json");
    let mut config: Value = serde_json::from_str(text).unwrap();
    config["datasets"][0]["path"] = Value::String(example_tasks().display().to_string());
    // The second agent is a custom class (import_path), which terminus refuses by name.
    let err = load(&config.to_string()).unwrap_err().to_string();
    assert!(err.contains("agents[1].import_path"), "{err}");
    config["agents"].as_array_mut().unwrap().truncate(1);
    let spec = load(&config.to_string()).unwrap();
    let others: Vec<&String> = spec.warnings.iter().filter(|w| !w.starts_with("retry.exclude_exceptions[")).collect();
    assert!(others.is_empty(), "{others:#?}");
    assert_eq!(spec.n_concurrent_trials, 2);
    assert_eq!(t2_opts(&spec, 0).max_turns, 50);
}

#[test]
fn a_misspelt_key_is_refused_with_the_key_meant_and_a_stray_one_is_warned_about() {
    let err = load("n_concurent_trials: 3\n").unwrap_err().to_string();
    assert!(err.contains("n_concurent_trials") && err.contains("did you mean `n_concurrent_trials`?"), "{err}");
    let spec = load(&format!("my_notes: keep\ndatasets:\n  - path: {}\n", example_tasks().display())).unwrap();
    assert!(spec.warnings.iter().any(|w| w == "my_notes: unknown key, ignored"), "{:?}", spec.warnings);
}

/// A registry naming two example tasks (copies beside it, by relative paths) and one task in a
/// git repository.
fn registry_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fn copy(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let example = |name: &str| {
        copy(&example_tasks().join(name), &dir.path().join("tasks").join(name));
        format!("tasks/{name}")
    };
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let registry = serde_json::json!([
        {"name": "hello", "version": "1.0", "description": "d", "tasks": [
            {"name": "hello-world", "path": example("hello-world")},
            {"name": "sort-numbers", "path": example("sort-numbers")},
            {"name": "far", "git_url": "file:///nowhere.git", "git_commit_id": commit, "path": "tasks/far-task"},
        ]},
        {"name": "hello", "version": "0.9", "description": "d", "tasks": []},
    ]);
    std::fs::write(dir.path().join("registry.json"), registry.to_string()).unwrap();
    dir
}

#[test]
fn registry_datasets_are_filtered_like_directories_and_recorded_with_their_registry() {
    let dir = registry_dir();
    let yaml = |extra: &str| {
        format!(
            "datasets:\n  - name: hello\n    registry_path: {}\n{extra}",
            dir.path().join("registry.json").display()
        )
    };
    let spec = load(&yaml("")).unwrap();
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["hello-world", "sort-numbers", "far-task"], "the best version, in the registry's order");
    assert!(spec.tasks.iter().all(|t| t.source.as_deref() == Some("hello")));
    assert!(spec.tasks.iter().all(|t| t.dataset_version.as_deref() == Some("1.0")));
    let far = &spec.tasks[2];
    assert!(far.git.is_some() && far.path.ends_with("far-task"), "{far:?}");
    let spec = load(&yaml("    task_names: [\"*-*\"]\n    exclude_task_names: [\"far*\"]\n    n_tasks: 1\n")).unwrap();
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["hello-world"]);
    let err = load(&yaml("    task_names: [\"zzz\"]\n")).unwrap_err().to_string();
    assert!(err.contains("datasets[0].task_names") && err.contains("of the 3 available"), "{err}");
    let err = load(&yaml("    version: \"2.0\"\n")).unwrap_err().to_string();
    assert!(err.contains("key `datasets[0].version`") && err.contains("its versions: 1.0, 0.9"), "{err}");
    let err = load(&format!("datasets:\n  - name: helo\n    registry_path: {}\n", dir.path().display()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("key `datasets[0].name`") && err.contains("it lists: hello"), "{err}");
    let nested = format!("datasets:\n  - name: hello\n    registry: {{name: local, path: {}}}\n", dir.path().display());
    assert_eq!(load(&nested).unwrap().tasks.len(), 3, "Harbor's nested form");
    let err = load("datasets:\n  - name: hello\n    registry_path: /nonexistent/registry.json\n").unwrap_err();
    assert!(err.to_string().contains("/nonexistent/registry.json"), "{err}");
    let err = load("datasets:\n  - name: hello\n    registry_url: https://example.com/r.json\n").unwrap_err();
    assert!(err.to_string().contains("key `datasets[0].registry_url`"), "{err}");
}

/// Without `job_name`, a job is named after the time in UTC (Harbor uses the local time).
#[test]
fn the_default_job_name_is_the_time_in_utc() {
    let stamp = || terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S").to_string();
    let before = stamp();
    let spec = load(&format!("datasets:\n  - path: {}\n", example_tasks().display())).unwrap();
    let after = stamp();
    assert!(before <= spec.job_name && spec.job_name <= after, "{} is not between {before} and {after}", spec.job_name);
}

/// `-m` without `-a` sets the model of every agent of the job file.
#[test]
fn a_model_flag_without_an_agent_flag_sets_every_agents_model() {
    let overrides = Overrides { models: vec!["openai/other".into()], ..Overrides::default() };
    let yaml = format!(
        "agents:\n  - name: terminus-2\n    model_name: openai/x\n  - name: terminus-2\n    model_name: openai/y\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = JobSpec::from_yaml(Path::new("job.yaml"), &yaml, &overrides).unwrap();
    let models: Vec<Option<&str>> = spec.agents.iter().map(|a| a.model_name.as_deref()).collect();
    assert_eq!(models, [Some("openai/other"), Some("openai/other")]);
}

#[test]
fn datasets_given_by_flags_replace_the_files_and_take_the_registry_flags() {
    let dir = registry_dir();
    let overrides = Overrides {
        datasets: vec!["hello@1.0".into()],
        registry_path: Some(dir.path().to_path_buf()),
        include_tasks: vec!["hello-*".into()],
        ..Overrides::default()
    };
    let file = format!("datasets:\n  - path: {}\n", example_tasks().display());
    let spec = JobSpec::from_yaml(Path::new("job.yaml"), &file, &overrides).unwrap();
    let names: Vec<&str> = spec.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["hello-world"]);
    let recorded = &spec.raw["datasets"][0];
    assert_eq!(recorded["name"], "hello");
    assert_eq!(recorded["version"], "1.0");
    assert!(recorded["registry_path"].as_str().is_some_and(|p| p.starts_with('/')), "{recorded}");
    assert!(recorded.get("registry_url").is_none(), "unset keys are left out: {recorded}");
    // The record loads again as the same job (a resume).
    let again = JobSpec::from_yaml(Path::new("config.json"), &spec.raw.to_string(), &Overrides::default()).unwrap();
    assert_eq!(again.tasks, spec.tasks);
}

#[test]
fn tasks_in_git_repositories_are_read_from_the_cache_and_recorded_relative() {
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let yaml = format!("tasks:\n  - path: tasks/./hello\n    git_url: file:///r.git\n    git_commit_id: {commit}\n");
    let spec = load(&yaml).unwrap();
    let task = &spec.tasks[0];
    assert_eq!(task.name, "hello");
    assert_eq!(spec.raw["tasks"][0]["path"], "tasks/./hello", "a path in the repository stays relative");
    let record = task.record();
    assert_eq!((record.path.as_str(), record.git_commit_id.as_deref()), ("tasks/hello", Some(commit)));
    let err = load("tasks:\n  - path: t\n    git_commit_id: abc\n").unwrap_err().to_string();
    assert!(err.contains("tasks[0].git_commit_id") && err.contains("needs git_url"), "{err}");
}

#[test]
fn the_oracle_preflight_runs_every_task_once_with_the_oracle_beside_the_job() {
    let yaml = format!(
        "jobs_dir: /tmp/jobs\njob_name: j\nn_attempts: 3\nn_concurrent_trials: 5\npreflight: strict\nbudget:\n  max_cost_usd: 2\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n  - name: nop\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    assert_eq!(spec.preflight, PreflightMode::Strict);
    assert_eq!(spec.raw["preflight"], "strict", "recorded as given");
    let oracle = spec.oracle_preflight();
    assert_eq!(oracle.job_dir(), PathBuf::from("/tmp/jobs/j__oracle-preflight"));
    assert_eq!((oracle.n_attempts, oracle.n_concurrent_trials), (1, 5));
    assert_eq!(oracle.agents.len(), 1);
    assert_eq!(oracle.agents[0].kind, AgentKind::Oracle);
    assert_eq!(oracle.preflight, PreflightMode::None);
    assert!(!oracle.budget.is_set());
    assert_eq!(oracle.plan().len(), spec.tasks.len());
    assert_eq!(oracle.raw["agents"], serde_json::json!([{"name": "oracle"}]));
    assert!(oracle.raw.get("preflight").is_none());

    let names = spec.task_names();
    let mut left = spec.clone();
    left.leave_out([names[0].as_str()]);
    assert_eq!(left.task_names(), names[1..]);
    assert_eq!(left.plan().len(), 3 * 2 * (names.len() - 1));
}

#[test]
fn preflight_takes_only_its_three_values() {
    let job = |extra: &str| {
        format!("{extra}agents:\n  - name: nop\ntasks:\n  - path: {}\n", example_tasks().join("hello-world").display())
    };
    assert_eq!(load(&job("")).unwrap().preflight, PreflightMode::None);
    let err = load(&job("preflight: always\n")).unwrap_err().to_string();
    assert!(err.contains("preflight") && err.contains("none, oracle, strict"), "{err}");
}

#[test]
fn auto_or_adaptive_admission_is_a_bound_recorded_as_a_number() {
    let tasks = example_tasks();
    let with = |head: &str| load(&format!("{head}datasets:\n  - path: {}\n", tasks.display()));
    let auto = with("n_concurrent_trials: auto\n").unwrap();
    assert_eq!((auto.admission, auto.n_concurrent_trials), (AdmissionMode::Adaptive, AUTO_CONCURRENCY));
    // config.json keeps a number where Harbor reads one, and says adaptive beside it.
    assert_eq!(auto.raw["n_concurrent_trials"], AUTO_CONCURRENCY as u64);
    assert_eq!(auto.raw["admission"], "adaptive");
    let bounded = with("n_concurrent_trials: 50\nadmission: adaptive\n").unwrap();
    assert_eq!((bounded.admission, bounded.n_concurrent_trials), (AdmissionMode::Adaptive, 50));
    assert!(!auto.warnings.iter().any(|w| w.contains("swarm")), "{:?}", auto.warnings);
    let on_swarm = with(
        "n_concurrent_trials: auto\nenvironment:\n  type: swarm\n  swarm:\n    manager: unix:///var/run/docker.sock\n    insecure_nodes: true\n",
    )
    .unwrap();
    assert!(
        on_swarm.warnings.iter().any(|w| w.starts_with("admission: adaptive on a swarm")),
        "the nodes' load is not measured: {:?}",
        on_swarm.warnings
    );
    let fixed = with("orchestrator:\n  n_concurrent_trials: 6\n").unwrap();
    assert_eq!((fixed.admission, fixed.n_concurrent_trials), (AdmissionMode::Fixed, 6));
    assert!(fixed.raw.get("admission").is_none_or(|v| v.is_null()), "fixed is not recorded");
    let err = with("admission: sometimes\n").unwrap_err().to_string();
    assert!(err.contains("admission") && err.contains("`fixed` or `adaptive`"), "{err}");
    let err = with("n_concurrent_trials: lots\n").unwrap_err().to_string();
    assert!(err.contains("n_concurrent_trials") && err.contains("a number or `auto`"), "{err}");
}

#[test]
fn score_convention_takes_only_harbors_two_and_reaches_each_trials_config() {
    let job = |extra: &str| {
        format!("{extra}agents:\n  - name: nop\ntasks:\n  - path: {}\n", example_tasks().join("hello-world").display())
    };
    let plain = load(&job("")).unwrap();
    assert_eq!(plain.score_convention, ScoreConvention::Harbor025);
    assert!(plain.raw.get("score_convention").is_none(), "recorded only when given");
    let new = load(&job("score_convention: harbor-0.26\n")).unwrap();
    assert_eq!(new.score_convention, ScoreConvention::Harbor026);
    assert_eq!(new.raw["score_convention"], "harbor-0.26");
    let err = load(&job("score_convention: harbor-0.27\n")).unwrap_err().to_string();
    assert!(err.contains("key `score_convention`") && err.contains("`harbor-0.25` or `harbor-0.26`"), "{err}");
    let overridden = load(&job("override_error_policy:\n  AgentTimeoutError:\n    has_valid_reward: false\n")).unwrap();
    let plan = crate::plan::JobPlan::new(overridden);
    let basis = plan.basis("id", &plan.trials[0], "hello-world__x", String::new());
    assert_eq!(basis.config.override_error_policy["AgentTimeoutError"].has_valid_reward, Some(false));
}

/// Agent-level MCP servers join the task's by name, the agent's winning in place, as Harbor's
/// trial merges them.
#[test]
fn agent_mcp_servers_merge_with_the_tasks_by_name() {
    let yaml = format!(
        "agents:\n  - name: terminus-2\n    model_name: openai/x\n    mcp_servers:\n      - {{name: b, transport: stdio, command: agents-b}}\n      - {{name: c, transport: sse, url: http://c}}\ndatasets:\n  - path: {}\n",
        example_tasks().display()
    );
    let spec = load(&yaml).unwrap();
    let server = |name: &str, command: &str| crate::task::McpServer {
        name: name.into(),
        transport: "stdio".into(),
        url: None,
        command: Some(command.into()),
        args: Vec::new(),
        headers: Default::default(),
    };
    let task = [server("a", "tasks-a"), server("b", "tasks-b")];
    let merged: Vec<(&str, Option<&str>)> =
        spec.agents[0].merged_mcp_servers(&task).into_iter().map(|s| (s.name.as_str(), s.command.as_deref())).collect();
    assert_eq!(merged, [("a", Some("tasks-a")), ("b", Some("agents-b")), ("c", None)]);
    assert!(!spec.warnings.iter().any(|w| w.contains("mcp_servers")), "{:#?}", spec.warnings);
}

/// `resume_trajectory: true` is refused when a task of the job has steps (Terminus 2 cannot
/// resume), naming the key and the task; with single-step tasks it is only a warning.
#[test]
fn resume_trajectory_is_refused_with_a_multi_step_task() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("two-steps");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::write(task.join("task.toml"), "version = \"1.0\"\n[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n")
        .unwrap();
    for step in ["one", "two"] {
        std::fs::create_dir_all(task.join("steps").join(step).join("tests")).unwrap();
        std::fs::write(task.join("steps").join(step).join("instruction.md"), "do it\n").unwrap();
        std::fs::write(task.join("steps").join(step).join("tests/test.sh"), "#!/bin/bash\n").unwrap();
    }
    let agents = "agents:\n  - name: terminus-2\n    model_name: openai/x\n    resume_trajectory: true\n";
    let error = load(&format!("{agents}tasks:\n  - path: {}\n", task.display())).unwrap_err().to_string();
    assert!(error.contains("agents[0].resume_trajectory") && error.contains("two-steps"), "{error}");
    let single = load(&format!("{agents}datasets:\n  - path: {}\n", example_tasks().display())).unwrap();
    assert!(single.warnings.iter().any(|w| w.starts_with("agents[0].resume_trajectory:")), "{:#?}", single.warnings);
}
