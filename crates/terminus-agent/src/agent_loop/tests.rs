//! The episode loop's unit tests: a whole loop driven event by event, without I/O.

use std::sync::Arc;

use super::*;
use crate::prompts::Format;
use crate::summarize::SubagentCall;
use crate::trajectory::AtifVersion;
use terminus_core::texts::Texts;

fn settings() -> LoopSettings {
    LoopSettings { max_turns: 10, ..LoopSettings::new("openai/gpt-4o", "s") }
}

fn reply(content: &str, prompt_tokens: u64) -> LlmResponse {
    LlmResponse {
        content: content.into(),
        model_name: Some("gpt-4o".into()),
        usage: Some(Usage { prompt_tokens, completion_tokens: 10, cache_tokens: 0, cost_usd: 0.001, estimated: false }),
        ..Default::default()
    }
}

const RUN: &str = r#"{"analysis": "empty dir", "plan": "write file", "commands": [{"keystrokes": "echo hi > f\n", "duration": 120}], "task_complete": false}"#;
const DONE: &str = r#"{"analysis": "done", "plan": "", "commands": [], "task_complete": true}"#;

fn turn(agent: &mut AgentLoop, content: &str, output: &str) -> Next {
    agent.begin_episode().expect("episode");
    match agent.on_response(reply(content, 100), 5.0, true) {
        Reply::Reprompt => Next::Continue,
        Reply::Execute(_) => agent.on_terminal_output(output),
    }
}

#[test]
fn completion_needs_two_claims_in_a_row() {
    let mut agent = AgentLoop::new(settings());
    agent.start("Write f", "root@x:/app# ");
    assert_eq!(agent.begin_episode(), Some(0));
    let Reply::Execute(commands) = agent.on_response(reply(RUN, 100), 5.0, true) else { panic!("expected commands") };
    assert_eq!(commands, vec![Command { keystrokes: "echo hi > f\n".into(), duration: 60.0 }]);
    assert_eq!(agent.on_terminal_output("New Terminal Output:\nroot@x:/app# echo hi > f\n"), Next::Continue);
    assert_eq!(turn(&mut agent, DONE, "out"), Next::Continue);
    assert!(agent.pending_completion());
    assert!(agent.prompt().starts_with("The terminal now shows:\nout\n"));
    assert_eq!(turn(&mut agent, DONE, "out"), Next::Done);
    assert_eq!(agent.n_episodes(), 3);
    assert_eq!(agent.api_request_times_msec().len(), 3);

    let trajectory = agent.trajectory(true);
    let sources: Vec<Source> = trajectory.steps.iter().map(|s| s.source).collect();
    assert_eq!(sources, vec![Source::User, Source::Agent, Source::Agent, Source::Agent]);
    let first = &trajectory.steps[1];
    assert_eq!(first.message, "Analysis: empty dir\nPlan: write file");
    let calls = first.tool_calls.as_ref().unwrap();
    assert_eq!(calls[0].tool_call_id, "call_0_1");
    assert_eq!(calls[0].arguments["duration"], json!(60), "an integer, as Python's min(120.0, 60)");
    assert!(agent.trajectory(true).to_json().contains("\"duration\": 60\n"));
    assert_eq!(first.metrics.as_ref().unwrap().prompt_tokens, Some(100));
    assert_eq!(trajectory.steps[2].tool_calls.as_ref().unwrap()[0].tool_call_id, "call_1_task_complete");
    let observed = &first.observation.as_ref().unwrap().results[0];
    assert_eq!(observed.source_call_id.as_deref(), Some("call_0_1"), "one command: its output is linked to it");
    let done = &trajectory.steps[2].observation.as_ref().unwrap().results[0];
    assert_eq!(done.source_call_id, None, "no command, no link");
    let metrics = trajectory.final_metrics.unwrap();
    assert_eq!(
        (metrics.total_prompt_tokens, metrics.total_completion_tokens, metrics.total_cached_tokens),
        (Some(300), Some(30), Some(0))
    );
}

/// The provider's own reply fields go into `rollout_details[].extra`, one list per field with
/// a value per call that had any; a batch of commands shares one output, so it gets no link.
#[test]
fn provider_fields_are_kept_per_call_and_batches_get_no_source_call_id() {
    let mut agent = AgentLoop::new(settings());
    agent.start("Write f", "root@x:/app# ");
    let fields = |v: Value| Some(v.as_object().unwrap().clone());
    let two = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "a\n", "duration": 0.1}, {"keystrokes": "b\n", "duration": 0.1}], "task_complete": false}"#;
    for (content, extra) in [(two, fields(json!({"stop_reason": 7}))), (RUN, None), (RUN, fields(json!({"x": "y"})))] {
        agent.begin_episode().unwrap();
        let Reply::Execute(_) =
            agent.on_response(LlmResponse { provider_extra: extra, ..reply(content, 10) }, 1.0, true)
        else {
            panic!("expected commands")
        };
        agent.on_terminal_output("out");
    }
    assert_eq!(agent.rollout_details(), [json!({"extra": {"stop_reason": [7, null], "x": [null, "y"]}})]);
    let trajectory = agent.trajectory(false);
    assert_eq!(trajectory.steps[1].observation.as_ref().unwrap().results[0].source_call_id, None);
    assert_eq!(
        trajectory.steps[2].observation.as_ref().unwrap().results[0].source_call_id.as_deref(),
        Some("call_1_1")
    );
}

#[test]
fn atif_v1_6_has_no_document_ids_or_call_counts() {
    let mut agent = AgentLoop::new(LoopSettings { atif: AtifVersion::V1_6, ..settings() });
    agent.start("t", "");
    turn(&mut agent, RUN, "o");
    let trajectory = agent.trajectory(true);
    assert_eq!(trajectory.schema_version, "ATIF-v1.6");
    let text = trajectory.to_json();
    assert!(!text.contains("trajectory_id") && !text.contains("llm_call_count"), "{text}");
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    turn(&mut agent, RUN, "o");
    let text = agent.trajectory(true).to_json();
    assert!(text.contains("\"schema_version\": \"ATIF-v1.8\""), "{text}");
    assert!(text.contains("\"llm_call_count\": 1"), "{text}");
    // Harbor's field order: the document id right after the session's.
    let (session, id, agent_at) = (text.find("session_id"), text.find("trajectory_id"), text.find("\"agent\""));
    assert!(session < id && id < agent_at, "{text}");
}

#[test]
fn a_step_without_usage_still_has_zero_metrics() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    for content in [RUN, "no json"] {
        agent.begin_episode();
        if agent.on_response(LlmResponse { content: content.into(), ..Default::default() }, 1.0, true)
            != Reply::Reprompt
        {
            agent.on_terminal_output("");
        }
        let metrics = agent.steps().last().unwrap().metrics.clone().expect("always written");
        assert_eq!(
            (metrics.prompt_tokens, metrics.completion_tokens, metrics.cached_tokens, metrics.cost_usd),
            (Some(0), Some(0), None, None)
        );
    }
}

#[test]
fn llm_kwargs_go_under_the_call_kwargs_and_into_the_record() {
    let map = |v: Value| v.as_object().unwrap().clone();
    let llm_kwargs = map(json!({"top_p": 0.9, "temperature": 0.1, "seed": 7, "extra_body": {"a": 1, "b": 1}}));
    let llm_call_kwargs = map(json!({"top_p": 0.5, "extra_body": {"b": 2}}));
    let mut agent = AgentLoop::new(LoopSettings {
        temperature: Some(0.7),
        llm_kwargs: llm_kwargs.clone(),
        llm_call_kwargs,
        ..settings()
    });
    agent.start("t", "");
    let expected = map(json!({"top_p": 0.5, "seed": 7, "extra_body": {"a": 1, "b": 2}}));
    let request = agent.request();
    assert_eq!(request.extra, expected, "the agent's temperature is not replaced");
    assert_eq!(request.temperature, Some(0.7), "the agent's temperature wins");
    let mut unset = AgentLoop::new(LoopSettings { llm_kwargs: llm_kwargs.clone(), ..settings() });
    unset.start("t", "");
    assert_eq!(unset.request().temperature, Some(0.1), "unset, `llm_kwargs`' temperature is sent");
    assert!(unset.trajectory(false).agent.extra.unwrap().get("temperature").is_none(), "and not recorded");
    assert_eq!(agent.trajectory(false).agent.extra.unwrap()["llm_kwargs"], Value::Object(llm_kwargs));
    turn(&mut agent, RUN, "");
    assert_eq!(agent.begin_summarization().unwrap().llm_call_kwargs, expected, "subagents send them too");
    let plain = AgentLoop::new(settings());
    assert!(!plain.trajectory(false).agent.extra.unwrap().contains_key("llm_kwargs"), "only when given");
}

#[test]
fn a_session_id_the_user_gave_is_sent_in_extra_body_and_as_x_session_id() {
    let map = |v: Value| v.as_object().unwrap().clone();
    let llm_call_kwargs = map(json!({"extra_body": {"session_id": "mine", "b": 2}, "extra_headers": {"X-A": "1"}}));
    let given = LoopSettings { send_session_id: true, llm_call_kwargs, ..settings() };
    let sid = given.session_id.clone();
    let expected =
        map(json!({"extra_body": {"session_id": sid, "b": 2}, "extra_headers": {"X-A": "1", "X-Session-ID": sid}}));
    assert_eq!(given.request_extra(), expected, "set last, as the reference's LiteLLM does");
    assert!(settings().request_extra().is_empty(), "a generated id is not sent");
    // `session_id_headers` carry the id whoever made it, in headers only.
    let named = LoopSettings { session_id_headers: vec!["Modal-Session".into(), "X-Trace".into()], ..settings() };
    let expected = map(json!({"extra_headers": {"Modal-Session": "s", "X-Trace": "s"}}));
    assert_eq!(named.request_extra(), expected);
}

#[test]
fn a_prompt_template_replaces_the_built_in_first_prompt() {
    let template =
        terminus_core::template::PromptTemplate::parse("T: {instruction}\n{{x}}\n{terminal_state}\n").unwrap();
    let texts = (*Texts::ours()).clone().with(terminus_core::texts::TextName::PromptJson, template);
    let mut agent = AgentLoop::new(LoopSettings { texts: Arc::new(texts), ..settings() });
    agent.start("Do {it}", "$ ");
    assert_eq!(agent.prompt(), "T: Do {it}\n{x}\n$ \n");
    assert_eq!(agent.steps()[0].message, agent.prompt());
}

#[test]
fn waits_are_capped_at_60_and_nan_or_negative_waits_are_none() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    agent.begin_episode();
    let content = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "a\n", "duration": NaN}, {"keystrokes": "b\n", "duration": -3}, {"keystrokes": "c\n", "duration": 61.5}, {"keystrokes": "d\n", "duration": 2.5}]}"#;
    let Reply::Execute(commands) = agent.on_response(reply(content, 100), 1.0, true) else {
        panic!("expected commands")
    };
    let waits: Vec<f64> = commands.iter().map(|c| c.duration).collect();
    assert_eq!(waits, [0.0, 0.0, 60.0, 2.5]);
}

#[test]
fn a_claim_followed_by_work_resets_the_pending_completion() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    turn(&mut agent, DONE, "");
    assert!(agent.pending_completion());
    turn(&mut agent, RUN, "");
    assert!(!agent.pending_completion());
    assert_eq!(turn(&mut agent, DONE, ""), Next::Continue);
}

#[test]
fn parse_errors_are_fed_back_without_touching_completion() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    turn(&mut agent, DONE, "");
    agent.begin_episode();
    assert_eq!(agent.on_response(reply("I think we should run ls", 1), 1.0, true), Reply::Reprompt);
    assert!(agent.pending_completion(), "a parse error leaves the pending completion alone");
    assert!(agent.prompt().starts_with("Your last reply could not be read:\nERROR: No valid JSON found in response\nWARNINGS: - No valid JSON object found"));
    let step = agent.steps().last().unwrap();
    assert_eq!(step.message, "I think we should run ls");
    assert!(step.tool_calls.is_none());
    assert_eq!(agent.begin_episode(), Some(2));
    let request = agent.request();
    assert_eq!(request.messages.len(), 5);
    assert_eq!(request.messages[3].content, "I think we should run ls");
    // The second claim in a row (ignoring the parse error) ends the run.
    assert_eq!(agent.on_response(reply(DONE, 1), 1.0, true), Reply::Execute(vec![]));
    assert_eq!(agent.on_terminal_output(""), Next::Done);
}

#[test]
fn warnings_prefix_the_observation() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    turn(&mut agent, &format!("ok {RUN}"), "screen");
    assert_eq!(
        agent.prompt(),
        "Your last reply was carried out, but note:\nWARNINGS: - Extra text detected before JSON object\n\nscreen"
    );
}

#[test]
fn max_turns_stops_the_loop() {
    let mut agent = AgentLoop::new(LoopSettings { max_turns: 1, ..settings() });
    agent.start("t", "");
    turn(&mut agent, RUN, "");
    assert!(agent.begin_episode().is_none());
}

#[test]
fn long_output_is_limited_once() {
    let output = "x".repeat(32_000);
    let once = limit_output(&output, MAX_OUTPUT_BYTES);
    let twice = limit_output(&once, MAX_OUTPUT_BYTES);
    assert_ne!(once, twice, "a second limiting would show: it cuts the first marker out");
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    turn(&mut agent, RUN, &output);
    // The observation is the output limited one time: the first 5,000 and last 5,000 bytes
    // around one marker that counts the 22,000 bytes of the output itself.
    assert_eq!(agent.prompt(), once);
    assert_eq!(agent.prompt().matches("interior bytes omitted").count(), 1, "{}", agent.prompt());
    assert!(agent.prompt().contains("[... output limited to 10000 bytes; 22000 interior bytes omitted ...]"));
    let observation = &agent.steps().last().unwrap().observation;
    assert_eq!(serde_json::to_value(observation).unwrap()["results"][0]["content"], once.as_str());
    // The reference's view limits it twice (as the reference does): what the default one does not.
    let mut reference = AgentLoop::new(LoopSettings { reference: true, ..settings() });
    reference.start("t", "");
    turn(&mut reference, RUN, &output);
    assert_eq!(reference.prompt(), twice);
}

#[test]
fn xml_format_and_raw_content() {
    let mut agent = AgentLoop::new(LoopSettings { format: Format::Xml, raw_content: true, ..settings() });
    agent.start("t", "");
    assert!(agent.prompt().contains("<response>"));
    let xml = "<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=\"0.1\">ls\n</keystrokes></commands></response>";
    turn(&mut agent, xml, "out");
    let step = agent.steps().last().unwrap();
    assert_eq!(step.message, xml);
    assert!(step.tool_calls.is_none());
    assert_eq!(agent.trajectory(false).agent.extra.unwrap()["parser"], "xml");
}

#[test]
fn interleaved_thinking_keeps_reasoning_in_the_history() {
    for on in [true, false] {
        let mut agent = AgentLoop::new(LoopSettings { interleaved_thinking: on, ..settings() });
        agent.start("t", "");
        agent.begin_episode();
        let mut response = reply(RUN, 1);
        response.reasoning_content = Some("First reasoning step".into());
        agent.on_response(response, 1.0, true);
        agent.on_terminal_output("");
        agent.begin_episode();
        let request = agent.request();
        assert_eq!(request.messages[1].reasoning_content.is_some(), on);
        assert_eq!(agent.steps()[1].reasoning_content.as_deref(), Some("First reasoning step"));
    }
}

#[test]
fn truncated_replies_are_salvaged_or_explained() {
    let mut agent = AgentLoop::new(LoopSettings { output_limit: Some(4096), ..settings() });
    agent.start("t", "");
    agent.begin_episode();
    let cut = &RUN[..RUN.len() - 10];
    let salvaged = agent.salvage(cut).expect("the commands are complete");
    assert!(matches!(
        agent.on_response(LlmResponse { content: salvaged, ..Default::default() }, 1.0, true),
        Reply::Execute(_)
    ));
    agent.on_terminal_output("");
    agent.begin_episode();
    let hopeless = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "cat > f <<EOF\nlots"#;
    assert_eq!(agent.salvage(hopeless), None);
    let usage = Usage { prompt_tokens: 50, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0, estimated: false };
    assert!(agent.on_truncated(hopeless, Some(&usage)));
    assert_eq!(agent.prompt().matches("4096 tokens").count(), 3);
    assert_eq!(agent.chat().last().unwrap().content, hopeless);
    assert_eq!(agent.totals().output_tokens, 4096, "the cut-off call is counted");
    // The same episode continues; its step carries the cut-off call's tokens too.
    agent.on_response(reply(RUN, 100), 1.0, true);
    agent.on_terminal_output("");
    assert_eq!(agent.steps().last().unwrap().metrics.as_ref().unwrap().completion_tokens, Some(4096 + 10));
    // ATIF v1.7 on: that step's metrics add up two calls; the salvaged one was one call.
    let counts: Vec<Option<u32>> = agent.steps().iter().map(|s| s.llm_call_count).collect();
    assert_eq!(counts, [None, Some(1), Some(2)]);
    for _ in 0..MAX_CONSECUTIVE_TRUNCATIONS {
        assert!(agent.on_truncated(hopeless, None));
    }
    assert!(!agent.on_truncated(hopeless, None));
}

/// A finished summarization of `job`, its three calls counted as they would be reported.
fn outcome(agent: &mut AgentLoop, job: &SummaryJob) -> SummaryOutcome {
    let call = |prompt: &str, content: &str, tokens: u64| SubagentCall {
        prompt: prompt.into(),
        response: LlmResponse {
            content: content.into(),
            usage: Some(Usage {
                prompt_tokens: tokens,
                completion_tokens: 20,
                cache_tokens: 0,
                cost_usd: 0.0,
                estimated: false,
            }),
            ..Default::default()
        },
        elapsed_msec: 2.0,
        timestamp: "t".into(),
    };
    let (summary_prompt, _) = job.summary_request();
    let summary = call(&summary_prompt, "SUMMARY", 500);
    let (question_prompt, _) = job.questions_request("SUMMARY", "screen");
    let (questions, answers) = (call(&question_prompt, "Q?", 100), call("a", "ANSWERS", 700));
    for done in [&summary, &questions, &answers] {
        agent.record_subagent_call(done.response.usage.as_ref(), done.elapsed_msec);
    }
    job.outcome(None, &questions, &answers)
}

#[test]
fn summarization_replaces_the_chat_and_records_refs_then_handoff() {
    let mut agent = AgentLoop::new(settings());
    agent.start("Write f", "");
    turn(&mut agent, RUN, "o1");
    turn(&mut agent, RUN, "o2");
    agent.begin_episode();
    let job = agent.begin_summarization().unwrap();
    assert_eq!(job.index, 1);
    assert_eq!(job.copied_steps.len(), 2, "1 + (4 - 1) / 2 steps");
    assert!(job.copied_steps.iter().all(|s| s.is_copied_context == Some(true)));
    let outcome = outcome(&mut agent, &job);
    agent.apply_summary(&outcome);
    assert_eq!(agent.chat().len(), 3);
    assert_eq!(agent.chat()[2].content, "Q?");
    assert!(agent.prompt().starts_with("The previous agent answered:"));
    agent.on_response(reply(RUN, 100), 1.0, true);
    agent.on_terminal_output("o3");
    let sources: Vec<Source> = agent.steps().iter().map(|s| s.source).collect();
    assert_eq!(sources, vec![Source::User, Source::Agent, Source::Agent, Source::System, Source::User, Source::Agent]);
    let system = agent.steps().iter().find(|s| s.source == Source::System).unwrap();
    assert_eq!(
        system.extra.as_ref().unwrap()["context_management"],
        json!({"type": "compaction", "boundary": "replace"}),
        "the reference marks the compaction"
    );
    let system = &agent.steps()[3];
    assert_eq!(system.observation.as_ref().unwrap().results[0].subagent_trajectory_ref.as_ref().unwrap().len(), 3);
    assert_eq!(agent.summarization_count(), 1);
    assert_eq!(agent.subagent_metrics().input_tokens, 1300);
    assert_eq!(agent.final_totals().input_tokens, 300 + 1300);
    assert_eq!(agent.api_request_times_msec().len(), 3 + 3);
    assert_eq!(agent.trajectory(true).final_metrics.unwrap().total_prompt_tokens, Some(1600));
    assert_eq!(agent.trajectory(false).final_metrics.unwrap().total_prompt_tokens, Some(300));
}

#[test]
fn linear_history_splits_the_trajectory() {
    let mut agent = AgentLoop::new(LoopSettings { linear_history: true, raw_content: true, ..settings() });
    agent.start("Write f", "");
    turn(&mut agent, RUN, "o1");
    agent.begin_episode();
    let job = agent.begin_summarization().unwrap();
    let outcome = outcome(&mut agent, &job);
    agent.apply_summary(&outcome);
    agent.on_response(reply(RUN, 100), 1.0, true);
    agent.on_terminal_output("o2");
    let segments = agent.take_finished_segments();
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].file, "trajectory.json");
    assert_eq!(segments[0].trajectory.continued_trajectory_ref.as_deref(), Some("trajectory.cont-1.json"));
    let sources: Vec<Source> = segments[0].trajectory.steps.iter().map(|s| s.source).collect();
    assert_eq!(sources, vec![Source::User, Source::Agent, Source::System]);
    assert_eq!(agent.segment_file(), "trajectory.cont-1.json");
    let current = agent.trajectory(true);
    assert_eq!(current.session_id.as_deref(), Some("s-cont-1"));
    // Each segment is a document of its own.
    let (closed, open) =
        (segments[0].trajectory.trajectory_id.clone().unwrap(), current.trajectory_id.clone().unwrap());
    assert_ne!(closed, open);
    assert_eq!(agent.trajectory(false).trajectory_id.as_deref(), Some(open.as_str()), "stable within a segment");
    assert_eq!(current.steps.iter().filter_map(|s| s.llm_call_count).collect::<Vec<_>>(), [1], "copies count none");
    assert_eq!(current.agent.extra.as_ref().unwrap()["continuation_index"], 1);
    let shape: Vec<(Source, Option<bool>)> = current.steps.iter().map(|s| (s.source, s.is_copied_context)).collect();
    assert_eq!(
        shape,
        vec![
            (Source::User, Some(true)),
            (Source::User, Some(true)),
            (Source::Agent, Some(true)),
            (Source::User, Some(true)),
            (Source::Agent, None)
        ]
    );
}

#[test]
fn an_empty_chat_handoff_in_linear_history_closes_no_segment() {
    let mut agent = AgentLoop::new(LoopSettings { linear_history: true, raw_content: true, ..settings() });
    agent.start("Write f", "");
    agent.begin_episode();
    // The first call overflowed: nothing to summarise, the instruction is the handoff.
    assert!(agent.begin_summarization().is_none());
    agent.handoff_instruction();
    agent.on_response(reply(RUN, 100), 1.0, true);
    agent.on_terminal_output("o");
    let segments = agent.take_finished_segments();
    assert!(
        segments.iter().all(|c| c.trajectory.continued_trajectory_ref.as_deref() != Some(c.file.as_str())),
        "no segment points at itself"
    );
    assert!(segments.is_empty(), "no summarization, no new file");
    assert_eq!(agent.segment_file(), "trajectory.json");
    let current = agent.trajectory(true);
    assert_eq!(current.continued_trajectory_ref, None);
    assert_eq!(current.session_id.as_deref(), Some("s-cont-0"), "the reference's session id");
    let shape: Vec<(Source, Option<bool>)> = current.steps.iter().map(|s| (s.source, s.is_copied_context)).collect();
    assert_eq!(shape, vec![(Source::User, Some(true)), (Source::Agent, None)]);
}

#[test]
fn proactive_summary_and_unwinding_follow_the_token_count() {
    let mut agent =
        AgentLoop::new(LoopSettings { context_limit: 5000, proactive_summarization_threshold: 8000, ..settings() });
    agent.start("t", "");
    assert!(!agent.wants_proactive_summary(), "nothing to summarise yet");
    turn(&mut agent, RUN, "o");
    assert!(agent.wants_proactive_summary());
    let mut off = AgentLoop::new(LoopSettings { enable_summarize: false, context_limit: 10, ..settings() });
    assert!(!off.wants_proactive_summary());

    let mut agent = AgentLoop::new(LoopSettings { context_limit: 4500, ..settings() });
    agent.start("t", "");
    for _ in 0..4 {
        turn(&mut agent, RUN, &"word ".repeat(200));
    }
    assert_eq!(agent.chat().len(), 8);
    let dropped = agent.unwind();
    assert!(dropped >= 2);
    assert!(!agent.chat().is_empty(), "the first message is never dropped");
    assert_eq!(agent.chat()[0].role, "user");
    let mut tiny = AgentLoop::new(LoopSettings { context_limit: 1, ..settings() });
    tiny.start("t", "");
    turn(&mut tiny, RUN, "o");
    tiny.unwind();
    assert_eq!(tiny.chat().len(), 1);
}

#[test]
fn metadata_carries_the_registers() {
    let mut agent = AgentLoop::new(LoopSettings { store_all_messages: true, ..settings() });
    agent.set_recording_started(Instant::now());
    agent.start("t", "");
    turn(&mut agent, RUN, "o");
    let metadata = agent.metadata();
    assert_eq!(metadata["n_episodes"], 1);
    assert_eq!(metadata["summarization_count"], 0);
    assert_eq!(metadata["api_request_times_msec"].as_array().unwrap().len(), 1);
    assert_eq!(metadata["all_messages"].as_array().unwrap().len(), 2);
    assert_eq!(agent.asciinema_markers()[0].1, "Episode 0: 1 commands");
}

#[test]
fn rollout_details_are_kept_per_call() {
    let mut agent = AgentLoop::new(settings());
    agent.start("t", "");
    assert!(agent.rollout_details().is_empty());
    for n in 0..2u64 {
        agent.begin_episode();
        let mut response = reply(RUN, 1);
        response.prompt_token_ids = Some(vec![n, n + 1]);
        response.completion_token_ids = Some(vec![100 + n]);
        response.logprobs = Some(vec![-0.5]);
        agent.on_response(response, 1.0, true);
        agent.on_terminal_output("");
    }
    let details = agent.rollout_details();
    assert_eq!(details.len(), 1, "one entry for the main chat");
    assert_eq!(details[0]["prompt_token_ids"], json!([[0, 1], [1, 2]]));
    assert_eq!(details[0]["completion_token_ids"], json!([[100], [101]]));
    assert_eq!(details[0]["logprobs"], json!([[-0.5], [-0.5]]));
    let metrics = agent.steps()[1].metrics.clone().unwrap();
    assert_eq!(metrics.completion_token_ids, Some(vec![100]));
}
