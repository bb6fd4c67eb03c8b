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
            temperature: Some(self.settings.temperature),
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
            temperature: self.settings.temperature,
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
            if !cuts.is_empty() {
                let mut extra = Map::new();
                extra.insert("cut_to_fit".into(), json!(cuts));
                step.extra = Some(extra);
            }
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
        step.observation = Some(Observation::text(observation.clone()));
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
mod tests {
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
            usage: Some(Usage { prompt_tokens, completion_tokens: 10, cache_tokens: 0, cost_usd: 0.001 }),
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
        let Reply::Execute(commands) = agent.on_response(reply(RUN, 100), 5.0, true) else {
            panic!("expected commands")
        };
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
        let metrics = trajectory.final_metrics.unwrap();
        assert_eq!(
            (metrics.total_prompt_tokens, metrics.total_completion_tokens, metrics.total_cached_tokens),
            (Some(300), Some(30), Some(0))
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
        let mut agent = AgentLoop::new(LoopSettings { llm_kwargs: llm_kwargs.clone(), llm_call_kwargs, ..settings() });
        agent.start("t", "");
        let expected = map(json!({"top_p": 0.5, "seed": 7, "extra_body": {"a": 1, "b": 2}}));
        let request = agent.request();
        assert_eq!(request.extra, expected, "the agent's temperature is not replaced");
        assert_eq!(request.temperature, Some(0.7));
        assert_eq!(agent.trajectory(false).agent.extra.unwrap()["llm_kwargs"], Value::Object(llm_kwargs));
        turn(&mut agent, RUN, "");
        assert_eq!(agent.begin_summarization().unwrap().llm_call_kwargs, expected, "subagents send them too");
        let plain = AgentLoop::new(settings());
        assert!(!plain.trajectory(false).agent.extra.unwrap().contains_key("llm_kwargs"), "only when given");
    }

    #[test]
    fn a_session_id_the_user_gave_is_sent_in_extra_body() {
        let map = |v: Value| v.as_object().unwrap().clone();
        let llm_call_kwargs = map(json!({"extra_body": {"session_id": "mine", "b": 2}}));
        let given = LoopSettings { send_session_id: true, llm_call_kwargs, ..settings() };
        let expected = map(json!({"extra_body": {"session_id": given.session_id.clone(), "b": 2}}));
        assert_eq!(given.request_extra(), expected, "set last, as the reference's LiteLLM does");
        assert!(settings().request_extra().is_empty(), "a generated id is not sent");
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
        let usage = Usage { prompt_tokens: 50, completion_tokens: 4096, cache_tokens: 0, cost_usd: 0.0 };
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
                usage: Some(Usage { prompt_tokens: tokens, completion_tokens: 20, cache_tokens: 0, cost_usd: 0.0 }),
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
        assert_eq!(
            sources,
            vec![Source::User, Source::Agent, Source::Agent, Source::System, Source::User, Source::Agent]
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
        let shape: Vec<(Source, Option<bool>)> =
            current.steps.iter().map(|s| (s.source, s.is_copied_context)).collect();
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
        let shape: Vec<(Source, Option<bool>)> =
            current.steps.iter().map(|s| (s.source, s.is_copied_context)).collect();
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
}
