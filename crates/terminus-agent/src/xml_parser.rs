//! The parser of Terminus 2's XML reply format:
//!
//! ```text
//! <response>
//!   <analysis>…</analysis>
//!   <plan>…</plan>
//!   <commands><keystrokes duration="0.1">ls -la\n</keystrokes></commands>
//!   <task_complete>false</task_complete>
//! </response>
//! ```
//!
//! Keystrokes are taken verbatim (no entity decoding); warnings tell the model when that bites.
//! Where the reference iterates Python sets (several missing sections, several unknown tags), we
//! use a fixed order so the feedback is stable.

use regex::Regex;

use crate::parser::{DEFAULT_DURATION, ParseResult, ParsedCommand};

const SECTIONS: [&str; 4] = ["analysis", "plan", "commands", "task_complete"];

const EMPTY_COMMANDS_WARNING: &str = "Commands section is empty; not taking any action. If you want to wait a specific amount of time please use `sleep`, but if you're waiting for a command to finish then continue to wait.";

/// The compiled pattern, from a per-process cache: the patterns are a fixed few, and compiling
/// one costs more than searching a reply with it. (A `Regex` clone shares the compiled form.)
fn re(pattern: &str) -> Regex {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Regex>>> =
        std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(compiled) = cache.get(pattern) {
        return compiled.clone();
    }
    let compiled = Regex::new(pattern).expect("valid regex");
    cache.insert(pattern.to_string(), compiled.clone());
    compiled
}

/// Parses an XML-format reply.
pub fn parse_xml_response(response: &str) -> ParseResult {
    let mut warnings = Vec::new();
    check_extra_text(response, &mut warnings);
    let content = match response.find("<response>") {
        Some(start) => {
            let body = &response[start + "<response>".len()..];
            match body.find("</response>") {
                Some(end) => body[..end].trim(),
                None => body.trim(),
            }
        }
        None => "",
    };
    if content.is_empty() {
        return ParseResult {
            error: "No <response> tag found".into(),
            warning: render(&warnings),
            ..ParseResult::default()
        };
    }
    let is_complete = re(r"(?is)<task_complete>\s*true\s*</task_complete>").is_match(content);
    let sections = parse_sections(content, &mut warnings);
    let analysis = sections[0].clone().unwrap_or_default();
    let plan = sections[1].clone().unwrap_or_default();
    let commands_text = match &sections[2] {
        Some(text) if !text.is_empty() => text.clone(),
        Some(_) => {
            if !is_complete {
                warnings.push(EMPTY_COMMANDS_WARNING.to_string());
            }
            return ParseResult {
                is_task_complete: is_complete,
                warning: render(&warnings),
                analysis,
                plan,
                ..ParseResult::default()
            };
        }
        None if is_complete => {
            return ParseResult {
                is_task_complete: true,
                warning: render(&warnings),
                analysis,
                plan,
                ..ParseResult::default()
            };
        }
        None => {
            return ParseResult {
                error: "Missing <commands> section".into(),
                warning: render(&warnings),
                analysis,
                plan,
                ..ParseResult::default()
            };
        }
    };
    let commands = parse_commands(&commands_text, &mut warnings);
    ParseResult {
        commands,
        is_task_complete: is_complete,
        error: String::new(),
        warning: render(&warnings),
        analysis,
        plan,
    }
}

fn render(warnings: &[String]) -> String {
    if warnings.is_empty() { String::new() } else { format!("- {}", warnings.join("\n- ")) }
}

fn check_extra_text(response: &str, warnings: &mut Vec<String>) {
    let Some(start) = response.find("<response>") else { return };
    if !response[..start].trim().is_empty() {
        warnings.push("Extra text detected before <response> tag".into());
    }
    if let Some(end) = response.find("</response>")
        && !response[end + "</response>".len()..].trim().is_empty()
    {
        warnings.push("Extra text detected after </response> tag".into());
        let n = response.matches("<response>").count();
        if n > 1 {
            warnings.push(format!(
                "IMPORTANT: Only issue one <response> block at a time. You issued {n} and only the first was executed."
            ));
        }
    }
}

/// The four sections (None when absent, "" when present but empty), with the structural warnings.
fn parse_sections(content: &str, warnings: &mut Vec<String>) -> Vec<Option<String>> {
    let mut values = Vec::new();
    for name in SECTIONS {
        let full = re(&format!(r"(?s)<{name}>(.*?)</{name}>"));
        let empty = re(&format!(r"<{name}\s*/>|<{name}></{name}>"));
        values.push(match full.captures(content) {
            Some(caps) => Some(caps[1].trim().to_string()),
            None if empty.is_match(content) => Some(String::new()),
            None => None,
        });
    }
    for (name, value) in SECTIONS.iter().zip(&values).take(3) {
        if value.is_none() {
            warnings.push(format!("Missing <{name}> section"));
        }
    }
    for tag in top_level_tags(content) {
        if !SECTIONS.contains(&tag.as_str()) {
            warnings.push(format!("Unknown tag found: <{tag}>, expected analysis/plan/commands/task_complete"));
        }
    }
    for name in SECTIONS {
        let count = re(&format!(r"<{name}(?:\s|>|/>)")).find_iter(content).count();
        if count > 1 {
            warnings.push(if name == "commands" {
                format!("IMPORTANT: Only issue one <commands> block at a time. You issued {count} and only the first was executed.")
            } else {
                format!("Multiple <{name}> sections found")
            });
        }
    }
    let mut found: Vec<(usize, &str)> = SECTIONS[..3]
        .iter()
        .filter_map(|name| re(&format!(r"<{name}(?:\s|>|/>)")).find(content).map(|m| (m.start(), *name)))
        .collect();
    if found.len() >= 2 {
        let present: Vec<&str> = SECTIONS[..3].iter().copied().filter(|n| found.iter().any(|(_, f)| f == n)).collect();
        found.sort();
        let actual: Vec<&str> = found.iter().map(|(_, n)| *n).collect();
        if actual != present {
            warnings.push(format!(
                "Sections appear in wrong order. Found: {}, expected: {}",
                actual.join(" → "),
                present.join(" → ")
            ));
        }
    }
    values
}

/// Tag names at depth 0, found the reference's naive way (a `<` inside keystrokes counts too).
fn top_level_tags(content: &str) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    let mut depth: i64 = 0;
    let mut rest = content;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else { break };
        let inner = &after[..close];
        rest = &after[close + 1..];
        if inner.starts_with('!') || inner.starts_with('?') {
            continue;
        }
        if inner.starts_with('/') {
            depth -= 1;
            continue;
        }
        let name = if inner.contains(' ') { inner.split_whitespace().next().unwrap_or("") } else { inner };
        let name = name.trim_end_matches('/');
        if depth == 0 && !name.is_empty() && !tags.iter().any(|t| t == name) {
            tags.push(name.to_string());
        }
        if !inner.ends_with('/') {
            depth += 1;
        }
    }
    tags
}

fn parse_commands(text: &str, warnings: &mut Vec<String>) -> Vec<ParsedCommand> {
    let keystrokes = re(r"(?s)<keystrokes([^>]*)>(.*?)</keystrokes>");
    let unquoted = re(r#"(\w+)\s*=\s*([^"'\s>]+)"#);
    let single = re(r"(\w+)\s*=\s*'([^']*)'");
    let any_attr = re(r"(\w+)\s*=");
    let duration = re(r#"duration\s*=\s*["']([^"']*)["']"#);
    let matches: Vec<(String, String)> =
        keystrokes.captures_iter(text).map(|c| (c[1].to_string(), c[2].to_string())).collect();
    let mut commands = Vec::new();
    for (idx, (attrs, body)) in matches.iter().enumerate() {
        let n = idx + 1;
        for caps in unquoted.captures_iter(attrs) {
            warnings.push(format!(
                "Command {n}: Attribute '{}' value should be quoted: {}=\"{}\"",
                &caps[1], &caps[1], &caps[2]
            ));
        }
        for caps in single.captures_iter(attrs) {
            warnings.push(format!(
                "Command {n}: Use double quotes for attribute '{}': {}=\"{}\"",
                &caps[1], &caps[1], &caps[2]
            ));
        }
        for caps in any_attr.captures_iter(attrs) {
            if &caps[1] != "duration" {
                warnings
                    .push(format!("Command {n}: Unknown attribute '{}' - known attributes are: duration", &caps[1]));
            }
        }
        let value = match duration.captures(attrs) {
            Some(caps) => match py_float(&caps[1]) {
                Some(value) => value,
                None => {
                    warnings.push(format!(
                        "Command {n}: Invalid duration value '{}', using default {DEFAULT_DURATION:.1}",
                        &caps[1]
                    ));
                    DEFAULT_DURATION
                }
            },
            None => {
                warnings.push(format!("Command {n}: Missing duration attribute, using default {DEFAULT_DURATION:.1}"));
                DEFAULT_DURATION
            }
        };
        if n < matches.len() && !body.ends_with('\n') {
            warnings.push(format!(
                "Command {n} should end with newline when followed by another command. Otherwise the two commands will be concatenated together on the same line."
            ));
        }
        commands.push(ParsedCommand { keystrokes: body.clone(), duration: value });
    }
    for (entity, plain) in [("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"), ("&quot;", "\""), ("&apos;", "'")] {
        if text.contains(entity) {
            warnings.push(format!(
                "Warning: {entity} is read verbatim and not converted to {plain}. NEVER USE {entity}, unless you want these exact characters to appear directly in the output."
            ));
        }
    }
    if text.contains("\\r\\n") {
        warnings.push("Warning: \\r\\n line endings are not necessary - use \\n instead for simpler output".into());
    }
    commands
}

/// Python's `float(text)`: surrounding whitespace, signs, exponents, `inf`/`nan`, and `_` between
/// digits are accepted.
pub fn py_float(text: &str) -> Option<f64> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if lower.len() - unsigned.len() > 1 {
        return None;
    }
    let negative = lower.starts_with('-');
    let special = match unsigned {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(value) = special {
        return Some(if negative { -value } else { value });
    }
    // Underscores only between digits.
    let chars: Vec<char> = t.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c == '_' {
            let ok = i > 0 && i + 1 < chars.len() && chars[i - 1].is_ascii_digit() && chars[i + 1].is_ascii_digit();
            if !ok {
                return None;
            }
        }
    }
    let cleaned: String = chars.iter().filter(|c| **c != '_').collect();
    if cleaned.is_empty() || !cleaned.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

/// What can be kept of a reply that hit the output limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XmlSalvage {
    /// The reply up to its first complete `</commands>` … `</response>`, which parses cleanly.
    Usable(String),
    /// Nothing complete enough to run.
    Nothing,
    /// The reply issued several blocks; none is run from a truncated reply.
    SeveralBlocks,
}

/// Cuts a reply that hit the output limit after its first complete `</commands>` … `</response>`.
pub fn salvage_truncated_xml(text: &str) -> XmlSalvage {
    let Some(commands_end) = text.find("</commands>") else { return XmlSalvage::Nothing };
    let Some(response_end) = text[commands_end..].find("</response>").map(|p| commands_end + p + "</response>".len())
    else {
        return XmlSalvage::Nothing;
    };
    let cut = &text[..response_end];
    let parsed = parse_xml_response(cut);
    let lower = parsed.warning.to_lowercase();
    if lower.contains("only issue one") && lower.contains("block at a time") {
        return XmlSalvage::SeveralBlocks;
    }
    if parsed.error.is_empty() { XmlSalvage::Usable(cut.to_string()) } else { XmlSalvage::Nothing }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(commands: &str, complete: &str) -> String {
        format!(
            "<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>{commands}</commands>\n<task_complete>{complete}</task_complete>\n</response>"
        )
    }

    const LS: &str = "<keystrokes duration=\"0.1\">ls -la\n</keystrokes>";

    fn parse(text: &str) -> ParseResult {
        parse_xml_response(text)
    }

    #[test]
    fn x1_canonical() {
        let r = parse(&response(LS, "false"));
        assert_eq!(r.commands, vec![ParsedCommand { keystrokes: "ls -la\n".into(), duration: 0.1 }]);
        assert!(!r.is_task_complete);
        assert_eq!((r.error.as_str(), r.warning.as_str(), r.analysis.as_str(), r.plan.as_str()), ("", "", "a", "p"));
    }

    #[test]
    fn x2_no_response_tag() {
        for text in ["<analysis>a</analysis><commands></commands>", "", "<response></response>"] {
            assert_eq!(parse(text).error, "No <response> tag found", "{text:?}");
        }
    }

    #[test]
    fn x3_missing_closing_tag() {
        let text = response(LS, "false").replace("</response>", "");
        let r = parse(&text);
        assert_eq!((r.error.as_str(), r.warning.as_str()), ("", ""));
        assert_eq!(r.commands.len(), 1);
    }

    #[test]
    fn x4_text_around() {
        let r = parse(&format!("Here:\n{}\nDone.", response(LS, "false")));
        assert_eq!(r.commands.len(), 1);
        assert_eq!(
            r.warning,
            "- Extra text detected before <response> tag\n- Extra text detected after </response> tag"
        );
    }

    #[test]
    fn x5_two_response_blocks() {
        let second = response("<keystrokes duration=\"1\">pwd\n</keystrokes>", "false");
        let r = parse(&format!("{}\n{second}", response(LS, "false")));
        assert_eq!(r.commands[0].keystrokes, "ls -la\n");
        assert_eq!(r.commands.len(), 1);
        assert_eq!(
            r.warning,
            "- Extra text detected after </response> tag\n- IMPORTANT: Only issue one <response> block at a time. You issued 2 and only the first was executed."
        );
    }

    #[test]
    fn x6_x7_missing_commands() {
        let r = parse("<response><analysis>a</analysis><plan>p</plan></response>");
        assert_eq!(r.error, "Missing <commands> section");
        assert_eq!(r.warning, "- Missing <commands> section");
        let r = parse("<response><analysis>a</analysis><plan>p</plan><task_complete>true</task_complete></response>");
        assert_eq!(r.error, "");
        assert!(r.is_task_complete);
        assert_eq!(r.warning, "- Missing <commands> section");
    }

    #[test]
    fn x8_x10_x9_empty_commands() {
        let empty = format!("- {EMPTY_COMMANDS_WARNING}");
        assert_eq!(parse(&response("", "false")).warning, empty);
        let self_closing =
            "<response><analysis>a</analysis><plan>p</plan><commands/><task_complete>false</task_complete></response>";
        let r = parse(self_closing);
        assert_eq!((r.error.as_str(), r.warning.as_str()), ("", empty.as_str()));
        let r = parse(&response("", "true"));
        assert!(r.is_task_complete);
        assert_eq!(r.warning, "");
    }

    #[test]
    fn x11_to_x13_completion_values() {
        assert!(parse(&response("", " TRUE ")).is_task_complete);
        let r = parse(&response("", "false"));
        assert!(!r.is_task_complete);
        let r = parse(&response("", "yes"));
        assert!(!r.is_task_complete);
        assert!(r.warning.contains("Commands section is empty"));
    }

    #[test]
    fn x14_to_x18_duration_attributes() {
        let one = |attrs: &str| parse(&response(&format!("<keystrokes{attrs}>ls\n</keystrokes>"), "false"));
        let r = one("");
        assert_eq!(
            (r.commands[0].duration, r.warning.as_str()),
            (1.0, "- Command 1: Missing duration attribute, using default 1.0")
        );
        let r = one(" duration=\"abc\"");
        assert_eq!(
            (r.commands[0].duration, r.warning.as_str()),
            (1.0, "- Command 1: Invalid duration value 'abc', using default 1.0")
        );
        let r = one(" duration=5");
        assert_eq!(r.commands[0].duration, 1.0);
        assert_eq!(
            r.warning,
            "- Command 1: Attribute 'duration' value should be quoted: duration=\"5\"\n- Command 1: Missing duration attribute, using default 1.0"
        );
        let r = one(" duration='5'");
        assert_eq!(r.commands[0].duration, 5.0);
        assert_eq!(r.warning, "- Command 1: Use double quotes for attribute 'duration': duration=\"5\"");
        let r = one(" duration=\"1.0\" wait=\"2\"");
        assert_eq!(r.commands[0].duration, 1.0);
        assert_eq!(r.warning, "- Command 1: Unknown attribute 'wait' - known attributes are: duration");
    }

    #[test]
    fn x19_newline_between_commands() {
        let r = parse(&response(
            "<keystrokes duration=\"1\">ls</keystrokes><keystrokes duration=\"1\">pwd\n</keystrokes>",
            "false",
        ));
        assert_eq!(r.commands.len(), 2);
        assert!(r.warning.starts_with("- Command 1 should end with newline when followed by another command."));
    }

    #[test]
    fn x20_entities_are_verbatim() {
        let r = parse(&response("<keystrokes duration=\"1\">echo a &amp;&amp; b &gt; f\n</keystrokes>", "false"));
        assert_eq!(r.commands[0].keystrokes, "echo a &amp;&amp; b &gt; f\n");
        assert_eq!(
            r.warning,
            "- Warning: &gt; is read verbatim and not converted to >. NEVER USE &gt;, unless you want these exact characters to appear directly in the output.\n- Warning: &amp; is read verbatim and not converted to &. NEVER USE &amp;, unless you want these exact characters to appear directly in the output."
        );
    }

    #[test]
    fn x22_unknown_tags() {
        let text = response(LS, "false").replace("<plan>p</plan>", "<plan>p</plan>\n<notes>n</notes>");
        assert_eq!(parse(&text).warning, "- Unknown tag found: <notes>, expected analysis/plan/commands/task_complete");
    }

    #[test]
    fn missing_sections_come_in_a_fixed_order_and_unknown_tags_once_each_as_they_appear() {
        let r = parse(&format!("<response><zeta>z</zeta><commands>{LS}</commands><alpha>a</alpha><zeta/></response>"));
        assert_eq!(
            r.warning,
            "- Missing <analysis> section\n- Missing <plan> section\n- Unknown tag found: <zeta>, expected analysis/plan/commands/task_complete\n- Unknown tag found: <alpha>, expected analysis/plan/commands/task_complete"
        );
    }

    #[test]
    fn x23_two_commands_blocks() {
        let text = response(LS, "false")
            .replace("</commands>", "</commands><commands><keystrokes duration=\"1\">pwd\n</keystrokes></commands>");
        let r = parse(&text);
        assert_eq!(r.commands.len(), 1);
        assert_eq!(r.commands[0].keystrokes, "ls -la\n");
        assert_eq!(
            r.warning,
            "- IMPORTANT: Only issue one <commands> block at a time. You issued 2 and only the first was executed."
        );
    }

    #[test]
    fn a_tag_that_only_starts_like_a_section_does_not_place_it() {
        let reply =
            "<response><plan_notes>x</plan_notes><analysis>a</analysis><plan>p</plan><commands></commands></response>";
        let result = parse_xml_response(reply);
        assert!(!result.warning.contains("wrong order"), "{}", result.warning);
    }

    #[test]
    fn x24_wrong_order() {
        let r = parse(&format!("<response><plan>p</plan><analysis>a</analysis><commands>{LS}</commands></response>"));
        assert_eq!(
            r.warning,
            "- Sections appear in wrong order. Found: plan → analysis → commands, expected: analysis → plan → commands"
        );
    }

    #[test]
    fn x25_missing_analysis() {
        let r = parse(&format!("<response><plan>p</plan><commands>{LS}</commands></response>"));
        assert_eq!(r.analysis, "");
        assert_eq!(r.warning, "- Missing <analysis> section");
    }

    #[test]
    fn x26_commands_without_keystrokes() {
        let r = parse(&response("ls -la", "false"));
        assert_eq!((r.commands.len(), r.error.as_str(), r.warning.as_str()), (0, "", ""));
    }

    #[test]
    fn x27_empty_keystrokes() {
        let r = parse(&response("<keystrokes duration=\"10.0\"></keystrokes>", "false"));
        assert_eq!(r.commands, vec![ParsedCommand { keystrokes: String::new(), duration: 10.0 }]);
        assert_eq!(r.warning, "");
    }

    #[test]
    fn x28_two_analysis_sections() {
        let text = response(LS, "false")
            .replace("<analysis>a</analysis>", "<analysis>first</analysis><analysis>second</analysis>");
        let r = parse(&text);
        assert_eq!(r.analysis, "first");
        assert_eq!(r.warning, "- Multiple <analysis> sections found");
    }

    #[test]
    fn x29_heredocs_are_verbatim() {
        let body = "cat <<EOF > f\nhello\nEOF\n";
        let r = parse(&response(&format!("<keystrokes duration=\"1\">{body}</keystrokes>"), "false"));
        assert_eq!(r.commands[0].keystrokes, body);
        assert_eq!(r.warning, "");
    }

    #[test]
    fn s1_to_s4_salvage() {
        let complete = response(LS, "false");
        assert_eq!(
            salvage_truncated_xml(&format!("{complete}\n<response><analysis>more")),
            XmlSalvage::Usable(complete.clone())
        );
        assert_eq!(
            salvage_truncated_xml("<response><analysis>a</analysis><commands><keystrokes>ls"),
            XmlSalvage::Nothing
        );
        assert_eq!(salvage_truncated_xml("<response><commands></commands><plan>p"), XmlSalvage::Nothing);
        let two = complete.replace("</commands>", "</commands><commands></commands>");
        assert_eq!(salvage_truncated_xml(&two), XmlSalvage::SeveralBlocks);
    }

    #[test]
    fn python_float_parsing() {
        assert_eq!(py_float(" 1.5 "), Some(1.5));
        assert_eq!(py_float("1e3"), Some(1000.0));
        assert_eq!(py_float("1_0"), Some(10.0));
        assert!(py_float("nan").unwrap().is_nan());
        assert_eq!(py_float("-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(py_float("abc"), None);
        assert_eq!(py_float("_1"), None);
        assert_eq!(py_float(""), None);
    }
}
