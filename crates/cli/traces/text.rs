//! Python's text of JSON values and numbers, as Harbor's exporter makes it:
//! `json.dumps(value, ensure_ascii=False)` (`", "` and `": "` between items; with `indent=2`,
//! one item a line) and `float(text)`.

use serde_json::Value;

use terminus_agent::pyjson::py_float_repr;

/// `json.dumps(value, ensure_ascii=False)`, or with `indent=2` when `indented`.
pub fn dumps(value: &Value, indented: bool) -> String {
    let mut out = String::new();
    write(&mut out, value, indented.then_some(0));
    out
}

fn write(out: &mut String, value: &Value, depth: Option<usize>) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (_, Some(u), _) => out.push_str(&u.to_string()),
            (_, _, Some(f)) => out.push_str(&py_float_repr(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separator(out, i, depth);
                write(out, item, depth.map(|d| d + 1));
            }
            close(out, depth);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                separator(out, i, depth);
                string(out, key);
                out.push_str(": ");
                write(out, item, depth.map(|d| d + 1));
            }
            close(out, depth);
            out.push('}');
        }
    }
}

/// Before the `i`th item: `, ` on one line, or `,` and a new indented line.
fn separator(out: &mut String, i: usize, depth: Option<usize>) {
    match depth {
        None if i > 0 => out.push_str(", "),
        None => {}
        Some(depth) => {
            if i > 0 {
                out.push(',');
            }
            out.push('\n');
            out.push_str(&"  ".repeat(depth + 1));
        }
    }
}

fn close(out: &mut String, depth: Option<usize>) {
    if let Some(depth) = depth {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    }
}

/// A JSON string as Python writes it with `ensure_ascii=False`: only `"`, `\` and control
/// characters escaped.
fn string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `float(text)`: surrounding whitespace allowed, `inf`/`nan` spelled out, `_` between
/// digits; None where Python raises.
pub fn parse_python_float(text: &str) -> Option<f64> {
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    if matches!(unsigned, "inf" | "infinity" | "nan") {
        return lower.parse::<f64>().ok().or(Some(f64::NAN));
    }
    if text.contains("__") || text.starts_with('_') || text.ends_with('_') {
        return None;
    }
    let digits = text.replace('_', "");
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E')) {
        return None;
    }
    digits.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_written_as_pythons_json_dumps_writes_them() {
        let value = json!({"name": "bash", "arguments": {"cmd": "ls -la\n", "n": 1, "x": 0.1, "big": 1e16, "é": "ü\u{1}"}, "e": [], "o": {}});
        assert_eq!(
            dumps(&value, false),
            r#"{"name": "bash", "arguments": {"cmd": "ls -la\n", "n": 1, "x": 0.1, "big": 1e+16, "é": "ü\u0001"}, "e": [], "o": {}}"#
        );
        assert_eq!(
            dumps(&json!([{"a": [1, 2]}, "b"]), true),
            "[\n  {\n    \"a\": [\n      1,\n      2\n    ]\n  },\n  \"b\"\n]"
        );
    }

    #[test]
    fn floats_parse_as_pythons_float_parses_them() {
        assert_eq!(parse_python_float(" 1 "), Some(1.0));
        assert_eq!(parse_python_float("1_000.5"), Some(1000.5));
        assert_eq!(parse_python_float("-inf"), Some(f64::NEG_INFINITY));
        assert!(parse_python_float("nan").unwrap().is_nan());
        for bad in ["", "AgentTimeoutError", "1__0", "_1", "0x10"] {
            assert_eq!(parse_python_float(bad), None, "{bad}");
        }
    }
}
