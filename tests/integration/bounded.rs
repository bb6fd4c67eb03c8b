//! Bounded waits on the processes a test starts. No test waits on a child without a limit: past
//! [`PROCESS_LIMIT`] the child (and, when it leads one, its process group) is killed and the test
//! fails naming the command and what it printed. tests/tidy.rs keeps the std waits out of the
//! other test files.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How long any one process a test starts may run. Inside the per-test limit of the `ci`
/// profile in .config/nextest.toml (six minutes), so that a hang is named by the process that
/// hung rather than only by the test.
pub const PROCESS_LIMIT: Duration = Duration::from_secs(300);

/// How long a process that was killed (by a test's own clean-up) gets to be reaped.
const REAP_LIMIT: Duration = Duration::from_secs(10);

/// How often a bounded wait looks at the child.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// How much of a hung process's output the failure shows, from its end.
const SHOWN_TAIL: usize = 4000;

/// `output()` and `status()`, bounded by [`PROCESS_LIMIT`].
pub trait BoundedCommand {
    /// As `Command::output` (stdin closed, stdout and stderr captured), the child leading a
    /// process group of its own, so that a hang is killed with everything it started.
    fn output_bounded(&mut self) -> io::Result<Output>;
    /// As `Command::status` (stdio inherited).
    fn status_bounded(&mut self) -> io::Result<ExitStatus>;
}

impl BoundedCommand for Command {
    fn output_bounded(&mut self) -> io::Result<Output> {
        let what = format!("{self:?}");
        let child = self.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).spawn()?;
        collect(child, Kill::Group, PROCESS_LIMIT, &what)
    }

    fn status_bounded(&mut self) -> io::Result<ExitStatus> {
        let what = format!("{self:?}");
        let mut child = self.spawn()?;
        Ok(wait_or_kill(&mut child, Kill::Child, PROCESS_LIMIT, &what, String::new))
    }
}

/// `wait()` and `wait_with_output()` on a child a test spawned, bounded by [`PROCESS_LIMIT`].
pub trait BoundedChild {
    fn wait_bounded(&mut self) -> io::Result<ExitStatus>;
    fn wait_with_output_bounded(self) -> io::Result<Output>;
    /// Kills the child and reaps it within a few seconds, failing nothing: for `Drop`, where a
    /// panic would abort the test binary.
    fn reap(&mut self);
}

impl BoundedChild for Child {
    fn wait_bounded(&mut self) -> io::Result<ExitStatus> {
        let what = format!("process {}", self.id());
        Ok(wait_or_kill(self, Kill::Child, PROCESS_LIMIT, &what, String::new))
    }

    fn wait_with_output_bounded(self) -> io::Result<Output> {
        let what = format!("process {}", self.id());
        collect(self, Kill::Child, PROCESS_LIMIT, &what)
    }

    fn reap(&mut self) {
        let _ = self.kill();
        let deadline = Instant::now() + REAP_LIMIT;
        while Instant::now() < deadline {
            if !matches!(self.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(LOOK_EVERY);
        }
        eprintln!("process {} was not reaped within {REAP_LIMIT:?}", self.id());
    }
}

/// A pipe read to its end on a thread of its own, so that neither pipe fills while the other
/// is read; what it read so far stays readable if the end never comes.
struct Drained {
    bytes: Arc<Mutex<Vec<u8>>>,
    ended: mpsc::Receiver<()>,
}

fn drain(mut pipe: Option<impl Read + Send + 'static>) -> Drained {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let (end, ended) = mpsc::channel();
    let shared = Arc::clone(&bytes);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Some(pipe) = &mut pipe {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => shared.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
        let _ = end.send(());
    });
    Drained { bytes, ended }
}

impl Drained {
    /// Whether the pipe reached its end within `limit` (its writers all gone).
    fn ended_within(&self, limit: Duration) -> bool {
        !matches!(self.ended.recv_timeout(limit), Err(mpsc::RecvTimeoutError::Timeout))
    }

    fn taken(&self) -> Vec<u8> {
        std::mem::take(&mut self.bytes.lock().unwrap())
    }
}

/// Waits for `child` within the limit and collects what it printed on its piped outputs.
fn collect(mut child: Child, kill: Kill, limit: Duration, what: &str) -> io::Result<Output> {
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let shown = |stdout: &Drained, stderr: &Drained| {
        let (out, err) = (stdout.taken(), stderr.taken());
        format!("\n--- stdout (end) ---\n{}\n--- stderr (end) ---\n{}", tail(&out), tail(&err))
    };
    let status = wait_or_kill(&mut child, kill, limit, what, || {
        stdout.ended_within(REAP_LIMIT);
        stderr.ended_within(REAP_LIMIT);
        shown(&stdout, &stderr)
    });
    // The child is gone; a process it left behind may still hold its pipes open.
    let ended = stdout.ended_within(REAP_LIMIT) && stderr.ended_within(REAP_LIMIT);
    assert!(ended, "{what} exited but a process it started still holds its output{}", shown(&stdout, &stderr));
    Ok(Output { status, stdout: stdout.taken(), stderr: stderr.taken() })
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(SHOWN_TAIL);
    let start = (start..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
    text[start..].to_string()
}

/// What a wait that runs out kills.
#[derive(Clone, Copy)]
enum Kill {
    /// The child alone (it was spawned by the test, in the test's process group).
    Child,
    /// The process group the child leads, so that what it started goes with it.
    Group,
}

/// The child's exit status, or, past `limit`, a panic naming `what` (with what
/// `shown` returns once the child is killed and reaped).
fn wait_or_kill(
    child: &mut Child,
    kill: Kill,
    limit: Duration,
    what: &str,
    mut shown: impl FnMut() -> String,
) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(LOOK_EVERY),
            Ok(None) => break,
            Err(e) => panic!("cannot wait for {what}: {e}"),
        }
    }
    match kill {
        Kill::Child => {
            let _ = child.kill();
        }
        Kill::Group => {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
    }
    let _ = child.wait();
    panic!("{what} did not end within {limit:?}: killed{}", shown());
}

#[test]
fn a_process_that_outlives_its_limit_is_killed_with_its_group_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("grandchild");
    // The grandchild writes its pid, then both wait far past the limit.
    let script = format!("echo started; sh -c 'echo $$ > {}; exec sleep 600' & sleep 600", marker.display());
    let child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let failure = std::panic::catch_unwind(move || collect(child, Kill::Group, Duration::from_secs(1), "the sleeper"))
        .expect_err("the wait fails past its limit");
    assert!(started.elapsed() < Duration::from_secs(10), "ended {:?} after the limit", started.elapsed());
    let message = failure.downcast_ref::<String>().expect("a formatted message");
    assert!(message.starts_with("the sleeper did not end within 1s: killed"), "{message}");
    assert!(message.contains("started"), "the output so far is shown: {message}");
    let grandchild = std::fs::read_to_string(&marker).unwrap();
    let alive = Path::new("/proc").join(grandchild.trim());
    let gone = (0..100).any(|_| {
        std::thread::sleep(LOOK_EVERY);
        !alive.exists() || std::fs::read_to_string(alive.join("stat")).is_ok_and(|stat| stat.contains(") Z "))
    });
    assert!(gone, "the grandchild {} outlived its group's kill", grandchild.trim());
}

/// A child that is killed and reaped if the test fails before it takes it back (a paused job,
/// say, would otherwise outlive the test).
pub struct ReapOnDrop(Option<Child>);

impl ReapOnDrop {
    pub fn new(child: Child) -> ReapOnDrop {
        ReapOnDrop(Some(child))
    }

    /// The child, no longer reaped on drop.
    pub fn take(mut self) -> Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            child.reap();
        }
    }
}
