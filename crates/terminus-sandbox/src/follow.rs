//! Following a growing file in a running trial's container: what the viewer shows as a running
//! trial's terminal, read from its pane log while the agent works.
//!
//! The file is read through the engine's archive endpoint, polled: no program of the container
//! runs for it (an agent may have replaced any of them), and what it holds is read as bytes,
//! capped. Following ends when the container stops, when the file grows past the cap, when the
//! reader goes away, or once the container's `stop_at` path exists: the tests' directory, made
//! when verification starts.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use bollard::query_parameters::{DownloadFromContainerOptionsBuilder, ListContainersOptionsBuilder};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::SandboxError;
use crate::labels::{ContainerRole, LABEL_ROLE, LABEL_TRIAL_ID};

/// Chunks in flight between the poller and its reader.
const CHANNEL_DEPTH: usize = 64;
/// How often the file is read again.
const POLL: Duration = Duration::from_millis(700);
/// The largest file followed (a pane log is text: past this, following stops and says so).
pub const MAX_FOLLOWED_BYTES: u64 = 32 << 20;

/// A file being followed: its bytes as they are written, in chunks. The stream ends when the
/// file can no longer be followed; an error is sent once, then it ends.
pub struct FollowedFile {
    pub chunks: mpsc::Receiver<Result<Vec<u8>, SandboxError>>,
}

impl Engine {
    /// The running agent container of trial `trial` (its `terminus.trial_id` label), if any.
    pub async fn running_trial_container(&self, trial: &str) -> Result<Option<String>, SandboxError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_TRIAL_ID}={trial}"), format!("{LABEL_ROLE}={}", ContainerRole::Agent.label())],
        )]);
        let options = ListContainersOptionsBuilder::default().filters(&filters).build();
        let list = self.docker.list_containers(Some(options)).await.map_err(|e| SandboxError::Api(e.to_string()))?;
        Ok(list.into_iter().find_map(|c| c.id))
    }

    /// Follows `path` in container `id`: its last `tail_bytes` bytes first, then whatever is
    /// appended, until `stop_at` exists in the container (or the container stops). Waits for
    /// the file to appear.
    pub async fn follow_file(
        &self,
        id: &str,
        path: &str,
        tail_bytes: u64,
        stop_at: Option<&str>,
    ) -> Result<FollowedFile, SandboxError> {
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let (engine, id, path, stop_at) = (self.clone(), id.to_string(), path.to_string(), stop_at.map(str::to_string));
        tokio::spawn(async move {
            let mut sent: Option<u64> = None;
            loop {
                if tx.is_closed() {
                    return;
                }
                if let Some(stop) = &stop_at
                    && engine.read_via_archive(&id, stop, 0).await.is_ok_and(|found| found.is_some())
                {
                    return;
                }
                match engine.read_via_archive(&id, &path, MAX_FOLLOWED_BYTES).await {
                    Ok(Some(bytes)) => {
                        let len = bytes.len() as u64;
                        let from = match sent {
                            None => len.saturating_sub(tail_bytes),
                            // A file cut shorter (rotated) starts over.
                            Some(at) if at > len => 0,
                            Some(at) => at,
                        };
                        if len > from && tx.send(Ok(bytes[from as usize..].to_vec())).await.is_err() {
                            return;
                        }
                        sent = Some(len);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        // A stopped or removed container ends it quietly; anything else is said.
                        if engine.container_running(&id).await {
                            let _ = tx.send(Err(e)).await;
                        }
                        return;
                    }
                }
                tokio::time::sleep(POLL).await;
            }
        });
        Ok(FollowedFile { chunks: rx })
    }

    async fn container_running(&self, id: &str) -> bool {
        let info = self.docker.inspect_container(id, None::<bollard::query_parameters::InspectContainerOptions>).await;
        info.ok().and_then(|i| i.state).and_then(|s| s.running).unwrap_or(false)
    }

    /// A file of a container, read through the archive endpoint: `None` when the path does not
    /// exist; its bytes (the first entry's, a directory's none) when it does, at most `limit`.
    async fn read_via_archive(&self, id: &str, path: &str, limit: u64) -> Result<Option<Vec<u8>>, SandboxError> {
        let err = |message: String| SandboxError::Transfer {
            container: id.to_string(),
            path: path.into(),
            direction: "from",
            message,
        };
        let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
        let mut stream = self.docker.download_from_container(id, Some(options));
        let mut archive = Vec::new();
        // The tar's own blocks around the file: at most a few KiB more than the file.
        let cap = limit + 64 * 1024;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => archive.extend_from_slice(&bytes),
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, message }) => {
                    // No such path, while the container answers: nothing yet.
                    return if self.container_running(id).await { Ok(None) } else { Err(err(message)) };
                }
                Err(e) => return Err(err(e.to_string())),
            }
            if limit == 0 {
                // Only asked whether it exists.
                return Ok(Some(Vec::new()));
            }
            if archive.len() as u64 > cap {
                return Err(err(format!("the file is over {} MiB: not followed", limit >> 20)));
            }
        }
        let mut reader = tar::Archive::new(archive.as_slice());
        let mut entries = reader.entries().map_err(|e| err(e.to_string()))?;
        let Some(entry) = entries.next() else { return Ok(Some(Vec::new())) };
        let mut entry = entry.map_err(|e| err(e.to_string()))?;
        let mut bytes = Vec::new();
        if entry.header().entry_type().is_file() {
            (&mut entry).take(limit).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
        }
        Ok(Some(bytes))
    }
}
