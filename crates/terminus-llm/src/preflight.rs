//! Checking a model's provider before a job starts anything: its key is set, and its endpoint
//! answers. Without it a missing key or a wrong `api_base` shows only at each trial's first
//! model call, after its container was built and started, as one failed trial per trial.
//!
//! The key is required where the provider's own public endpoint is used (a server the job
//! names may need none), and whenever the job names the variable it is read from. The endpoint
//! is asked for its model list, the cheapest request each protocol has; any HTTP answer but a
//! refused key counts (a server without a listing answers 404, which still shows it is there).

use std::time::Duration;

use terminus_core::secrets::redact_url;

use crate::anthropic::ANTHROPIC_VERSION;
use crate::providers;
use crate::settings::{ProviderKind, ProviderSettings};

/// How long the endpoint has to answer.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a provider cannot serve the job.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreflightError {
    #[error("no API key: set {variables}")]
    MissingKey { variables: String },
    #[error("the endpoint {endpoint} does not answer: {reason}")]
    Unreachable { endpoint: String, reason: String },
    #[error("the endpoint {endpoint} refuses the key in {variable} (HTTP {status})")]
    KeyRefused { endpoint: String, variable: String, status: u16 },
}

/// Whether the key the provider needs is set (see the module's rule).
pub fn check_key(settings: &ProviderSettings) -> Result<(), PreflightError> {
    if settings.kind() == ProviderKind::Oracle || settings.api_key().is_some() {
        return Ok(());
    }
    if let Some(named) = &settings.api_key_env {
        return Err(PreflightError::MissingKey { variables: named.clone() });
    }
    let Some(entry) = settings.entry() else { return Ok(()) };
    if entry.key_required && uses_public_endpoint(settings) {
        return Err(PreflightError::MissingKey { variables: entry.key_vars.join(" or ") });
    }
    Ok(())
}

/// Whether requests go to the provider's own default endpoint: neither `api_base` nor one of
/// the provider's endpoint variables names another.
fn uses_public_endpoint(settings: &ProviderSettings) -> bool {
    let Some(entry) = settings.entry() else { return false };
    let named = settings.api_base.as_ref().is_some_and(|b| !b.is_empty())
        || entry.base_vars.iter().any(|v| providers::env(v).is_some());
    entry.default_base.is_some() && !named
}

/// How long to wait before asking again an endpoint that refused the connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// Asks the endpoint for its model list within `timeout`. A refused connection is tried again
/// until then: a server started in the background just before the job (as a dry run does) may
/// not be listening yet.
pub async fn check_endpoint(settings: &ProviderSettings, timeout: Duration) -> Result<(), PreflightError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match ask_endpoint(settings, deadline - tokio::time::Instant::now()).await {
            Err(PreflightError::Unreachable { .. }) if tokio::time::Instant::now() + RECONNECT_PAUSE < deadline => {
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
            answer => return answer,
        }
    }
}

/// One model-list request within `timeout`.
async fn ask_endpoint(settings: &ProviderSettings, timeout: Duration) -> Result<(), PreflightError> {
    if settings.kind() == ProviderKind::Oracle {
        return Ok(());
    }
    let base = settings.resolved_api_base().trim_end_matches('/').to_string();
    let endpoint = redact_url(&base);
    let unreachable = |reason: String| PreflightError::Unreachable { endpoint: endpoint.clone(), reason };
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .map_err(|e| unreachable(e.to_string()))?;
    let key = settings.api_key();
    let request = match settings.kind() {
        ProviderKind::Anthropic => {
            let request = client.get(format!("{base}/v1/models")).header("anthropic-version", ANTHROPIC_VERSION);
            match &key {
                Some(key) => request.header("x-api-key", key),
                None => request,
            }
        }
        _ if settings.is_azure() => {
            let request = client.get(format!("{base}/openai/models?api-version={}", settings.azure_api_version()));
            match &key {
                Some(key) => request.header("api-key", key),
                None => request,
            }
        }
        _ => {
            let request = client.get(format!("{base}/models"));
            match &key {
                Some(key) => request.bearer_auth(key),
                None => request,
            }
        }
    };
    let response = request.send().await.map_err(|e| {
        let reason = if e.is_timeout() {
            "no answer in time".to_string()
        } else if e.is_connect() {
            "the connection failed".to_string()
        } else {
            "the request failed".to_string()
        };
        unreachable(reason)
    })?;
    let status = response.status().as_u16();
    if key.is_some() && matches!(status, 401 | 403) {
        return Err(PreflightError::KeyRefused { endpoint, variable: settings.key_variable(), status });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_required_at_a_providers_public_endpoint_only() {
        let missing = ProviderSettings::new("deepseek/deepseek-chat");
        assert_eq!(check_key(&missing), Err(PreflightError::MissingKey { variables: "DEEPSEEK_API_KEY".into() }));
        let own_server = ProviderSettings { api_base: Some("http://127.0.0.1:8000/v1".into()), ..missing.clone() };
        assert_eq!(check_key(&own_server), Ok(()));
        let named = ProviderSettings { api_key_env: Some("TERMINUS_TEST_UNSET_KEY".into()), ..own_server };
        assert_eq!(check_key(&named), Err(PreflightError::MissingKey { variables: "TERMINUS_TEST_UNSET_KEY".into() }));
        assert_eq!(check_key(&ProviderSettings::new(crate::provider::ORACLE_MODEL)), Ok(()));
    }

    #[tokio::test]
    async fn an_endpoint_that_answers_passes_and_one_that_does_not_is_named() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ =
                    socket.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            }
        });
        let answering =
            ProviderSettings { api_base: Some(format!("http://{addr}/v1")), ..ProviderSettings::new("openai/m") };
        assert_eq!(check_endpoint(&answering, PREFLIGHT_TIMEOUT).await, Ok(()));

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let silent =
            ProviderSettings { api_base: Some(format!("http://{closed}/v1")), ..ProviderSettings::new("openai/m") };
        match check_endpoint(&silent, PREFLIGHT_TIMEOUT).await {
            Err(PreflightError::Unreachable { endpoint, .. }) => assert_eq!(endpoint, format!("http://{closed}/v1")),
            other => panic!("{other:?}"),
        }
    }
}
