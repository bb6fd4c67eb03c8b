//! tmux command building and the incremental-output bookkeeping of a Terminus session. Pure:
//! nothing here runs a command; the TmuxSession actor sends these strings down a shell channel.
//!
//! Behaviour follows Terminus 2's tmux session, with two deliberate repairs (docs/DIFFERENCES.md):
//! the history limit is set in the same tmux invocation that creates the session, because tmux
//! applies `history-limit` only to panes created after it is set; and a key ending in `;` gets
//! that semicolon escaped, because tmux otherwise reads it as a command separator and drops it.

use std::collections::BTreeMap;

/// The name of the agent's tmux session.
pub const SESSION_NAME: &str = "terminus-2";
/// The scrollback the agent's pane keeps: raised from tmux's 2,000 lines, but not to
/// the reference's 10 million, which a flood of output turns into gigabytes of tmux memory in
/// the agent's container. Observations read only what is new (`observe`), whatever the size.
pub const HISTORY_LIMIT: u64 = 200_000;
/// What the reference runs after the session exists: it raises the limit for panes made later,
/// so the agent's pane keeps tmux's default of 2,000 lines.
pub const REFERENCE_HISTORY_COMMAND: &str = "tmux set-option -g history-limit 10000000";
/// The longest `tmux send-keys` command we build (the reference's limit, well below ARG_MAX).
pub const MAX_SEND_KEYS_COMMAND: usize = 16_000;

/// Keys that make the shell execute what was typed.
const ENTER_KEYS: &[&str] = &["Enter", "C-m", "KPEnter", "C-j", "^M", "^J"];

/// Quotes a word for a POSIX shell exactly as Python's `shlex.quote` does.
pub fn shell_quote(word: &str) -> String {
    if word.is_empty() {
        return "''".to_string();
    }
    let safe = word.chars().all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if safe { word.to_string() } else { format!("'{}'", word.replace('\'', "'\"'\"'")) }
}

/// Pane dimensions, validated when built (non-positive sizes are refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaneSize {
    width: u32,
    height: u32,
}

impl PaneSize {
    pub fn new(width: i64, height: i64) -> Result<PaneSize, String> {
        if width <= 0 || height <= 0 || width > u32::MAX as i64 || height > u32::MAX as i64 {
            return Err("pane_width and pane_height must be positive integers".to_string());
        }
        Ok(PaneSize { width: width as u32, height: height as u32 })
    }

    pub fn width(self) -> u32 {
        self.width
    }

    pub fn height(self) -> u32 {
        self.height
    }
}

/// The shell command that starts the session. With `with_history_limit`, the scrollback is raised
/// in the same invocation (before the pane exists, so it applies to it).
pub fn start_session_command(
    size: PaneSize,
    extra_env: &BTreeMap<String, String>,
    pane_log: &str,
    with_history_limit: bool,
) -> String {
    let mut cmd = String::from("export TERM=xterm-256color && export SHELL=/bin/bash && tmux ");
    if with_history_limit {
        cmd.push_str(&format!("set-option -g history-limit {HISTORY_LIMIT} \\; "));
    }
    cmd.push_str("new-session ");
    for (key, value) in extra_env {
        cmd.push_str(&format!("-e {} ", shell_quote(&format!("{key}={value}"))));
    }
    cmd.push_str(&format!(
        "-x {} -y {} -d -s {} 'bash --login' \\; pipe-pane -t {} {}",
        size.width,
        size.height,
        SESSION_NAME,
        SESSION_NAME,
        shell_quote(&format!("cat > {pane_log}"))
    ));
    cmd
}

/// Cancels the pane's mode, if it is in one (always exits 0).
pub fn leave_modes_command() -> String {
    format!("tmux send-keys -t {SESSION_NAME} -X cancel 2>/dev/null; true")
}

/// `tmux has-session`, whose exit code says whether the session is alive.
pub fn has_session_command() -> String {
    format!("tmux has-session -t {SESSION_NAME}")
}

/// Captures the pane: the visible screen, or (`entire`) the whole history too.
pub fn capture_pane_command(entire: bool) -> String {
    if entire {
        format!("tmux capture-pane -p -S - -t {SESSION_NAME}")
    } else {
        format!("tmux capture-pane -p -t {SESSION_NAME}")
    }
}

/// One channel command printing the pane's foreground program, then its screen.
pub fn idle_probe_command() -> String {
    format!("tmux display -p -t {SESSION_NAME} '#{{pane_current_command}}'; {}", capture_pane_command(false))
}

/// Whether the terminal looks idle: a shell in the foreground (or, when another program sits in
/// front of the shell, a prompt on the last non-empty line).
pub fn looks_idle(probe_output: &str) -> bool {
    let (command, screen) = probe_output.split_once('\n').unwrap_or((probe_output, ""));
    if matches!(command.trim(), "bash" | "sh" | "dash" | "zsh" | "fish" | "ash") {
        return true;
    }
    let last = screen.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let last = last.trim_end();
    last.ends_with('$') || last.ends_with('#') || last.ends_with('>') || last.ends_with('%')
}

/// Whether a key makes the shell run what was typed.
pub fn is_executing_key(key: &str) -> bool {
    ENTER_KEYS.contains(&key) || key.ends_with('\n') || key.ends_with('\r')
}

/// tmux treats an argument ending in `;` as the end of a command; a preceding backslash makes
/// the semicolon literal (and is itself removed). Escaping every trailing `;` this way types
/// exactly what the model asked for.
fn escape_trailing_semicolon(key: &str) -> String {
    match key.strip_suffix(';') {
        Some(head) => format!("{head}\\;"),
        None => key.to_string(),
    }
}

/// Builds the `tmux send-keys` commands typing `keys`, each at most
/// [`MAX_SEND_KEYS_COMMAND`] characters; a key too long for one command is split across several.
/// Concatenating the typed arguments of all commands gives back the keys.
pub fn send_keys_commands(keys: &[String]) -> Vec<String> {
    build_send_keys(keys, escape_trailing_semicolon)
}

/// The same, with each key passed as it is, as the reference passes it: a final `;` then ends
/// a tmux command and is not typed.
pub fn send_keys_commands_as_given(keys: &[String]) -> Vec<String> {
    build_send_keys(keys, str::to_string)
}

fn build_send_keys(keys: &[String], escape_trailing_semicolon: fn(&str) -> String) -> Vec<String> {
    // `--` ends tmux's flags: a key that starts with `-` (`-la`, `--help`) is typed, not parsed.
    let prefix = format!("tmux send-keys -t {} --", shell_quote(SESSION_NAME));
    let quoted: Vec<String> = keys.iter().map(|k| shell_quote(&escape_trailing_semicolon(k))).collect();
    let single_len = prefix.chars().count() + quoted.iter().map(|q| 1 + q.chars().count()).sum::<usize>();
    if single_len <= MAX_SEND_KEYS_COMMAND {
        let mut cmd = prefix;
        for q in &quoted {
            cmd.push(' ');
            cmd.push_str(q);
        }
        return vec![cmd];
    }
    let max_quoted = MAX_SEND_KEYS_COMMAND - prefix.chars().count() - 1;
    let mut pieces: Vec<String> = Vec::new();
    for key in keys {
        let q = shell_quote(&escape_trailing_semicolon(key));
        if q.chars().count() <= max_quoted {
            pieces.push(q);
        } else {
            pieces.extend(
                split_key(key, max_quoted, escape_trailing_semicolon)
                    .iter()
                    .map(|chunk| shell_quote(&escape_trailing_semicolon(chunk))),
            );
        }
    }
    let mut commands = Vec::new();
    let mut current = prefix.clone();
    let mut current_len = prefix.chars().count();
    let mut has_args = false;
    for piece in pieces {
        let piece_len = 1 + piece.chars().count();
        if has_args && current_len + piece_len > MAX_SEND_KEYS_COMMAND {
            commands.push(std::mem::replace(&mut current, prefix.clone()));
            current_len = prefix.chars().count();
        }
        current.push(' ');
        current.push_str(&piece);
        current_len += piece_len;
        has_args = true;
    }
    if has_args {
        commands.push(current);
    }
    commands
}

/// Splits a key into the longest prefixes whose quoted form fits `max_quoted` characters
/// (binary search on the prefix length; quoting only grows with length).
fn split_key(key: &str, max_quoted: usize, escape_trailing_semicolon: fn(&str) -> String) -> Vec<String> {
    let chars: Vec<char> = key.chars().collect();
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let quoted_len = |end: usize| {
            let chunk: String = chars[start..end].iter().collect();
            shell_quote(&escape_trailing_semicolon(&chunk)).chars().count()
        };
        let (mut lo, mut hi) = (start + 1, chars.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if quoted_len(mid) <= max_quoted { lo = mid } else { hi = mid - 1 }
        }
        chunks.push(chars[start..lo].iter().collect());
        start = lo;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What tmux types for one command: the unquoted arguments after the prefix, with the
    /// trailing-semicolon escape undone.
    fn typed(command: &str) -> String {
        let rest = command.strip_prefix("tmux send-keys -t terminus-2 --").unwrap();
        let mut out = String::new();
        for arg in shell_words(rest) {
            let arg = match arg.strip_suffix("\\;") {
                Some(head) => format!("{head};"),
                None => arg,
            };
            out.push_str(&arg);
        }
        out
    }

    /// A tiny POSIX word splitter for single-quoted words (enough for shell_quote output).
    fn shell_words(text: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut current = String::new();
        let mut in_word = false;
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            match c {
                ' ' => {
                    if in_word {
                        words.push(std::mem::take(&mut current));
                        in_word = false;
                    }
                }
                '\'' => {
                    in_word = true;
                    for q in chars.by_ref() {
                        if q == '\'' {
                            break;
                        }
                        current.push(q);
                    }
                }
                '"' => {
                    in_word = true;
                    for q in chars.by_ref() {
                        if q == '"' {
                            break;
                        }
                        current.push(q);
                    }
                }
                other => {
                    in_word = true;
                    current.push(other);
                }
            }
        }
        if in_word {
            words.push(current);
        }
        words
    }

    #[test]
    fn quoting_matches_python_shlex() {
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("terminus-2"), "terminus-2");
        assert_eq!(shell_quote("ls -la"), "'ls -la'");
        assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
        assert_eq!(shell_quote("é"), "'é'");
    }

    #[test]
    fn a_small_payload_stays_one_command() {
        let cmds = send_keys_commands(&["ls -la\n".to_string(), "Enter".to_string()]);
        assert_eq!(cmds, vec!["tmux send-keys -t terminus-2 -- 'ls -la\n' Enter".to_string()]);
    }

    #[test]
    fn a_long_key_is_split_below_the_limit_and_reassembles() {
        let key = "x".repeat(32_000);
        let cmds = send_keys_commands(std::slice::from_ref(&key));
        assert!(cmds.len() >= 3);
        assert!(cmds.iter().all(|c| c.chars().count() <= MAX_SEND_KEYS_COMMAND));
        assert_eq!(cmds.iter().map(|c| typed(c)).collect::<String>(), key);
    }

    #[test]
    fn quote_heavy_keys_split_correctly() {
        let key = "a'b".repeat(6_000);
        let cmds = send_keys_commands(std::slice::from_ref(&key));
        assert!(cmds.iter().all(|c| c.chars().count() <= MAX_SEND_KEYS_COMMAND));
        assert_eq!(cmds.iter().map(|c| typed(c)).collect::<String>(), key);
    }

    #[test]
    fn many_keys_are_packed_greedily() {
        let keys: Vec<String> = (0..100).map(|i| format!("{i:03}{}", "k".repeat(497))).collect();
        let cmds = send_keys_commands(&keys);
        assert!(cmds.len() > 1 && cmds.len() < 10);
        assert!(cmds.iter().all(|c| c.chars().count() <= MAX_SEND_KEYS_COMMAND));
        assert_eq!(cmds.iter().map(|c| typed(c)).collect::<String>(), keys.concat());
    }

    #[test]
    fn trailing_semicolons_are_escaped() {
        assert_eq!(
            send_keys_commands(&["echo a;".to_string()]),
            vec!["tmux send-keys -t terminus-2 -- 'echo a\\;'".to_string()]
        );
        assert_eq!(typed(&send_keys_commands(&["find . -exec ls {} \\;".to_string()])[0]), "find . -exec ls {} \\;");
    }

    #[test]
    fn pane_sizes_are_validated() {
        assert!(PaneSize::new(160, 40).is_ok());
        assert!(PaneSize::new(0, 40).is_err());
        assert!(PaneSize::new(160, -1).is_err());
    }

    #[test]
    fn start_command_carries_env_size_and_pane_log() {
        let env = BTreeMap::from([("FOO".to_string(), "a b".to_string())]);
        let cmd = start_session_command(PaneSize::new(200, 50).unwrap(), &env, "/logs/agent/terminus_2.pane", true);
        assert!(cmd.starts_with("export TERM=xterm-256color && export SHELL=/bin/bash && tmux set-option -g history-limit 200000 \\; new-session -e 'FOO=a b' -x 200 -y 50 -d -s terminus-2 'bash --login'"), "{cmd}");
        assert!(cmd.ends_with("pipe-pane -t terminus-2 'cat > /logs/agent/terminus_2.pane'"), "{cmd}");
    }

    #[test]
    fn idleness_is_read_from_the_foreground_program_or_the_prompt() {
        assert!(looks_idle("bash\nroot@x:/app# ls\nfile\nroot@x:/app# \n\n"));
        assert!(!looks_idle("sleep\nroot@x:/app# sleep 5\n\n"));
        assert!(looks_idle("asciinema\nroot@x:/app# sleep 5\nroot@x:/app# \n"));
        assert!(!looks_idle("asciinema\nroot@x:/app# sleep 5\n"));
        assert!(idle_probe_command().contains("#{pane_current_command}"));
    }

    #[test]
    fn executing_keys_are_recognised() {
        assert!(is_executing_key("Enter"));
        assert!(is_executing_key("ls\n"));
        assert!(!is_executing_key("C-c"));
    }
}
