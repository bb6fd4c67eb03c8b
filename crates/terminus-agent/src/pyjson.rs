//! A JSON decoder that behaves like CPython's `json.loads` (3.12 and earlier): the same accepted
//! language (NaN, Infinity, -Infinity; duplicate keys keep the last value; raw control characters
//! in strings are rejected) and the same error messages with the same positions, e.g.
//! `Expecting property name enclosed in double quotes: line 1 column 2 (char 1)`.
//!
//! The reference parser's error feedback quotes these messages to the model, so matching them
//! keeps our feedback identical to Terminus 2's. Positions count characters, not bytes.
//!
//! Nesting is limited to [`MAX_DEPTH`] arrays and objects: a model stuck repeating `[` gets a
//! parse error it can read, instead of overflowing the stack of the whole orchestrator (CPython
//! raises a RecursionError there).

use std::cell::Cell;
use std::fmt;

/// The deepest nesting of arrays and objects decoded. Real replies nest three or four levels.
pub const MAX_DEPTH: usize = 200;

/// A decoded value with Python's distinctions (int vs float) kept.
#[derive(Clone, Debug, PartialEq)]
pub enum PyValue {
    None,
    Bool(bool),
    /// Integers as written (Python's are unbounded).
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<PyValue>),
    /// Keys in first-insertion order; a repeated key replaces the value in place, as a dict does.
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        match self {
            PyValue::Dict(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            PyValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Python truthiness.
    pub fn truthy(&self) -> bool {
        match self {
            PyValue::None => false,
            PyValue::Bool(b) => *b,
            PyValue::Int(text) => text.trim_start_matches('-').chars().any(|c| c != '0'),
            PyValue::Float(f) => *f != 0.0,
            PyValue::Str(s) => !s.is_empty(),
            PyValue::List(items) => !items.is_empty(),
            PyValue::Dict(items) => !items.is_empty(),
        }
    }

    /// `float(value)` for ints, floats and bools (Python counts bools as ints).
    pub fn as_number(&self) -> Option<f64> {
        match self {
            PyValue::Bool(b) => Some(f64::from(u8::from(*b))),
            PyValue::Int(text) => text.parse::<f64>().ok(),
            PyValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// Python's `str(value)`.
    pub fn py_str(&self) -> String {
        match self {
            PyValue::Str(s) => s.clone(),
            other => other.py_repr(),
        }
    }

    /// Python's `repr(value)`.
    pub fn py_repr(&self) -> String {
        match self {
            PyValue::None => "None".into(),
            PyValue::Bool(true) => "True".into(),
            PyValue::Bool(false) => "False".into(),
            PyValue::Int(text) => text.clone(),
            PyValue::Float(f) => py_float_repr(*f),
            PyValue::Str(s) => crate::pyrepr::py_repr(s),
            PyValue::List(items) => format!("[{}]", items.iter().map(PyValue::py_repr).collect::<Vec<_>>().join(", ")),
            PyValue::Dict(items) => format!(
                "{{{}}}",
                items
                    .iter()
                    .map(|(k, v)| format!("{}: {}", crate::pyrepr::py_repr(k), v.py_repr()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Python's `repr(float)`: shortest round-trip digits, `.0` for integral values, `inf`/`nan`,
/// exponent notation outside [1e-4, 1e16).
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // Rust's `{:e}` gives the shortest digits as `1e-5` / `1.5e20`; Python writes `1e-05`, `1.5e+20`.
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i32 = exponent.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let text = format!("{f}");
    if text.contains('.') { text } else { format!("{text}.0") }
}

/// A decoding error, worded and positioned as CPython's `JSONDecodeError`.
#[derive(Clone, Debug, PartialEq)]
pub struct PyJsonError {
    pub msg: &'static str,
    /// Character offset.
    pub pos: usize,
    pub lineno: usize,
    pub colno: usize,
}

impl fmt::Display for PyJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: line {} column {} (char {})", self.msg, self.lineno, self.colno, self.pos)
    }
}

/// `json.loads(text)`.
pub fn loads(text: &str) -> Result<PyValue, PyJsonError> {
    let chars: Vec<char> = text.chars().collect();
    let decoder = Decoder { s: &chars, depth: Cell::new(0) };
    let start = decoder.skip_ws(0);
    let (value, end) = match decoder.scan_once(start) {
        Ok(found) => found,
        Err(Failure::Stop(idx)) => return Err(decoder.error("Expecting value", idx)),
        Err(Failure::Error(e)) => return Err(e),
    };
    let end = decoder.skip_ws(end);
    if end != chars.len() {
        return Err(decoder.error("Extra data", end));
    }
    Ok(value)
}

enum Failure {
    /// Nothing decodable starts at this index (Python's StopIteration).
    Stop(usize),
    Error(PyJsonError),
}

struct Decoder<'a> {
    s: &'a [char],
    /// Arrays and objects open at this point.
    depth: Cell<usize>,
}

fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

impl Decoder<'_> {
    fn error(&self, msg: &'static str, pos: usize) -> PyJsonError {
        let before = &self.s[..pos.min(self.s.len())];
        let lineno = before.iter().filter(|c| **c == '\n').count() + 1;
        let colno = match before.iter().rposition(|c| *c == '\n') {
            Some(nl) => pos - nl,
            None => pos + 1,
        };
        PyJsonError { msg, pos, lineno, colno }
    }

    fn fail(&self, msg: &'static str, pos: usize) -> Failure {
        Failure::Error(self.error(msg, pos))
    }

    fn skip_ws(&self, mut idx: usize) -> usize {
        while idx < self.s.len() && is_ws(self.s[idx]) {
            idx += 1;
        }
        idx
    }

    fn starts_with(&self, idx: usize, word: &str) -> bool {
        let word: Vec<char> = word.chars().collect();
        self.s.len() >= idx + word.len() && self.s[idx..idx + word.len()] == word[..]
    }

    fn scan_once(&self, idx: usize) -> Result<(PyValue, usize), Failure> {
        let Some(&c) = self.s.get(idx) else { return Err(Failure::Stop(idx)) };
        match c {
            '"' => return self.scan_string(idx + 1).map(|(s, end)| (PyValue::Str(s), end)),
            '{' | '[' => {
                if self.depth.get() >= MAX_DEPTH {
                    return Err(self.fail("Nesting too deep", idx));
                }
                self.depth.set(self.depth.get() + 1);
                let parsed = if c == '{' { self.parse_object(idx + 1) } else { self.parse_array(idx + 1) };
                self.depth.set(self.depth.get() - 1);
                return parsed;
            }
            'n' if self.starts_with(idx, "null") => return Ok((PyValue::None, idx + 4)),
            't' if self.starts_with(idx, "true") => return Ok((PyValue::Bool(true), idx + 4)),
            'f' if self.starts_with(idx, "false") => return Ok((PyValue::Bool(false), idx + 5)),
            'N' if self.starts_with(idx, "NaN") => return Ok((PyValue::Float(f64::NAN), idx + 3)),
            'I' if self.starts_with(idx, "Infinity") => return Ok((PyValue::Float(f64::INFINITY), idx + 8)),
            '-' if self.starts_with(idx, "-Infinity") => return Ok((PyValue::Float(f64::NEG_INFINITY), idx + 9)),
            _ => {}
        }
        self.match_number(idx)
    }

    fn match_number(&self, start: usize) -> Result<(PyValue, usize), Failure> {
        let s = self.s;
        let digit = |i: usize| s.get(i).is_some_and(char::is_ascii_digit);
        let mut idx = start;
        if s.get(idx) == Some(&'-') {
            idx += 1;
        }
        match s.get(idx) {
            Some('1'..='9') => {
                idx += 1;
                while digit(idx) {
                    idx += 1;
                }
            }
            Some('0') => idx += 1,
            _ => return Err(Failure::Stop(start)),
        }
        let mut is_float = false;
        if s.get(idx) == Some(&'.') && digit(idx + 1) {
            is_float = true;
            idx += 2;
            while digit(idx) {
                idx += 1;
            }
        }
        if matches!(s.get(idx), Some('e' | 'E')) {
            let e_start = idx;
            idx += 1;
            if matches!(s.get(idx), Some('+' | '-')) {
                idx += 1;
            }
            let digits_start = idx;
            while digit(idx) {
                idx += 1;
            }
            if idx > digits_start {
                is_float = true;
            } else {
                idx = e_start;
            }
        }
        let text: String = s[start..idx].iter().collect();
        let value = if is_float { PyValue::Float(text.parse().unwrap_or(f64::NAN)) } else { PyValue::Int(text) };
        Ok((value, idx))
    }

    /// Decodes a string whose opening quote is at `end - 1`.
    fn scan_string(&self, end: usize) -> Result<(String, usize), Failure> {
        let s = self.s;
        let begin = end - 1;
        let mut out = String::new();
        let mut end = end;
        loop {
            let mut next = end;
            let mut terminator = None;
            while next < s.len() {
                let c = s[next];
                if c == '"' || c == '\\' {
                    terminator = Some(c);
                    break;
                }
                if (c as u32) <= 0x1f {
                    return Err(self.fail("Invalid control character at", next));
                }
                out.push(c);
                next += 1;
            }
            let Some(terminator) = terminator else { return Err(self.fail("Unterminated string starting at", begin)) };
            next += 1;
            if terminator == '"' {
                return Ok((out, next));
            }
            if next == s.len() {
                return Err(self.fail("Unterminated string starting at", begin));
            }
            let escaped = s[next];
            if escaped != 'u' {
                end = next + 1;
                let decoded = match escaped {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    _ => return Err(self.fail("Invalid \\escape", end - 2)),
                };
                out.push(decoded);
                continue;
            }
            let hex_start = next + 1;
            end = hex_start + 4;
            if end >= s.len() {
                return Err(self.fail("Invalid \\uXXXX escape", hex_start - 1));
            }
            let Some(high) = hex4(&s[hex_start..end]) else { return Err(self.fail("Invalid \\uXXXX escape", end - 5)) };
            let mut code = high;
            if (0xd800..0xdc00).contains(&high) && end + 6 < s.len() && s[end] == '\\' && s[end + 1] == 'u' {
                let Some(low) = hex4(&s[end + 2..end + 6]) else {
                    return Err(self.fail("Invalid \\uXXXX escape", end + 1));
                };
                if (0xdc00..0xe000).contains(&low) {
                    code = 0x10000 + (((high - 0xd800) << 10) | (low - 0xdc00));
                    end += 6;
                }
            }
            // A lone surrogate has no Rust `char`; it becomes U+FFFD.
            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
        }
    }

    fn parse_object(&self, start: usize) -> Result<(PyValue, usize), Failure> {
        let s = self.s;
        let mut items: Vec<(String, PyValue)> = Vec::new();
        let mut idx = self.skip_ws(start);
        if s.get(idx) != Some(&'}') {
            loop {
                if s.get(idx) != Some(&'"') {
                    return Err(self.fail("Expecting property name enclosed in double quotes", idx));
                }
                let (key, next) = self.scan_string(idx + 1)?;
                idx = self.skip_ws(next);
                if s.get(idx) != Some(&':') {
                    return Err(self.fail("Expecting ':' delimiter", idx));
                }
                idx = self.skip_ws(idx + 1);
                let (value, next) = self.scan_once(idx)?;
                match items.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = value,
                    None => items.push((key, value)),
                }
                idx = self.skip_ws(next);
                if s.get(idx) == Some(&'}') {
                    break;
                }
                if s.get(idx) != Some(&',') {
                    return Err(self.fail("Expecting ',' delimiter", idx));
                }
                idx = self.skip_ws(idx + 1);
            }
        }
        Ok((PyValue::Dict(items), idx + 1))
    }

    fn parse_array(&self, start: usize) -> Result<(PyValue, usize), Failure> {
        let s = self.s;
        let mut items = Vec::new();
        let mut idx = self.skip_ws(start);
        if s.get(idx) != Some(&']') {
            loop {
                let (value, next) = self.scan_once(idx)?;
                items.push(value);
                idx = self.skip_ws(next);
                if s.get(idx) == Some(&']') {
                    break;
                }
                if s.get(idx) != Some(&',') {
                    return Err(self.fail("Expecting ',' delimiter", idx));
                }
                idx = self.skip_ws(idx + 1);
            }
        }
        Ok((PyValue::List(items), idx + 1))
    }
}

fn hex4(digits: &[char]) -> Option<u32> {
    digits.iter().try_fold(0u32, |acc, c| c.to_digit(16).map(|d| acc * 16 + d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each expected message below was produced by CPython 3.11's `json.loads` on the same input.
    #[test]
    fn error_messages_match_cpython() {
        let cases = [
            ("{'analysis':'a'}", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
            ("{\"a\":1,}", "Expecting property name enclosed in double quotes: line 1 column 8 (char 7)"),
            ("{\"a\": \"x\ny\"}", "Invalid control character at: line 1 column 9 (char 8)"),
            ("{\"a\" 1}", "Expecting ':' delimiter: line 1 column 6 (char 5)"),
            ("{\"a\": 1 \"b\": 2}", "Expecting ',' delimiter: line 1 column 9 (char 8)"),
            ("{\"a\": }", "Expecting value: line 1 column 7 (char 6)"),
            ("{\"a\": \"abc", "Unterminated string starting at: line 1 column 7 (char 6)"),
            ("{\"a\": [1, 2,]}", "Expecting value: line 1 column 13 (char 12)"),
            ("{\"a\": \"\\q\"}", "Invalid \\escape: line 1 column 8 (char 7)"),
            ("{\"a\": \"\\u12\"}", "Invalid \\uXXXX escape: line 1 column 9 (char 8)"),
            ("{}\n{}", "Extra data: line 2 column 1 (char 3)"),
            ("", "Expecting value: line 1 column 1 (char 0)"),
            ("{\n  \"a\": 1,\n  \"b\": tru\n}", "Expecting value: line 3 column 8 (char 19)"),
            ("{\"é\": x}", "Expecting value: line 1 column 7 (char 6)"),
        ];
        for (input, want) in cases {
            assert_eq!(loads(input).unwrap_err().to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        for opener in ["[", "{\"a\": "] {
            let deep = opener.repeat(1_000_000);
            let error = loads(&deep).unwrap_err();
            assert_eq!(error.msg, "Nesting too deep");
            assert_eq!(error.pos, MAX_DEPTH * opener.chars().count(), "at the first opener too many");
        }
        let nested = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(loads(&nested).is_ok(), "the limit itself is accepted");
    }

    #[test]
    fn python_extensions_and_dict_semantics() {
        let value =
            loads(r#"{"a": NaN, "b": -Infinity, "a": 2, "c": [1, 2.5e3, true, null], "d": "\ud83d\ude00"}"#).unwrap();
        let PyValue::Dict(items) = &value else { panic!() };
        assert_eq!(items.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["a", "b", "c", "d"]);
        assert_eq!(value.get("a"), Some(&PyValue::Int("2".into())));
        assert_eq!(value.get("b"), Some(&PyValue::Float(f64::NEG_INFINITY)));
        assert_eq!(value.get("c").unwrap().py_repr(), "[1, 2500.0, True, None]");
        assert_eq!(value.get("d").unwrap().as_str(), Some("😀"));
    }

    #[test]
    fn float_reprs_match_python() {
        assert_eq!(py_float_repr(0.1), "0.1");
        assert_eq!(py_float_repr(60.0), "60.0");
        assert_eq!(py_float_repr(1e-5), "1e-05");
        assert_eq!(py_float_repr(1.5e20), "1.5e+20");
        assert_eq!(py_float_repr(0.00045000000000000075), "0.00045000000000000075");
    }
}
