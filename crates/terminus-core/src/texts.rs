//! Every text the model is shown, each a template in `str.format` style (`template.rs`): our
//! wording by default, or the user's, one file per text in the directory the `texts` agent kwarg
//! names (`terminus texts import-harbor` writes such a directory from an installed Harbor, so a
//! run can show the model exactly what the reference shows it). A file the directory lacks falls
//! back to ours; a file with an unknown placeholder, or a file name that is none of these, is
//! refused when the job loads, naming the file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::template::{PromptTemplate, TemplateError};

/// One text, by its file name in a texts directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TextName {
    /// The first prompt, JSON replies.
    PromptJson,
    /// The first prompt, XML replies.
    PromptXml,
    /// After a reply that could not be parsed (JSON).
    ParseErrorJson,
    /// The same, XML.
    ParseErrorXml,
    /// An observation after a reply that parsed with warnings.
    Warnings,
    /// The question asked when the model first says it is done (JSON).
    ConfirmationJson,
    /// The same, XML.
    ConfirmationXml,
    /// After a reply cut off at the output limit that could not be salvaged.
    OutputLimit,
    /// Appended to it when the cut reply had parser warnings.
    OutputLimitWarnings,
    /// The timeout observation. Read and checked, never shown: as in the reference, a command
    /// cannot time out (keys are sent without waiting for the command).
    Timeout,
    /// Summarization, step 1: the summary of the work so far.
    Summary,
    /// Step 2: the fresh agent's questions about the summary.
    Questions,
    /// Step 3: the previous agent answers them.
    Answers,
    /// The prompt that hands the work over after a summarization.
    Handoff,
    /// The fallback summarization: one short call without history.
    ShortSummary,
    /// The prompt that restarts the chat after the short summary.
    ShortSummaryRestart,
    /// The last resort when even the short summary failed.
    UltimateFallback,
    /// The heading before the task's MCP servers, after the instruction.
    McpHeader,
    /// One MCP server reached through stdio.
    McpStdio,
    /// One MCP server reached at a URL.
    McpUrl,
    /// The task's Agent Skills block after the instruction.
    Skills,
}

impl TextName {
    pub const ALL: [TextName; 21] = [
        TextName::PromptJson,
        TextName::PromptXml,
        TextName::ParseErrorJson,
        TextName::ParseErrorXml,
        TextName::Warnings,
        TextName::ConfirmationJson,
        TextName::ConfirmationXml,
        TextName::OutputLimit,
        TextName::OutputLimitWarnings,
        TextName::Timeout,
        TextName::Summary,
        TextName::Questions,
        TextName::Answers,
        TextName::Handoff,
        TextName::ShortSummary,
        TextName::ShortSummaryRestart,
        TextName::UltimateFallback,
        TextName::McpHeader,
        TextName::McpStdio,
        TextName::McpUrl,
        TextName::Skills,
    ];

    /// Its file in a texts directory.
    pub fn file(self) -> &'static str {
        match self {
            TextName::PromptJson => "prompt-json.txt",
            TextName::PromptXml => "prompt-xml.txt",
            TextName::ParseErrorJson => "parse-error-json.txt",
            TextName::ParseErrorXml => "parse-error-xml.txt",
            TextName::Warnings => "warnings.txt",
            TextName::ConfirmationJson => "confirmation-json.txt",
            TextName::ConfirmationXml => "confirmation-xml.txt",
            TextName::OutputLimit => "output-limit.txt",
            TextName::OutputLimitWarnings => "output-limit-warnings.txt",
            TextName::Timeout => "timeout.txt",
            TextName::Summary => "summary.txt",
            TextName::Questions => "questions.txt",
            TextName::Answers => "answers.txt",
            TextName::Handoff => "handoff.txt",
            TextName::ShortSummary => "short-summary.txt",
            TextName::ShortSummaryRestart => "short-summary-restart.txt",
            TextName::UltimateFallback => "ultimate-fallback.txt",
            TextName::McpHeader => "mcp-header.txt",
            TextName::McpStdio => "mcp-stdio.txt",
            TextName::McpUrl => "mcp-url.txt",
            TextName::Skills => "skills.txt",
        }
    }

    /// Its placeholders, in the order [`Texts::render`] takes their values.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            TextName::PromptJson | TextName::PromptXml => &["instruction", "terminal_state"],
            TextName::ParseErrorJson | TextName::ParseErrorXml => &["feedback"],
            TextName::Warnings => &["feedback", "terminal_output"],
            TextName::ConfirmationJson | TextName::ConfirmationXml => &["terminal_output"],
            TextName::OutputLimit => &["limit"],
            TextName::OutputLimitWarnings => &["warnings"],
            TextName::Timeout => &["command", "timeout_sec", "terminal_state"],
            TextName::Summary => &["instruction"],
            TextName::Questions => &["instruction", "summary", "screen"],
            TextName::Answers => &["questions"],
            TextName::Handoff => &["answers"],
            TextName::ShortSummary | TextName::UltimateFallback => &["instruction", "screen"],
            TextName::ShortSummaryRestart => &["instruction", "summary"],
            TextName::McpHeader => &[],
            TextName::McpStdio => &["name", "command", "args"],
            TextName::McpUrl => &["name", "transport", "url"],
            TextName::Skills => &["skills"],
        }
    }

    /// Our wording.
    fn ours(self) -> &'static str {
        match self {
            TextName::PromptJson => PROMPT_JSON,
            TextName::PromptXml => PROMPT_XML,
            TextName::ParseErrorJson => {
                "Your last reply could not be read:\n{feedback}\n\nPlease reply again with one valid JSON object in the format described at the start."
            }
            TextName::ParseErrorXml => {
                "Your last reply could not be read:\n{feedback}\n\nPlease reply again with one valid <response> block in the format described at the start."
            }
            TextName::Warnings => "Your last reply was carried out, but note:\n{feedback}\n\n{terminal_output}",
            TextName::ConfirmationJson => {
                "The terminal now shows:\n{terminal_output}\n\nYou have marked the task as complete. Once you confirm, your work is graded and cannot be changed any more. If everything is done, reply again with \"task_complete\": true in your JSON object; if not, keep working and leave task_complete false."
            }
            TextName::ConfirmationXml => {
                "The terminal now shows:\n{terminal_output}\n\nYou have marked the task as complete. Once you confirm, your work is graded and cannot be changed any more. If everything is done, reply again with <task_complete>true</task_complete> in your response; if not, keep working and leave task_complete false."
            }
            TextName::OutputLimit => {
                "Nothing from your last reply was carried out: it was cut off at {limit}. Keep every reply under {limit}, and send what you meant to send again, split into parts that each stay under {limit}."
            }
            TextName::OutputLimitWarnings => "\n\nThe cut-off reply also had these problems:\n{warnings}",
            TextName::Timeout => {
                "The command below was still running after {timeout_sec} seconds:\n{command}\n\nThe terminal now shows:\n{terminal_state}"
            }
            TextName::Summary => {
                "You are about to hand your work over to another AI agent, who will continue from exactly where you are now. Write them a summary of this session.\n\nThe task: {instruction}\n\nCover, in detail:\n1. What you did: every important command you ran and what it produced.\n2. What you found out: file locations, configurations, error messages, facts about the system.\n3. What went wrong and how you dealt with it.\n4. Where the task stands and what remains to be done.\n\nThe next agent sees nothing but your summary, so leave nothing out that they need."
            }
            TextName::Questions => {
                "You are picking up work from a previous AI agent on the task below; it has left you a summary.\n\nThe task: {instruction}\n\nTheir summary:\n{summary}\n\nThe terminal now shows:\n{screen}\n\nBefore you continue, you may ask the previous agent questions about anything the summary leaves unclear. Ask at least five questions, asking several questions about the details that matter most for finishing the task. List the questions only; do not start the task."
            }
            TextName::Answers => {
                "The next agent has a few questions about your work. Answer each of them as precisely as you can:\n\n{questions}"
            }
            TextName::Handoff => {
                "The previous agent answered:\n\n{answers}\n\nContinue the task from where the previous agent stopped. You cannot ask any more questions. Follow the reply format described at the start."
            }
            TextName::ShortSummary => {
                "In two or three sentences, say what to do next for this task: {instruction}\n\nThe terminal shows: {screen}"
            }
            TextName::ShortSummaryRestart => "{instruction}\n\nWhere things stand: {summary}",
            TextName::UltimateFallback => "{instruction}\n\nThe terminal shows: {screen}",
            TextName::McpHeader => "\n\nMCP servers you can use for this task:\n",
            TextName::McpStdio => "- {name} (stdio): {command} {args}\n",
            TextName::McpUrl => "- {name} ({transport}): {url}\n",
            TextName::Skills => "\n{skills}",
        }
    }

    /// The text a file name stands for.
    pub fn from_file(file: &str) -> Option<TextName> {
        TextName::ALL.into_iter().find(|t| t.file() == file)
    }
}

/// The task prompt for JSON replies.
const PROMPT_JSON: &str = r#"You are an AI agent working in a Linux terminal. You will be given a task and the current state of the terminal; you reply with the keystrokes to send next, see what they produce, and continue until the task is done.

Task:
{instruction}

Reply with exactly one JSON object and nothing else, in this shape:

{{
  "analysis": "What the terminal shows right now, what has been achieved so far and what is still missing.",
  "plan": "What you will do next, and why these commands get you closer to the goal.",
  "commands": [
    {{"keystrokes": "ls -la\n", "duration": 0.1}},
    {{"keystrokes": "cd src\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

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

/// The task prompt for XML replies.
const PROMPT_XML: &str = r#"You are an AI agent working in a Linux terminal. You will be given a task and the current state of the terminal; you reply with the keystrokes to send next, see what they produce, and continue until the task is done.

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

/// What is wrong with a texts directory.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextsError {
    #[error("`{}` cannot be read: {problem}", dir.display())]
    Unreadable { dir: PathBuf, problem: String },
    #[error("`{}` is not one of the texts ({known})", file.display())]
    UnknownFile { file: PathBuf, known: String },
    #[error("`{}`: {problem}", file.display())]
    Invalid { file: PathBuf, problem: TemplateError },
}

/// The texts of one agent: each the user's where a file gave it, else ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Texts {
    templates: Vec<PromptTemplate>,
    /// The directory they came from (None: all ours).
    dir: Option<PathBuf>,
}

impl Texts {
    /// Our texts.
    pub fn ours() -> Arc<Texts> {
        static OURS: OnceLock<Arc<Texts>> = OnceLock::new();
        OURS.get_or_init(|| {
            let templates = TextName::ALL
                .iter()
                .map(|t| PromptTemplate::parse_with(t.ours(), t.fields()).expect("our texts are valid templates"))
                .collect();
            Arc::new(Texts { templates, dir: None })
        })
        .clone()
    }

    /// The texts of `dir`: each `<name>.txt` there replaces ours (files of at most 1 MiB; other
    /// names, and hidden files, are refused).
    pub fn load(dir: &Path) -> Result<Texts, TextsError> {
        let unreadable = |problem: String| TextsError::Unreadable { dir: dir.to_path_buf(), problem };
        let mut texts = (*Texts::ours()).clone();
        texts.dir = Some(dir.to_path_buf());
        let entries = std::fs::read_dir(dir).map_err(|e| unreadable(e.to_string()))?;
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| unreadable(e.to_string()))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in names {
            let file = dir.join(&name);
            let Some(text) = TextName::from_file(&name) else {
                let known = TextName::ALL.iter().map(|t| t.file()).collect::<Vec<_>>().join(", ");
                return Err(TextsError::UnknownFile { file, known });
            };
            let meta = std::fs::symlink_metadata(&file).map_err(|e| unreadable(e.to_string()))?;
            if !meta.is_file() || meta.len() > 1 << 20 {
                return Err(unreadable(format!("`{name}` is not a regular file of at most 1 MiB")));
            }
            let content = std::fs::read_to_string(&file).map_err(|e| unreadable(format!("`{name}`: {e}")))?;
            let template = PromptTemplate::parse_with(&content, text.fields())
                .map_err(|problem| TextsError::Invalid { file: file.clone(), problem })?;
            texts.templates[text as usize] = template;
        }
        Ok(texts)
    }

    /// The directory the texts came from, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Replaces one text (the `prompt_template` kwarg's first prompt).
    pub fn with(mut self, name: TextName, template: PromptTemplate) -> Texts {
        self.templates[name as usize] = template;
        self
    }

    /// The text `name` with `values` in the order of [`TextName::fields`].
    pub fn render(&self, name: TextName, values: &[&str]) -> String {
        self.templates[name as usize].fill(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_parse_and_fill() {
        let texts = Texts::ours();
        let prompt = texts.render(TextName::PromptJson, &["Create {hello}.txt", "root@x:/app#\n"]);
        assert!(prompt.contains("Task:\nCreate {hello}.txt\n"), "{prompt}");
        assert!(prompt.contains("\"task_complete\": false\n}"), "literal braces stay");
        assert!(prompt.ends_with("The terminal now shows:\nroot@x:/app#\n\n"));
        assert_eq!(texts.render(TextName::ShortSummaryRestart, &["t", "s"]), "t\n\nWhere things stand: s");
    }

    #[test]
    fn a_directory_replaces_what_it_has_and_its_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("handoff.txt"), "ANSWERS={answers}").unwrap();
        let texts = Texts::load(dir.path()).unwrap();
        assert_eq!(texts.render(TextName::Handoff, &["a"]), "ANSWERS=a");
        assert_eq!(texts.render(TextName::Answers, &["q"]), Texts::ours().render(TextName::Answers, &["q"]));
        std::fs::write(dir.path().join("summary.txt"), "{instructions}").unwrap();
        let err = Texts::load(dir.path()).unwrap_err();
        assert!(matches!(&err, TextsError::Invalid { file, .. } if file.ends_with("summary.txt")), "{err}");
        assert!(err.to_string().contains("{instructions}") && err.to_string().contains("{instruction}"), "{err}");
        std::fs::remove_file(dir.path().join("summary.txt")).unwrap();
        std::fs::write(dir.path().join("sumary.txt"), "x").unwrap();
        let err = Texts::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("sumary.txt") && err.to_string().contains("summary.txt"), "{err}");
    }
}
