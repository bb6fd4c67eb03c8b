//! The reference's own observation, for `model_view: reference` runs that must show the model
//! exactly what Harbor's Terminus 2 shows it: each look captures the whole scrollback, looks for
//! the previous capture (stripped) in it, and shows what follows — from an offset the reference
//! takes inside the *previous* capture when that one held several lines — through the pane's
//! last row, trailing blank rows included; when the previous capture is not found, or nothing
//! follows it, the visible screen. Its cost grows with the scrollback (the reason [`Observer`]
//! exists), and its result depends on the pane's history limit, which a reference session
//! leaves at tmux's default.
//!
//! [`Observer`]: crate::observe::Observer

use crate::observe::ObserveError;

/// The observer of one pane, as the reference observes it.
#[derive(Clone, Debug, Default)]
pub struct ReferenceObserver {
    previous: Option<String>,
}

/// Python's `str.strip()`: the characters `str.isspace` calls whitespace, at both ends.
fn py_strip(text: &str) -> &str {
    let space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    text.trim_matches(space)
}

/// `text[from..]` where `from` counts characters, as Python's slicing does.
fn from_char(text: &str, from: usize) -> &str {
    match text.char_indices().nth(from) {
        Some((at, _)) => &text[at..],
        None => "",
    }
}

impl ReferenceObserver {
    /// The one channel command a look runs: the whole scrollback, then the visible screen, in
    /// one tmux invocation (`separator` between them).
    pub fn command(&self, session: &str, separator: &str) -> String {
        let sep = crate::tmux::shell_quote(separator);
        format!(
            "tmux capture-pane -p -S - -t {session} \\; display -p -t {session} {sep} \\; capture-pane -p -t {session}"
        )
    }

    /// The observation from the command's output.
    pub fn read(&mut self, stdout: &str, separator: &str) -> Result<String, ObserveError> {
        let marker = format!("{separator}\n");
        let (current, visible) = stdout.split_once(marker.as_str()).ok_or(ObserveError::Malformed("sections"))?;
        let Some(previous) = self.previous.replace(current.to_string()) else {
            return Ok(format!("Current Terminal Screen:\n{visible}"));
        };
        let pb = py_strip(&previous);
        let new = current.find(pb).map(|at| {
            // The reference's index: where the previous content starts in the current one, or,
            // when the previous content held several lines, its last newline's offset *within
            // the previous content* (applied to the current one as it is).
            let from = match pb.rfind('\n') {
                Some(newline) => pb[..newline].chars().count(),
                None => current[..at].chars().count(),
            };
            from_char(current, from)
        });
        Ok(match new {
            Some(new) if !py_strip(new).is_empty() => format!("New Terminal Output:\n{new}"),
            _ => format!("Current Terminal Screen:\n{visible}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEP: &str = "__SEP__";

    fn look(observer: &mut ReferenceObserver, all: &str, visible: &str) -> String {
        observer.read(&format!("{all}{SEP}\n{visible}"), SEP).unwrap()
    }

    #[test]
    fn the_reference_observation_with_its_offsets_and_trailing_rows() {
        let mut observer = ReferenceObserver::default();
        let blank = "\n".repeat(3);
        let first = format!("root@box:/app# \n{blank}");
        assert_eq!(look(&mut observer, &first, &first), format!("Current Terminal Screen:\n{first}"));
        // One line before: the new output starts where that line starts.
        let second = format!("root@box:/app# ls\na.txt\nroot@box:/app# \n{blank}");
        assert_eq!(look(&mut observer, &second, &second), format!("New Terminal Output:\n{second}"));
        // Several lines before: from the previous content's last newline offset, applied to
        // the new capture as it is (here: in front of its last prompt).
        let third = format!("root@box:/app# ls\na.txt\nroot@box:/app# echo hi\nhi\nroot@box:/app# \n{blank}");
        let out = look(&mut observer, &third, &third);
        let offset = "root@box:/app# ls\na.txt".chars().count();
        assert_eq!(out, format!("New Terminal Output:\n{}", &third[offset..]));
        assert!(out.ends_with(&blank), "trailing rows kept");
        // The previous content is gone (cleared): the visible screen.
        let cleared = "root@box:/app# \n";
        assert_eq!(look(&mut observer, cleared, cleared), "Current Terminal Screen:\nroot@box:/app# \n");
    }

    #[test]
    fn offsets_count_characters_not_bytes() {
        let mut observer = ReferenceObserver::default();
        look(&mut observer, "é1\né2\n", "");
        let out = look(&mut observer, "é1\né2\né3\n", "");
        assert_eq!(out, "New Terminal Output:\n\né2\né3\n");
    }
}
