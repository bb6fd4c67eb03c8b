//! The Summarizer actor: condenses a trial's history when the context fills up
//! (terminus2-reference §4, seeds 000 and 001).
//!
//! Supervised by: its Trial, which spawns one per summarization and stops it on cancel.
//! Runs the three subagent calls through the LLM actor: the summary (with the full history), the
//! questions of a fresh agent (no history, with the current screen from the TmuxSession), and the
//! answers (full history plus the summary exchange). Each leaves
//! `trajectory.summarization-N-{summary,questions,answers}.json` in the agent directory.
//!
//! ```text
//! post_start ─► [task: summary ─► screen ─► questions ─► answers] ─► Finished ─► TrialMsg::SummaryReady ─► stop
//! ```
//!
//! The result reaches the Trial as a message, and the Trial stores it as the pending handoff.
//! A failure is a result too (`Err`): the Trial logs it and goes on with its fallbacks.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use terminus_agent::summarize::{Subagent, SubagentCall, SummaryJob, SummaryOutcome};
use terminus_core::ids::TrialName;
use terminus_core::llm::{LlmRequest, LlmResponse};
use tokio::task::JoinHandle;

use crate::files;
use crate::llm::LlmMsg;
use crate::tmux_session::TmuxMsg;
use crate::trial::{SummaryPurpose, TrialMsg};

/// How long one subagent call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(1800);

pub struct SummarizerActor;

pub struct SummarizerArgs {
    pub job: SummaryJob,
    /// The trial it works for, named in retry reports.
    pub trial: TrialName,
    pub llm: ActorRef<LlmMsg>,
    pub tmux: Option<ActorRef<TmuxMsg>>,
    /// The trial's `agent/` directory, where the subagent trajectories go.
    pub logs_dir: PathBuf,
    pub reply_to: ActorRef<TrialMsg>,
    pub generation: u64,
    pub purpose: SummaryPurpose,
}

pub struct SummarizerState {
    reply_to: ActorRef<TrialMsg>,
    generation: u64,
    purpose: SummaryPurpose,
    work: Option<JoinHandle<()>>,
    /// What the calls need; taken when they start.
    inputs: Option<Inputs>,
}

struct Inputs {
    job: SummaryJob,
    trial: TrialName,
    llm: ActorRef<LlmMsg>,
    tmux: Option<ActorRef<TmuxMsg>>,
    logs_dir: PathBuf,
}

/// Inbox of [`SummarizerActor`].
pub enum SummarizerMsg {
    /// The three calls are done (or one failed), with the retries they took.
    Finished(Box<Result<SummaryOutcome, String>>, u32),
}

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
            reply_to: args.reply_to,
            generation: args.generation,
            purpose: args.purpose,
            work: None,
            inputs: Some(Inputs {
                job: args.job,
                trial: args.trial,
                llm: args.llm,
                tmux: args.tmux,
                logs_dir: args.logs_dir,
            }),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<SummarizerMsg>,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        let Some(inputs) = state.inputs.take() else { return Ok(()) };
        state.work = Some(tokio::spawn(async move {
            let mut retries = 0;
            let result = summarize(&inputs, &mut retries).await;
            let _ = myself.cast(SummarizerMsg::Finished(Box::new(result), retries));
        }));
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SummarizerMsg>,
        msg: SummarizerMsg,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SummarizerMsg::Finished(result, retries) => {
                state.work = None;
                let (generation, purpose) = (state.generation, state.purpose);
                let _ = state.reply_to.cast(TrialMsg::SummaryReady { generation, purpose, result, retries });
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SummarizerMsg>,
        state: &mut SummarizerState,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped before finishing (the trial was cancelled): abandon the calls.
        if let Some(work) = state.work.take() {
            work.abort();
        }
        Ok(())
    }
}

/// One subagent call through the LLM actor; adds its retries to `retries`.
async fn call(inputs: &Inputs, prompt: String, request: LlmRequest, retries: &mut u32) -> Result<SubagentCall, String> {
    let timestamp = terminus_core::time::iso(&terminus_core::time::now());
    let started = Instant::now();
    let trial = Some(inputs.trial.clone());
    let reply = match inputs.llm.call(|reply| LlmMsg::Complete { request, trial, reply }, Some(CALL_TIMEOUT)).await {
        Ok(CallResult::Success(reply)) => reply,
        Ok(CallResult::Timeout) => return Err("the model did not answer in time".into()),
        Ok(CallResult::SenderError) | Err(_) => return Err("the LLM actor is gone".into()),
    };
    *retries += reply.retries;
    let response: LlmResponse = reply.result.map_err(|e| e.to_string())?;
    Ok(SubagentCall { prompt, response, elapsed_msec: started.elapsed().as_secs_f64() * 1000.0, timestamp })
}

fn write(
    job: &SummaryJob,
    which: Subagent,
    call: &SubagentCall,
    summary: Option<&SubagentCall>,
    logs_dir: &std::path::Path,
) {
    let text = job.trajectory(which, call, summary).to_json();
    if let Err(e) = files::write_atomic(&logs_dir.join(job.file_name(which)), text.as_bytes()) {
        tracing::warn!(error = %e, "could not write a subagent trajectory");
    }
}

async fn summarize(inputs: &Inputs, retries: &mut u32) -> Result<SummaryOutcome, String> {
    let (job, logs_dir) = (&inputs.job, inputs.logs_dir.as_path());
    let (prompt, request) = job.summary_request();
    let summary = call(inputs, prompt, request, retries).await.map_err(|e| format!("summary call failed: {e}"))?;
    write(job, Subagent::Summary, &summary, None, logs_dir);

    let screen = match &inputs.tmux {
        Some(tmux) => {
            match tmux.call(|reply| TmuxMsg::CapturePane { entire: false, reply }, Some(Duration::from_secs(60))).await
            {
                Ok(CallResult::Success(Ok(screen))) => screen,
                _ => String::new(),
            }
        }
        None => String::new(),
    };
    let (prompt, request) = job.questions_request(&summary.response.content, &screen);
    let questions = call(inputs, prompt, request, retries).await.map_err(|e| format!("questions call failed: {e}"))?;
    write(job, Subagent::Questions, &questions, None, logs_dir);

    let (prompt, request) = job.answers_request(&summary, &questions.response.content);
    let answers = call(inputs, prompt, request, retries).await.map_err(|e| format!("answers call failed: {e}"))?;
    write(job, Subagent::Answers, &answers, Some(&summary), logs_dir);
    Ok(job.outcome(summary, questions, answers))
}
