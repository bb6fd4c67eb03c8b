//! How a trial's container is confined: one type for the job's policy, the container the
//! sandbox creates, and the record in the trial's `config.json`.

use serde::{Deserialize, Serialize};

/// Capabilities dropped by default: none of them is needed to install packages (apt, pip, npm)
/// or to run a task, and each widens what a hostile agent can do to the host or the network.
pub const DEFAULT_CAP_DROP: [&str; 4] = ["MKNOD", "NET_RAW", "AUDIT_WRITE", "SETPCAP"];

/// The most processes a trial container may run at once by default.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;

/// The confinement of a container. The default is what every trial gets unless the job says
/// otherwise (`environment` keys in the job file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Confinement {
    /// The most processes at once (a fork bomb stops there, not at the host's limit); None: no
    /// limit.
    pub pids_limit: Option<i64>,
    /// `no-new-privileges`: setuid binaries cannot raise a process's privileges.
    pub no_new_privileges: bool,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    /// An OCI runtime other than the engine's default (e.g. `runsc`).
    pub runtime: Option<String>,
    /// Further `security_opt` entries (seccomp or AppArmor profiles…).
    pub security_opt: Vec<String>,
    /// Keep the container's stdout and stderr in the engine (unbounded on the host's disk);
    /// trials never read them, so by default they are not kept.
    pub keep_container_logs: bool,
    /// A size limit of the container's writable layer, where the storage driver supports one.
    pub storage_mb: Option<u64>,
}

impl Default for Confinement {
    fn default() -> Self {
        Confinement {
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            no_new_privileges: true,
            cap_drop: DEFAULT_CAP_DROP.map(str::to_string).to_vec(),
            cap_add: Vec::new(),
            runtime: None,
            security_opt: Vec::new(),
            keep_container_logs: false,
            storage_mb: None,
        }
    }
}
