//! A replaying trial's model: the replies the recorded trial got (its `episode-N/response.txt`,
//! in episode order), read back one per call instead of asking any model. Its keystrokes and
//! waits are then those of the recorded run, typed through the same terminal.

use std::path::{Path, PathBuf};

use terminus_core::layout::{TrialDir, episode_dirs, names};
use terminus_core::llm::{LlmError, LlmResponse};

use crate::llm::LlmCall;

/// Where the replies are read from, and which comes next.
pub(super) struct Replay {
    trial: TrialDir,
    agent_dir: PathBuf,
    next: usize,
}

impl Replay {
    pub(super) fn new(recorded: &Path) -> Replay {
        let trial = TrialDir::new(recorded);
        Replay { agent_dir: trial.agent_dir(), trial, next: 0 }
    }

    /// A multi-step trial's step starts: its replies are the recorded step's, from its first.
    pub(super) fn enter_step(&mut self, name: &str) {
        self.agent_dir = self.trial.step(name).agent_dir();
        self.next = 0;
    }

    /// The next reply's source: the agent directory and the reply's index.
    pub(super) fn take(&mut self) -> (PathBuf, usize) {
        self.next += 1;
        (self.agent_dir.clone(), self.next - 1)
    }
}

/// The `n`-th recorded reply of `agent_dir` (0-based, over the episodes that have one), as a
/// model call that took no time; past the last, a refused request (the recorded run asked no
/// further).
pub(super) async fn recorded_reply(agent_dir: PathBuf, n: usize) -> LlmCall {
    let read = tokio::task::spawn_blocking(move || nth_response(&agent_dir, n)).await;
    let result = match read {
        Ok(Some(content)) => {
            Ok(LlmResponse { content, finish_reason: Some("stop".to_string()), ..LlmResponse::default() })
        }
        Ok(None) => Err(LlmError::BadRequest(format!("the recorded trial has no reply {n} to replay"))),
        Err(e) => Err(LlmError::BadRequest(format!("reading the recorded reply failed: {e}"))),
    };
    LlmCall { result, retries: 0, elapsed_msec: 0.0 }
}

fn nth_response(agent_dir: &Path, n: usize) -> Option<String> {
    let replies = episode_dirs(agent_dir).into_iter().map(|(_, dir)| dir.join(names::RESPONSE_TXT));
    std::fs::read_to_string(replies.filter(|reply| reply.is_file()).nth(n)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn replies_are_read_in_episode_order_then_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (episode, text) in [(10, "third"), (2, "second"), (0, "first")] {
            let episode_dir = dir.path().join(format!("episode-{episode}"));
            std::fs::create_dir_all(&episode_dir).unwrap();
            std::fs::write(episode_dir.join(names::RESPONSE_TXT), text).unwrap();
        }
        // An episode without a reply (a call that failed) is not one.
        std::fs::create_dir_all(dir.path().join("episode-5")).unwrap();
        let mut got = Vec::new();
        for n in 0..3 {
            got.push(recorded_reply(dir.path().to_path_buf(), n).await.result.map(|r| r.content).ok());
        }
        assert_eq!(got, [Some("first".to_string()), Some("second".to_string()), Some("third".to_string())]);
        let past = recorded_reply(dir.path().to_path_buf(), 3).await.result;
        assert!(matches!(past, Err(LlmError::BadRequest(_))), "{past:?}");
    }
}
