//! The parsed compose file: its services, what it adds to `main`, their mounts, dependencies,
//! health checks and limits, and the error that names the key a file cannot be run for.

use std::path::PathBuf;
use std::time::Duration;

/// A compose file that cannot be run, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("environment/docker-compose.yaml: `{key}`: {message}")]
pub struct ComposeError {
    pub key: String,
    pub message: String,
}

pub(super) fn error(key: impl Into<String>, message: impl Into<String>) -> ComposeError {
    ComposeError { key: key.into(), message: message.into() }
}

/// The parsed file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComposeFile {
    /// Sidecars, in the order they can start (each after what it depends on).
    pub services: Vec<Service>,
    /// What the file adds to `main`.
    pub main: MainService,
    /// Named volumes (top-level `volumes:`), and the log volumes sidecars mount.
    pub volumes: Vec<String>,
    /// `main`'s log directories that sidecars mount too (`/logs/verifier`): what is in them
    /// comes from the task's own services, not only from the agent.
    pub shared_logs: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MainService {
    pub environment: Vec<String>,
    pub depends_on: Vec<Dependency>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    /// Another recipe than `environment/Dockerfile` (a `build` that says otherwise).
    pub build: Option<ServiceImage>,
    pub limits: Limits,
    /// `network_mode: bridge` (Harbor's adapters write it): the engine's bridge, which is the
    /// trial's own network here; refused when there are sidecars `main` would then not reach.
    pub bridge: bool,
}

/// `deploy.resources.limits`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    pub name: String,
    pub image: ServiceImage,
    /// `KEY=VALUE`.
    pub environment: Vec<String>,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub depends_on: Vec<Dependency>,
    pub healthcheck: Option<ServiceHealth>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub limits: Limits,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ServiceImage {
    /// Used as it is (present, or pulled).
    Image(String),
    /// Built from a directory, with the recipe at `dockerfile` in it.
    Build { context: PathBuf, dockerfile: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    pub service: String,
    pub condition: Condition,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Started,
    Healthy,
    CompletedSuccessfully,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Mount {
    /// A named volume of the file (made per trial).
    Volume { name: String, target: String, read_only: bool },
    /// A directory or file inside the task's `environment/`: bound read-only, or, when the task
    /// says `rw`, copied into the container (the task's directory is never written).
    Bind { source: PathBuf, target: String, read_only: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServiceHealth {
    /// Docker's form: `["CMD", ...]` or `["CMD-SHELL", "..."]`.
    pub test: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub retries: i64,
    pub start_period: Duration,
}
