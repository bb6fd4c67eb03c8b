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
use terminus_config::{AgentKind, AgentSpec};
use terminus_core::models::DEFAULT_CONTEXT_LIMIT;
use terminus_llm::probe::{PROBE_TIMEOUT, server_limits};
use terminus_llm::{ProviderKind, ProviderSettings};

use crate::llm::agent_provider_settings;

/// Asks the servers, fills in `server_limits`, and warns about every model whose context is
/// assumed. Agents that call no model (`oracle`, `nop`, the offline `oracle` model) are skipped.
pub async fn settle(agents: &mut [AgentSpec]) {
    let mut asked: HashMap<(ProviderKind, String, String), (ProviderSettings, Vec<usize>)> = HashMap::new();
    for (idx, agent) in agents.iter().enumerate() {
        let AgentKind::Terminus2(opts) = &agent.kind else { continue };
        let Some(settings) = agent_provider_settings(agent) else { continue };
        if settings.kind() == ProviderKind::Oracle || !opts.wants_server_limits() {
            continue;
        }
        asked.entry(settings.identity()).or_insert_with(|| (settings, Vec::new())).1.push(idx);
    }
    let questions = asked
        .into_values()
        .map(|(settings, askers)| async move { (server_limits(&settings, PROBE_TIMEOUT).await, askers) });
    for (limits, askers) in join_all(questions).await {
        for idx in askers {
            if let AgentKind::Terminus2(opts) = &mut agents[idx].kind {
                opts.server_limits = limits;
            }
        }
    }
    let mut warned = std::collections::HashSet::new();
    for agent in agents.iter() {
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

#[cfg(test)]
mod tests {
    use terminus_core::models::{LimitSource, ServerKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::trial::tests::job;

    /// A one-shot vLLM-like server: answers every request with a model listing.
    async fn listing_server(id: &str, max_model_len: u64) -> (String, tokio::task::JoinHandle<usize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let body = serde_json::json!({"data": [{"id": id, "max_model_len": max_model_len}]}).to_string();
        let served = tokio::spawn(async move {
            let mut listings = 0;
            // Three questions per (endpoint, model); answer until the test drops us.
            while let Ok(Ok((mut socket, _))) =
                tokio::time::timeout(std::time::Duration::from_secs(2), listener.accept()).await
            {
                let mut request = vec![0u8; 8192];
                let n = socket.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..n]).to_string();
                let reply = if head.starts_with("GET /v1/models ") {
                    listings += 1;
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                } else {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
                };
                let _ = socket.write_all(reply.as_bytes()).await;
            }
            listings
        });
        (base, served)
    }

    #[tokio::test]
    async fn each_endpoint_and_model_is_asked_once_and_model_info_is_not_asked() {
        let (base, served) = listing_server("small", 2048).await;
        let agent = |kwargs: &str| {
            format!(
                "  - name: terminus-2\n    model_name: hosted_vllm/small\n    kwargs:\n      api_base: {base}\n{kwargs}"
            )
        };
        let agents = [
            agent(""),
            agent("      temperature: 0.1\n"),
            agent("      model_info:\n        max_input_tokens: 9000\n"),
        ];
        let mut job = job(&agents.concat());
        settle(job.agents_mut()).await;
        let limits: Vec<_> = job
            .agents()
            .iter()
            .map(|a| match &a.kind {
                AgentKind::Terminus2(opts) => opts.model_limits("hosted_vllm/small").max_input_tokens,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(limits[0].value, Some(2048));
        assert_eq!((limits[0].source, limits[0].via), (LimitSource::Server, Some(ServerKind::OpenAiModels)));
        assert_eq!(limits[1], limits[0], "the same endpoint and model: the same answer");
        assert_eq!((limits[2].value, limits[2].source), (Some(9000), LimitSource::ModelInfo));
        assert_eq!(served.await.unwrap(), 1, "asked once for the two agents that need it");
    }

    #[tokio::test]
    async fn agents_that_call_no_model_are_not_asked_and_record_no_limits() {
        let mut job = job("  - name: oracle\n  - name: nop\n  - name: terminus-2\n    model_name: oracle\n");
        settle(job.agents_mut()).await;
        for (idx, agent) in job.agents().iter().enumerate() {
            if let AgentKind::Terminus2(opts) = &agent.kind {
                assert_eq!(opts.server_limits, None);
            }
            let plan = &job.trials[idx];
            let config = job.basis("job", plan, "t", "/jobs/j".into()).config;
            assert_eq!(config.agent.model_limits, None, "{}", agent.name);
        }
    }
}
