//! Deterministic scenarios mirroring the reference's integration tests:
//! real actors, a real container, real tmux, and a scripted OpenAI-compatible server over
//! loopback HTTP. Each asserts the trajectory step by step, and every trajectory file is then
//! loaded with Harbor's own ATIF models.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, ListedModel, MockServer, Rule, Script, Turn};

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    cmd, containers_of_job, docker, example, heavy_lock, phase_seconds, read_json, reply_text, run_terminus,
    scripted_agent, temp_dir, time_of, trajectory_files, trial_dirs, usage, validate_with_harbor, write_job,
};

fn turn(content: impl Into<String>, prompt_tokens: u64, completion_tokens: u64) -> Turn {
    Turn { content: content.into(), usage: usage(prompt_tokens, completion_tokens), ..Turn::default() }
}

/// The scenarios' reply text (their analysis and plan are in the golden outputs, see `golden.rs`).
fn scripted_reply(commands: Value, complete: bool) -> String {
    reply_text("scripted analysis", "scripted plan", commands, complete)
}

const PRINTF: &str = "printf 'Hello, world!\\n' > hello.txt\n";

/// Runs one job of hello-world against `script` with the given agents (YAML list items).
/// Returns the job directory, the exit code and the server (for its request log).
pub(crate) async fn run_job(
    name: &str,
    script: Script,
    agents: &[String],
    extra_env: &[(&str, &str)],
) -> (tempfile::TempDir, PathBuf, i32, MockServer) {
    let server = MockServer::start(script, 0).await.unwrap();
    let dir = temp_dir(name);
    let agents: String = agents.iter().map(|agent| agent.replace("API_BASE", &server.api_base())).collect();
    let path = write_job(dir.path(), name, "n_concurrent_trials: 4\n", &agents, &[example("hello-world")]);
    let env: Vec<(String, String)> = extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let out = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        run_terminus(&path, &env)
    })
    .await
    .unwrap();
    let code = out.status.code().unwrap_or(-1);
    if code != 0 {
        eprintln!(
            "stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let job_dir = dir.path().join(name);
    (dir, job_dir, code, server)
}

/// A scripted agent for [`run_job`], which fills in its model's address.
pub(crate) fn agent(kwargs: &str) -> String {
    scripted_agent("API_BASE", kwargs)
}

fn steps(trajectory: &Value) -> &Vec<Value> {
    trajectory["steps"].as_array().expect("steps")
}

fn sources(trajectory: &Value) -> Vec<String> {
    steps(trajectory)
        .iter()
        .map(|s| format!("{}{}", s["source"].as_str().unwrap(), if s["is_copied_context"] == true { "*" } else { "" }))
        .collect()
}

fn tool_call_ids(trajectory: &Value) -> Vec<String> {
    steps(trajectory)
        .iter()
        .flat_map(|s| s["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["tool_call_id"].as_str().unwrap().to_string())
        .collect()
}

/// Σ agent-step prompt tokens of the main segments + Σ subagent totals = final totals = result.
fn assert_metrics_add_up(trial: &Path) {
    let agent_dir = trial.join("agent");
    let mut main_prompt = 0;
    let mut sub_prompt = 0;
    let mut last_final = Value::Null;
    for file in trajectory_files(&agent_dir) {
        let t = read_json(&file);
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        if name.contains("summarization") {
            sub_prompt += t["final_metrics"]["total_prompt_tokens"].as_u64().unwrap();
        } else {
            for step in steps(&t) {
                if step["is_copied_context"] != true {
                    main_prompt += step["metrics"]["prompt_tokens"].as_u64().unwrap_or(0);
                }
            }
            if t.get("continued_trajectory_ref").is_none() {
                last_final = t["final_metrics"].clone();
            }
        }
    }
    let result = read_json(&trial.join("result.json"));
    assert_eq!(last_final["total_prompt_tokens"].as_u64(), Some(main_prompt + sub_prompt), "{}", trial.display());
    assert_eq!(result["agent_result"]["n_input_tokens"].as_u64(), Some(main_prompt + sub_prompt));
}

/// A reply without the required fields is fed back as an error; the model recovers.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_json_then_recovery() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let mut first = turn(
        format!(
            "I'll create the file.\n{}\nThis should work!",
            json!({"commands": [{"keystrokes": PRINTF, "duration": 0.1}]})
        ),
        682,
        100,
    );
    first.reasoning_content = Some("Let me think.".into());
    let script = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                first,
                turn(scripted_reply(cmd(PRINTF, 0.1), false), 785, 50),
                turn(scripted_reply(json!([]), true), 850, 30),
                turn(scripted_reply(json!([]), true), 100, 20),
            ],
        }],
        ..Script::default()
    };
    // A user's template for the first prompt, and constructor kwargs sent with every request.
    let template_dir = temp_dir("invalid-json-template");
    let template = template_dir.path().join("first.txt");
    std::fs::write(&template, "MY TEMPLATE {{json}}\n{instruction}\n{terminal_state}\n").unwrap();
    let kwargs = format!("      llm_kwargs:\n        seed: 7\n      prompt_template: {}\n", template.display());
    let (_dir, job_dir, code, server) = run_job("invalid-json", script, &[agent(&kwargs)], &[]).await;
    assert_eq!(code, 0);
    let requests = server.requests();
    assert!(requests.iter().all(|r| r.body["seed"] == 7), "llm_kwargs go with every request");
    let first_prompt = requests[0].body["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(first_prompt.starts_with("MY TEMPLATE {json}\n"), "{first_prompt}");
    assert!(first_prompt.contains("hello.txt"), "the instruction is filled in");
    let trial = &trial_dirs(&job_dir)[0];
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    let t = read_json(&trial.join("agent/trajectory.json"));
    assert_eq!(sources(&t), ["user", "agent", "agent", "agent", "agent"]);
    let s = steps(&t);
    assert!(
        s[1]["message"].as_str().unwrap().starts_with("I'll create the file."),
        "the unparsable reply is kept verbatim"
    );
    assert!(s[1].get("tool_calls").is_none());
    assert_eq!(s[1]["reasoning_content"], "Let me think.");
    assert_eq!(
        s[1]["observation"]["results"][0]["content"],
        "Your last reply could not be read:\nERROR: Missing required fields: analysis, plan\nWARNINGS: - Extra text detected before JSON object\n- Extra text detected after JSON object\n\nPlease reply again with one valid JSON object in the format described at the start."
    );
    assert_eq!(s[0]["message"], first_prompt);
    assert_eq!(t["agent"]["extra"]["llm_kwargs"], json!({"seed": 7}));
    assert_eq!(s[1]["metrics"], json!({"prompt_tokens": 682, "completion_tokens": 100, "cost_usd": 0.002705}));
    assert_eq!(
        s[2]["tool_calls"][0],
        json!({"tool_call_id": "call_1_1", "function_name": "bash_command", "arguments": {"keystrokes": PRINTF, "duration": 0.1}})
    );
    assert!(s[2]["observation"]["results"][0]["content"].as_str().unwrap().starts_with("New Terminal Output:"));
    assert_eq!(tool_call_ids(&t), ["call_1_1", "call_2_task_complete", "call_3_task_complete"]);
    assert!(s[3]["observation"]["results"][0]["content"].as_str().unwrap().starts_with("The terminal now shows:\n"));
    assert!(s.iter().all(|step| step.get("model_name").is_none() || step["model_name"] == "gpt-4o"));
    let final_metrics = &t["final_metrics"];
    assert_eq!(
        (final_metrics["total_prompt_tokens"].as_u64(), final_metrics["total_completion_tokens"].as_u64()),
        (Some(2417), Some(200))
    );
    assert!((final_metrics["total_cost_usd"].as_f64().unwrap() - 0.0080425).abs() < 1e-12);
    assert_eq!(server.requests().len(), 4);
    assert_metrics_add_up(trial);
    validate_with_harbor(&job_dir);
    assert_eq!(containers_of_job(&docker, read_json(&job_dir.join("result.json"))["id"].as_str().unwrap()).await, 0);
}

/// The script and agents of [`context_summarization`] (also the golden run's, see `golden.rs`):
/// an overflow, the same with linear history, and a proactive summarization.
pub(crate) fn summarization_job() -> (Script, [String; 3]) {
    let overflow = Turn {
        status: Some(400),
        body: Some(json!({"error": {"message": "This model's maximum context length is 7000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string()),
        ..Turn::default()
    };
    let rule = |when_last: Option<&str>, when_any: Option<&str>, reply: Turn| Rule {
        when_last: when_last.map(str::to_string),
        when_any: when_any.map(str::to_string),
        when_body: None,
        reply,
    };
    let script = Script {
        rules: vec![
            rule(
                Some("hand your work over"),
                None,
                turn("Context summarization: made a directory, echoed twice.", 500, 200),
            ),
            rule(
                Some("picking up work from a previous AI agent"),
                None,
                turn("1. Where?\n2. What?\n3. Why?\n4. When?\n5. How?", 100, 20),
            ),
            rule(
                Some("The next agent has a few questions"),
                None,
                turn("1. /app\n2. hello.txt\n3. task\n4. now\n5. printf", 700, 120),
            ),
            rule(Some("You have marked the task as complete"), None, turn(scripted_reply(json!([]), true), 850, 30)),
            rule(Some("The previous agent answered"), None, turn(scripted_reply(cmd(PRINTF, 0.1), false), 1700, 420)),
            rule(None, Some("The previous agent answered"), turn(scripted_reply(json!([]), true), 850, 40)),
        ],
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                turn(scripted_reply(cmd("mkdir test_dir && seq 1 900\n", 0.3), false), 682, 60),
                turn(scripted_reply(cmd("echo test1\n", 0.1), false), 750, 50),
                turn(scripted_reply(cmd("echo test2\n", 0.1), false), 820, 50),
                overflow,
            ],
        }],
        ..Script::default()
    };
    let small = "      model_info:\n        max_input_tokens: 7000\n        max_output_tokens: 4096\n      proactive_summarization_threshold: 0\n";
    let agents = [
        agent(&format!("{small}      session_id: overflow\n")),
        agent(&format!(
            "{small}      session_id: linear\n      trajectory_config:\n        raw_content: true\n        linear_history: true\n"
        )),
        agent(
            "      session_id: proactive\n      model_info:\n        max_input_tokens: 4000\n      proactive_summarization_threshold: 2000\n",
        ),
    ];
    (script, agents)
}

/// A context overflow mid-run (and, for a third agent, a nearly full context) leads to
/// the three summarization subagents, a handoff, and — with linear_history — a split trajectory.
#[tokio::test(flavor = "multi_thread")]
async fn context_summarization() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let (script, agents) = summarization_job();
    let (_dir, job_dir, code, _server) = run_job("summarization", script, &agents, &[]).await;
    assert_eq!(code, 0);
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 3);
    let by_session = |session: &str| {
        trials
            .iter()
            .find(|t| read_json(&t.join("agent/trajectory.json"))["session_id"].as_str().is_some_and(|s| s == session))
            .unwrap_or_else(|| panic!("no trial with session {session}"))
            .clone()
    };

    // Overflow, default layout.
    let trial = by_session("overflow");
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    assert_eq!(result["agent_result"]["metadata"]["summarization_count"], 1);
    assert_eq!(result["agent_result"]["metadata"]["n_episodes"], 6);
    assert_eq!(result["agent_result"]["metadata"]["api_request_times_msec"].as_array().unwrap().len(), 6 + 3);
    let t = read_json(&trial.join("agent/trajectory.json"));
    assert_eq!(sources(&t), ["user", "agent", "agent", "agent", "system", "user", "agent", "agent", "agent"]);
    assert_eq!(
        tool_call_ids(&t),
        ["call_0_1", "call_1_1", "call_2_1", "call_3_1", "call_4_task_complete", "call_5_task_complete"]
    );
    let s = steps(&t);
    let refs = s[4]["observation"]["results"][0]["subagent_trajectory_ref"].as_array().unwrap();
    let paths: Vec<&str> = refs.iter().map(|r| r["trajectory_path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "trajectory.summarization-1-summary.json",
            "trajectory.summarization-1-questions.json",
            "trajectory.summarization-1-answers.json"
        ]
    );
    assert!(s[5]["message"].as_str().unwrap().starts_with("The previous agent answered:\n\n1. /app"));
    assert_eq!(s[6]["metrics"]["prompt_tokens"], 1700, "the post-handoff call is the step's metrics");
    let summary = read_json(&trial.join("agent/trajectory.summarization-1-summary.json"));
    assert_eq!(sources(&summary), ["user*", "agent*", "agent*", "user", "agent"]);
    assert_eq!(summary["session_id"], "overflow-summarization-1-summary");
    assert_eq!(summary["agent"]["extra"], json!({"parent_session_id": "overflow", "summarization_index": 1}));
    assert_eq!(sources(&read_json(&trial.join("agent/trajectory.summarization-1-questions.json"))), ["user", "agent"]);
    let answers = read_json(&trial.join("agent/trajectory.summarization-1-answers.json"));
    assert_eq!(sources(&answers), ["user*", "agent*", "agent*", "user*", "agent*", "user", "agent"]);
    assert_eq!(t["final_metrics"]["total_prompt_tokens"], 682 + 750 + 820 + 1700 + 850 + 850 + 500 + 100 + 700);
    assert_metrics_add_up(&trial);

    // Overflow with linear history: the trajectory splits at the handoff.
    let trial = by_session("linear");
    let first = read_json(&trial.join("agent/trajectory.json"));
    assert_eq!(sources(&first), ["user", "agent", "agent", "agent", "system"]);
    assert_eq!(first["continued_trajectory_ref"], "trajectory.cont-1.json");
    assert!(steps(&first).iter().all(|s| s.get("tool_calls").is_none()), "raw_content records no tool calls");
    assert_eq!(steps(&first)[1]["message"], scripted_reply(cmd("mkdir test_dir && seq 1 900\n", 0.3), false));
    let second = read_json(&trial.join("agent/trajectory.cont-1.json"));
    assert_eq!(sources(&second), ["user*", "user*", "agent*", "user*", "agent", "agent", "agent"]);
    assert_eq!(second["session_id"], "linear-cont-1");
    assert_eq!(second["agent"]["extra"]["continuation_index"], 1);
    assert_eq!(first["final_metrics"]["total_prompt_tokens"], 682 + 750 + 820);
    assert_metrics_add_up(&trial);

    // Proactive: the long output of the first episode enters the history with the second call,
    // and the third episode starts with the context nearly full (the pending prompt is not counted,
    // as in the reference).
    let trial = by_session("proactive");
    let t = read_json(&trial.join("agent/trajectory.json"));
    assert_eq!(sources(&t), ["user", "agent", "agent", "system", "user", "agent", "agent", "agent"]);
    assert_eq!(read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    let summary = read_json(&trial.join("agent/trajectory.summarization-1-summary.json"));
    assert_eq!(sources(&summary), ["user*", "agent*", "user", "agent"]);
    assert_metrics_add_up(&trial);

    validate_with_harbor(&job_dir);
}

/// Model limits from the server: for model names no table lists, the context the server reports
/// (vLLM's `/v1/models` `max_model_len`, else llama.cpp's `/props` `n_ctx`) makes the proactive
/// summarization fire as a `model_info` of the same size would. Each (endpoint, model) is asked
/// once per job, and each trial's config.json says where its limits came from. A model nobody
/// knows runs with the documented default, and the job's log names it.
#[tokio::test(flavor = "multi_thread")]
async fn proactive_summarization_uses_the_context_the_server_reports() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let (mut script, _) = summarization_job();
    script.models = Some(vec![ListedModel { id: "terminus-small-a".into(), max_model_len: Some(4000) }]);
    script.props_n_ctx = Some(4000);
    // A second server that says nothing about itself, for a model nobody knows.
    let quiet = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                turn(scripted_reply(cmd(PRINTF, 0.1), false), 100, 10),
                turn(scripted_reply(json!([]), true), 100, 10),
                turn(scripted_reply(json!([]), true), 100, 10),
            ],
        }],
        ..Script::default()
    };
    let quiet = MockServer::start(quiet, 0).await.unwrap();
    let small = |model: &str, session: &str| {
        agent(&format!("      session_id: {session}\n      proactive_summarization_threshold: 2000\n"))
            .replace("openai/gpt-4o", model)
    };
    let agents = [
        small("openai/terminus-small-a", "from-models"),
        small("openai/terminus-small-b", "from-props"),
        small("openai/terminus-small-b", "from-props-again"),
        agent("      session_id: unknown\n")
            .replace("openai/gpt-4o", "openai/terminus-nobody-knows")
            .replace("API_BASE", &quiet.api_base()),
    ];
    let (_dir, job_dir, code, server) = run_job("server-limits", script, &agents, &[]).await;
    assert_eq!(code, 0);
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 4);
    let by_session = |session: &str| {
        trials
            .iter()
            .find(|t| read_json(&t.join("agent/trajectory.json"))["session_id"] == session)
            .unwrap_or_else(|| panic!("no trial with session {session}"))
            .clone()
    };
    for (session, via) in
        [("from-models", "open_ai_models"), ("from-props", "llama_cpp_props"), ("from-props-again", "llama_cpp_props")]
    {
        let trial = by_session(session);
        let t = read_json(&trial.join("agent/trajectory.json"));
        assert_eq!(sources(&t), ["user", "agent", "agent", "system", "user", "agent", "agent", "agent"], "{session}");
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{session}");
        assert_eq!(result["agent_result"]["metadata"]["summarization_count"], 1, "{session}");
        let limits = &read_json(&trial.join("config.json"))["agent"]["model_limits"];
        assert_eq!(limits["max_input_tokens"], json!({"value": 4000, "source": "server", "via": via}), "{session}");
        assert_eq!(limits["max_output_tokens"], json!({"value": null, "source": "unknown"}));
        assert_eq!(result["config"]["agent"]["model_limits"], *limits, "result.json holds the same config");
        assert_metrics_add_up(&trial);
    }
    // Asked once per (endpoint, model) for the whole job, before any trial: two models here. The
    // model list is asked twice each: by the preflight (does it answer?), then for the context.
    let probes = server.probes();
    assert_eq!(probes.iter().filter(|p| *p == "GET /v1/models").count(), 4, "{probes:?}");
    assert_eq!(probes.iter().filter(|p| *p == "GET /props").count(), 2, "{probes:?}");
    assert_eq!(probes.iter().filter(|p| *p == "POST /api/show").count(), 2, "{probes:?}");
    assert_eq!(probes.iter().filter(|p| *p == "GET /openapi.json").count(), 2, "{probes:?}");
    assert!(!probes.iter().any(|p| p.contains("completions")), "not llama-cpp-python's: no overflow question");

    // Nobody knows the last model: the default context, no price, and a warning naming it.
    let trial = by_session("unknown");
    assert_eq!(read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
    let limits = &read_json(&trial.join("config.json"))["agent"]["model_limits"];
    assert_eq!(limits["max_input_tokens"], json!({"value": 32768, "source": "default"}));
    assert_eq!(limits["input_cost_per_token"], json!({"value": null, "source": "unknown"}));
    // The preflight's model list, then the four context questions.
    assert_eq!(quiet.probes().len(), 5, "the quiet server was asked too: {:?}", quiet.probes());
    let log = std::fs::read_to_string(job_dir.join("job.log")).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("context size is unknown")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains("openai/terminus-nobody-knows") && warnings[0].contains("32768"), "{}", warnings[0]);
    validate_with_harbor(&job_dir);
}

/// The agent's time limit cuts a long command; the trial is still verified.
#[tokio::test(flavor = "multi_thread")]
async fn agent_timeout_during_a_command() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let script = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                turn(scripted_reply(cmd("echo 'Hello, world!' > hello.txt\n", 0.2), false), 682, 55),
                turn(scripted_reply(cmd("sleep 5\n", 5.0), false), 100, 30),
            ],
        }],
        ..Script::default()
    };
    let agents = [agent("").replace("  - name: terminus-2\n", "  - name: terminus-2\n    override_timeout_sec: 8\n")];
    let (_dir, job_dir, code, server) = run_job("timeout", script, &agents, &[]).await;
    assert_eq!(code, 1, "the trial records an error");
    let trial = &trial_dirs(&job_dir)[0];
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["exception_info"]["exception_type"], "AgentTimeoutError");
    assert_eq!(result["exception_info"]["exception_message"], "Agent execution timed out after 8 seconds");
    // The agent ran until its limit, and the verifier only after it ended.
    let agent_secs = phase_seconds(&result, "agent_execution");
    assert!(agent_secs >= 8.0, "the agent phase lasted {agent_secs} s, its limit 8 s: {result}");
    assert!(
        time_of(&result["verifier"]["started_at"]) >= time_of(&result["agent_execution"]["finished_at"]),
        "verified after the agent phase: {result}"
    );
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "verified after the timeout");
    let t = read_json(&trial.join("agent/trajectory.json"));
    let ids = tool_call_ids(&t);
    assert_eq!(ids[..2], ["call_0_1".to_string(), "call_1_1".to_string()]);
    // Every call made, the one cut mid-command included, is in the totals.
    let calls = server.requests().len() as u64;
    assert_eq!(result["agent_result"]["n_input_tokens"].as_u64(), Some(682 + 100 * (calls - 1)));
    assert_eq!(t["final_metrics"]["total_prompt_tokens"].as_u64(), Some(682 + 100 * (calls - 1)));
    validate_with_harbor(&job_dir);
    assert_eq!(containers_of_job(&docker, read_json(&job_dir.join("result.json"))["id"].as_str().unwrap()).await, 0);
}

/// Reasoning text goes back to the model only with interleaved_thinking.
#[tokio::test(flavor = "multi_thread")]
async fn interleaved_thinking() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let mut first = turn(scripted_reply(cmd(PRINTF, 0.1), false), 100, 10);
    first.reasoning_content = Some("First reasoning step".into());
    let script = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                first,
                turn(scripted_reply(json!([]), true), 100, 10),
                turn(scripted_reply(json!([]), true), 100, 10),
            ],
        }],
        ..Script::default()
    };
    let tagged = |tag: &str, on: bool| {
        agent(&format!("      interleaved_thinking: {on}\n      llm_call_kwargs:\n        user: {tag}\n"))
    };
    let (_dir, job_dir, code, server) =
        run_job("thinking", script, &[tagged("think-on", true), tagged("think-off", false)], &[]).await;
    assert_eq!(code, 0);
    let requests = server.requests();
    let later = |tag: &str| {
        requests
            .iter()
            .filter(|r| r.body["user"] == tag && r.turn >= 1)
            .map(|r| r.body["messages"].clone())
            .collect::<Vec<Value>>()
    };
    let on = later("think-on");
    assert!(!on.is_empty());
    for messages in &on {
        let assistant = messages.as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
        assert_eq!(assistant["reasoning_content"], "First reasoning step");
    }
    let off = later("think-off");
    assert!(!off.is_empty());
    for messages in &off {
        assert!(messages.as_array().unwrap().iter().all(|m| m.get("reasoning_content").is_none()));
    }
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 2, "one trial per agent");
    for trial in trials {
        let t = read_json(&trial.join("agent/trajectory.json"));
        assert_eq!(steps(&t)[1]["reasoning_content"], "First reasoning step");
    }
    validate_with_harbor(&job_dir);
}

/// Errors that cannot succeed on a second try are not retried, transient ones are, and a
/// cancelled call is not retried either.
#[tokio::test(flavor = "multi_thread")]
async fn no_retry_on_permanent_errors_or_cancellation() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let error =
        |status: u16, body: Value| Turn { status: Some(status), body: Some(body.to_string()), ..Turn::default() };
    let tagged_rule = |tag: &str, reply: Turn| Rule {
        when_body: Some(format!("\"user\":\"{tag}\"")),
        when_last: None,
        when_any: None,
        reply,
    };
    let script = Script {
        rules: vec![
            tagged_rule(
                "overflow",
                error(400, json!({"error": {"message": "too long", "code": "context_length_exceeded"}})),
            ),
            tagged_rule("flaky", error(500, json!({"error": {"message": "boom"}}))),
            tagged_rule("unauthorized", error(401, json!({"error": {"message": "bad key"}}))),
        ],
        ..Script::default()
    };
    let tagged = |tag: &str, extra: &str| agent(&format!("{extra}      llm_call_kwargs:\n        user: {tag}\n"));
    let agents =
        [tagged("overflow", "      enable_summarize: false\n"), tagged("flaky", ""), tagged("unauthorized", "")];
    let (_dir, job_dir, code, server) = run_job("no-retry", script, &agents, &[]).await;
    assert_eq!(code, 1);
    let count = |tag: &str| server.requests().iter().filter(|r| r.body["user"] == tag).count();
    assert_eq!(count("overflow"), 1, "a context overflow with summarization off is not retried");
    assert_eq!(count("unauthorized"), 1, "an authentication error is not retried");
    assert_eq!(count("flaky"), 3, "a server error is retried (3 attempts in all)");
    let mut types: Vec<String> = trial_dirs(&job_dir)
        .iter()
        .map(|t| read_json(&t.join("result.json"))["exception_info"]["exception_type"].as_str().unwrap().to_string())
        .collect();
    types.sort();
    // A 500 is LiteLLM's InternalServerError, as Harbor writes it.
    assert_eq!(types, ["AuthenticationError", "ContextLengthExceededError", "InternalServerError"]);

    // Cancellation: the model hangs; SIGINT reaches the CLI; the call is not retried.
    let slow = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![Turn { delay_ms: Some(60_000), ..turn(scripted_reply(json!([]), true), 1, 1) }],
        }],
        ..Script::default()
    };
    let server = MockServer::start(slow, 0).await.unwrap();
    let dir = temp_dir("cancel");
    let agents = agent("").replace("API_BASE", &server.api_base());
    let path = write_job(dir.path(), "cancel", "", &agents, &[example("hello-world")]);
    let mut child = std::process::Command::new(crate::support::terminus_bin())
        .args(["run", "-c"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::wait_until("the first model call", std::time::Duration::from_secs(60), || {
        !server.requests().is_empty()
    })
    .await;
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status_bounded().unwrap().success());
    let status = tokio::task::spawn_blocking(move || child.wait_bounded()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(server.requests().len(), 1, "a cancelled call is not retried");
    let job_dir = dir.path().join("cancel");
    let trial = &trial_dirs(&job_dir)[0];
    assert_eq!(read_json(&trial.join("result.json"))["exception_info"]["exception_type"], "CancelledError");
    assert_eq!(containers_of_job(&docker, read_json(&job_dir.join("result.json"))["id"].as_str().unwrap()).await, 0);
}

/// `early_return`: a command's wait ends once the shell is idle again instead of lasting the
/// whole requested duration (off by default, as in the reference).
#[tokio::test(flavor = "multi_thread")]
async fn early_return_ends_waits_when_the_shell_is_idle() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let script = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                turn(scripted_reply(cmd("sleep 1; printf 'Hello, world!\\n' > hello.txt\n", 20.0), false), 10, 5),
                turn(scripted_reply(json!([]), true), 10, 5),
                turn(scripted_reply(json!([]), true), 10, 5),
            ],
        }],
        ..Script::default()
    };
    let agents =
        [agent("      early_return: true\n"), agent("      early_return: true\n      record_terminal_session: true\n")];
    // The second agent's session is recorded (a `clear` at set-up, a follower of the pane log).
    let agents = [agents[0].clone(), agents[1].replace("      record_terminal_session: false\n", "")];
    let (_dir, job_dir, code, _server) = run_job("early", script, &agents, &[]).await;
    assert_eq!(code, 0);
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), agents.len(), "one trial per agent");
    for trial in trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
        let timings = &result["agent_result"]["metadata"]["timings"];
        assert_eq!(timings["requested_wait_sec"], 20.0);
        let waited = timings["waited_sec"].as_f64().unwrap();
        assert!((1.0..20.0).contains(&waited), "waited {waited} s for a 1 s command, 20 s asked");
        // The whole agent phase, three model calls included, was shorter than the one wait asked.
        let agent_secs = phase_seconds(&result, "agent_execution");
        assert!(agent_secs < 20.0, "the 20 s wait was not cut short: the agent phase took {agent_secs} s");
    }
}

/// The script of a trial that overflows twice: two summarizations, each with its three
/// subagents, the main chat served in arrival order across both handoffs.
fn two_summarizations() -> Script {
    let overflow = Turn {
        status: Some(400),
        body: Some(json!({"error": {"message": "This model's maximum context length is 7000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string()),
        ..Turn::default()
    };
    let rule = |when_last: &str, reply: Turn| Rule {
        when_last: Some(when_last.into()),
        when_any: None,
        when_body: None,
        reply,
    };
    Script {
        rules: vec![
            rule("hand your work over", turn("Summary: made a directory and echoed.", 500, 200)),
            rule("picking up work from a previous AI agent", turn("1. Where?\n2. What?", 100, 20)),
            rule("The next agent has a few questions", turn("1. /app\n2. hello.txt", 700, 120)),
        ],
        sequential: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                turn(scripted_reply(cmd("mkdir test_dir\n", 0.1), false), 682, 60),
                turn(scripted_reply(cmd("echo test1\n", 0.1), false), 750, 50),
                overflow.clone(),
                turn(scripted_reply(cmd("echo test2\n", 0.1), false), 900, 50),
                turn(scripted_reply(cmd("echo test3\n", 0.1), false), 950, 50),
                overflow,
                turn(scripted_reply(cmd(PRINTF, 0.1), false), 1000, 40),
                turn(scripted_reply(json!([]), true), 1050, 30),
                turn(scripted_reply(json!([]), true), 1100, 30),
            ],
        }],
        ..Script::default()
    }
}

/// Summarization chains past the first link: two overflows in one trial make
/// `summarization-1-*` and `summarization-2-*` files, each named by its own system step; under
/// linear_history the segments chain trajectory.json → cont-1 → cont-2; the metrics of every
/// subagent set add up to the trial's totals.
#[tokio::test(flavor = "multi_thread")]
async fn two_summarizations_in_one_trial_chain_their_files_and_segments() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let small = "      model_info:\n        max_input_tokens: 7000\n        max_output_tokens: 4096\n      proactive_summarization_threshold: 0\n";

    // Default layout: one trajectory, two system steps, two sets of subagent files.
    let agents = [agent(&format!("{small}      session_id: chain\n"))];
    let (_dir, job_dir, code, _server) = run_job("chain", two_summarizations(), &agents, &[]).await;
    assert_eq!(code, 0);
    let trial = trial_dirs(&job_dir).remove(0);
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
    assert_eq!(result["agent_result"]["metadata"]["summarization_count"], 2, "{result}");
    let t = read_json(&trial.join("agent/trajectory.json"));
    let systems: Vec<&Value> = steps(&t).iter().filter(|s| s["source"] == "system").collect();
    assert_eq!(systems.len(), 2, "{:?}", sources(&t));
    for (n, system) in systems.iter().enumerate() {
        let paths: Vec<&str> = system["observation"]["results"][0]["subagent_trajectory_ref"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["trajectory_path"].as_str().unwrap())
            .collect();
        let n = n + 1;
        assert_eq!(
            paths,
            [
                format!("trajectory.summarization-{n}-summary.json"),
                format!("trajectory.summarization-{n}-questions.json"),
                format!("trajectory.summarization-{n}-answers.json"),
            ]
        );
        for part in ["summary", "questions", "answers"] {
            let sub = read_json(&trial.join(format!("agent/trajectory.summarization-{n}-{part}.json")));
            assert_eq!(sub["session_id"], format!("chain-summarization-{n}-{part}"));
            assert_eq!(sub["agent"]["extra"]["summarization_index"], n);
        }
    }
    // Six subagent calls (two sets), each 500 + 100 + 700 prompt tokens, besides the seven main calls.
    assert_eq!(
        t["final_metrics"]["total_prompt_tokens"],
        682 + 750 + 900 + 950 + 1000 + 1050 + 1100 + 2 * (500 + 100 + 700)
    );
    assert_metrics_add_up(&trial);

    // linear_history: trajectory.json → cont-1 → cont-2, each segment its own session.
    let agents =
        [agent(&format!("{small}      session_id: linear\n      trajectory_config:\n        linear_history: true\n"))];
    let (_dir, job_dir, code, _server) = run_job("chain-linear", two_summarizations(), &agents, &[]).await;
    assert_eq!(code, 0);
    let trial = trial_dirs(&job_dir).remove(0);
    let first = read_json(&trial.join("agent/trajectory.json"));
    assert_eq!(first["continued_trajectory_ref"], "trajectory.cont-1.json");
    assert_eq!(first["session_id"], "linear");
    let second = read_json(&trial.join("agent/trajectory.cont-1.json"));
    assert_eq!(second["continued_trajectory_ref"], "trajectory.cont-2.json", "the chain goes on past cont-1");
    assert_eq!(second["session_id"], "linear-cont-1");
    let third = read_json(&trial.join("agent/trajectory.cont-2.json"));
    assert!(third.get("continued_trajectory_ref").is_none(), "the last segment ends the chain");
    assert_eq!(third["session_id"], "linear-cont-2");
    assert!(trial.join("agent/trajectory.summarization-2-answers.json").is_file());
    assert_metrics_add_up(&trial);
}
