//! The validated job: what runs, how many at once, where results go. [`JobSpec`] and its
//! parts live in `spec`; reading a job file or a stored configuration in `load`; checking it
//! in `validate`; which tasks it names in `tasks`; each phase's time limit in `limits`; the
//! oracle preflight's key and job in `preflight`.

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
    AUTO_CONCURRENCY, AdmissionMode, AgentKind, AgentSpec, JobSpec, LlmSettings, Multipliers, PreflightMode, TaskRef,
    TrialPlan,
};

#[cfg(test)]
mod tests;
