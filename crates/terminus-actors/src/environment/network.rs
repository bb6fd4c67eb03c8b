//! The network of each phase (agent, verifier, step): which policy applies, the proxy
//! variables that go with it, and switching the container's access when a phase starts.

use terminus_config::Task;
use terminus_config::task::{NetworkMode, NetworkPlan, NetworkPolicy, StepSection};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_sandbox::Environment;
use terminus_sandbox::egress::{self, NetworkAccess};

/// The network of each phase of the task, or of its `step` ([`Task::step_network_plan`]).
pub fn phase_plan(task: &Task, step: Option<&StepSection>) -> NetworkPlan {
    step.map_or_else(|| task.network_plan(), |s| task.step_network_plan(s))
}

/// What the container may reach under `policy`.
pub(super) fn access(policy: &NetworkPolicy) -> NetworkAccess {
    match policy.mode {
        NetworkMode::NoNetwork => NetworkAccess::Offline,
        NetworkMode::Public => NetworkAccess::Full,
        NetworkMode::Allowlist => NetworkAccess::Allowlist(policy.allowed_hosts.clone()),
    }
}

/// The environment a phase's processes get for its network: for an allowlist, the variables
/// that send HTTP clients through the trial's egress proxy (`KEY=VALUE`).
pub fn phase_env(policy: &NetworkPolicy) -> Vec<String> {
    if policy.mode == NetworkMode::Allowlist { egress::proxy_env() } else { Vec::new() }
}

/// Gives the container the network its next phase may have (`network_mode` and
/// `allowed_hosts` per phase).
pub async fn enter_phase(container: &Environment, policy: &NetworkPolicy) -> Result<(), TrialError> {
    container
        .set_network(&access(policy))
        .await
        .map_err(|e| TrialError::new(TrialErrorKind::Runtime, format!("cannot set the phase's network: {e}")))
}
