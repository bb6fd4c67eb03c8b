//! Serde's error messages as a person reads them: the parser's own position is dropped where
//! the caller names the place itself.

/// Removes serde_json's "at line 1 column 2" suffixes, which point into our intermediate JSON,
/// not into the user's file.
pub(crate) fn strip_serde_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(idx) => message[..idx].to_string(),
        None => message.to_string(),
    }
}
