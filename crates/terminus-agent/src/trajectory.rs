//! ATIF trajectories (Agent Trajectory Interchange Format), as Harbor's models define them
//!. `None` fields are left out of the JSON, as Harbor's
//! `model_dump(exclude_none=True)` does.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use terminus_core::atif::AtifVersion;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub schema_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// This document's own id (ATIF v1.7 on): each segment and subagent file has its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory_id: Option<String>,
    pub agent: AgentRecord,
    pub steps: Vec<Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_metrics: Option<FinalMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_trajectory_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub name: String,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// Who produced a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    System,
    User,
    Agent,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub source: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<StepMetrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_copied_context: Option<bool>,
    /// The model calls an agent step's metrics add up (ATIF v1.7 on); left out where no call
    /// stands behind it (a copied step, a stand-in reply whose metrics the reference writes
    /// all the same, which a count of 0 would forbid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm_call_count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

impl Step {
    /// A step with only the required fields set.
    pub fn new(step_id: u64, source: Source, message: impl Into<String>) -> Step {
        Step {
            step_id,
            timestamp: Some(terminus_core::time::iso(&terminus_core::time::now())),
            source,
            model_name: None,
            message: message.into(),
            reasoning_content: None,
            tool_calls: None,
            observation: None,
            metrics: None,
            is_copied_context: None,
            llm_call_count: None,
            extra: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_call_id: String,
    pub function_name: String,
    pub arguments: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub results: Vec<ObservationResult>,
}

impl Observation {
    /// An observation holding one text result.
    pub fn text(content: impl Into<String>) -> Observation {
        Observation {
            results: vec![ObservationResult {
                source_call_id: None,
                content: Some(content.into()),
                subagent_trajectory_ref: None,
            }],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObservationResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent_trajectory_ref: Option<Vec<Value>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalMetrics {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
}

impl Trajectory {
    /// The file text, byte for byte as Harbor writes it (see [`crate::pydump`]).
    pub fn to_json(&self) -> String {
        crate::pydump::dumps_trajectory(self)
    }

    /// The file text around the steps, for a file written step by step: the head ends with
    /// the steps' `[`, the tail starts with its `]`. [`Trajectory::assemble`] puts them together
    /// byte for byte as [`Trajectory::to_json`] writes the whole (the steps of `self` are
    /// ignored).
    pub fn frame_json(&self) -> (String, String) {
        // Built field by field: the steps are not copied.
        let frame = Trajectory {
            schema_version: self.schema_version.clone(),
            session_id: self.session_id.clone(),
            trajectory_id: self.trajectory_id.clone(),
            agent: self.agent.clone(),
            steps: Vec::new(),
            final_metrics: self.final_metrics.clone(),
            continued_trajectory_ref: self.continued_trajectory_ref.clone(),
            extra: self.extra.clone(),
        };
        let text = frame.to_json();
        // A top-level key is indented by two spaces; nested ones by more.
        const KEY: &str = "\n  \"steps\": [";
        let at = text.find(KEY).map(|i| i + KEY.len()).unwrap_or(text.len());
        (text[..at].to_string(), text[at..].trim_start_matches(|c: char| c.is_whitespace()).to_string())
    }

    /// One step as the whole file holds it: indented for its place in `steps`, with no line
    /// break before or after (strings are escaped, so every line break is the layout's).
    pub fn step_json(step: &Step) -> String {
        let text = crate::pydump::dumps_trajectory(step);
        let mut out = String::with_capacity(text.len() + text.len() / 16);
        for (idx, line) in text.split('\n').enumerate() {
            if idx > 0 {
                out.push('\n');
            }
            out.push_str("    ");
            out.push_str(line);
        }
        out
    }

    /// What goes between the last step (or the head, for none) and the tail.
    pub fn steps_close(n_steps: usize) -> &'static str {
        if n_steps == 0 { "" } else { "\n  " }
    }

    /// What goes before step `index`.
    pub fn step_separator(index: usize) -> &'static str {
        if index == 0 { "\n" } else { ",\n" }
    }

    /// The whole text from a frame and steps (what writing them one by one leaves on disk).
    pub fn assemble(head: &str, steps: &[Step], tail: &str) -> String {
        let mut out = head.to_string();
        for (idx, step) in steps.iter().enumerate() {
            out.push_str(Self::step_separator(idx));
            out.push_str(&Self::step_json(step));
        }
        out.push_str(Self::steps_close(steps.len()));
        out.push_str(tail);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_assembled_step_by_step_is_the_whole_dump() {
        let mut trajectory = Trajectory {
            schema_version: "ATIF-v1.8".into(),
            session_id: Some("s".into()),
            trajectory_id: None,
            agent: AgentRecord {
                name: "terminus-2".into(),
                version: "2.0.0".into(),
                model_name: Some("m".into()),
                // A nested `steps` key must not be taken for the top-level one.
                extra: Some(serde_json::json!({"llm_kwargs": {"steps": []}}).as_object().unwrap().clone()),
            },
            steps: Vec::new(),
            final_metrics: Some(FinalMetrics {
                total_prompt_tokens: Some(3),
                total_completion_tokens: Some(1),
                total_cached_tokens: None,
                total_cost_usd: Some(0.5),
            }),
            continued_trajectory_ref: None,
            extra: None,
        };
        for n in 0..3 {
            let (head, tail) = trajectory.frame_json();
            assert_eq!(Trajectory::assemble(&head, &trajectory.steps, &tail), trajectory.to_json(), "{n} steps");
            let mut step = Step::new(n + 1, Source::Agent, "line one\nline \"two\" ü");
            step.observation = Some(Observation::text("out\n"));
            step.metrics = Some(StepMetrics {
                prompt_tokens: Some(1),
                completion_tokens: Some(2),
                cached_tokens: None,
                cost_usd: None,
                prompt_token_ids: Some(vec![1, 2, 3]),
                completion_token_ids: None,
                logprobs: Some(vec![-0.5, -1.25]),
            });
            trajectory.steps.push(step);
        }
    }

    #[test]
    fn none_fields_are_omitted() {
        let mut step = Step::new(1, Source::User, "hi");
        step.timestamp = None;
        let text = serde_json::to_string(&step).unwrap();
        assert_eq!(text, r#"{"step_id":1,"source":"user","message":"hi"}"#);
    }
}
