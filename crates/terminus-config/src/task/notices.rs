//! What a task asks that this orchestrator does not do: a notice when the trial can run
//! without it, an `Unrunnable` reason when it cannot.

use super::network::NetworkPlan;
use super::schema::{NetworkMode, TaskToml, VerifierMode};

/// A key of `task.toml` (or a file of the task) that is accepted but not acted on.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskNotice {
    /// The key's path (`environment.skills_dir`) or the file (`environment/docker-compose.yaml`).
    pub key: String,
    pub kind: NoticeKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeKind {
    /// Neither Harbor's model nor ours knows it; both ignore it.
    UnknownKey,
    /// Harbor acts on it; this orchestrator does not (yet).
    NotActedOn,
    /// Harbor reads it for another kind of environment (TPUs, GPU types on a cloud).
    OtherEnvironments,
}

impl std::fmt::Display for TaskNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.kind {
            NoticeKind::UnknownKey => "unknown key (Harbor's task model does not know it either), ignored",
            NoticeKind::NotActedOn => "not acted on by terminus yet, ignored",
            NoticeKind::OtherEnvironments => "only cloud environments act on it; ignored on Docker",
        };
        write!(f, "`{}`: {why}", self.key)
    }
}

/// Why a task that loads cannot run here; the trial fails with it (its message names the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrunnable {
    /// A step of a multi-step task with a separate verifier environment.
    SeparateStepVerifier { step: String },
    /// `network_mode = "allowlist"` for a separate verifier (the key that asks for it).
    SeparateVerifierAllowlist { key: &'static str },
    /// `environment.os = "windows"`.
    Windows,
}

impl std::fmt::Display for Unrunnable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrunnable::SeparateStepVerifier { step } => write!(
                f,
                "step `{step}`: a separate verifier environment for a step of a multi-step task is not supported by terminus yet"
            ),
            Unrunnable::SeparateVerifierAllowlist { key } => write!(
                f,
                "`{key} = \"allowlist\"`: host allowlists are enforced only in the agent's container, not in a separate verifier's, and the task is not run with more network than it asks for"
            ),
            Unrunnable::Windows => {
                f.write_str("`environment.os = \"windows\"`: this engine runs Linux containers only")
            }
        }
    }
}

/// What of a parsed task is not acted on: the keys no model knows, and those Harbor acts on
/// and terminus does not (yet). Keys that make a task [`Unrunnable`] are not repeated here.
pub(super) fn notices(config: &TaskToml, unknown: Vec<String>) -> Vec<TaskNotice> {
    let mut notices: Vec<TaskNotice> =
        unknown.into_iter().map(|key| TaskNotice { key, kind: NoticeKind::UnknownKey }).collect();
    let mut add = |present: bool, key: &str, kind: NoticeKind| {
        if present {
            notices.push(TaskNotice { key: key.to_string(), kind });
        }
    };
    let env = &config.environment;
    add(env.gpu_types.is_some(), "environment.gpu_types", NoticeKind::OtherEnvironments);
    add(env.tpu.is_some(), "environment.tpu", NoticeKind::OtherEnvironments);
    notices
}

/// Why a task of `config` whose network is `plan` cannot run here, if it cannot.
pub(super) fn unrunnable(config: &TaskToml, plan: &NetworkPlan) -> Option<Unrunnable> {
    for step in config.steps.iter().flatten() {
        if config.verifier_mode(Some(step)) == VerifierMode::Separate {
            return Some(Unrunnable::SeparateStepVerifier { step: step.name.clone() });
        }
    }
    let verifier_env = config.verifier_environment_config(None);
    if config.environment.os.eq_ignore_ascii_case("windows")
        || verifier_env.is_some_and(|env| env.os.eq_ignore_ascii_case("windows"))
    {
        return Some(Unrunnable::Windows);
    }
    // Allowlists are enforced by the egress proxy on the agent's container's network only.
    if let Some(baseline) = &plan.verifier_env {
        for (mode, key) in
            [(baseline.mode, "verifier.environment.network_mode"), (plan.verifier.mode, "verifier.network_mode")]
        {
            if mode == NetworkMode::Allowlist {
                return Some(Unrunnable::SeparateVerifierAllowlist { key });
            }
        }
    }
    None
}
