//! What every actor of one job shares: the validated job, its identity and directory, and the
//! handles to the Docker engine. Read-only after start, so it is shared through an `Arc`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use terminus_config::JobSpec;
use terminus_core::ids::JobId;
use terminus_core::layout::JobDir;
use terminus_sandbox::{Engine, ImageBuilder};

#[derive(Debug)]
pub struct JobContext {
    /// Shared with every trial's state machine, which needs the job's settings but no engine.
    pub spec: Arc<JobSpec>,
    pub job_id: JobId,
    pub job_dir: PathBuf,
    pub engine: Engine,
    pub images: ImageBuilder,
    /// Content hashes of task directories, computed once per job (every attempt of a task
    /// would hash the same files again).
    hashes: Mutex<HashMap<PathBuf, String>>,
    /// The job's own bridge network, for trials that may use the internet (None: the engine's
    /// default bridge, when `isolate_network` is off).
    pub network: Option<String>,
    /// Whether the storage driver can enforce `storage_mb`.
    pub storage_limits: bool,
}

impl JobContext {
    pub fn new(spec: JobSpec, engine: Engine) -> JobContext {
        let job_dir = std::path::absolute(spec.job_dir()).unwrap_or_else(|_| spec.job_dir());
        JobContext {
            images: ImageBuilder::new(engine.clone()),
            spec: Arc::new(spec),
            job_id: JobId::new(),
            job_dir,
            engine,
            hashes: Mutex::new(HashMap::new()),
            network: None,
            storage_limits: false,
        }
    }

    /// The name of the job's bridge network.
    pub fn network_name(&self) -> String {
        format!("terminus-job-{}", self.job_id)
    }

    /// The content hash of `dir` (blocking file work: call it off the async workers).
    pub fn dir_hash(&self, dir: &Path) -> std::io::Result<String> {
        if let Some(hash) = self.hashes.lock().unwrap_or_else(|p| p.into_inner()).get(dir) {
            return Ok(hash.clone());
        }
        let hash = terminus_config::task::dir_hash(dir)?;
        self.hashes.lock().unwrap_or_else(|p| p.into_inner()).insert(dir.to_path_buf(), hash.clone());
        Ok(hash)
    }

    /// The job directory's layout.
    pub fn dir(&self) -> JobDir {
        JobDir::new(&self.job_dir)
    }
}
