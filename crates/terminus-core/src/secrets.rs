//! Keeping secrets out of everything we write.
//!
//! Harbor writes secret-looking environment values as `${NAME}` templates when they equal the
//! host's value, and masks them otherwise. We do the same for every map of settings that reaches
//! a config dump, a result or a log.

use std::borrow::Cow;

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

/// Masks a secret, keeping at most four characters as a hint: `sk****ef` for a long value,
/// `****` for one under 16 characters (where even four would give too much away).
pub fn mask(value: &str) -> String {
    let chars: Vec<char> = value.chars().collect();
    if chars.len() < 16 {
        return "****".to_string();
    }
    let head: String = chars[..2].iter().collect();
    let tail: String = chars[chars.len() - 2..].iter().collect();
    format!("{head}****{tail}")
}

/// A URL without what may be a credential: `user:password@` becomes `****@`, and the value of a
/// secret-looking query parameter (`key`, `token`, `sig`…) is masked. Anything that is not a
/// URL comes back unchanged.
pub fn redact_url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else { return text.to_string() };
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("****@{host}"),
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let (query, fragment) = query.split_once('#').map_or((query, None), |(q, f)| (q, Some(f)));
            let params: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if is_secret_key(name) || name.eq_ignore_ascii_case("sig") => {
                        format!("{name}={}", mask(value))
                    }
                    _ => pair.to_string(),
                })
                .collect();
            let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
            format!("{path}?{}{fragment}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Whether a string looks like a URL that carries a credential.
fn has_url_secret(text: &str) -> bool {
    text.contains("://") && redact_url(text) != text
}

/// What [`redact_json`] makes of a string stored under `key` in an object: a secret key's value
/// masked, a URL's credentials removed (`api_base: https://user:key@host/v1?api-key=…` and the
/// like), anything else unchanged (borrowed).
pub fn redact_field<'a>(key: &str, text: &'a str) -> Cow<'a, str> {
    if names_a_variable(key, text) {
        Cow::Borrowed(text)
    } else if is_secret_key(key) {
        Cow::Owned(redact_value(key, text))
    } else if has_url_secret(text) {
        Cow::Owned(redact_url(text))
    } else {
        Cow::Borrowed(text)
    }
}

/// Keys whose value is the *name* of the variable holding a key (`api_key_env`, Harbor's
/// `model_api_key_name`): kept, so a resume reads the same name, as long as the value looks like
/// a variable's name (upper case, digits, `_`) — a pasted key does not, and is masked.
fn names_a_variable(key: &str, text: &str) -> bool {
    const NAME_KEYS: [&str; 2] = ["api_key_env", "model_api_key_name"];
    NAME_KEYS.contains(&key)
        && text.chars().next().is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && text.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// Walks a JSON value and redacts every string stored under a secret-looking key.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    Value::String(text) => {
                        if let Cow::Owned(redacted) = redact_field(key, text) {
                            *text = redacted;
                        }
                    }
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
    fn variable_names_are_kept_and_pasted_keys_masked() {
        assert_eq!(redact_field("model_api_key_name", "MY_LLM_KEY"), "MY_LLM_KEY");
        assert_eq!(redact_field("api_key_env", "OPENAI_API_KEY_2"), "OPENAI_API_KEY_2");
        assert_eq!(redact_field("model_api_key_name", "sk_live_0123456789abcdef"), "sk****ef");
        assert_eq!(redact_field("api_key", "MY_LLM_KEY"), "****", "a real key field is masked whatever it holds");
    }

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
        assert!(text.contains("sk****ef"), "{text}");
    }

    #[test]
    fn masks_show_at_most_four_characters() {
        assert_eq!(mask("abc"), "****");
        assert_eq!(mask("123456789"), "****", "a 9-character secret shows nothing");
        assert_eq!(mask("sk-1234567890abcdef"), "sk****ef");
        for secret in ["a".repeat(9), "b".repeat(15), "c".repeat(16), "d".repeat(100)] {
            let masked = mask(&secret);
            assert!(masked.chars().filter(|c| *c != '*').count() <= 4, "{masked}");
        }
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(redact_url("https://user:hunter2@proxy.example/v1"), "https://****@proxy.example/v1");
        assert_eq!(
            redact_url("https://x.openai.azure.com/v1?api-version=2024-06-01&api-key=abcdefghijklmnopqrstuvwxyz"),
            "https://x.openai.azure.com/v1?api-version=2024-06-01&api-key=ab****yz"
        );
        assert_eq!(redact_url("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080/v1");
        assert_eq!(redact_url("not a url"), "not a url");
        let mut value = serde_json::json!({"kwargs": {"api_base": "https://me:s3cr3t@host/v1"}});
        redact_json(&mut value);
        assert_eq!(value["kwargs"]["api_base"], "https://****@host/v1");
    }
}
