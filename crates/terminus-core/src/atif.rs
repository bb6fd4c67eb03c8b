//! Which version of ATIF (Agent Trajectory Interchange Format) trajectories are written in.
//! Harbor's models (0.25 and 0.26) read v1.0 to v1.8 and write v1.8 by default; readers that
//! stop at v1.6 refuse the fields v1.7 added (their models forbid unknown fields), so a job
//! whose trajectories such tools read can ask for v1.6.

use std::fmt;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtifVersion {
    /// No per-document `trajectory_id`, no `llm_call_count` (Harbor 0.25's newest).
    V1_6,
    /// `trajectory_id` on every document (and on the refs to subagent files), `llm_call_count`
    /// on the agent steps that come from model calls.
    V1_7,
    /// v1.7's fields; v1.8 adds only content kinds (audio) Terminus 2 never produces.
    #[default]
    V1_8,
}

impl AtifVersion {
    /// Every version this crate writes, by its `schema_version` string.
    pub const ALL: [AtifVersion; 3] = [AtifVersion::V1_6, AtifVersion::V1_7, AtifVersion::V1_8];

    pub fn as_str(self) -> &'static str {
        match self {
            AtifVersion::V1_6 => "ATIF-v1.6",
            AtifVersion::V1_7 => "ATIF-v1.7",
            AtifVersion::V1_8 => "ATIF-v1.8",
        }
    }

    /// `ATIF-v1.6`, also written `v1.6` or `1.6`.
    pub fn parse(text: &str) -> Option<AtifVersion> {
        let bare = text.trim().trim_start_matches("ATIF-").trim_start_matches('v');
        AtifVersion::ALL.into_iter().find(|v| v.as_str().trim_start_matches("ATIF-v") == bare)
    }

    /// Whether documents carry `trajectory_id` and steps `llm_call_count` (v1.7 on).
    pub fn has_document_ids(self) -> bool {
        self != AtifVersion::V1_6
    }
}

impl fmt::Display for AtifVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_in_each_spelling() {
        assert_eq!(AtifVersion::parse("ATIF-v1.6"), Some(AtifVersion::V1_6));
        assert_eq!(AtifVersion::parse("v1.7"), Some(AtifVersion::V1_7));
        assert_eq!(AtifVersion::parse("1.8"), Some(AtifVersion::V1_8));
        assert_eq!(AtifVersion::parse("ATIF-v1.5"), None, "older versions are not written");
        assert_eq!(AtifVersion::default().as_str(), "ATIF-v1.8");
        assert!(!AtifVersion::V1_6.has_document_ids() && AtifVersion::V1_7.has_document_ids());
    }
}
