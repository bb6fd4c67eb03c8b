//! The `oracle` model: an offline stand-in for an LLM that solves a task with its reference
//! solution, so the whole Terminus loop (prompting, parsing, tmux, completion confirmation,
//! verification) runs without network access.
//!
//! It reads the conversation like a model would:
//! 1. first turn: type `bash /solution/solve.sh` followed by an echo of its exit status;
//! 2. while that status line has not appeared in any observation: wait and look again;
//! 3. once it has: claim completion, and claim it again when asked to confirm.
//!
//! The trial uploads the task's `solution/` directory to `/solution` when this model is used.

use regex::Regex;
use serde_json::json;

use terminus_core::llm::{LlmRequest, LlmResponse};

/// Where the trial puts the task's solution for the oracle.
pub const SOLUTION_SCRIPT: &str = "/solution/solve.sh";
/// How long the oracle waits per turn while the solution runs.
const WAIT_SECONDS: f64 = 1.0;

#[derive(Clone, Debug)]
pub struct OracleModel {
    status_line: Regex,
}

impl Default for OracleModel {
    fn default() -> Self {
        OracleModel::new()
    }
}

impl OracleModel {
    pub fn new() -> OracleModel {
        // Matches the printed line only: the typed command shows `$?`, not digits.
        OracleModel { status_line: Regex::new(r"terminus-oracle: solve\.sh exited with (\d+)").expect("valid regex") }
    }

    /// Answers the conversation.
    pub fn complete(&self, request: &LlmRequest) -> LlmResponse {
        let n_turns = request.messages.iter().filter(|m| m.role == "assistant").count();
        let finished = request
            .messages
            .iter()
            .filter(|m| m.role != "assistant")
            .find_map(|m| self.status_line.captures(&m.content).map(|c| c[1].to_string()));
        let reply = if n_turns == 0 {
            json!({
                "analysis": "The oracle model runs the task's reference solution.",
                "plan": format!("Run {SOLUTION_SCRIPT} and print its exit status when it ends."),
                "commands": [{
                    "keystrokes": format!("bash {SOLUTION_SCRIPT} < /dev/null; echo \"terminus-oracle: solve.sh exited with $?\"\n"),
                    "duration": WAIT_SECONDS
                }],
                "task_complete": false
            })
        } else if let Some(code) = finished {
            json!({
                "analysis": format!("The reference solution finished with exit status {code}."),
                "plan": "Nothing is left to do; the task is complete.",
                "commands": [],
                "task_complete": true
            })
        } else {
            json!({
                "analysis": "The reference solution is still running.",
                "plan": "Wait for it to finish.",
                "commands": [{"keystrokes": "", "duration": WAIT_SECONDS}],
                "task_complete": false
            })
        };
        LlmResponse {
            content: serde_json::to_string_pretty(&reply).unwrap_or_default(),
            model_name: Some("oracle".to_string()),
            finish_reason: Some("stop".to_string()),
            ..LlmResponse::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::llm::ChatMessage;

    fn ask(messages: Vec<ChatMessage>) -> serde_json::Value {
        let response = OracleModel::new().complete(&LlmRequest { messages, ..Default::default() });
        serde_json::from_str(&response.content).unwrap()
    }

    #[test]
    fn runs_then_waits_then_completes() {
        let first = ask(vec![ChatMessage::user("task")]);
        assert!(first["commands"][0]["keystrokes"].as_str().unwrap().contains("/solution/solve.sh"));
        assert_eq!(first["task_complete"], false);
        let typed =
            "New Terminal Output:\n# bash /solution/solve.sh; echo \"terminus-oracle: solve.sh exited with $?\"\n";
        let waiting = ask(vec![ChatMessage::user("task"), ChatMessage::assistant("{}"), ChatMessage::user(typed)]);
        assert_eq!(waiting["task_complete"], false);
        assert_eq!(waiting["commands"][0]["keystrokes"], "");
        let done = format!("{typed}terminus-oracle: solve.sh exited with 0\n");
        let finished =
            ask(vec![ChatMessage::user("task"), ChatMessage::assistant("{}"), ChatMessage::user(done.clone())]);
        assert_eq!(finished["task_complete"], true);
        let confirm = ask(vec![
            ChatMessage::user("task"),
            ChatMessage::assistant("{}"),
            ChatMessage::user(done),
            ChatMessage::assistant("{}"),
            ChatMessage::user("are you sure?"),
        ]);
        assert_eq!(confirm["task_complete"], true);
    }
}
