//! The labels on every container, network and volume terminus makes, by which sweeps, `gc` and
//! `resume` find what a job left, and the role of a trial's own container.

/// Label carrying the job id on every container we create.
pub const LABEL_JOB_ID: &str = "terminus.job_id";
/// Label carrying the trial name on every container we create.
pub const LABEL_TRIAL_ID: &str = "terminus.trial_id";
/// Label carrying the process id of the orchestrator that created the container.
pub const LABEL_PID: &str = "terminus.pid";
/// Label carrying the job directory (absolute) of the orchestrator that created the container:
/// `gc` asks that directory's lock whether the job still runs.
pub const LABEL_JOB_DIR: &str = "terminus.job_dir";
/// Label carrying the identity of the machine whose orchestrator created the container.
pub const LABEL_HOST: &str = "terminus.host";
/// Label carrying what a trial's own container is for ([`ContainerRole`]); its sidecars and
/// egress proxy do not carry it.
pub const LABEL_ROLE: &str = "terminus.role";

/// What a trial's own container is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerRole {
    /// The agent's environment: its terminal, its pane log.
    Agent,
    /// A separate verifier's environment.
    Verifier,
}

impl ContainerRole {
    /// The value of its [`LABEL_ROLE`] label.
    pub fn label(self) -> &'static str {
        match self {
            ContainerRole::Agent => "agent",
            ContainerRole::Verifier => "verifier",
        }
    }
}
