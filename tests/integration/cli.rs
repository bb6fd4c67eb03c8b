//! The command line: invalid job files are refused with exit code 2 and a message naming the key,
//! before anything runs.

use crate::support::{BoundedCommand, run_terminus, temp_dir};

fn run_yaml(yaml: &str) -> (i32, String) {
    let dir = temp_dir("cli");
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = run_terminus(&path, &[]);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_wrong_type_exits_2_naming_the_key() {
    let (code, stderr) = run_yaml("n_concurrent_trials: lots\ndatasets:\n  - path: examples/tasks\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("n_concurrent_trials"), "{stderr}");
    assert!(stderr.contains("job.yaml"), "{stderr}");
}

#[test]
fn a_bad_agent_option_exits_2_naming_the_nested_key() {
    let (code, stderr) = run_yaml(
        "agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      tmux_pane_width: 0\ndatasets:\n  - path: examples/tasks\n",
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("agents[0].kwargs.tmux_pane_width"), "{stderr}");
}

#[test]
fn a_bad_prompt_template_exits_2_naming_the_kwarg_and_the_file() {
    let missing = "agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      prompt_template: /nonexistent/first.txt\ndatasets:\n  - path: examples/tasks\n";
    let (code, stderr) = run_yaml(missing);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("agents[0].kwargs.prompt_template") && stderr.contains("/nonexistent/first.txt"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("first.txt");
    std::fs::write(&template, "{instruction} {task}").unwrap();
    let (code, stderr) = run_yaml(&missing.replace("/nonexistent/first.txt", &template.display().to_string()));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("unknown placeholder `{task}`") && stderr.contains("first.txt"), "{stderr}");
}

#[test]
fn a_yaml_syntax_error_exits_2() {
    let (code, stderr) = run_yaml("agents: [\n  name: x\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("YAML"), "{stderr}");
}

#[test]
fn a_missing_file_exits_2() {
    let out = run_terminus(std::path::Path::new("/nonexistent/job.yaml"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/job.yaml"));
}

#[test]
fn every_file_in_configs_loads() {
    let configs = crate::support::repo_root().join("configs");
    let mut n = 0;
    for entry in std::fs::read_dir(&configs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            std::env::set_current_dir(crate::support::repo_root()).unwrap();
            let spec = terminus_config::JobSpec::load(&path, &Default::default());
            assert!(spec.is_ok(), "{}: {}", path.display(), spec.unwrap_err());
            n += 1;
        }
    }
    assert!(n >= 2, "configs/ should hold the quickstart and a provider example");
}

#[test]
fn environment_overrides_layer_over_the_file_and_name_the_key() {
    let dir = temp_dir("env");
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, "datasets:\n  - path: examples/tasks\n").unwrap();
    let out = run_terminus(&path, &[("TERMINUS__N_CONCURRENT_TRIALS", "0")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("n_concurrent_trials") && stderr.contains("at least 1"), "{stderr}");
}

#[test]
fn help_documents_the_exit_codes() {
    let out = std::process::Command::new(crate::support::terminus_bin()).arg("--help").output_bounded().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for code in ["0 ", "1 ", "2 ", "3 ", "4 ", "130"] {
        assert!(text.contains(&format!("\n  {code}")), "exit code {code} missing from --help:\n{text}");
    }
    for command in ["run", "resume", "trials", "tasks", "jobs", "gc"] {
        assert!(text.contains(command), "{command} missing from --help");
    }
}

/// A job whose model cannot be reached is refused before anything starts: a missing key, an
/// endpoint that does not answer. Each is named, with the key that skips the check.
#[test]
fn an_unset_key_or_an_unreachable_endpoint_exits_2_before_anything_starts() {
    let dir = temp_dir("preflight");
    let job = |model_lines: &str| {
        let path = dir.path().join("job.yaml");
        let yaml = format!(
            "jobs_dir: {}\njob_name: preflight\nagents:\n  - name: nop\n  - name: terminus-2\n{model_lines}tasks:\n  - path: examples/tasks/hello-world\n",
            dir.path().join("jobs").display()
        );
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let no_key = [("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", ""), ("OPENAI_API_BASE", "")];

    let out = run_terminus(&job("    model_name: openai/gpt-4o\n"), &no_key);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agents[1] (openai/gpt-4o): no API key: set OPENAI_API_KEY"), "{stderr}");
    assert!(stderr.contains("skip_credential_checks: true"), "{stderr}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = run_terminus(
        &job(&format!("    model_name: openai/m\n    kwargs:\n      api_base: http://{closed}/v1\n")),
        &no_key,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("agents[1] (openai/m): the endpoint http://{closed}/v1 does not answer")),
        "{stderr}"
    );

    // Nothing of the job was made: no directory, so no trial and no container.
    assert!(!dir.path().join("jobs/preflight").exists());
}

/// The dry run of docs/providers.md, as written: its build command makes every binary the
/// block names (cargo's own account of the workspace's default members, as running the build
/// inside the suite would rebuild the binaries the other tests are using), and its other
/// commands run verbatim: the scripted server starts and the job it configures scores every
/// trial.
#[tokio::test(flavor = "multi_thread")]
async fn the_documented_dry_run_runs_as_written() {
    let Some(_docker) = crate::support::docker().await else { return };
    let _guard = crate::support::heavy_lock().await;
    let root = crate::support::repo_root();
    let page = std::fs::read_to_string(root.join("docs/providers.md")).unwrap();
    let start = page.find("```sh\ncargo build --release\n").expect("the dry-run block");
    let block = &page[start + "```sh\n".len()..];
    let block = &block[..block.find("```").unwrap()];
    let (build, rest) = block.split_once('\n').unwrap();
    assert_eq!(build, "cargo build --release");
    let built = default_binaries(&root);
    for named in rest.split_whitespace().filter_map(|w| w.strip_prefix("./target/release/")) {
        assert!(built.iter().any(|b| b == named), "`{build}` does not build {named} (it builds {built:?})");
    }
    let jobs = root.join("jobs");
    let before: Vec<_> = std::fs::read_dir(&jobs).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    // The server the block starts in the background is stopped with the script.
    let script = format!("set -e\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n{rest}");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(crate::support::repo_root())
            .output_bounded()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: Vec<_> =
        std::fs::read_dir(&jobs).unwrap().flatten().map(|e| e.path()).filter(|p| !before.contains(p)).collect();
    let results: Vec<serde_json::Value> = made
        .iter()
        .filter_map(|dir| std::fs::read_to_string(dir.join("result.json")).ok())
        .map(|t| serde_json::from_str(&t).unwrap())
        .collect();
    for dir in &made {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert_eq!(results.len(), 1, "one job made: {made:?}");
    assert_eq!(results[0]["n_total_trials"], 3);
    assert_eq!(results[0]["stats"]["n_finished_trials"], 3, "{}", results[0]);
}

/// The binaries of the workspace's default members: what `cargo build` builds.
fn default_binaries(root: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let defaults = metadata["workspace_default_members"].as_array().unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| defaults.contains(&p["id"]))
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// No engine at the address the environment names: `run` and `gc` exit 3, saying how to get one.
#[test]
fn an_unreachable_engine_exits_3_saying_how_to_start_one() {
    let dir = temp_dir("cli-engine");
    let jobs = dir.path().join("jobs");
    let path = dir.path().join("job.yaml");
    let yaml = format!(
        "jobs_dir: {}\nagents:\n  - name: oracle\ndatasets:\n  - path: {}\n",
        jobs.display(),
        crate::support::example("hello-world").parent().unwrap().display()
    );
    std::fs::write(&path, yaml).unwrap();
    let socket = format!("unix://{}", dir.path().join("no-engine.sock").display());
    let out = run_terminus(&path, &[("DOCKER_HOST", &socket)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("scripts/setup.sh"), "{stderr}");
    let gc = std::process::Command::new(crate::support::terminus_bin())
        .arg("gc")
        .env("DOCKER_HOST", &socket)
        .output_bounded()
        .unwrap();
    assert_eq!(gc.status.code(), Some(3), "{}", String::from_utf8_lossy(&gc.stderr));
}
