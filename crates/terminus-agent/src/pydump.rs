//! The text of a trajectory file exactly as Harbor writes one:
//! Python's `json.dumps(data, indent=2)` — every non-ASCII character escaped as `\uXXXX`
//! (surrogate pairs beyond the BMP), `", "`-free two-space layout, floats in Python's `repr`
//! (`0.1`, `1e-05`, `60.0`), integers as integers — followed by the reference's rewrite that puts
//! every multi-line array of numbers (token ids, log-probabilities) on one line as `[a, b, c]`.
//!
//! Tools that compare files byte for byte with the reference's (or diff them) then see only real
//! differences. The writer is a `serde_json` formatter, so the text is made in one pass over the
//! data with no intermediate `Value`.

use std::io::{self, Write};
use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};

use crate::pyjson::py_float_repr;

/// `json.dumps(value, indent=2)` then the numeric-array collapse, as Harbor's
/// `format_trajectory_json` does. No trailing newline.
pub fn dumps_trajectory<T: Serialize>(value: &T) -> String {
    let mut out = Vec::with_capacity(4096);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonFormatter::default());
    if value.serialize(&mut serializer).is_err() {
        return String::new();
    }
    // The formatter writes ASCII only.
    let text = String::from_utf8(out).unwrap_or_default();
    collapse_numeric_arrays(text)
}

/// Python's layout and escapes on top of serde_json's pretty printer.
struct PythonFormatter {
    pretty: PrettyFormatter<'static>,
}

impl Default for PythonFormatter {
    fn default() -> Self {
        PythonFormatter { pretty: PrettyFormatter::with_indent(b"  ") }
    }
}

impl Formatter for PythonFormatter {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(py_float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }

    /// `ensure_ascii`: serde_json has already escaped quotes, backslashes and control
    /// characters as Python does; what is left to escape is DEL and everything past ASCII.
    fn write_string_fragment<W: ?Sized + Write>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()> {
        if fragment.bytes().all(|b| b < 0x7f) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut units = [0u16; 2];
        for c in fragment.chars() {
            if (c as u32) < 0x7f {
                writer.write_all(&[c as u8])?;
            } else {
                for unit in c.encode_utf16(&mut units) {
                    write!(writer, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }

    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_array(writer)
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        self.pretty.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_object(writer)
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        self.pretty.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.pretty.end_object_value(writer)
    }
}

/// The reference's rewrite: a `[` then numbers one per line then `]` becomes `[a, b, c]`
/// (the same patterns, so NaN or a nested array keeps its lines, as there).
fn collapse_numeric_arrays(text: String) -> String {
    const NUMBER: &str = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?";
    static ARRAY: OnceLock<Regex> = OnceLock::new();
    static ITEM: OnceLock<Regex> = OnceLock::new();
    let array = ARRAY.get_or_init(|| {
        Regex::new(&format!(r"\[\s*\n\s*{NUMBER}(?:\s*,\s*\n\s*{NUMBER})*\s*\n\s*\]")).expect("a valid pattern")
    });
    let item = ITEM.get_or_init(|| Regex::new(NUMBER).expect("a valid pattern"));
    if !array.is_match(&text) {
        // The usual case without rollout details: no copy of a long history.
        return text;
    }
    array
        .replace_all(&text, |found: &regex::Captures<'_>| {
            let numbers: Vec<&str> = item.find_iter(&found[0]).map(|m| m.as_str()).collect();
            format!("[{}]", numbers.join(", "))
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_what_pythons_json_dumps_writes() {
        // The expected text is `format_trajectory_json` of the same data, from CPython.
        let data = json!({
            "message": "caf\u{e9} \u{1f600} \u{7f} \"q\" \\ \n\t\u{1}",
            "duration": 60,
            "capped": 60.0,
            "temperature": 0.7,
            "cost_usd": 0.00045000000000000075,
            "tiny": 0.00001,
            "big": 1e16,
            "prompt_token_ids": [100, 101, 102],
            "logprobs": [-0.1, -0.2],
            "empty": [],
            "nested": [[1, 2], [3]],
            "none": {}
        });
        let expected = r#"{
  "message": "caf\u00e9 \ud83d\ude00 \u007f \"q\" \\ \n\t\u0001",
  "duration": 60,
  "capped": 60.0,
  "temperature": 0.7,
  "cost_usd": 0.00045000000000000075,
  "tiny": 1e-05,
  "big": 1e+16,
  "prompt_token_ids": [100, 101, 102],
  "logprobs": [-0.1, -0.2],
  "empty": [],
  "nested": [
    [1, 2],
    [3]
  ],
  "none": {}
}"#;
        assert_eq!(dumps_trajectory(&data), expected);
    }
}
