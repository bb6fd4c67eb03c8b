//! The parser of Terminus 2's JSON reply format.
//!
//! A reply is one JSON object with `analysis`, `plan`, `commands` (a list of
//! `{keystrokes, duration}`) and an optional `task_complete`. The parser is forgiving in the same
//! places the reference is: text around the object is a warning, not an error; a missing closing
//! brace or an object buried in prose is repaired and reported as AUTO-CORRECTED. Errors go back
//! to the model as feedback; nothing is executed from a reply with an error.

use crate::pyjson::{self, PyValue};
use crate::pyrepr::py_repr;
use regex::Regex;

/// The default wait after a command whose duration is missing or invalid.
pub const DEFAULT_DURATION: f64 = 1.0;

/// One command of a reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCommand {
    pub keystrokes: String,
    pub duration: f64,
}

/// The outcome of parsing one reply. `error` non-empty means nothing may be executed; `warning`
/// is the reference's rendering of its warning list (`"- a\n- b"`, or empty).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParseResult {
    pub commands: Vec<ParsedCommand>,
    pub is_task_complete: bool,
    pub error: String,
    pub warning: String,
    pub analysis: String,
    pub plan: String,
}

impl ParseResult {
    fn failed(error: impl Into<String>, warnings: &[String]) -> ParseResult {
        ParseResult { error: error.into(), warning: render_warnings(warnings), ..ParseResult::default() }
    }
}

fn render_warnings(warnings: &[String]) -> String {
    if warnings.is_empty() { String::new() } else { format!("- {}", warnings.join("\n- ")) }
}

/// An automatic repair: the original reply and error in, the repaired text out (None: not applicable).
type Fix = fn(&str, &str) -> Option<String>;

/// Parses a reply, trying the two automatic repairs when the plain parse fails.
pub fn parse_json_response(response: &str) -> ParseResult {
    parse_json_response_as(response, false)
}

/// The same, with `reference`: the object is looked for exactly as the reference's scanner
/// does, whose brace count goes below zero on a `}` before the object (the object is then
/// found only by the mixed-content repair).
pub fn parse_json_response_as(response: &str, reference: bool) -> ParseResult {
    let try_parse = |text: &str| try_parse(text, reference);
    let result = try_parse(response);
    if result.error.is_empty() {
        return result;
    }
    let fixes: [(&str, Fix); 2] = [
        ("Fixed incomplete JSON by adding missing closing brace", fix_missing_braces),
        ("Extracted JSON from mixed content", fix_mixed_content),
    ];
    for (name, fix) in fixes {
        let Some(fixed) = fix(response, &result.error) else {
            continue;
        };
        let reparsed = try_parse(&fixed);
        if reparsed.error.is_empty() {
            let mut warning = format!("- AUTO-CORRECTED: {name} - please fix this in future responses");
            if !reparsed.warning.is_empty() {
                warning.push('\n');
                warning.push_str(&reparsed.warning);
            }
            return ParseResult { warning, ..reparsed };
        }
    }
    result
}

/// Repair 1: append the closing braces that are missing (counted over the whole text).
fn fix_missing_braces(response: &str, error: &str) -> Option<String> {
    let applies =
        ["Invalid JSON", "Expecting", "Unterminated", "No valid JSON found"].iter().any(|e| error.contains(e));
    if !applies {
        return None;
    }
    let missing = response.matches('{').count() as i64 - response.matches('}').count() as i64;
    (missing > 0).then(|| format!("{response}{}", "}".repeat(missing as usize)))
}

/// Repair 2: the first brace-balanced object (one nesting level at most) that is valid JSON.
fn fix_mixed_content(response: &str, _error: &str) -> Option<String> {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| Regex::new(r"(?s)\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}").expect("valid regex"));
    pattern
        .find_iter(response)
        .map(|m| m.as_str())
        .find(|candidate| pyjson::loads(candidate).is_ok())
        .map(str::to_string)
}

/// Finds the first balanced `{...}` the way the reference's scanner does (a backslash anywhere
/// escapes the next character, a quote anywhere toggles string mode).
fn extract_json(response: &str, reference: bool) -> (String, Vec<String>) {
    let mut in_string = false;
    let mut escape_next = false;
    let mut depth = 0i64;
    let mut start = None;
    let mut end = None;
    for (idx, c) in response.char_indices() {
        if escape_next {
            escape_next = false;
            continue;
        }
        match c {
            '\\' => escape_next = true,
            '"' => in_string = !in_string,
            _ if in_string => {}
            '{' => {
                if depth == 0 {
                    start = Some(idx);
                }
                depth += 1;
            }
            '}' if depth > 0 || reference => {
                depth -= 1;
                if depth == 0 && start.is_some() {
                    end = Some(idx + 1);
                    break;
                }
            }
            _ => {}
        }
    }
    let (Some(start), Some(end)) = (start, end) else {
        return (String::new(), vec!["No valid JSON object found".to_string()]);
    };
    let mut warnings = Vec::new();
    if !response[..start].trim().is_empty() {
        warnings.push("Extra text detected before JSON object".to_string());
    }
    if !response[end..].trim().is_empty() {
        warnings.push("Extra text detected after JSON object".to_string());
    }
    (response[start..end].to_string(), warnings)
}

fn try_parse(response: &str, reference: bool) -> ParseResult {
    let (content, mut warnings) = extract_json(response, reference);
    if content.is_empty() {
        return ParseResult::failed("No valid JSON found in response", &warnings);
    }
    let data = match pyjson::loads(&content) {
        Ok(value) => value,
        Err(e) => {
            let shown = if content.chars().count() < 200 {
                format!(" | Content: {}", py_repr(&content))
            } else {
                format!(" | Content preview: {}...", py_repr(&content.chars().take(100).collect::<String>()))
            };
            return ParseResult::failed(format!("Invalid JSON: {e}{shown}"), &warnings);
        }
    };
    if !matches!(data, PyValue::Dict(_)) {
        return ParseResult::failed("Response must be a JSON object", &warnings);
    }
    let missing: Vec<&str> = ["analysis", "plan", "commands"].into_iter().filter(|f| data.get(f).is_none()).collect();
    if !missing.is_empty() {
        return ParseResult::failed(format!("Missing required fields: {}", missing.join(", ")), &warnings);
    }
    let (analysis, plan) = (data.get("analysis").expect("checked"), data.get("plan").expect("checked"));
    for (field, value) in [("analysis", analysis), ("plan", plan)] {
        if value.as_str().is_none() {
            warnings.push(format!("Field '{field}' should be a string"));
        }
    }
    let PyValue::List(commands) = data.get("commands").expect("checked") else {
        return ParseResult::failed("Field 'commands' must be an array", &warnings);
    };
    check_field_order(&content, &mut warnings);
    let task_complete = data.get("task_complete").unwrap_or(&PyValue::None);
    if !matches!(task_complete, PyValue::None | PyValue::Bool(_) | PyValue::Str(_)) {
        warnings.push("Field 'task_complete' should be a boolean or string".to_string());
    }
    let is_complete = match task_complete {
        PyValue::Str(s) => matches!(s.to_lowercase().as_str(), "true" | "1" | "yes"),
        other => other.truthy(),
    };
    // The step message shows each only when truthy (`if analysis:` in the reference), so a
    // falsy non-string (`0`, `false`, `[]`, `null`) shows nothing rather than its `str()`.
    let shown = |value: &PyValue| if value.truthy() { value.py_str() } else { String::new() };
    let (analysis, plan) = (shown(analysis), shown(plan));
    match parse_commands(commands, &mut warnings) {
        Ok(parsed) => ParseResult {
            commands: parsed,
            is_task_complete: is_complete,
            error: String::new(),
            warning: render_warnings(&warnings),
            analysis,
            plan,
        },
        Err(error) if is_complete => {
            // A broken command list does not block a completion claim; it becomes a warning.
            warnings.push(error);
            ParseResult {
                commands: Vec::new(),
                is_task_complete: true,
                error: String::new(),
                warning: render_warnings(&warnings),
                analysis,
                plan,
            }
        }
        Err(error) => {
            ParseResult { error, warning: render_warnings(&warnings), analysis, plan, ..ParseResult::default() }
        }
    }
}

fn parse_commands(commands: &[PyValue], warnings: &mut Vec<String>) -> Result<Vec<ParsedCommand>, String> {
    let mut parsed = Vec::new();
    for (idx, command) in commands.iter().enumerate() {
        let n = idx + 1;
        let PyValue::Dict(fields) = command else { return Err(format!("Command {n} must be an object")) };
        let Some(keystrokes) = command.get("keystrokes") else {
            return Err(format!("Command {n} missing required 'keystrokes' field"));
        };
        let Some(keystrokes) = keystrokes.as_str() else {
            return Err(format!("Command {n} 'keystrokes' must be a string"));
        };
        let duration = match command.get("duration") {
            // Python counts booleans as numbers here.
            Some(value) => value.as_number().unwrap_or_else(|| {
                warnings.push(format!("Command {n}: Invalid duration value, using default {DEFAULT_DURATION:.1}"));
                DEFAULT_DURATION
            }),
            None => {
                warnings.push(format!("Command {n}: Missing duration field, using default {DEFAULT_DURATION:.1}"));
                DEFAULT_DURATION
            }
        };
        let mut unknown: Vec<&str> =
            fields.iter().map(|(k, _)| k.as_str()).filter(|k| *k != "keystrokes" && *k != "duration").collect();
        if !unknown.is_empty() {
            // The reference lists a Python set (unspecified order); sorting makes it stable.
            unknown.sort();
            warnings.push(format!("Command {n}: Unknown fields: {}", unknown.join(", ")));
        }
        // An empty key (a pure wait) needs no newline.
        if n < commands.len() && !keystrokes.is_empty() && !keystrokes.ends_with('\n') {
            warnings.push(format!(
                "Command {n} should end with newline when followed by another command. Otherwise the two commands will be concatenated together on the same line."
            ));
        }
        parsed.push(ParsedCommand { keystrokes: keystrokes.to_string(), duration });
    }
    Ok(parsed)
}

/// Warns when the first mentions of the three fields are out of order.
fn check_field_order(content: &str, warnings: &mut Vec<String>) {
    let expected = ["analysis", "plan", "commands"];
    // Compiled once per process: a compilation costs more than the search of a reply.
    static MENTIONS: std::sync::OnceLock<Vec<Regex>> = std::sync::OnceLock::new();
    let mentions = MENTIONS.get_or_init(|| {
        expected.iter().map(|name| Regex::new(&format!(r#""{name}"\s*:"#)).expect("a valid pattern")).collect()
    });
    let mut found: Vec<(usize, &str)> = expected
        .iter()
        .zip(mentions)
        .filter_map(|(name, mention)| mention.find(content).map(|m| (m.start(), *name)))
        .collect();
    if found.len() < 2 {
        return;
    }
    let present: Vec<&str> = expected.iter().copied().filter(|n| found.iter().any(|(_, f)| f == n)).collect();
    found.sort();
    let actual: Vec<&str> = found.iter().map(|(_, n)| *n).collect();
    if actual != present {
        warnings.push(format!(
            "Fields appear in wrong order. Found: {}, expected: {}",
            actual.join(" → "),
            present.join(" → ")
        ));
    }
}

/// Salvages a JSON reply that hit the output limit: when the top-level `commands` array is
/// complete, the reply is cut right after it and closed, and returned if it then parses without
/// error. The reference has no JSON salvage; without one, a long but usable reply is thrown away.
pub fn salvage_truncated_json(text: &str) -> Option<String> {
    let start = text.find('{')?;
    let chars: Vec<(usize, char)> = text[start..].char_indices().map(|(i, c)| (i + start, c)).collect();
    let (mut depth, mut in_string, mut escape) = (0usize, false, false);
    let mut string_start = 0;
    let mut last_key_is_commands = false;
    let mut commands_depth: Option<usize> = None;
    for (pos, &(idx, c)) in chars.iter().enumerate() {
        if escape {
            escape = false;
            continue;
        }
        if in_string {
            match c {
                '\\' => escape = true,
                '"' => {
                    in_string = false;
                    // A key is a string at object depth 1 followed by a colon.
                    let rest = chars[pos + 1..].iter().map(|(_, c)| *c).find(|c| !c.is_whitespace());
                    last_key_is_commands = depth == 1 && rest == Some(':') && &text[string_start..idx] == "commands";
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                string_start = idx + 1;
            }
            '{' | '[' => {
                depth += 1;
                if c == '[' && last_key_is_commands && commands_depth.is_none() && depth == 2 {
                    commands_depth = Some(depth);
                }
            }
            '}' | ']' => {
                if c == ']' && commands_depth == Some(depth) {
                    let candidate = format!("{}}}", &text[start..=idx]);
                    let parsed = parse_json_response(&candidate);
                    return parsed.error.is_empty().then_some(candidate);
                }
                depth = depth.saturating_sub(1);
            }
            ',' => last_key_is_commands = false,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_brace_before_the_object_is_ignored_here_and_repaired_by_the_reference() {
        let reply = r#"} {"analysis": "a", "plan": "p", "commands": []}"#;
        let ours = parse_json_response(reply);
        assert!(ours.error.is_empty() && !ours.warning.contains("AUTO-CORRECTED"), "{}", ours.warning);
        let reference = parse_json_response_as(reply, true);
        assert!(reference.error.is_empty(), "{}", reference.error);
        assert!(
            reference.warning.contains("AUTO-CORRECTED: Extracted JSON from mixed content"),
            "{}",
            reference.warning
        );
    }

    const VALID: &str = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.1}], "task_complete": false}"#;

    fn parse(text: &str) -> ParseResult {
        parse_json_response(text)
    }

    #[test]
    fn j1_a_valid_reply() {
        let r = parse(VALID);
        assert_eq!(r.commands, vec![ParsedCommand { keystrokes: "ls\n".into(), duration: 0.1 }]);
        assert!(!r.is_task_complete);
        assert_eq!((r.error.as_str(), r.warning.as_str()), ("", ""));
        assert_eq!((r.analysis.as_str(), r.plan.as_str()), ("a", "p"));
    }

    #[test]
    fn j2_missing_duration_defaults_with_a_warning() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n"}]}"#);
        assert_eq!(r.commands[0].duration, 1.0);
        assert_eq!(r.warning, "- Command 1: Missing duration field, using default 1.0");
    }

    #[test]
    fn j3_text_around_the_object_is_a_warning() {
        let r = parse(&format!("Sure!\n{VALID}\nDone"));
        assert_eq!(r.error, "");
        assert_eq!(r.warning, "- Extra text detected before JSON object\n- Extra text detected after JSON object");
    }

    #[test]
    fn j4_j5_missing_fields_are_errors() {
        assert_eq!(parse(r#"{"commands":[]}"#).error, "Missing required fields: analysis, plan");
        assert_eq!(parse(r#"{"foo":1}"#).error, "Missing required fields: analysis, plan, commands");
    }

    #[test]
    fn j6_no_json_at_all() {
        for text in ["hello world", ""] {
            let r = parse(text);
            assert_eq!(r.error, "No valid JSON found in response");
            assert_eq!(r.warning, "- No valid JSON object found");
        }
    }

    #[test]
    fn j7_single_quotes_are_invalid_json() {
        let r = parse("{'analysis':'a'}");
        assert_eq!(
            r.error,
            "Invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1) | Content: \"{'analysis':'a'}\""
        );
    }

    #[test]
    fn j8_a_missing_closing_brace_is_repaired() {
        let r = parse(&VALID[..VALID.len() - 1]);
        assert_eq!(r.error, "");
        assert_eq!(r.commands.len(), 1);
        assert_eq!(
            r.warning,
            "- AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - please fix this in future responses"
        );
    }

    #[test]
    fn j9_commands_must_be_an_array() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": "ls"}"#);
        assert_eq!(r.error, "Field 'commands' must be an array");
    }

    #[test]
    fn j10_to_j14_task_complete_values() {
        let with =
            |v: &str| parse(&format!(r#"{{"analysis": "a", "plan": "p", "commands": [], "task_complete": {v}}}"#));
        assert!(with("\"True\"").is_task_complete);
        assert!(with("\"yes\"").is_task_complete);
        assert!(!with("\"no\"").is_task_complete);
        let one = with("1");
        assert!(one.is_task_complete);
        assert_eq!(one.warning, "- Field 'task_complete' should be a boolean or string");
        assert!(!with("null").is_task_complete);
        assert!(!with("[]").is_task_complete);
    }

    #[test]
    fn j15_field_order() {
        let r = parse(r#"{"plan": "p", "analysis": "a", "commands": []}"#);
        assert_eq!(
            r.warning,
            "- Fields appear in wrong order. Found: plan → analysis → commands, expected: analysis → plan → commands"
        );
    }

    #[test]
    fn j16_non_string_analysis() {
        let r = parse(r#"{"analysis": 5, "plan": "p", "commands": []}"#);
        assert_eq!(r.warning, "- Field 'analysis' should be a string");
        assert_eq!(r.analysis, "5");
    }

    #[test]
    fn falsy_non_string_analysis_and_plan_show_nothing() {
        // The reference prints `Analysis: …` only when the value is truthy.
        for falsy in ["0", "false", "[]", "null", "{}", "0.0"] {
            let r = parse(&format!(r#"{{"analysis": {falsy}, "plan": {falsy}, "commands": []}}"#));
            assert_eq!((r.analysis.as_str(), r.plan.as_str()), ("", ""), "{falsy}");
        }
        let r = parse(r#"{"analysis": [1, "a"], "plan": true, "commands": []}"#);
        assert_eq!((r.analysis.as_str(), r.plan.as_str()), ("[1, 'a']", "True"));
    }

    #[test]
    fn j17_to_j19_command_errors() {
        let with = |c: &str| parse(&format!(r#"{{"analysis": "a", "plan": "p", "commands": [{c}]}}"#)).error;
        assert_eq!(with("\"ls\""), "Command 1 must be an object");
        assert_eq!(with(r#"{"duration": 1}"#), "Command 1 missing required 'keystrokes' field");
        assert_eq!(with(r#"{"keystrokes": 5}"#), "Command 1 'keystrokes' must be a string");
    }

    #[test]
    fn j20_to_j22_command_warnings() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": "5"}]}"#);
        assert_eq!(r.warning, "- Command 1: Invalid duration value, using default 1.0");
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "timeout": 3}]}"#);
        assert_eq!(
            r.warning,
            "- Command 1: Missing duration field, using default 1.0\n- Command 1: Unknown fields: timeout"
        );
        let r = parse(
            r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls", "duration": 1}, {"keystrokes": "pwd\n", "duration": 1}]}"#,
        );
        assert_eq!(r.commands.len(), 2);
        assert!(r.warning.starts_with("- Command 1 should end with newline when followed by another command."));
        let r = parse(
            r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "", "duration": 1}, {"keystrokes": "pwd\n", "duration": 1}]}"#,
        );
        assert_eq!(r.warning, "", "a wait needs no newline");
    }

    #[test]
    fn j23_a_bad_command_with_completion_is_a_warning() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"duration": 1}], "task_complete": true}"#);
        assert_eq!(r.error, "");
        assert!(r.is_task_complete);
        assert!(r.commands.is_empty());
        assert_eq!(r.warning, "- Command 1 missing required 'keystrokes' field");
    }

    #[test]
    fn j24_to_j26_durations_are_not_clamped_here() {
        let with = |d: &str| {
            parse(&format!(
                r#"{{"analysis": "a", "plan": "p", "commands": [{{"keystrokes": "x\n", "duration": {d}}}]}}"#
            ))
            .commands[0]
                .duration
        };
        assert_eq!(with("100"), 100.0);
        assert_eq!(with("2"), 2.0);
        assert_eq!(with("true"), 1.0);
    }

    #[test]
    fn j27_fenced_json() {
        let r = parse(&format!("```json\n{VALID}\n```"));
        assert_eq!(r.error, "");
        assert_eq!(r.warning, "- Extra text detected before JSON object\n- Extra text detected after JSON object");
    }

    #[test]
    fn j28_two_objects_take_the_first() {
        let r = parse(&format!("{VALID}{VALID}"));
        assert_eq!(r.commands.len(), 1);
        assert_eq!(r.warning, "- Extra text detected after JSON object");
    }

    #[test]
    fn j33_object_after_braces_in_prose_is_extracted() {
        let r = parse(&format!("Use {{x}} then {VALID}"));
        assert_eq!(r.error, "");
        assert_eq!(
            r.warning,
            "- AUTO-CORRECTED: Extracted JSON from mixed content - please fix this in future responses"
        );
    }

    #[test]
    fn j37_duplicate_keys_keep_the_last() {
        let r = parse(
            r#"{"analysis": "a", "plan": "p", "commands": [], "commands": [{"keystrokes": "x\n", "duration": 1}]}"#,
        );
        assert_eq!(r.commands.len(), 1);
    }

    #[test]
    fn j29_raw_newline_in_a_string() {
        let r = parse("{\"analysis\": \"line\nbreak\", \"plan\": \"p\", \"commands\": []}");
        assert_eq!(
            r.error,
            "Invalid JSON: Invalid control character at: line 1 column 19 (char 18) | Content: '{\"analysis\": \"line\\nbreak\", \"plan\": \"p\", \"commands\": []}'"
        );
    }

    #[test]
    fn j30_trailing_comma() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [],}"#);
        assert_eq!(
            r.error,
            "Invalid JSON: Expecting property name enclosed in double quotes: line 1 column 47 (char 46) | Content: '{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": [],}'"
        );
    }

    #[test]
    fn j31_the_first_balanced_object_wins_even_if_useless() {
        let r = parse(&format!(r#"text {{"a": {{"b": {{"c": 1}}}}}} {VALID}"#));
        assert_eq!(r.error, "Missing required fields: analysis, plan, commands");
        assert_eq!(r.warning, "- Extra text detected before JSON object\n- Extra text detected after JSON object");
    }

    #[test]
    fn j32_truncated_inside_a_string() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls"#);
        assert_eq!(r.error, "No valid JSON found in response");
        assert_eq!(r.warning, "- No valid JSON object found");
    }

    #[test]
    fn j35_empty_list_completion_is_falsy() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [], "task_complete": []}"#);
        assert!(!r.is_task_complete);
        assert_eq!(r.warning, "- Field 'task_complete' should be a boolean or string");
    }

    #[test]
    fn j36_nan_durations_are_accepted() {
        let r = parse(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x\n", "duration": NaN}]}"#);
        assert_eq!((r.error.as_str(), r.warning.as_str()), ("", ""));
        assert!(r.commands[0].duration.is_nan());
    }

    #[test]
    fn unknown_command_fields_are_listed_sorted() {
        let r = parse(
            r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "x\n", "duration": 1, "zeta": 1, "alpha": 2, "mid": 3}]}"#,
        );
        assert_eq!(r.warning, "- Command 1: Unknown fields: alpha, mid, zeta");
    }

    #[test]
    fn j38_a_stray_quote_hides_the_object_until_extracted() {
        let r = parse(&format!("He said \"hi {VALID}"));
        assert_eq!(r.error, "");
        assert_eq!(r.commands.len(), 1);
        assert_eq!(
            r.warning,
            "- AUTO-CORRECTED: Extracted JSON from mixed content - please fix this in future responses"
        );
    }

    #[test]
    fn non_string_analysis_is_rendered_as_python_would() {
        let r = parse(r#"{"analysis": ["a", 1.0, null], "plan": true, "commands": []}"#);
        assert_eq!(r.analysis, "['a', 1.0, None]");
        assert_eq!(r.plan, "True");
    }

    #[test]
    fn truncated_json_with_complete_commands_is_salvaged() {
        let truncated = r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls ]\n", "duration": 0.1}], "task_complete": tr"#;
        let salvaged = salvage_truncated_json(truncated).unwrap();
        let r = parse(&salvaged);
        assert_eq!(r.error, "");
        assert_eq!(r.commands[0].keystrokes, "ls ]\n");
        assert!(!r.is_task_complete);
        // Commands still open: nothing to salvage.
        assert_eq!(
            salvage_truncated_json(r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n"}, {"keys"#),
            None
        );
        assert_eq!(salvage_truncated_json("no json"), None);
        // A nested "commands" key inside a string or deeper object does not count.
        assert_eq!(
            salvage_truncated_json(r#"{"analysis": "x", "plan": {"commands": []}, "commands": [{"keystrokes": "a"#),
            None
        );
    }
}
