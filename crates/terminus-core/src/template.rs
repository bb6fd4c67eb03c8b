//! A text the model is shown, as a template read in the style of Python's `str.format`, which is
//! how the reference fills its own (`template.format(instruction=…, terminal_state=…)`): each
//! `{name}` of the template's known placeholders is replaced, `{{` and `}}` are literal braces.
//! The first prompt's template (the `prompt_template` agent kwarg) knows `{instruction}` and
//! `{terminal_state}`; each of the other texts (`texts.rs`) its own names.
//!
//! A template is checked when the job is loaded, so a typo is a configuration error naming the
//! placeholder before any container starts, not a failed trial. Python's conversions (`!r`),
//! format specs (`:>10`), indexing and positional fields have no use with these strings and are
//! refused rather than half supported.

/// The placeholders of the first prompt.
pub const FIRST_PROMPT_FIELDS: &[&str] = &["instruction", "terminal_state"];

/// A parsed template: literal text and placeholders (by their index among the known names), in
/// order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(usize),
}

/// Why a template cannot be used. Positions count characters from 0, as Python's do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error(
        "unknown placeholder `{{{name}}}` at character {at}; the known ones are {known} (write `{{{{` and `}}}}` for literal braces)"
    )]
    UnknownPlaceholder { name: String, at: usize, known: String },
    #[error("placeholder `{{{field}}}` at character {at}: conversions, format specs and indexing are not supported")]
    Unsupported { field: String, at: usize },
    #[error("a single `}}` at character {at} (write `}}}}` for a literal brace)")]
    SingleClosingBrace { at: usize },
    #[error("the `{{` at character {at} is never closed (write `{{{{` for a literal brace)")]
    Unclosed { at: usize },
}

impl PromptTemplate {
    /// Parses a first prompt's template (`{instruction}`, `{terminal_state}`).
    pub fn parse(text: &str) -> Result<PromptTemplate, TemplateError> {
        PromptTemplate::parse_with(text, FIRST_PROMPT_FIELDS)
    }

    /// Parses `text` as Python's `str.format` would read it with `fields` as keyword arguments.
    pub fn parse_with(text: &str, fields: &[&str]) -> Result<PromptTemplate, TemplateError> {
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
                    let part = match fields.iter().position(|f| *f == field) {
                        Some(index) => Part::Field(index),
                        None if field.contains(['!', ':', '.', '[', '{']) => {
                            return Err(TemplateError::Unsupported { field, at: start });
                        }
                        None => {
                            let known = if fields.is_empty() {
                                "none".to_string()
                            } else {
                                fields.iter().map(|f| format!("{{{f}}}")).collect::<Vec<_>>().join(", ")
                            };
                            return Err(TemplateError::UnknownPlaceholder { name: field, at: start, known });
                        }
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

    /// The first prompt: the values are inserted as they are (braces in them stay literal).
    pub fn render(&self, instruction: &str, terminal_state: &str) -> String {
        self.fill(&[instruction, terminal_state])
    }

    /// The text with `values` (in the order of the names it was parsed with) inserted as they
    /// are.
    pub fn fill(&self, values: &[&str]) -> String {
        let mut out = String::new();
        for part in &self.parts {
            out.push_str(match part {
                Part::Text(text) => text,
                Part::Field(index) => values.get(*index).copied().unwrap_or_default(),
            });
        }
        out
    }

    /// The placeholders used, by index.
    pub fn uses(&self, index: usize) -> bool {
        self.parts.contains(&Part::Field(index))
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
        let known = "{instruction}, {terminal_state}".to_string();
        assert_eq!(
            err("Hi {task}"),
            TemplateError::UnknownPlaceholder { name: "task".into(), at: 3, known: known.clone() }
        );
        assert_eq!(err("{}"), TemplateError::UnknownPlaceholder { name: String::new(), at: 0, known });
        assert_eq!(err("{instruction!r}"), TemplateError::Unsupported { field: "instruction!r".into(), at: 0 });
        assert_eq!(err("{instruction:>{w}}"), TemplateError::Unsupported { field: "instruction:>{w}".into(), at: 0 });
        assert_eq!(err("a } b"), TemplateError::SingleClosingBrace { at: 2 });
        assert_eq!(err("a {instruction"), TemplateError::Unclosed { at: 2 });
        assert!(err("{task}").to_string().contains("`{task}`"), "{}", err("{task}"));
    }
}
