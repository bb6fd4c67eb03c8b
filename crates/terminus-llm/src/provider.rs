//! A configured provider: one of the protocol clients, chosen by [`ProviderSettings::kind`].

use crate::anthropic::AnthropicClient;
use crate::error::LlmError;
use crate::openai::OpenAiClient;
use crate::oracle::OracleModel;
use crate::settings::{ProviderKind, ProviderSettings};
use terminus_core::llm::{LlmRequest, LlmResponse};

pub use crate::settings::ORACLE_MODEL;

#[derive(Clone, Debug)]
pub enum Provider {
    OpenAi(OpenAiClient),
    Anthropic(AnthropicClient),
    Oracle(OracleModel),
}

impl Provider {
    pub fn new(settings: ProviderSettings) -> Result<Provider, LlmError> {
        Ok(match settings.kind() {
            ProviderKind::Oracle => Provider::Oracle(OracleModel::new()),
            ProviderKind::Anthropic => Provider::Anthropic(AnthropicClient::new(settings)?),
            ProviderKind::OpenAiCompatible => Provider::OpenAi(OpenAiClient::new(settings)?),
        })
    }

    /// Whether calls leave the machine (the oracle's do not).
    pub fn is_remote(&self) -> bool {
        !matches!(self, Provider::Oracle(_))
    }

    /// The model's limits and prices (the oracle's: none).
    pub fn model_info(&self) -> terminus_core::models::ModelInfo {
        match self {
            Provider::OpenAi(client) => client.model_info(),
            Provider::Anthropic(client) => client.model_info(),
            Provider::Oracle(_) => terminus_core::models::ModelInfo::default(),
        }
    }

    /// One call, without retries (see [`crate::retry`]).
    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        match self {
            Provider::OpenAi(client) => client.complete(request).await,
            Provider::Anthropic(client) => client.complete(request).await,
            Provider::Oracle(oracle) => Ok(oracle.complete(request)),
        }
    }
}
