//! A trajectory's steps found without parsing them: one pass over the file's bytes notes where
//! each element of the top-level `steps` array starts and ends, and parses only what is not a
//! step (schema, session, agent, final metrics: a few kilobytes). A page of steps is then read
//! by seeking to its bytes. So a trajectory of any size opens in the time one pass over it
//! takes, and memory holds its offsets, never its steps.
//!
//! The scanner knows JSON's structure only: strings (with their escapes) and nesting. Whether
//! each step is valid JSON is found when its page is parsed.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

/// Where a trajectory's steps are, and its other fields.
#[derive(Debug)]
pub struct StepIndex {
    /// Byte range of each step, in order.
    pub steps: Vec<(u64, u64)>,
    /// The document without its `steps`.
    pub document: Value,
}

/// Why a file could not be indexed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a trajectory: {0}")]
    Shape(String),
}

/// The scanner's place in the document.
struct Scanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The last top-level key read, while its value is awaited.
    key: Option<Vec<u8>>,
    /// Collecting a top-level key's bytes.
    key_bytes: Option<Vec<u8>>,
    /// Inside the `steps` array (its depth is 2).
    in_steps: bool,
    steps_seen: bool,
    /// The element being read: its start.
    element: Option<u64>,
    /// The last byte of the element that is not white space.
    element_last: u64,
    steps: Vec<(u64, u64)>,
    /// The document's bytes without the steps array's content.
    rest: Vec<u8>,
}

/// The most the non-step fields may hold (a trajectory's header and metrics are small).
const MAX_REST: usize = 16 * 1024 * 1024;

impl Scanner {
    fn new() -> Scanner {
        Scanner {
            depth: 0,
            in_string: false,
            escaped: false,
            key: None,
            key_bytes: None,
            in_steps: false,
            steps_seen: false,
            element: None,
            element_last: 0,
            steps: Vec::new(),
            rest: Vec::new(),
        }
    }

    fn feed(&mut self, chunk: &[u8], base: u64) -> Result<(), IndexError> {
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            let at = base + i as u64;
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                } else {
                    // Jump to the next quote or backslash: most of a trajectory is string bytes.
                    let skip = memchr::memchr2(b'"', b'\\', &chunk[i..]).unwrap_or(chunk.len() - i);
                    self.copy(&chunk[i..i + skip], at + skip as u64 - 1, true);
                    i += skip;
                    continue;
                }
                self.copy(&chunk[i..=i], at, true);
                i += 1;
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.key.is_none() && !self.in_steps {
                        self.key_bytes = Some(Vec::new());
                    }
                    self.start_element(at);
                }
                b'{' | b'[' => {
                    if self.depth == 1 && b == b'[' && self.key.as_deref() == Some(&b"steps"[..]) && !self.steps_seen {
                        self.in_steps = true;
                        self.steps_seen = true;
                        self.rest.push(b'[');
                        self.depth += 1;
                        i += 1;
                        continue;
                    }
                    self.start_element(at);
                    self.depth += 1;
                }
                b'}' | b']' => {
                    if self.depth == 0 {
                        return Err(IndexError::Shape(format!("an unmatched `{}` at byte {at}", b as char)));
                    }
                    if self.in_steps && self.depth == 2 {
                        // The steps array closes.
                        self.end_element();
                        self.in_steps = false;
                        self.key = None;
                        self.depth -= 1;
                        self.rest.push(b']');
                        i += 1;
                        continue;
                    }
                    self.depth -= 1;
                    if self.depth == 1 {
                        self.key = None;
                    }
                }
                b',' => {
                    if self.in_steps && self.depth == 2 {
                        self.end_element();
                        i += 1;
                        continue;
                    }
                    if self.depth == 1 {
                        self.key = None;
                    }
                }
                b':' if self.depth == 1 => {
                    self.key = self.key_bytes.take();
                }
                b' ' | b'\n' | b'\r' | b'\t' => {
                    if !self.in_steps || self.depth > 2 {
                        self.copy(&chunk[i..=i], at, false);
                    }
                    i += 1;
                    continue;
                }
                _ => self.start_element(at),
            }
            self.copy(&chunk[i..=i], at, false);
            i += 1;
        }
        if self.rest.len() > MAX_REST {
            return Err(IndexError::Shape("its fields besides the steps exceed 16 MiB".into()));
        }
        Ok(())
    }

    /// A value starts at `at`: inside the steps array at its own depth, a new step.
    fn start_element(&mut self, at: u64) {
        if self.in_steps && self.depth == 2 && self.element.is_none() {
            self.element = Some(at);
        }
    }

    fn end_element(&mut self) {
        if let Some(start) = self.element.take() {
            self.steps.push((start, self.element_last + 1));
        }
    }

    /// Bytes read (ending at `last`): a step's are only noted, the rest kept.
    fn copy(&mut self, bytes: &[u8], last: u64, in_string: bool) {
        if self.in_steps && self.depth >= 2 {
            if !bytes.is_empty() {
                self.element_last = last;
            }
            return;
        }
        if in_string && let Some(key) = &mut self.key_bytes {
            // The key's own text, without its quotes.
            key.extend(bytes.iter().filter(|b| **b != b'"'));
        }
        self.rest.extend_from_slice(bytes);
    }
}

/// Indexes the trajectory at `path`.
pub fn index(path: &Path) -> Result<StepIndex, IndexError> {
    let mut file = std::fs::File::open(path)?;
    let mut scanner = Scanner::new();
    let mut buf = vec![0u8; 4 << 20];
    let mut base = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        scanner.feed(&buf[..n], base)?;
        base += n as u64;
    }
    if scanner.depth != 0 || scanner.in_string {
        return Err(IndexError::Shape("the document is cut short".into()));
    }
    let mut document: Value =
        serde_json::from_slice(&scanner.rest).map_err(|e| IndexError::Shape(format!("its fields: {e}")))?;
    if let Some(map) = document.as_object_mut() {
        map.remove("steps");
    } else {
        return Err(IndexError::Shape("not an object".into()));
    }
    Ok(StepIndex { steps: scanner.steps, document })
}

/// Steps `from..to` of an indexed file, parsed.
pub fn read_steps(path: &Path, index: &StepIndex, from: usize, to: usize) -> Result<Vec<Value>, IndexError> {
    let mut file = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for &(start, end) in index.steps.get(from..to).unwrap_or_default() {
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = vec![0u8; (end - start) as usize];
        file.read_exact(&mut bytes)?;
        out.push(serde_json::from_slice(&bytes).map_err(|e| IndexError::Shape(format!("step at byte {start}: {e}")))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn indexed(text: &str, chunk: usize) -> (StepIndex, Vec<Value>) {
        let mut scanner = Scanner::new();
        for (n, part) in text.as_bytes().chunks(chunk).enumerate() {
            scanner.feed(part, (n * chunk) as u64).unwrap();
        }
        let mut document: Value = serde_json::from_slice(&scanner.rest).unwrap();
        document.as_object_mut().unwrap().remove("steps");
        let steps =
            scanner.steps.iter().map(|&(a, b)| serde_json::from_str(&text[a as usize..b as usize]).unwrap()).collect();
        (StepIndex { steps: scanner.steps, document }, steps)
    }

    #[test]
    fn steps_are_found_whatever_their_strings_hold_and_the_rest_is_parsed() {
        let doc = json!({
            "schema_version": "ATIF-v1.8",
            "agent": {"name": "terminus-2", "extra": {"steps": [1, 2], "q": "a \"steps\": [ ] } string"}},
            "steps": [
                {"step_id": 1, "message": "brackets ] } [ { and \\\"quotes\\\" and \\\\"},
                {"step_id": 2, "message": "ü ✓", "observation": {"results": [{"content": "a,b"}]}},
                {"step_id": 3, "message": ""}
            ],
            "final_metrics": {"total_prompt_tokens": 5}
        });
        for text in [serde_json::to_string(&doc).unwrap(), serde_json::to_string_pretty(&doc).unwrap()] {
            for chunk in [1, 3, 7, 4096] {
                let (index, steps) = indexed(&text, chunk);
                assert_eq!(steps, doc["steps"].as_array().unwrap().clone(), "chunk {chunk}");
                let mut rest = doc.clone();
                rest.as_object_mut().unwrap().remove("steps");
                assert_eq!(index.document, rest);
            }
        }
        let empty = json!({"steps": [], "x": 1}).to_string();
        let (index, _) = indexed(&empty, 5);
        assert!(index.steps.is_empty());
        assert_eq!(index.document, json!({"x": 1}));
    }

    #[test]
    fn a_file_is_paged_by_seeking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trajectory.json");
        let steps: Vec<Value> = (0..50).map(|i| json!({"step_id": i, "message": "x".repeat(i * 10)})).collect();
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&json!({"steps": steps.clone(), "final_metrics": {}})).unwrap(),
        )
        .unwrap();
        let index = index(&path).unwrap();
        assert_eq!(index.steps.len(), 50);
        assert_eq!(read_steps(&path, &index, 10, 13).unwrap(), steps[10..13].to_vec());
        std::fs::write(&path, "{\"steps\": [{\"a\": 1}").unwrap();
        assert!(super::index(&path).is_err(), "cut short");
    }
}
