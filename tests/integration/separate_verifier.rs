//! `verifier.environment_mode = "separate"` (Harbor 0.26) against the real engine, with the
//! oracle agent: the tests run in a container of their own, built from `tests/Dockerfile` or
//! the agent's image again, and see the agent's artifacts and nothing else of it.

use std::path::{Path, PathBuf};

use crate::support::BoundedCommand;
use crate::support::{docker, heavy_lock, read_json, run_terminus, temp_dir, trial_dirs};

/// A task built `FROM terminus-base:bookworm`; `tests/Dockerfile` is written when given.
fn task(root: &Path, name: &str, toml: &str, solve: &str, test: &str, tests_dockerfile: Option<&str>) -> PathBuf {
    let dir = crate::support::base_task(root, name, toml, solve, test);
    if let Some(dockerfile) = tests_dockerfile {
        std::fs::write(dir.join("tests/Dockerfile"), dockerfile).unwrap();
    }
    dir
}

/// What the tests see, written to `/logs/verifier/seen.txt`, then the reward for `check`.
fn test_script(check: &str) -> String {
    format!(
        "{{ echo \"marker=$(cat /verifier-marker 2>/dev/null || echo none)\"\n\
         echo \"answer=$(cat /app/answer.txt 2>/dev/null || echo none)\"\n\
         echo \"private=$([ -e /app/private.txt ] && echo visible || echo absent)\"\n\
         echo \"published=$(cat /logs/artifacts/published.txt 2>/dev/null || echo none)\"\n\
         echo \"agent-logs=$(ls -A /logs/agent 2>/dev/null | tr '\\n' ' ')\"\n\
         echo \"net=$(ls /sys/class/net | sort | tr '\\n' ' ')\"\n\
         echo \"grader=${{GRADER:-unset}} user=$(id -un)\"\n\
         }} > /logs/verifier/seen.txt\n\
         if {check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"
    )
}

/// The agent's side: an answer (a task artifact), a private file (not one), a file published
/// in `/logs/artifacts`, and whether the verifier's marker is in the agent's image.
const SOLVE: &str = "echo 42 > /app/answer.txt\necho secret > /app/private.txt\n\
    echo pub > /logs/artifacts/published.txt\n\
    echo \"agent saw marker: $([ -e /verifier-marker ] && echo yes || echo no)\" > /logs/artifacts/agent-marker.txt";

/// Three separate verifiers: one built from `tests/Dockerfile` (a marker the agent's image
/// lacks; the tests in the image), one that is the agent's image again in a fresh container
/// (the tests uploaded), and one with a `[verifier.environment]` of its own (offline, its own
/// env, though the agent is online). Each grades an artifact the solution wrote, sees the
/// agent's published `/logs/artifacts` and neither its other files nor `/logs/agent`; nothing
/// of the trials is left on the engine; `tasks check` says where each verifier runs.
#[tokio::test(flavor = "multi_thread")]
async fn separate_verifiers_grade_artifacts_in_their_own_container() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("separate-verifier");
    let root = dir.path().join("tasks");
    let verifier_image = "FROM terminus-base:bookworm\nRUN echo from-the-verifier-image > /verifier-marker\n\
                          COPY test.sh /tests/test.sh\n";
    let common = "[ \"$(cat /app/answer.txt)\" = 42 ] && [ ! -e /app/private.txt ] && \
                  [ \"$(cat /logs/artifacts/published.txt)\" = pub ] && [ ! -e /logs/agent/oracle.txt ]";
    let tasks = [
        task(
            &root,
            "sep-built",
            "artifacts = [\"/app/answer.txt\"]\n[verifier]\nenvironment_mode = \"separate\"\n",
            SOLVE,
            &test_script(&format!("{common} && [ -e /verifier-marker ]")),
            Some(verifier_image),
        ),
        task(
            &root,
            "sep-again",
            "artifacts = [\"/app/answer.txt\"]\n[verifier]\nenvironment_mode = \"separate\"\n",
            SOLVE,
            &test_script(&format!("{common} && [ ! -e /verifier-marker ]")),
            None,
        ),
        task(
            &root,
            "sep-own",
            "artifacts = [{ source = \"/app/answer.txt\", destination = \"graded/answer.txt\" }]\n\
             [verifier.environment]\nnetwork_mode = \"no-network\"\nenv = { GRADER = \"${TERMINUS_TEST_GRADER:-unset}\" }\n",
            SOLVE,
            &test_script(&format!("{common} && [ \"$GRADER\" = yes ] && [ \"$(ls /sys/class/net)\" = lo ]")),
            Some(verifier_image),
        ),
    ];
    let mut yaml = format!(
        "jobs_dir: {}\njob_name: separate\nenvironment:\n  host_env: [TERMINUS_TEST_GRADER]\nagents:\n  - name: oracle\ntasks:\n",
        dir.path().display()
    );
    for task in &tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let config = dir.path().join("separate.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("TERMINUS_TEST_GRADER", "yes")])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let job_dir = dir.path().join("separate");
    let trial_of = |name: &str| {
        trial_dirs(&job_dir).into_iter().find(|t| read_json(&t.join("result.json"))["task_name"] == name).unwrap()
    };
    for name in ["sep-built", "sep-again", "sep-own"] {
        let trial = trial_of(name);
        let result = read_json(&trial.join("result.json"));
        let seen = std::fs::read_to_string(trial.join("verifier/seen.txt")).unwrap_or_default();
        assert!(result["exception_info"].is_null(), "{name}: {}\n{seen}", result["exception_info"]);
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{name}: {seen}");
        // Only what was published or named as an artifact reached the verifier; the agent's
        // logs and its other files did not.
        assert!(seen.contains("answer=42\n") && seen.contains("private=absent\n"), "{name}: {seen}");
        assert!(seen.contains("published=pub\n") && seen.contains("agent-logs=\n"), "{name}: {seen}");
        // The agent's side was copied out before its container went, as Harbor places it.
        let artifacts = trial.join("artifacts");
        assert_eq!(std::fs::read_to_string(artifacts.join("logs/artifacts/published.txt")).unwrap(), "pub\n");
        // The agent ran in its own image, which lacks the verifier's marker.
        let agent_saw = std::fs::read_to_string(artifacts.join("logs/artifacts/agent-marker.txt")).unwrap();
        assert_eq!(agent_saw, "agent saw marker: no\n", "{name}");
        assert!(trial.join("agent/oracle.txt").is_file(), "{name}: the agent's logs are kept");
    }
    let seen = |name: &str| std::fs::read_to_string(trial_of(name).join("verifier/seen.txt")).unwrap();
    assert!(seen("sep-built").contains("marker=from-the-verifier-image\n"), "{}", seen("sep-built"));
    assert!(seen("sep-again").contains("marker=none\n"), "{}", seen("sep-again"));
    // Its own environment: offline while the agent's was online, its own env.
    let own = seen("sep-own");
    assert!(own.contains("net=lo \n") && own.contains("grader=yes"), "{own}");
    assert!(trial_of("sep-own").join("artifacts/graded/answer.txt").is_file());
    assert!(trial_of("sep-again").join("artifacts/app/answer.txt").is_file());

    // Nothing left: every trial removed its own containers (the job's final sweep found
    // none), and no network or volume of the job survives.
    let job_log = std::fs::read_to_string(job_dir.join("job.log")).unwrap();
    assert!(!job_log.contains("left behind"), "a trial left a container: {job_log}");
    let job_id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    let left = crate::support::leftovers_of_job(&docker, &job_id).await;
    assert_eq!(left.containers, 0);
    assert!(left.networks.iter().all(|n| !n.ends_with("-net")), "{:?}", left.networks);
    assert_eq!(left.volumes, 0);

    // `tasks check` runs them (no "cannot run here") and says where each verifier runs.
    let check = std::process::Command::new(crate::support::terminus_bin())
        .args(["tasks", "check"])
        .arg(&root)
        .output_bounded()
        .unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{report}");
    assert!(report.contains("3 of 3 tasks valid") && !report.contains("cannot run here"), "{report}");
    assert!(report.contains("image built from tests/, which brings the tests"), "{report}");
    assert!(report.contains("image built from environment/, tests/ uploaded"), "{report}");
}
