//! The loop's state: [`AgentLoop`] with its fields, the registers of Terminus 2 among them
//! (each field's doc comment names its register), and the small types those fields and the
//! loop's answers are made of. The loop's methods are in the parent module (the episode),
//! `policy` (the next action) and `record` (the trajectory and its figures).

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use terminus_core::llm::{LlmResponse, Usage};

use super::chat::Chat;
use super::settings::LoopSettings;
use crate::parser::ParseResult;
use crate::summarize::{SubagentCall, SummaryJob};
use crate::trajectory::{Step, Trajectory};

/// One command to carry out: type `keystrokes`, then wait `duration` seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Command {
    pub keystrokes: String,
    pub duration: f64,
}

/// What to do after a model reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// The reply could not be parsed; nothing runs and the feedback becomes the next prompt.
    Reprompt,
    /// Run these commands in order, then report the terminal output.
    Execute(Vec<Command>),
}

/// What to do after an episode's terminal output was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// The model confirmed completion twice in a row.
    Done,
}

/// Running token and cost totals.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_tokens: u64,
    pub cost_usd: f64,
    /// Calls whose usage was estimated (the provider stated none that could be used).
    pub estimated_calls: u64,
}

impl Totals {
    pub(super) fn add(&mut self, usage: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(usage.prompt_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.completion_tokens);
        self.cache_tokens = self.cache_tokens.saturating_add(usage.cache_tokens);
        self.cost_usd += usage.cost_usd;
        self.estimated_calls += u64::from(usage.estimated);
    }

    pub(super) fn plus(self, other: Totals) -> Totals {
        Totals {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cache_tokens: self.cache_tokens.saturating_add(other.cache_tokens),
            cost_usd: self.cost_usd + other.cost_usd,
            estimated_calls: self.estimated_calls + other.estimated_calls,
        }
    }
}

/// A reply whose commands are being carried out.
#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) response: LlmResponse,
    pub(super) parsed: ParseResult,
    pub(super) feedback: String,
    pub(super) commands: Vec<Command>,
}

/// The loop's state.
#[derive(Clone, Debug)]
pub struct AgentLoop {
    pub(super) settings: LoopSettings,
    pub(super) original_instruction: String,
    /// reg-chat-messages: the conversation sent with every call; summarization replaces it.
    pub(super) chat: Chat,
    /// reg-pending-completion: the previous episode claimed completion; a second claim in a row ends the run.
    pub(super) pending_completion: bool,
    /// reg-pending-handoff-prompt: a summarization's handoff, recorded as a user step (or a
    /// trajectory split) in the episode that sends it, then cleared.
    pub(super) pending_handoff_prompt: Option<String>,
    /// reg-pending-subagent-refs: the subagent trajectories behind that handoff, recorded as a
    /// system step just before it, then cleared.
    pub(super) pending_subagent_refs: Option<Vec<Value>>,
    /// reg-n-episodes: episodes started so far (loop index + 1 of the last one entered).
    pub(super) n_episodes: u64,
    /// reg-summarization-count: summarizations started in this run.
    pub(super) summarization_count: u32,
    /// reg-trajectory-steps: the ordered record of the current trajectory segment.
    pub(super) steps: Vec<Step>,
    /// The last `debug.json` written for the main chat and the fingerprints of the messages
    /// it holds, so the next record holds only what is new.
    pub(super) debug_logged: Option<(String, Vec<u64>)>,
    /// The fingerprints of the request in flight, kept until its reply (and record) arrives.
    pub(super) debug_pending: Option<Vec<u64>>,
    /// reg-asciinema-markers: (seconds since the recording started, label), merged into the
    /// recording when the session stops.
    pub(super) asciinema_markers: Vec<(f64, String)>,
    /// reg-subagent-metrics: summarization usage, kept apart and folded in at the end.
    pub(super) subagent_metrics: Totals,
    /// reg-api-request-times: milliseconds of every successful model call, subagents included.
    pub(super) api_request_times_msec: Vec<f64>,
    pub(super) recording_started: Option<Instant>,
    /// The 0-based index of the current episode.
    pub(super) episode: u64,
    /// The prompt the next call sends.
    pub(super) prompt: String,
    pub(super) totals: Totals,
    /// Totals when the current episode started; step metrics are the difference.
    pub(super) episode_start_totals: Totals,
    /// Main-chat calls since then (the step's `llm_call_count`).
    pub(super) episode_calls: u32,
    /// The current segment's `trajectory_id` (a new one after a linear-history split).
    pub(super) trajectory_id: String,
    pub(super) in_flight: Option<InFlight>,
    /// linear_history: segments already closed, waiting to be written (file name, content).
    pub(super) finished_segments: Vec<ClosedSegment>,
    pub(super) continuation_index: u32,
    pub(super) session_id: String,
    pub(super) last_model_name: Option<String>,
    pub(super) consecutive_truncations: u32,
    /// Per main-chat call, when the provider sent them (collect_rollout_details).
    pub(super) rollout_prompt_ids: Vec<Vec<u64>>,
    pub(super) rollout_completion_ids: Vec<Vec<u64>>,
    pub(super) rollout_logprobs: Vec<Vec<f64>>,
    /// The provider's own reply fields, one map per call that had some.
    pub(super) rollout_extra: Vec<Map<String, Value>>,
    /// One entry per subagent call that brought token ids or log-probabilities, each holding
    /// one-element lists, after the main chat's in `rollout_details`.
    pub(super) subagent_rollout_details: Vec<Value>,
    /// The current query follows a context-overflow summarization: if it fails, the turn goes
    /// on with a stand-in reply instead of ending the run (the reference's last resort).
    pub(super) after_overflow: bool,
    /// The summarization in progress, whose subagent calls are counted as they arrive.
    pub(super) summarizing: Option<Summarizing>,
    /// The leading steps of `steps` whose bodies are on disk only (see
    /// [`AgentLoop::release_written`]): what remains of them in memory is their frame.
    pub(super) released: usize,
    /// The next command of the in-flight reply to carry out.
    pub(super) command_cursor: usize,
    /// The fallback waiting for a screen capture, if any.
    pub(super) fallback: Option<Fallback>,
    /// Why the run stopped early without an error (its cost limit), for the metadata.
    pub(super) stop_reason: Option<&'static str>,
    /// Model calls started so far, summarization calls included (a summarization counts its
    /// three), against `max_llm_calls`.
    pub(super) llm_calls: u64,
    /// The episode the last summarization ran in: at most one per episode.
    pub(super) summarized_in: Option<u64>,
    /// A summarization left the chat no smaller than it found it: none is started again, and
    /// a context overflow goes to the fallbacks.
    pub(super) summaries_stalled: bool,
    /// Context overflows since the summaries stalled: the second ends the run.
    pub(super) overflows_after_stall: u32,
    /// What the trial's result should say about this run (cuts, stalls), not yet taken.
    pub(super) warnings: Vec<String>,
    /// What the next summarization step records of its summarization (its cuts).
    pub(super) pending_summary_notes: Vec<String>,
    /// Whether the replies after summarizations make progress ([`NoProgress`]).
    pub(super) progress: NoProgress,
}

/// Replies after summarizations that make no progress: the first reply after each summarization
/// (or fallback) is fingerprinted by its text and, when it cannot be parsed, by the feedback it
/// gets; one that matches the last such reply either way is a repeat. [`NO_PROGRESS_REPEATS`]
/// repeats in a row end the run: the model answers a fresh context as it answered the last, so
/// every further summarization would buy the same reply again.
#[derive(Clone, Debug, Default)]
pub(super) struct NoProgress {
    /// A summarization or fallback ran since the last reply.
    pub(super) after_summary: bool,
    /// The last post-summary reply's text and parse-feedback fingerprints.
    pub(super) last: Option<(u64, Option<u64>)>,
    pub(super) repeats: u32,
}

/// How many post-summary replies in a row may repeat the one before them.
pub const NO_PROGRESS_REPEATS: u32 = 3;

impl NoProgress {
    /// Records a post-summary reply (`text`, and the feedback when it could not be parsed);
    /// whether the run makes no progress.
    pub(super) fn stalled(&mut self, text: &str, parse_feedback: Option<&str>) -> bool {
        let fingerprint = |s: &str| {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            s.hash(&mut hasher);
            hasher.finish()
        };
        let key = (fingerprint(text), parse_feedback.map(fingerprint));
        let repeat =
            self.last.is_some_and(|(text, feedback)| text == key.0 || (feedback.is_some() && feedback == key.1));
        self.repeats = if repeat { self.repeats + 1 } else { 0 };
        self.last = Some(key);
        self.repeats >= NO_PROGRESS_REPEATS
    }
}

#[cfg(test)]
mod no_progress_tests {
    use super::*;

    #[test]
    fn the_same_reply_or_the_same_parse_error_after_summaries_is_no_progress() {
        let mut same = NoProgress::default();
        let stalls: Vec<bool> = (0..4).map(|_| same.stalled("[[[[", Some("no JSON"))).collect();
        assert_eq!(stalls, [false, false, false, true]);
        let mut errors = NoProgress::default();
        let stalls: Vec<bool> = (0..4).map(|i| errors.stalled(&"[".repeat(i + 1), Some("no JSON"))).collect();
        assert_eq!(stalls, [false, false, false, true], "different garbage, the same error");
        let mut progress = NoProgress::default();
        assert!(!(0..10).any(|i| progress.stalled(&format!("reply {i}"), None)), "different replies go on");
        let mut broken = NoProgress::default();
        for _ in 0..2 {
            assert!(!broken.stalled("x", None));
        }
        assert!(!broken.stalled("y", None), "a different reply starts the count again");
    }
}

/// A summarization between its start and its result.
#[derive(Clone, Debug)]
pub(super) struct Summarizing {
    pub(super) job: Arc<SummaryJob>,
    pub(super) purpose: SummaryPurpose,
    /// The bytes of the chat it summarises (with the prompt that was to be sent).
    pub(super) bytes_before: usize,
    /// The summary subagent's call, which the answers subagent's trajectory repeats.
    pub(super) summary: Option<SubagentCall>,
}

/// Why a summarization was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryPurpose {
    /// Free context fell below the threshold at the start of an episode.
    Proactive,
    /// The provider rejected a request as too long.
    Overflow,
}

/// Which summarization fallback a screen capture is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fallback {
    /// Fallback 2: a short summary of the instruction and the screen.
    ShortSummary,
    /// Fallback 3: the instruction and the screen alone.
    LastResort,
}

/// A segment a linear-history split closed: its file, its last version, and how many of its
/// leading steps are released (in that file already, without their bodies here).
#[derive(Clone, Debug)]
pub struct ClosedSegment {
    pub file: String,
    pub trajectory: Trajectory,
    pub released: usize,
}
