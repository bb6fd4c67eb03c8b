//! A job's place on its backend: what every environment of the job shares there. The job's
//! identity as its containers are labelled, its own bridge network, the image builder on the
//! backend's daemon, whether storage limits can apply, and the content hashes of task
//! directories (read once per job, not once per attempt).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::backend::Backend;
use crate::error::SandboxError;
use crate::image::{BuildLimits, ImageBuilder};
use crate::labels::{LABEL_HOST, LABEL_JOB_DIR, LABEL_JOB_ID, LABEL_PID, LABEL_TRIAL_ID};

/// What a job tells its backend when it opens its site.
#[derive(Clone, Debug)]
pub struct SiteSpec {
    pub job_id: String,
    /// The job directory, absolute: `terminus gc` finds a live job's containers by it.
    pub job_dir: PathBuf,
    /// Trials that may use the internet get a bridge network of the job's own (where the
    /// backend has networks per job).
    pub isolate_network: bool,
    /// What an image build may use.
    pub build_limits: BuildLimits,
}

/// A job's place on its backend (see the module's documentation). Read-only once opened,
/// except for the hash cache.
#[derive(Debug)]
pub struct Site {
    job_id: String,
    job_dir: PathBuf,
    /// The job's own bridge network (None: the daemon's default bridge).
    network: Option<String>,
    /// Builds on the backend's own daemon (the local engine, or the swarm's manager).
    pub(crate) images: ImageBuilder,
    /// Whether the storage driver can enforce `storage_mb`.
    pub(crate) storage_limits: bool,
    hashes: Arc<Mutex<HashMap<PathBuf, String>>>,
}

impl Backend {
    /// Opens the job's site: its bridge network made (local engine, when asked), then the
    /// storage driver asked what it can limit. A swarm's trials use their nodes' default bridge
    /// and get no storage limits.
    pub async fn open_site(&self, spec: SiteSpec) -> Result<Site, SandboxError> {
        let mut site = Site {
            images: ImageBuilder::new(self.engine().clone()).with_limits(spec.build_limits),
            job_id: spec.job_id,
            job_dir: spec.job_dir,
            network: None,
            storage_limits: false,
            hashes: Arc::default(),
        };
        match self {
            Backend::Docker(engine) => {
                if spec.isolate_network {
                    let name = network_name(&site.job_id);
                    let labels = [
                        (LABEL_JOB_ID.to_string(), site.job_id.clone()),
                        (LABEL_JOB_DIR.to_string(), site.job_dir.display().to_string()),
                        (LABEL_HOST.to_string(), terminus_core::lock::host_identity()),
                    ];
                    engine.ensure_network(&name, labels.into_iter().collect()).await?;
                    site.network = Some(name);
                }
                site.storage_limits = engine.supports_storage_limits().await;
            }
            Backend::Swarm(_) => {}
        }
        Ok(site)
    }
}

/// A container of `trial`'s name: the job's id, the trial's name as a container name may hold
/// it, and a random tail that keeps names unique across restarts of the trial.
fn container_name(job_id: &str, trial: &str, tail: u16) -> String {
    let trial = trial
        .to_ascii_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "-");
    let job: String = job_id.chars().take(8).collect();
    format!("terminus-{job}-{trial}-{tail:04x}")
}

/// The name of a job's bridge network.
fn network_name(job_id: &str) -> String {
    format!("terminus-job-{job_id}")
}

impl Site {
    /// The job's own bridge network, if it has one.
    pub fn network(&self) -> Option<&str> {
        self.network.as_deref()
    }

    /// The content hash of `dir`, computed once per job (the file work runs off the async
    /// workers).
    pub async fn dir_hash(&self, dir: &Path) -> std::io::Result<String> {
        if let Some(hash) = self.hashes.lock().unwrap_or_else(|p| p.into_inner()).get(dir) {
            return Ok(hash.clone());
        }
        let (hashes, dir) = (self.hashes.clone(), dir.to_path_buf());
        crate::blocking::blocking(move || {
            let hash = terminus_config::task::dir_hash(&dir)?;
            hashes.lock().unwrap_or_else(|p| p.into_inner()).insert(dir, hash.clone());
            Ok(hash)
        })
        .await
    }

    /// A new name for a container of `trial` (see [`container_name`]).
    pub fn container_name(&self, trial: &str) -> String {
        container_name(&self.job_id, trial, rand::random::<u16>())
    }

    /// The labels every container of `trial` carries, by which sweeps, `terminus gc` and resume
    /// find it.
    pub(crate) fn labels(&self, trial: &str) -> HashMap<String, String> {
        [
            (LABEL_JOB_ID.to_string(), self.job_id.clone()),
            (LABEL_TRIAL_ID.to_string(), trial.to_string()),
            // Lets `terminus gc` tell containers of a live job from those of a dead one (by the
            // job directory's lock, on this host; the pid for older containers).
            (LABEL_PID.to_string(), std::process::id().to_string()),
            (LABEL_JOB_DIR.to_string(), self.job_dir.display().to_string()),
            (LABEL_HOST.to_string(), terminus_core::lock::host_identity()),
        ]
        .into_iter()
        .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn container_names_hold_only_what_a_container_name_may() {
        assert_eq!(
            super::container_name("0123456789abcdef", "Org/Name__3x:AB", 0xa),
            "terminus-01234567-org-name__3x-ab-000a"
        );
    }
}
