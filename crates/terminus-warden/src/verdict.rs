//! The tests' run and the verdict: `/tests/test.sh` started as the tests' user, its output to
//! `/logs/verifier/test-stdout.txt`, and the reward files read the instant it ends (after the
//! kill, when there is one), so nothing that runs on afterwards can change what is graded.
//!
//! The report, on standard output: `tests exit <code>` (or `signal <n>`, `timeout`, `failed
//! <why>`), then for each reward file present either `reward <name> <length>`, a newline, its
//! bytes and a newline, or `reward-refused <name> <why>`.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::procs::{self, Keep};
use crate::sys;
use crate::user::User;

/// The reward files, in the order the host reads them.
pub const REWARD_FILES: [&str; 2] = ["reward.json", "reward.txt"];

/// The largest reward file reported (a flat object of numbers is far smaller).
pub const MAX_REWARD_BYTES: u64 = 256 * 1024;

const TEST_SCRIPT: &str = "/tests/test.sh";
const TEST_STDOUT: &str = "/logs/verifier/test-stdout.txt";

/// Runs the tests and returns the report. With `kill`, what is not kept is killed before the
/// tests start and again the instant they end, before the verdict is read.
pub fn run_tests(user: &User, timeout: Duration, kill: Option<Duration>, keep: &Keep) -> Vec<u8> {
    if let Some(wait) = kill {
        procs::kill_all_but(keep, wait);
    }
    let outcome = match start(user) {
        Ok(child) => wait(child, timeout),
        Err(e) => format!("failed {e}"),
    };
    if let Some(wait) = kill {
        procs::kill_all_but(keep, wait);
    }
    let mut report = format!("tests {outcome}\n").into_bytes();
    for name in REWARD_FILES {
        read_reward(name, &mut report);
    }
    report
}

/// Starts the tests in a process group of their own.
fn start(user: &User) -> Result<std::process::Child, String> {
    if let Ok(meta) = std::fs::metadata(TEST_SCRIPT) {
        let mode = meta.permissions().mode() | 0o111;
        let _ = std::fs::set_permissions(TEST_SCRIPT, std::fs::Permissions::from_mode(mode));
    }
    let output = open_output(user)?;
    let errors = output.try_clone().map_err(|e| e.to_string())?;
    let command = |program: &str| {
        let mut command = Command::new(program);
        command.stdin(Stdio::null()).stdout(output.try_clone().map(Stdio::from).unwrap_or(Stdio::null()));
        command.stderr(errors.try_clone().map(Stdio::from).unwrap_or(Stdio::null())).process_group(0);
        if user.uid != 0 {
            command.env("HOME", &user.home);
        }
        sys::run_as(&mut command, user.uid, user.gid, user.groups.clone());
        command
    };
    match command(TEST_SCRIPT).spawn() {
        Ok(child) => Ok(child),
        // No `#!` line: run by bash, as a shell runs a script it cannot exec.
        Err(e) if e.raw_os_error() == Some(8) => {
            let mut bash = command("/bin/bash");
            bash.arg(TEST_SCRIPT);
            bash.spawn().map_err(|e| format!("/bin/bash {TEST_SCRIPT}: {e}"))
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(&output, "{TEST_SCRIPT}: {e}");
            Err(format!("{TEST_SCRIPT}: {e}"))
        }
    }
}

/// The tests' output file, new (a link planted at its name is removed, not followed), owned by
/// the tests' user.
fn open_output(user: &User) -> Result<std::fs::File, String> {
    let mut last = String::new();
    for _ in 0..3 {
        let _ = std::fs::remove_file(TEST_STDOUT);
        match std::fs::OpenOptions::new().write(true).create_new(true).open(TEST_STDOUT) {
            Ok(file) => {
                let _ = std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid));
                return Ok(file);
            }
            Err(e) => last = format!("{TEST_STDOUT}: {e}"),
        }
    }
    Err(last)
}

/// Waits for the tests, killing their process group at the time limit. The wait returns the
/// instant they end (a watchdog thread keeps the time), so what comes after them starts at once.
fn wait(mut child: std::process::Child, timeout: Duration) -> String {
    use std::sync::atomic::{AtomicBool, Ordering};
    static TIMED_OUT: AtomicBool = AtomicBool::new(false);
    let group = child.id() as i32;
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        TIMED_OUT.store(true, Ordering::SeqCst);
        sys::signal(-group, sys::SIGKILL);
    });
    let status = child.wait();
    if TIMED_OUT.load(Ordering::SeqCst) {
        return "timeout".to_string();
    }
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            _ => "exit -1".to_string(),
        },
        Err(e) => format!("failed {e}"),
    }
}

/// Appends one reward file to the report, when it is there.
fn read_reward(name: &str, report: &mut Vec<u8>) {
    let path = format!("/logs/verifier/{name}");
    let Ok(meta) = std::fs::symlink_metadata(&path) else { return };
    if !meta.file_type().is_file() {
        report.extend(format!("reward-refused {name} not a regular file\n").into_bytes());
        return;
    }
    if meta.len() > MAX_REWARD_BYTES {
        report.extend(format!("reward-refused {name} {} bytes\n", meta.len()).into_bytes());
        return;
    }
    let mut bytes = Vec::new();
    match std::fs::File::open(&path).and_then(|f| f.take(MAX_REWARD_BYTES + 1).read_to_end(&mut bytes)) {
        Ok(_) if bytes.len() as u64 > MAX_REWARD_BYTES => {
            report.extend(format!("reward-refused {name} more than {MAX_REWARD_BYTES} bytes\n").into_bytes());
        }
        Ok(_) => {
            report.extend(format!("reward {name} {}\n", bytes.len()).into_bytes());
            report.extend(bytes);
            report.push(b'\n');
        }
        Err(e) => report.extend(format!("reward-refused {name} {e}\n").into_bytes()),
    }
}
