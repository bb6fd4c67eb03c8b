//! One limit on running trials shared by several jobs in one process (`terminus serve`): each
//! job's Supervisor asks for room before it starts trials and says how many it runs after.
//!
//! The count is by level, not by permit: each job publishes how many trials it runs, and a job's
//! room is the limit minus what the others run. Asking and publishing happen under one lock, so
//! two jobs dispatching at the same moment cannot both take the last place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use terminus_core::ids::JobId;

/// How often a job held back by the shared limit looks again (the limit is shared with jobs
/// it hears nothing from).
pub const RECHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// Trials running at once over every job that holds this.
#[derive(Debug)]
pub struct SharedLimit {
    limit: usize,
    running: Mutex<HashMap<JobId, usize>>,
    /// The most trials ever running at once over every job.
    peak: std::sync::atomic::AtomicUsize,
}

impl SharedLimit {
    pub fn new(limit: usize) -> Arc<SharedLimit> {
        Arc::new(SharedLimit { limit: limit.max(1), running: Mutex::new(HashMap::new()), peak: Default::default() })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Trials running now over every job.
    pub fn running(&self) -> usize {
        self.lock().values().sum()
    }

    /// Lets `job` start trials: `dispatch` is given how many it may run in all (its own running
    /// trials included) and returns how many it runs after, which is published before the lock
    /// is released.
    pub fn admit<T>(&self, job: &JobId, dispatch: impl FnOnce(usize) -> (T, usize)) -> T {
        let mut running = self.lock();
        let others: usize = running.iter().filter(|(id, _)| *id != job).map(|(_, n)| n).sum();
        let (out, now) = dispatch(self.limit.saturating_sub(others));
        running.insert(*job, now);
        self.peak.fetch_max(others + now, std::sync::atomic::Ordering::Relaxed);
        out
    }

    /// The most trials that ran at once over every job so far.
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many trials `job` runs now (they only ever end outside `admit`).
    pub fn publish(&self, job: &JobId, n_running: usize) {
        self.lock().insert(*job, n_running);
    }

    /// The job has ended: its places are free.
    pub fn leave(&self, job: &JobId) {
        self.lock().remove(job);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, usize>> {
        // A panic elsewhere while holding it left plain counts behind: still usable.
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_gets_what_the_others_leave_and_frees_it_when_it_leaves() {
        let limit = SharedLimit::new(5);
        let (a, b) = (JobId::new(), JobId::new());
        assert_eq!(limit.admit(&a, |room| (room, 3)), 5);
        assert_eq!(limit.admit(&b, |room| (room, room)), 2);
        assert_eq!(limit.running(), 5);
        // A job's own trials are not counted against it.
        assert_eq!(limit.admit(&a, |room| (room, 3)), 3);
        limit.publish(&a, 1);
        assert_eq!(limit.admit(&b, |room| (room, 2)), 4);
        limit.leave(&b);
        assert_eq!(limit.admit(&a, |room| (room, 1)), 5);
        assert_eq!(limit.running(), 1);
        assert_eq!(limit.peak(), 5);
    }
}
