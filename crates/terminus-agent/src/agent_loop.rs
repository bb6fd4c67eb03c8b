//! The Terminus 2 episode loop as a state machine (terminus2-reference §3.2).
//!
//! One episode is one model call:
//!
//! ```text
//! begin_episode ─► request ─► on_response ─┬─► Reprompt (unparsable reply; feedback is the next prompt)
//!                                          └─► Execute(commands) ─► on_terminal_output ─► Continue | Done
//! ```
//!
//! The caller (the Trial actor) does the I/O: it sends the request to the LLM actor, types the
//! commands into tmux and waits their durations, and captures the terminal. This type holds the
//! registers of the handbook (seed 000) that the skeleton needs, each as an explicit field:
//! chat messages, pending completion, the episode count, trajectory steps and API request times.
//! Summarization and its registers arrive with the Summarizer actor (not built yet).

use serde_json::{Map, Value, json};
use terminus_core::llm::{ChatMessage, LlmRequest, LlmResponse};

use crate::limit::{MAX_OUTPUT_BYTES, limit_output};
use crate::parser::{ParseResult, parse_json_response};
use crate::prompts;
use crate::trajectory::{
    AgentRecord, FinalMetrics, Observation, SCHEMA_VERSION, Source, Step, StepMetrics, ToolCall, Trajectory,
};

/// The longest wait one command may ask for.
pub const MAX_COMMAND_DURATION: f64 = 60.0;

/// What the loop needs to know about its configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopSettings {
    pub model_name: String,
    pub temperature: f64,
    pub max_turns: u64,
    pub llm_call_kwargs: Map<String, Value>,
    pub session_id: String,
}

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

/// Running token and cost totals of the main chat.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_tokens: u64,
    pub cost_usd: f64,
}

/// A reply whose commands are being carried out.
#[derive(Clone, Debug)]
struct InFlight {
    response: LlmResponse,
    parsed: ParseResult,
    feedback: String,
    commands: Vec<Command>,
    metrics: Option<StepMetrics>,
}

/// The loop's state.
#[derive(Clone, Debug)]
pub struct AgentLoop {
    settings: LoopSettings,
    /// reg-chat-messages: the conversation sent with every call.
    chat: Vec<ChatMessage>,
    /// reg-pending-completion: the previous episode claimed completion; a second claim in a row ends the run.
    pending_completion: bool,
    /// reg-n-episodes: episodes started so far (loop index + 1 of the last one entered).
    n_episodes: u64,
    /// reg-trajectory-steps: the ordered record that becomes `trajectory.json`.
    steps: Vec<Step>,
    /// reg-api-request-times: milliseconds of every successful model call, in order.
    api_request_times_msec: Vec<f64>,
    /// The 0-based index of the next episode.
    episode: u64,
    /// The prompt the next call sends.
    prompt: String,
    totals: Totals,
    in_flight: Option<InFlight>,
}

impl AgentLoop {
    pub fn new(settings: LoopSettings) -> AgentLoop {
        AgentLoop {
            settings,
            chat: Vec::new(),
            pending_completion: false,
            n_episodes: 0,
            steps: Vec::new(),
            api_request_times_msec: Vec::new(),
            episode: 0,
            prompt: String::new(),
            totals: Totals::default(),
            in_flight: None,
        }
    }

    /// Builds the first prompt from the task and the first screen, and records it as step 1.
    pub fn start(&mut self, instruction: &str, terminal_state: &str) {
        self.prompt = prompts::initial_prompt(instruction, &limit_output(terminal_state, MAX_OUTPUT_BYTES));
        self.steps.push(Step::new(1, Source::User, self.prompt.clone()));
    }

    /// Enters the next episode; None when `max_turns` episodes have run.
    pub fn begin_episode(&mut self) -> Option<u64> {
        if self.episode >= self.settings.max_turns {
            return None;
        }
        self.n_episodes = self.episode + 1;
        Some(self.episode)
    }

    /// The prompt the current episode sends.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The request for the current episode: the history plus the prompt as a user message.
    pub fn request(&self) -> LlmRequest {
        let mut messages = self.chat.clone();
        messages.push(ChatMessage::user(self.prompt.clone()));
        LlmRequest {
            messages,
            temperature: Some(self.settings.temperature),
            extra: self.settings.llm_call_kwargs.clone(),
        }
    }

    /// Takes the model's reply to the current episode.
    pub fn on_response(&mut self, response: LlmResponse, elapsed_msec: f64) -> Reply {
        self.api_request_times_msec.push(elapsed_msec);
        let metrics = response.usage.map(|usage| {
            self.totals.input_tokens += usage.prompt_tokens;
            self.totals.output_tokens += usage.completion_tokens;
            self.totals.cache_tokens += usage.cache_tokens;
            self.totals.cost_usd += usage.cost_usd;
            StepMetrics {
                prompt_tokens: Some(usage.prompt_tokens),
                completion_tokens: Some(usage.completion_tokens),
                cached_tokens: (usage.cache_tokens > 0).then_some(usage.cache_tokens),
                cost_usd: (usage.cost_usd > 0.0).then_some(usage.cost_usd),
            }
        });
        self.chat.push(ChatMessage::user(self.prompt.clone()));
        self.chat.push(ChatMessage::assistant(response.content.clone()));

        let parsed = parse_json_response(&response.content);
        let feedback = prompts::feedback(&parsed.error, &parsed.warning);
        if !parsed.error.is_empty() {
            self.prompt = prompts::parse_error_prompt(&feedback);
            let mut step = self.agent_step(&response, metrics);
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
        self.in_flight = Some(InFlight { response, parsed, feedback, commands: commands.clone(), metrics });
        Reply::Execute(commands)
    }

    /// Takes the terminal output after the current reply's commands ran.
    pub fn on_terminal_output(&mut self, terminal_output: &str) -> Next {
        let Some(flight) = self.in_flight.take() else {
            return Next::Continue;
        };
        let limited = limit_output(terminal_output, MAX_OUTPUT_BYTES);
        let was_pending = self.pending_completion;
        let complete = flight.parsed.is_task_complete;
        let observation = if complete {
            if was_pending {
                limited
            } else {
                self.pending_completion = true;
                prompts::confirmation_prompt(&limited)
            }
        } else {
            self.pending_completion = false;
            if flight.feedback.contains("WARNINGS:") {
                prompts::warnings_observation(&flight.feedback, &limited)
            } else {
                limited
            }
        };

        let mut step = self.agent_step(&flight.response, flight.metrics);
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
            .map(|(idx, c)| ToolCall {
                tool_call_id: format!("call_{}_{}", self.episode, idx + 1),
                function_name: "bash_command".to_string(),
                arguments: json!({"keystrokes": c.keystrokes, "duration": c.duration}),
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
        step.observation = Some(Observation::text(observation.clone()));
        self.steps.push(step);
        self.prompt = observation;
        self.episode += 1;
        if complete && was_pending { Next::Done } else { Next::Continue }
    }

    fn agent_step(&self, response: &LlmResponse, metrics: Option<StepMetrics>) -> Step {
        let mut step = Step::new(self.steps.len() as u64 + 1, Source::Agent, "");
        step.model_name = Some(response.model_name.clone().unwrap_or_else(|| self.settings.model_name.clone()));
        step.reasoning_content = response.reasoning_content.clone();
        step.metrics = metrics;
        step
    }

    /// The trajectory as recorded so far.
    pub fn trajectory(&self) -> Trajectory {
        let mut extra = Map::new();
        extra.insert("parser".into(), json!("json"));
        extra.insert("temperature".into(), json!(self.settings.temperature));
        Trajectory {
            schema_version: SCHEMA_VERSION.to_string(),
            session_id: Some(self.settings.session_id.clone()),
            agent: AgentRecord {
                name: "terminus-2".to_string(),
                version: "2.0.0".to_string(),
                model_name: Some(self.settings.model_name.clone()),
                extra: Some(extra),
            },
            steps: self.steps.clone(),
            final_metrics: Some(FinalMetrics {
                total_prompt_tokens: Some(self.totals.input_tokens),
                total_completion_tokens: Some(self.totals.output_tokens),
                total_cached_tokens: Some(self.totals.cache_tokens),
                total_cost_usd: (self.totals.cost_usd > 0.0).then_some(self.totals.cost_usd),
            }),
            continued_trajectory_ref: None,
            extra: None,
        }
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn n_episodes(&self) -> u64 {
        self.n_episodes
    }

    pub fn api_request_times_msec(&self) -> &[f64] {
        &self.api_request_times_msec
    }

    pub fn pending_completion(&self) -> bool {
        self.pending_completion
    }

    pub fn chat(&self) -> &[ChatMessage] {
        &self.chat
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }
}

/// Waits are capped at 60 s; a negative or NaN wait (which the parser lets through) becomes 0.
fn cap_duration(duration: f64) -> f64 {
    if duration.is_nan() || duration < 0.0 { 0.0 } else { duration.min(MAX_COMMAND_DURATION) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::llm::Usage;

    fn settings() -> LoopSettings {
        LoopSettings {
            model_name: "openai/gpt-4o".into(),
            temperature: 0.7,
            max_turns: 10,
            llm_call_kwargs: Map::new(),
            session_id: "s".into(),
        }
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

    #[test]
    fn completion_needs_two_claims_in_a_row() {
        let mut agent = AgentLoop::new(settings());
        agent.start("Write f", "root@x:/app# ");
        assert_eq!(agent.begin_episode(), Some(0));
        let Reply::Execute(commands) = agent.on_response(reply(RUN, 100), 5.0) else { panic!("expected commands") };
        assert_eq!(commands, vec![Command { keystrokes: "echo hi > f\n".into(), duration: 60.0 }]);
        assert_eq!(agent.on_terminal_output("New Terminal Output:\nroot@x:/app# echo hi > f\n"), Next::Continue);

        agent.begin_episode();
        assert_eq!(agent.on_response(reply(DONE, 200), 5.0), Reply::Execute(vec![]));
        assert_eq!(agent.on_terminal_output("out"), Next::Continue);
        assert!(agent.pending_completion());
        assert!(agent.prompt().starts_with("Current terminal state:\nout\n"));

        agent.begin_episode();
        agent.on_response(reply(DONE, 300), 5.0);
        assert_eq!(agent.on_terminal_output("out"), Next::Done);
        assert_eq!(agent.n_episodes(), 3);
        assert_eq!(agent.api_request_times_msec().len(), 3);

        let trajectory = agent.trajectory();
        let sources: Vec<Source> = trajectory.steps.iter().map(|s| s.source).collect();
        assert_eq!(sources, vec![Source::User, Source::Agent, Source::Agent, Source::Agent]);
        let ids: Vec<u64> = trajectory.steps.iter().map(|s| s.step_id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);
        let first = &trajectory.steps[1];
        assert_eq!(first.message, "Analysis: empty dir\nPlan: write file");
        let calls = first.tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].tool_call_id, "call_0_1");
        assert_eq!(calls[0].arguments["duration"], json!(60.0));
        assert_eq!(trajectory.steps[2].tool_calls.as_ref().unwrap()[0].function_name, "mark_task_complete");
        assert_eq!(trajectory.steps[2].tool_calls.as_ref().unwrap()[0].tool_call_id, "call_1_task_complete");
        let metrics = trajectory.final_metrics.unwrap();
        assert_eq!(metrics.total_prompt_tokens, Some(600));
        assert_eq!(metrics.total_completion_tokens, Some(30));
        assert_eq!(metrics.total_cached_tokens, Some(0));
    }

    #[test]
    fn a_claim_followed_by_work_resets_the_pending_completion() {
        let mut agent = AgentLoop::new(settings());
        agent.start("t", "");
        agent.begin_episode();
        agent.on_response(reply(DONE, 1), 1.0);
        agent.on_terminal_output("");
        assert!(agent.pending_completion());
        agent.begin_episode();
        agent.on_response(reply(RUN, 1), 1.0);
        agent.on_terminal_output("");
        assert!(!agent.pending_completion());
        agent.begin_episode();
        agent.on_response(reply(DONE, 1), 1.0);
        assert_eq!(agent.on_terminal_output(""), Next::Continue);
    }

    #[test]
    fn parse_errors_are_fed_back_without_touching_completion() {
        let mut agent = AgentLoop::new(settings());
        agent.start("t", "");
        agent.begin_episode();
        assert_eq!(agent.on_response(reply("I think we should run ls", 1), 1.0), Reply::Reprompt);
        assert!(agent.prompt().starts_with("Previous response had parsing errors:\nERROR: No valid JSON found in response\nWARNINGS: - No valid JSON object found"));
        let step = agent.steps().last().unwrap();
        assert_eq!(step.message, "I think we should run ls");
        assert!(step.tool_calls.is_none());
        // The next call carries the failed exchange in its history.
        assert_eq!(agent.begin_episode(), Some(1));
        let request = agent.request();
        assert_eq!(request.messages.len(), 3);
        assert_eq!(request.messages[1].content, "I think we should run ls");
    }

    #[test]
    fn warnings_prefix_the_observation() {
        let mut agent = AgentLoop::new(settings());
        agent.start("t", "");
        agent.begin_episode();
        agent.on_response(reply(&format!("ok {RUN}"), 1), 1.0);
        agent.on_terminal_output("screen");
        assert_eq!(
            agent.prompt(),
            "Previous response had warnings:\nWARNINGS: - Extra text detected before JSON object\n\nscreen"
        );
    }

    #[test]
    fn max_turns_stops_the_loop() {
        let mut agent = AgentLoop::new(LoopSettings { max_turns: 1, ..settings() });
        agent.start("t", "");
        assert!(agent.begin_episode().is_some());
        agent.on_response(reply(RUN, 1), 1.0);
        agent.on_terminal_output("");
        assert!(agent.begin_episode().is_none());
    }

    #[test]
    fn long_output_is_limited_once() {
        let mut agent = AgentLoop::new(settings());
        agent.start("t", "");
        agent.begin_episode();
        agent.on_response(reply(RUN, 1), 1.0);
        agent.on_terminal_output(&"x".repeat(32_000));
        assert!(agent.prompt().contains("22000 interior bytes omitted"));
    }
}
