//! What every chaos case shares: its outcome ([`Case`]), its place on disk ([`Ctx`]), and waiting
//! for a child process within a deadline.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;
use terminus_bench::{Tally, job_result, trial_results};
use terminus_sandbox::Engine;

/// How long one job of a case may take before the case fails (the suite must stay bounded).
pub(crate) const JOB_DEADLINE: Duration = Duration::from_secs(600);

pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) tally: Tally,
    /// Further conditions of the case (exit codes, token totals, …) that held or not.
    pub(crate) checks: Vec<(String, bool)>,
    pub(crate) figures: Value,
    pub(crate) seconds: f64,
}

impl Case {
    pub(crate) fn ok(&self) -> bool {
        self.tally.ok() && self.checks.iter().all(|(_, ok)| *ok)
    }
}

/// Where a case keeps its files: `target/chaos/<run>/<case>/`.
pub(crate) struct Ctx {
    pub(crate) engine: Engine,
    pub(crate) root: PathBuf,
    pub(crate) hello: PathBuf,
}

impl Ctx {
    pub(crate) fn case_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }
}

/// Waits for a child at most `deadline`; a child that overstays is killed and counts as failed.
pub(crate) async fn wait_bounded(mut child: Child, deadline: Duration) -> Option<i32> {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.code(),
            Ok(None) if started.elapsed() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

pub(crate) fn job_stat(job_dir: &Path, key: &str) -> Value {
    job_result(job_dir).map(|v| v["stats"][key].clone()).unwrap_or(Value::Null)
}

pub(crate) fn errored(job_dir: &Path) -> usize {
    trial_results(job_dir).iter().filter(|r| !r["exception_info"].is_null()).count()
}
