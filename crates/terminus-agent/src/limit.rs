//! Keeping observations to a size a model can take: the first and last 5,000 bytes of anything
//! longer than 10,000, with a marker saying how much was cut.

/// The reference's limit on one observation.
pub const MAX_OUTPUT_BYTES: usize = 10_000;

/// Limits `text` to about `max_bytes` UTF-8 bytes, keeping its head and tail. Partial UTF-8
/// sequences at the cut points are dropped. Applied once per observation.
pub fn limit_output(text: &str, max_bytes: usize) -> String {
    let bytes = text.as_bytes();
    if bytes.len() <= max_bytes {
        return text.to_string();
    }
    let half = max_bytes / 2;
    let head = decode_dropping_partial(&bytes[..half]);
    let tail = decode_dropping_partial(&bytes[bytes.len() - half..]);
    let omitted = bytes.len() - head.len() - tail.len();
    format!("{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}")
}

/// Decodes bytes as UTF-8, silently dropping invalid or cut sequences (Python's
/// `decode(errors="ignore")`).
fn decode_dropping_partial(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(limit_output("hello", 10_000), "hello");
        let exact = "x".repeat(10_000);
        assert_eq!(limit_output(&exact, 10_000), exact);
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let text = format!("{}{}{}", "a".repeat(5_000), "b".repeat(22_000), "c".repeat(5_000));
        let out = limit_output(&text, 10_000);
        assert!(out.starts_with(&"a".repeat(5_000)));
        assert!(out.ends_with(&"c".repeat(5_000)));
        assert!(out.contains("[... output limited to 10000 bytes; 22000 interior bytes omitted ...]"));
        assert!(!out.contains("bb"));
    }

    #[test]
    fn cut_multibyte_characters_are_dropped() {
        // 'é' is two bytes; an odd offset cuts one in half at the head boundary.
        let text = format!("a{}", "é".repeat(6_000));
        let out = limit_output(&text, 10_000);
        assert!(out.is_char_boundary(out.len()));
        let omitted: usize = out.split("; ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert_eq!(omitted, text.len() - 4_999 - 5_000);
    }
}
