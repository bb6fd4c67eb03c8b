//! The Summarizer actor: condenses a trial's history when the context fills up
//! (Terminus 2's three-call summarization).
//!
//! Supervised by: its Trial, which spawns one per summarization (linked) and stops it when the
//! agent stops. Runs the three subagent calls through the LLM actor: the summary (with the full
//! history), the questions of a fresh agent (no history, with the current screen from the
//! TmuxSession), and the answers (full history plus the summary exchange).
//!
//! ```text
//! post_start ─► [task: summary ─► screen ─► questions ─► answers] ─► Work(…) ─► SummarizerReport ─► Trial
//!                  each call done: CallDone ─► Trial (counts it, writes its trajectory file)
//!                  the end: Finished(outcome | error) ─► Trial; stop
//! ```
//!
//! Its handler awaits nothing: the calls run in one task that reports each step back as a
//! message, which the handler relays to the Trial. The task is monitored: a panic in it becomes
//! `Finished(Err(Crashed))` at once, so the Trial goes on with its fallbacks instead of waiting
//! until its deadline. Each finished call is reported as it finishes, so a summarization that
//! fails (or is stopped) half way still accounts for the calls it made; the Trial, not this
//! actor, writes their files, so a file exists exactly when its call is counted.

use std::sync::Arc;

use futures_util::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef};
use terminus_agent::summarize::{Subagent, SubagentCall, SummaryError, SummaryJob, SummaryOutcome};
use terminus_core::ids::TrialName;
use terminus_core::llm::LlmRequest;
use tokio::task::JoinHandle;

use crate::llm::LlmHandle;
use crate::panics::panic_text;
use crate::protocol::{SummarizerEvent, SummarizerReport};
use crate::tmux_session::TmuxHandle;

pub struct SummarizerActor;

pub struct SummarizerArgs {
    pub job: Arc<SummaryJob>,
    /// The trial it works for, named in retry reports.
    pub trial: TrialName,
    pub llm: LlmHandle,
    pub tmux: Option<TmuxHandle>,
    pub report_to: DerivedActorRef<SummarizerReport>,
    /// The Trial's generation when it started this summarization.
    pub generation: u64,
}

pub struct SummarizerState {
    report_to: DerivedActorRef<SummarizerReport>,
    generation: u64,
    work: Option<JoinHandle<()>>,
    /// What the calls need; taken when they start.
    inputs: Option<Inputs>,
}

struct Inputs {
    job: Arc<SummaryJob>,
    trial: TrialName,
    llm: LlmHandle,
    tmux: Option<TmuxHandle>,
}

/// Inbox of [`SummarizerActor`]: its task's progress.
pub struct SummarizerMsg(SummarizerEvent);

impl Actor for SummarizerActor {
    type Msg = SummarizerMsg;
    type State = SummarizerState;
    type Arguments = SummarizerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SummarizerMsg>,
        args: SummarizerArgs,
    ) -> Result<SummarizerState, ActorProcessingErr> {
        Ok(SummarizerState {
            report_to: args.report_to,
            generation: args.generation,
            work: None,
            inputs: Some(Inputs { job: args.job, trial: args.trial, llm: args.llm, tmux: args.tmux }),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<SummarizerMsg>,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(inputs) = state.inputs.take() else { return Ok(()) };
        state.work = Some(tokio::spawn(async move {
            let reporter = myself.clone();
            let report = move |event| {
                let _ = reporter.send_message(SummarizerMsg(event));
            };
            let mut retries = 0;
            let run = std::panic::AssertUnwindSafe(summarize(&inputs, &mut retries, &report)).catch_unwind().await;
            let result = match run {
                Ok(result) => result,
                Err(panic) => Err(SummaryError::Crashed(panic_text(&panic))),
            };
            report(SummarizerEvent::Finished { result: Box::new(result), retries });
        }));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SummarizerMsg>,
        SummarizerMsg(event): SummarizerMsg,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        let finished = matches!(event, SummarizerEvent::Finished { .. });
        let _ = state.report_to.send_message(SummarizerReport { generation: state.generation, event });
        if finished {
            state.work = None;
            myself.stop(None);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SummarizerMsg>,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped before finishing (the agent stopped): abandon the calls.
        if let Some(work) = state.work.take() {
            work.abort();
        }
        Ok(())
    }
}

/// One subagent call; adds its retries to `retries`.
async fn call(
    inputs: &Inputs,
    which: Subagent,
    (prompt, request): (String, LlmRequest),
    retries: &mut u32,
) -> Result<SubagentCall, SummaryError> {
    let timestamp = terminus_core::time::iso(&terminus_core::time::now());
    let done = inputs.llm.complete(request, Some(inputs.trial.clone())).await;
    *retries += done.retries;
    let response = done.result.map_err(|error| SummaryError::Call { subagent: which, error })?;
    Ok(SubagentCall { prompt, response, elapsed_msec: done.elapsed_msec, timestamp })
}

async fn summarize(
    inputs: &Inputs,
    retries: &mut u32,
    report: &impl Fn(SummarizerEvent),
) -> Result<SummaryOutcome, SummaryError> {
    let job = &inputs.job;
    let done = |which, call: &SubagentCall| report(SummarizerEvent::CallDone { which, call: Box::new(call.clone()) });
    let summary = call(inputs, Subagent::Summary, job.summary_request(), retries).await?;
    done(Subagent::Summary, &summary);

    let screen = match &inputs.tmux {
        Some(tmux) => tmux.capture_pane(false).await.unwrap_or_default(),
        None => String::new(),
    };
    let request = job.questions_request(&summary.response.content, &screen);
    let questions = call(inputs, Subagent::Questions, request, retries).await?;
    done(Subagent::Questions, &questions);

    let request = job.answers_request(&summary, &questions.response.content);
    let answers = call(inputs, Subagent::Answers, request, retries).await?;
    done(Subagent::Answers, &answers);
    Ok(job.outcome(Some(&summary.response.content), &questions, &answers))
}
