//! A long-lived `bash` inside a container, used as a command channel.
//!
//! Each separate exec costs ~85 ms of wall time and host CPU; a command written to an already
//! attached shell costs ~0.4 ms (`true`) to ~5 ms (`tmux capture-pane`), measured on Docker 20.10 (docs/BENCHMARKS.md).
//! The agent's tmux traffic therefore goes through one channel per container.
//!
//! Protocol: each command is written as one block whose output is followed by a marker line
//! carrying a per-channel nonce, a sequence number and the exit code. Output is accumulated as
//! bytes and decoded once, because the engine splits frames anywhere (even inside a UTF-8
//! character).
//!
//! The exec's stderr is a second stream of its own: the shell's own stderr goes to its stdout,
//! and the original stderr stays open as fd 3, which every command has closed. One background
//! program may be started onto it ([`ShellChannel::follow`]): a follower of a log that costs no
//! exec of its own. A task per channel reads the exec's output and sorts the two streams, so
//! the follower is read while no command runs.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::error::SandboxError;
use crate::meter::LatencyMeter;

/// A program's output as it prints it ([`ShellChannel::follow`]).
pub type OutputChunks = Pin<Box<dyn Stream<Item = Result<Vec<u8>, SandboxError>> + Send>>;

pub(crate) type OutputStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// The first line the shell reads: its stderr joins its stdout, the exec's stderr is kept as fd 3.
pub(crate) const PREAMBLE: &str = "exec 3>&2 2>&1\n";

/// How many stdout chunks may wait for the command that reads them.
const STDOUT_QUEUE: usize = 64;
/// How many of the follower's chunks may wait for its reader (beyond, the follower waits, as
/// it would on a pipe).
const SIDE_QUEUE: usize = 256;

/// The most of one command's output the channel keeps (its head); beyond, the middle is dropped.
const MAX_BUFFER: usize = 32 * 1024 * 1024;
/// The end of the output kept past the cap (where the end marker arrives).
const TAIL_KEPT: usize = 64 * 1024;

/// What one command printed and its exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellOutput {
    pub exit_code: i32,
    pub stdout: String,
}

/// The channel. One command runs at a time (`&mut self`); a command that does not finish within
/// its timeout poisons the channel, and the owner opens a new one.
pub struct ShellChannel {
    container: String,
    /// The shell's stdout, chunk by chunk, from the task that reads the exec.
    output: mpsc::Receiver<Result<Vec<u8>, String>>,
    /// The exec's stderr (fd 3), until a follower takes it.
    side: Option<mpsc::Receiver<Vec<u8>>>,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    nonce: String,
    seq: u64,
    buffer: Vec<u8>,
    broken: Option<String>,
    latency: Arc<LatencyMeter>,
}

impl std::fmt::Debug for ShellChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellChannel").field("container", &self.container).field("seq", &self.seq).finish()
    }
}

impl ShellChannel {
    pub(crate) fn new(
        container: String,
        output: OutputStream,
        input: Pin<Box<dyn AsyncWrite + Send>>,
        latency: Arc<LatencyMeter>,
    ) -> ShellChannel {
        let nonce: String = (0..12).map(|_| char::from(b'a' + rand::random::<u8>() % 26)).collect();
        let (stdout_tx, stdout_rx) = mpsc::channel(STDOUT_QUEUE);
        let (side_tx, side_rx) = mpsc::channel(SIDE_QUEUE);
        tokio::spawn(sort_streams(output, stdout_tx, side_tx));
        ShellChannel {
            container,
            output: stdout_rx,
            side: Some(side_rx),
            input,
            nonce,
            seq: 0,
            buffer: Vec::new(),
            broken: None,
            latency,
        }
    }

    /// Runs `command` (any bash text) with stdin from /dev/null and stderr merged into stdout.
    pub async fn run(&mut self, command: &str, timeout: Duration) -> Result<ShellOutput, SandboxError> {
        // The leading newline guarantees the marker starts a line even when the command's
        // output does not end with one; it is removed again below.
        self.exchange(
            |marker| format!("{{ {command}\n}} </dev/null 2>&1 3>&-; printf '\\n{marker}%d\\n' \"$?\"\n"),
            command,
            timeout,
        )
        .await
    }

    /// Starts `script` in the background with its stdout on the exec's stderr (its own stderr
    /// dropped) and returns that output as it comes, for as long as the program runs — also
    /// after the channel is dropped. Once per channel.
    pub async fn follow(&mut self, script: &str, timeout: Duration) -> Result<OutputChunks, SandboxError> {
        let Some(mut side) = self.side.take() else {
            return Err(self.closed("the channel's second stream is taken".into()));
        };
        // Whatever reached the exec's stderr before the shell read its first line is not the
        // follower's.
        while side.try_recv().is_ok() {}
        self.exchange(
            |marker| format!("{{ {script}\n}} </dev/null >&3 2>/dev/null 3>&- &\nprintf '\\n{marker}%d\\n' \"$?\"\n"),
            script,
            timeout,
        )
        .await?;
        Ok(Box::pin(futures_util::stream::unfold(side, |mut side| async move {
            side.recv().await.map(|chunk| (Ok(chunk), side))
        })))
    }

    /// Writes the block `write(marker)` and reads its output up to the marker.
    async fn exchange(
        &mut self,
        write: impl FnOnce(&str) -> String,
        command: &str,
        timeout: Duration,
    ) -> Result<ShellOutput, SandboxError> {
        if let Some(reason) = &self.broken {
            return Err(self.closed(reason.clone()));
        }
        self.seq += 1;
        let marker = format!("__TERMINUS_END_{}_{}__", self.nonce, self.seq);
        let block = write(&marker);
        let sent = std::time::Instant::now();
        let result = tokio::time::timeout(timeout, async {
            self.input.write_all(block.as_bytes()).await.map_err(|e| e.to_string())?;
            self.input.flush().await.map_err(|e| e.to_string())?;
            self.read_until_marker(&marker).await
        })
        .await;
        match result {
            Ok(Ok(output)) => {
                self.latency.channel(sent.elapsed());
                Ok(output)
            }
            Ok(Err(message)) => {
                self.broken = Some(message.clone());
                Err(self.closed(message))
            }
            Err(_) => {
                self.broken = Some("a command timed out".into());
                Err(SandboxError::Timeout {
                    container: self.container.clone(),
                    what: first_line(command),
                    after: timeout,
                })
            }
        }
    }

    async fn read_until_marker(&mut self, marker: &str) -> Result<ShellOutput, String> {
        let marker_bytes = marker.as_bytes();
        // Where the marker search resumes: each chunk is searched once (with an overlap the
        // size of the marker), so a long output costs linear time, not quadratic.
        let mut searched = 0usize;
        let mut cut = 0usize;
        loop {
            let from = searched.saturating_sub(marker_bytes.len());
            if let Some(found) = find(&self.buffer[from..], marker_bytes) {
                let pos = from + found;
                let after = pos + marker_bytes.len();
                if let Some(end) = self.buffer[after..].iter().position(|b| *b == b'\n') {
                    let code_text = String::from_utf8_lossy(&self.buffer[after..after + end]).into_owned();
                    let exit_code = code_text.trim().parse().unwrap_or(-1);
                    let body_end = pos.saturating_sub(1);
                    let mut stdout = text_of(&self.buffer[..body_end]);
                    if cut > 0 {
                        stdout.push_str(&format!("\n[... {cut} bytes of output dropped ...]\n"));
                    }
                    self.buffer.drain(..after + end + 1);
                    return Ok(ShellOutput { exit_code, stdout });
                }
            }
            searched = self.buffer.len();
            // Past the cap, the middle goes: the head is kept, and the tail, where the marker is.
            if self.buffer.len() > MAX_BUFFER + TAIL_KEPT {
                let drop_to = self.buffer.len() - TAIL_KEPT;
                cut += drop_to - MAX_BUFFER;
                self.buffer.drain(MAX_BUFFER..drop_to);
                searched = self.buffer.len();
            }
            match self.output.recv().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(e),
                None => return Err("the shell exited".into()),
            }
        }
    }

    fn closed(&self, message: String) -> SandboxError {
        SandboxError::ChannelClosed { container: self.container.clone(), message }
    }

    /// Whether an earlier failure made the channel unusable.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }
}

/// Reads the exec's output: stdout to the channel, stderr to the follower. Ends with the exec's
/// output, or once neither reader is left (the exec's connection is dropped then).
async fn sort_streams(
    mut output: OutputStream,
    stdout: mpsc::Sender<Result<Vec<u8>, String>>,
    side: mpsc::Sender<Vec<u8>>,
) {
    loop {
        let item = tokio::select! {
            item = output.next() => item,
            () = async { stdout.closed().await; side.closed().await } => return,
        };
        match item {
            Some(Ok(LogOutput::StdErr { message })) => {
                // Nobody follows any more: dropped.
                let _ = side.send(message.to_vec()).await;
            }
            Some(Ok(other)) => {
                // A dropped channel's output is nobody's; a follower may still be read.
                let _ = stdout.send(Ok(other.into_bytes().to_vec())).await;
            }
            Some(Err(e)) => {
                let _ = stdout.send(Err(e.to_string())).await;
                return;
            }
            None => return,
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// The bytes as text: valid UTF-8 (nearly always) is validated once and copied; anything else
/// gets replacement characters.
fn text_of(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn first_line(command: &str) -> String {
    command.lines().next().unwrap_or("").chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(text: &'static str) -> Result<LogOutput, bollard::errors::Error> {
        Ok(LogOutput::StdOut { message: bytes::Bytes::from_static(text.as_bytes()) })
    }

    fn err(text: &'static str) -> Result<LogOutput, bollard::errors::Error> {
        Ok(LogOutput::StdErr { message: bytes::Bytes::from_static(text.as_bytes()) })
    }

    #[tokio::test]
    async fn the_exec_output_is_sorted_into_the_shells_stdout_and_the_follower() {
        let output: OutputStream = Box::pin(futures_util::stream::iter(vec![out("a"), err("x"), out("b"), err("y")]));
        let (stdout, mut stdout_rx) = mpsc::channel(8);
        let (side, mut side_rx) = mpsc::channel(8);
        sort_streams(output, stdout, side).await;
        let mut shell = Vec::new();
        while let Some(chunk) = stdout_rx.recv().await {
            shell.extend(chunk.unwrap());
        }
        let mut followed = Vec::new();
        while let Some(chunk) = side_rx.recv().await {
            followed.extend(chunk);
        }
        assert_eq!((shell.as_slice(), followed.as_slice()), (b"ab".as_slice(), b"xy".as_slice()));
    }

    #[tokio::test]
    async fn the_exec_is_let_go_once_neither_stream_is_read() {
        // An exec that never prints again: the task still ends once both readers are gone, and
        // not before (a follower may outlive its channel).
        let output: OutputStream =
            Box::pin(futures_util::stream::iter(vec![err("x")]).chain(futures_util::stream::pending()));
        let (stdout, stdout_rx) = mpsc::channel(8);
        let (side, mut side_rx) = mpsc::channel(8);
        let task = tokio::spawn(sort_streams(output, stdout, side));
        drop(stdout_rx);
        assert_eq!(side_rx.recv().await.as_deref(), Some(b"x".as_slice()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!task.is_finished(), "the follower is still read");
        drop(side_rx);
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
    }
}
