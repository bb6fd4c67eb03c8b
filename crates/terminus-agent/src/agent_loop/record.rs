//! The loop's record: trajectory steps as they are made, segments closed by a linear-history
//! split, steps released from memory once written (and read back when a summary needs them),
//! rollout details, markers and totals.

use super::state::{AgentLoop, ClosedSegment, Totals};
use crate::summarize::{SummaryJob, copy_steps};
use crate::trajectory::{AgentRecord, FinalMetrics, Source, Step, StepMetrics, Trajectory};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use terminus_core::llm::{ChatMessage, LlmResponse};

impl AgentLoop {
    /// An agent step with the model name, reasoning and this episode's main-chat metrics so far.
    pub(super) fn agent_step(&mut self, response: &LlmResponse) -> Step {
        let mut step = Step::new(self.steps.len() as u64 + 1, Source::Agent, "");
        step.model_name = Some(response.model_name.clone().unwrap_or_else(|| self.settings.model_name.clone()));
        step.reasoning_content = response.reasoning_content.clone();
        let delta = Totals {
            input_tokens: self.totals.input_tokens.saturating_sub(self.episode_start_totals.input_tokens),
            output_tokens: self.totals.output_tokens.saturating_sub(self.episode_start_totals.output_tokens),
            cache_tokens: self.totals.cache_tokens.saturating_sub(self.episode_start_totals.cache_tokens),
            cost_usd: self.totals.cost_usd - self.episode_start_totals.cost_usd,
            estimated_calls: self.totals.estimated_calls - self.episode_start_totals.estimated_calls,
        };
        if self.settings.atif.has_document_ids() && self.episode_calls > 0 {
            step.llm_call_count = Some(self.episode_calls);
        }
        // The next step of the same episode (none today) starts from here.
        self.episode_start_totals = self.totals;
        self.episode_calls = 0;
        // Always written, zeros included, as the reference does (even for a stand-in reply).
        step.metrics = Some(StepMetrics {
            prompt_tokens: Some(delta.input_tokens),
            completion_tokens: Some(delta.output_tokens),
            cached_tokens: (delta.cache_tokens > 0).then_some(delta.cache_tokens),
            cost_usd: (delta.cost_usd > 0.0).then_some(delta.cost_usd),
            prompt_token_ids: response.prompt_token_ids.clone(),
            completion_token_ids: response.completion_token_ids.clone(),
            logprobs: response.logprobs.clone(),
        });
        step
    }

    /// linear_history: closes the current segment and restarts the step list from the chat.
    pub(super) fn split_trajectory(&mut self) {
        let n = self.summarization_count;
        // An empty-chat handoff (the raw instruction) has no summarization behind it, so the
        // count, which names the files, has not moved: the reference's later dumps go on
        // overwriting the current file, and no closed segment survives. None is closed here
        // either, so no file can point at itself; the steps restart from the chat all the same.
        if n > self.continuation_index {
            // The closed segment's totals stop where its last step stopped: the reply that
            // triggered the split belongs to the next segment.
            let mut closed = self.trajectory_with(self.episode_start_totals);
            closed.continued_trajectory_ref = Some(segment_file(n));
            let file = segment_file(self.continuation_index);
            self.finished_segments.push(ClosedSegment { file, trajectory: closed, released: self.released });
        }
        let base = self.session_id.split("-cont-").next().unwrap_or(&self.session_id).to_string();
        self.session_id = format!("{base}-cont-{n}");
        self.trajectory_id = uuid::Uuid::new_v4().to_string();
        self.continuation_index = n;
        let model = self.last_model_name.clone().unwrap_or_else(|| self.settings.model_name.clone());
        let history = &self.chat[..self.chat.len().saturating_sub(1)];
        self.released = 0;
        self.steps = history
            .iter()
            .enumerate()
            .map(|(idx, message)| {
                let source = match message.role.as_str() {
                    "assistant" => Source::Agent,
                    "system" => Source::System,
                    _ => Source::User,
                };
                let mut step = Step::new(idx as u64 + 1, source, message.content.clone());
                step.timestamp = None;
                step.is_copied_context = Some(true);
                if source == Source::Agent {
                    step.model_name = Some(model.clone());
                }
                step
            })
            .collect();
    }

    /// Records an asciinema marker at the current time of the recording.
    pub fn record_marker(&mut self, label: String) {
        if let Some(started) = self.recording_started {
            self.asciinema_markers.push((started.elapsed().as_secs_f64(), label));
        }
    }

    /// Segments closed by a linear-history split, to be written (each exactly once).
    pub fn take_finished_segments(&mut self) -> Vec<ClosedSegment> {
        std::mem::take(&mut self.finished_segments)
    }

    /// The file the current segment goes to.
    pub fn segment_file(&self) -> String {
        segment_file(self.continuation_index)
    }

    /// The current segment. `final_totals` folds the subagents' usage into `final_metrics`
    /// (the teardown dump); intermediate dumps show the main chat alone.
    pub fn trajectory(&self, final_totals: bool) -> Trajectory {
        self.trajectory_with(if final_totals { self.final_totals() } else { self.totals })
    }

    /// The current segment without its steps (see [`Trajectory::frame_json`]): what a file
    /// written step by step needs besides [`AgentLoop::steps`], with no copy of them.
    pub fn trajectory_frame(&self, final_totals: bool) -> Trajectory {
        self.frame_with(if final_totals { self.final_totals() } else { self.totals })
    }

    pub(super) fn trajectory_with(&self, totals: Totals) -> Trajectory {
        Trajectory { steps: self.steps.clone(), ..self.frame_with(totals) }
    }

    pub(super) fn frame_with(&self, totals: Totals) -> Trajectory {
        let mut extra = Map::new();
        extra.insert("parser".into(), json!(self.settings.format.name()));
        if let Some(temperature) = self.settings.temperature {
            extra.insert("temperature".into(), json!(temperature));
        }
        if !self.settings.llm_kwargs.is_empty() {
            extra.insert("llm_kwargs".into(), Value::Object(self.settings.llm_kwargs.clone()));
        }
        if self.continuation_index > 0 {
            extra.insert("continuation_index".into(), json!(self.continuation_index));
        }
        Trajectory {
            schema_version: self.settings.atif.to_string(),
            session_id: Some(self.session_id.clone()),
            trajectory_id: self.settings.atif.has_document_ids().then(|| self.trajectory_id.clone()),
            agent: AgentRecord {
                name: "terminus-2".to_string(),
                version: "2.0.0".to_string(),
                model_name: Some(self.settings.model_name.clone()),
                extra: Some(extra),
            },
            steps: Vec::new(),
            final_metrics: Some(FinalMetrics {
                total_prompt_tokens: Some(totals.input_tokens),
                total_completion_tokens: Some(totals.output_tokens),
                total_cached_tokens: Some(totals.cache_tokens),
                total_cost_usd: (totals.cost_usd > 0.0).then_some(totals.cost_usd),
            }),
            continued_trajectory_ref: None,
            extra: None,
        }
    }

    /// `agent_result.rollout_details`: one entry for the main chat holding its per-call lists
    /// (none when the provider sent no token ids or log-probabilities), then one per subagent
    /// call that brought some.
    pub fn rollout_details(&self) -> Vec<Value> {
        let mut detail = Map::new();
        if !self.rollout_prompt_ids.is_empty() {
            detail.insert("prompt_token_ids".into(), json!(self.rollout_prompt_ids));
        }
        if !self.rollout_completion_ids.is_empty() {
            detail.insert("completion_token_ids".into(), json!(self.rollout_completion_ids));
        }
        if !self.rollout_logprobs.is_empty() {
            detail.insert("logprobs".into(), json!(self.rollout_logprobs));
        }
        if !self.rollout_extra.is_empty() {
            // Per field (sorted), one value per call that had any (null where it lacked it).
            let keys: std::collections::BTreeSet<&String> = self.rollout_extra.iter().flat_map(|m| m.keys()).collect();
            let pivot: Map<String, Value> = keys
                .into_iter()
                .map(|key| {
                    let values = self.rollout_extra.iter().map(|m| m.get(key).cloned().unwrap_or(Value::Null));
                    (key.clone(), Value::Array(values.collect()))
                })
                .collect();
            detail.insert("extra".into(), Value::Object(pivot));
        }
        let main = (!detail.is_empty()).then_some(Value::Object(detail));
        main.into_iter().chain(self.subagent_rollout_details.iter().cloned()).collect()
    }

    /// Keeps a subagent call's token ids and log-probabilities as its own rollout entry. The
    /// reference keeps each list the provider sent, an empty one included, and the entry only
    /// when it holds something.
    pub(super) fn record_subagent_rollout(&mut self, response: &LlmResponse) {
        let mut detail = Map::new();
        if let Some(ids) = &response.prompt_token_ids {
            detail.insert("prompt_token_ids".into(), json!([ids]));
        }
        if let Some(ids) = &response.completion_token_ids {
            detail.insert("completion_token_ids".into(), json!([ids]));
        }
        if let Some(logprobs) = &response.logprobs {
            detail.insert("logprobs".into(), json!([logprobs]));
        }
        if let Some(extra) = &response.provider_extra {
            let lists: Map<String, Value> = extra.iter().map(|(k, v)| (k.clone(), json!([v]))).collect();
            detail.insert("extra".into(), Value::Object(lists));
        }
        if !detail.is_empty() {
            self.subagent_rollout_details.push(Value::Object(detail));
        }
    }

    /// Main chat and subagents together (reg-subagent-metrics folded in).
    pub fn final_totals(&self) -> Totals {
        self.totals.plus(self.subagent_metrics)
    }

    /// `agent_result.metadata`.
    pub fn metadata(&self) -> Map<String, Value> {
        let mut metadata = Map::new();
        metadata.insert("n_episodes".into(), json!(self.n_episodes));
        metadata.insert("api_request_times_msec".into(), json!(self.api_request_times_msec));
        metadata.insert("summarization_count".into(), json!(self.summarization_count));
        let estimated = self.final_totals().estimated_calls;
        if estimated > 0 {
            // Their tokens and cost are estimates: the provider stated no usable usage.
            metadata.insert("n_calls_with_estimated_usage".into(), json!(estimated));
        }
        if self.settings.store_all_messages {
            metadata.insert("all_messages".into(), serde_json::to_value(&*self.chat).unwrap_or(Value::Null));
        }
        metadata
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    pub fn subagent_metrics(&self) -> Totals {
        self.subagent_metrics
    }

    pub fn n_episodes(&self) -> u64 {
        self.n_episodes
    }

    pub fn summarization_count(&self) -> u32 {
        self.summarization_count
    }

    pub fn api_request_times_msec(&self) -> &[f64] {
        &self.api_request_times_msec
    }

    pub fn asciinema_markers(&self) -> &[(f64, String)] {
        &self.asciinema_markers
    }

    /// The current segment's steps; the first [`AgentLoop::released`] of them hold no body.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// How many leading steps are released: written to the segment file, their bodies dropped.
    pub fn released(&self) -> usize {
        self.released
    }

    /// The first `n` steps are in the segment file for good (steps never change once pushed):
    /// their bodies leave memory, so a long trial holds its frames, not its history. A file
    /// rewritten later takes their text from the file, and a summarization reads back those it
    /// copies ([`AgentLoop::restore_copied_bodies`]).
    pub fn release_written(&mut self, n: usize) {
        let n = n.min(self.steps.len());
        for step in &mut self.steps[self.released.min(n)..n] {
            *step = hollow(step);
        }
        self.released = self.released.max(n);
    }

    /// Gives the summarization in progress the bodies of its copied steps that were released
    /// (`bodies`: those steps as the segment file holds them, in order), and returns its job for
    /// the summarizer. An unreadable body (`Err`) leaves a note in its step's place, and a warning.
    pub fn restore_copied_bodies(&mut self, bodies: Result<Vec<Step>, String>) -> Option<Arc<SummaryJob>> {
        let summarizing = self.summarizing.as_mut()?;
        let job = Arc::make_mut(&mut summarizing.job);
        let n = job.bodies_on_disk;
        match bodies {
            Ok(bodies) if bodies.len() == n => {
                job.copied_steps.splice(..n, copy_steps(&bodies));
            }
            outcome => {
                let why = match outcome {
                    Err(e) => e,
                    Ok(bodies) => format!("{} steps read back, {n} expected", bodies.len()),
                };
                for step in &mut job.copied_steps[..n] {
                    step.message = format!("[this step's text could not be read back from the trajectory file: {why}]");
                }
                self.warnings.push(format!(
                    "summarization {}: the copied steps' text could not be read back from the trajectory file ({why})",
                    job.index
                ));
            }
        }
        job.bodies_on_disk = 0;
        Some(summarizing.job.clone())
    }
}

/// A released step: its place and frame, no body.
pub(super) fn hollow(step: &Step) -> Step {
    let mut frame = Step::new(step.step_id, step.source, String::new());
    frame.timestamp = step.timestamp.clone();
    frame.model_name = step.model_name.clone();
    frame.is_copied_context = step.is_copied_context;
    frame
}

/// A message's fingerprint: equal messages, equal prints (a collision would only make a debug
/// record refer to a file for a message it does not hold).
pub(super) fn fingerprint(message: &ChatMessage) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (&message.role, &message.content, &message.reasoning_content).hash(&mut hasher);
    hasher.finish()
}

/// `trajectory.json` for segment 0, `trajectory.cont-N.json` after the Nth split.
pub(super) fn segment_file(index: u32) -> String {
    terminus_core::layout::trajectory_segment(index)
}
