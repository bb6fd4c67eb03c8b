//! A user's first-prompt template (the `prompt_template` agent kwarg), read in the style of
//! Python's `str.format`, which is how the reference fills its own templates
//! (`template.format(instruction=…, terminal_state=…)`, terminus2-reference §3.1):
//! `{instruction}` and `{terminal_state}` are replaced, `{{` and `}}` are literal braces.
//!
//! The template is checked when the job is loaded, so a typo is a configuration error naming the
//! placeholder before any container starts, not a failed trial. Only the two names are known;
//! Python's conversions (`!r`), format specs (`:>10`), indexing and positional fields have no
//! use with these two strings and are refused rather than half supported.

/// A parsed template: literal text and the two placeholders, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Instruction,
    TerminalState,
}

/// Why a template cannot be used. Positions count characters from 0, as Python's do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error(
        "unknown placeholder `{{{name}}}` at character {at}; the known ones are {{instruction}} and {{terminal_state}} (write `{{{{` and `}}}}` for literal braces)"
    )]
    UnknownPlaceholder { name: String, at: usize },
    #[error("placeholder `{{{field}}}` at character {at}: conversions, format specs and indexing are not supported")]
    Unsupported { field: String, at: usize },
    #[error("a single `}}` at character {at} (write `}}}}` for a literal brace)")]
    SingleClosingBrace { at: usize },
    #[error("the `{{` at character {at} is never closed (write `{{{{` for a literal brace)")]
    Unclosed { at: usize },
}

impl PromptTemplate {
    /// Parses `text` as Python's `str.format` would read it with the two keyword arguments.
    pub fn parse(text: &str) -> Result<PromptTemplate, TemplateError> {
        let chars: Vec<char> = text.chars().collect();
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut idx = 0;
        while idx < chars.len() {
            match chars[idx] {
                '{' if chars.get(idx + 1) == Some(&'{') => {
                    literal.push('{');
                    idx += 2;
                }
                '}' if chars.get(idx + 1) == Some(&'}') => {
                    literal.push('}');
                    idx += 2;
                }
                '}' => return Err(TemplateError::SingleClosingBrace { at: idx }),
                '{' => {
                    // Python matches the field's closing brace counting nested ones (they
                    // belong to a format spec).
                    let start = idx;
                    let mut depth = 1;
                    let mut end = idx + 1;
                    while end < chars.len() {
                        match chars[end] {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        end += 1;
                    }
                    if end >= chars.len() {
                        return Err(TemplateError::Unclosed { at: start });
                    }
                    let field: String = chars[start + 1..end].iter().collect();
                    let part = match field.as_str() {
                        "instruction" => Part::Instruction,
                        "terminal_state" => Part::TerminalState,
                        _ if field.contains(['!', ':', '.', '[', '{']) => {
                            return Err(TemplateError::Unsupported { field, at: start });
                        }
                        _ => return Err(TemplateError::UnknownPlaceholder { name: field, at: start }),
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                    idx = end + 1;
                }
                c => {
                    literal.push(c);
                    idx += 1;
                }
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(PromptTemplate { parts })
    }

    /// The prompt: the values are inserted as they are (braces in them stay literal).
    pub fn render(&self, instruction: &str, terminal_state: &str) -> String {
        let mut out = String::new();
        for part in &self.parts {
            out.push_str(match part {
                Part::Text(text) => text,
                Part::Instruction => instruction,
                Part::TerminalState => terminal_state,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_escaped_braces_are_filled_as_python_does() {
        let template = PromptTemplate::parse("Task: {instruction}\nJSON: {{\"a\": 1}}\n{terminal_state}\n").unwrap();
        assert_eq!(template.render("do {x}", "$ "), "Task: do {x}\nJSON: {\"a\": 1}\n$ \n");
        let twice = PromptTemplate::parse("{instruction}{instruction}").unwrap();
        assert_eq!(twice.render("a", ""), "aa");
        assert_eq!(PromptTemplate::parse("no fields").unwrap().render("a", "b"), "no fields");
    }

    #[test]
    fn mistakes_are_named() {
        let err = |text: &str| PromptTemplate::parse(text).unwrap_err();
        assert_eq!(err("Hi {task}"), TemplateError::UnknownPlaceholder { name: "task".into(), at: 3 });
        assert_eq!(err("{}"), TemplateError::UnknownPlaceholder { name: String::new(), at: 0 });
        assert_eq!(err("{instruction!r}"), TemplateError::Unsupported { field: "instruction!r".into(), at: 0 });
        assert_eq!(err("{instruction:>{w}}"), TemplateError::Unsupported { field: "instruction:>{w}".into(), at: 0 });
        assert_eq!(err("a } b"), TemplateError::SingleClosingBrace { at: 2 });
        assert_eq!(err("a {instruction"), TemplateError::Unclosed { at: 2 });
        assert!(err("{task}").to_string().contains("`{task}`"), "{}", err("{task}"));
    }
}
