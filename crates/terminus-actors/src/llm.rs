//! The LLM actor: owns one provider and serves model calls for every trial of an agent.
//!
//! Supervised by: the Supervisor (one LLM actor per configured agent; restarted if it fails).
//! Accepts: [`LlmMsg::Complete`]. Each call runs in its own task, so a slow reply never blocks
//! the mailbox; a semaphore caps concurrent requests, and the retry layer (backoff with jitter,
//! Retry-After honoured) sits here, once, rather than stacked in every caller.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use terminus_llm::retry::{RetryPolicy, with_retries};
use terminus_llm::{LlmError, LlmRequest, LlmResponse, Provider};
use tokio::sync::Semaphore;

/// The actor (stateless; everything lives in [`LlmState`]).
pub struct LlmActor;

pub struct LlmArgs {
    pub provider: Provider,
    /// Requests in flight at once, across all trials of the agent.
    pub max_concurrent: usize,
    pub retry: RetryPolicy,
}

pub struct LlmState {
    provider: Arc<Provider>,
    permits: Arc<Semaphore>,
    retry: RetryPolicy,
}

/// Inbox of [`LlmActor`].
pub enum LlmMsg {
    /// One model call; the reply carries the response or a typed error.
    Complete { request: LlmRequest, reply: RpcReplyPort<Result<LlmResponse, LlmError>> },
}

impl Actor for LlmActor {
    type Msg = LlmMsg;
    type State = LlmState;
    type Arguments = LlmArgs;

    async fn pre_start(&self, _myself: ActorRef<LlmMsg>, args: LlmArgs) -> Result<LlmState, ActorProcessingErr> {
        Ok(LlmState {
            provider: Arc::new(args.provider),
            permits: Arc::new(Semaphore::new(args.max_concurrent.max(1))),
            retry: args.retry,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<LlmMsg>,
        msg: LlmMsg,
        state: &mut LlmState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LlmMsg::Complete { request, reply } => {
                let provider = state.provider.clone();
                let permits = state.permits.clone();
                let retry = state.retry;
                tokio::spawn(async move {
                    let Ok(_permit) = permits.acquire_owned().await else {
                        let _ = reply.send(Err(LlmError::Cancelled));
                        return;
                    };
                    let result = with_retries(retry, || provider.complete(&request), |attempt, error, wait| {
                        tracing::warn!(attempt, wait_sec = wait.as_secs_f64(), %error, "model call failed; retrying");
                    })
                    .await;
                    // The trial may have stopped waiting (deadline, cancel); that is fine.
                    let _ = reply.send(result);
                });
            }
        }
        Ok(())
    }
}
