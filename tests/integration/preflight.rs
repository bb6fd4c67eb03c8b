//! The oracle preflight: every task's own solution runs before the job; tasks whose solution
//! does not score 1 leave the job by name (`preflight: oracle`) or refuse it (`strict`).

use std::path::{Path, PathBuf};

use crate::support::BoundedCommand;
use crate::support::{
    base_task, docker, heavy_lock, read_json, resume_terminus, run_terminus, temp_dir, trial_dirs, write_job,
};

const REWARD_IF_OUT: &str =
    "[ -f /app/out ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt";

/// A dataset of four tasks: two whose solution passes, one whose solution does nothing (reward
/// 0) and one whose solution outlives its agent limit (AgentTimeoutError).
fn dataset(root: &Path) -> PathBuf {
    let fast = "[agent]\ntimeout_sec = 60.0\n";
    base_task(root, "good-a", fast, "echo a > /app/out", REWARD_IF_OUT);
    base_task(root, "good-b", fast, "echo b > /app/out", REWARD_IF_OUT);
    base_task(root, "broken-zero", fast, "true", REWARD_IF_OUT);
    base_task(root, "broken-late", "[agent]\ntimeout_sec = 3.0\n", "sleep 60; echo late > /app/out", REWARD_IF_OUT);
    root.to_path_buf()
}

fn task_of(trial: &Path) -> String {
    read_json(&trial.join("result.json"))["task_name"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_solutions_are_left_out_by_name_and_the_job_runs_the_rest() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("preflight");
    let tasks = dataset(&dir.path().join("ds"));
    let job = |name: &str, mode: &str| {
        let yaml = format!(
            "jobs_dir: {}\njob_name: {name}\nn_concurrent_trials: 4\npreflight: {mode}\nagents:\n  - name: nop\ndatasets:\n  - path: {}\n",
            dir.path().display(),
            tasks.display()
        );
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        path
    };

    // `preflight: oracle`: the two broken tasks are named and left out; the job runs the rest.
    let config = job("kept", "oracle");
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("2 of 4 tasks' solutions do not score 1"), "{stderr}");
    assert!(stderr.contains("the job runs without `broken-late`, `broken-zero`"), "{stderr}");
    let job_dir = dir.path().join("kept");
    let result = read_json(&job_dir.join("result.json"));
    assert_eq!(result["n_total_trials"], 2, "{result}");
    let failed = result["preflight"]["failed"].as_array().unwrap();
    let named: Vec<(&str, &str)> =
        failed.iter().map(|f| (f["task"].as_str().unwrap(), f["reason"].as_str().unwrap())).collect();
    assert_eq!(named.len(), 2, "{named:?}");
    assert_eq!(named[0].0, "broken-late");
    assert!(named[0].1.starts_with("AgentTimeoutError"), "{named:?}");
    assert_eq!(named[1], ("broken-zero", "scored reward 0"));
    let ran: Vec<String> = trial_dirs(&job_dir).iter().map(|t| task_of(t)).collect();
    assert_eq!(ran, ["good-a", "good-b"], "only the tasks whose solution passes ran");
    let oracle_dir = dir.path().join("kept__oracle-preflight");
    assert_eq!(trial_dirs(&oracle_dir).len(), 4, "every task's solution ran once");

    // A resumed job keeps the verdict it started with: no second oracle run.
    let out = tokio::task::spawn_blocking({
        let job_dir = job_dir.clone();
        move || resume_terminus(&job_dir, &[])
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("as when the job started, the job runs without `broken-late`, `broken-zero`"), "{stderr}");
    assert!(!stderr.contains("running the solution"), "{stderr}");
    assert_eq!(trial_dirs(&oracle_dir).len(), 4);
    assert_eq!(read_json(&job_dir.join("result.json"))["n_total_trials"], 2);

    // `preflight: strict` refuses the job: exit 7, and no trial of the job ran.
    let tasks_two = [tasks.join("broken-zero"), tasks.join("good-a")];
    let config = write_job(dir.path(), "refused", "preflight: strict\n", "  - name: nop\n", &tasks_two);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("broken-zero") && stderr.contains("the job is refused"), "{stderr}");
    assert!(trial_dirs(&dir.path().join("refused")).is_empty());
    assert_eq!(trial_dirs(&dir.path().join("refused__oracle-preflight")).len(), 2);

    // Its solution fixed, the same job checks again (the refused preflight set aside) and runs.
    std::fs::write(tasks.join("broken-zero/solution/solve.sh"), "#!/bin/bash\necho fixed > /app/out\n").unwrap();
    let config = dir.path().join("refused.yaml");
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("an earlier preflight's trials moved to"), "{stderr}");
    assert!(stderr.contains("every task's solution scores 1 (2 tasks)"), "{stderr}");
    assert_eq!(trial_dirs(&dir.path().join("refused")).len(), 2);
}

/// `tasks check --oracle` alone: each task with its verdict, exit 1 when a solution fails.
#[tokio::test(flavor = "multi_thread")]
async fn tasks_check_oracle_lists_each_task_with_its_verdict() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("check-oracle");
    let root = dir.path().join("ds");
    base_task(&root, "good-a", "", "echo a > /app/out", REWARD_IF_OUT);
    base_task(&root, "broken-zero", "", "true", REWARD_IF_OUT);
    let jobs = dir.path().join("jobs");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::terminus_bin())
            .args(["tasks", "check", "--oracle", "-n", "2", "-o"])
            .arg(&jobs)
            .arg(&root)
            .output_bounded()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("FAILED  broken-zero: scored reward 0"), "{stdout}");
    assert!(stdout.contains("ok      good-a"), "{stdout}");
    assert!(stdout.contains("1 of 2 tasks' solutions score 1"), "{stdout}");
}
