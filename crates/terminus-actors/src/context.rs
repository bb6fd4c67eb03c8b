//! What every actor of one job shares: the job's plan, its identity and directory, the backend
//! its trials run on (the local Docker engine or a swarm) and the job's site there. Read-only
//! after start, so it is shared through an `Arc`.

use std::path::PathBuf;
use std::sync::Arc;

use terminus_config::JobPlan;
use terminus_core::ids::JobId;
use terminus_core::layout::JobDir;
use terminus_sandbox::{Backend, Site};

#[derive(Debug)]
pub struct JobContext {
    /// The job's trials and settings; each trial resolves its own plan from it once its task loads.
    pub plan: Arc<JobPlan>,
    pub job_id: JobId,
    pub job_dir: PathBuf,
    /// Where trials run: the local engine or a swarm.
    pub backend: Backend,
    /// The job's place on the backend: its labels, network, image builder and hash cache.
    pub site: Site,
    /// A limit on running trials shared with the process's other jobs (`terminus serve`).
    pub shared_limit: Option<std::sync::Arc<crate::shared_limit::SharedLimit>>,
}

impl JobContext {
    pub fn new(plan: JobPlan, job_id: JobId, job_dir: PathBuf, backend: Backend, site: Site) -> JobContext {
        JobContext { plan: Arc::new(plan), job_id, job_dir, backend, site, shared_limit: None }
    }

    /// The job directory's layout.
    pub fn dir(&self) -> JobDir {
        JobDir::new(&self.job_dir)
    }
}
