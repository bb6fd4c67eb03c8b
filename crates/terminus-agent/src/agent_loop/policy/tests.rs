//! Unit tests of the loop's policy: the next action after each event.

use terminus_core::llm::Usage;

use super::*;
use crate::agent_loop::LoopSettings;
use crate::trajectory::Source;

const RUN: &str = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.5}, {"keystrokes": "pwd\n", "duration": 0.1}], "task_complete": false}"#;
const DONE: &str = r#"{"analysis": "done", "plan": "", "commands": [], "task_complete": true}"#;

fn settings() -> LoopSettings {
    LoopSettings { max_turns: 20, ..LoopSettings::new("openai/gpt-4o", "s") }
}

fn reply(content: &str) -> Result<LlmResponse, LlmError> {
    Ok(LlmResponse {
        content: content.into(),
        usage: Some(Usage {
            prompt_tokens: 100,
            completion_tokens: 10,
            cache_tokens: 0,
            cost_usd: 0.01,
            estimated: false,
        }),
        debug: Some("{\"request\": \"r\"}".into()),
        ..LlmResponse::default()
    })
}

fn overflow() -> Result<LlmResponse, LlmError> {
    Err(LlmError::ContextLengthExceeded("too long".into()))
}

fn call(content: &str, tokens: u64) -> SubagentCall {
    SubagentCall {
        prompt: "p".into(),
        response: LlmResponse {
            content: content.into(),
            usage: Some(Usage {
                prompt_tokens: tokens,
                completion_tokens: 1,
                cache_tokens: 0,
                cost_usd: 0.0,
                estimated: false,
            }),
            ..LlmResponse::default()
        },
        elapsed_msec: 3.0,
        timestamp: "t".into(),
    }
}

/// A loop past its first exchange (one command ran), in a fresh episode, queried.
fn running(settings: LoopSettings) -> AgentLoop {
    let mut agent = AgentLoop::new(settings);
    assert!(matches!(agent.begin("Do it", "$ "), Action::CheckTerminal { episode: 0 }));
    assert!(matches!(agent.on_terminal_checked(true), Action::Query));
    let turn = agent.on_model_result(reply(RUN), 5.0);
    assert!(matches!(turn.action, Action::Execute(_)));
    agent.on_command_done();
    assert!(matches!(agent.on_command_done(), Action::Observe));
    assert!(matches!(agent.observe("out"), Action::CheckTerminal { episode: 1 }));
    assert!(matches!(agent.on_terminal_checked(true), Action::Query));
    agent
}

fn summarize_job(action: Action) -> Arc<SummaryJob> {
    match action {
        Action::Summarize { job, purpose: SummaryPurpose::Overflow } => job,
        other => panic!("expected an overflow summarization, got {other:?}"),
    }
}

#[test]
fn a_reply_runs_its_commands_in_order_then_observes_and_completes_on_the_second_claim() {
    let mut agent = AgentLoop::new(settings());
    agent.begin("t", "");
    agent.on_terminal_checked(true);
    let turn = agent.on_model_result(reply(RUN), 5.0);
    assert!(turn.replied);
    let log = turn.log.unwrap();
    assert_eq!((log.episode, log.response.as_str()), (0, RUN));
    assert!(log.debug.is_some(), "the debug record goes to the log, not the loop");
    let Action::Execute(first) = turn.action else { panic!() };
    assert_eq!(first.keystrokes, "ls\n");
    let Action::Execute(second) = agent.on_command_done() else { panic!() };
    assert_eq!(second.keystrokes, "pwd\n");
    assert!(matches!(agent.on_command_done(), Action::Observe));
    assert!(matches!(agent.observe("o"), Action::CheckTerminal { episode: 1 }));
    agent.on_terminal_checked(true);
    assert!(matches!(agent.on_model_result(reply(DONE), 1.0).action, Action::Observe), "no commands: observe");
    assert!(matches!(agent.observe("o"), Action::CheckTerminal { .. }));
    agent.on_terminal_checked(true);
    agent.on_model_result(reply(DONE), 1.0);
    assert!(matches!(agent.observe("o"), Action::Finish(Finish::Completed)));
}

#[test]
fn an_unparsable_reply_starts_the_next_episode_and_max_turns_finishes() {
    let mut agent = AgentLoop::new(LoopSettings { max_turns: 2, ..settings() });
    agent.begin("t", "");
    agent.on_terminal_checked(true);
    let turn = agent.on_model_result(reply("no json here"), 1.0);
    assert!(matches!(turn.action, Action::CheckTerminal { episode: 1 }));
    agent.on_terminal_checked(true);
    assert!(matches!(agent.on_model_result(reply("still none"), 1.0).action, Action::Finish(Finish::MaxTurns)));
}

#[test]
fn a_debug_record_names_the_earlier_one_for_the_messages_they_share() {
    let mut agent = running(settings());
    let first = agent.request();
    let file = format!("episode-{}/debug.json", agent.episode);
    let with_debug = LlmResponse { content: RUN.into(), debug: Some("{}".into()), ..LlmResponse::default() };
    agent.on_model_result(Ok(with_debug), 1.0);
    agent.on_command_done();
    agent.on_command_done();
    agent.observe("o");
    agent.on_terminal_checked(true);
    let second = agent.request();
    // The first request's messages and its reply.
    let prefix = terminus_core::llm::LoggedPrefix { n_messages: first.messages.len() + 1, file: file.clone() };
    assert_eq!(second.logged, Some(prefix));
    assert!(second.messages.len() > first.messages.len());
    // A call that failed wrote no record: the next one still refers to the last written.
    agent.on_model_result(Err(LlmError::Transient("x".into())), 1.0);
    let third = agent.request();
    assert_eq!(third.logged.unwrap().file, file);
}

#[test]
fn a_spent_budget_ends_the_run_cleanly_even_after_an_overflow() {
    let mut agent = running(settings());
    let turn = agent.on_model_result(Err(LlmError::BudgetReached("spent".into())), 0.0);
    assert!(matches!(turn.action, Action::Finish(Finish::BudgetReached(ref why)) if why == "spent"));
    assert_eq!(agent.stop_reason(), Some("budget"));
    let mut agent = running(settings());
    agent.after_overflow = true;
    let turn = agent.on_model_result(Err(LlmError::BudgetReached("spent".into())), 0.0);
    assert!(matches!(turn.action, Action::Finish(Finish::BudgetReached(_))), "no stand-in reply: {:?}", turn.action);
}

#[test]
fn a_dead_terminal_or_the_cost_limit_stops_the_run() {
    let mut agent = AgentLoop::new(settings());
    agent.begin("t", "");
    assert!(matches!(agent.on_terminal_checked(false), Action::Finish(Finish::SessionEnded)));
    let mut agent = running(LoopSettings { max_cost_usd: Some(0.015), ..settings() });
    agent.on_model_result(reply("x"), 1.0);
    assert!(matches!(agent.on_terminal_checked(true), Action::Finish(Finish::CostLimit)));
    assert_eq!(agent.stop_reason(), Some("max_cost_usd"));
}

#[test]
fn model_errors_end_the_run_with_their_kind() {
    let mut agent = running(settings());
    let turn = agent.on_model_result(Err(LlmError::Authentication("bad key".into())), 1.0);
    let Action::Finish(Finish::Failed(error)) = turn.action else { panic!("{:?}", turn.action) };
    assert_eq!(error.kind, TrialErrorKind::Authentication);
    let mut off = running(LoopSettings { enable_summarize: false, ..settings() });
    let Action::Finish(Finish::Failed(error)) = off.on_model_result(overflow(), 1.0).action else { panic!() };
    assert_eq!(error.kind, TrialErrorKind::ContextLengthExceeded);
    assert!(error.message.ends_with("(enable_summarize is off)"), "{}", error.message);
}

#[test]
fn an_overflow_unwinds_summarizes_and_hands_over() {
    let mut agent = running(settings());
    let turn = agent.on_model_result(overflow(), 1.0);
    assert!(turn.note.is_some() && !turn.replied && turn.log.is_none());
    let job = summarize_job(turn.action);
    assert_eq!(job.index, 1);
    assert!(agent.is_summarizing());
    let calls = [(Subagent::Summary, "S", 500), (Subagent::Questions, "Q?", 100), (Subagent::Answers, "A", 700)];
    let mut files = Vec::new();
    for (which, content, tokens) in calls {
        let (file, trajectory) = agent.on_subagent_call(which, call(content, tokens)).unwrap();
        files.push(file);
        if which == Subagent::Answers {
            let copied: Vec<bool> = trajectory.steps.iter().map(|s| s.is_copied_context == Some(true)).collect();
            assert!(copied.iter().filter(|c| **c).count() >= 2, "the summary exchange is copied in");
        }
    }
    assert_eq!(files[0], "trajectory.summarization-1-summary.json");
    let outcome = job.outcome(None, &call("Q?", 100), &call("A", 700));
    assert!(matches!(agent.on_summary_result(Ok(outcome)), Action::Query));
    assert!(agent.prompt().starts_with("The previous agent answered:"));
    assert_eq!(agent.subagent_metrics().input_tokens, 1300, "each call counted once");
    assert_eq!(agent.api_request_times_msec().len(), 1 + 3);
    // The handoff's reply records the system step with the refs, then the handoff.
    agent.on_model_result(reply(DONE), 1.0);
    let sources: Vec<Source> = agent.steps().iter().rev().take(2).map(|s| s.source).collect();
    assert_eq!(sources, [Source::User, Source::System]);
}

#[test]
fn max_llm_calls_ends_the_run_with_its_kind_and_counts_summarization_calls() {
    // `running` made two queries; a summarization needs three more.
    let mut agent = running(LoopSettings { max_llm_calls: 4, ..settings() });
    assert_eq!(agent.llm_calls(), 2);
    let Action::Finish(Finish::Failed(error)) = agent.on_model_result(overflow(), 1.0).action else { panic!() };
    assert_eq!(error.kind, TrialErrorKind::LlmCallLimit);
    assert!(error.kind.still_graded(), "the trial is still verified");
    let mut agent = running(LoopSettings { max_llm_calls: 2, ..settings() });
    agent.on_model_result(reply("no json"), 1.0);
    let Action::Finish(Finish::Failed(error)) = agent.on_terminal_checked(true) else { panic!() };
    assert!(error.message.contains("made 2 model calls"), "{}", error.message);
}

#[test]
fn one_summarization_per_episode_then_the_fallbacks() {
    // Proactive at the episode's start, then the query overflows: no second summarization.
    let mut agent = running(settings());
    agent.settings.context_limit = 8100;
    agent.on_model_result(reply("no json"), 1.0);
    let Action::Summarize { purpose: SummaryPurpose::Proactive, job } = agent.on_terminal_checked(true) else {
        panic!("a proactive summarization")
    };
    let outcome = job.outcome(Some("S"), &call("Q?", 10), &call("A", 10));
    assert!(matches!(agent.on_summary_result(Ok(outcome)), Action::Query));
    let turn = agent.on_model_result(overflow(), 1.0);
    assert!(matches!(turn.action, Action::CaptureScreen), "{:?}", turn.action);
    assert!(turn.note.unwrap().contains("no summarization now"));
}

#[test]
fn a_summarization_whose_handoff_does_not_fit_ends_the_chain() {
    let mut agent = running(settings());
    let job = summarize_job(agent.on_model_result(overflow(), 1.0).action);
    // A context the first message alone nearly fills: no handoff can fit.
    agent.settings.context_limit = 4_500;
    let outcome = job.outcome(Some("S"), &call("Q?", 10), &call("A", 10));
    assert!(matches!(agent.on_summary_result(Ok(outcome)), Action::Query));
    let warnings = agent.take_warnings();
    assert!(warnings.iter().any(|w| w.contains("left the chat too large")), "{warnings:?}");
    // The handoff's reply, then a new episode: no proactive summarization, and an overflow
    // falls back instead of summarizing.
    agent.on_model_result(reply("no json"), 1.0);
    assert!(matches!(agent.on_terminal_checked(true), Action::Query));
    assert!(matches!(agent.on_model_result(overflow(), 1.0).action, Action::CaptureScreen));
    agent.on_screen_captured("screen").unwrap();
    assert!(matches!(agent.on_short_summary_result(reply("short"), 1.0), Action::Query));
    agent.on_model_result(reply("no json"), 1.0);
    agent.on_terminal_checked(true);
    // The second overflow since the stall ends the run.
    let Action::Finish(Finish::Failed(error)) = agent.on_model_result(overflow(), 1.0).action else { panic!() };
    assert_eq!(error.kind, TrialErrorKind::ContextLengthExceeded);
    assert!(error.message.contains("stays full"), "{}", error.message);
}

#[test]
fn a_summary_too_long_for_the_context_is_cut_and_named_in_the_step() {
    let mut agent = running(LoopSettings { context_limit: 20_000, ..settings() });
    let job = summarize_job(agent.on_model_result(overflow(), 1.0).action);
    assert!(job.product_limit < 6_000, "a third of what the context leaves: {}", job.product_limit);
    let huge = "[".repeat(400_000);
    let outcome = job.outcome(Some(&huge), &call("Q?", 10), &call("A", 10));
    agent.on_summary_result(Ok(outcome));
    assert!(agent.take_warnings().iter().any(|w| w.contains("the summary (400000 bytes) was cut")));
    agent.on_model_result(reply(DONE), 1.0);
    let system = agent.steps().iter().find(|s| s.source == Source::System).unwrap();
    let cuts = &system.extra.as_ref().unwrap()["cut_to_fit"];
    assert!(cuts[0].as_str().unwrap().contains("summary"), "{cuts}");
}

#[test]
fn each_subagent_call_adds_its_own_rollout_entry() {
    let mut agent = running(settings());
    assert!(agent.rollout_details().is_empty(), "the main chat brought none");
    summarize_job(agent.on_model_result(overflow(), 1.0).action);
    let mut summary = call("S", 500);
    summary.response.prompt_token_ids = Some(vec![1, 2]);
    summary.response.completion_token_ids = Some(vec![]);
    summary.response.logprobs = Some(vec![-0.5]);
    agent.on_subagent_call(Subagent::Summary, summary);
    agent.on_subagent_call(Subagent::Questions, call("Q?", 100));
    assert_eq!(
        agent.rollout_details(),
        vec![serde_json::json!({"prompt_token_ids": [[1, 2]], "completion_token_ids": [[]], "logprobs": [[-0.5]]})],
        "one entry per call that brought something, one-element lists"
    );
}

#[test]
fn a_failed_summary_keeps_the_calls_that_finished_then_tries_a_short_summary() {
    let mut agent = running(settings());
    let job = summarize_job(agent.on_model_result(overflow(), 1.0).action);
    agent.on_subagent_call(Subagent::Summary, call("S", 500)).unwrap();
    let failure = SummaryError::Call { subagent: Subagent::Questions, error: LlmError::Transient("503".into()) };
    assert!(matches!(agent.on_summary_result(Err(failure)), Action::CaptureScreen));
    assert_eq!(agent.subagent_metrics().input_tokens, 500, "the finished call still counts");
    assert_eq!(agent.api_request_times_msec().len(), 2);
    assert!(agent.on_subagent_call(Subagent::Questions, call("late", 9)).is_none(), "nothing after the end");
    drop(job);
    // Fallback 2: a short summary of the instruction and the screen's end.
    let screen = format!("{}TAIL", "x".repeat(3000));
    let Some(Action::ShortSummary(request)) = agent.on_screen_captured(&screen) else { panic!("a short summary") };
    assert_eq!(request.messages.len(), 1);
    assert!(request.messages[0].content.contains("TAIL"));
    assert!(!request.messages[0].content.contains(&"x".repeat(1000)), "only the last 1000 characters");
    let summary = reply("short summary");
    assert!(matches!(agent.on_short_summary_result(summary, 4.0), Action::Query));
    assert!(agent.prompt().contains("short summary"));
    assert_eq!(agent.subagent_metrics().input_tokens, 600, "the short summary counts with the subagents");
    // The call after it fails: the stand-in reply keeps the run going, outside the history.
    let chat_before = agent.chat().len();
    let turn = agent.on_model_result(Err(LlmError::Transient("down".into())), 1.0);
    assert!(turn.note.is_some() && !turn.replied);
    assert_eq!(turn.log.unwrap().response, prompts::TECHNICAL_DIFFICULTIES);
    assert!(matches!(turn.action, Action::CheckTerminal { .. }), "the stand-in has no commands to parse");
    assert_eq!(agent.chat().len(), chat_before, "the stand-in is not part of the history");
}

#[test]
fn when_the_short_summary_fails_too_the_instruction_and_screen_remain() {
    let mut agent = running(settings());
    agent.on_model_result(overflow(), 1.0);
    let failure = SummaryError::Crashed("panicked".into());
    assert!(matches!(agent.on_summary_result(Err(failure)), Action::CaptureScreen));
    assert!(matches!(agent.on_screen_captured("the first screen"), Some(Action::ShortSummary(_))));
    let action = agent.on_short_summary_result(Err(LlmError::Transient("down".into())), 1.0);
    // The last resort captures the screen again: it may have changed since.
    assert!(matches!(action, Action::CaptureScreen), "{action:?}");
    assert!(matches!(agent.on_screen_captured("the second screen"), Some(Action::Query)));
    assert!(agent.on_screen_captured("late").is_none(), "a capture nobody waits for does nothing");
    assert!(agent.prompt().contains("Do it") && agent.prompt().contains("the second screen"), "{}", agent.prompt());
    assert!(!agent.prompt().contains("the first screen"));
    // A second overflow right away is not summarised again: it gets the stand-in reply.
    let turn = agent.on_model_result(overflow(), 1.0);
    assert_eq!(turn.log.unwrap().response, prompts::TECHNICAL_DIFFICULTIES);
    // A cancellation is never papered over.
    agent.on_terminal_checked(true);
    agent.after_overflow = true;
    let turn = agent.on_model_result(Err(LlmError::Cancelled), 1.0);
    assert!(matches!(turn.action, Action::Finish(Finish::Failed(ref e)) if e.kind == TrialErrorKind::Cancelled));
}

#[test]
fn a_failed_proactive_summary_lets_the_episode_go_on() {
    let mut agent =
        AgentLoop::new(LoopSettings { context_limit: 5000, proactive_summarization_threshold: 8000, ..settings() });
    agent.begin("t", "");
    assert!(matches!(agent.on_terminal_checked(true), Action::Query), "nothing to summarise yet");
    assert!(matches!(agent.on_model_result(reply(DONE), 1.0).action, Action::Observe));
    agent.observe("o");
    let Action::Summarize { purpose: SummaryPurpose::Proactive, .. } = agent.on_terminal_checked(true) else {
        panic!("the context is nearly full")
    };
    let failure = SummaryError::Call { subagent: Subagent::Summary, error: LlmError::Transient("x".into()) };
    assert!(matches!(agent.on_summary_result(Err(failure)), Action::Query));
    assert!(agent.prompt().starts_with("The terminal now shows"), "the episode's own prompt: {}", agent.prompt());
    // The next call's failure is an ordinary error (no overflow summary preceded it).
    let turn = agent.on_model_result(Err(LlmError::Transient("down".into())), 1.0);
    assert!(matches!(turn.action, Action::Finish(Finish::Failed(_))));
}

#[test]
fn an_overflow_with_no_history_hands_over_the_instruction() {
    let mut agent = AgentLoop::new(settings());
    agent.begin("Do it", "");
    agent.on_terminal_checked(true);
    let turn = agent.on_model_result(overflow(), 1.0);
    assert!(matches!(turn.action, Action::Query), "nothing to summarise");
    assert_eq!(agent.prompt(), "Do it");
    assert!(!agent.is_summarizing());
}

#[test]
fn a_truncated_reply_right_after_an_overflow_summary_gets_the_stand_in() {
    let mut agent = running(LoopSettings { output_limit: Some(4096), ..settings() });
    let job = summarize_job(agent.on_model_result(overflow(), 1.0).action);
    for (which, content, tokens) in
        [(Subagent::Summary, "S", 500), (Subagent::Questions, "Q?", 100), (Subagent::Answers, "A", 700)]
    {
        agent.on_subagent_call(which, call(content, tokens));
    }
    assert!(matches!(agent.on_summary_result(Ok(job.outcome(None, &call("Q?", 100), &call("A", 700)))), Action::Query));
    let (chat_before, times_before) = (agent.chat().len(), agent.api_request_times_msec().len());
    let usage = Usage { prompt_tokens: 50, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0, estimated: false };
    let truncated = LlmError::OutputLengthExceeded { truncated: r#"{"analysis": "a"#.into(), usage: Some(usage) };
    let turn = agent.on_model_result(Err(truncated), 1.0);
    // The last link: the stand-in, not the output-limit notice and its re-prompt.
    assert_eq!(turn.log.unwrap().response, prompts::TECHNICAL_DIFFICULTIES);
    assert!(matches!(turn.action, Action::CheckTerminal { .. }));
    assert!(!agent.prompt().contains("4096 tokens"), "{}", agent.prompt());
    assert_eq!(agent.chat().len(), chat_before, "nothing joins the history");
    assert_eq!(agent.api_request_times_msec().len(), times_before, "a failed call has no request time");
    assert_eq!(agent.totals().output_tokens, 10 + 4096, "its tokens are counted");
}

#[test]
fn truncated_replies_are_salvaged_explained_or_given_up_on() {
    let mut agent = running(LoopSettings { output_limit: Some(4096), ..settings() });
    let times = agent.api_request_times_msec().len();
    let cut = &RUN[..RUN.len() - 8];
    let turn = agent.on_model_result(Err(LlmError::OutputLengthExceeded { truncated: cut.into(), usage: None }), 1.0);
    assert!(turn.replied && matches!(turn.action, Action::Execute(_)), "salvaged");
    assert_eq!(agent.api_request_times_msec().len(), times, "a truncated call has no request time");
    agent.on_command_done();
    agent.on_command_done();
    agent.observe("o");
    agent.on_terminal_checked(true);
    let hopeless = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "cat <<EOF\nlots"#;
    let cut_usage =
        Usage { prompt_tokens: 300, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0, estimated: false };
    let truncated = || Err(LlmError::OutputLengthExceeded { truncated: hopeless.into(), usage: Some(cut_usage) });
    let steps_before = agent.trajectory(false).steps.len();
    let turn = agent.on_model_result(truncated(), 1.0);
    assert!(matches!(turn.action, Action::Query));
    assert!(turn.log.unwrap().response.contains("4096 tokens"), "the notice is the episode's response log");
    assert_eq!(agent.api_request_times_msec().len(), times, "nor does one that is explained");
    let mut last = turn.action;
    for _ in 0..crate::agent_loop::MAX_CONSECUTIVE_TRUNCATIONS {
        last = agent.on_model_result(truncated(), 1.0).action;
    }
    let Action::Finish(Finish::Failed(error)) = last else { panic!("{last:?}") };
    assert_eq!(error.kind, TrialErrorKind::OutputLengthExceeded);
    // The six cut replies' tokens are counted, and one last step holds them: the steps add
    // up to the totals even though the episode never got a reply.
    let trajectory = agent.trajectory(false);
    assert_eq!(trajectory.steps.len(), steps_before + 1);
    let last_step = trajectory.steps.last().unwrap();
    assert_eq!(last_step.message, hopeless);
    let metrics = last_step.metrics.as_ref().unwrap();
    let n = 1 + crate::agent_loop::MAX_CONSECUTIVE_TRUNCATIONS as u64;
    assert_eq!((metrics.prompt_tokens, metrics.completion_tokens), (Some(300 * n), Some(4096 * n)));
    let (prompt, completion) = trajectory
        .steps
        .iter()
        .filter_map(|s| s.metrics.as_ref())
        .fold((0, 0), |acc, m| (acc.0 + m.prompt_tokens.unwrap_or(0), acc.1 + m.completion_tokens.unwrap_or(0)));
    assert_eq!((prompt, completion), (agent.totals().input_tokens, agent.totals().output_tokens));
}
