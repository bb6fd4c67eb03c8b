//! What a replay is measured by: the prompts a trial's model was shown, episode by episode,
//! recorded and replayed ([`compare`] → [`ReplayReport`]), and, over a regraded job, which
//! rewards changed per task ([`RegradeReport`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::layout::{TrialDir, episode_dirs, names};
use crate::result::TrialResult;

/// A replayed trial against the trial it replays (`replay.json` in the replay's directory).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// The trial replayed.
    pub replay_of: String,
    /// Episodes whose prompts were compared.
    pub n_episodes: u64,
    /// Episodes, from the first, whose prompts are the same.
    pub n_matching: u64,
    /// The first episode whose prompt differs, or where one run has an episode the other lacks.
    pub first_divergence: Option<Divergence>,
}

/// Where a replay first saw something else than the recorded run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// The step of a multi-step task, or None.
    pub step: Option<String>,
    pub episode: u64,
    /// What the model was shown then, recorded and replayed (an empty text: no such episode).
    pub recorded: String,
    pub replayed: String,
}

/// One agent's prompts: `(episode, prompt.txt)` in episode order.
pub type Prompts = Vec<(u64, String)>;

/// The prompts of the agent directory `agent_dir` (`episode-N/prompt.txt`), in episode order.
pub fn prompts(agent_dir: &Path) -> Prompts {
    episode_dirs(agent_dir)
        .into_iter()
        .filter_map(|(n, dir)| Some((n, std::fs::read_to_string(dir.join(names::PROMPT_TXT)).ok()?)))
        .collect()
}

/// The prompts of a trial, per agent run: the trial's own, or each step's in order.
pub fn trial_prompts(dir: &TrialDir, steps: &[String]) -> Vec<(Option<String>, Prompts)> {
    if steps.is_empty() {
        return vec![(None, prompts(&dir.agent_dir()))];
    }
    steps.iter().map(|step| (Some(step.clone()), prompts(&dir.step(step).agent_dir()))).collect()
}

/// Compares the recorded prompts with the replayed ones, run by run and episode by episode, up
/// to the first difference. A container's default hostname (its id: twelve hex digits after
/// `user@` in a shell prompt) differs between any two runs, so each text's own is read as the
/// same host.
pub fn compare(
    replay_of: &str,
    recorded: &[(Option<String>, Prompts)],
    replayed: &[(Option<String>, Prompts)],
) -> ReplayReport {
    let mut report = ReplayReport { replay_of: replay_of.to_string(), ..ReplayReport::default() };
    let empty: (Option<String>, Prompts) = (None, Vec::new());
    for i in 0..recorded.len().max(replayed.len()) {
        let (step, old) = recorded.get(i).unwrap_or(&empty);
        let (_, new) = replayed.get(i).unwrap_or(&empty);
        for j in 0..old.len().max(new.len()) {
            report.n_episodes += 1;
            let old_text = old.get(j).map_or("", |(_, t)| t.as_str());
            let new_text = new.get(j).map_or("", |(_, t)| t.as_str());
            let episode = old.get(j).or(new.get(j)).map_or(j as u64, |(n, _)| *n);
            if report.first_divergence.is_some() {
                continue;
            }
            if same_but_host(old_text, new_text) {
                report.n_matching += 1;
            } else {
                report.first_divergence = Some(Divergence {
                    step: step.clone(),
                    episode,
                    recorded: old_text.to_string(),
                    replayed: new_text.to_string(),
                });
            }
        }
    }
    report
}

/// Whether two texts are the same once each one's container hostname is read as the other's.
fn same_but_host(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (container_host(a), container_host(b)) {
        (Some(ha), Some(hb)) => a.replace(&format!("@{ha}:"), &format!("@{hb}:")) == b,
        _ => false,
    }
}

/// The first Docker default hostname in a shell prompt of `text`: `@` then twelve lowercase hex
/// digits then `:`.
fn container_host(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find('@').map(|i| from + i) {
        let host = bytes.get(at + 1..at + 13)?;
        if host.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)) && bytes.get(at + 13) == Some(&b':') {
            return Some(&text[at + 1..at + 13]);
        }
        from = at + 1;
    }
    None
}

/// A regraded job against its original: per task, how many trials were regraded and how many
/// rewards changed (`regrade.json` in the new job's directory).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RegradeReport {
    /// The original job's directory.
    pub regrade_of: String,
    pub tasks: BTreeMap<String, TaskFlips>,
    /// Trials of the original that were not regraded (they ended with an error or did not
    /// finish): their trial names.
    pub not_regraded: Vec<String>,
}

/// One task's regraded trials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFlips {
    pub n_trials: u64,
    /// Rewards that went up (0 → 1 for a pass/fail task).
    pub n_up: u64,
    /// Rewards that went down (1 → 0).
    pub n_down: u64,
    /// Replays that ended with an error.
    pub n_errors: u64,
    /// Replays whose prompts diverged from the recording: their flips may be the run's, not
    /// the tests'.
    pub n_diverged: u64,
}

impl TaskFlips {
    pub fn n_flipped(&self) -> u64 {
        self.n_up + self.n_down
    }
}

impl RegradeReport {
    /// Adds one regraded trial: its `original` result, its `regraded` one, and whether the
    /// replay `diverged` from the recording.
    pub fn add(&mut self, original: &TrialResult, regraded: &TrialResult, diverged: bool) {
        let task = self.tasks.entry(original.task_name.clone()).or_default();
        task.n_trials += 1;
        task.n_diverged += u64::from(diverged);
        if regraded.exception_info.is_some() || regraded.error_kind().is_some() {
            task.n_errors += 1;
            return;
        }
        let (old, new) = (original.reward().unwrap_or(0.0), regraded.reward().unwrap_or(0.0));
        if new > old {
            task.n_up += 1;
        } else if new < old {
            task.n_down += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(texts: &[&str]) -> Vec<(Option<String>, Prompts)> {
        vec![(None, texts.iter().enumerate().map(|(i, t)| (i as u64, t.to_string())).collect())]
    }

    #[test]
    fn prompts_that_differ_only_in_the_container_hostname_match() {
        let recorded = run(&["task\nroot@0123456789ab:/app# ", "ok\nroot@0123456789ab:/app# "]);
        let replayed = run(&["task\nroot@fedcba987654:/app# ", "ok\nroot@fedcba987654:/app# "]);
        let report = compare("t", &recorded, &replayed);
        assert_eq!((report.n_episodes, report.n_matching, report.first_divergence), (2, 2, None));
    }

    #[test]
    fn the_first_divergent_episode_is_reported_with_both_texts() {
        let recorded = run(&["task", "v1\n", "done", "more"]);
        let replayed = run(&["task", "v2\n", "done"]);
        let report = compare("t", &recorded, &replayed);
        assert_eq!((report.n_episodes, report.n_matching), (4, 1));
        let d = report.first_divergence.unwrap();
        assert_eq!((d.episode, d.recorded.as_str(), d.replayed.as_str()), (1, "v1\n", "v2\n"));
        // A missing episode is a divergence too.
        let report = compare("t", &run(&["a"]), &run(&["a", "b"]));
        let d = report.first_divergence.unwrap();
        assert_eq!((d.episode, d.recorded.as_str(), d.replayed.as_str()), (1, "", "b"));
    }

    fn result(task: &str, reward: Option<f64>, error: bool) -> TrialResult {
        use crate::result::{AgentInfo, TaskIdRecord, TrialConfig, VerifierResult};
        let agent = AgentInfo { name: "terminus-2".into(), version: "2.0.0".into(), model_info: None };
        let task_id = TaskIdRecord { path: task.into(), git_url: None, git_commit_id: None };
        let name = crate::ids::TrialName::generate(task);
        let mut r = TrialResult::new(name, task.into(), task_id, TrialConfig::default(), agent);
        r.verifier_result =
            reward.map(|v| VerifierResult { rewards: Some(BTreeMap::from([("reward".to_string(), v)])) });
        r.exception_info = error
            .then(|| crate::error::TrialError::new(crate::error::TrialErrorKind::BadRequest, "x").to_exception_info());
        r
    }

    #[test]
    fn a_regrade_counts_each_tasks_rewards_up_down_errors_and_divergences() {
        let mut report = RegradeReport::default();
        report.add(&result("a", Some(1.0), false), &result("a", Some(0.0), false), false);
        report.add(&result("a", Some(0.0), false), &result("a", Some(1.0), false), true);
        report.add(&result("a", Some(1.0), false), &result("a", Some(1.0), false), false);
        report.add(&result("b", Some(1.0), false), &result("b", None, true), false);
        let a = &report.tasks["a"];
        assert_eq!((a.n_trials, a.n_up, a.n_down, a.n_errors, a.n_diverged, a.n_flipped()), (3, 1, 1, 0, 1, 2));
        let b = &report.tasks["b"];
        assert_eq!((b.n_trials, b.n_flipped(), b.n_errors), (1, 0, 1));
    }

    #[test]
    fn a_hostname_is_only_twelve_hex_digits_between_at_and_colon() {
        assert_eq!(container_host("me@0123456789ab:~$"), Some("0123456789ab"));
        assert_eq!(container_host("a@b.c x@0123456789abc:"), None);
        assert_eq!(container_host("mail user@example.com: root@aaaaaaaaaaaa:/"), Some("aaaaaaaaaaaa"));
        assert!(!same_but_host("x@0123456789ab: 1", "x@fedcba987654: 2"));
    }
}
