//! What the agent sees after its commands: the pane's new output since the last observation
//! (terminus2-reference §5.4), at a cost that depends on how much is new, not on how long the
//! session has run.
//!
//! The reference captures the whole scrollback every time and looks for the previous capture in
//! it; after an agent printed two million lines, every later 0.1 s command cost seconds. Here the
//! observer remembers one *anchor* — the last non-empty line of the previous observation, by its
//! position in the pane's history and its text — and asks tmux, in one round trip, for the lines
//! from the anchor on (a window of at most [`HEAD_LINES`], plus the last [`TAIL_LINES`] when more
//! arrived), and the visible screen. The observation is the reference's: `New Terminal Output:`
//! from the anchor's line to the end, or `Current Terminal Screen:` when the anchor cannot be
//! found (the history was cleared, a full-screen program took the screen, or nothing is new).
//!
//! Positions shift when lines scroll in between two tmux calls, or when the history is full and
//! its oldest lines fall off; the window starts a little before the anchor ([`BACK_LINES`], more
//! at the history limit) and the anchor is searched from its expected place backwards.

use std::borrow::Cow;

/// The most lines after the anchor one observation reads from its head.
pub const HEAD_LINES: i64 = 20_000;
/// With more than [`HEAD_LINES`] new lines, the last lines are read too (the observation keeps
/// the head and the tail of long output anyway).
pub const TAIL_LINES: i64 = 2_000;
/// How far before the anchor the window starts, for lines that scroll in between tmux calls.
pub const BACK_LINES: i64 = 50;
/// The same at the history limit, where every new line pushes the oldest one out.
pub const BACK_LINES_AT_LIMIT: i64 = 2_000;
/// How many of the lines above the anchor must still be above it: a prompt line alone is not
/// enough to tell where the anchor went, since every later prompt starts with the same text.
pub const CONTEXT_LINES: usize = 4;

/// The last non-empty line of the previous observation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Anchor {
    /// Its line number in the pane (0 = the oldest history line).
    line: i64,
    /// Its text without trailing blanks: the line it is on later starts with it (the agent's
    /// command is typed after the prompt, as the reference's substring search allows).
    text: String,
    /// The screen lines right above it (at most [`CONTEXT_LINES`], blanks trimmed at their end):
    /// a line found by its text is the anchor only when these still precede it (after a
    /// `clear`, a later prompt would otherwise pass for the old one).
    above: Vec<String>,
    /// The content before it held more lines (the reference then starts new output with the
    /// newline in front of the anchor's line).
    multi_line: bool,
}

/// Why an observation's capture could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the pane capture was malformed ({0})")]
pub struct ObserveError(&'static str);

/// The observer of one pane.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    anchor: Option<Anchor>,
    /// The history was full at the last observation.
    at_limit: bool,
}

fn trim_trailing_blank_lines(text: &str) -> String {
    let trimmed = text.trim_end_matches(['\n', ' ', '\r']);
    format!("{trimmed}\n")
}

fn lines(section: &str) -> Vec<&str> {
    section.lines().collect()
}

impl Observer {
    /// The one channel command an observation runs (`separator` splits its sections).
    pub fn command(&self, session: &str, separator: &str) -> String {
        let sep = format!("printf '%s\\n' {}", crate::tmux::shell_quote(separator));
        let mut cmd = format!(
            "set -- $(tmux display -p -t {session} '#{{history_size}} #{{history_limit}} #{{pane_height}}'); h=$1; ph=$3; echo \"$1 $2 $3\"; {sep}; "
        );
        if let Some(anchor) = &self.anchor {
            let back = if self.at_limit { BACK_LINES_AT_LIMIT } else { BACK_LINES };
            let a = anchor.line;
            // The tail only when the head's window stops short of the pane's last line: read
            // every time, it would be 2,000 lines of old history per look in a long session.
            cmd.push_str(&format!(
                "tmux capture-pane -p -t {session} -S $(({a} - h - {back})) -E $(({a} - h + {HEAD_LINES})); {sep}; \
                 if [ $(({a} - h + {HEAD_LINES})) -lt $((ph - 1)) ]; then \
                 tmux capture-pane -p -t {session} -S $((ph - {TAIL_LINES})) -E $((ph - 1)); fi; {sep}; "
            ));
        } else {
            cmd.push_str(&format!("{sep}; {sep}; "));
        }
        cmd.push_str(&format!(
            "tmux display -p -t {session} '#{{history_size}}'; {sep}; tmux capture-pane -p -t {session}"
        ));
        cmd
    }

    /// Turns the command's output into the observation, and remembers the new anchor.
    pub fn read(&mut self, stdout: &str, separator: &str) -> Result<String, ObserveError> {
        let marker = format!("{separator}\n");
        let sections: Vec<&str> = stdout.splitn(5, marker.as_str()).collect();
        let [sizes, head, tail, history_now, visible] = sections[..] else { return Err(ObserveError("sections")) };
        let numbers: Vec<i64> = sizes.split_whitespace().filter_map(|n| n.parse().ok()).collect();
        let [h, limit, height] = numbers[..] else { return Err(ObserveError("sizes")) };
        let h_visible: i64 = history_now.trim().parse().map_err(|_| ObserveError("history size"))?;
        self.at_limit = h >= limit;
        let visible_lines = lines(visible);

        let new_output = self.anchor.as_ref().and_then(|anchor| {
            let back = if self.at_limit { BACK_LINES_AT_LIMIT } else { BACK_LINES };
            let head = lines(head);
            let head_start = (anchor.line - back).max(0);
            // From where the anchor should be, backwards: lines that scrolled in meanwhile (or
            // fell off a full history) moved it up.
            let expected = usize::try_from(anchor.line - head_start).ok()?.min(head.len().checked_sub(1)?);
            let found = (0..=expected).rev().find(|&i| {
                head[i].starts_with(anchor.text.as_str())
                    && i >= anchor.above.len()
                    && head[i - anchor.above.len()..i].iter().zip(&anchor.above).all(|(l, a)| l.trim_end() == a)
            })?;
            let mut new: Vec<Cow<str>> = head[found..].iter().map(|l| Cow::Borrowed(*l)).collect();
            let head_end = head_start + head.len() as i64 - 1;
            let end = h + height - 1;
            if head_end < end {
                let tail = lines(tail);
                let tail_start = (h + height - TAIL_LINES).max(0);
                let skip = usize::try_from(head_end + 1 - tail_start).unwrap_or(0);
                if skip == 0 && tail_start > head_end + 1 {
                    let omitted = tail_start - head_end - 1;
                    new.push(Cow::Owned(format!("[... {omitted} lines not read ...]")));
                }
                new.extend(tail.iter().skip(skip).map(|l| Cow::Borrowed(*l)));
            }
            let mut text = new.join("\n");
            text.push('\n');
            if anchor.multi_line {
                text.insert(0, '\n');
            }
            Some(text)
        });

        // The next anchor: the last non-empty line now.
        let last_visible = visible_lines.iter().rposition(|l| !l.trim().is_empty());
        let next = match last_visible {
            Some(row) => Some(Anchor {
                line: h_visible + row as i64,
                text: visible_lines[row].trim_end().to_string(),
                above: visible_lines[row.saturating_sub(CONTEXT_LINES)..row]
                    .iter()
                    .map(|l| l.trim_end().to_string())
                    .collect(),
                multi_line: h_visible > 0 || visible_lines[..row].iter().any(|l| !l.trim().is_empty()),
            }),
            // A pane with nothing in it yet (the shell had not printed its prompt): the next
            // look reads from its first line, as the reference's search for an empty previous
            // screen finds it at the start.
            None if self.anchor.is_none() && h_visible == 0 => {
                Some(Anchor { line: 0, text: String::new(), above: Vec::new(), multi_line: false })
            }
            None => self.anchor.clone(),
        };
        let first = self.anchor.is_none();
        self.anchor = next;
        Ok(match new_output {
            Some(new) if !first && !new.trim().is_empty() => {
                format!("New Terminal Output:\n{}", trim_trailing_blank_lines(&new))
            }
            _ => format!("Current Terminal Screen:\n{}", trim_trailing_blank_lines(visible)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEP: &str = "__SEP__";

    /// What tmux would print for a pane whose whole content is `content` (history first), with
    /// `height` visible rows, when the observer asked for its windows.
    fn capture(observer: &Observer, content: &[&str], height: usize, limit: i64) -> String {
        let h = content.len().saturating_sub(height) as i64;
        let visible: Vec<&str> = content.iter().skip(h as usize).copied().collect();
        let mut padded = visible.clone();
        padded.resize(height, "");
        let window = |from: i64, to: i64| -> String {
            let total = content.len() as i64;
            let (from, to) = (from.max(0), to.min(total.max(height as i64) - 1));
            let mut all: Vec<&str> = content.to_vec();
            all.resize((h + height as i64) as usize, "");
            (from..=to).filter_map(|i| all.get(i as usize)).map(|l| format!("{l}\n")).collect()
        };
        let (head, tail) = match &observer.anchor {
            Some(anchor) => {
                let back = if observer.at_limit { BACK_LINES_AT_LIMIT } else { BACK_LINES };
                // As the command does: the tail only when the head stops short of the end.
                let tail = if anchor.line + HEAD_LINES < h + height as i64 - 1 {
                    window(h + height as i64 - TAIL_LINES, h + height as i64 - 1)
                } else {
                    String::new()
                };
                (window(anchor.line - back, anchor.line + HEAD_LINES), tail)
            }
            None => (String::new(), String::new()),
        };
        let visible_text: String = padded.iter().map(|l| format!("{l}\n")).collect();
        format!("{h} {limit} {height}\n{SEP}\n{head}{SEP}\n{tail}{SEP}\n{h}\n{SEP}\n{visible_text}")
    }

    fn view(pane: &[String]) -> Vec<&str> {
        pane.iter().map(String::as_str).collect()
    }

    #[test]
    fn the_first_look_is_the_screen_then_only_what_is_new() {
        let mut observer = Observer::default();
        let mut pane = vec!["root@box:/app# "];
        let first = observer.read(&capture(&observer, &pane, 5, 1000), SEP).unwrap();
        assert_eq!(first, "Current Terminal Screen:\nroot@box:/app#\n");
        pane = vec!["root@box:/app# ls", "a.txt", "root@box:/app# "];
        let second = observer.read(&capture(&observer, &pane, 5, 1000), SEP).unwrap();
        assert_eq!(
            second, "New Terminal Output:\nroot@box:/app# ls\na.txt\nroot@box:/app#\n",
            "one line before: no leading newline"
        );
        pane.extend(["root@box:/app# echo hi", "hi", "root@box:/app# "]);
        pane.remove(2);
        let third = observer.read(&capture(&observer, &pane, 5, 1000), SEP).unwrap();
        assert_eq!(third, "New Terminal Output:\n\nroot@box:/app# echo hi\nhi\nroot@box:/app#\n");
    }

    #[test]
    fn history_scrolled_past_the_screen_is_still_found() {
        let mut observer = Observer::default();
        let mut pane: Vec<String> = (0..3).map(|i| format!("line {i}")).collect();
        observer.read(&capture(&observer, &view(&pane), 4, 1000), SEP).unwrap();
        pane.extend((3..40).map(|i| format!("line {i}")));
        let out = observer.read(&capture(&observer, &view(&pane), 4, 1000), SEP).unwrap();
        assert!(out.starts_with("New Terminal Output:\n\nline 2\nline 3\n"), "{out}");
        assert!(out.ends_with("line 39\n"));
    }

    #[test]
    fn a_flood_keeps_its_head_and_tail_and_nothing_found_shows_the_screen() {
        let mut observer = Observer::default();
        let mut pane: Vec<String> = vec!["$ seq".to_string()];
        observer.read(&capture(&observer, &view(&pane), 10, 10_000_000), SEP).unwrap();
        pane.extend((1..=100_000).map(|i| i.to_string()));
        let out = observer.read(&capture(&observer, &view(&pane), 10, 10_000_000), SEP).unwrap();
        assert!(out.starts_with("New Terminal Output:\n$ seq\n1\n2\n"), "{}", &out[..60]);
        assert!(out.contains("lines not read ...]"));
        assert!(out.trim_end().ends_with("100000"));
        assert!(out.lines().count() < (HEAD_LINES + TAIL_LINES + 10) as usize, "bounded");
        // The history was cleared: the anchor is nowhere, so the screen is shown.
        let cleared = vec!["$ "];
        let out = observer.read(&capture(&observer, &cleared, 10, 10_000_000), SEP).unwrap();
        assert_eq!(out, "Current Terminal Screen:\n$\n");
    }

    #[test]
    fn at_the_history_limit_lines_fall_off_and_the_anchor_moves_up() {
        let mut observer = Observer::default();
        let limit = 100;
        let height = 5;
        let mut pane: Vec<String> = (0..(limit + height as i64)).map(|i| format!("old {i}")).collect();
        observer.read(&capture(&observer, &view(&pane), height, limit), SEP).unwrap();
        // Ten new lines push the ten oldest out of a full history.
        pane.drain(..10);
        pane.extend((0..10).map(|i| format!("new {i}")));
        let out = observer.read(&capture(&observer, &view(&pane), height, limit), SEP).unwrap();
        assert!(out.starts_with("New Terminal Output:\n\nold 104\nnew 0\n"), "{out}");
        assert!(out.ends_with("new 9\n"));
    }

    /// The first look came before the shell printed its prompt: the next one shows everything
    /// from the first line as new output, as when the first look had caught the prompt.
    #[test]
    fn an_empty_first_look_reads_from_the_first_line_next() {
        let mut observer = Observer::default();
        let first = observer.read(&capture(&observer, &[], 5, 1000), SEP).unwrap();
        assert_eq!(first, "Current Terminal Screen:\n\n");
        let pane: Vec<String> = ["root@box:/app# seq 1 9".to_string()]
            .into_iter()
            .chain((1..=9).map(|i| i.to_string()))
            .chain(["root@box:/app# ".to_string()])
            .collect();
        let out = observer.read(&capture(&observer, &view(&pane), 5, 1000), SEP).unwrap();
        let mut caught = Observer::default();
        caught.read(&capture(&caught, &["root@box:/app# "], 5, 1000), SEP).unwrap();
        let same = caught.read(&capture(&caught, &view(&pane), 5, 1000), SEP).unwrap();
        assert!(out.starts_with("New Terminal Output:\nroot@box:/app# seq 1 9\n1\n"), "{out}");
        assert_eq!(out, same);
    }

    /// The first look caught the screen before a `clear` ran: the prompt after the command
    /// starts with the old anchor's text, but what stood above the anchor is gone, so the
    /// observation is the screen (as the reference's whole-buffer search gives), not one prompt.
    #[test]
    fn a_cleared_screen_is_not_mistaken_for_the_old_prompt() {
        let mut observer = Observer::default();
        let before = ["$ asciinema rec", "asciinema: recording", "asciinema: press <ctrl-d>", "root@box:/app# "];
        observer.read(&capture(&observer, &before, 10, 1000), SEP).unwrap();
        let after = ["root@box:/app# bash solve.sh; echo done", "done", "root@box:/app# "];
        let out = observer.read(&capture(&observer, &after, 10, 1000), SEP).unwrap();
        assert_eq!(out, "Current Terminal Screen:\nroot@box:/app# bash solve.sh; echo done\ndone\nroot@box:/app#\n");
        // From there on, new output is found again below the new anchor.
        let more = ["root@box:/app# bash solve.sh; echo done", "done", "root@box:/app# ls", "a", "root@box:/app# "];
        let out = observer.read(&capture(&observer, &more, 10, 1000), SEP).unwrap();
        assert_eq!(out, "New Terminal Output:\n\nroot@box:/app# ls\na\nroot@box:/app#\n");
    }

    #[test]
    fn malformed_captures_are_errors() {
        assert!(Observer::default().read("nothing", SEP).is_err());
    }
}
