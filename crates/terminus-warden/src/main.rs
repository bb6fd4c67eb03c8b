//! The verification's own program in a trial container. The host starts it by absolute path
//! from a read-only mount, as root; it is linked statically, so nothing of the container's
//! (its shells, its loader, its libraries, its `PATH`) takes part until the tests themselves
//! run. Commands:
//!
//! - `prepare --kill none|all|terminal --reset rewards|everything|shared --owner USER
//!   [--ready-uptime SECS | --ready-ago SECS]`: kills what the verification does not keep (see [`procs`]), readies
//!   `/tests` and `/logs/verifier`, prints the processes left (`process:<name>` lines).
//! - `run --user USER --timeout SECS --kill none|all|terminal [--ready-ago SECS]`: runs
//!   `/tests/test.sh` as `USER`, its output to `/logs/verifier/test-stdout.txt`; then (unless
//!   `--kill none`) kills everything the tests left, and reads the reward files at once, printing
//!   them (see [`verdict`]). A terminal frozen by `prepare` goes on after that.
//! - `which --names A,B`: prints `found <path>` for each file named A or B in a directory of
//!   `PATH` or of the usual program directories.
//! - `thaw [--ready-ago SECS]`: lets a terminal frozen by `prepare` go on (the host's way out
//!   when the tests cannot run).
//!
//! `prepare`, `run` and `thaw` also take the host's `--idle-mark MARK` (the last argument of a
//! container's idle command, which is never killed) and `prepare` and `run` its `--kill-wait
//! SECS` (how long a kill waits for what it killed to be gone): the host holds both values.

mod procs;
mod sys;
mod user;
mod verdict;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

const TESTS: &str = "/tests";
const VERIFIER_LOGS: &str = "/logs/verifier";

/// What is killed before and after the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    None,
    All,
    /// All but the terminal, which a later step goes on in.
    AllButTerminal,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = writeln!(std::io::stdout(), "error {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (command, options) = args.split_first().ok_or("no command")?;
    let options = parse_options(options)?;
    let get = |key: &str| options.get(key).map(String::as_str);
    let kill = match get("kill").unwrap_or("none") {
        "none" => Kill::None,
        "all" => Kill::All,
        "terminal" => Kill::AllButTerminal,
        other => return Err(format!("--kill {other}: none, all or terminal")),
    };
    let ready_ago: f64 = get("ready-ago").unwrap_or("0").parse().map_err(|_| "--ready-ago: seconds")?;
    let ready_uptime: Option<f64> =
        get("ready-uptime").map(|u| u.parse().map_err(|_| "--ready-uptime: seconds")).transpose()?;
    let ready = Ready { ago: ready_ago, uptime: ready_uptime };
    // The host's: the last argument of a container's idle command, and how long a kill waits
    // for what it killed to be gone.
    let idle_mark = || get("idle-mark").ok_or("--idle-mark");
    let kill_wait = || -> Result<std::time::Duration, String> {
        let secs: f64 = get("kill-wait").ok_or("--kill-wait")?.parse().map_err(|_| "--kill-wait: seconds")?;
        Ok(std::time::Duration::from_secs_f64(secs.max(0.0)))
    };
    match command.as_str() {
        "prepare" => {
            let keep = keep(kill, ready, idle_mark()?);
            if kill != Kill::None {
                procs::kill_all_but(&keep, kill_wait()?);
            }
            let owner = resolve_user(get("owner").unwrap_or("root"))?;
            reset(get("reset").unwrap_or("rewards"), &owner)?;
            let mut out = String::new();
            for (name, count) in procs::census(&keep) {
                for _ in 0..count {
                    out.push_str(&format!("process:{name}\n"));
                }
            }
            out.push_str("ok\n");
            std::io::stdout().write_all(out.as_bytes()).map_err(|e| e.to_string())
        }
        "run" => {
            let user = resolve_user(get("user").unwrap_or("root"))?;
            let timeout: f64 = get("timeout").ok_or("--timeout")?.parse().map_err(|_| "--timeout: seconds")?;
            let keep = keep(kill, ready, idle_mark()?);
            let wait = if kill == Kill::None { None } else { Some(kill_wait()?) };
            let report = verdict::run_tests(&user, std::time::Duration::from_secs_f64(timeout.max(0.0)), wait, &keep);
            procs::thaw(&keep);
            std::io::stdout().write_all(&report).map_err(|e| e.to_string())
        }
        "which" => {
            let names = get("names").unwrap_or_default();
            let out: String =
                which(names.split(',').filter(|n| !n.is_empty())).iter().map(|p| format!("found {p}\n")).collect();
            std::io::stdout().write_all(format!("{out}ok\n").as_bytes()).map_err(|e| e.to_string())
        }
        "thaw" => {
            procs::thaw(&keep(Kill::AllButTerminal, ready, idle_mark()?));
            std::io::stdout().write_all(b"ok\n").map_err(|e| e.to_string())
        }
        other => Err(format!("unknown command {other}")),
    }
}

/// Where each of `names` is, in `PATH`'s directories and the usual ones.
fn which<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    let mut dirs: Vec<&str> = path.split(':').filter(|d| d.starts_with('/')).collect();
    for usual in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        if !dirs.contains(&usual) {
            dirs.push(usual);
        }
    }
    let mut found = Vec::new();
    for name in names.filter(|n| !n.contains('/')) {
        for dir in &dirs {
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            if std::fs::symlink_metadata(&path).is_ok() {
                found.push(path);
            }
        }
    }
    found
}

/// `--key value` pairs.
fn parse_options(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    let mut options = BTreeMap::new();
    let mut args = args.iter();
    while let Some(key) = args.next() {
        let key = key.strip_prefix("--").ok_or_else(|| format!("expected an option, got {key:?}"))?;
        let value = args.next().ok_or_else(|| format!("--{key} needs a value"))?;
        options.insert(key.to_string(), value.clone());
    }
    Ok(options)
}

/// When the terminal was handed to the agent: by this clock (`/proc/uptime`), or so long ago.
#[derive(Clone, Copy, Debug)]
struct Ready {
    ago: f64,
    uptime: Option<f64>,
}

/// The tick of a `/proc/uptime` reading (hundredths, truncated): rounded, not truncated again
/// (1234.56 s times 100 is 123455.99…). Whatever started up to the reading has a start tick at
/// most this; the host hands the terminal to the agent only two ticks after the reading.
fn uptime_tick(uptime: f64, ticks: f64) -> u64 {
    (uptime.max(0.0) * ticks).round() as u64
}

/// What this run keeps alive.
fn keep(kill: Kill, ready: Ready, idle_mark: &str) -> procs::Keep {
    let all = procs::scan();
    let ticks = sys::clock_ticks() as f64;
    let ready = match ready.uptime {
        Some(uptime) => uptime_tick(uptime, ticks),
        None => procs::now_ticks().saturating_sub((ready.ago.max(0.0) * ticks) as u64),
    };
    procs::Keep {
        me: std::process::id() as i32,
        idle: procs::idle(&all, &procs::init_args(), idle_mark),
        terminal: if kill == Kill::AllButTerminal { procs::terminal(&all, ready) } else { None },
    }
}

fn resolve_user(spec: &str) -> Result<user::User, String> {
    if spec == "root" || spec == "0" {
        return Ok(user::User::root());
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    user::resolve(spec, &read("/etc/passwd"), &read("/etc/group"))
}

/// Readies `/tests` and `/logs/verifier` (owned by `owner`): `rewards` removes only the reward
/// files; `everything` empties both; `shared` empties `/tests` and removes only the reward files
/// from `/logs/verifier`, which a task's sidecars write too.
fn reset(how: &str, owner: &user::User) -> Result<(), String> {
    let remove_rewards = || {
        for name in verdict::REWARD_FILES {
            let _ = std::fs::remove_file(format!("{VERIFIER_LOGS}/{name}"));
        }
    };
    match how {
        "rewards" => remove_rewards(),
        "everything" => {
            remove_any(TESTS);
            remove_any(VERIFIER_LOGS);
        }
        "shared" => {
            remove_any(TESTS);
            remove_rewards();
        }
        other => return Err(format!("--reset {other}: rewards, everything or shared")),
    }
    for dir in [TESTS, VERIFIER_LOGS] {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {dir}: {e}"))?;
    }
    use std::os::unix::fs::PermissionsExt;
    let _ = std::os::unix::fs::chown(VERIFIER_LOGS, Some(owner.uid), Some(owner.gid));
    std::fs::set_permissions(VERIFIER_LOGS, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

/// Removes `path` whatever it is (a link is removed, not followed).
fn remove_any(path: &str) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uptime_reading_covers_the_tick_it_was_read_in() {
        assert_eq!(uptime_tick(1234.56, 100.0), 123_456);
        assert_eq!(uptime_tick(0.29, 100.0), 29, "0.29 * 100 is 28.99…");
    }

    #[test]
    fn options_come_in_pairs() {
        let args: Vec<String> = ["--kill", "all", "--timeout", "5"].map(String::from).to_vec();
        let options = parse_options(&args).unwrap();
        assert_eq!(options["kill"], "all");
        assert!(parse_options(&["--kill".to_string()]).is_err());
        assert!(parse_options(&["kill".to_string()]).is_err());
    }
}
