//! Shared limits on the calls to one model endpoint: a cap on requests in flight that adapts to
//! rate limiting (additive increase, multiplicative decrease, as TCP does), and optional
//! requests-per-minute and tokens-per-minute budgets (token buckets).
//!
//! One limiter serves every trial of a job that uses the same (provider, model, endpoint), so
//! hundreds of trials share the provider's budget instead of each discovering it with 429s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use terminus_core::llm::LimitSettings;

#[derive(Debug)]
struct Bucket {
    capacity: f64,
    level: f64,
    per_second: f64,
    updated: Instant,
}

impl Bucket {
    fn per_minute(capacity: f64) -> Bucket {
        Bucket { capacity, level: capacity, per_second: capacity / 60.0, updated: Instant::now() }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
    }

    /// How long until `amount` is available (zero when it is).
    fn wait_for(&self, amount: f64) -> Duration {
        let missing = amount.min(self.capacity) - self.level;
        if missing <= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(missing / self.per_second) }
    }
}

#[derive(Debug)]
struct State {
    /// The adaptive cap, between 1 and `max_concurrent`.
    limit: f64,
    in_flight: usize,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
}

/// The limiter. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Limiter {
    settings: LimitSettings,
    state: Mutex<State>,
    released: Notify,
}

/// A slot for one request; dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    limiter: Arc<Limiter>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.limiter.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
        drop(state);
        self.limiter.released.notify_waiters();
    }
}

impl Limiter {
    pub fn new(settings: LimitSettings) -> Arc<Limiter> {
        let max = settings.max_concurrent.max(1);
        Arc::new(Limiter {
            settings: LimitSettings { max_concurrent: max, ..settings },
            state: Mutex::new(State {
                limit: max as f64,
                in_flight: 0,
                requests: settings.requests_per_minute.map(|n| Bucket::per_minute(f64::from(n))),
                tokens: settings.tokens_per_minute.map(|n| Bucket::per_minute(n as f64)),
            }),
            released: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot, a request from the per-minute budget and `estimated_tokens` from the
    /// token budget.
    pub async fn acquire(self: &Arc<Self>, estimated_tokens: u64) -> Permit {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let wait = {
                let mut state = self.lock();
                let now = Instant::now();
                let cap = (state.limit.floor() as usize).max(1);
                let mut wait = Duration::ZERO;
                if let Some(bucket) = state.requests.as_mut() {
                    bucket.refill(now);
                    wait = wait.max(bucket.wait_for(1.0));
                }
                if let Some(bucket) = state.tokens.as_mut() {
                    bucket.refill(now);
                    wait = wait.max(bucket.wait_for(estimated_tokens as f64));
                }
                if state.in_flight < cap && wait.is_zero() {
                    state.in_flight += 1;
                    if let Some(bucket) = state.requests.as_mut() {
                        bucket.level -= 1.0;
                    }
                    if let Some(bucket) = state.tokens.as_mut() {
                        bucket.level -= (estimated_tokens as f64).min(bucket.capacity);
                    }
                    return Permit { limiter: self.clone() };
                }
                // Blocked by the cap only: wait for a release. By a budget: wait for the refill.
                if wait.is_zero() { None } else { Some(wait) }
            };
            match wait {
                None => released.await,
                Some(wait) => {
                    tokio::select! {
                        _ = &mut released => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// Settles the token budget once the real usage is known (the estimate was taken before).
    pub fn settle_tokens(&self, estimated: u64, actual: u64) {
        let mut state = self.lock();
        if let Some(bucket) = state.tokens.as_mut() {
            // May go below zero: the next requests then wait for the overdraft to refill.
            bucket.level -= actual as f64 - (estimated as f64).min(bucket.capacity);
        }
    }

    /// A rate limit: halve the in-flight cap (multiplicative decrease).
    pub fn on_rate_limited(&self) {
        if self.settings.adaptive {
            let mut state = self.lock();
            state.limit = (state.limit / 2.0).max(1.0);
        }
    }

    /// A success: grow the cap by one per window of successes (additive increase).
    pub fn on_success(&self) {
        if self.settings.adaptive {
            let mut state = self.lock();
            let max = self.settings.max_concurrent as f64;
            state.limit = (state.limit + 1.0 / state.limit).min(max);
            drop(state);
            self.released.notify_waiters();
        }
    }

    /// The current in-flight cap.
    pub fn current_limit(&self) -> usize {
        (self.lock().limit.floor() as usize).max(1)
    }

    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_in_flight_cap_holds_and_frees() {
        let limiter = Limiter::new(LimitSettings { max_concurrent: 2, ..Default::default() });
        let a = limiter.acquire(0).await;
        let _b = limiter.acquire(0).await;
        assert_eq!(limiter.in_flight(), 2);
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(0).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "a third request waits");
        drop(a);
        let _c = tokio::time::timeout(Duration::from_secs(1), waiter).await.expect("freed").unwrap();
        assert_eq!(limiter.in_flight(), 2);
    }

    #[test]
    fn rate_limits_halve_and_successes_grow_back() {
        let limiter = Limiter::new(LimitSettings { max_concurrent: 16, ..Default::default() });
        limiter.on_rate_limited();
        assert_eq!(limiter.current_limit(), 8);
        limiter.on_rate_limited();
        limiter.on_rate_limited();
        limiter.on_rate_limited();
        limiter.on_rate_limited();
        assert_eq!(limiter.current_limit(), 1, "never below one");
        for _ in 0..3 {
            limiter.on_success();
        }
        assert!(limiter.current_limit() >= 2, "additive increase: about one per window of successes");
        for _ in 0..1000 {
            limiter.on_success();
        }
        assert_eq!(limiter.current_limit(), 16, "never above the configured cap");
        let fixed = Limiter::new(LimitSettings { max_concurrent: 4, adaptive: false, ..Default::default() });
        fixed.on_rate_limited();
        assert_eq!(fixed.current_limit(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_spread_the_calls() {
        let limiter =
            Limiter::new(LimitSettings { max_concurrent: 100, requests_per_minute: Some(60), ..Default::default() });
        let start = Instant::now();
        for _ in 0..70 {
            drop(limiter.acquire(0).await);
        }
        // 60 at once from the full bucket, then one per second.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_secs(9) && elapsed <= Duration::from_secs(11), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_per_minute_count_the_real_usage() {
        let limiter =
            Limiter::new(LimitSettings { max_concurrent: 100, tokens_per_minute: Some(6000), ..Default::default() });
        let start = Instant::now();
        drop(limiter.acquire(1000).await);
        // The request really used 7000 tokens: the budget is overdrawn by 1000.
        limiter.settle_tokens(1000, 7000);
        drop(limiter.acquire(1000).await);
        // 2000 tokens had to refill at 100 per second.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_secs(19) && elapsed <= Duration::from_secs(21), "{elapsed:?}");
    }
}
