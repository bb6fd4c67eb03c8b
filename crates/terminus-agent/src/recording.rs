//! asciicast v2 recordings: the encoder the orchestrator writes a terminal's recording with
//! (a header, then one `[seconds, "o", text]` event per chunk of the pane's output, timed by the
//! host's clock), and the merge of the loop's episode markers into it, so a player shows where
//! each episode began.

use serde_json::{Value, json};

/// Inserts `[t, "m", label]` marker events into an asciicast v2 text: each marker goes before the
/// first event at or after its time; markers later than every event go at the end. The header
/// line is kept as it is. Lines that are not events are kept where they are.
pub fn merge_markers(cast: &str, markers: &[(f64, String)]) -> String {
    let mut markers: Vec<&(f64, String)> = markers.iter().collect();
    markers.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut pending = markers.into_iter().peekable();
    let mut out = String::with_capacity(cast.len() + 64);
    let mut lines = cast.lines();
    if let Some(header) = lines.next() {
        out.push_str(header);
        out.push('\n');
    }
    for line in lines {
        let time = serde_json::from_str::<Value>(line).ok().and_then(|v| v.get(0).and_then(Value::as_f64));
        if let Some(time) = time {
            while let Some((at, label)) = pending.next_if(|(at, _)| *at <= time) {
                out.push_str(&json!([round6(*at), "m", label]).to_string());
                out.push('\n');
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    for (at, label) in pending {
        out.push_str(&json!([round6(*at), "m", label]).to_string());
        out.push('\n');
    }
    out
}

/// The header line of a cast for a `width` × `height` terminal started at `timestamp` (Unix
/// seconds), with the terminal's `TERM` and `SHELL` as a player expects them.
pub fn cast_header(width: u32, height: u32, timestamp: u64, term: &str, shell: &str) -> String {
    let header = json!({
        "version": 2,
        "width": width,
        "height": height,
        "timestamp": timestamp,
        "env": {"SHELL": shell, "TERM": term},
    });
    format!("{header}\n")
}

/// Turns chunks of a terminal's raw output into output events. A character split across two
/// chunks waits for the second; bytes that are no UTF-8 become U+FFFD (as asciinema writes them).
#[derive(Debug, Default)]
pub struct CastEncoder {
    carry: Vec<u8>,
    last: f64,
}

impl CastEncoder {
    /// The event line for `bytes` output `at` seconds after the recording started (never
    /// before the previous event), or None when the chunk held only part of a character.
    pub fn output(&mut self, at: f64, bytes: &[u8]) -> Option<String> {
        let text = terminus_core::utf8::decode_utf8(&mut self.carry, bytes);
        if text.is_empty() {
            return None;
        }
        self.last = round6(at.max(self.last));
        Some(format!("{}\n", json!([self.last, "o", text])))
    }
}

fn round6(t: f64) -> f64 {
    (t * 1e6).round() / 1e6
}

/// Whether a text is a playable asciicast v2 file: a header with version 2 and a size, then
/// events `[time, type, data]` with non-decreasing times.
pub fn is_valid_cast(cast: &str) -> Result<usize, String> {
    let mut lines = cast.lines();
    let header: Value = serde_json::from_str(lines.next().ok_or("empty file")?).map_err(|e| format!("header: {e}"))?;
    if header.get("version") != Some(&json!(2)) || header.get("width").is_none() || header.get("height").is_none() {
        return Err(format!("not an asciicast v2 header: {header}"));
    }
    let mut last = 0.0;
    let mut n = 0;
    for (idx, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: Value = serde_json::from_str(line).map_err(|e| format!("event {idx}: {e}"))?;
        let time = event.get(0).and_then(Value::as_f64).ok_or(format!("event {idx} has no time"))?;
        let kind = event.get(1).and_then(Value::as_str).ok_or(format!("event {idx} has no type"))?;
        if !matches!(kind, "o" | "i" | "m" | "r") || event.get(2).is_none() {
            return Err(format!("event {idx} is malformed: {line}"));
        }
        if time + 1e-9 < last {
            return Err(format!("event {idx} goes back in time"));
        }
        last = time;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAST: &str = "{\"version\": 2, \"width\": 80, \"height\": 24}\n[0.5, \"o\", \"a\"]\n[1.5, \"o\", \"b\"]\n";

    #[test]
    fn markers_land_in_time_order() {
        let merged =
            merge_markers(CAST, &[(2.0, "late".into()), (1.0, "Episode 0: 1 commands".into()), (0.5, "same".into())]);
        let lines: Vec<&str> = merged.lines().collect();
        assert_eq!(lines[1], "[0.5,\"m\",\"same\"]");
        assert_eq!(lines[2], "[0.5, \"o\", \"a\"]");
        assert_eq!(lines[3], "[1.0,\"m\",\"Episode 0: 1 commands\"]");
        assert_eq!(lines[5], "[2.0,\"m\",\"late\"]");
        assert_eq!(is_valid_cast(&merged), Ok(5));
    }

    #[test]
    fn invalid_casts_are_reported() {
        assert!(is_valid_cast("").is_err());
        assert!(is_valid_cast("{\"version\": 1}").is_err());
        assert!(
            is_valid_cast("{\"version\": 2, \"width\": 1, \"height\": 1}\n[2, \"o\", \"x\"]\n[1, \"o\", \"y\"]")
                .is_err()
        );
    }

    #[test]
    fn encoded_output_is_a_playable_cast_that_takes_markers() {
        let mut cast = cast_header(80, 24, 1_700_000_000, "xterm-256color", "/bin/bash");
        let mut encoder = CastEncoder::default();
        let chunks: [(f64, &[u8]); 4] =
            [(0.1, b"root@box:/app# "), (0.25, b"echo \xe2\x86"), (0.2, b"\x92 ok\r\n"), (1.0, b"\"q\"\x1b[0m")];
        for (at, bytes) in chunks {
            cast.extend(encoder.output(at, bytes));
        }
        assert!(cast.contains("\"version\":2") && cast.contains("\"width\":80"), "{cast}");
        // The split arrow is written whole, in the event of the chunk that completed it, whose
        // time (earlier than the previous event's) is held at the previous one.
        assert!(cast.contains("[0.25,\"o\",\"echo \"]\n[0.25,\"o\",\"→ ok\\r\\n\"]"), "{cast}");
        assert!(cast.contains("\\\"q\\\"\\u001b[0m"), "quotes and escapes are JSON-escaped: {cast}");
        assert_eq!(is_valid_cast(&cast), Ok(4));
        let merged = merge_markers(&cast, &[(0.2, "Episode 0: 1 commands".into())]);
        assert_eq!(is_valid_cast(&merged), Ok(5));
        assert!(merged.contains("[0.1,\"o\",\"root@box:/app# \"]\n[0.2,\"m\",\"Episode 0: 1 commands\"]"));
        assert_eq!(encoder.output(2.0, b"\xe2"), None, "half a character waits");
    }
}
