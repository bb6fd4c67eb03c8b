//! What the agent sees after its commands: the pane's new output since the last observation,
//! at a cost that depends on how much is new, not on how long the session has run.
//!
//! The reference captures the whole scrollback every time and looks for the previous capture in
//! it; after an agent printed two million lines, every later 0.1 s command cost seconds. Here the
//! observer remembers one *anchor* — the last non-empty line of the previous observation, by its
//! position in the pane's history and its text — and reads, in one round trip, the lines from the
//! anchor on (a window of at most [`HEAD_LINES`], plus the last [`TAIL_LINES`] when more
//! arrived), and the visible screen. The observation is `New Terminal Output:` from the anchor's
//! line to the end, or `Current Terminal Screen:` when the anchor is gone (the history was
//! cleared, a full-screen program redrew the screen, or nothing is new).
//!
//! Nothing printed between two observations may be lost, so every section of one observation
//! comes from one instant of the pane: the sizes, the window, the tail and the screen are read
//! by one `tmux` invocation, whose commands the tmux server runs back to back without reading
//! the pane's output in between. Only the window's bounds are computed beforehand (from a
//! history size read a moment earlier); the history size read inside the invocation tells how
//! far the pane scrolled meanwhile, so the anchor's place in the window is known exactly:
//! - lines keep their position (0 = the oldest history line) while the history grows;
//! - a full history drops its oldest tenth at once (tmux's trim), moving every line up by that
//!   much: then the anchor is looked for at each such shift;
//! - a window that scrolled past the anchor is read again, starting further back.
//!
//! An anchor line may have changed since it was seen (a progress bar redrawn with `\r`, the
//! command typed after a prompt): at an exact position, the lines above it vouch for it.

use std::borrow::Cow;

use crate::control::Control;

/// The most lines after the anchor one observation reads from its head.
pub const HEAD_LINES: i64 = 20_000;
/// With more than [`HEAD_LINES`] new lines, the last lines are read too (the observation keeps
/// the head and the tail of long output anyway).
pub const TAIL_LINES: i64 = 2_000;
/// How far before the anchor the window starts, for lines that scroll in between reading the
/// history size and the window.
pub const BACK_LINES: i64 = 200;
/// How many of the lines above the anchor must still be above it when the anchor's own text
/// is not enough (a prompt line, the same on every later prompt).
pub const CONTEXT_LINES: usize = 4;
/// How many times one observation is read again after the pane scrolled past its window.
pub const MAX_REREADS: u32 = 3;

/// The last non-empty line of the previous observation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Anchor {
    /// Its line number in the pane (0 = the oldest history line).
    line: i64,
    /// Its text without trailing blanks: the line it is on later starts with it (the agent's
    /// command is typed after the prompt, as the reference's substring search allows).
    text: String,
    /// The screen lines right above it (at most [`CONTEXT_LINES`], blanks trimmed at their end).
    above: Vec<String>,
    /// The content before it held more lines (the reference then starts new output with the
    /// newline in front of the anchor's line).
    multi_line: bool,
}

/// Why an observation could not be made from a capture.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ObserveError {
    /// The capture's sections or numbers are not what the command prints.
    #[error("the pane capture was malformed ({0})")]
    Malformed(&'static str),
    /// The pane scrolled past the window between reading its size and the window: run
    /// [`Observer::command`] again (it starts further back now).
    #[error("the pane scrolled past the observation's window")]
    Reread,
}

/// The observer of one pane.
#[derive(Clone, Debug)]
pub struct Observer {
    anchor: Option<Anchor>,
    /// The history size in the snapshot the anchor came from.
    history: i64,
    /// How far before the anchor the next window starts.
    back: i64,
    /// Rereads of the current observation so far.
    rereads: u32,
}

impl Default for Observer {
    fn default() -> Observer {
        Observer { anchor: None, history: 0, back: BACK_LINES, rereads: 0 }
    }
}

fn trim_trailing_blank_lines(text: &str) -> String {
    let trimmed = text.trim_end_matches(['\n', ' ', '\r']);
    format!("{trimmed}\n")
}

fn lines(section: &str) -> Vec<&str> {
    section.lines().collect()
}

/// Lines tmux's trim drops at once from a full history of `limit` lines.
fn trim_chunk(limit: i64) -> i64 {
    (limit / 10).max(1)
}

/// The numbers of one snapshot: history size, history limit, pane height.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    history: i64,
    limit: i64,
    height: i64,
}

/// An anchored observation's window as shell arithmetic on the sizes read just before (`h`:
/// history size, `ph`: pane height): capture-pane's bounds of the head and of the tail, and the
/// test that the head stops short of the pane's last line (the tail is read only then).
struct Window {
    head: String,
    tail: String,
    cond: String,
}

impl Window {
    fn of(anchor: &Anchor, back: i64) -> Window {
        let a = anchor.line;
        Window {
            head: format!(" -S $(({a} - h - {back})) -E $(({a} - h + {HEAD_LINES}))"),
            tail: format!(" -S $((ph - {TAIL_LINES})) -E $((ph - 1))"),
            cond: format!("[ $(({a} - h + {HEAD_LINES})) -lt $((ph - 1)) ]"),
        }
    }
}

/// Where the anchor is in this observation's window.
enum Located {
    /// At this index of the window.
    At(usize),
    /// Before the window's start: read again from this far back.
    Before { back: i64 },
    /// Nowhere: the screen is shown.
    Gone,
}

impl Anchor {
    /// Whether the window's line `i` is this anchor. `exact`: the position is known (no line
    /// fell off the history since), so the lines above may vouch for a changed anchor line.
    fn is_at(&self, window: &[&str], i: usize, exact: bool) -> bool {
        let Some(line) = window.get(i) else { return false };
        let context = i >= self.above.len()
            && window[i - self.above.len()..i].iter().zip(&self.above).all(|(l, a)| l.trim_end() == a);
        let text = line.starts_with(self.text.as_str());
        let vouched = self.above.iter().any(|l| !l.is_empty());
        context && (text || (exact && vouched))
    }
}

impl Observer {
    /// The one channel command an observation runs (`separator` splits its sections). It
    /// prints the history size it planned the window with, then the sections of one snapshot.
    pub fn command(&self, session: &str, separator: &str) -> String {
        let sep = format!("display -p -t {session} {}", crate::tmux::shell_quote(separator));
        let sizes = format!("display -p -t {session} '#{{history_size}} #{{history_limit}} #{{pane_height}}'");
        let screen = format!("capture-pane -p -t {session}");
        let mut cmd = format!(
            "set -- $(tmux display -p -t {session} '#{{history_size}} #{{pane_height}}'); h=$1; ph=$2; echo \"$h\"; "
        );
        match &self.anchor {
            Some(anchor) => {
                let Window { head, tail, cond } = Window::of(anchor, self.back);
                let head = format!("capture-pane -p -t {session}{head}");
                let tail = format!("capture-pane -p -t {session}{tail}");
                // The tail only when the window stops short of the pane's last line: read every
                // time, it would be 2,000 lines of old history per look in a long session.
                cmd.push_str(&format!(
                    "if {cond}; then \
                     tmux {sizes} \\; {sep} \\; {head} \\; {sep} \\; {tail} \\; {sep} \\; {screen}; else \
                     tmux {sizes} \\; {sep} \\; {head} \\; {sep} \\; {sep} \\; {screen}; fi"
                ));
            }
            None => cmd.push_str(&format!("tmux {sizes} \\; {sep} \\; {sep} \\; {sep} \\; {screen}")),
        }
        cmd
    }

    /// The same observation through the channel's control client: the same output, with the
    /// per-process [`Observer::command`] as its fallback. The window's bounds are shell
    /// arithmetic inside a double-quoted list, so the list holds no `"`, `\`, `` ` `` or other `$`.
    pub fn control_command(&self, separator: &str, control: &Control) -> String {
        let sizes = control.display("#{history_size} #{history_limit} #{pane_height}");
        let screen = control.capture(3, "");
        let sep = crate::tmux::shell_quote(separator);
        let (list, print) = match &self.anchor {
            Some(anchor) => {
                let Window { head, tail, cond } = Window::of(anchor, self.back);
                let head = control.capture(1, &head);
                let tail = control.capture(2, &tail);
                let with_tail = format!(
                    "{sizes} ; {} ; {} ; {} ; {} ; {} ; {}",
                    head.capture, tail.capture, screen.capture, head.save, tail.save, screen.save
                );
                let without_tail =
                    format!("{sizes} ; {} ; {} ; {} ; {}", head.capture, screen.capture, head.save, screen.save);
                (
                    format!("if {cond}; then __tt \"{with_tail}\"; else __tt \"{without_tail}\"; fi"),
                    format!(
                        "{}; printf '%s\\n' {sep}; if {cond}; then {}; fi; printf '%s\\n' {sep}; {}",
                        head.print, tail.print, screen.print
                    ),
                )
            }
            None => (
                format!("__tt \"{sizes} ; {} ; {}\"", screen.capture, screen.save),
                format!("printf '%s\\n' {sep} {sep}; {}", screen.print),
            ),
        };
        debug_assert!(!list.contains('\\') && !list.contains('`'), "{list}");
        let first = control.display("#{history_size} #{pane_height}");
        format!(
            "{} && {{ set -- $__tt_l; h=$1; ph=$2; {list} && {{ echo \"$h\"; printf '%s\\n' \"$__tt_l\" {sep}; {print}; }}; }} || {{ {}; }}",
            Control::run(&first),
            self.command(crate::tmux::SESSION_NAME, separator)
        )
    }

    /// Where the anchor is in `head`, the window that starts at line `head_start`.
    fn locate(&self, anchor: &Anchor, head: &[&str], head_start: i64, now: Sizes, planned_history: i64) -> Located {
        let chunk = trim_chunk(now.limit);
        // After a trim the history holds at least `limit - chunk` lines; below that, no line
        // fell off since the anchor was seen and its position is exact — unless the history
        // shrank, which only a clear does.
        let trimmed = now.history >= now.limit - chunk;
        if !trimmed && now.history < self.history {
            return Located::Gone;
        }
        let end = now.history + now.height - 1;
        let shifts = if trimmed { 10 } else { 0 };
        for k in 0..=shifts {
            let at = anchor.line - k * chunk;
            if at < 0 {
                break;
            }
            if at > end {
                continue;
            }
            // The lines above the anchor must be in the window too (at the top of the history
            // there are none to read).
            if at - (anchor.above.len() as i64) < head_start && head_start > 0 {
                // The pane scrolled further than the window allowed for (or lines fell off):
                // start the next window before this place, with room for the same scroll again.
                let scrolled = (now.history - planned_history).max(0);
                return Located::Before { back: anchor.line - at + BACK_LINES + 2 * scrolled };
            }
            let i = (at - head_start) as usize;
            if anchor.is_at(head, i, !trimmed) {
                return Located::At(i);
            }
        }
        Located::Gone
    }

    /// Turns the command's output into the observation, and remembers the new anchor. On
    /// [`ObserveError::Reread`], run the command again and read its output.
    pub fn read(&mut self, stdout: &str, separator: &str) -> Result<String, ObserveError> {
        let (planned, rest) = stdout.split_once('\n').ok_or(ObserveError::Malformed("sections"))?;
        let planned: i64 = planned.trim().parse().map_err(|_| ObserveError::Malformed("history size"))?;
        let marker = format!("{separator}\n");
        let sections: Vec<&str> = rest.splitn(4, marker.as_str()).collect();
        let [sizes, head, tail, visible] = sections[..] else { return Err(ObserveError::Malformed("sections")) };
        let numbers: Vec<i64> = sizes.split_whitespace().filter_map(|n| n.parse().ok()).collect();
        let [history, limit, height] = numbers[..] else { return Err(ObserveError::Malformed("sizes")) };
        let now = Sizes { history, limit, height };

        let new_output = match &self.anchor {
            None => None,
            Some(anchor) => {
                let head = lines(head);
                // Where the window starts: planned relative to the history size read before,
                // placed by the one read in the same snapshot (tmux clamps it to the top).
                let end = now.history + now.height - 1;
                let head_start = (now.history + anchor.line - planned - self.back).clamp(0, end.max(0));
                match self.locate(anchor, &head, head_start, now, planned) {
                    Located::At(found) => Some(self.new_lines(anchor, &head, found, head_start, tail, now)),
                    Located::Before { back } if self.rereads < MAX_REREADS => {
                        self.rereads += 1;
                        self.back = back;
                        return Err(ObserveError::Reread);
                    }
                    Located::Before { .. } | Located::Gone => None,
                }
            }
        };

        // The next anchor: the last non-empty line now, from the same snapshot.
        let visible_lines = lines(visible);
        let last_visible = visible_lines.iter().rposition(|l| !l.trim().is_empty());
        let next = match last_visible {
            Some(row) => Some(Anchor {
                line: now.history + row as i64,
                text: visible_lines[row].trim_end().to_string(),
                above: visible_lines[row.saturating_sub(CONTEXT_LINES)..row]
                    .iter()
                    .map(|l| l.trim_end().to_string())
                    .collect(),
                multi_line: now.history > 0 || visible_lines[..row].iter().any(|l| !l.trim().is_empty()),
            }),
            // A pane with nothing in it yet (the shell had not printed its prompt): the next
            // look reads from its first line, as the reference's search for an empty previous
            // screen finds it at the start.
            None if self.anchor.is_none() && now.history == 0 => {
                Some(Anchor { line: 0, text: String::new(), above: Vec::new(), multi_line: false })
            }
            None => self.anchor.clone(),
        };
        let first = self.anchor.is_none();
        self.anchor = next;
        self.history = now.history;
        self.back = BACK_LINES;
        self.rereads = 0;
        Ok(match new_output {
            Some(new) if !first && !new.trim().is_empty() => {
                format!("New Terminal Output:\n{}", trim_trailing_blank_lines(&new))
            }
            _ => format!("Current Terminal Screen:\n{}", trim_trailing_blank_lines(visible)),
        })
    }

    /// The new output: the window from the anchor on, and past the window's end the tail (with
    /// what lies between named).
    fn new_lines(
        &self,
        anchor: &Anchor,
        head: &[&str],
        found: usize,
        head_start: i64,
        tail: &str,
        now: Sizes,
    ) -> String {
        let mut new: Vec<Cow<str>> = head[found..].iter().map(|l| Cow::Borrowed(*l)).collect();
        let head_end = head_start + head.len() as i64 - 1;
        let end = now.history + now.height - 1;
        if head_end < end {
            let tail = lines(tail);
            let tail_start = (now.history + now.height - TAIL_LINES).max(0);
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
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEP: &str = "__SEP__";

    /// A tmux pane: its lines (history first) and tmux's trim of a full history.
    #[derive(Clone)]
    struct Pane {
        lines: Vec<String>,
        height: usize,
        limit: i64,
    }

    impl Pane {
        fn new(height: usize, limit: i64) -> Pane {
            Pane { lines: Vec::new(), height, limit }
        }

        fn history(&self) -> i64 {
            self.lines.len().saturating_sub(self.height) as i64
        }

        /// Prints one line; a history at its limit first drops its oldest tenth, as tmux does.
        fn print(&mut self, line: &str) {
            if self.lines.len() >= self.height && self.history() >= self.limit {
                self.lines.drain(..trim_chunk(self.limit) as usize);
            }
            self.lines.push(line.to_string());
        }

        /// `capture-pane -S from -E to` in relative numbers (0 = the screen's first row).
        fn window(&self, from: i64, to: i64) -> String {
            let h = self.history();
            let mut all: Vec<&str> = self.lines.iter().map(String::as_str).collect();
            all.resize((h + self.height as i64) as usize, "");
            let (from, to) = ((h + from).max(0), (h + to).min(h + self.height as i64 - 1));
            (from..=to).map(|i| format!("{}\n", all[i as usize])).collect()
        }
    }

    /// What the observer's command prints when the pane's history held `h` lines at its first
    /// tmux call, and the pane was `now` at the second.
    fn capture(observer: &Observer, h: i64, now: &Pane) -> String {
        let ph = now.height as i64;
        let (head, tail) = match &observer.anchor {
            Some(anchor) => {
                let (a, back) = (anchor.line, observer.back);
                let tail =
                    if a - h + HEAD_LINES < ph - 1 { now.window(ph - TAIL_LINES, ph - 1) } else { String::new() };
                (now.window(a - h - back, a - h + HEAD_LINES), tail)
            }
            None => (String::new(), String::new()),
        };
        let screen = now.window(0, now.height as i64 - 1);
        format!("{h}\n{} {} {}\n{SEP}\n{head}{SEP}\n{tail}{SEP}\n{screen}", now.history(), now.limit, now.height)
    }

    /// One observation of a pane that did not change between the two tmux calls.
    fn look(observer: &mut Observer, pane: &Pane) -> String {
        observer.read(&capture(observer, pane.history(), pane), SEP).unwrap()
    }

    fn pane_of(height: usize, limit: i64, lines: &[&str]) -> Pane {
        let mut pane = Pane::new(height, limit);
        for l in lines {
            pane.print(l);
        }
        pane
    }

    #[test]
    fn through_the_control_client_all_captures_come_before_any_save_and_failure_falls_back_whole() {
        let control = Control::started("control /tmp/tmux-0", "nonce").unwrap();
        let mut observer = Observer::default();
        for lists in [1, 2] {
            let command = observer.control_command(SEP, &control);
            assert!(command.ends_with(&format!("|| {{ {}; }}", observer.command("terminus-2", SEP))), "{command}");
            // The pane's output is read while a save waits for its file: one snapshot means
            // every capture of a list first.
            let found: Vec<&str> = command.split("__tt \"").skip(1).map(|l| &l[..l.find('"').unwrap()]).collect();
            assert_eq!(found.len(), lists, "{command}");
            for list in found {
                assert!(list.rfind("capture-pane").unwrap() < list.find("save-buffer").unwrap(), "{list}");
            }
            observer.read(&capture(&observer, 0, &pane_of(5, 1000, &["$ "])), SEP).unwrap();
        }
    }

    #[test]
    fn the_first_look_is_the_screen_then_only_what_is_new() {
        let mut observer = Observer::default();
        let mut pane = pane_of(5, 1000, &["root@box:/app# "]);
        assert_eq!(look(&mut observer, &pane), "Current Terminal Screen:\nroot@box:/app#\n");
        pane = pane_of(5, 1000, &["root@box:/app# ls", "a.txt", "root@box:/app# "]);
        assert_eq!(
            look(&mut observer, &pane),
            "New Terminal Output:\nroot@box:/app# ls\na.txt\nroot@box:/app#\n",
            "one line before: no leading newline"
        );
        pane.lines.pop();
        for l in ["root@box:/app# echo hi", "hi", "root@box:/app# "] {
            pane.print(l);
        }
        assert_eq!(look(&mut observer, &pane), "New Terminal Output:\n\nroot@box:/app# echo hi\nhi\nroot@box:/app#\n");
    }

    #[test]
    fn history_scrolled_past_the_screen_is_still_found() {
        let mut observer = Observer::default();
        let mut pane = Pane::new(4, 1000);
        (0..3).for_each(|i| pane.print(&format!("line {i}")));
        look(&mut observer, &pane);
        (3..40).for_each(|i| pane.print(&format!("line {i}")));
        let out = look(&mut observer, &pane);
        assert!(out.starts_with("New Terminal Output:\n\nline 2\nline 3\n"), "{out}");
        assert!(out.ends_with("line 39\n"));
    }

    /// Lines printed between the observer's two tmux calls are in this observation or the
    /// next one: the window and the screen come from the same snapshot.
    #[test]
    fn output_between_the_two_tmux_calls_is_not_lost() {
        let mut observer = Observer::default();
        let mut pane = pane_of(5, 1000, &["$ ./slow", "step 1/4"]);
        look(&mut observer, &pane);
        pane.print("step 2/4");
        let planned = pane.history();
        pane.print("step 3/4");
        pane.print("step 4/4");
        let out = observer.read(&capture(&observer, planned, &pane), SEP).unwrap();
        assert!(out.ends_with("step 2/4\nstep 3/4\nstep 4/4\n"), "{out}");
        let planned = pane.history();
        pane.print("done");
        pane.print("$ ");
        let out = observer.read(&capture(&observer, planned, &pane), SEP).unwrap();
        assert_eq!(out, "New Terminal Output:\n\nstep 4/4\ndone\n$\n");
    }

    /// More lines than the window allows for arrive between the two calls: the observation is
    /// read again from further back, and nothing is skipped.
    #[test]
    fn a_window_the_pane_scrolled_past_is_read_again() {
        let mut observer = Observer::default();
        let mut pane = pane_of(5, 100_000, &["$ seq", "0"]);
        look(&mut observer, &pane);
        let planned = pane.history();
        (1..=1000).for_each(|i| pane.print(&i.to_string()));
        assert_eq!(observer.read(&capture(&observer, planned, &pane), SEP), Err(ObserveError::Reread));
        let out = look(&mut observer, &pane);
        assert!(out.starts_with("New Terminal Output:\n\n0\n1\n2\n"), "{}", &out[..40]);
        assert!(out.ends_with("999\n1000\n"));
    }

    #[test]
    fn a_flood_keeps_its_head_and_tail_and_nothing_found_shows_the_screen() {
        let mut observer = Observer::default();
        let mut pane = pane_of(10, 10_000_000, &["$ seq"]);
        look(&mut observer, &pane);
        (1..=100_000).for_each(|i| pane.print(&i.to_string()));
        let out = look(&mut observer, &pane);
        assert!(out.starts_with("New Terminal Output:\n$ seq\n1\n2\n"), "{}", &out[..60]);
        assert!(out.contains("lines not read ...]"));
        assert!(out.trim_end().ends_with("100000"));
        assert!(out.lines().count() < (HEAD_LINES + TAIL_LINES + 10) as usize, "bounded");
        // The history was cleared: the anchor is nowhere, so the screen is shown.
        let cleared = pane_of(10, 10_000_000, &["$ "]);
        assert_eq!(look(&mut observer, &cleared), "Current Terminal Screen:\n$\n");
    }

    /// A full history drops its oldest tenth at once: the anchor moved up by that much.
    #[test]
    fn at_the_history_limit_lines_fall_off_and_the_anchor_moves_up() {
        let mut observer = Observer::default();
        let (limit, height) = (100, 5);
        let mut pane = Pane::new(height, limit);
        (0..(limit + height as i64)).for_each(|i| pane.print(&format!("old {i}")));
        look(&mut observer, &pane);
        (0..10).for_each(|i| pane.print(&format!("new {i}")));
        let out = look(&mut observer, &pane);
        assert!(out.starts_with("New Terminal Output:\n\nold 104\nnew 0\n"), "{out}");
        assert!(out.ends_with("new 9\n"));
        (10..45).for_each(|i| pane.print(&format!("new {i}")));
        let out = look(&mut observer, &pane);
        assert!(out.starts_with("New Terminal Output:\n\nnew 9\nnew 10\n"), "{out}");
        assert!(out.ends_with("new 44\n"));
    }

    /// A progress line redrawn in place (`\r`) is still the anchor: the lines above vouch.
    #[test]
    fn a_redrawn_anchor_line_is_found_by_the_lines_above_it() {
        let mut observer = Observer::default();
        let mut pane = pane_of(10, 1000, &["$ build", "compiling a", "compiling b", "[##  ] 40%"]);
        look(&mut observer, &pane);
        *pane.lines.last_mut().unwrap() = "[####] 100%".to_string();
        pane.print("built");
        pane.print("$ ");
        let out = look(&mut observer, &pane);
        assert_eq!(out, "New Terminal Output:\n\n[####] 100%\nbuilt\n$\n");
    }

    /// The first look came before the shell printed its prompt: the next one shows everything
    /// from the first line as new output, as when the first look had caught the prompt.
    #[test]
    fn an_empty_first_look_reads_from_the_first_line_next() {
        let mut observer = Observer::default();
        assert_eq!(look(&mut observer, &Pane::new(5, 1000)), "Current Terminal Screen:\n\n");
        let lines: Vec<String> = ["root@box:/app# seq 1 9".to_string()]
            .into_iter()
            .chain((1..=9).map(|i| i.to_string()))
            .chain(["root@box:/app# ".to_string()])
            .collect();
        let pane = pane_of(5, 1000, &lines.iter().map(String::as_str).collect::<Vec<_>>());
        let out = look(&mut observer, &pane);
        let mut caught = Observer::default();
        look(&mut caught, &pane_of(5, 1000, &["root@box:/app# "]));
        let same = look(&mut caught, &pane);
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
        look(&mut observer, &pane_of(10, 1000, &before));
        let after = ["root@box:/app# bash solve.sh; echo done", "done", "root@box:/app# "];
        let out = look(&mut observer, &pane_of(10, 1000, &after));
        assert_eq!(out, "Current Terminal Screen:\nroot@box:/app# bash solve.sh; echo done\ndone\nroot@box:/app#\n");
        // From there on, new output is found again below the new anchor.
        let more = ["root@box:/app# bash solve.sh; echo done", "done", "root@box:/app# ls", "a", "root@box:/app# "];
        let out = look(&mut observer, &pane_of(10, 1000, &more));
        assert_eq!(out, "New Terminal Output:\n\nroot@box:/app# ls\na\nroot@box:/app#\n");
    }

    /// Many episodes of numbered output at random rates, with the pane moving between the two
    /// tmux calls by a random amount, repeated prompts and a small history that keeps being
    /// trimmed: joined, the observations hold every numbered line in order.
    #[test]
    fn joined_observations_hold_every_line_in_order() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for (height, limit) in [(8usize, 1_000i64), (40, 2_000), (24, 100_000)] {
            let mut pane = pane_of(height, limit, &["$ "]);
            let mut observer = Observer::default();
            let mut seen: Vec<u64> = Vec::new();
            let mut printed = 0u64;
            let take = |out: &str, seen: &mut Vec<u64>| {
                for n in out.lines().filter_map(|l| l.strip_prefix("L")).filter_map(|n| n.parse().ok()) {
                    if seen.last() != Some(&n) {
                        seen.push(n);
                    }
                }
            };
            take(&look(&mut observer, &pane), &mut seen);
            for _ in 0..2_000 {
                let before = next(3) as usize;
                for _ in 0..next(5) * next(40) {
                    printed += 1;
                    pane.print(&format!("L{printed}"));
                }
                if next(4) == 0 {
                    pane.print("$ ");
                    pane.print("$ ");
                }
                let planned = pane.history();
                for _ in 0..before * next(120) as usize {
                    printed += 1;
                    pane.print(&format!("L{printed}"));
                }
                let mut stdout = capture(&observer, planned, &pane);
                let out = loop {
                    match observer.read(&stdout, SEP) {
                        Ok(out) => break out,
                        Err(ObserveError::Reread) => stdout = capture(&observer, pane.history(), &pane),
                        Err(e) => panic!("{e}"),
                    }
                };
                take(&out, &mut seen);
            }
            let want: Vec<u64> = (1..=printed).collect();
            assert_eq!(seen.len(), want.len(), "height {height}, limit {limit}: lines lost or repeated");
            assert_eq!(seen, want, "height {height}, limit {limit}");
        }
    }

    #[test]
    fn malformed_captures_are_errors() {
        assert!(matches!(Observer::default().read("nothing", SEP), Err(ObserveError::Malformed(_))));
    }
}
