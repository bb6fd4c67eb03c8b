//! Small path and clock helpers the job's readers share: a directory's name, an absolute path,
//! the job name's timestamp.

use std::path::{Path, PathBuf};

pub(super) fn dir_name(path: &Path) -> String {
    absolute(path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

pub(super) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `YYYY-MM-DD__HH-MM-SS` in UTC (Harbor uses local time; a machine-independent clock keeps
/// job names sortable across hosts).
pub(super) fn chrono_like_now() -> String {
    terminus_core::time::now().format("%Y-%m-%d__%H-%M-%S").to_string()
}
