//! The Terminus 2 episode loop as a state machine.
//!
//! One episode is one model turn:
//!
//! ```text
//! begin_episode ─► [wants_proactive_summary? ─► begin_summarization … apply_summary]
//!   ─► request ─► on_response ─┬─► Reprompt (unparsable reply; the feedback is the next prompt)
//!                              └─► Execute(commands) ─► on_terminal_output ─► Continue | Done
//!          └─ on a context overflow: unwind ─► begin_summarization … apply_summary | fallbacks ─► request
//!          └─ on a truncated reply:  salvage ─► on_response | on_truncated ─► request
//! ```
//!
//! The caller (the Trial actor) does all I/O: it sends requests to the LLM actor, runs the
//! Summarizer, types commands into tmux and waits, and writes files. [`AgentLoop`] holds the
//! registers of Terminus 2, each as an explicit field with its own lifecycle (in `state`); this
//! file holds the episode's steps, `policy` the next action after each event, and `record` the
//! trajectory and the run's figures.

use std::time::Instant;

use serde_json::{Map, Value, json};
use terminus_core::llm::{ChatMessage, LlmRequest, LlmResponse, LoggedPrefix, Usage};

use crate::limit::{MAX_OUTPUT_BYTES, limit_output};
use crate::prompts::{self};
use crate::summarize::{SummaryJob, SummaryOutcome, copy_steps};
use crate::tokens;
use crate::trajectory::{Observation, ObservationResult, Source, Step, ToolCall};

mod chat;
mod policy;
mod record;
mod settings;
mod state;

use self::chat::Chat;
use self::record::fingerprint;
use self::state::InFlight;

pub use policy::{Action, Finish, ModelTurn, ResponseLog};
pub use settings::LoopSettings;
pub use state::{AgentLoop, ClosedSegment, Command, Next, Reply, SummaryPurpose, Totals};

/// The longest wait one command may ask for.
pub const MAX_COMMAND_DURATION: f64 = 60.0;

/// Unwinding drops history until this many tokens are free.
pub const UNWIND_TARGET_FREE_TOKENS: i64 = 4000;

/// Truncated replies in a row after which the turn fails (the reference retries without end).
pub const MAX_CONSECUTIVE_TRUNCATIONS: u32 = 5;

/// Bytes a summarization sets aside for the screen its question prompt quotes.
const SCREEN_ALLOWANCE: i64 = 4_000;

/// The least each summarization product may keep, however full the context.
const MIN_PRODUCT_BYTES: i64 = 2_048;

impl AgentLoop {
    pub fn new(settings: LoopSettings) -> AgentLoop {
        AgentLoop {
            session_id: settings.session_id.clone(),
            settings,
            original_instruction: String::new(),
            chat: Chat::default(),
            pending_completion: false,
            pending_handoff_prompt: None,
            pending_subagent_refs: None,
            n_episodes: 0,
            summarization_count: 0,
            steps: Vec::new(),
            debug_logged: None,
            debug_pending: None,
            asciinema_markers: Vec::new(),
            subagent_metrics: Totals::default(),
            api_request_times_msec: Vec::new(),
            recording_started: None,
            episode: 0,
            prompt: String::new(),
            totals: Totals::default(),
            episode_start_totals: Totals::default(),
            episode_calls: 0,
            trajectory_id: uuid::Uuid::new_v4().to_string(),
            in_flight: None,
            finished_segments: Vec::new(),
            continuation_index: 0,
            last_model_name: None,
            consecutive_truncations: 0,
            rollout_prompt_ids: Vec::new(),
            rollout_completion_ids: Vec::new(),
            rollout_logprobs: Vec::new(),
            rollout_extra: Vec::new(),
            subagent_rollout_details: Vec::new(),
            after_overflow: false,
            summarizing: None,
            released: 0,
            command_cursor: 0,
            fallback: None,
            stop_reason: None,
            llm_calls: 0,
            summarized_in: None,
            summaries_stalled: false,
            overflows_after_stall: 0,
            progress: Default::default(),
            warnings: Vec::new(),
            pending_summary_notes: Vec::new(),
        }
    }

    pub fn settings(&self) -> &LoopSettings {
        &self.settings
    }

    /// Builds the first prompt from the task and the first screen, and records it as step 1.
    pub fn start(&mut self, instruction: &str, terminal_state: &str) {
        self.start_with(instruction, "", terminal_state);
    }

    /// [`AgentLoop::start`] with `extras` (the task's MCP servers, see
    /// [`prompts::mcp_servers_section`]) after the instruction in the first prompt only: the
    /// summarization prompts quote the raw instruction, as the reference's do.
    pub fn start_with(&mut self, instruction: &str, extras: &str, terminal_state: &str) {
        self.original_instruction = instruction.to_string();
        let terminal_state = limit_output(terminal_state, MAX_OUTPUT_BYTES);
        let shown = format!("{instruction}{extras}");
        self.prompt = prompts::initial_prompt(&self.settings.texts, self.settings.format, &shown, &terminal_state);
        self.steps.push(Step::new(1, Source::User, self.prompt.clone()));
    }

    /// Marks the moment the terminal recording started; markers are timed from it.
    pub fn set_recording_started(&mut self, at: Instant) {
        self.recording_started = Some(at);
    }

    /// Enters the next episode; None when `max_turns` episodes have run.
    pub fn begin_episode(&mut self) -> Option<u64> {
        if self.episode >= self.settings.max_turns {
            return None;
        }
        self.n_episodes = self.episode + 1;
        self.episode_start_totals = self.totals;
        self.episode_calls = 0;
        Some(self.episode)
    }

    pub fn episode(&self) -> u64 {
        self.episode
    }

    /// The prompt the current episode sends.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The request for the current prompt: the history plus the prompt as a user message.
    pub fn request(&mut self) -> LlmRequest {
        let mut messages = self.chat.to_vec();
        messages.push(ChatMessage::user(self.prompt.clone()));
        let prints: Vec<u64> = messages.iter().map(fingerprint).collect();
        let logged = self.debug_logged.as_ref().and_then(|(file, before)| {
            let n_messages = before.iter().zip(&prints).take_while(|(a, b)| a == b).count();
            (n_messages > 0).then(|| LoggedPrefix { n_messages, file: file.clone() })
        });
        self.debug_pending = Some(prints);
        LlmRequest {
            messages,
            temperature: self.settings.request_temperature(),
            extra: self.settings.request_extra(),
            logged,
        }
    }

    /// A main-chat call's `debug.json` (holding `reply`) is written to `episode`'s directory:
    /// the next request's record refers to it for the messages they share, its request's and
    /// then its reply as the chat's next message.
    pub(crate) fn debug_written(&mut self, episode: u64, reply: &str) {
        if let Some(mut prints) = self.debug_pending.take() {
            prints.push(fingerprint(&ChatMessage::assistant(reply)));
            self.debug_logged = Some((format!("episode-{episode}/debug.json"), prints));
        }
    }

    /// Proactive summarization: on, and fewer free tokens than the threshold.
    pub fn wants_proactive_summary(&mut self) -> bool {
        // The reference asks for an instruction instead of a history: with a context smaller
        // than the threshold, its first episode "summarizes" an empty chat.
        let nothing = if self.settings.reference { self.original_instruction.is_empty() } else { self.chat.is_empty() };
        if !self.settings.enable_summarize || nothing {
            return false;
        }
        // free < threshold, that is tokens > limit - threshold.
        let most = self.settings.context_limit as i64 - self.settings.proactive_summarization_threshold as i64;
        self.chat.exceeds(most)
    }

    /// Starts a summarization: None when there is no history to summarise (the raw instruction
    /// is then the handoff, see [`AgentLoop::handoff_instruction`]).
    pub fn begin_summarization(&mut self) -> Option<SummaryJob> {
        if self.chat.is_empty() {
            return None;
        }
        self.summarization_count += 1;
        self.summarized_in = Some(self.episode);
        self.progress.after_summary = true;
        // The reference's approximation of "the steps the history covers", kept literally.
        let steps_to_include = (1 + (self.chat.len() - 1) / 2).min(self.steps.len());
        let product_limit = self.product_limit();
        Some(SummaryJob {
            index: self.summarization_count,
            original_instruction: self.original_instruction.clone(),
            chat: self.chat.to_vec(),
            copied_steps: copy_steps(&self.steps[..steps_to_include]),
            bodies_on_disk: steps_to_include.min(self.released),
            parent_session_id: self.session_id.clone(),
            model_name: self.settings.model_name.clone(),
            temperature: self.settings.request_temperature(),
            llm_call_kwargs: self.settings.request_extra(),
            atif: self.settings.atif,
            trajectory_ids: std::array::from_fn(|_| uuid::Uuid::new_v4().to_string()),
            texts: self.settings.texts.clone(),
            product_limit,
        })
    }

    /// Applies a finished summarization: the chat restarts from the first message and the
    /// questions exchange, and the handoff becomes the next prompt (pending its trajectory steps).
    pub fn apply_summary(&mut self, outcome: &SummaryOutcome) {
        for cut in &outcome.cuts {
            self.warn(cut.clone());
        }
        self.pending_summary_notes = outcome.cuts.clone();
        self.chat.truncate(1);
        self.chat.push(ChatMessage::user(outcome.question_prompt.clone()));
        self.chat.push(ChatMessage::assistant(outcome.questions.clone()));
        // The calls were counted one by one as they finished (`on_subagent_call`).
        self.pending_subagent_refs = Some(outcome.refs.clone());
        self.pending_handoff_prompt = Some(outcome.handoff_prompt.clone());
        self.prompt = outcome.handoff_prompt.clone();
    }

    /// The most bytes a summarization's product (its summary, questions, answers, or the short
    /// summary of the fallback) may bring into the chat. After a summarization the chat holds
    /// the first message, the question prompt (the instruction, the summary, the screen) and the
    /// questions, then the handoff (the answers): each product gets a third of what the rest
    /// leaves free, in bytes (a token is at least one byte).
    pub(crate) fn product_limit(&self) -> usize {
        let first = self.chat.first().map_or(0, tokens::count_message) as i64;
        let rest = first + self.original_instruction.len() as i64 + SCREEN_ALLOWANCE + UNWIND_TARGET_FREE_TOKENS;
        ((self.settings.context_limit as i64 - rest) / 3).max(MIN_PRODUCT_BYTES) as usize
    }

    /// Records a warning for the trial's result (each text once; the Trial logs it).
    pub(crate) fn warn(&mut self, warning: String) {
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// The warnings recorded since the last call, for the trial's result.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Model calls started so far, summarization calls included.
    pub fn llm_calls(&self) -> u64 {
        self.llm_calls
    }

    /// Whether the chat with the current prompt leaves less room than a reply needs
    /// ([`UNWIND_TARGET_FREE_TOKENS`]); the prompt is counted by its bytes (a token is at least
    /// one).
    fn exceeds_context(&mut self) -> bool {
        let room = self.settings.context_limit as i64 - UNWIND_TARGET_FREE_TOKENS - self.prompt.len() as i64;
        self.chat.exceeds(room)
    }

    /// The bytes the chat would send with the current prompt.
    fn chat_bytes(&self) -> usize {
        self.chat.iter().map(|m| m.content.len()).sum::<usize>() + self.prompt.len()
    }

    /// The handoff when there was nothing to summarise: the raw instruction.
    pub fn handoff_instruction(&mut self) {
        self.pending_handoff_prompt = Some(self.original_instruction.clone());
        self.prompt = self.original_instruction.clone();
    }

    /// Counts a summarization call (subagent or short-summary fallback) apart from the main chat.
    pub fn record_subagent_call(&mut self, usage: Option<&Usage>, elapsed_msec: f64) {
        if let Some(usage) = usage {
            self.subagent_metrics.add(usage);
        }
        self.api_request_times_msec.push(elapsed_msec);
    }

    /// Replaces the prompt after a context overflow whose full summarization failed.
    pub fn set_fallback_prompt(&mut self, prompt: String) {
        self.prompt = prompt;
    }

    pub fn original_instruction(&self) -> &str {
        &self.original_instruction
    }

    /// Drops the newest exchanges until enough tokens are free; the first message always stays.
    /// Returns how many messages were dropped.
    pub fn unwind(&mut self) -> usize {
        let before = self.chat.len();
        while self.chat.len() > 1 {
            // free >= target, that is tokens <= limit - target.
            if !self.chat.exceeds(self.settings.context_limit as i64 - UNWIND_TARGET_FREE_TOKENS) {
                break;
            }
            let drop = if self.chat.len() >= 3 { 2 } else { 1 };
            self.chat.truncate(self.chat.len() - drop);
        }
        before - self.chat.len()
    }

    /// Takes the model's reply to the current prompt. `in_history` is false for the synthetic
    /// reply used when even the call after a summarization failed (nothing was exchanged).
    pub fn on_response(&mut self, response: LlmResponse, elapsed_msec: f64, in_history: bool) -> Reply {
        self.on_reply(response, in_history.then_some(elapsed_msec), in_history)
    }

    /// [`AgentLoop::on_response`], with the call's time recorded only when `elapsed_msec` is
    /// given: a reply salvaged from a truncated call is taken, but the call did not succeed, and
    /// reg-api-request-times holds successful calls only (as the reference's does).
    fn on_reply(&mut self, response: LlmResponse, elapsed_msec: Option<f64>, in_history: bool) -> Reply {
        self.consecutive_truncations = 0;
        if let Some(elapsed) = elapsed_msec {
            self.api_request_times_msec.push(elapsed);
        }
        if in_history {
            self.episode_calls += 1;
            if let Some(usage) = &response.usage {
                self.totals.add(usage);
            }
            if let Some(ids) = response.prompt_token_ids.clone().filter(|ids| !ids.is_empty()) {
                self.rollout_prompt_ids.push(ids);
            }
            if let Some(ids) = response.completion_token_ids.clone().filter(|ids| !ids.is_empty()) {
                self.rollout_completion_ids.push(ids);
                if let Some(logprobs) = response.logprobs.clone().filter(|l| !l.is_empty()) {
                    self.rollout_logprobs.push(logprobs);
                }
            }
            if let Some(extra) = response.provider_extra.clone() {
                self.rollout_extra.push(extra);
            }
            self.chat.push(ChatMessage::user(self.prompt.clone()));
            let mut reply = ChatMessage::assistant(response.content.clone());
            if self.settings.interleaved_thinking {
                reply.reasoning_content = response.reasoning_content.clone().filter(|r| !r.is_empty());
            }
            self.chat.push(reply);
        }
        if response.model_name.is_some() {
            self.last_model_name = response.model_name.clone();
        }
        if let Some(refs) = self.pending_subagent_refs.take() {
            let mut step = Step::new(self.steps.len() as u64 + 1, Source::System, prompts::SUMMARIZATION_STEP_MESSAGE);
            let cuts = std::mem::take(&mut self.pending_summary_notes);
            // The chat before this step is replaced by the handoff (a compaction).
            let mut extra = Map::new();
            extra.insert("context_management".into(), json!({"type": "compaction", "boundary": "replace"}));
            if !cuts.is_empty() {
                extra.insert("cut_to_fit".into(), json!(cuts));
            }
            step.extra = Some(extra);
            step.observation = Some(Observation {
                results: vec![ObservationResult {
                    source_call_id: None,
                    content: None,
                    subagent_trajectory_ref: Some(refs),
                }],
            });
            self.steps.push(step);
        }
        if let Some(handoff) = self.pending_handoff_prompt.take() {
            if self.settings.linear_history {
                self.split_trajectory();
            } else {
                self.steps.push(Step::new(self.steps.len() as u64 + 1, Source::User, handoff));
            }
        }

        let parsed = self.settings.format.parse_as(&response.content, self.settings.reference);
        self.record_marker(format!("Episode {}: {} commands", self.episode, parsed.commands.len()));
        let feedback = prompts::feedback(&parsed.error, &parsed.warning);
        if !parsed.error.is_empty() {
            self.prompt = prompts::parse_error_prompt(&self.settings.texts, self.settings.format, &feedback);
            let mut step = self.agent_step(&response);
            // An unparsable reply is recorded verbatim, without tool calls.
            step.message = response.content.clone();
            step.observation = Some(Observation::text(self.prompt.clone()));
            self.steps.push(step);
            self.episode += 1;
            return Reply::Reprompt;
        }
        let commands: Vec<Command> = parsed
            .commands
            .iter()
            .map(|c| Command { keystrokes: c.keystrokes.clone(), duration: cap_duration(c.duration) })
            .collect();
        self.in_flight = Some(InFlight { response, parsed, feedback, commands: commands.clone() });
        self.command_cursor = 0;
        Reply::Execute(commands)
    }

    /// The salvageable part of a reply cut off at the output limit, if any.
    pub fn salvage(&self, truncated: &str) -> Option<String> {
        self.settings.format.salvage(truncated)
    }

    /// Takes a reply cut off at the output limit that could not be salvaged: the exchange joins
    /// the history and the next prompt explains the limit. Returns false when too many replies in
    /// a row were cut off (the turn should fail).
    pub fn on_truncated(&mut self, truncated: &str, usage: Option<&Usage>) -> bool {
        // No reg-api-request-times entry: the call failed (the reference records successful
        // calls only). Its tokens are counted all the same (docs/DIFFERENCES.md).
        if let Some(usage) = usage {
            self.totals.add(usage);
        }
        self.episode_calls += 1;
        self.consecutive_truncations += 1;
        let warnings = self.settings.format.parse_as(truncated, self.settings.reference).warning;
        let limit = match self.settings.output_limit {
            Some(n) => format!("{n} tokens"),
            None => "the maximum output length".to_string(),
        };
        let message = prompts::output_limit_prompt(&self.settings.texts, &limit, &warnings);
        self.chat.push(ChatMessage::user(self.prompt.clone()));
        self.chat.push(ChatMessage::assistant(truncated.to_string()));
        self.prompt = message;
        self.consecutive_truncations <= MAX_CONSECUTIVE_TRUNCATIONS
    }

    /// Takes the terminal output after the current reply's commands ran.
    pub fn on_terminal_output(&mut self, terminal_output: &str) -> Next {
        let Some(flight) = self.in_flight.take() else { return Next::Continue };
        let limited = limit_output(terminal_output, MAX_OUTPUT_BYTES);
        let was_pending = self.pending_completion;
        let complete = flight.parsed.is_task_complete;
        let observation = if complete {
            if was_pending {
                limited
            } else {
                self.pending_completion = true;
                prompts::confirmation_prompt(&self.settings.texts, self.settings.format, &limited)
            }
        } else {
            self.pending_completion = false;
            // The reference limits this output a second time (its marker then counts the first
            // marker's bytes).
            let limited = if self.settings.reference { limit_output(&limited, MAX_OUTPUT_BYTES) } else { limited };
            if flight.feedback.contains("WARNINGS:") {
                prompts::warnings_observation(&self.settings.texts, &flight.feedback, &limited)
            } else {
                limited
            }
        };

        let mut step = self.agent_step(&flight.response);
        if self.settings.raw_content {
            step.message = flight.response.content.clone();
        } else {
            let mut parts = Vec::new();
            if !flight.parsed.analysis.is_empty() {
                parts.push(format!("Analysis: {}", flight.parsed.analysis));
            }
            if !flight.parsed.plan.is_empty() {
                parts.push(format!("Plan: {}", flight.parsed.plan));
            }
            step.message = parts.join("\n");
            let mut tool_calls: Vec<ToolCall> = flight
                .commands
                .iter()
                .enumerate()
                .zip(&flight.parsed.commands)
                .map(|((idx, c), parsed)| ToolCall {
                    tool_call_id: format!("call_{}_{}", self.episode, idx + 1),
                    function_name: "bash_command".to_string(),
                    arguments: json!({"keystrokes": c.keystrokes, "duration": duration_value(parsed.duration, c.duration)}),
                })
                .collect();
            if complete {
                tool_calls.push(ToolCall {
                    tool_call_id: format!("call_{}_task_complete", self.episode),
                    function_name: "mark_task_complete".to_string(),
                    arguments: json!({}),
                });
            }
            step.tool_calls = (!tool_calls.is_empty()).then_some(tool_calls);
        }
        let mut recorded = Observation::text(observation.clone());
        // One command's output is linked to its call; a batch shares one output, so it is not.
        if !self.settings.raw_content && flight.commands.len() == 1 {
            recorded.results[0].source_call_id = Some(format!("call_{}_1", self.episode));
        }
        step.observation = Some(recorded);
        self.steps.push(step);
        self.prompt = observation;
        self.episode += 1;
        if complete && was_pending { Next::Done } else { Next::Continue }
    }

    /// The run stops inside an episode whose calls cost tokens no step holds yet (replies cut
    /// off at the output limit, counted as they came: docs/DIFFERENCES.md): one agent step with
    /// the last reply's text carries them, so the steps still add up to the totals.
    pub(super) fn record_unfinished_episode(&mut self, last_reply: &str) {
        if self.totals == self.episode_start_totals {
            return;
        }
        let mut step = self.agent_step(&LlmResponse::default());
        step.message = last_reply.to_string();
        self.steps.push(step);
    }

    pub fn pending_completion(&self) -> bool {
        self.pending_completion
    }

    pub fn chat(&self) -> &[ChatMessage] {
        &self.chat
    }
}

/// The recorded duration: Python's `min(duration, 60)` gives the integer `60` when the wait
/// asked for was longer, so the file says `60`, not `60.0`.
fn duration_value(asked: f64, capped: f64) -> Value {
    if asked > MAX_COMMAND_DURATION { json!(MAX_COMMAND_DURATION as u64) } else { json!(capped) }
}

/// Waits are capped at 60 s; a negative or NaN wait (which the parser lets through) becomes 0.
fn cap_duration(duration: f64) -> f64 {
    if duration.is_nan() || duration < 0.0 { 0.0 } else { duration.min(MAX_COMMAND_DURATION) }
}

#[cfg(test)]
mod tests;
