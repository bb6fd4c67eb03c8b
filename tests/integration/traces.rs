//! `terminus traces export` against Harbor 0.26's own exporter: a job with a summarization (its
//! three subagent trajectories) and a `linear_history` split (a continuation segment) is exported
//! by both, with each set of options Harbor's command offers; the rows terminus writes, loaded
//! with HuggingFace `datasets` from PyPI, equal Harbor's dataset column for column.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::scenarios::{run_job, summarization_job};
use crate::support::BoundedCommand;
use crate::support::{docker, harbor_required, heavy_lock, repo_root, terminus_bin};

/// The python of Harbor 0.26 with `datasets`; None (said) when PyPI cannot be reached and
/// Harbor is not required.
fn harbor_with_datasets() -> Option<String> {
    let out = Command::new(repo_root().join("tests/helpers/harbor_traces.sh")).output_bounded().expect("bash runs");
    match out.status.code() {
        Some(0) => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Some(75) if !harbor_required() => {
            eprintln!("skipped: Harbor 0.26 with datasets cannot be installed");
            None
        }
        _ => panic!("Harbor 0.26 with datasets could not be installed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

fn export(job_dir: &Path, output: &Path, flags: &[&str]) -> String {
    let out = Command::new(terminus_bin())
        .args(["traces", "export"])
        .arg(job_dir)
        .arg("-o")
        .arg(output)
        .args(flags)
        .output_bounded()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{flags:?}: {said}");
    said
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_exports_equal_harbors_for_a_job_with_a_summary_and_a_split_trajectory() {
    let Some(_docker) = docker().await else { return };
    let Some(python) = harbor_with_datasets() else { return };
    let (script, agents) = summarization_job();
    let (dir, job_dir, code) = {
        let _guard = heavy_lock().await;
        let (dir, job_dir, code, _server) = run_job("traces", script, &agents, &[]).await;
        (dir, job_dir, code)
    };
    assert_eq!(code, 0);
    assert!(
        std::fs::read_dir(&job_dir).unwrap().flatten().any(|t| t.path().join("agent/trajectory.cont-1.json").exists()),
        "one trial's trajectory is split"
    );
    // Each of Harbor's options, and ours named as Harbor's are.
    let cases: [(&[&str], Value); 4] = [
        (&[], json!({})),
        (
            &["--sharegpt", "--instruction-metadata", "--verifier-metadata"],
            json!({"to_sharegpt": true, "include_instruction": true, "include_verifier_output": true}),
        ),
        (&["--episodes", "last", "--no-subagents"], json!({"episodes": "last", "export_subagents": false})),
        (&["--filter", "success", "--sharegpt"], json!({"success_filter": "success", "to_sharegpt": true})),
    ];
    for (i, (flags, harbor_flags)) in cases.iter().enumerate() {
        let output = dir.path().join(format!("traces-{i}.jsonl"));
        let said = export(&job_dir, &output, flags);
        assert!(said.contains("exported"), "{said}");
        let out = Command::new(&python)
            .arg(repo_root().join("tests/helpers/harbor_traces_compare.py"))
            .arg(&job_dir)
            .arg(&output)
            .arg(harbor_flags.to_string())
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .current_dir(dir.path())
            .output_bounded()
            .unwrap();
        let compared = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{flags:?}: {compared}{}", String::from_utf8_lossy(&out.stderr));
        let rows: usize = compared.lines().last().unwrap_or_default().trim().parse().unwrap_or(0);
        assert!(rows > 0, "{flags:?}: an export with rows: {compared}");
        if flags.is_empty() {
            // Three trials' episodes, and the subagents of the two summarizations' trials.
            let text = std::fs::read_to_string(&output).unwrap();
            let sources: std::collections::BTreeSet<String> = text
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["trace_source"].as_str().unwrap().to_string())
                .collect();
            assert!(sources.contains("main") && sources.contains("summarization-1-questions"), "{sources:?}");
        }
    }
    // What is not built says so.
    let out = Command::new(terminus_bin())
        .args(["traces", "export"])
        .arg(&job_dir)
        .args(["--format", "otel"])
        .output_bounded()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not built"));
}
