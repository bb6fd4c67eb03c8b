//! tmux commands through one long-lived control-mode client (`tmux -C`) kept by the channel's
//! shell, instead of one tmux client process per command. Pure: this builds shell text; the
//! TmuxSession actor sends it down its channel.
//!
//! Why: each `tmux …` command is a process started in the container (fork, exec, connect to the
//! server); an agent's episode takes four of them. With a control client the shell writes the
//! command line into the client's stdin and reads its reply with builtins: no process at all.
//!
//! How ([`LIBRARY`]): the channel's shell starts the client as a coprocess attached to the
//! agent's session with the `no-output` flag (the pane's output is not streamed to it) and
//! `ignore-size` (the pane keeps its size). A command list goes in as one line, followed by
//! `display -p "NONCE ok"` in the same list and, on a line of its own (a list of its own, which
//! runs even when the first stopped at an error), `display -p "NONCE end SEQ"`. The shell reads
//! until that end line; the list succeeded when the `ok` line came before it. Data comes back
//! only through our own `display -p "NONCE = …"` lines, and the pane's text never travels in the
//! stream: captures go into tmux buffers, saved to files in the server's socket directory and
//! printed from there (the files then emptied). So no text in the pane can reach the stream,
//! and what reaches it can imitate our lines only by knowing the nonce, which travels nowhere
//! but in the channel's own pipes (buffers and files have names of their own). A process of
//! the agent's user could still find it in the channel's memory; such a process can drive the
//! agent's tmux server directly anyway.
//!
//! Every command built here falls back, in the same shell text, to the per-process command it
//! replaces when the client is absent or its list failed: the answer is then that command's
//! (a session that ended, an old tmux without these client flags, an agent that detached the
//! client or deleted the server's socket).
//!
//! All captures of one list run before any save: tmux runs a list's commands back to back, but
//! a save may wait for its file, and the pane's output is read while a command waits.

use crate::tmux::{SESSION_NAME, shell_quote};

/// The shell functions, defined once per channel, and the client's start. `__tt LIST` runs a
/// tmux command list and returns 0 when it ran to its end, 1 when tmux stopped it at an error,
/// 98 when the client ended meanwhile, 99 without a client (or without the server's socket,
/// which an agent may have deleted: a tmux process could not reach the server then either);
/// `__tt_l` is then the last data line, with the lines tmux printed after it in the same block.
/// `__tt_cat FILE` prints a saved capture and empties the file (builtins only; `mapfile` reads
/// a regular file in blocks in every bash, where `read -d ''` reads a byte a call before 5.2).
/// SIGPIPE is ignored by the shell so that writing to a client that just ended fails the write
/// instead of ending the shell. The client runs under a subshell of its own whose messages go
/// nowhere: a client killed by a signal is reported by that subshell, not by the channel's
/// shell, which would print the report into the next command's output.
pub const LIBRARY: &str = include_str!("control.sh");

/// What [`start_command`] prints when the client runs.
const STARTED: &str = "control ";

/// The channel command that defines the functions and starts the client on the agent's session.
/// It prints `control DIR` when the client answers, `no control` otherwise.
/// A shell older than bash 4 has no coprocesses (nor `mapfile`) and would read the library as a
/// syntax error, which ends a shell reading its commands: it is only read (`eval`) by a bash 4.
pub fn start_command(nonce: &str) -> String {
    let start = format!("{LIBRARY}__tt_start {} {}", shell_quote(nonce), shell_quote(SESSION_NAME));
    format!(
        "if [ \"${{BASH_VERSINFO[0]:-0}}\" -ge 4 ] 2>/dev/null; then eval {}; else printf 'no control\\n'; fi",
        shell_quote(&start)
    )
}

/// A new nonce for [`start_command`]: lowercase letters, so it needs no quoting anywhere.
pub fn new_nonce() -> String {
    (0..16).map(|_| char::from(b'a' + rand::random::<u8>() % 26)).collect()
}

/// Quotes a word for tmux's command parser: single quotes, which keep everything literal
/// (`~`, `$`, `\`, `;`, `#`), with the characters they cannot hold — a single quote, and control
/// characters, which must not break the command line — as double-quoted escapes.
pub fn tmux_quote(word: &str) -> String {
    let mut out = String::from("'");
    for c in word.chars() {
        match c {
            // The channel's shell drops a NUL from what it reads, so a tmux process never
            // sees one; tmux's parser would end the word there.
            '\0' => {}
            '\'' => out.push_str("'\"'\"'"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("'\"\\{:03o}\"'", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A running control client of one channel: the nonce its functions know and the directory its
/// captures are saved in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    nonce: String,
    dir: String,
    /// What the buffers and files are named after (not the nonce: a file is visible).
    names: String,
}

/// One capture of a list: into a buffer, saved to a file after every capture of the list ran.
pub struct Capture {
    /// `capture-pane` into the buffer.
    pub capture: String,
    /// `save-buffer` to the file, then `delete-buffer` (the agent's `list-buffers` stays clean).
    pub save: String,
    /// Prints the file (shell text).
    pub print: String,
}

impl Control {
    /// The client [`start_command`] reported, or None when it did not start.
    pub fn started(stdout: &str, nonce: &str) -> Option<Control> {
        let dir = stdout.lines().rev().find_map(|l| l.strip_prefix(STARTED))?;
        Some(Control { nonce: nonce.to_string(), dir: dir.trim().to_string(), names: new_nonce() })
    }

    /// `display -p` of a data line `__tt` keeps in `__tt_l` (`format` is tmux-format text).
    pub fn display(&self, format: &str) -> String {
        format!("display -p -t {SESSION_NAME} {}", tmux_quote(&format!("{} = {format}", self.nonce)))
    }

    /// Capture number `k` of a list, with capture-pane's `args` (without `-p`).
    pub fn capture(&self, k: u32, args: &str) -> Capture {
        let buffer = format!("terminus-{}-{k}", self.names);
        let file = format!("{}/{buffer}", self.dir);
        Capture {
            capture: format!("capture-pane -b {buffer} -t {SESSION_NAME}{args}"),
            save: format!("save-buffer -b {buffer} {} ; delete-buffer -b {buffer}", tmux_quote(&file)),
            print: format!("__tt_cat {}", shell_quote(&file)),
        }
    }

    /// The shell text running `list` through the client (`__tt`).
    pub fn run(list: &str) -> String {
        format!("__tt {}", shell_quote(list))
    }

    /// Whether the session exists: through the client, else (also when it says no) the
    /// per-process `has-session`, whose exit code is the answer.
    pub fn has_session(&self) -> String {
        format!("{} || {}", Control::run(&format!("has-session -t {SESSION_NAME}")), crate::tmux::has_session_command())
    }

    /// Types `keys` through the client, else through the per-process `fallback` commands.
    pub fn send_keys(&self, keys: &[String], fallback: &[String]) -> String {
        let mut list = format!("send-keys -t {SESSION_NAME} --");
        for key in keys {
            list.push(' ');
            list.push_str(&tmux_quote(key));
        }
        // An empty group would be a syntax error, which ends a shell reading its commands.
        let fallback = if fallback.is_empty() { "false".to_string() } else { fallback.join(" && ") };
        format!("{} || {{ {fallback}; }}", Control::run(&list))
    }

    /// The screen (or with `entire` the whole history), else the per-process capture.
    pub fn capture_pane(&self, entire: bool) -> String {
        let capture = self.capture(1, if entire { " -S -" } else { "" });
        format!(
            "{} && {} || {}",
            Control::run(&format!("{} ; {}", capture.capture, capture.save)),
            capture.print,
            crate::tmux::capture_pane_command(entire)
        )
    }

    /// The foreground program's name, then the screen; else the per-process probe.
    pub fn idle_probe(&self) -> String {
        let capture = self.capture(1, "");
        format!(
            "{} && {{ printf '%s\\n' \"$__tt_l\"; {}; }} || {{ {}; }}",
            Control::run(&format!(
                "{} ; {} ; {}",
                self.display("#{pane_current_command}"),
                capture.capture,
                capture.save
            )),
            capture.print,
            crate::tmux::idle_probe_command()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_for_tmux_with_control_characters_escaped() {
        assert_eq!(tmux_quote("ls -la"), "'ls -la'");
        assert_eq!(tmux_quote(""), "''");
        assert_eq!(tmux_quote("it's"), "'it'\"'\"'s'");
        assert_eq!(tmux_quote("a\0b"), "'ab'", "a NUL is dropped, as the shell drops it");
        assert_eq!(tmux_quote("a\nb"), "'a'\"\\012\"'b'");
        assert_eq!(tmux_quote("\u{1b}[1m"), "''\"\\033\"'[1m'");
        assert_eq!(tmux_quote("~/$HOME \\; #{x}"), "'~/$HOME \\; #{x}'");
        // No raw newline or carriage return ever reaches the command line.
        let quoted = tmux_quote("\r\n\t\u{7f}");
        assert!(!quoted.contains('\n') && !quoted.contains('\r'), "{quoted}");
    }

    #[test]
    fn a_started_client_is_read_from_its_report() {
        let nonce = "q".repeat(16);
        let control = Control::started("control /tmp/tmux-0\n", &nonce).unwrap();
        let print = control.capture(2, "").print;
        assert!(print.starts_with("__tt_cat /tmp/tmux-0/terminus-") && print.ends_with("-2"), "{print}");
        assert!(!print.contains(&nonce), "a file is visible, the nonce is not in its name: {print}");
        assert_eq!(Control::started("no control\n", "abc"), None);
        assert_eq!(Control::started("", "abc"), None);
    }

    #[test]
    fn every_command_falls_back_to_the_one_it_replaces() {
        let control = Control::started("control /d", "n").unwrap();
        assert!(control.has_session().ends_with("|| tmux has-session -t terminus-2"));
        let fallback = crate::tmux::send_keys_commands(&["ls\n".into()]);
        let keys = control.send_keys(&["ls\n".into()], &fallback);
        assert!(keys.starts_with("__tt 'send-keys -t terminus-2 -- "), "{keys}");
        assert!(keys.ends_with(&format!("|| {{ {}; }}", fallback[0])), "{keys}");
        assert!(control.capture_pane(true).ends_with("|| tmux capture-pane -p -S - -t terminus-2"));
        assert!(control.idle_probe().contains("#{pane_current_command}"));
        assert!(control.send_keys(&["x".into()], &[]).ends_with("|| { false; }"));
    }

    #[test]
    fn the_library_is_read_only_by_a_bash_that_has_coprocesses() {
        let start = start_command("abc");
        assert!(start.starts_with("if [ \"${BASH_VERSINFO[0]:-0}\" -ge 4 ] 2>/dev/null; then eval '"), "{start}");
        assert!(start.ends_with("'; else printf 'no control\\n'; fi"), "{start}");
        let quoted = shell_quote(&format!("{LIBRARY}__tt_start abc terminus-2"));
        assert!(start.contains(&format!("then eval {quoted}; else")), "the library is all inside the quotes: {start}");
    }

    /// One `__tt` call against control_test.sh's stand-in for `tmux -C` answering `answer`:
    /// its exit code and what it kept in `__tt_l`.
    #[expect(clippy::disallowed_methods, reason = "the client's functions are bash: a bash runs them")]
    fn tt_against(answer: &str) -> (i32, String) {
        let script = format!("{LIBRARY}{}\nanswer_with \"$1\"", include_str!("control_test.sh"));
        let out = std::process::Command::new("bash")
            .args(["-c", &script, "bash", answer])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("bash runs");
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let (code, kept) = stdout.split_once('\n').unwrap_or((&stdout, ""));
        (code.strip_prefix("rc=").and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("{stdout}")), kept.into())
    }

    #[test]
    fn the_client_believes_only_its_own_answers() {
        // Success: the command's own `ok`, then the end line of this call.
        let ok = "%begin 1 1 0\n@N ok\n%end 1 1 0\n%begin 1 2 0\n@END\n%end 1 2 0";
        assert_eq!(tt_against(ok).0, 0);
        // The command failed: tmux skips the rest of the list, so no `ok` comes before the end.
        assert_eq!(tt_against("%begin 1 1 0\nunknown command: has-sesion\n%error 1 1 0\n@END").0, 1);
        // An `ok` under another client's nonce is not this command's.
        assert_eq!(tt_against("other ok\n@END").0, 1);
        // The end line of an earlier call (an older sequence number) ends nothing.
        assert_eq!(tt_against("@N end 4\n@N ok\n@END").0, 0);
        // Inside a data block every line is data, an `ok` or an end line included.
        let (code, kept) = tt_against("@N = first\n@N ok\n@N end 5\n%end 1 1 0\n@END");
        assert_eq!((code, kept.as_str()), (1, "first\n@N ok\n@N end 5".replace("@N", "n0nce").as_str()));
        let (code, kept) = tt_against("@N = /tmp/tmux-0/default\n%end 1 1 0\n@N ok\n@END");
        assert_eq!((code, kept.as_str()), (0, "/tmp/tmux-0/default"));
        // A client that died: the caller falls back (98), never waits.
        assert_eq!(tt_against("@EXIT").0, 98);
    }

    #[test]
    fn nonces_need_no_quoting() {
        let nonce = new_nonce();
        assert_eq!(nonce.len(), 16);
        assert_eq!(shell_quote(&nonce), nonce);
    }
}
