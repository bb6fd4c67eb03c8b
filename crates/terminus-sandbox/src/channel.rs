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

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::SandboxError;
use crate::meter::LatencyMeter;

type OutputStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

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
    output: OutputStream,
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
        ShellChannel { container, output, input, nonce, seq: 0, buffer: Vec::new(), broken: None, latency }
    }

    /// Runs `command` (any bash text) with stdin from /dev/null and stderr merged into stdout.
    pub async fn run(&mut self, command: &str, timeout: Duration) -> Result<ShellOutput, SandboxError> {
        if let Some(reason) = &self.broken {
            return Err(self.closed(reason.clone()));
        }
        self.seq += 1;
        let marker = format!("__TERMINUS_END_{}_{}__", self.nonce, self.seq);
        // The leading newline guarantees the marker starts a line even when the command's
        // output does not end with one; it is removed again below.
        let block = format!("{{ {command}\n}} </dev/null 2>&1; printf '\\n{marker}%d\\n' \"$?\"\n");
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
            match self.output.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk.into_bytes()),
                Some(Err(e)) => return Err(e.to_string()),
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
