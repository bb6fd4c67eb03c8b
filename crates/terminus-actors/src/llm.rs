//! The LLM actor: owns one provider and serves the model calls of every trial that uses the same
//! (protocol, model, endpoint).
//!
//! Supervised by: the Supervisor, which spawns one per distinct endpoint and restarts it if it
//! fails. Accepts: [`LlmMsg::Complete`]. Each call runs in its own task, so a slow reply never
//! blocks the mailbox. In front of the provider sit, once for the whole job:
//! - the limiter (in-flight cap that halves on 429 and grows back, requests and tokens per
//!   minute), so all trials share the provider's budget;
//! - the retry layer (exponential backoff with full jitter, Retry-After honoured, only for errors
//!   that may succeed again), whose every retry is reported to the Supervisor (it shows on the
//!   trial's progress line) and counted in the reply.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use terminus_core::ids::TrialName;
use terminus_llm::limiter::{LimitSettings, Limiter};
use terminus_llm::retry::{RetryPolicy, with_retries};
use terminus_llm::{LlmError, LlmRequest, LlmResponse, Provider};

use crate::supervisor::SupervisorMsg;

/// The actor (stateless; everything lives in [`LlmState`]).
pub struct LlmActor;

pub struct LlmArgs {
    pub provider: Provider,
    pub limits: LimitSettings,
    pub retry: RetryPolicy,
    /// Where retries are reported.
    pub supervisor: Option<ActorRef<SupervisorMsg>>,
}

pub struct LlmState {
    provider: Arc<Provider>,
    limiter: Arc<Limiter>,
    retry: RetryPolicy,
    supervisor: Option<ActorRef<SupervisorMsg>>,
}

/// The answer to one call, with how many retries it took.
#[derive(Debug)]
pub struct LlmReply {
    pub result: Result<LlmResponse, LlmError>,
    pub retries: u32,
}

/// Inbox of [`LlmActor`].
pub enum LlmMsg {
    /// One model call; `trial` names the caller for progress reports.
    Complete { request: LlmRequest, trial: Option<TrialName>, reply: RpcReplyPort<LlmReply> },
}

/// A rough size of a request for the tokens-per-minute budget (settled with the real usage).
fn estimate_tokens(request: &LlmRequest) -> u64 {
    request.messages.iter().map(|m| m.content.len() as u64 / 4 + 4).sum()
}

impl Actor for LlmActor {
    type Msg = LlmMsg;
    type State = LlmState;
    type Arguments = LlmArgs;

    async fn pre_start(&self, _myself: ActorRef<LlmMsg>, args: LlmArgs) -> Result<LlmState, ActorProcessingErr> {
        Ok(LlmState {
            provider: Arc::new(args.provider),
            limiter: Limiter::new(args.limits),
            retry: args.retry,
            supervisor: args.supervisor,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<LlmMsg>,
        msg: LlmMsg,
        state: &mut LlmState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LlmMsg::Complete { request, trial, reply } => {
                let provider = state.provider.clone();
                let limiter = state.limiter.clone();
                let retry = state.retry;
                let supervisor = state.supervisor.clone();
                tokio::spawn(async move {
                    let estimate = estimate_tokens(&request);
                    let mut retries = 0;
                    let result = with_retries(
                        retry,
                        || {
                            let (provider, limiter, request) = (provider.clone(), limiter.clone(), request.clone());
                            async move {
                                let permit = limiter.acquire(estimate).await;
                                let result = provider.complete(&request).await;
                                drop(permit);
                                match &result {
                                    Ok(response) => {
                                        limiter.on_success();
                                        let used = response.usage.map_or(estimate, |u| u.prompt_tokens + u.completion_tokens);
                                        limiter.settle_tokens(estimate, used);
                                    }
                                    Err(LlmError::RateLimited { .. }) => limiter.on_rate_limited(),
                                    Err(_) => {}
                                }
                                result
                            }
                        },
                        |attempt, error, wait| {
                            retries += 1;
                            tracing::warn!(trial = ?trial, attempt, wait_sec = wait.as_secs_f64(), %error, "model call failed; retrying");
                            if let Some(supervisor) = &supervisor {
                                let _ = supervisor.cast(SupervisorMsg::LlmRetry {
                                    trial_name: trial.clone(),
                                    attempt,
                                    wait,
                                    reason: error.exception_type().to_string(),
                                });
                            }
                        },
                    )
                    .await;
                    // The trial may have stopped waiting (deadline, cancel); that is fine.
                    let _ = reply.send(LlmReply { result, retries });
                });
            }
        }
        Ok(())
    }
}
