//! Retrying calls that may succeed a second time (rate limits, transient faults), with
//! exponential backoff, full jitter, a cap, and the provider's Retry-After honoured.

use std::future::Future;
use std::time::Duration;

use crate::error::LlmError;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { max_attempts: 3, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(30) }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (0-based `attempt` that just failed).
    pub fn delay(&self, attempt: u32, error: &LlmError) -> Duration {
        let exp = self.base_delay.saturating_mul(2u32.saturating_pow(attempt)).min(self.max_delay);
        let jittered = exp.mul_f64(rand::random::<f64>());
        match error {
            LlmError::RateLimited { retry_after: Some(after), .. } => (*after).min(self.max_delay).max(jittered),
            _ => jittered,
        }
    }
}

/// Runs `call` until it succeeds, fails with a non-retryable error, or attempts run out.
/// `on_retry` hears of each retry (attempt number, error, wait).
pub async fn with_retries<T, F, Fut>(
    policy: RetryPolicy,
    mut call: F,
    mut on_retry: impl FnMut(u32, &LlmError, Duration),
) -> Result<T, LlmError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LlmError>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_retryable() && attempt + 1 < policy.max_attempts => {
                let wait = policy.delay(attempt, &error);
                on_retry(attempt + 1, &error, wait);
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn transient_errors_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let mut retries = 0;
        let result = with_retries(
            RetryPolicy::default(),
            || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 { Err(LlmError::Transient("503".into())) } else { Ok(7) }
            },
            |_, _, _| retries += 1,
        )
        .await;
        assert_eq!(result, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(retries, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = with_retries(
            RetryPolicy::default(),
            || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(LlmError::ContextLengthExceeded("too long".into()))
            },
            |_, _, _| {},
        )
        .await;
        assert!(matches!(result, Err(LlmError::ContextLengthExceeded(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = RetryPolicy::default();
        let error = LlmError::RateLimited { retry_after: Some(Duration::from_secs(5)), message: String::new() };
        assert!(policy.delay(0, &error) >= Duration::from_secs(5));
        let error = LlmError::RateLimited { retry_after: Some(Duration::from_secs(500)), message: String::new() };
        assert!(policy.delay(0, &error) <= Duration::from_secs(30));
    }
}
