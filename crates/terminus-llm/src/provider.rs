//! A configured provider: one of the protocol clients, chosen by [`ProviderSettings::kind`].

use std::time::Duration;

use crate::anthropic::AnthropicClient;
use crate::error::LlmError;
use crate::openai::OpenAiClient;
use crate::oracle::OracleModel;
use crate::settings::{ProviderKind, ProviderSettings};
use crate::types::{LlmRequest, LlmResponse};

/// The model name that selects the offline oracle.
pub const ORACLE_MODEL: &str = "oracle";

#[derive(Clone, Debug)]
pub enum Provider {
    OpenAi(OpenAiClient),
    Anthropic(AnthropicClient),
    Oracle(OracleModel),
}

/// The HTTP client every provider uses; `timeout` bounds each request.
pub(crate) fn http_client(timeout: Duration) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| LlmError::BadRequest(format!("cannot build the HTTP client: {e}")))
}

/// Sends a prepared request and returns its JSON body; a non-2xx status becomes the typed error
/// for it, a transport failure or an unreadable body a retryable one.
pub(crate) async fn send_json(request: reqwest::RequestBuilder) -> Result<serde_json::Value, LlmError> {
    use crate::error::{classify_http_error, describe_reqwest, preview};
    let response = request.send().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))?;
    let status = response.status().as_u16();
    let retry_after = crate::error::retry_after(response.headers());
    let text = response.text().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))?;
    if !(200..300).contains(&status) {
        return Err(classify_http_error(status, &text, retry_after));
    }
    serde_json::from_str(&text).map_err(|e| LlmError::InvalidResponse(format!("{e}: {}", preview(&text))))
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

    /// One call, without retries (see [`crate::retry`]).
    pub async fn complete(&self, request: &LlmRequest) -> Result<LlmResponse, LlmError> {
        match self {
            Provider::OpenAi(client) => client.complete(request).await,
            Provider::Anthropic(client) => client.complete(request).await,
            Provider::Oracle(oracle) => Ok(oracle.complete(request)),
        }
    }
}
