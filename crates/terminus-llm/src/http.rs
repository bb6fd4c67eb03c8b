//! The HTTP layer both protocol clients share: one client configuration, one send path that
//! turns a non-2xx reply into its typed error.

use std::time::Duration;

use crate::error::LlmError;

/// The largest reply body read (a real one is a few hundred kilobytes at most).
pub const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;

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
    let mut response = request.send().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))?;
    let status = response.status().as_u16();
    let retry_after = crate::error::retry_after(response.headers());
    // Read in chunks up to a cap: a hostile or broken server cannot make us hold gigabytes.
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| LlmError::Transient(describe_reqwest(&e)))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_REPLY_BYTES {
            return Err(LlmError::InvalidResponse(format!(
                "the reply is larger than {} MiB",
                MAX_REPLY_BYTES / (1024 * 1024)
            )));
        }
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !(200..300).contains(&status) {
        return Err(classify_http_error(status, &text, retry_after));
    }
    serde_json::from_str(&text).map_err(|e| LlmError::InvalidResponse(format!("{e}: {}", preview(&text))))
}
