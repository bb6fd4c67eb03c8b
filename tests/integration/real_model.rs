//! The orchestrator against a real OpenAI-compatible server, not our mock: llama-cpp-python's
//! server with SmolLM2-135M-Instruct on the CPU and a 2,048-token context, started by
//! `scripts/real-model.sh` (`scripts/test.sh --real-model` runs these tests under it). The model
//! writes nonsense; what is checked is the orchestrator: the context read from the server, a real
//! context-length error mapped to its kind and driving the overflow fallback chain, proactive
//! summarization for a model no table knows, usage totals, and trials that always end with a
//! result.
//!
//! Without `TERMINUS_REAL_MODEL_URL` (the server's base URL, `http://127.0.0.1:PORT/v1`) these
//! tests are skipped, unless `TERMINUS_REQUIRE_REAL_MODEL=1`, which makes them fail.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;
use terminus_core::models::{ServerKind, ServerLimits};
use terminus_llm::probe::server_limits;
use terminus_llm::{ChatMessage, LlmError, LlmRequest, Provider, ProviderSettings};

mod parity;

use crate::support::{
    docker, heavy_lock, read_json, run_terminus, temp_dir, trajectory_files, trial_dirs, validate_with_harbor,
};

/// A model name in no table (LiteLLM's, ours): only the server can say its context.
const MODEL: &str = "openai/terminus-real-smollm2";
/// The context `scripts/real-model.sh` starts the server with.
const N_CTX: u64 = 2048;

/// The server's base URL, or None (test skipped) when there is none and it is not required.
fn real_model_url() -> Option<String> {
    match std::env::var("TERMINUS_REAL_MODEL_URL").ok().filter(|u| !u.is_empty()) {
        Some(url) => Some(url),
        None if std::env::var("TERMINUS_REQUIRE_REAL_MODEL").is_ok_and(|v| v == "1") => panic!(
            "TERMINUS_REQUIRE_REAL_MODEL=1 but TERMINUS_REAL_MODEL_URL is not set; run scripts/test.sh --real-model"
        ),
        None => {
            crate::support::skip("real-model", "no real model server (scripts/test.sh --real-model starts one)");
            None
        }
    }
}

fn settings(url: &str) -> ProviderSettings {
    ProviderSettings { api_base: Some(url.to_string()), ..ProviderSettings::new(MODEL) }
}

fn request(text: &str, max_tokens: u64) -> LlmRequest {
    let mut extra = serde_json::Map::new();
    extra.insert("max_tokens".into(), json!(max_tokens));
    LlmRequest { messages: vec![ChatMessage::user(text)], temperature: Some(0.0), extra, logged: None }
}

/// The LLM layer alone: the probe reads the server's n_ctx, a reply carries its usage, and a
/// prompt longer than the context comes back as the typed context-length error.
#[tokio::test(flavor = "multi_thread")]
async fn the_server_states_its_context_and_its_errors_map_to_kinds() {
    let Some(url) = real_model_url() else { return };
    let settings = settings(&url);
    let started = Instant::now();
    let limits = server_limits(&settings, terminus_llm::probe::PROBE_TIMEOUT).await;
    eprintln!("probe: {limits:?} in {:?}", started.elapsed());
    assert_eq!(limits, Some(ServerLimits { context: N_CTX, via: ServerKind::LlamaCppPython }));

    let provider = Provider::new(settings).unwrap();
    // A reply long enough to be cut is an error of its own kind, with the usage it cost.
    let reply = provider.complete(&request("Say hello.", 8)).await;
    let usage = match &reply {
        Ok(response) => response.usage.expect("llama-cpp-python reports usage"),
        Err(LlmError::OutputLengthExceeded { usage, .. }) => usage.expect("a cut reply keeps its usage"),
        Err(other) => panic!("{other:?}"),
    };
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens <= 8, "{usage:?}");
    assert_eq!(usage.cost_usd, 0.0, "no price is known for this model");

    // Longer than the context: the server's 400, mapped to its kind, stating the context.
    let long = "word ".repeat(3 * N_CTX as usize);
    match provider.complete(&request(&long, 8)).await {
        Err(LlmError::ContextLengthExceeded(message)) => {
            assert!(
                message.contains("HTTP 400") && message.contains("maximum context length is 2048 tokens"),
                "{message}"
            )
        }
        other => panic!("expected a context-length error, got {other:?}"),
    }
}

/// A task like hello-world whose instruction carries `padding` words of notes, with time for a
/// slow CPU model (the agent's limit, 600 s, is far above what the run needs).
fn task_with_instruction(dir: &Path, name: &str, padding: usize) -> PathBuf {
    let source = crate::support::example("hello-world");
    let task = crate::support::copy_task(&source, &dir.join(name));
    let toml = std::fs::read_to_string(source.join("task.toml")).unwrap();
    let toml = toml.replace("[agent]\ntimeout_sec = 120.0", "[agent]\ntimeout_sec = 600.0");
    assert!(toml.contains("timeout_sec = 600.0"), "{toml}");
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let mut instruction = std::fs::read_to_string(source.join("instruction.md")).unwrap();
    if padding > 0 {
        instruction.push_str("\nNotes from the requester (for reference only):\n");
        for i in 0..padding {
            instruction.push_str(&format!("note {i} "));
        }
        instruction.push('\n');
    }
    std::fs::write(task.join("instruction.md"), instruction).unwrap();
    task
}

/// Σ prompt and completion tokens of the main trajectory's own steps plus each subagent's
/// totals: the trajectory's final totals, and the result's.
fn assert_usage_adds_up(trial: &Path) {
    let (mut prompt, mut completion) = (0u64, 0u64);
    let mut main_final = None;
    for file in trajectory_files(&trial.join("agent")) {
        let t = read_json(&file);
        if file.file_name().unwrap().to_string_lossy().contains("summarization") {
            prompt += t["final_metrics"]["total_prompt_tokens"].as_u64().unwrap();
            completion += t["final_metrics"]["total_completion_tokens"].as_u64().unwrap();
        } else {
            for step in t["steps"].as_array().unwrap() {
                if step["is_copied_context"] != true {
                    prompt += step["metrics"]["prompt_tokens"].as_u64().unwrap_or(0);
                    completion += step["metrics"]["completion_tokens"].as_u64().unwrap_or(0);
                }
            }
            main_final = Some(t["final_metrics"].clone());
        }
    }
    let main_final = main_final.expect("a main trajectory");
    let result = read_json(&trial.join("result.json"));
    let agent = &result["agent_result"];
    assert_eq!(
        (main_final["total_prompt_tokens"].as_u64(), main_final["total_completion_tokens"].as_u64()),
        (Some(prompt), Some(completion)),
        "{}",
        trial.display()
    );
    assert_eq!((agent["n_input_tokens"].as_u64(), agent["n_output_tokens"].as_u64()), (Some(prompt), Some(completion)));
    assert!(prompt > 0, "{}: the server's usage is recorded", trial.display());
}

/// The lines of `job.log` about one trial.
fn log_of<'a>(log: &'a str, trial: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(trial)).collect()
}

/// Real trials against the real server, for a model no table knows: the context comes from the
/// server (config.json says so); with a small context, proactive summarization fires; an
/// instruction too long for the context brings the server's real 400, which drives the overflow
/// fallback chain; the usage totals add up; every trial ends with a result.
#[tokio::test(flavor = "multi_thread")]
async fn real_trials_summarize_fall_back_and_end_with_results() {
    let Some(url) = real_model_url() else { return };
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let started = Instant::now();
    let dir = temp_dir("real-model");
    let small = task_with_instruction(dir.path(), "real-small", 0);
    // About 5,500 tokens (SmolLM2's): neither the first prompt nor the instruction alone fits.
    let long = task_with_instruction(dir.path(), "real-overflow", 1000);
    // The replies end at their first line break (a stop sequence sent with every call, the
    // subagents' too): short calls, cut off at max_tokens only when one line runs that long.
    let yaml = format!(
        "jobs_dir: {jobs}\njob_name: real-model\nn_concurrent_trials: 2\nllm:\n  max_attempts: 2\n  request_timeout_sec: 120\nagents:\n  - name: terminus-2\n    model_name: {MODEL}\n    kwargs:\n      api_base: {url}\n      record_terminal_session: false\n      max_turns: 2\n      temperature: 0\n      proactive_summarization_threshold: 1800\n      llm_call_kwargs:\n        max_tokens: 96\n        stop: [\"\\n\"]\ntasks:\n  - path: {small}\n  - path: {long}\n",
        jobs = dir.path().display(),
        small = small.display(),
        long = long.display(),
    );
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&path, &[])).await.unwrap();
    let code = out.status.code();
    let job_dir = dir.path().join("real-model");
    let log = std::fs::read_to_string(job_dir.join("job.log")).unwrap_or_default();
    // 0: every trial ended without an error; 1: some recorded one. Never a crash or a refusal.
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{}\n{log}", String::from_utf8_lossy(&out.stderr));

    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2, "every trial ends with a result.json");
    let trial_of = |task: &str| {
        trials
            .iter()
            .find(|t| read_json(&t.join("result.json"))["task_name"] == task)
            .unwrap_or_else(|| panic!("no trial of {task}"))
            .clone()
    };
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        let name = result["trial_name"].as_str().unwrap().to_string();
        // A reward, or an error recorded by kind — none of ours (a crash is InternalError).
        let reward = &result["verifier_result"]["rewards"]["reward"];
        let error = result["exception_info"]["exception_type"].as_str();
        assert!(reward.is_number() || error.is_some(), "{name}: neither a reward nor an error: {result}");
        assert!(
            !matches!(error, Some("InternalError" | "EnvironmentLostError" | "TrialOverdueError")),
            "{name}: {result}"
        );
        // The context came from the server, which is the only one to know it.
        let limits = &read_json(&trial.join("config.json"))["agent"]["model_limits"];
        assert_eq!(
            limits["max_input_tokens"],
            json!({"value": N_CTX, "source": "server", "via": "llama_cpp_python"}),
            "{name}"
        );
        assert_eq!(result["config"]["agent"]["model_limits"], *limits);
        // Usage: the totals are the sum of every step's and every subagent's.
        assert_usage_adds_up(trial);
        eprintln!(
            "{name}: reward {reward}, error {error:?}, episodes {}, summarizations {}, tokens in/out {}/{}",
            result["agent_result"]["metadata"]["n_episodes"],
            result["agent_result"]["metadata"]["summarization_count"],
            result["agent_result"]["n_input_tokens"],
            result["agent_result"]["n_output_tokens"],
        );
    }

    // The small task: the first exchange (about 600 tokens) leaves less than the threshold
    // (1,800) free of the server's 2,048, so the next episode begins with a proactive
    // summarization — which the default context of 32,768 would not have started.
    let trial = trial_of("real-small");
    let result = read_json(&trial.join("result.json"));
    let name = result["trial_name"].as_str().unwrap();
    assert!(result["agent_result"]["metadata"]["summarization_count"].as_u64().unwrap() >= 1, "{result}");
    assert!(
        log_of(&log, name).iter().any(|l| l.contains("context nearly full; summarizing proactively")),
        "{}",
        log_of(&log, name).join("\n")
    );
    // Its three subagents wrote their trajectories and handed over; or one of them failed (a
    // reply cut off at max_tokens), which a proactive summarization survives, logged.
    let lines = log_of(&log, name);
    if lines.iter().any(|l| l.contains("summarization handed over")) {
        for which in ["summary", "questions", "answers"] {
            let file = trial.join(format!("agent/trajectory.summarization-1-{which}.json"));
            assert!(file.is_file(), "{}", file.display());
        }
    } else {
        assert!(lines.iter().any(|l| l.contains("proactive summarization failed")), "{}", lines.join("\n"));
    }

    // The long task: the server's own 400 for the first prompt, mapped to the context-length
    // kind, starts the overflow chain: nothing to unwind or summarise yet, so the instruction is
    // handed over alone; still too long, the call after the summarization fails with the same
    // real 400 and the turn goes on with the stand-in reply, outside the history; the next
    // episode is a real exchange, and the trial is verified.
    let trial = trial_of("real-overflow");
    let result = read_json(&trial.join("result.json"));
    let name = result["trial_name"].as_str().unwrap();
    let lines = log_of(&log, name);
    let overflow =
        |l: &&str| l.contains("context length exceeded") && l.contains("maximum context length is 2048 tokens");
    assert!(lines.iter().any(|l| overflow(l) && l.contains("summarizing")), "{}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| overflow(l) && l.contains("the call after summarization failed")),
        "{}",
        lines.join("\n")
    );
    let t = read_json(&trial.join("agent/trajectory.json"));
    let steps = t["steps"].as_array().unwrap();
    let instruction = std::fs::read_to_string(long.join("instruction.md")).unwrap();
    assert_eq!((&steps[1]["source"], steps[1]["message"].as_str()), (&json!("user"), Some(instruction.as_str())));
    assert_eq!(steps[2]["message"], terminus_agent::prompts::TECHNICAL_DIFFICULTIES);
    assert!(steps.len() >= 4 && steps[3]["metrics"]["prompt_tokens"].as_u64() > Some(0), "a real exchange follows");
    assert!(result["verifier_result"]["rewards"]["reward"].is_number(), "verified: {result}");

    validate_with_harbor(&job_dir);
    eprintln!("real-model job: {:.1} s", started.elapsed().as_secs_f64());
}
