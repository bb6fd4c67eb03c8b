//! Harbor 0.25.0's own Terminus 2 and terminus in the reference view (Harbor's texts imported,
//! `model_view: reference`) against the same real model server, greedy (`temperature: 0` in
//! both jobs): on two example tasks, each trial's trajectory files are the same once times,
//! UUIDs and the trial's name are masked (the shell's prompt names a fixed host) (the fields only terminus
//! writes being those the ATIF row of docs/DIFFERENCES.md lists), and so is the reward.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::differential::{compare_values, trajectories};
use crate::support::{copy_task, docker, example, harbor_runtime, heavy_lock, read_json, run_terminus, temp_dir};

const TASKS: [&str; 2] = ["hello-world", "count-errors"];

/// A job both tools read alike: two turns, no summarization, the context and prices stated so
/// neither looks them up (Harbor's LiteLLM does not know this model), replies ending at their
/// first line break.
fn job(dir: &Path, name: &str, url: &str, tasks: &[PathBuf]) -> PathBuf {
    let mut yaml = format!(
        "jobs_dir: {jobs}\njob_name: {name}\nn_attempts: 1\nn_concurrent_trials: 1\nagents:\n  - name: terminus-2\n    model_name: {model}\n    kwargs:\n      api_base: {url}\n      record_terminal_session: false\n      max_turns: 2\n      temperature: 0\n      enable_summarize: false\n      model_info:\n        max_input_tokens: 2048\n        max_output_tokens: 96\n        input_cost_per_token: 0.0\n        output_cost_per_token: 0.0\n      llm_call_kwargs:\n        max_tokens: 96\n        stop: [\"\\n\"]\ntasks:\n",
        jobs = dir.display(),
        model = super::MODEL,
    );
    for task in tasks {
        yaml.push_str(&format!("  - path: {}\n", task.display()));
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The reward of the trial of `task` in `job` (null when none).
fn reward(job: &Path, task: &str) -> Value {
    let trial = std::fs::read_dir(job)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{task}__")))
        .unwrap_or_else(|| panic!("no trial of {task} in {}", job.display()));
    read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn harbor_and_terminus_in_the_reference_view_agree_on_a_real_model() {
    let Some(url) = super::real_model_url() else { return };
    let Some(_docker) = docker().await else { return };
    let Some(harbor) = harbor_runtime("0.25.0") else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("real-model-parity");
    let tasks: Vec<PathBuf> =
        TASKS.iter().map(|name| copy_task(&example(name), &dir.path().join("tasks").join(name))).collect();
    // The shell's prompt names a fixed host, not the container's random one: the model's token
    // counts would otherwise differ with how its hex digits tokenize.
    for task in &tasks {
        let dockerfile = task.join("environment/Dockerfile");
        let mut text = std::fs::read_to_string(&dockerfile).unwrap();
        text.push_str("RUN echo 'PS1=\"\\u@box:\\w\\$ \"' >> /root/.bashrc\n");
        std::fs::write(&dockerfile, text).unwrap();
    }
    let texts = harbor.import_texts(&dir.path().join("harbor-texts"));
    let env = [("OPENAI_API_KEY", "sk-real-model-parity")];

    let theirs = job(dir.path(), "harbor", &url, &tasks);
    let out = tokio::task::spawn_blocking(move || harbor.run(&theirs, &env)).await.unwrap();
    assert!(
        out.status.success(),
        "Harbor: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = job(dir.path(), "ours", &url, &tasks);
    // The reference view, Harbor's texts: appended to the agent's kwargs.
    let yaml = std::fs::read_to_string(&ours).unwrap().replace(
        "      record_terminal_session: false\n",
        &format!(
            "      record_terminal_session: false\n      model_view: reference\n      texts: {}\n",
            texts.display()
        ),
    );
    std::fs::write(&ours, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&ours, &env)).await.unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "terminus: {}", String::from_utf8_lossy(&out.stderr));

    let mut failures = Vec::new();
    for task in TASKS {
        let their_files = trajectories(&dir.path().join("harbor"), task);
        let our_files = trajectories(&dir.path().join("ours"), task);
        assert!(their_files.contains_key("trajectory.json"), "{task}: Harbor wrote no trajectory");
        let steps = their_files["trajectory.json"]["steps"].as_array().map_or(0, Vec::len);
        assert!(steps >= 3, "{task}: the model was asked at least twice ({steps} steps)");
        let mut extras = std::collections::BTreeSet::new();
        let mut found = Vec::new();
        if their_files.keys().ne(our_files.keys()) {
            found.push(format!(
                "files {:?} vs {:?}",
                their_files.keys().collect::<Vec<_>>(),
                our_files.keys().collect::<Vec<_>>()
            ));
        }
        for (name, theirs) in &their_files {
            if let Some(ours) = our_files.get(name) {
                compare_values(theirs, ours, name, &mut found, &mut extras);
            }
        }
        let (their_reward, our_reward) =
            (reward(&dir.path().join("harbor"), task), reward(&dir.path().join("ours"), task));
        if their_reward.as_f64() != our_reward.as_f64() {
            found.push(format!("reward {their_reward} from Harbor, {our_reward} from us"));
        }
        println!(
            "{task}: {} trajectory files, {steps} steps, reward {their_reward}: {} differences (fields only we write: {extras:?})",
            their_files.len(),
            found.len()
        );
        failures.extend(found.into_iter().map(|f| format!("{task}: {f}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
