//! The network of each phase (agent, verifier, step): which policy applies, the proxy
//! variables that go with it, and switching the container's access when a phase starts.

use terminus_config::task::{NetworkMode, NetworkPolicy};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_sandbox::Environment;
use terminus_sandbox::egress::NetworkAccess;

/// What the container may reach under `policy`.
pub(super) fn access(policy: &NetworkPolicy) -> NetworkAccess {
    match policy.mode {
        NetworkMode::NoNetwork => NetworkAccess::Offline,
        NetworkMode::Public => NetworkAccess::Full,
        NetworkMode::Allowlist => NetworkAccess::Allowlist(policy.allowed_hosts.clone()),
    }
}

/// Gives the container the network its next phase may have (`network_mode` and
/// `allowed_hosts` per phase).
pub async fn enter_phase(container: &Environment, policy: &NetworkPolicy) -> Result<(), TrialError> {
    container
        .set_network(&access(policy))
        .await
        .map_err(|e| TrialError::new(TrialErrorKind::Runtime, format!("cannot set the phase's network: {e}")))
}
