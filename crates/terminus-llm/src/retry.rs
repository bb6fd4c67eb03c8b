//! Retrying calls that may succeed a second time (rate limits, transient faults), with
//! exponential backoff, full jitter, a cap, and the provider's Retry-After honoured.

use std::future::Future;
use std::time::Duration;

use crate::error::LlmError;

pub use terminus_core::llm::RetryPolicy;

/// The wait before attempt `attempt + 1` (0-based `attempt` that just failed) under `policy`:
/// exponential with full jitter, and at least what a rate limit's `Retry-After` asks.
pub fn delay(policy: &RetryPolicy, attempt: u32, error: &LlmError) -> Duration {
    let exp = policy.base_delay.saturating_mul(2u32.saturating_pow(attempt)).min(policy.max_delay);
    let jittered = exp.mul_f64(rand::random::<f64>());
    match error {
        LlmError::RateLimited { retry_after: Some(after), .. } => (*after).min(policy.max_delay).max(jittered),
        _ => jittered,
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
                let wait = delay(&policy, attempt, &error);
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

    #[tokio::test(start_paused = true)]
    async fn waits_grow_exponentially_within_the_jittered_bounds() {
        let policy =
            RetryPolicy { max_attempts: 5, base_delay: Duration::from_secs(1), max_delay: Duration::from_secs(3) };
        let mut waits = Vec::new();
        let start = tokio::time::Instant::now();
        let result: Result<(), _> =
            with_retries(policy, || async { Err(LlmError::Transient("503".into())) }, |_, _, wait| waits.push(wait))
                .await;
        assert!(result.is_err());
        assert_eq!(waits.len(), 4, "5 attempts: 4 waits");
        // Full jitter: each wait lies in [0, min(cap, base * 2^n)].
        for (n, wait) in waits.iter().enumerate() {
            let bound = Duration::from_secs(1 << n).min(Duration::from_secs(3));
            assert!(*wait <= bound, "wait {n}: {wait:?} > {bound:?}");
        }
        let slept = start.elapsed().as_secs_f64();
        let asked = waits.iter().sum::<Duration>().as_secs_f64();
        // Timers have millisecond resolution.
        assert!((slept - asked).abs() < 0.01, "the waits are really slept: {slept} vs {asked}");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limits_wait_at_least_what_the_provider_asked() {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result = with_retries(
            RetryPolicy::default(),
            || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(LlmError::RateLimited { retry_after: Some(Duration::from_secs(5)), message: String::new() })
                } else {
                    Ok(())
                }
            },
            |_, _, _| {},
        )
        .await;
        assert!(result.is_ok());
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_secs(10) && elapsed < Duration::from_secs(10) + Duration::from_secs(4),
            "{elapsed:?}"
        );
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = RetryPolicy::default();
        let error = LlmError::RateLimited { retry_after: Some(Duration::from_secs(5)), message: String::new() };
        assert!(delay(&policy, 0, &error) >= Duration::from_secs(5));
        let error = LlmError::RateLimited { retry_after: Some(Duration::from_secs(500)), message: String::new() };
        assert!(delay(&policy, 0, &error) <= Duration::from_secs(30));
    }
}
