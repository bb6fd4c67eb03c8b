//! The model limits of a job's agents, settled once before any trial starts.
//!
//! Each distinct (protocol, model, endpoint) whose context `model_info` does not give is asked
//! of its server once, all at once, each question with a short time limit
//! ([`terminus_llm::probe`]); what the servers say is stored in the agents' options, so every
//! trial, the LLM actors and the trials' `config.json` see one answer. This runs in
//! `start_job`, before the Supervisor exists: no actor handler ever waits for it. An agent left
//! with the default context is warned about, naming its model.

use std::collections::HashMap;

use futures_util::future::join_all;
use terminus_config::{AgentKind, JobSpec};
use terminus_core::models::DEFAULT_CONTEXT_LIMIT;
use terminus_llm::probe::{PROBE_TIMEOUT, server_limits};
use terminus_llm::{ProviderKind, ProviderSettings};

use crate::supervisor::agent_provider_settings;

/// Asks the servers, fills in `server_limits`, and warns about every model whose context is
/// assumed. Agents that call no model (`oracle`, `nop`, the offline `oracle` model) are skipped.
pub async fn settle(spec: &mut JobSpec) {
    let mut asked: HashMap<(ProviderKind, String, String), (ProviderSettings, Vec<usize>)> = HashMap::new();
    for (idx, agent) in spec.agents.iter().enumerate() {
        let AgentKind::Terminus2(opts) = &agent.kind else { continue };
        let Some(settings) = agent_provider_settings(agent) else { continue };
        if settings.kind() == ProviderKind::Oracle || !opts.wants_server_limits() {
            continue;
        }
        asked.entry(settings.identity()).or_insert_with(|| (settings, Vec::new())).1.push(idx);
    }
    let questions = asked
        .into_values()
        .map(|(settings, agents)| async move { (server_limits(&settings, PROBE_TIMEOUT).await, agents) });
    for (limits, agents) in join_all(questions).await {
        for idx in agents {
            if let AgentKind::Terminus2(opts) = &mut spec.agents[idx].kind {
                opts.server_limits = limits;
            }
        }
    }
    let mut warned = std::collections::HashSet::new();
    for agent in &spec.agents {
        let AgentKind::Terminus2(opts) = &agent.kind else { continue };
        let model = agent.model_name.as_deref().unwrap_or_default();
        if model == terminus_llm::provider::ORACLE_MODEL {
            continue;
        }
        if opts.model_limits(model).context_assumed() && warned.insert(model.to_string()) {
            tracing::warn!(
                "model {model}: its context size is unknown (no model_info.max_input_tokens, its server does not say, \
                 and LiteLLM's table does not list it); assuming {DEFAULT_CONTEXT_LIMIT} tokens. \
                 Set kwargs.model_info.max_input_tokens to the real size."
            );
        }
    }
}
