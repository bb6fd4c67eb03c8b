//! What Terminus says to the model. The wording is ours; the structure and the fields follow the
//! reference (terminus2-reference §3): a task prompt with the JSON reply format, feedback for
//! unparsable replies, warnings in front of observations, and a confirmation request when the
//! model first claims completion.

/// The task prompt for the JSON format. `{instruction}` and `{terminal_state}` are filled in.
const JSON_TEMPLATE: &str = r#"You are an AI agent working in a Linux terminal. You will be given a task and the current state of the terminal; you reply with the keystrokes to send next, see what they produce, and continue until the task is done.

Task:
{instruction}

Reply with exactly one JSON object and nothing else, in this shape:

{
  "analysis": "What the terminal shows right now, what has been achieved so far and what is still missing.",
  "plan": "What you will do next, and why these commands get you closer to the goal.",
  "commands": [
    {"keystrokes": "ls -la\n", "duration": 0.1},
    {"keystrokes": "cd src\n", "duration": 0.1}
  ],
  "task_complete": false
}

The fields:
- "analysis" (string, required): your reading of the current state.
- "plan" (string, required): your next steps.
- "commands" (list, required, may be empty): sent to the terminal in order. Each has
  - "keystrokes" (string, required): typed exactly as written. End a shell command with \n to run it. A tmux key name on its own, such as C-c or C-d, sends that key.
  - "duration" (number, optional, default 1.0): seconds to wait after sending before anything else happens. About 0.1 for commands that return at once (cd, ls, cat, echo), 1 for ordinary programs, more for compiles, downloads and installs; any wait above 60 seconds is cut to 60. Prefer a short wait and a fresh look over a long wait.
- "task_complete" (boolean, optional, default false): true when nothing is left to do. You will be asked to confirm before your work is graded.

Good to know:
- Everything runs in one interactive bash session inside tmux: the working directory and exported variables carry over between commands.
- Answer or avoid programs that wait for input; prefer non-interactive tools (sed, here-documents, flags such as -y) over editors and pagers.
- To wait without typing anything, send "" as the keystrokes with the wait as its duration.
- Anything outside the JSON object is ignored and reported back to you as a warning.

The terminal now shows:
{terminal_state}
"#;

/// Fills in the task prompt.
pub fn initial_prompt(instruction: &str, terminal_state: &str) -> String {
    // Two-step replacement: an instruction that itself contains "{terminal_state}" stays as written.
    let (head, tail) = JSON_TEMPLATE.split_once("{terminal_state}").expect("the template has a terminal slot");
    format!("{}{terminal_state}{tail}", head.replace("{instruction}", instruction))
}

/// The prompt after an unparsable reply. `feedback` is `ERROR: …` plus optional `WARNINGS: …`.
pub fn parse_error_prompt(feedback: &str) -> String {
    format!(
        "Previous response had parsing errors:\n{feedback}\n\nPlease reply again with one valid JSON object in the format described at the start."
    )
}

/// The observation after a reply that parsed with warnings.
pub fn warnings_observation(feedback: &str, terminal_output: &str) -> String {
    format!("Previous response had warnings:\n{feedback}\n\n{terminal_output}")
}

/// The question asked when the model claims completion for the first time in a row.
pub fn confirmation_prompt(terminal_output: &str) -> String {
    format!(
        "Current terminal state:\n{terminal_output}\n\nYou have marked the task as complete. Once you confirm, your work is graded and cannot be changed any more. If everything is done, reply again with \"task_complete\": true in your JSON object; if not, keep working and leave task_complete false."
    )
}

/// The feedback line built from a parse result (`ERROR:` / `WARNINGS:`), empty when clean.
pub fn feedback(error: &str, warning: &str) -> String {
    match (error.is_empty(), warning.is_empty()) {
        (false, false) => format!("ERROR: {error}\nWARNINGS: {warning}"),
        (false, true) => format!("ERROR: {error}"),
        (true, false) => format!("WARNINGS: {warning}"),
        (true, true) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_holds_instruction_and_screen() {
        let prompt = initial_prompt("Create {hello}.txt", "root@x:/app#\n");
        assert!(prompt.contains("Task:\nCreate {hello}.txt\n"));
        assert!(prompt.ends_with("The terminal now shows:\nroot@x:/app#\n\n"));
        assert!(prompt.contains("\"task_complete\""));
    }

    #[test]
    fn feedback_combines_errors_and_warnings() {
        assert_eq!(feedback("E", "- w"), "ERROR: E\nWARNINGS: - w");
        assert_eq!(feedback("", "- w"), "WARNINGS: - w");
        assert_eq!(feedback("", ""), "");
    }
}
