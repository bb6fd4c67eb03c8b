//! Choosing a provider from the configured model name and settings.

use std::time::Duration;

use crate::error::LlmError;
use crate::models::ModelInfo;
use crate::openai::OpenAiClient;
use crate::oracle::OracleModel;
use crate::types::{LlmRequest, LlmResponse};

/// The model name that selects the offline oracle.
pub const ORACLE_MODEL: &str = "oracle";

/// A configured provider.
#[derive(Clone, Debug)]
pub enum Provider {
    OpenAi(OpenAiClient),
    Oracle(OracleModel),
}

impl Provider {
    /// Builds the provider for `model_name`. `api_base` comes from the agent's kwargs, else
    /// `OPENAI_API_BASE`, else OpenAI; the key from `OPENAI_API_KEY`.
    pub fn for_model(model_name: &str, api_base: Option<&str>, info: ModelInfo) -> Result<Provider, LlmError> {
        if model_name == ORACLE_MODEL {
            return Ok(Provider::Oracle(OracleModel::new()));
        }
        let env_base = std::env::var("OPENAI_API_BASE").ok().filter(|b| !b.is_empty());
        let base = api_base.map(str::to_string).or(env_base).unwrap_or_else(|| "https://api.openai.com/v1".to_string());
        let key = std::env::var("OPENAI_API_KEY").ok();
        Ok(Provider::OpenAi(OpenAiClient::new(&base, model_name, info, key, Duration::from_secs(600))?))
    }

    /// Whether calls leave the machine (the oracle's do not).
    pub fn is_remote(&self) -> bool {
        matches!(self, Provider::OpenAi(_))
    }

    /// One call, without retries (see [`crate::retry`]).
    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        match self {
            Provider::OpenAi(client) => client.complete(request).await,
            Provider::Oracle(oracle) => Ok(oracle.complete(request)),
        }
    }
}
