//! The LLM actor: owns one provider and serves the model calls of every trial that uses the same
//! (protocol, model, endpoint).
//!
//! Supervised by: the Supervisor, which spawns one per distinct endpoint and restarts it if it
//! fails. Accepts: [`LlmMsg::Complete`], through [`LlmHandle::complete`]. Its handler awaits
//! nothing: each call runs in its own task, so a slow reply never blocks the mailbox. In front
//! of the provider sit, once for the whole job:
//! - the limiter (in-flight cap that halves on 429 and grows back, requests and tokens per
//!   minute), so all trials share the provider's budget;
//! - the retry layer (exponential backoff with full jitter, Retry-After honoured, only for errors
//!   that may succeed again), whose every retry is reported to the Supervisor (it shows on the
//!   trial's progress line) and counted in the reply.
//!
//! A call whose caller stopped waiting (its trial was cancelled or hit its deadline, and the
//! waiting task was aborted) is abandoned within [`CALLER_CHECK`]: the HTTP request is dropped,
//! its limiter slot freed, and no retry is sent, so nothing is spent for a trial that is gone. A
//! panic in a call becomes that call's error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort};
use terminus_core::error::TrialErrorKind;
use terminus_core::ids::TrialName;
use terminus_core::llm::Usage;
use terminus_core::models::ModelInfo;
use terminus_llm::limiter::{LimitSettings, Limiter};
use terminus_llm::retry::{RetryPolicy, with_retries};
use terminus_llm::{LlmError, LlmRequest, LlmResponse, Provider};

use terminus_config::{AgentKind, AgentSpec, ModelApiFormat};
use terminus_llm::{ProviderKind, ProviderSettings};

use crate::context::JobContext;
use crate::panics::panic_text;
use crate::protocol::LlmRetried;

/// How often a call in flight checks that its caller still waits.
const CALLER_CHECK: Duration = Duration::from_millis(200);

/// Resolves once the caller has stopped waiting for `reply`.
async fn caller_gone<T>(reply: &RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(CALLER_CHECK).await;
    }
}

/// The actor (stateless; everything lives in [`LlmState`]).
pub struct LlmActor;

pub struct LlmArgs {
    pub provider: Provider,
    pub limits: LimitSettings,
    pub retry: RetryPolicy,
    /// Where retries are reported.
    pub retries_to: Option<DerivedActorRef<LlmRetried>>,
}

pub struct LlmState {
    provider: Arc<Provider>,
    limiter: Arc<Limiter>,
    retry: RetryPolicy,
    retries_to: Option<DerivedActorRef<LlmRetried>>,
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

/// The most prompt tokens a request of `bytes` bytes in `messages` messages can be: every token
/// of a byte-level tokenizer holds a byte, and a chat template adds some per message. A count
/// above it is not a count of this request.
fn prompt_bound(bytes: usize, messages: usize) -> u64 {
    (bytes as u64).saturating_add(64 * messages as u64).saturating_add(4096)
}

/// The most completion tokens one call is taken to produce (hidden reasoning included).
const COMPLETION_BOUND: u64 = 1_000_000;

/// The usage a call is charged: the provider's when it stated usable counts, else an estimate
/// from the request and the reply with the context check's tokenizer, priced as the model is
/// and marked `estimated`. A budget thus binds on what was sent and received, whatever the
/// provider reports.
fn settle_usage(result: &mut Result<LlmResponse, LlmError>, request: &LlmRequest, info: &ModelInfo) {
    let (reply, reasoning, usage) = match result {
        Ok(response) => (&response.content, response.reasoning_content.as_deref(), &mut response.usage),
        Err(LlmError::OutputLengthExceeded { truncated, usage }) => (&*truncated, None, usage),
        Err(_) => return,
    };
    let bytes: usize = request.messages.iter().map(|m| m.content.len()).sum();
    let believable = |u: &Usage| {
        u.prompt_tokens <= prompt_bound(bytes, request.messages.len()) && u.completion_tokens <= COMPLETION_BOUND
    };
    if usage.as_ref().is_some_and(believable) {
        return;
    }
    let prompt_tokens = terminus_agent::tokens::count_messages(&request.messages) as u64;
    let completion_tokens =
        (terminus_agent::tokens::count_text(reply) + reasoning.map_or(0, terminus_agent::tokens::count_text)) as u64;
    let cost_usd = info.cost(prompt_tokens, completion_tokens, 0);
    *usage = Some(Usage { prompt_tokens, completion_tokens, cache_tokens: 0, cost_usd, estimated: true });
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
            retries_to: args.retries_to,
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
                let retries_to = state.retries_to.clone();
                tokio::spawn(async move {
                    let estimate = estimate_tokens(&request);
                    // Shared by the attempts: a long trial's request holds its whole history.
                    let request = Arc::new(request);
                    let mut retries = 0;
                    let call = with_retries(
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
                                        let used = response
                                            .usage
                                            .map_or(estimate, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
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
                            if let Some(retries_to) = &retries_to {
                                let _ = retries_to.send_message(LlmRetried {
                                    trial_name: trial.clone(),
                                    attempt,
                                    wait,
                                    reason: TrialErrorKind::from(error),
                                });
                            }
                        },
                    );
                    let outcome = tokio::select! {
                        outcome = std::panic::AssertUnwindSafe(call).catch_unwind() => outcome,
                        () = caller_gone(&reply) => {
                            tracing::debug!(trial = ?trial, "the caller stopped waiting; the model call is abandoned");
                            return;
                        }
                    };
                    let mut result = outcome.unwrap_or_else(|panic| {
                        Err(LlmError::InvalidResponse(format!(
                            "the model call failed unexpectedly: {}",
                            panic_text(&panic)
                        )))
                    });
                    if provider.is_remote() {
                        settle_usage(&mut result, &request, &provider.model_info());
                    }
                    let _ = reply.send(LlmReply { result, retries });
                });
            }
        }
        Ok(())
    }
}

/// One finished call: its result, the retries it took, and its wall time (for
/// `api_request_times_msec`).
#[derive(Debug)]
pub struct LlmCall {
    pub result: Result<LlmResponse, LlmError>,
    pub retries: u32,
    pub elapsed_msec: f64,
}

/// How the trials and summarizers call a model: the LLM actor plus the one time limit a call
/// (retries included) may take (`llm.call_timeout_sec`).
#[derive(Clone, Debug)]
pub struct LlmHandle {
    actor: ActorRef<LlmMsg>,
    call_timeout: Duration,
    /// The job's budget and the caller's agent index, when the job has one.
    budget: Option<(Arc<crate::budget::Budget>, usize)>,
}

impl LlmHandle {
    pub fn new(actor: ActorRef<LlmMsg>, call_timeout: Duration) -> LlmHandle {
        LlmHandle { actor, call_timeout, budget: None }
    }

    /// This handle, its calls metered by `budget` as agent `agent`'s.
    pub fn metered(self, budget: Arc<crate::budget::Budget>, agent: usize) -> LlmHandle {
        LlmHandle { budget: Some((budget, agent)), ..self }
    }

    /// One model call; `trial` names the caller in retry reports. Never fails outright: a
    /// call that takes too long is a transient error, and a gone actor a cancellation; with
    /// the budget spent, the call is not sent ([`LlmError::BudgetReached`]).
    pub async fn complete(&self, request: LlmRequest, trial: Option<TrialName>) -> LlmCall {
        let started = Instant::now();
        if let Some(why) = self.budget.as_ref().and_then(|(budget, agent)| budget.reached(*agent)) {
            return LlmCall { result: Err(LlmError::BudgetReached(why)), retries: 0, elapsed_msec: 0.0 };
        }
        // Named in the spend journal (only a metered call needs it).
        let caller = self.budget.as_ref().and(trial.as_ref()).map(|t| t.as_str().to_string()).unwrap_or_default();
        let asked = self.actor.call(|reply| LlmMsg::Complete { request, trial, reply }, Some(self.call_timeout)).await;
        let (result, retries) = match asked {
            Ok(CallResult::Success(reply)) => (reply.result, reply.retries),
            Ok(CallResult::Timeout) => {
                (Err(LlmError::TimedOut(format!("no reply within {} s", self.call_timeout.as_secs()))), 0)
            }
            Ok(CallResult::SenderError) | Err(_) => (Err(LlmError::Cancelled), 0),
        };
        if let Some((budget, agent)) = &self.budget {
            // A cut-off reply was paid for too.
            let usage = match &result {
                Ok(response) => response.usage,
                Err(LlmError::OutputLengthExceeded { usage, .. }) => *usage,
                Err(_) => None,
            };
            if let Some(usage) = usage {
                budget.charge(*agent, &caller, &usage);
            }
        }
        LlmCall { result, retries, elapsed_msec: started.elapsed().as_secs_f64() * 1000.0 }
    }
}

/// How agent `idx` reaches its model (None for agents that call no model).
pub fn provider_settings(ctx: &JobContext, idx: usize) -> Option<ProviderSettings> {
    agent_provider_settings(&ctx.plan.agents()[idx])
}

/// How `agent` reaches its model (None for agents that call no model).
pub fn agent_provider_settings(agent: &AgentSpec) -> Option<ProviderSettings> {
    let AgentKind::Terminus2(opts) = &agent.kind else { return None };
    let model_name = agent.model_name.as_deref().unwrap_or_default();
    Some(ProviderSettings {
        api_base: opts.api_base.clone(),
        api_key_env: opts.api_key_env.clone(),
        reasoning_effort: opts.reasoning_effort.clone(),
        max_thinking_tokens: opts.max_thinking_tokens,
        collect_rollout_details: opts.collect_rollout_details,
        request_timeout: agent.llm.request_timeout,
        model_info: opts.model_info(model_name),
        protocol: opts.api_format.map(|format| match format {
            ModelApiFormat::OpenAiChatCompletions => ProviderKind::OpenAiCompatible,
            ModelApiFormat::AnthropicMessages => ProviderKind::Anthropic,
        }),
        ..ProviderSettings::new(model_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::llm::ChatMessage;

    fn request() -> LlmRequest {
        LlmRequest { messages: vec![ChatMessage::user("count these words please ".repeat(50))], ..Default::default() }
    }

    fn settled(usage: Option<Usage>) -> Usage {
        let info =
            ModelInfo { input_cost_per_token: Some(1e-6), output_cost_per_token: Some(2e-6), ..Default::default() };
        let mut result = Ok(LlmResponse { content: "a short reply".into(), usage, ..Default::default() });
        settle_usage(&mut result, &request(), &info);
        result.unwrap().usage.unwrap()
    }

    /// Missing, wrapping or unbelievable counts are replaced by an estimate of what was sent and
    /// received, priced and marked; believable ones are kept.
    #[test]
    fn usage_a_provider_does_not_state_is_estimated() {
        let missing = settled(None);
        assert!(missing.estimated && missing.prompt_tokens > 200 && missing.completion_tokens > 0, "{missing:?}");
        assert!(missing.cost_usd > 0.0);
        let wrapping = Usage { prompt_tokens: u64::MAX, completion_tokens: 1, ..Default::default() };
        assert_eq!(settled(Some(wrapping)), missing, "a count past the request's size is no count");
        let endless = Usage { prompt_tokens: 10, completion_tokens: 5_000_000, ..Default::default() };
        assert!(settled(Some(endless)).estimated);
        let stated =
            Usage { prompt_tokens: 300, completion_tokens: 4, cache_tokens: 0, cost_usd: 0.1, estimated: false };
        assert_eq!(settled(Some(stated)), stated);
        // A cut-off reply is charged too.
        let mut cut = Err(LlmError::OutputLengthExceeded { truncated: "{\"analysis\": \"".into(), usage: None });
        settle_usage(&mut cut, &request(), &ModelInfo::default());
        assert!(matches!(cut, Err(LlmError::OutputLengthExceeded { usage: Some(Usage { estimated: true, .. }), .. })));
    }
}
