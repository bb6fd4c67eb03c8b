//! What every actor of one job shares: the validated job, its identity and directory, and the
//! handles to the Docker engine. Read-only after start, so it is shared through an `Arc`.

use std::path::PathBuf;

use terminus_config::JobSpec;
use terminus_core::ids::JobId;
use terminus_sandbox::{Engine, ImageBuilder};

#[derive(Debug)]
pub struct JobContext {
    pub spec: JobSpec,
    pub job_id: JobId,
    pub job_dir: PathBuf,
    pub engine: Engine,
    pub images: ImageBuilder,
}

impl JobContext {
    pub fn new(spec: JobSpec, engine: Engine) -> JobContext {
        let job_dir = std::path::absolute(spec.job_dir()).unwrap_or_else(|_| spec.job_dir());
        JobContext { images: ImageBuilder::new(engine.clone()), spec, job_id: JobId::new(), job_dir, engine }
    }
}
