//! The container's processes as `/proc` lists them, which of them the verification keeps, and
//! the loop that kills the rest.
//!
//! Kept are init, this program, the container's idle command and, when a terminal goes on
//! into a later step, that terminal: the first-started tmux server; its first child, the pane's
//! shell (without what it runs: the agent's commands); its other children that started before
//! the terminal was handed to the agent (the pane log's pipe) with what they run; and the exec
//! sessions older than the server (the host's command channel, which started the terminal) with
//! all below them. Nothing the agent started can be older than what it was given, and the
//! agent cannot make an old process fork, so no process of its passes for one of these however
//! it names itself.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::sys;

/// One process, as its `stat` file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub state: char,
    /// Clock ticks after boot.
    pub start: u64,
    pub comm: String,
}

/// Reads one `/proc/<pid>/stat`. The command name may hold spaces and parentheses: it runs from
/// the first `(` to the last `)`.
pub fn parse_stat(pid: i32, text: &str) -> Option<Proc> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Proc {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
        comm,
    })
}

/// Every process now (one that exits while it is read is left out).
pub fn scan() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut procs = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if let Some(proc) = std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|t| parse_stat(pid, &t)) {
            procs.push(proc);
        }
    }
    procs
}

/// The container's idle command: PID 1 itself when its last argument is `mark` (no process can
/// change PID 1's arguments), else the first-started child of PID 1, started before anything
/// the agent could run.
pub fn idle(procs: &[Proc], init_args: &[String], mark: &str) -> Option<i32> {
    if init_args.last().is_some_and(|a| a == mark) {
        return None;
    }
    procs.iter().filter(|p| p.ppid == 1).min_by_key(|p| (p.start, p.pid)).map(|p| p.pid)
}

/// PID 1's arguments.
pub fn init_args() -> Vec<String> {
    let bytes = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    bytes.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// The terminal that goes on into the next step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Terminal {
    /// The tmux server and its children from before `ready`: frozen while the tests run.
    pub frozen: Vec<(i32, u64)>,
    /// The exec sessions older than the server, and all below them: the host's.
    pub host: Vec<(i32, u64)>,
}

/// The terminal in `procs`, when a tmux server runs; `ready` is the tick at which the terminal
/// was handed to the agent.
pub fn terminal(procs: &[Proc], ready: u64) -> Option<Terminal> {
    let server =
        procs.iter().filter(|p| p.comm == "tmux: server" && p.state != 'Z').min_by_key(|p| (p.start, p.pid))?;
    let mut frozen = vec![(server.pid, server.start)];
    let mut early: Vec<&Proc> = procs.iter().filter(|p| p.ppid == server.pid && p.start <= ready).collect();
    early.sort_by_key(|p| (p.start, p.pid));
    if let Some((pane, others)) = early.split_first() {
        frozen.push((pane.pid, pane.start));
        let others: Vec<i32> = others.iter().map(|p| p.pid).collect();
        frozen.extend(descendants(procs, &others).into_iter().chain(others).filter_map(|pid| key(procs, pid)));
    }
    let roots: Vec<i32> =
        procs.iter().filter(|p| p.ppid == 0 && p.pid != 1 && p.start <= server.start).map(|p| p.pid).collect();
    let host = descendants(procs, &roots).into_iter().chain(roots).filter_map(|pid| key(procs, pid)).collect();
    Some(Terminal { frozen, host })
}

fn key(procs: &[Proc], pid: i32) -> Option<(i32, u64)> {
    procs.iter().find(|p| p.pid == pid).map(|p| (p.pid, p.start))
}

/// Every process below `roots`.
pub fn descendants(procs: &[Proc], roots: &[i32]) -> Vec<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut found = Vec::new();
    let mut frontier: Vec<i32> = roots.to_vec();
    while let Some(pid) = frontier.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if !found.contains(&child) && !roots.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// What the verification keeps alive, by PID and start time (a recycled PID is not kept).
#[derive(Clone, Debug, Default)]
pub struct Keep {
    pub me: i32,
    pub idle: Option<i32>,
    pub terminal: Option<Terminal>,
}

impl Keep {
    pub fn keeps(&self, p: &Proc) -> bool {
        if p.pid == 1 || p.pid == self.me || Some(p.pid) == self.idle {
            return true;
        }
        self.terminal
            .as_ref()
            .is_some_and(|t| t.frozen.iter().chain(&t.host).any(|&(pid, start)| (pid, start) == (p.pid, p.start)))
    }

    fn frozen(&self) -> &[(i32, u64)] {
        self.terminal.as_ref().map_or(&[], |t| t.frozen.as_slice())
    }
}

/// Freezes every process, kills every one `keep` does not keep until none is left or `wait`
/// has passed (a killed process is listed until it has exited; a fork bomb cannot outrun a
/// killer whose victims can no longer fork), then lets the kept ones go on, but the terminal,
/// which stays frozen.
pub fn kill_all_but(keep: &Keep, wait: Duration) {
    sys::signal(-1, sys::SIGSTOP);
    let until = Instant::now() + wait;
    loop {
        let mut left = false;
        for p in scan() {
            if p.state != 'Z' && !keep.keeps(&p) && sys::signal(p.pid, sys::SIGKILL) {
                left = true;
            }
        }
        if !left || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let frozen: HashSet<(i32, u64)> = keep.frozen().iter().copied().collect();
    for p in scan() {
        if !frozen.contains(&(p.pid, p.start)) {
            sys::signal(p.pid, sys::SIGCONT);
        }
    }
}

/// Lets a frozen terminal go on.
pub fn thaw(keep: &Keep) {
    for &(pid, start) in keep.frozen() {
        if scan().iter().any(|p| (p.pid, p.start) == (pid, start)) {
            sys::signal(pid, sys::SIGCONT);
        }
    }
}

/// The live processes but init, this program and the idle command, by name.
pub fn census(keep: &Keep) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for p in scan() {
        if p.state == 'Z' || p.pid == 1 || p.pid == keep.me || Some(p.pid) == keep.idle {
            continue;
        }
        *counts.entry(p.comm).or_insert(0) += 1;
    }
    counts
}

/// The tick now (clock ticks after boot, the unit of [`Proc::start`]).
pub fn now_ticks() -> u64 {
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let seconds: f64 = uptime.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    (seconds * sys::clock_ticks() as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, start: u64, comm: &str) -> Proc {
        Proc { pid, ppid, state: 'S', start, comm: comm.into() }
    }

    #[test]
    fn a_stat_line_is_read_whatever_the_command_is_named() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10";
        let proc = parse_stat(42, line).unwrap();
        assert_eq!((proc.comm.as_str(), proc.state, proc.ppid, proc.start), ("a (b) c", 'S', 7, 12345));
        assert_eq!(parse_stat(1, "1 (x) S"), None);
    }

    #[test]
    fn the_idle_command_is_init_s_oldest_child_unless_init_is_it() {
        let procs = [p(7, 1, 50, "sleep"), p(9, 1, 40, "agentd"), p(5, 1, 10, "sleep")];
        assert_eq!(idle(&procs, &["sh".into(), "-c".into(), "x".into()], "mark"), Some(5));
        assert_eq!(idle(&procs, &["sh".into(), "mark".into()], "mark"), None);
    }

    #[test]
    fn the_terminal_keeps_only_what_it_had_when_the_agent_got_it() {
        let procs = [
            p(20, 0, 100, "bash"),  // the host's command channel
            p(21, 20, 101, "tail"), // its follower
            p(30, 1, 110, "tmux: server"),
            p(31, 30, 111, "bash"),        // the pane's shell
            p(32, 30, 111, "sh"),          // pipe-pane
            p(33, 32, 300, "cat"),         // what the pipe runs
            p(34, 31, 120, "clear"),       // what the pane's shell ran
            p(40, 30, 500, "sh"),          // the agent's new-window
            p(41, 31, 600, "python3"),     // what the pane runs
            p(50, 1, 700, "tmux: server"), // a server of the agent's
            p(60, 0, 800, "bash"),         // a later exec
        ];
        let t = terminal(&procs, 200).unwrap();
        let mut frozen = t.frozen.clone();
        frozen.sort();
        assert_eq!(frozen, vec![(30, 110), (31, 111), (32, 111), (33, 300)]);
        let mut host = t.host.clone();
        host.sort();
        assert_eq!(host, vec![(20, 100), (21, 101)]);
        let keep = Keep { me: 99, idle: None, terminal: Some(t) };
        let kept: Vec<i32> = procs.iter().filter(|p| keep.keeps(p)).map(|p| p.pid).collect();
        assert_eq!(kept, vec![20, 21, 30, 31, 32, 33]);
        let recycled = Proc { start: 900, ..procs[3].clone() };
        assert!(!keep.keeps(&recycled), "a recycled PID is not the pane's shell");
    }
}
