//! The trial plan's unit tests: limits, instructions, artifacts and the job's settings, as a
//! job file and a task directory give them.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::job::Overrides;

fn task_dir(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), toml).unwrap();
    std::fs::write(dir.path().join("instruction.md"), "Do it.\n").unwrap();
    std::fs::create_dir_all(dir.path().join("environment")).unwrap();
    std::fs::write(dir.path().join("environment/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    std::fs::create_dir_all(dir.path().join("tests")).unwrap();
    std::fs::write(dir.path().join("tests/test.sh"), "true\n").unwrap();
    dir
}

fn resolved(job_yaml: &str, task_toml: &str) -> ResolvedTrial {
    let task = task_dir(task_toml);
    let yaml = format!("{job_yaml}tasks:\n  - path: {}\n", task.path().display());
    let job = JobSpec::from_yaml(Path::new("job.yaml"), &yaml, &Overrides::default()).unwrap();
    let loaded = Task::load(task.path()).unwrap();
    ResolvedTrial::new(&job, 0, loaded)
}

#[test]
fn limits_take_the_task_values_the_overrides_and_the_multipliers() {
    let plan = resolved(
        "agent_timeout_multiplier: 2\nverifier:\n  override_timeout_sec: 50\nenvironment_build_timeout_multiplier: 0.5\nagents:\n  - name: nop\n    override_setup_timeout_sec: 30\n",
        "[agent]\ntimeout_sec = 100.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 400.0\n",
    );
    assert_eq!(plan.limits.agent, Some(Duration::from_secs(200)));
    assert_eq!(plan.limits.verifier, Duration::from_secs(50));
    assert_eq!(plan.limits.build, Duration::from_secs(200));
    assert_eq!(plan.limits.agent_setup, Duration::from_secs(30));
    assert!(plan.limits.steps.is_empty());
    // Every phase, a tenth on top, and the default margin.
    let phases = Duration::from_secs(200 + 30 + 200 + 50);
    assert_eq!(plan.limits.watchdog, Some(phases + phases / 10 + Duration::from_secs(300)));
}

#[test]
fn an_agent_without_a_limit_has_no_watchdog() {
    let plan = resolved("agents:\n  - name: nop\n", "[verifier]\ntimeout_sec = 60.0\n");
    assert_eq!(plan.limits.agent, None);
    assert_eq!(plan.limits.watchdog, None);
}

#[test]
fn the_instruction_gets_the_jobs_extra_instructions() {
    let plan = resolved("extra_instructions: [Be brief.]\nagents:\n  - name: nop\n", "");
    assert_eq!(plan.instruction, "Do it.\n\n\nBe brief.");
}

#[test]
fn artifacts_are_the_jobs_then_the_tasks_and_strays_are_noted() {
    let plan =
        resolved("artifacts: [/job/out]\nagents:\n  - name: nop\n", "artifacts = [\"/app/a.txt\", \"relative\"]\n");
    let sources: Vec<&str> = plan.artifacts.iter().map(|a| a.source.as_str()).collect();
    assert_eq!(sources, ["/job/out", "/app/a.txt"]);
    assert_eq!(plan.artifact_notes.len(), 1, "{:?}", plan.artifact_notes);
}

#[test]
fn the_jobs_container_and_verifier_settings_are_carried() {
    let plan = resolved(
        "environment:\n  override_cpus: 3\n  override_memory_mb: 512\n  force_build: true\n  env:\n    A: b\nverifier:\n  disable: true\n  agent_processes: kill\nagents:\n  - name: nop\n",
        "",
    );
    assert_eq!(
        (plan.container.cpus, plan.container.memory_mb, plan.container.force_build),
        (Some(3.0), Some(512), true)
    );
    assert_eq!(plan.container.env.get("A").map(String::as_str), Some("b"));
    assert!(plan.verifier.disabled);
    assert_eq!(plan.verifier.agent_processes, AgentProcesses::Kill);
}
