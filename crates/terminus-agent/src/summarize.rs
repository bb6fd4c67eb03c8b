//! The pure half of context summarization: what the three subagent
//! calls send, the trajectories they leave, and the refs that tie them to the main trajectory.
//! The Summarizer actor makes the calls and writes the files; the `AgentLoop` applies the result.

use serde_json::{Map, Value, json};
use terminus_core::llm::{ChatMessage, LlmRequest, LlmResponse};

use crate::prompts;
use crate::trajectory::{AgentRecord, AtifVersion, FinalMetrics, Source, Step, StepMetrics, Trajectory};

/// The three subagents, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subagent {
    Summary,
    Questions,
    Answers,
}

impl Subagent {
    pub fn suffix(self) -> &'static str {
        match self {
            Subagent::Summary => "summary",
            Subagent::Questions => "questions",
            Subagent::Answers => "answers",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Subagent::Summary => "Step 1 - Summary generation",
            Subagent::Questions => "Step 2 - Question asking",
            Subagent::Answers => "Step 3 - Answer providing",
        }
    }
}

/// Everything one summarization needs, taken from the loop when it starts.
#[derive(Clone, Debug)]
pub struct SummaryJob {
    /// 1-based index of this summarization in the run.
    pub index: u32,
    pub original_instruction: String,
    /// The conversation to summarise (after any unwinding).
    pub chat: Vec<ChatMessage>,
    /// The first main-trajectory steps, copied as context into the summary and answers files.
    pub copied_steps: Vec<Step>,
    /// How many leading `copied_steps` were released from memory (written to the segment
    /// file): their bodies must be read back before the job runs.
    pub bodies_on_disk: usize,
    pub parent_session_id: String,
    pub model_name: String,
    pub temperature: Option<f64>,
    /// The extra request fields (`llm_kwargs` under `llm_call_kwargs`).
    pub llm_call_kwargs: Map<String, Value>,
    pub atif: AtifVersion,
    /// The three files' `trajectory_id`s (ATIF v1.7 on), which their refs name too.
    pub trajectory_ids: [String; 3],
    /// The prompts' texts.
    pub texts: std::sync::Arc<crate::prompts::Texts>,
    /// The most bytes each of the summary, the questions and the answers may bring into a
    /// later request (a token is at least a byte): what is longer is cut to fit the context.
    pub product_limit: usize,
}

/// Where a cut product of the summarization ends (what the model reads of it).
const CUT_MARKER: &str = "\n[... cut here to fit the context ...]";

/// `text` within `limit` bytes (cut at a character boundary, the marker included), and whether
/// it had to be cut.
pub fn cut_to_fit(text: &str, limit: usize) -> (String, bool) {
    if text.len() <= limit {
        return (text.to_string(), false);
    }
    let mut end = limit.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}{CUT_MARKER}", &text[..end]), true)
}

/// One finished subagent call.
#[derive(Clone, Debug)]
pub struct SubagentCall {
    pub prompt: String,
    pub response: LlmResponse,
    pub elapsed_msec: f64,
    pub timestamp: String,
}

/// What a successful summarization hands back to the loop.
#[derive(Clone, Debug)]
pub struct SummaryOutcome {
    pub handoff_prompt: String,
    pub refs: Vec<Value>,
    pub question_prompt: String,
    pub questions: String,
    /// What had to be cut to fit the context, one sentence each.
    pub cuts: Vec<String>,
}

/// Why a summarization produced no handoff. The calls that finished before it are counted and
/// their trajectories written all the same.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SummaryError {
    #[error("the {} call failed: {error}", subagent.suffix())]
    Call { subagent: Subagent, error: terminus_core::llm::LlmError },
    /// The Summarizer itself failed (a panic), or could not start.
    #[error("the summarizer failed: {0}")]
    Crashed(String),
}

impl SummaryJob {
    fn request(&self, messages: Vec<ChatMessage>) -> LlmRequest {
        LlmRequest { messages, temperature: self.temperature, extra: self.llm_call_kwargs.clone(), logged: None }
    }

    /// Subagent 1: the full history, then the summary request.
    pub fn summary_request(&self) -> (String, LlmRequest) {
        let prompt = prompts::summary_prompt(&self.texts, &self.original_instruction);
        let mut messages = self.chat.clone();
        messages.push(ChatMessage::user(prompt.clone()));
        (prompt, self.request(messages))
    }

    /// Subagent 2: no history at all (the summary cut to fit).
    pub fn questions_request(&self, summary: &str, screen: &str) -> (String, LlmRequest) {
        let (summary, _) = cut_to_fit(summary, self.product_limit);
        let prompt = prompts::questions_prompt(&self.texts, &self.original_instruction, &summary, screen);
        (prompt.clone(), self.request(vec![ChatMessage::user(prompt)]))
    }

    /// Subagent 3: the full history plus the summary exchange, then the questions (both cut to
    /// fit).
    pub fn answers_request(&self, summary: &SubagentCall, questions: &str) -> (String, LlmRequest) {
        let (questions, _) = cut_to_fit(questions, self.product_limit);
        let prompt = prompts::answers_prompt(&self.texts, &questions);
        let mut messages = self.chat.clone();
        messages.push(ChatMessage::user(summary.prompt.clone()));
        messages.push(ChatMessage::assistant(cut_to_fit(&summary.response.content, self.product_limit).0));
        messages.push(ChatMessage::user(prompt.clone()));
        (prompt, self.request(messages))
    }

    /// What was cut of a finished summarization's products, one sentence each.
    fn cuts(&self, summary: Option<&str>, questions: &str, answers: &str) -> Vec<String> {
        [("summary", summary), ("questions", Some(questions)), ("answers", Some(answers))]
            .into_iter()
            .filter_map(|(what, text)| {
                let text = text?;
                (text.len() > self.product_limit).then(|| {
                    format!(
                        "summarization {}: the {what} ({} bytes) was cut to {} bytes to fit the context",
                        self.index,
                        text.len(),
                        self.product_limit
                    )
                })
            })
            .collect()
    }

    pub fn file_name(&self, which: Subagent) -> String {
        terminus_core::layout::subagent_trajectory(self.index, which.suffix())
    }

    /// The trajectory one subagent leaves. `summary` is the first call, needed by the answers
    /// subagent, whose file repeats the summary exchange as copied context.
    pub fn trajectory(&self, which: Subagent, call: &SubagentCall, summary: Option<&SubagentCall>) -> Trajectory {
        let mut steps: Vec<Step> = match which {
            Subagent::Questions => Vec::new(),
            Subagent::Summary | Subagent::Answers => self.copied_steps.clone(),
        };
        if which == Subagent::Answers
            && let Some(summary) = summary
        {
            let mut user = Step::new(steps.len() as u64 + 1, Source::User, summary.prompt.clone());
            user.timestamp = Some(summary.timestamp.clone());
            user.is_copied_context = Some(true);
            steps.push(user);
            let mut agent = Step::new(steps.len() as u64 + 1, Source::Agent, summary.response.content.clone());
            // The reference stamps the copy when it builds it, just before the answers call.
            agent.timestamp = Some(call.timestamp.clone());
            agent.model_name = Some(summary.response.model_name.clone().unwrap_or_else(|| self.model_name.clone()));
            agent.reasoning_content = summary.response.reasoning_content.clone();
            agent.is_copied_context = Some(true);
            agent.extra = Some(note("Copied from summary subagent - metrics already recorded there"));
            steps.push(agent);
        }
        let mut prompt = Step::new(steps.len() as u64 + 1, Source::User, call.prompt.clone());
        prompt.timestamp = Some(call.timestamp.clone());
        steps.push(prompt);
        let mut reply = Step::new(steps.len() as u64 + 1, Source::Agent, call.response.content.clone());
        reply.model_name = Some(call.response.model_name.clone().unwrap_or_else(|| self.model_name.clone()));
        reply.reasoning_content = call.response.reasoning_content.clone();
        reply.llm_call_count = self.atif.has_document_ids().then_some(1);
        reply.metrics = call.response.usage.map(|u| StepMetrics {
            prompt_tokens: Some(u.prompt_tokens),
            completion_tokens: Some(u.completion_tokens),
            cached_tokens: Some(u.cache_tokens),
            cost_usd: (u.cost_usd > 0.0).then_some(u.cost_usd),
            prompt_token_ids: call.response.prompt_token_ids.clone(),
            completion_token_ids: call.response.completion_token_ids.clone(),
            logprobs: call.response.logprobs.clone(),
        });
        steps.push(reply);
        let usage = call.response.usage.unwrap_or_default();
        let mut extra = Map::new();
        extra.insert("parent_session_id".into(), json!(self.parent_session_id));
        extra.insert("summarization_index".into(), json!(self.index));
        Trajectory {
            schema_version: self.atif.to_string(),
            session_id: Some(format!("{}-summarization-{}-{}", self.parent_session_id, self.index, which.suffix())),
            trajectory_id: self.trajectory_id(which),
            agent: AgentRecord {
                name: format!("terminus-2-summarization-{}", which.suffix()),
                version: "2.0.0".to_string(),
                model_name: Some(self.model_name.clone()),
                extra: Some(extra),
            },
            steps,
            final_metrics: Some(FinalMetrics {
                total_prompt_tokens: Some(usage.prompt_tokens),
                total_completion_tokens: Some(usage.completion_tokens),
                total_cached_tokens: Some(usage.cache_tokens),
                total_cost_usd: (usage.cost_usd > 0.0).then_some(usage.cost_usd),
            }),
            continued_trajectory_ref: None,
            extra: None,
        }
    }

    /// One subagent file's `trajectory_id`, when the version has them.
    fn trajectory_id(&self, which: Subagent) -> Option<String> {
        let i = match which {
            Subagent::Summary => 0,
            Subagent::Questions => 1,
            Subagent::Answers => 2,
        };
        self.atif.has_document_ids().then(|| self.trajectory_ids[i].clone())
    }

    /// The ref the main trajectory records for one subagent file (from v1.7 naming its
    /// document id as well as its path, in the order of Harbor's model).
    pub fn reference(&self, which: Subagent) -> Value {
        let mut reference = Map::new();
        if let Some(id) = self.trajectory_id(which) {
            reference.insert("trajectory_id".into(), json!(id));
        }
        reference.insert(
            "session_id".into(),
            json!(format!("{}-summarization-{}-{}", self.parent_session_id, self.index, which.suffix())),
        );
        reference.insert("trajectory_path".into(), json!(self.file_name(which)));
        reference.insert(
            "extra".into(),
            json!({"summary": format!("Context summarization {}: {}", self.index, which.description())}),
        );
        Value::Object(reference)
    }

    /// Assembles the outcome from the questions and answers calls (`summary`: the first
    /// call's reply, for what was cut of it), the questions and the answers cut to fit.
    pub fn outcome(&self, summary: Option<&str>, questions: &SubagentCall, answers: &SubagentCall) -> SummaryOutcome {
        let cuts = self.cuts(summary, &questions.response.content, &answers.response.content);
        SummaryOutcome {
            handoff_prompt: prompts::handoff_prompt(
                &self.texts,
                &cut_to_fit(&answers.response.content, self.product_limit).0,
            ),
            refs: vec![
                self.reference(Subagent::Summary),
                self.reference(Subagent::Questions),
                self.reference(Subagent::Answers),
            ],
            question_prompt: questions.prompt.clone(),
            questions: cut_to_fit(&questions.response.content, self.product_limit).0,
            cuts,
        }
    }
}

fn note(text: &str) -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert("note".into(), json!(text));
    extra
}

/// Marks main steps as copied context; steps that had metrics lose them (they are counted in the
/// parent trajectory) and say so.
pub fn copy_steps(steps: &[Step]) -> Vec<Step> {
    steps
        .iter()
        .map(|step| {
            let mut copy = step.clone();
            copy.is_copied_context = Some(true);
            // Its calls are counted where it was first recorded.
            copy.llm_call_count = None;
            if copy.metrics.take().is_some() {
                copy.extra.get_or_insert_with(Map::new).insert(
                    "note".into(),
                    json!("Metrics omitted to avoid duplication - already recorded in parent trajectory"),
                );
            }
            copy
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::llm::Usage;

    fn call(prompt: &str, content: &str, tokens: u64) -> SubagentCall {
        SubagentCall {
            prompt: prompt.into(),
            response: LlmResponse {
                content: content.into(),
                usage: Some(Usage {
                    prompt_tokens: tokens,
                    completion_tokens: 10,
                    cache_tokens: 0,
                    cost_usd: 0.0,
                    estimated: false,
                }),
                ..Default::default()
            },
            elapsed_msec: 1.0,
            timestamp: "2026-01-01T00:00:00.000000+00:00".into(),
        }
    }

    fn job() -> SummaryJob {
        let mut first = Step::new(1, Source::User, "task prompt");
        first.timestamp = None;
        let mut second = Step::new(2, Source::Agent, "did things");
        second.metrics = Some(StepMetrics { prompt_tokens: Some(5), ..Default::default() });
        SummaryJob {
            index: 1,
            original_instruction: "Make hello.txt".into(),
            chat: vec![ChatMessage::user("task prompt"), ChatMessage::assistant("did things")],
            copied_steps: copy_steps(&[first, second]),
            bodies_on_disk: 0,
            parent_session_id: "sess".into(),
            model_name: "openai/gpt-4o".into(),
            temperature: Some(0.7),
            llm_call_kwargs: Map::new(),
            atif: AtifVersion::default(),
            trajectory_ids: ["id-s".into(), "id-q".into(), "id-a".into()],
            texts: crate::prompts::Texts::ours(),
            product_limit: 100_000,
        }
    }

    #[test]
    fn products_longer_than_the_limit_are_cut_and_named() {
        assert_eq!(cut_to_fit("short", 100), ("short".to_string(), false));
        let (cut, was) = cut_to_fit(&"é".repeat(1000), 200);
        assert!(was && cut.len() <= 200 && cut.ends_with("to fit the context ...]"), "{cut}");
        let job = SummaryJob { product_limit: 300, ..job() };
        let big = "Q".repeat(5000);
        let (_, request) = job.questions_request(&big, "screen");
        assert!(request.messages[0].content.len() < 1000, "the summary is cut in the questions prompt");
        let outcome = job.outcome(Some(&big), &call("q?", &big, 1), &call("a?", &big, 1));
        assert!(outcome.questions.len() <= 300 && outcome.handoff_prompt.len() < 1000);
        assert_eq!(outcome.cuts.len(), 3, "{:?}", outcome.cuts);
        assert!(outcome.cuts[0].contains("the summary (5000 bytes) was cut to 300 bytes"), "{:?}", outcome.cuts);
        let fits = job.outcome(Some("s"), &call("q?", "Q", 1), &call("a?", "A", 1));
        assert!(fits.cuts.is_empty());
    }

    #[test]
    fn requests_carry_the_right_history() {
        let job = job();
        let (prompt, request) = job.summary_request();
        assert!(prompt.contains("The task: Make hello.txt"));
        assert_eq!(request.messages.len(), 3);
        let (_, request) = job.questions_request("summary", "screen");
        assert_eq!(request.messages.len(), 1);
        assert!(request.messages[0].content.contains("The terminal now shows:\nscreen"));
        let summary = call(&prompt, "the summary", 100);
        let (_, request) = job.answers_request(&summary, "Q1?");
        assert_eq!(request.messages.len(), 5);
        assert_eq!(request.messages[3].content, "the summary");
    }

    #[test]
    fn subagent_trajectories_have_the_reference_shape() {
        let job = job();
        let summary = call("sum?", "the summary", 500);
        let t = job.trajectory(Subagent::Summary, &summary, None);
        let shape: Vec<(Source, Option<bool>)> = t.steps.iter().map(|s| (s.source, s.is_copied_context)).collect();
        assert_eq!(
            shape,
            vec![(Source::User, Some(true)), (Source::Agent, Some(true)), (Source::User, None), (Source::Agent, None)]
        );
        assert!(t.steps[1].metrics.is_none());
        assert_eq!(
            t.steps[1].extra.as_ref().unwrap()["note"],
            "Metrics omitted to avoid duplication - already recorded in parent trajectory"
        );
        assert_eq!(t.session_id.as_deref(), Some("sess-summarization-1-summary"));
        assert_eq!(t.final_metrics.as_ref().unwrap().total_prompt_tokens, Some(500));
        let ids: Vec<u64> = t.steps.iter().map(|s| s.step_id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4]);

        let questions = call("q?", "Q1?", 100);
        assert_eq!(job.trajectory(Subagent::Questions, &questions, None).steps.len(), 2);
        let answers = call("a?", "A1", 700);
        let t = job.trajectory(Subagent::Answers, &answers, Some(&summary));
        assert_eq!(t.steps.len(), 6);
        assert_eq!(
            t.steps[3].extra.as_ref().unwrap()["note"],
            "Copied from summary subagent - metrics already recorded there"
        );
        assert_eq!(t.agent.name, "terminus-2-summarization-answers");
        assert_eq!(t.agent.extra.as_ref().unwrap()["summarization_index"], 1);

        let outcome = job.outcome(Some("the summary"), &questions, &answers);
        assert!(outcome.handoff_prompt.starts_with("The previous agent answered:\n\nA1\n\n"));
        assert_eq!(outcome.refs[2]["trajectory_path"], "trajectory.summarization-1-answers.json");
        assert_eq!(outcome.refs[0]["extra"]["summary"], "Context summarization 1: Step 1 - Summary generation");
        // v1.7 on: each file has its own id, which its ref names; only the reply counts a call.
        assert_eq!(t.trajectory_id.as_deref(), Some("id-a"));
        assert_eq!(outcome.refs[2]["trajectory_id"], "id-a");
        let keys: Vec<&String> = outcome.refs[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["trajectory_id", "session_id", "trajectory_path", "extra"], "Harbor's field order");
        let counts: Vec<Option<u32>> = t.steps.iter().map(|s| s.llm_call_count).collect();
        assert_eq!(counts, [None, None, None, None, None, Some(1)]);
        // v1.6 has neither.
        let old = SummaryJob { atif: AtifVersion::V1_6, ..job.clone() };
        let t = old.trajectory(Subagent::Answers, &answers, Some(&summary));
        assert_eq!(t.schema_version, "ATIF-v1.6");
        assert!(t.trajectory_id.is_none() && t.steps.iter().all(|s| s.llm_call_count.is_none()));
        assert!(old.reference(Subagent::Summary).get("trajectory_id").is_none());
    }
}
