//! The terminal's recording, written by the orchestrator: no recorder runs in front of the
//! agent's shell. A follower of the pane's raw output (`tail -F` of the log tmux pipes the pane
//! to), started in the background of the session's command channel (no exec of its own), runs
//! until that channel's shell ends or it is killed (a channel opened again starts a new one
//! from where the recording was); a task owned by the TmuxSession reads it, stamps
//! each chunk with the host's clock and appends it to an asciicast v2 file on the host
//! (`agent/.recording.cast.part`, renamed to `recording.cast` with the episode markers merged in
//! at teardown).
//!
//! Writes are batched (every [`FLUSH_EVERY`] or [`FLUSH_BYTES`]), so a trial that is killed
//! keeps all but the last moments of its recording. The file stops growing at its byte limit
//! (the job's `max_log_mb`): a terminal that prints gigabytes cannot fill the host's disk.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use terminus_agent::recording::{CastEncoder, cast_header};
use terminus_core::layout::container::PANE_LOG;
use terminus_sandbox::tmux::{PaneSize, shell_quote};
use terminus_sandbox::{OutputChunks, ShellChannel};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Where the recording goes on the host, and the most it may hold.
#[derive(Clone, Debug)]
pub struct RecordTo {
    pub path: PathBuf,
    pub max_bytes: u64,
}

/// How often buffered events reach the file.
const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// How many buffered bytes make a write at once.
const FLUSH_BYTES: usize = 64 * 1024;
/// Once asked to finish: the output still in flight (pane → log → exec → here) is taken until
/// none came for this long (a few of the follower's polls)...
const QUIET: Duration = Duration::from_millis(400);
/// ...or this long has passed.
const DRAIN_MAX: Duration = Duration::from_millis(1500);

/// The recording task, and how to end it.
pub struct Recorder {
    finish: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Recorder {
    /// Asks the task to write what is still in flight and end; returns when it has.
    pub(super) fn finish(mut self) -> JoinHandle<()> {
        if let Some(finish) = self.finish.take() {
            let _ = finish.send(());
        }
        self.task
    }

    /// Ends the task at once (the actor stops): what was flushed stays in the file.
    pub(super) fn abort(&self) {
        self.task.abort();
    }
}

/// The follower: the pane log from byte `from`, by name (tmux creates it after this starts),
/// tagged with `TERMINUS_FOLLOWER=tag` in its environment so that it can be found again. `tail`
/// looks for new output every [`POLL_SECS`] seconds (it polls: a file that did not exist when it
/// started is not watched through inotify) and ends with the channel's shell (`--pid`); a `tail`
/// that refuses these options (BusyBox) runs with its defaults until it is killed. Which one is
/// decided before following, so a follower that is killed is not started again from the first
/// byte. An earlier follower with the same tag (of a channel that hung) is killed first.
fn follow_command(from: u64, tag: &str) -> String {
    let log = shell_quote(PANE_LOG);
    let first = from + 1;
    let env = format!("TERMINUS_FOLLOWER={tag}");
    format!(
        "{kill} if tail -s {POLL_SECS} --pid=$$ -n 0 /dev/null >/dev/null 2>&1; then {env} exec tail -c +{first} -F -s {POLL_SECS} --pid=$$ {log}; else {env} exec tail -c +{first} -F {log}; fi",
        kill = kill_command(tag)
    )
}

/// Bash: kills the followers tagged `tag` (found by their environment; nothing is printed).
fn kill_command(tag: &str) -> String {
    format!(
        "{{ for p in /proc/[0-9]*; do while IFS= read -r -d '' e; do [ \"$e\" = TERMINUS_FOLLOWER={tag} ] && kill \"${{p#/proc/}}\" && break; done < \"$p/environ\"; done; }} 2>/dev/null;"
    )
}

/// How often the follower looks for new output, in seconds (a `stat` of the log each time).
const POLL_SECS: &str = "0.1";

/// What it takes to follow the pane log again on a new channel (how far the recording got, and
/// where the new follower's output goes), and to stop following once the recording ended early.
pub(super) struct Follower {
    tag: String,
    received: Arc<AtomicU64>,
    feed: mpsc::UnboundedSender<Resumed>,
    /// Set by the recording when it ends (e.g. at its size limit).
    ended: Arc<AtomicBool>,
    killed: bool,
}

/// A follower started again: its output, and the log offset it starts at.
struct Resumed {
    from: u64,
    chunks: OutputChunks,
}

impl Follower {
    /// Starts a follower on `channel` from the last byte received (a failure is logged: the
    /// next channel opened tries again; what an old follower still sends is read meanwhile).
    pub(super) async fn restart(&self, channel: &mut ShellChannel, timeout: Duration) {
        if self.feed.is_closed() {
            return;
        }
        let from = self.received.load(Ordering::SeqCst);
        match channel.follow(&follow_command(from, &self.tag), timeout).await {
            Ok(chunks) => drop(self.feed.send(Resumed { from, chunks })),
            Err(e) => tracing::warn!(error = %e, "the terminal's recording could not go on through a new channel"),
        }
    }

    /// Once the recording has ended: bash that kills the follower, to run before the next
    /// command (a terminal that floods would otherwise go on being read, for nothing).
    pub(super) fn kill_once_ended(&mut self) -> Option<String> {
        if self.killed || !self.ended.load(Ordering::SeqCst) {
            return None;
        }
        self.killed = true;
        Some(kill_command(&self.tag))
    }
}

/// Creates the file with its header and starts following the pane log, before the session
/// starts (the follower belongs to the channel's shell, which is older than the terminal:
/// between steps, what the agent started is killed and the follower is not), as the session's
/// user (it can read nothing the agent could not). Returns the recorder, the follower for the
/// shell to keep, and the instant its times count from; on failure no file is left.
pub(super) async fn start(
    channel: &mut ShellChannel,
    timeout: Duration,
    to: &RecordTo,
    size: PaneSize,
) -> Result<(Recorder, Follower, Instant), String> {
    let timestamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let header = cast_header(size.width(), size.height(), timestamp, "xterm-256color", "/bin/bash");
    if let Some(dir) = to.path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut file = tokio::fs::File::create(&to.path).await.map_err(|e| format!("{}: {e}", to.path.display()))?;
    if let Err(e) = file.write_all(header.as_bytes()).await {
        return Err(discard(file, &to.path, format!("{}: {e}", to.path.display())).await);
    }
    let tag = format!("{:016x}", rand::random::<u64>());
    let chunks = match channel.follow(&follow_command(0, &tag), timeout).await {
        Ok(chunks) => chunks,
        Err(e) => return Err(discard(file, &to.path, e.to_string()).await),
    };
    let started = Instant::now();
    let (finish, finished) = oneshot::channel();
    let (feed, resumed) = mpsc::unbounded_channel();
    let received = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(AtomicBool::new(false));
    let follower = Follower { tag, received: received.clone(), feed, ended: ended.clone(), killed: false };
    let follow = Following { chunks, resumed, received, skip: 0 };
    let budget = to.max_bytes.saturating_sub(header.len() as u64);
    let path = to.path.clone();
    let task = tokio::spawn(async move {
        record(follow, file, path, started, finished, budget).await;
        ended.store(true, Ordering::SeqCst);
    });
    Ok((Recorder { finish: Some(finish), task }, follower, started))
}

/// Closes and removes a recording that could not start; returns `why`.
async fn discard(file: tokio::fs::File, path: &std::path::Path, why: String) -> String {
    drop(file);
    let _ = tokio::fs::remove_file(path).await;
    why
}

/// The follower's output as the recording reads it, across restarts.
struct Following {
    chunks: OutputChunks,
    /// Followers started again on new channels.
    resumed: mpsc::UnboundedReceiver<Resumed>,
    /// Bytes of the log received so far.
    received: Arc<AtomicU64>,
    /// Bytes the current follower repeats (it started before the old one's last output came).
    skip: u64,
}

impl Following {
    /// The next new bytes of the log; None once the follower ended and no other was started.
    async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            let chunk = tokio::select! {
                biased;
                Some(resumed) = self.resumed.recv() => {
                    self.switch(resumed);
                    continue;
                }
                chunk = self.chunks.next() => chunk,
            };
            let Some(Ok(mut bytes)) = chunk else {
                // A follower that ended may be followed by another, started when the channel was
                // opened again: wait for it only while one may come. (The ended stream is not
                // polled again, also when this wait is given up and `next` called anew.)
                self.chunks = Box::pin(futures_util::stream::pending());
                let resumed = self.resumed.recv().await?;
                self.switch(resumed);
                continue;
            };
            let repeated = (self.skip as usize).min(bytes.len());
            self.skip -= repeated as u64;
            bytes.drain(..repeated);
            if bytes.is_empty() {
                continue;
            }
            self.received.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            return Some(bytes);
        }
    }

    /// Reads the new follower from now on. The old one's output is left behind: the new one
    /// starts at or before where it stopped being read, and what it repeats is skipped.
    fn switch(&mut self, resumed: Resumed) {
        self.skip = self.received.load(Ordering::SeqCst).saturating_sub(resumed.from);
        self.chunks = resumed.chunks;
    }
}

/// Reads the follower's output into the file until the follower ends or the recorder is asked
/// to finish (then it drains what is in flight).
async fn record(
    mut chunks: Following,
    mut file: tokio::fs::File,
    path: PathBuf,
    started: Instant,
    mut finish: oneshot::Receiver<()>,
    mut budget: u64,
) {
    let mut encoder = CastEncoder::default();
    let mut pending = String::new();
    let mut finishing: Option<Instant> = None;
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let chunk = match finishing {
            Some(deadline) => {
                let wait = QUIET.min(deadline.saturating_duration_since(Instant::now()));
                match tokio::time::timeout(wait, chunks.next()).await {
                    Ok(chunk) => chunk,
                    Err(_) => break,
                }
            }
            None => tokio::select! {
                chunk = chunks.next() => chunk,
                _ = &mut finish => {
                    finishing = Some(Instant::now() + DRAIN_MAX);
                    continue;
                }
                _ = flush.tick() => {
                    if !write(&mut file, &path, &mut pending).await {
                        return;
                    }
                    continue;
                }
            },
        };
        let Some(bytes) = chunk else { break };
        if let Some(line) = encoder.output(started.elapsed().as_secs_f64(), &bytes) {
            if line.len() as u64 > budget {
                // Nothing more is read either: the follower's stream is dropped with the task,
                // and the follower itself is killed before the session's next command.
                tracing::warn!(path = %path.display(), "the terminal's recording reached its size limit (environment.max_log_mb); it ends here");
                break;
            }
            budget -= line.len() as u64;
            pending.push_str(&line);
            if pending.len() >= FLUSH_BYTES && !write(&mut file, &path, &mut pending).await {
                return;
            }
        }
    }
    write(&mut file, &path, &mut pending).await;
}

/// Appends the pending events; false (logged) when the file cannot be written.
async fn write(file: &mut tokio::fs::File, path: &std::path::Path, pending: &mut String) -> bool {
    if pending.is_empty() {
        return true;
    }
    let result = async {
        file.write_all(pending.as_bytes()).await?;
        file.flush().await
    }
    .await;
    pending.clear();
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "could not write the terminal's recording; it ends here");
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower that prints `chunks` and then (like `tail -F`) never ends.
    fn endless(chunks: Vec<&'static [u8]>) -> OutputChunks {
        let printed = futures_util::stream::iter(chunks.into_iter().map(|c| Ok(c.to_vec())));
        Box::pin(printed.chain(futures_util::stream::pending()))
    }

    async fn run(chunks: Vec<&'static [u8]>, budget: u64) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cast");
        let file = tokio::fs::File::create(&path).await.unwrap();
        let (finish, finished) = oneshot::channel();
        let (_feed, resumed) = mpsc::unbounded_channel();
        let follow = Following { chunks: endless(chunks), resumed, received: Arc::new(AtomicU64::new(0)), skip: 0 };
        let task = tokio::spawn(record(follow, file, path.clone(), Instant::now(), finished, budget));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // (A recording that reached its limit has ended already.)
        let _ = finish.send(());
        // The drain ends after its quiet time even though the follower never does.
        tokio::time::timeout(DRAIN_MAX + Duration::from_secs(1), task).await.unwrap().unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[tokio::test]
    async fn a_finished_recording_holds_every_chunk_and_a_flooding_one_stops_at_its_limit() {
        let cast = run(vec![b"one\r\n", b"two \xe2\x86", b"\x92\r\n"], 1 << 20).await;
        let texts: Vec<String> = cast
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[2].as_str().unwrap().to_string())
            .collect();
        assert_eq!(texts, ["one\r\n", "two ", "→\r\n"]);
        // A terminal that prints without end: the file stops below its budget.
        let flood: Vec<&'static [u8]> = vec![&[b'x'; 1000]; 500];
        let cast = run(flood, 10_000).await;
        assert!(cast.len() <= 10_000 && cast.len() > 8_000, "{} bytes", cast.len());
    }

    #[tokio::test]
    async fn a_follower_started_again_continues_where_the_recording_was() {
        let (feed, resumed) = mpsc::unbounded_channel();
        let received = Arc::new(AtomicU64::new(0));
        let mut follow =
            Following { chunks: endless(vec![b"abc", b"de"]), resumed, received: received.clone(), skip: 0 };
        assert_eq!(follow.next().await.unwrap(), b"abc");
        // The channel is opened again: the new follower starts at byte 3, the old one's "de"
        // is left behind and comes again from the new one.
        feed.send(Resumed { from: received.load(Ordering::SeqCst), chunks: endless(vec![b"defg"]) }).unwrap();
        assert_eq!(follow.next().await.unwrap(), b"defg");
        // A follower that starts before the last byte received: what it repeats is skipped.
        feed.send(Resumed { from: 5, chunks: endless(vec![b"f", b"gh"]) }).unwrap();
        assert_eq!(follow.next().await.unwrap(), b"h");
        assert_eq!(received.load(Ordering::SeqCst), 8);
        // The old follower ended and none was started again: the recording's input ends.
        let (feed, resumed) = mpsc::unbounded_channel::<Resumed>();
        drop(feed);
        let done: OutputChunks = Box::pin(futures_util::stream::empty());
        let mut follow = Following { chunks: done, resumed, received, skip: 0 };
        assert!(follow.next().await.is_none());
    }

    #[test]
    fn the_follower_reads_the_pane_log_from_its_first_byte_by_name() {
        let command = follow_command(0, "abc");
        assert!(command.contains("TERMINUS_FOLLOWER=abc exec tail -c +1 -F -s 0.1 --pid=$$ "), "{command}");
        assert!(follow_command(4096, "abc").contains("exec tail -c +4097 -F "));
        // An earlier follower with the tag is killed before this one starts.
        assert!(command.starts_with(&kill_command("abc")), "{command}");
        assert!(command.contains(PANE_LOG), "{command}");
        // One follower only: the fallback is chosen before, not after a follower ends.
        assert!(!command.contains("||"), "{command}");
    }
}
