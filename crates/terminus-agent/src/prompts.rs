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

/// The task prompt for the XML format.
const XML_TEMPLATE: &str = r#"You are an AI agent working in a Linux terminal. You will be given a task and the current state of the terminal; you reply with the keystrokes to send next, see what they produce, and continue until the task is done.

Task:
{instruction}

Reply with exactly one <response> block and nothing else, in this shape:

<response>
<analysis>What the terminal shows right now, what has been achieved so far and what is still missing.</analysis>
<plan>What you will do next, and why these commands get you closer to the goal.</plan>
<commands>
<keystrokes duration="0.1">ls -la
</keystrokes>
<keystrokes duration="0.1">cd src
</keystrokes>
</commands>
<task_complete>false</task_complete>
</response>

The sections:
- <analysis> (required): your reading of the current state.
- <plan> (required): your next steps.
- <commands> (required, may be empty): <keystrokes> elements sent to the terminal in order.
  - The text of <keystrokes> is typed exactly as written, including newlines: end a shell command with a newline to run it. XML entities are NOT decoded: write < > & as they are, never &lt; &gt; &amp;. A tmux key name on its own, such as C-c or C-d, sends that key.
  - duration="seconds" (optional, default 1.0): how long to wait after sending. About 0.1 for commands that return at once (cd, ls, cat, echo), 1 for ordinary programs, more for compiles, downloads and installs; any wait above 60 seconds is cut to 60. Prefer a short wait and a fresh look over a long wait.
- <task_complete> (optional, default false): true when nothing is left to do. You will be asked to confirm before your work is graded.

Good to know:
- Everything runs in one interactive bash session inside tmux: the working directory and exported variables carry over between commands.
- Answer or avoid programs that wait for input; prefer non-interactive tools (sed, here-documents, flags such as -y) over editors and pagers.
- To wait without typing anything, send an empty <keystrokes duration="5"></keystrokes>.
- Anything outside the <response> block is ignored and reported back to you as a warning.

The terminal now shows:
{terminal_state}
"#;

/// The reply format the model is asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Json,
    Xml,
}

impl Format {
    pub fn from_name(name: &str) -> Format {
        if name == "xml" { Format::Xml } else { Format::Json }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Xml => "xml",
        }
    }

    /// Parses a reply in this format.
    pub fn parse(self, response: &str) -> crate::parser::ParseResult {
        match self {
            Format::Json => crate::parser::parse_json_response(response),
            Format::Xml => crate::xml_parser::parse_xml_response(response),
        }
    }

    /// The part of a truncated reply that can still be carried out, if any.
    pub fn salvage(self, truncated: &str) -> Option<String> {
        match self {
            Format::Json => crate::parser::salvage_truncated_json(truncated),
            Format::Xml => match crate::xml_parser::salvage_truncated_xml(truncated) {
                crate::xml_parser::XmlSalvage::Usable(text) => Some(text),
                _ => None,
            },
        }
    }

    fn what(self) -> &'static str {
        match self {
            Format::Json => "one valid JSON object",
            Format::Xml => "one valid <response> block",
        }
    }

    fn completion_marker(self) -> &'static str {
        match self {
            Format::Json => "\"task_complete\": true in your JSON object",
            Format::Xml => "<task_complete>true</task_complete> in your response",
        }
    }
}

/// Fills in the task prompt.
pub fn initial_prompt(format: Format, instruction: &str, terminal_state: &str) -> String {
    let template = match format {
        Format::Json => JSON_TEMPLATE,
        Format::Xml => XML_TEMPLATE,
    };
    // Two-step replacement: an instruction that itself contains "{terminal_state}" stays as written.
    let (head, tail) = template.split_once("{terminal_state}").expect("the template has a terminal slot");
    format!("{}{terminal_state}{tail}", head.replace("{instruction}", instruction))
}

/// The prompt after an unparsable reply. `feedback` is `ERROR: …` plus optional `WARNINGS: …`.
pub fn parse_error_prompt(format: Format, feedback: &str) -> String {
    format!(
        "Previous response had parsing errors:\n{feedback}\n\nPlease reply again with {} in the format described at the start.",
        format.what()
    )
}

/// The prompt after a reply that was cut off at the output limit and could not be salvaged.
/// `limit` is e.g. `4096 tokens` or `the maximum output length`.
pub fn output_limit_prompt(limit: &str, parser_warnings: &str) -> String {
    let mut text = format!(
        "ERROR!! NONE of the actions in your last response were carried out: it was cut off because it exceeded {limit}. Keep every response under {limit}. Send your request again, split into parts that each stay under {limit}."
    );
    if !parser_warnings.is_empty() {
        text.push_str(&format!("\n\nParser warnings from your truncated response:\n{parser_warnings}"));
    }
    text
}

/// The observation after a reply that parsed with warnings.
pub fn warnings_observation(feedback: &str, terminal_output: &str) -> String {
    format!("Previous response had warnings:\n{feedback}\n\n{terminal_output}")
}

/// The question asked when the model claims completion for the first time in a row.
pub fn confirmation_prompt(format: Format, terminal_output: &str) -> String {
    format!(
        "Current terminal state:\n{terminal_output}\n\nYou have marked the task as complete. Once you confirm, your work is graded and cannot be changed any more. If everything is done, reply again with {}; if not, keep working and leave task_complete false.",
        format.completion_marker()
    )
}

/// The system step recorded where a summarization handed the work over.
pub const SUMMARIZATION_STEP_MESSAGE: &str = "Performed context summarization and handoff to continue task.";

/// Subagent 1: asks for a summary of the work so far.
pub fn summary_prompt(original_instruction: &str) -> String {
    format!(
        "You are about to hand your work over to another AI agent, who will continue from exactly where you are now. Write them a summary of this session.\n\nOriginal Task: {original_instruction}\n\nCover these points, in detail:\n1. **Major Actions Completed** - every important command you ran and what it produced.\n2. **Important Information Learned** - file locations, configurations, error messages, facts about the system.\n3. **Challenging Problems Addressed** - what went wrong and how you dealt with it.\n4. **Current Status** - where the task stands and what remains to be done.\n\nThe next agent sees nothing but your summary, so leave nothing out that they need."
    )
}

/// Subagent 2: a fresh agent reads the summary and the screen and asks what it needs to know.
pub fn questions_prompt(original_instruction: &str, summary: &str, screen: &str) -> String {
    format!(
        "You are picking up work from a previous AI agent on the task below; it has left you a summary.\n\n**Original Task:** {original_instruction}\n\n**Summary from Previous Agent:**\n{summary}\n\n**Current Terminal Screen:**\n{screen}\n\nBefore you continue, you may ask the previous agent questions about anything the summary leaves unclear. Ask at least five questions, asking several questions about the details that matter most for finishing the task. List the questions only; do not start the task."
    )
}

/// Subagent 3: the previous agent, with its full history, answers the questions.
pub fn answers_prompt(questions: &str) -> String {
    format!(
        "The next agent has a few questions about your work. Answer each of them as precisely as you can:\n\n{questions}"
    )
}

/// The prompt that hands the work over to the continuing agent.
pub fn handoff_prompt(answers: &str) -> String {
    format!(
        "Here are the answers the other agent provided.\n\n{answers}\n\nContinue the task from where the previous agent stopped. You cannot ask any more questions. Follow the reply format described at the start."
    )
}

/// The fallback when the full summarization failed: one short call without history.
pub fn short_summary_prompt(original_instruction: &str, screen_tail: &str) -> String {
    format!(
        "Briefly continue this task: {original_instruction}\n\nCurrent state: {screen_tail}\n\nNext steps (2-3 sentences):"
    )
}

/// The prompt that restarts the conversation after the short summary.
pub fn short_summary_restart(original_instruction: &str, summary: &str) -> String {
    format!("{original_instruction}\n\nSummary: {summary}")
}

/// The last resort when even the short summary failed.
pub fn ultimate_fallback_prompt(original_instruction: &str, screen_tail: &str) -> String {
    format!("{original_instruction}\n\nCurrent state: {screen_tail}")
}

/// The reply used when the call after a summarization failed too.
pub const TECHNICAL_DIFFICULTIES: &str = "Technical difficulties. Please continue with the task.";

/// The feedback line built from a parse result (`ERROR:` / `WARNINGS:`), empty when clean.
pub fn feedback(error: &str, warning: &str) -> String {
    match (error.is_empty(), warning.is_empty()) {
        (false, false) => format!("ERROR: {error}\nWARNINGS: {warning}"),
        (false, true) => format!("ERROR: {error}"),
        (true, false) => format!("WARNINGS: {warning}"),
        (true, true) => String::new(),
    }
}

/// An MCP server the task offers, as the instruction lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServer<'a> {
    pub name: &'a str,
    pub transport: &'a str,
    /// The URL (`sse`, `streamable-http`).
    pub url: Option<&'a str>,
    /// The command and its arguments (`stdio`).
    pub command: Option<&'a str>,
    pub args: &'a [String],
}

/// What follows the instruction when the task offers MCP servers (the reference's layout: a
/// heading, then one line per server with its transport and how to reach it); empty otherwise.
pub fn mcp_servers_section(servers: &[McpServer<'_>]) -> String {
    if servers.is_empty() {
        return String::new();
    }
    let mut text = String::from("\n\nMCP Servers:\nThese MCP servers are available to you for this task.\n");
    for server in servers {
        if server.transport == "stdio" {
            let mut command = server.command.unwrap_or_default().to_string();
            for arg in server.args {
                command.push(' ');
                command.push_str(arg);
            }
            text.push_str(&format!("- {}: stdio transport, command: {command}\n", server.name));
        } else {
            text.push_str(&format!(
                "- {}: {} transport, url: {}\n",
                server.name,
                server.transport,
                server.url.unwrap_or_default()
            ));
        }
    }
    text
}

/// A skill's `SKILL.md` as found in the container: its path and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillFile {
    pub path: String,
    pub text: String,
}

/// What follows the instruction (after any MCP servers) when the task's `skills_dir` holds
/// Agent Skills: an `<available_skills>` block naming each skill, what it is for and where its
/// `SKILL.md` is, so the model can read it when it needs it (the reference's format: the
/// Agent Skills layout, two-space indents). Files without a front matter giving `name` and
/// `description` are left out; empty when none is left.
pub fn skills_section(files: &[SkillFile]) -> String {
    let entries: Vec<(String, String, &str)> = files
        .iter()
        .filter_map(|file| {
            let (name, description) = skill_front_matter(&file.text)?;
            Some((name, description, file.path.as_str()))
        })
        .collect();
    if entries.is_empty() {
        return String::new();
    }
    let element = |tag: &str, text: &str| {
        if text.is_empty() { format!("    <{tag} />\n") } else { format!("    <{tag}>{}</{tag}>\n", xml_text(text)) }
    };
    let mut out = String::from("\n<available_skills>\n");
    for (name, description, location) in entries {
        out.push_str("  <skill>\n");
        out.push_str(&element("name", &name));
        out.push_str(&element("description", &description));
        out.push_str(&element("location", location));
        out.push_str("  </skill>\n");
    }
    out.push_str("</available_skills>");
    out
}

/// `name` and `description` from a `---` front matter at the very start of the file (YAML;
/// the block ends at the first line that begins with `---`). A value that is no string is
/// written as YAML writes it; a missing one (null) as empty.
fn skill_front_matter(text: &str) -> Option<(String, String)> {
    let body = text.strip_prefix("---\n")?;
    let end = body.find("\n---")?;
    let yaml: serde_yaml::Value = serde_yaml::from_str(&body[..end]).ok()?;
    let map = yaml.as_mapping()?;
    let field = |key: &str| -> Option<String> {
        let value = map.get(key)?;
        Some(match value {
            serde_yaml::Value::Null => String::new(),
            serde_yaml::Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other).ok()?.trim_end().to_string(),
        })
    };
    Some((field("name")?, field("description")?))
}

/// Text escaped as XML element content.
fn xml_text(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn skills_are_listed_from_their_front_matter() {
        use super::{SkillFile, skills_section};
        let file = |path: &str, text: &str| SkillFile { path: path.into(), text: text.into() };
        assert_eq!(skills_section(&[]), "");
        let text = skills_section(&[
            file("/skills/pdf/SKILL.md", "---\nname: pdf\ndescription: Read & fill <PDF> forms\n---\n# PDF\nsteps"),
            file("/skills/plain/SKILL.md", "# no front matter"),
            file("/skills/half/SKILL.md", "---\nname: half\n---\n"),
            file("/skills/bad/SKILL.md", "---\nname: [unclosed\n---\n"),
            file("/skills/num/SKILL.md", "---\nname: 42\ndescription:\n---"),
        ]);
        assert_eq!(
            text,
            "\n<available_skills>\n  <skill>\n    <name>pdf</name>\n    <description>Read &amp; fill &lt;PDF&gt; forms</description>\n\
             \x20   <location>/skills/pdf/SKILL.md</location>\n  </skill>\n  <skill>\n    <name>42</name>\n    <description />\n\
             \x20   <location>/skills/num/SKILL.md</location>\n  </skill>\n</available_skills>"
        );
        assert_eq!(skills_section(&[file("/s/x/SKILL.md", "no")]), "", "nothing usable: no block");
    }

    #[test]
    fn mcp_servers_follow_the_instruction_one_line_each() {
        use super::{McpServer, mcp_servers_section};
        assert_eq!(mcp_servers_section(&[]), "");
        let args = vec!["--root".to_string(), "/app".to_string()];
        let text = mcp_servers_section(&[
            McpServer { name: "files", transport: "stdio", url: None, command: Some("mcp-files"), args: &args },
            McpServer { name: "search", transport: "sse", url: Some("http://mcp:8000/sse"), command: None, args: &[] },
        ]);
        assert!(text.starts_with("\n\nMCP Servers:\n"), "{text:?}");
        assert!(text.contains("- files: stdio transport, command: mcp-files --root /app\n"), "{text}");
        assert!(text.ends_with("- search: sse transport, url: http://mcp:8000/sse\n"), "{text}");
    }

    use super::*;

    #[test]
    fn the_prompt_holds_instruction_and_screen() {
        let prompt = initial_prompt(Format::Json, "Create {hello}.txt", "root@x:/app#\n");
        assert!(prompt.contains("Task:\nCreate {hello}.txt\n"));
        assert!(prompt.ends_with("The terminal now shows:\nroot@x:/app#\n\n"));
        assert!(prompt.contains("\"task_complete\""));
        let xml = initial_prompt(Format::Xml, "Do it", "$ \n");
        assert!(xml.contains("<response>") && xml.contains("Task:\nDo it\n"));
    }

    #[test]
    fn the_output_limit_prompt_names_the_limit_three_times() {
        let text = output_limit_prompt("4096 tokens", "- w");
        assert_eq!(text.matches("4096 tokens").count(), 3);
        assert!(text.ends_with("Parser warnings from your truncated response:\n- w"));
    }

    #[test]
    fn feedback_combines_errors_and_warnings() {
        assert_eq!(feedback("E", "- w"), "ERROR: E\nWARNINGS: - w");
        assert_eq!(feedback("", "- w"), "WARNINGS: - w");
        assert_eq!(feedback("", ""), "");
    }
}
