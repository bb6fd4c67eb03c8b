//! Following a growing file in a running trial's container: what the viewer shows as a running
//! trial's terminal, read from its pane log while the agent works.
//!
//! One exec of `tail -F` whose output is streamed through a bounded channel: the reader gets
//! bytes as the pane produces them, a slow reader holds the exec back rather than the other way
//! round, and dropping the receiver ends the forwarding task (the `tail` in the container ends at
//! its next write, or with the container).

use std::collections::HashMap;

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::ListContainersOptionsBuilder;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::SandboxError;
use crate::{ContainerRole, LABEL_ROLE, LABEL_TRIAL_ID};

/// Chunks in flight between the exec and its reader.
const CHANNEL_DEPTH: usize = 64;

/// A file being followed: its bytes as they are written, in chunks. The stream ends when the
/// file can no longer be followed (the container stopped); an error is sent once, then it ends.
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
    /// appended. Waits for the file to appear (`tail -F`).
    pub async fn follow_file(&self, id: &str, path: &str, tail_bytes: u64) -> Result<FollowedFile, SandboxError> {
        let err = |message: String| SandboxError::Exec { container: id.to_string(), message };
        let config = CreateExecOptions {
            // No shell: task images need not have bash, and nothing here needs one.
            cmd: Some(vec![
                "tail".to_string(),
                "-c".to_string(),
                tail_bytes.to_string(),
                "-F".to_string(),
                path.to_string(),
            ]),
            attach_stdout: Some(true),
            attach_stderr: Some(false),
            ..Default::default()
        };
        let exec = self.docker.create_exec(id, config).await.map_err(|e| err(e.to_string()))?;
        let mut output = match self.docker.start_exec(&exec.id, None).await.map_err(|e| err(e.to_string()))? {
            StartExecResults::Attached { output, .. } => output,
            StartExecResults::Detached => return Err(err("the exec started detached".into())),
        };
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let container = id.to_string();
        tokio::spawn(async move {
            while let Some(chunk) = output.next().await {
                let item = chunk
                    .map(|c| c.into_bytes().to_vec())
                    .map_err(|e| SandboxError::Exec { container: container.clone(), message: e.to_string() });
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(FollowedFile { chunks: rx })
    }
}
