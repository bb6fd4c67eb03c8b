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
        self.progress.after_summary = true;
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
        let after_summary = std::mem::take(&mut self.progress.after_summary);
        let reply = self.on_reply(response, elapsed_msec, in_history);
        let feedback = matches!(reply, Reply::Reprompt).then(|| self.prompt.clone());
        if after_summary && self.progress.stalled(&log.response, feedback.as_deref()) {
            let error = TrialError::new(
                TrialErrorKind::NoProgress,
                format!(
                    "the model gave the same reply (or the same unparsable one) after {} summarizations in a row",
                    super::state::NO_PROGRESS_REPEATS + 1
                ),
            );
            return ModelTurn {
                action: Action::Finish(Finish::Failed(error)),
                log: Some(log),
                replied: in_history,
                note: None,
            };
        }
        let action = match reply {
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
                    temperature: self.settings.request_temperature(),
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
mod tests;
