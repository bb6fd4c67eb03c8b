//! Keeping secrets out of everything we write.
//!
//! Harbor writes secret-looking environment values as `${NAME}` templates when they equal the
//! host's value, and masks them otherwise. We do the same for every map of settings that reaches
//! a config dump, a result or a log.

use serde_json::Value;

/// Whether a key names something secret (API keys, tokens, passwords…).
pub fn is_secret_key(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    ["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "AUTH"].iter().any(|needle| upper.contains(needle))
}

/// Replaces the value of a secret key by a `${KEY}` template when the host has it set to the
/// same value, else by a mask that keeps only a hint of the value.
pub fn redact_value(key: &str, value: &str) -> String {
    if value.starts_with("${") {
        return value.to_string();
    }
    if std::env::var(key).ok().as_deref() == Some(value) {
        return format!("${{{key}}}");
    }
    mask(value)
}

/// Masks a secret: `abcd****xyz`, or `****` when it is too short to show anything.
pub fn mask(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    if chars.len() <= 8 {
        return "****".to_string();
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 3..].iter().collect();
    format!("{head}****{tail}")
}

/// Walks a JSON value and redacts every string stored under a secret-looking key.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    Value::String(text) if is_secret_key(key) => *text = redact_value(key, text),
                    _ => redact_json(inner),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_recognised() {
        assert!(is_secret_key("OPENAI_API_KEY"));
        assert!(is_secret_key("api_key"));
        assert!(is_secret_key("auth_token"));
        assert!(!is_secret_key("api_base"));
        assert!(!is_secret_key("model_name"));
    }

    #[test]
    fn redaction_reaches_nested_values() {
        let mut value = serde_json::json!({
            "agents": [{"kwargs": {"api_key": "sk-1234567890abcdef", "api_base": "http://x"}}]
        });
        redact_json(&mut value);
        let text = value.to_string();
        assert!(!text.contains("sk-1234567890abcdef"), "{text}");
        assert!(text.contains("http://x"));
        assert!(text.contains("sk-1****def"));
    }

    #[test]
    fn short_secrets_are_fully_masked() {
        assert_eq!(mask("abc"), "****");
    }
}
