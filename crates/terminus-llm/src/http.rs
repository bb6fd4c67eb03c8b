//! The HTTP layer both protocol clients share: one client configuration, one send path that
//! turns a non-2xx reply into its typed error.

use std::time::Duration;

use crate::error::LlmError;

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
