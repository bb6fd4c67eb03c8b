//! What every actor of one job shares: the job's plan, its identity and directory, and the
//! backend its trials run on (the local Docker engine or a swarm). Read-only after start, so it is shared through an `Arc`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use terminus_config::JobPlan;
use terminus_core::ids::JobId;
use terminus_core::layout::JobDir;
use terminus_sandbox::{Backend, Engine, ImageBuilder};

#[derive(Debug)]
pub struct JobContext {
    /// The job's trials and settings; each trial resolves its own plan from it once its task loads.
    pub plan: Arc<JobPlan>,
    pub job_id: JobId,
    pub job_dir: PathBuf,
    /// Where trials run: the local engine or a swarm.
    pub backend: Backend,
    /// Builds on the backend's own daemon (the local engine, or the swarm's manager).
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
    pub fn new(plan: JobPlan, backend: Backend) -> JobContext {
        let job_dir = std::path::absolute(plan.dir()).unwrap_or_else(|_| plan.dir());
        JobContext {
            images: {
                let limits = plan.build_limits();
                let limits = terminus_sandbox::image::BuildLimits { memory_mb: limits.memory_mb, cpus: limits.cpus };
                ImageBuilder::new(backend.engine().clone()).with_limits(limits)
            },
            plan: Arc::new(plan),
            job_id: JobId::new(),
            job_dir,
            backend,
            hashes: Mutex::new(HashMap::new()),
            network: None,
            storage_limits: false,
        }
    }

    /// The backend's own daemon: the local engine, or a swarm's manager (networks, compose
    /// sidecars and egress proxies exist only on the local engine: see `Backend::local`).
    pub fn engine(&self) -> &Engine {
        self.backend.engine()
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
