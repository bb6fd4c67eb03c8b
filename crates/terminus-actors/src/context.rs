//! What every actor of one job shares: the validated job, its identity and directory, and the
//! handles to the Docker engine. Read-only after start, so it is shared through an `Arc`.

use std::path::PathBuf;
use std::sync::Arc;

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
        }
    }

    /// The job directory's layout.
    pub fn dir(&self) -> JobDir {
        JobDir::new(&self.job_dir)
    }
}
