//! A job's own record in its directory (`service.json`): what the database knows about a job
//! that its files do not — the name and config it was submitted with (secrets redacted), when,
//! and the controls that outlive a restart (paused, cancelled). With the trials' files it is
//! enough to rebuild the job's rows when the database is lost.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::JobRow;

/// The record's file name in a job directory.
pub const RECORD_FILE: &str = "service.json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub config: Value,
    #[serde(default)]
    pub paused: bool,
    /// `soft` or `hard` once the job was cancelled.
    #[serde(default)]
    pub cancel_mode: Option<String>,
}

impl JobRecord {
    pub fn of(job: &JobRow) -> JobRecord {
        JobRecord {
            id: job.id.clone(),
            name: job.name.clone(),
            created_at: job.created_at.clone(),
            config: job.config.clone(),
            paused: job.paused,
            cancel_mode: job.cancel_mode.clone(),
        }
    }

    /// The record in `job_dir`; None when it is missing or unreadable.
    pub fn read(job_dir: &Path) -> Option<JobRecord> {
        let text = std::fs::read_to_string(job_dir.join(RECORD_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes the record whole or not at all, flushed to disk.
    pub fn write(&self, job_dir: &Path) -> std::io::Result<()> {
        terminus_actors::files::write_json(&job_dir.join(RECORD_FILE), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_a_broken_one_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let record = JobRecord {
            id: "2fbeed32-fc94-4228-98ef-4135262cdc63".into(),
            name: "nightly".into(),
            created_at: "2026-12-07T12:00:00.000000+00:00".into(),
            config: serde_json::json!({"agents": [{"name": "oracle"}]}),
            paused: true,
            cancel_mode: Some("soft".into()),
        };
        record.write(dir.path()).unwrap();
        assert_eq!(JobRecord::read(dir.path()), Some(record));
        assert!(!dir.path().join("service.json.tmp").exists());
        std::fs::write(dir.path().join(RECORD_FILE), "{\"id\": ").unwrap();
        assert_eq!(JobRecord::read(dir.path()), None);
    }
}
