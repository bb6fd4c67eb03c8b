//! The validated job: what runs, how many at once, where results go. [`JobSpec`] and its
//! parts (the preflight's key among them) live in `spec`; reading a job file or a stored
//! configuration in `load`; checking it in `validate`; which tasks it names in `tasks`; each
//! phase's time limit in `limits`; the oracle preflight's job in `preflight`; small path
//! helpers in `paths`. The children import their siblings, never this file.

mod limits;
mod load;
mod overrides;
mod paths;
mod preflight;
mod spec;
mod tasks;
mod typos;
mod validate;

pub use overrides::Overrides;
pub use preflight::PREFLIGHT_SUFFIX;
pub use spec::{
    AUTO_CONCURRENCY, AdmissionMode, AgentKind, AgentSpec, JobSpec, LlmSettings, Multipliers, PreflightMode,
    ScoreConvention, TaskRef, TrialPlan,
};

#[cfg(test)]
mod tests;
