//! What Terminus says to the model, built from its [`Texts`] (ours by default, or the user's
//! `texts` directory): a task prompt with the reply format, feedback for unparsable replies,
//! warnings in front of observations, a confirmation request when the model first claims
//! completion, the summarization prompts, and the MCP and skills blocks after the instruction.

pub use terminus_core::texts::{TextName, Texts};

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
        self.parse_as(response, false)
    }

    /// Parses a reply in this format; `reference`: as the reference's parser reads it, where
    /// ours differs (docs/DIFFERENCES.md).
    pub fn parse_as(self, response: &str, reference: bool) -> crate::parser::ParseResult {
        match self {
            Format::Json => crate::parser::parse_json_response_as(response, reference),
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
}

/// Fills in the task prompt.
pub fn initial_prompt(texts: &Texts, format: Format, instruction: &str, terminal_state: &str) -> String {
    let name = match format {
        Format::Json => TextName::PromptJson,
        Format::Xml => TextName::PromptXml,
    };
    texts.render(name, &[instruction, terminal_state])
}

/// The prompt after an unparsable reply. `feedback` is `ERROR: …` plus optional `WARNINGS: …`.
pub fn parse_error_prompt(texts: &Texts, format: Format, feedback: &str) -> String {
    let name = match format {
        Format::Json => TextName::ParseErrorJson,
        Format::Xml => TextName::ParseErrorXml,
    };
    texts.render(name, &[feedback])
}

/// The prompt after a reply that was cut off at the output limit and could not be salvaged.
/// `limit` is e.g. `4096 tokens` or `the maximum output length`.
pub fn output_limit_prompt(texts: &Texts, limit: &str, parser_warnings: &str) -> String {
    let mut text = texts.render(TextName::OutputLimit, &[limit]);
    if !parser_warnings.is_empty() {
        text.push_str(&texts.render(TextName::OutputLimitWarnings, &[parser_warnings]));
    }
    text
}

/// The observation after a reply that parsed with warnings.
pub fn warnings_observation(texts: &Texts, feedback: &str, terminal_output: &str) -> String {
    texts.render(TextName::Warnings, &[feedback, terminal_output])
}

/// The question asked when the model claims completion for the first time in a row.
pub fn confirmation_prompt(texts: &Texts, format: Format, terminal_output: &str) -> String {
    let name = match format {
        Format::Json => TextName::ConfirmationJson,
        Format::Xml => TextName::ConfirmationXml,
    };
    texts.render(name, &[terminal_output])
}

/// The system step recorded where a summarization handed the work over.
pub const SUMMARIZATION_STEP_MESSAGE: &str = "Performed context summarization and handoff to continue task.";

/// Subagent 1: asks for a summary of the work so far.
pub fn summary_prompt(texts: &Texts, original_instruction: &str) -> String {
    texts.render(TextName::Summary, &[original_instruction])
}

/// Subagent 2: a fresh agent reads the summary and the screen and asks what it needs to know.
pub fn questions_prompt(texts: &Texts, original_instruction: &str, summary: &str, screen: &str) -> String {
    texts.render(TextName::Questions, &[original_instruction, summary, screen])
}

/// Subagent 3: the previous agent, with its full history, answers the questions.
pub fn answers_prompt(texts: &Texts, questions: &str) -> String {
    texts.render(TextName::Answers, &[questions])
}

/// The prompt that hands the work over to the continuing agent.
pub fn handoff_prompt(texts: &Texts, answers: &str) -> String {
    texts.render(TextName::Handoff, &[answers])
}

/// The fallback when the full summarization failed: one short call without history.
pub fn short_summary_prompt(texts: &Texts, original_instruction: &str, screen_tail: &str) -> String {
    texts.render(TextName::ShortSummary, &[original_instruction, screen_tail])
}

/// The prompt that restarts the conversation after the short summary.
pub fn short_summary_restart(texts: &Texts, original_instruction: &str, summary: &str) -> String {
    texts.render(TextName::ShortSummaryRestart, &[original_instruction, summary])
}

/// The last resort when even the short summary failed.
pub fn ultimate_fallback_prompt(texts: &Texts, original_instruction: &str, screen_tail: &str) -> String {
    texts.render(TextName::UltimateFallback, &[original_instruction, screen_tail])
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
pub fn mcp_servers_section(texts: &Texts, servers: &[McpServer<'_>]) -> String {
    if servers.is_empty() {
        return String::new();
    }
    let mut text = texts.render(TextName::McpHeader, &[]);
    for server in servers {
        if server.transport == "stdio" {
            let args = server.args.join(" ");
            text.push_str(&texts.render(TextName::McpStdio, &[server.name, server.command.unwrap_or_default(), &args]));
        } else {
            let url = server.url.unwrap_or_default();
            text.push_str(&texts.render(TextName::McpUrl, &[server.name, server.transport, url]));
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
pub fn skills_section(texts: &Texts, files: &[SkillFile]) -> String {
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
    let mut out = String::from("<available_skills>\n");
    for (name, description, location) in entries {
        out.push_str("  <skill>\n");
        out.push_str(&element("name", &name));
        out.push_str(&element("description", &description));
        out.push_str(&element("location", location));
        out.push_str("  </skill>\n");
    }
    out.push_str("</available_skills>");
    texts.render(TextName::Skills, &[&out])
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
        use super::{SkillFile, Texts, skills_section};
        let texts = Texts::ours();
        let file = |path: &str, text: &str| SkillFile { path: path.into(), text: text.into() };
        assert_eq!(skills_section(&texts, &[]), "");
        let text = skills_section(
            &texts,
            &[
                file("/skills/pdf/SKILL.md", "---\nname: pdf\ndescription: Read & fill <PDF> forms\n---\n# PDF\nsteps"),
                file("/skills/plain/SKILL.md", "# no front matter"),
                file("/skills/half/SKILL.md", "---\nname: half\n---\n"),
                file("/skills/bad/SKILL.md", "---\nname: [unclosed\n---\n"),
                file("/skills/num/SKILL.md", "---\nname: 42\ndescription:\n---"),
            ],
        );
        assert_eq!(
            text,
            "\n<available_skills>\n  <skill>\n    <name>pdf</name>\n    <description>Read &amp; fill &lt;PDF&gt; forms</description>\n\
             \x20   <location>/skills/pdf/SKILL.md</location>\n  </skill>\n  <skill>\n    <name>42</name>\n    <description />\n\
             \x20   <location>/skills/num/SKILL.md</location>\n  </skill>\n</available_skills>"
        );
        assert_eq!(skills_section(&texts, &[file("/s/x/SKILL.md", "no")]), "", "nothing usable: no block");
    }

    #[test]
    fn mcp_servers_follow_the_instruction_one_line_each() {
        use super::{McpServer, Texts, mcp_servers_section};
        let texts = Texts::ours();
        assert_eq!(mcp_servers_section(&texts, &[]), "");
        let args = vec!["--root".to_string(), "/app".to_string()];
        let text = mcp_servers_section(
            &texts,
            &[
                McpServer { name: "files", transport: "stdio", url: None, command: Some("mcp-files"), args: &args },
                McpServer {
                    name: "search",
                    transport: "sse",
                    url: Some("http://mcp:8000/sse"),
                    command: None,
                    args: &[],
                },
            ],
        );
        assert!(text.starts_with("\n\nMCP servers you can use for this task:\n"), "{text:?}");
        assert!(text.contains("- files (stdio): mcp-files --root /app\n"), "{text}");
        assert!(text.ends_with("- search (sse): http://mcp:8000/sse\n"), "{text}");
    }

    use super::*;

    #[test]
    fn the_prompt_holds_instruction_and_screen() {
        let texts = Texts::ours();
        let prompt = initial_prompt(&texts, Format::Json, "Create {hello}.txt", "root@x:/app#\n");
        assert!(prompt.contains("Task:\nCreate {hello}.txt\n"));
        assert!(prompt.ends_with("The terminal now shows:\nroot@x:/app#\n\n"));
        assert!(prompt.contains("\"task_complete\""));
        let xml = initial_prompt(&texts, Format::Xml, "Do it", "$ \n");
        assert!(xml.contains("<response>") && xml.contains("Task:\nDo it\n"));
    }

    #[test]
    fn the_output_limit_prompt_names_the_limit_three_times() {
        let text = output_limit_prompt(&Texts::ours(), "4096 tokens", "- w");
        assert_eq!(text.matches("4096 tokens").count(), 3);
        assert!(text.ends_with("The cut-off reply also had these problems:\n- w"));
    }

    #[test]
    fn feedback_combines_errors_and_warnings() {
        assert_eq!(feedback("E", "- w"), "ERROR: E\nWARNINGS: - w");
        assert_eq!(feedback("", "- w"), "WARNINGS: - w");
        assert_eq!(feedback("", ""), "");
    }
}
