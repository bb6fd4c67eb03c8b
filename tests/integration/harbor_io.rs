//! Harbor's tools read our jobs, and we read theirs: every file of a terminus job
//! validates with Harbor 0.25's and 0.26's own models, and `terminus jobs summarize` reads a job
//! directory as Harbor 0.26 writes it (tests/fixtures/harbor-0.26-job, made from Harbor's models
//! by tests/helpers/harbor_job_fixture.py).

use crate::support::BoundedCommand;
use crate::support::{
    HARBOR_VERSIONS, copy_task, docker, example, heavy_lock, read_json, repo_root, run_terminus, temp_dir,
    terminus_bin, trial_dirs, validate_job_with_harbor,
};

/// A job with what a job directory can hold — Terminus 2 trials with trajectories (the offline
/// `oracle` model), oracle-agent trials, a failing reward, a task whose image does not build and
/// one whose task.toml cannot be read (an error without a task checksum), both retried once
/// (archived attempts) — and Harbor 0.26's own job keys; then every file through both versions'
/// models and the viewer's loader.
#[tokio::test(flavor = "multi_thread")]
async fn every_file_of_a_job_validates_with_harbors_models() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("harbor-io");
    let tasks = dir.path().join("harbor-io-tasks");
    for name in ["hello-world", "sort-numbers"] {
        copy_task(&example(name), &tasks.join(name));
    }
    // Agent Skills in the image, in `skills_dir`: Terminus 2 lists them in its first prompt.
    let hello = tasks.join("hello-world");
    let toml = std::fs::read_to_string(hello.join("task.toml")).unwrap();
    std::fs::write(
        hello.join("task.toml"),
        toml.replace("[environment]\n", "[environment]\nskills_dir = \"/skills\"\n"),
    )
    .unwrap();
    std::fs::write(
        hello.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /skills/greet /skills/notes && \\\n\
         \x20   printf -- '---\\nname: greet\\ndescription: Say hello & mean it\\n---\\nUse echo.\\n' > /skills/greet/SKILL.md && \\\n\
         \x20   echo 'no front matter' > /skills/notes/SKILL.md\nWORKDIR /app\n",
    )
    .unwrap();
    // The job's own skills (agent-level), uploaded into each trial's skills directory: the
    // task's, else /runtime/skills.
    let agent_skills = dir.path().join("agent-skills");
    std::fs::create_dir_all(agent_skills.join("tidy")).unwrap();
    std::fs::write(agent_skills.join("tidy/SKILL.md"), "---\nname: tidy\ndescription: Leave no temp files\n---\n")
        .unwrap();
    copy_task(&example("hello-world"), &tasks.join("broken"));
    std::fs::write(tasks.join("broken/environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN exit 3\n").unwrap();
    copy_task(&example("hello-world"), &tasks.join("unreadable"));
    std::fs::write(tasks.join("unreadable/task.toml"), "this is not [toml\n").unwrap();
    let config = dir.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "schema_version: 1\njobs_dir: {}\njob_name: harbor-io\nn_concurrent_trials: 3\n\
             retry:\n  max_retries: 1\n  min_wait_sec: 0.1\n\
             override_error_policy:\n  AgentTimeoutError:\n    should_retry: false\n\
             extra_instructions:\n  - Work carefully.\n\
             metrics:\n  - type: mean\n\
             agents:\n  - name: terminus-2\n    model_name: oracle\n    skills: [{skills}]\n  - name: oracle\n\
             \x20 - name: terminus-2\n    model_name: oracle\n    skills: [{skills}]\n    kwargs:\n      trajectory_config:\n        schema_version: ATIF-v1.6\n\
             datasets:\n  - path: {}\n",
            dir.path().display(),
            tasks.display(),
            skills = agent_skills.display()
        ),
    )
    .unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the broken tasks err:\n{stderr}");
    let job_dir = dir.path().join("harbor-io");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 12, "3 agents × 4 tasks");
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        let (task, error) = (result["task_name"].as_str().unwrap(), &result["exception_info"]["exception_type"]);
        match task {
            "broken" => {
                assert_eq!(error, "RuntimeError", "{result}");
                assert_eq!(result["exception_info"]["kind"], "EnvironmentBuildError", "{result}");
            }
            "unreadable" => {
                assert_eq!(error, "TaskLoadError", "{result}");
                assert_eq!(result["task_checksum"], "", "never read: no checksum, still a string");
            }
            _ => assert!(error.is_null(), "{result}"),
        }
        if task == "broken" || task == "unreadable" {
            assert!(trial.join("attempts").is_dir(), "{task}: the failed attempt is archived");
        }
    }
    // The job's extra instruction reached the model, after the task's own.
    let hello = trials
        .iter()
        .find(|t| {
            let result = read_json(&t.join("result.json"));
            result["task_name"] == "hello-world" && result["agent_info"]["name"] == "terminus-2"
        })
        .unwrap();
    let first_prompt = std::fs::read_to_string(hello.join("agent/episode-0/prompt.txt")).unwrap();
    assert!(first_prompt.contains("Work carefully."), "{first_prompt}");
    let skills = "\n<available_skills>\n  <skill>\n    <name>greet</name>\n    <description>Say hello &amp; mean it</description>\n    <location>/skills/greet/SKILL.md</location>\n  </skill>\n  <skill>\n    <name>tidy</name>\n    <description>Leave no temp files</description>\n    <location>/skills/tidy/SKILL.md</location>\n  </skill>\n</available_skills>";
    assert!(first_prompt.contains(skills), "the image's and the job's skills: {first_prompt}");
    let sort = trials
        .iter()
        .find(|t| {
            let result = read_json(&t.join("result.json"));
            result["task_name"] == "sort-numbers" && result["agent_info"]["name"] == "terminus-2"
        })
        .unwrap();
    let sort_prompt = std::fs::read_to_string(sort.join("agent/episode-0/prompt.txt")).unwrap();
    assert!(
        sort_prompt.contains("<location>/runtime/skills/tidy/SKILL.md</location>"),
        "a task without skills_dir gets the job's in /runtime/skills: {sort_prompt}"
    );
    let job_id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    assert_eq!(crate::support::containers_of_job(&docker, &job_id).await, 0);

    // Terminus 2 writes ATIF v1.8 (as Harbor 0.26's does), or v1.6 when asked: two of each.
    let mut versions: Vec<String> = trials
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("agent/trajectory.json")).ok())
        .map(|text| serde_json::from_str::<serde_json::Value>(&text).unwrap()["schema_version"].to_string())
        .collect();
    versions.sort();
    assert_eq!(versions, ["\"ATIF-v1.6\"", "\"ATIF-v1.6\"", "\"ATIF-v1.8\"", "\"ATIF-v1.8\""]);
    for version in HARBOR_VERSIONS {
        let Some(listed) = validate_job_with_harbor(&job_dir, version) else { continue };
        // Both versions' models read v1.8 and v1.6 alike.
        assert_eq!(listed["trajectories"], 4, "Harbor {version}: {listed}");
        assert_eq!(listed["models"], serde_json::json!(["oracle"]), "Harbor {version}: {listed}");
        assert_eq!(listed["datasets"], serde_json::json!(["harbor-io-tasks"]), "Harbor {version}: {listed}");
    }
}

/// `terminus jobs summarize` on a Harbor-written job: every result is read (an agent without a
/// name, a package task without a path, null multipliers), the counts and groups are Harbor's.
#[test]
fn jobs_summarize_reads_a_harbor_written_job() {
    let job = repo_root().join("tests/fixtures/harbor-0.26-job/harbor-written");
    let out =
        std::process::Command::new(terminus_bin()).args(["jobs", "summarize"]).arg(&job).output_bounded().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stderr.contains("warning"), "every result parses: {stderr}");
    // 8 planned: 4 finished, 2 errored (one with a reward), 1 cancelled, 1 still running.
    assert!(stdout.contains("8 trials — 4 finished, 2 errored, 1 cancelled, 1 not run"), "{stdout}");
    assert!(stdout.contains("Trial retries: 1"), "{stdout}");
    for group in [
        "terminus-2__claude-sonnet-4-5__tasks",
        "terminus-2__claude-sonnet-4-5__harbor/pkg-set",
        "Custom__gpt-5__tasks",
        "Custom__gpt-5__harbor/pkg-set",
    ] {
        assert!(stdout.contains(group), "{group}: {stdout}");
    }
    for kind in ["RewardFileNotFoundError", "AgentTimeoutError", "CancelledError"] {
        assert!(stdout.contains(kind), "{kind}: {stdout}");
    }
    // Tokens and cost summed over the 7 results (trial n used 1000·n in, 10·n out, $0.01·n).
    assert!(stdout.contains("Tokens: 28000 in, 280 out, cost $0.2800"), "{stdout}");
}
