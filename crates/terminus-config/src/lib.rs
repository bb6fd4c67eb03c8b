//! Reading what users write: Harbor-style job YAML files and Harbor-format task directories
//! (their `environment/docker-compose.yaml` too, in [`compose`]).
//!
//! Two levels, as in ripgrep's `lowargs`/`hiargs`: the `raw` module mirrors the YAML exactly and
//! [`JobSpec`] is the validated form the orchestrator runs (resolved task list, agent kinds,
//! concurrency). Nothing after this crate sees the raw form.
//!
//! Architecture invariant: no Docker, no HTTP, no async. Errors name the file and the key.

pub mod cluster;
pub mod compose;
pub mod diff;
pub mod error;
pub mod glob;
mod harbor_keys;
pub mod host_env;
pub mod job;
pub mod plan;
pub mod policy;
pub mod raw;
pub mod registry;
mod serde_message;
pub mod skills;
pub mod task;
pub mod terminus;
pub mod trial;

pub use error::ConfigError;
pub use job::{AgentKind, AgentSpec, JobSpec, TaskRef};
pub use plan::JobPlan;
pub use task::Task;
pub use terminus::{KwargError, ModelApiFormat, TemplateProblem, Terminus2Options};
