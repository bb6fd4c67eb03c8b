//! Where everything a job writes lives, in one place: the job directory, each trial's directory
//! (Harbor's layout), and the paths inside a trial's container.
//!
//! ```text
//! <jobs_dir>/<job_name>/            JobDir
//!   config.json  result.json  job.log  .terminus.lock
//!   .orphaned/                      what a resume could not read, moved aside
//!   <trial_name>/                   TrialDir
//!     config.json  result.json  exception.txt
//!     agent/       trajectory.json, trajectory.cont-N.json, trajectory.summarization-N-*.json,
//!                  episode-N/{prompt.txt,response.txt,debug.json}, recording.cast, terminus_2.pane,
//!                  oracle.txt, exit-code.txt
//!     verifier/    reward.txt | reward.json, test-stdout.txt
//!     artifacts/   <destination>…, manifest.json
//!     attempts/N/  an earlier failed attempt, moved here whole before a retry
//! ```
//!
//! Every name the project writes or reads is spelled here once; actors, resume, the CLI and the
//! benchmarks ask these types instead of joining strings.

use std::path::{Path, PathBuf};

use crate::ids::TrialName;

/// File and directory names, for code that matches names rather than building paths.
pub mod names {
    pub const CONFIG_JSON: &str = "config.json";
    pub const RESULT_JSON: &str = "result.json";
    /// One line per model call's usage, for the job's budget (`budget:` set).
    pub const SPEND_JOURNAL: &str = "spend.jsonl";
    pub const JOB_LOG: &str = "job.log";
    /// Held (flock) by the one `terminus` running the job.
    pub const LOCK_FILE: &str = ".terminus.lock";
    /// Where a resume moves what it cannot read, instead of deleting it.
    pub const ORPHANED_DIR: &str = ".orphaned";
    pub const EXCEPTION_TXT: &str = "exception.txt";
    pub const AGENT_DIR: &str = "agent";
    pub const VERIFIER_DIR: &str = "verifier";
    pub const ARTIFACTS_DIR: &str = "artifacts";
    pub const ATTEMPTS_DIR: &str = "attempts";
    pub const STEPS_DIR: &str = "steps";
    pub const ARTIFACTS_MANIFEST: &str = "manifest.json";
    pub const PROMPT_TXT: &str = "prompt.txt";
    pub const RESPONSE_TXT: &str = "response.txt";
    pub const DEBUG_JSON: &str = "debug.json";
    pub const TRAJECTORY_JSON: &str = "trajectory.json";
    pub const RECORDING_CAST: &str = "recording.cast";
    /// The recording while the orchestrator writes it (renamed to `recording.cast` at teardown).
    pub const RECORDING_PART: &str = ".recording.cast.part";
    pub const PANE_LOG: &str = "terminus_2.pane";
    pub const ORACLE_OUTPUT: &str = "oracle.txt";
    pub const EXIT_CODE_TXT: &str = "exit-code.txt";
    pub const REWARD_TXT: &str = "reward.txt";
    pub const REWARD_JSON: &str = "reward.json";
    pub const TEST_STDOUT: &str = "test-stdout.txt";
}

/// The file of trajectory segment `index`: `trajectory.json` for the first, then
/// `trajectory.cont-N.json` after the Nth linear-history split.
pub fn trajectory_segment(index: u32) -> String {
    if index == 0 { names::TRAJECTORY_JSON.to_string() } else { format!("trajectory.cont-{index}.json") }
}

/// The file of one summarization subagent (`suffix`: summary, questions, answers).
pub fn subagent_trajectory(index: u32, suffix: &str) -> String {
    format!("trajectory.summarization-{index}-{suffix}.json")
}

/// A job's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobDir(PathBuf);

impl JobDir {
    pub fn new(path: impl Into<PathBuf>) -> JobDir {
        JobDir(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The job file as read (`config.json`).
    pub fn config_json(&self) -> PathBuf {
        self.0.join(names::CONFIG_JSON)
    }

    pub fn result_json(&self) -> PathBuf {
        self.0.join(names::RESULT_JSON)
    }

    pub fn job_log(&self) -> PathBuf {
        self.0.join(names::JOB_LOG)
    }

    /// What the job's model calls spent, one line per call (a job with a `budget:`).
    pub fn spend_journal(&self) -> PathBuf {
        self.0.join(names::SPEND_JOURNAL)
    }

    pub fn lock_file(&self) -> PathBuf {
        self.0.join(names::LOCK_FILE)
    }

    pub fn orphaned_dir(&self) -> PathBuf {
        self.0.join(names::ORPHANED_DIR)
    }

    pub fn trial(&self, name: &TrialName) -> TrialDir {
        TrialDir(self.0.join(name.as_str()))
    }
}

/// One trial's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialDir(PathBuf);

impl TrialDir {
    pub fn new(path: impl Into<PathBuf>) -> TrialDir {
        TrialDir(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn config_json(&self) -> PathBuf {
        self.0.join(names::CONFIG_JSON)
    }

    pub fn result_json(&self) -> PathBuf {
        self.0.join(names::RESULT_JSON)
    }

    pub fn exception_txt(&self) -> PathBuf {
        self.0.join(names::EXCEPTION_TXT)
    }

    pub fn agent_dir(&self) -> PathBuf {
        self.0.join(names::AGENT_DIR)
    }

    pub fn verifier_dir(&self) -> PathBuf {
        self.0.join(names::VERIFIER_DIR)
    }

    pub fn artifacts_dir(&self) -> PathBuf {
        self.0.join(names::ARTIFACTS_DIR)
    }

    pub fn attempts_dir(&self) -> PathBuf {
        self.0.join(names::ATTEMPTS_DIR)
    }

    /// `steps/<name>/`: a multi-step trial's outputs of one step (its `agent/`, `verifier/` and
    /// `artifacts/`), Harbor's layout.
    pub fn step(&self, name: &str) -> TrialDir {
        TrialDir(self.0.join(names::STEPS_DIR).join(name))
    }

    /// Where failed attempt `n` (0-based) is kept.
    pub fn attempt(&self, n: u32) -> TrialDir {
        TrialDir(self.attempts_dir().join(n.to_string()))
    }

    /// The per-episode logs of episode `n` (0-based).
    pub fn episode_dir(&self, n: u64) -> PathBuf {
        self.agent_dir().join(format!("episode-{n}"))
    }

    /// An agent file (a trajectory, the recording…) by name.
    pub fn agent_file(&self, name: &str) -> PathBuf {
        self.agent_dir().join(name)
    }
}

/// The `episode-N` directories of an agent directory, by episode number, in order.
pub fn episode_dirs(agent_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(agent_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.strip_prefix("episode-")?.parse().ok()?, entry.path())))
        .collect();
    found.sort_by_key(|(n, _)| *n);
    found
}

/// Paths inside a trial's container (Harbor's `/logs` mounts, the uploaded tests and solution).
pub mod container {
    /// Made at start, writable by every user, downloaded at the end.
    pub const LOGS: &str = "/logs";
    pub const AGENT_LOGS: &str = "/logs/agent";
    pub const VERIFIER_LOGS: &str = "/logs/verifier";
    pub const ARTIFACT_LOGS: &str = "/logs/artifacts";
    /// The log directories, relative to `/`, in creation order.
    pub const LOG_DIRS: [&str; 4] = ["logs", "logs/agent", "logs/verifier", "logs/artifacts"];
    /// Where the pane's raw output is piped.
    pub const PANE_LOG: &str = "/logs/agent/terminus_2.pane";
    /// The oracle's output.
    pub const ORACLE_OUTPUT: &str = "/logs/agent/oracle.txt";
    /// The verifier's output.
    pub const TEST_STDOUT: &str = "/logs/verifier/test-stdout.txt";
    /// The task's `tests/`, uploaded for verification.
    pub const TESTS: &str = "/tests";
    pub const TEST_SCRIPT: &str = "/tests/test.sh";
    /// The task's `solution/`, uploaded for the oracles.
    pub const SOLUTION: &str = "/solution";
    pub const SOLUTION_SCRIPT: &str = "/solution/solve.sh";
    /// The compose service the agent and the verifier run in (the trial's own container).
    pub const MAIN_SERVICE: &str = "main";
    /// The name an allowlisted phase reaches its egress proxy by.
    pub const PROXY_HOST: &str = "terminus-egress";
    /// The egress proxy's port.
    pub const PROXY_PORT: u16 = 3128;

    /// The variables that send a phase's HTTP clients through the egress proxy (both
    /// spellings: curl reads only the lower-case `http_proxy`, many tools only the upper-case
    /// ones).
    pub fn proxy_env() -> Vec<String> {
        let url = format!("http://{PROXY_HOST}:{PROXY_PORT}");
        let no_proxy = "localhost,127.0.0.1,::1";
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
            .iter()
            .map(|name| format!("{name}={url}"))
            .chain(["NO_PROXY", "no_proxy"].iter().map(|name| format!("{name}={no_proxy}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_harbors_layout() {
        let job = JobDir::new("/jobs/j");
        let trial = job.trial(&TrialName::with_suffix("hello", "abcdefg"));
        assert_eq!(trial.path(), Path::new("/jobs/j/hello__abcdefg"));
        assert_eq!(trial.episode_dir(3), Path::new("/jobs/j/hello__abcdefg/agent/episode-3"));
        assert_eq!(trial.attempt(0).result_json(), Path::new("/jobs/j/hello__abcdefg/attempts/0/result.json"));
        assert_eq!(trajectory_segment(0), "trajectory.json");
        assert_eq!(trajectory_segment(2), "trajectory.cont-2.json");
        assert_eq!(subagent_trajectory(1, "summary"), "trajectory.summarization-1-summary.json");
        assert!(container::PANE_LOG.starts_with(container::AGENT_LOGS));
        assert!(container::LOG_DIRS.iter().all(|d| format!("/{d}").starts_with(container::LOGS)));
    }
}
