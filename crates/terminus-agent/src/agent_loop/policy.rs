//! The Terminus 2 policy: given what just happened (a model result, a summarization's result, a
//! command's end, the terminal's output), what the Trial does next, as an [`Action`].
//!
//! ```text
//! start ─► CheckTerminal ─► on_terminal_checked ─┬─► Finish(SessionEnded | CostLimit)
//!                                                ├─► Summarize{Proactive} ─► on_summary_result ─► Query
//!                                                └─► Query ─► on_model_result ─┬─► Execute(cmd) ─► on_command_done ─► … ─► Observe ─► on_terminal_output ─► CheckTerminal | Finish(Completed | MaxTurns)
//!                                                                              ├─► CheckTerminal (unparsable reply: its feedback is the next prompt)
//!                                                                              ├─► context overflow: unwind ─► Summarize{Overflow} ─► on_summary_result ─┬─► Query (handoff)
//!                                                                              │                                                                        └─► CaptureScreen ─► on_screen_captured ─► ShortSummary(request) ─► on_short_summary_result ─┬─► Query
//!                                                                              │                                                                                                                                                      └─► CaptureScreen ─► on_screen_captured ─► Query (last resort)
//!                                                                              ├─► failure right after an overflow summary, a truncated reply included: stand-in reply ("technical difficulties")
//!                                                                              ├─► truncated: salvage (as a reply) | output-limit notice ─► Query | Finish(Failed) after too many
//!                                                                              └─► any other error ─► Finish(Failed)
//! ```
//!
//! The fallback chain after a context overflow is the reference's: the full three-call
//! summarization, else a short summary of the instruction and the screen, else the instruction
//! and the screen alone; and if the call after any of them fails, the turn goes on with a
//! stand-in reply outside the history. Each branch has a unit test below.

use std::sync::Arc;

use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::llm::{ChatMessage, LlmError, LlmRequest, LlmResponse};

use super::state::{AgentLoop, Command, Fallback, Next, Reply, Summarizing, SummaryPurpose};
use crate::prompts;
use crate::summarize::{Subagent, SubagentCall, SummaryError, SummaryJob, SummaryOutcome};
use crate::trajectory::Trajectory;

/// How much of the screen the summarization fallbacks quote (characters from the end).
pub const FALLBACK_SCREEN_CHARS: usize = 1000;

/// Why the agent stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum Finish {
    /// The model confirmed completion twice in a row.
    Completed,
    /// `max_turns` episodes ran.
    MaxTurns,
    /// The terminal's tmux session is gone (the reference ends quietly).
    SessionEnded,
    /// The trial's cost reached `max_cost_usd`.
    CostLimit,
    /// The job's budget (or its agent's) is spent: the call was not sent. The run ends as
    /// it stands and is graded.
    BudgetReached(String),
    /// The run cannot go on.
    Failed(TrialError),
}

/// What the Trial does next for a Terminus 2 agent. The loop decides; the Trial performs the
/// action and reports its outcome through the matching `on_…` method.
#[derive(Clone, Debug)]
pub enum Action {
    /// An episode starts: check the terminal is alive, then [`AgentLoop::on_terminal_checked`].
    CheckTerminal { episode: u64 },
    /// Send [`AgentLoop::request`] to the model, then [`AgentLoop::on_model_result`].
    Query,
    /// Run the three subagent calls of `job` (reporting each to [`AgentLoop::on_subagent_call`]),
    /// then [`AgentLoop::on_summary_result`].
    Summarize { purpose: SummaryPurpose, job: Arc<SummaryJob> },
    /// A summarization fallback quotes the screen: capture the visible screen, then
    /// [`AgentLoop::on_screen_captured`]. Each fallback captures its own (the last resort comes
    /// after a model call, so the screen may have changed since the short summary's).
    CaptureScreen,
    /// The full summarization after an overflow failed: send this short-summary request, then
    /// [`AgentLoop::on_short_summary_result`].
    ShortSummary(LlmRequest),
    /// Type the command's keys and wait its duration, then [`AgentLoop::on_command_done`].
    Execute(Command),
    /// The reply's commands have run: capture the terminal's new output, then
    /// [`AgentLoop::observe`].
    Observe,
    /// The agent is done.
    Finish(Finish),
}

/// What a reply's episode log holds (`episode-N/response.txt`, `debug.json`).
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseLog {
    pub episode: u64,
    pub response: String,
    /// The request and raw reply, when the provider kept them.
    pub debug: Option<String>,
}

/// The outcome of one model result.
#[derive(Clone, Debug)]
pub struct ModelTurn {
    pub action: Action,
    /// What to write to the episode's logs, if anything.
    pub log: Option<ResponseLog>,
    /// A real reply was taken (its arrival starts the next loop-overhead measurement).
    pub replied: bool,
    /// Something worth a warning in the job log (an unwinding, a stand-in reply).
    pub note: Option<String>,
}

impl ModelTurn {
    fn quiet(action: Action) -> ModelTurn {
        ModelTurn { action, log: None, replied: false, note: None }
    }
}

impl AgentLoop {
    /// Builds the first prompt (see [`AgentLoop::start`]) and enters the first episode.
    pub fn begin(&mut self, instruction: &str, terminal_state: &str) -> Action {
        self.begin_with(instruction, "", terminal_state)
    }

    /// [`AgentLoop::begin`] with text after the instruction in the first prompt only.
    pub fn begin_with(&mut self, instruction: &str, extras: &str, terminal_state: &str) -> Action {
        self.start_with(instruction, extras, terminal_state);
        self.advance()
    }

    /// Enters the next episode, unless `max_turns` have run.
    fn advance(&mut self) -> Action {
        match self.begin_episode() {
            Some(episode) => Action::CheckTerminal { episode },
            None => Action::Finish(Finish::MaxTurns),
        }
    }

    /// The episode's terminal check came back: stop if the session is gone or the cost limit
    /// is reached; summarise first when the context is nearly full; else query.
    pub fn on_terminal_checked(&mut self, alive: bool) -> Action {
        if !alive {
            return Action::Finish(Finish::SessionEnded);
        }
        if let Some(limit) = self.settings.max_cost_usd
            && self.final_totals().cost_usd >= limit
        {
            self.stop_reason = Some("max_cost_usd");
            return Action::Finish(Finish::CostLimit);
        }
        self.after_overflow = false;
        if self.wants_proactive_summary() && self.may_summarize() {
            return self.summarize(SummaryPurpose::Proactive);
        }
        self.query()
    }

    /// A query, unless the run has made all the model calls it may.
    fn query(&mut self) -> Action {
        self.calls(1).unwrap_or_else(|| {
            self.llm_calls += 1;
            Action::Query
        })
    }

    /// The end of the run when `n` more calls would pass `max_llm_calls`.
    fn calls(&mut self, n: u64) -> Option<Action> {
        (self.llm_calls + n > self.settings.max_llm_calls).then(|| {
            let error = TrialError::new(
                TrialErrorKind::LlmCallLimit,
                format!("the agent made {} model calls, all that max_llm_calls allows", self.llm_calls),
            );
            Action::Finish(Finish::Failed(error))
        })
    }

    /// Whether a summarization may start now: one per episode at most, and none once one
    /// left the chat no smaller than it found it.
    fn may_summarize(&self) -> bool {
        !self.summaries_stalled && self.summarized_in != Some(self.episode)
    }

    /// Starts a summarization, or with no history to summarise, hands over the raw instruction.
    fn summarize(&mut self, purpose: SummaryPurpose) -> Action {
        self.after_overflow = purpose == SummaryPurpose::Overflow;
        if self.chat.is_empty() {
            self.handoff_instruction();
            return self.query();
        }
        if let Some(end) = self.calls(3) {
            return end;
        }
        let bytes_before = self.chat_bytes();
        match self.begin_summarization() {
            Some(job) => {
                self.llm_calls += 3;
                let job = Arc::new(job);
                self.summarizing = Some(Summarizing { job: job.clone(), purpose, summary: None, bytes_before });
                Action::Summarize { purpose, job }
            }
            None => {
                self.handoff_instruction();
                self.query()
            }
        }
    }

    /// A context overflow that may not be summarised (one summarization per episode, or the
    /// summaries stalled): the fallbacks restart from the instruction; a second overflow once
    /// the summaries stalled ends the run.
    fn overflow_without_summary(&mut self, message: &str) -> Action {
        if self.summaries_stalled {
            self.overflows_after_stall += 1;
            if self.overflows_after_stall > 1 {
                let error = TrialError::new(
                    TrialErrorKind::ContextLengthExceeded,
                    format!("the context stays full after summarization and its fallbacks ({message})"),
                );
                return Action::Finish(Finish::Failed(error));
            }
        }
        self.after_overflow = true;
        self.fallback = Some(Fallback::ShortSummary);
        Action::CaptureScreen
    }

    /// Takes the result of the current query.
    pub fn on_model_result(&mut self, result: Result<LlmResponse, LlmError>, elapsed_msec: f64) -> ModelTurn {
        let after_overflow = std::mem::take(&mut self.after_overflow);
        match result {
            Ok(response) => self.take_reply(response, Some(elapsed_msec), true),
            // Before the after-overflow arm: no stand-in reply, the run ends here.
            Err(LlmError::BudgetReached(why)) => {
                self.stop_reason = Some("budget");
                ModelTurn::quiet(Action::Finish(Finish::BudgetReached(why)))
            }
            Err(LlmError::ContextLengthExceeded(message)) if self.settings.enable_summarize && !after_overflow => {
                let dropped = self.unwind();
                if !self.may_summarize() {
                    let action = self.overflow_without_summary(&message);
                    let note = format!(
                        "context length exceeded ({message}); dropped {dropped} messages, no summarization now: falling back"
                    );
                    return ModelTurn { note: Some(note), ..ModelTurn::quiet(action) };
                }
                let action = self.summarize(SummaryPurpose::Overflow);
                let note = format!("context length exceeded ({message}); dropped {dropped} messages, summarizing");
                ModelTurn { note: Some(note), ..ModelTurn::quiet(action) }
            }
            // Checked before the truncation arm: after an overflow summary the reference takes
            // any failure of the next call, a truncated reply included, as the last resort
            // (as the reference does), and never re-prompts there.
            Err(error) if after_overflow && error != LlmError::Cancelled => {
                if let LlmError::OutputLengthExceeded { usage, .. } = &error {
                    // Its tokens are counted, as every truncated call's are (docs/DIFFERENCES.md).
                    if let Some(usage) = usage {
                        self.totals.add(usage);
                    }
                    self.episode_calls += 1;
                }
                // A stand-in reply, outside the history.
                let response =
                    LlmResponse { content: prompts::TECHNICAL_DIFFICULTIES.to_string(), ..LlmResponse::default() };
                let turn = self.take_reply(response, None, false);
                let note = format!("the call after summarization failed ({error}); continuing with a stand-in reply");
                ModelTurn { replied: false, note: Some(note), ..turn }
            }
            Err(LlmError::OutputLengthExceeded { truncated, usage }) => match self.salvage(&truncated) {
                // The salvaged reply is taken, but the call failed: no request time is recorded.
                Some(content) => self.take_reply(LlmResponse { content, usage, ..LlmResponse::default() }, None, true),
                None => {
                    let episode = self.episode;
                    if !self.on_truncated(&truncated, usage.as_ref()) {
                        self.record_unfinished_episode(&truncated);
                        let error = TrialError::new(
                            TrialErrorKind::OutputLengthExceeded,
                            "the model's replies kept exceeding the output limit",
                        );
                        return ModelTurn::quiet(Action::Finish(Finish::Failed(error)));
                    }
                    // The output-limit notice is the episode's response log, as the reference writes it.
                    let log = ResponseLog { episode, response: self.prompt.clone(), debug: None };
                    let action = self.query();
                    ModelTurn { log: Some(log), ..ModelTurn::quiet(action) }
                }
            },
            Err(error) => {
                let mut failure = TrialError::from(&error);
                if matches!(error, LlmError::ContextLengthExceeded(_)) {
                    failure.message.push_str(" (enable_summarize is off)");
                }
                ModelTurn::quiet(Action::Finish(Finish::Failed(failure)))
            }
        }
    }

    fn take_reply(&mut self, mut response: LlmResponse, elapsed_msec: Option<f64>, in_history: bool) -> ModelTurn {
        let log =
            ResponseLog { episode: self.episode, response: response.content.clone(), debug: response.debug.take() };
        if log.debug.is_some() {
            self.debug_written(log.episode, &log.response);
        }
        let action = match self.on_reply(response, elapsed_msec, in_history) {
            Reply::Reprompt => self.advance(),
            Reply::Execute(_) => self.next_command(),
        };
        ModelTurn { action, log: Some(log), replied: in_history, note: None }
    }

    fn next_command(&mut self) -> Action {
        let command = self.in_flight.as_ref().and_then(|flight| flight.commands.get(self.command_cursor)).cloned();
        match command {
            Some(command) => {
                self.command_cursor += 1;
                Action::Execute(command)
            }
            None => Action::Observe,
        }
    }

    /// The current command's wait is over: the next command, or the observation.
    pub fn on_command_done(&mut self) -> Action {
        self.next_command()
    }

    /// Takes the terminal output after the reply's commands: the next episode, or the end.
    pub fn observe(&mut self, terminal_output: &str) -> Action {
        match self.on_terminal_output(terminal_output) {
            Next::Done => Action::Finish(Finish::Completed),
            Next::Continue => self.advance(),
        }
    }

    /// One subagent call of the summarization in progress finished: it is counted now
    /// (reg-subagent-metrics, reg-api-request-times), whatever happens to the rest of the
    /// summarization, and its trajectory file is returned for the caller to write. None when no
    /// summarization is in progress (a late report after the agent stopped is not counted).
    pub fn on_subagent_call(&mut self, which: Subagent, call: SubagentCall) -> Option<(String, Trajectory)> {
        let summarizing = self.summarizing.as_mut()?;
        let trajectory = summarizing.job.trajectory(which, &call, summarizing.summary.as_ref());
        let file = summarizing.job.file_name(which);
        let (usage, elapsed) = (call.response.usage, call.elapsed_msec);
        self.record_subagent_rollout(&call.response);
        if which == Subagent::Summary
            && let Some(summarizing) = self.summarizing.as_mut()
        {
            summarizing.summary = Some(call);
        }
        self.record_subagent_call(usage.as_ref(), elapsed);
        Some((file, trajectory))
    }

    /// Whether a summarization is in progress.
    pub fn is_summarizing(&self) -> bool {
        self.summarizing.is_some()
    }

    /// The summarization's result: the handoff is queried; a failed proactive one is let go
    /// (the episode goes on with its prompt); a failed overflow one falls back to a short summary.
    pub fn on_summary_result(&mut self, result: Result<SummaryOutcome, SummaryError>) -> Action {
        let Some(summarizing) = self.summarizing.take() else { return self.query() };
        match (result, summarizing.purpose) {
            (Ok(outcome), purpose) => {
                self.apply_summary(&outcome);
                // What it hands over must leave room for a reply; if even that does not fit,
                // summarizing again cannot help (a small chat that grows by its summary, as in
                // a context barely larger than the threshold, is no stall: the next reply is
                // progress).
                if self.exceeds_context() {
                    self.summaries_stalled = true;
                    self.warn(format!(
                        "summarization {} left the chat too large for the context ({} bytes, {} before): no further summarization; a context overflow falls back to the instruction",
                        summarizing.job.index,
                        self.chat_bytes(),
                        summarizing.bytes_before
                    ));
                }
                self.after_overflow = purpose == SummaryPurpose::Overflow;
                self.query()
            }
            (Err(_), SummaryPurpose::Proactive) => self.query(),
            (Err(_), SummaryPurpose::Overflow) => {
                self.fallback = Some(Fallback::ShortSummary);
                Action::CaptureScreen
            }
        }
    }

    /// The screen a fallback asked for: fallback 2 sends a short summary request quoting its
    /// end; fallback 3 (the last resort) restarts from the instruction and its end. None when no
    /// fallback is waiting for one (nothing to do).
    pub fn on_screen_captured(&mut self, screen: &str) -> Option<Action> {
        let chars: Vec<char> = screen.chars().collect();
        let tail: String = chars[chars.len().saturating_sub(FALLBACK_SCREEN_CHARS)..].iter().collect();
        Some(match self.fallback.take()? {
            Fallback::ShortSummary => {
                if let Some(end) = self.calls(1) {
                    return Some(end);
                }
                self.llm_calls += 1;
                let prompt = prompts::short_summary_prompt(&self.settings.texts, &self.original_instruction, &tail);
                Action::ShortSummary(LlmRequest {
                    messages: vec![ChatMessage::user(prompt)],
                    temperature: Some(self.settings.temperature),
                    extra: self.settings.request_extra(),
                    logged: None,
                })
            }
            Fallback::LastResort => {
                self.set_fallback_prompt(prompts::ultimate_fallback_prompt(
                    &self.settings.texts,
                    &self.original_instruction,
                    &tail,
                ));
                // The next call is the one the stand-in reply protects.
                self.after_overflow = true;
                self.query()
            }
        })
    }

    /// The short summary's result: restart from it; or, when it failed, capture the screen
    /// afresh for the last resort (the reference captures again there). Either way the next
    /// call is the one the stand-in reply protects.
    pub fn on_short_summary_result(&mut self, result: Result<LlmResponse, LlmError>, elapsed_msec: f64) -> Action {
        match result {
            Ok(response) => {
                // Counted with the subagents (the reference counts this call nowhere).
                self.record_subagent_call(response.usage.as_ref(), elapsed_msec);
                let limit = self.product_limit();
                let (summary, cut) = crate::summarize::cut_to_fit(&response.content, limit);
                if cut {
                    self.warn(format!(
                        "the short summary ({} bytes) was cut to {limit} bytes to fit the context",
                        response.content.len()
                    ));
                }
                self.set_fallback_prompt(prompts::short_summary_restart(
                    &self.settings.texts,
                    &self.original_instruction,
                    &summary,
                ));
                self.after_overflow = true;
                self.query()
            }
            Err(_) => {
                self.fallback = Some(Fallback::LastResort);
                Action::CaptureScreen
            }
        }
    }

    /// Why the run stopped early without an error, if it did (`agent_result.metadata.stop_reason`).
    pub fn stop_reason(&self) -> Option<&'static str> {
        self.stop_reason
    }
}

#[cfg(test)]
mod tests {
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
            usage: Some(Usage { prompt_tokens: 100, completion_tokens: 10, cache_tokens: 0, cost_usd: 0.01 }),
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
                usage: Some(Usage { prompt_tokens: tokens, completion_tokens: 1, cache_tokens: 0, cost_usd: 0.0 }),
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
        assert!(
            matches!(turn.action, Action::Finish(Finish::BudgetReached(_))),
            "no stand-in reply: {:?}",
            turn.action
        );
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
        assert!(matches!(
            agent.on_summary_result(Ok(job.outcome(None, &call("Q?", 100), &call("A", 700)))),
            Action::Query
        ));
        let (chat_before, times_before) = (agent.chat().len(), agent.api_request_times_msec().len());
        let usage = Usage { prompt_tokens: 50, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0 };
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
        let turn =
            agent.on_model_result(Err(LlmError::OutputLengthExceeded { truncated: cut.into(), usage: None }), 1.0);
        assert!(turn.replied && matches!(turn.action, Action::Execute(_)), "salvaged");
        assert_eq!(agent.api_request_times_msec().len(), times, "a truncated call has no request time");
        agent.on_command_done();
        agent.on_command_done();
        agent.observe("o");
        agent.on_terminal_checked(true);
        let hopeless = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "cat <<EOF\nlots"#;
        let cut_usage = Usage { prompt_tokens: 300, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0 };
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
        let (prompt, completion) =
            trajectory.steps.iter().filter_map(|s| s.metrics.as_ref()).fold((0, 0), |acc, m| {
                (acc.0 + m.prompt_tokens.unwrap_or(0), acc.1 + m.completion_tokens.unwrap_or(0))
            });
        assert_eq!((prompt, completion), (agent.totals().input_tokens, agent.totals().output_tokens));
    }
}
