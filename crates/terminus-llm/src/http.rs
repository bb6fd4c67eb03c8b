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

/// A failure below HTTP: a timeout, or a connection that failed or broke.
fn transport(e: &reqwest::Error) -> LlmError {
    let described = crate::error::describe_reqwest(e);
    if e.is_timeout() { LlmError::TimedOut(described) } else { LlmError::Transient(described) }
}

/// Sends a prepared request and returns its JSON body; a non-2xx status becomes the typed error
/// for it, a transport failure or an unreadable body a retryable one.
pub(crate) async fn send_json(request: reqwest::RequestBuilder) -> Result<serde_json::Value, LlmError> {
    use crate::error::{classify_http_error, preview};
    let mut response = request.send().await.map_err(|e| transport(&e))?;
    let status = response.status().as_u16();
    let retry_after = crate::error::retry_after(response.headers());
    // Read in chunks up to a cap: a hostile or broken server cannot make us hold gigabytes.
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
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

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A server on loopback that answers 200 with a body that never ends: the client stops at
    /// the cap with an error instead of holding all of it.
    #[tokio::test]
    async fn an_endless_reply_body_stops_at_the_cap() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut request).await;
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'['; 1 << 20];
            let mut sent = 0usize;
            while socket.write_all(format!("{:x}\r\n", chunk.len()).as_bytes()).await.is_ok()
                && socket.write_all(&chunk).await.is_ok()
                && socket.write_all(b"\r\n").await.is_ok()
            {
                sent += chunk.len();
            }
            sent
        });
        let client = http_client(Duration::from_secs(60)).unwrap();
        let error = send_json(client.post(format!("http://{addr}/v1/chat/completions")).body("{}")).await.unwrap_err();
        assert!(matches!(&error, LlmError::InvalidResponse(m) if m.contains("larger than 64 MiB")), "{error:?}");
        let sent = server.await.unwrap();
        assert!(sent < 2 * MAX_REPLY_BYTES, "the client stopped reading ({sent} bytes sent)");
    }
}
