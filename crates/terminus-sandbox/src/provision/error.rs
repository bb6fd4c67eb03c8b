//! Why an environment could not be provisioned, by kind, mapped once to the trial's error kind.

use terminus_core::error::{TrialError, TrialErrorKind};

/// Why provisioning stopped. Each holds its complete message.
#[derive(Clone, Debug, PartialEq)]
pub enum ProvisionError {
    /// The backend cannot give what the task asks (GPUs, compose on a swarm…).
    Unsupported(String),
    /// A value of the task's cannot be used (a `${VAR}` the host does not pass).
    Invalid(String),
    /// The image could not be built or pulled.
    Build(String),
    /// The environment could not be started or prepared.
    Start(String),
    /// The environment started and its healthcheck did not pass.
    Healthcheck(String),
    /// The error came with a daemon that no longer answers: no fault of the trial.
    EngineDown(Box<ProvisionError>),
    /// The error came from a swarm node lost under the container: the trial lost its
    /// environment.
    Lost(Box<ProvisionError>),
}

impl ProvisionError {
    pub fn message(&self) -> &str {
        match self {
            ProvisionError::Unsupported(m)
            | ProvisionError::Invalid(m)
            | ProvisionError::Build(m)
            | ProvisionError::Start(m)
            | ProvisionError::Healthcheck(m) => m,
            ProvisionError::EngineDown(inner) | ProvisionError::Lost(inner) => inner.message(),
        }
    }

    /// The trial error kind this is recorded as: the cause's (an engine that went away or a
    /// lost node changes what happens to the trial, not what its error was).
    pub fn kind(&self) -> TrialErrorKind {
        match self {
            ProvisionError::Unsupported(_) => TrialErrorKind::Unsupported,
            ProvisionError::Invalid(_) => TrialErrorKind::InvalidValue,
            ProvisionError::Build(_) => TrialErrorKind::EnvironmentBuild,
            ProvisionError::Start(_) => TrialErrorKind::EnvironmentStart,
            ProvisionError::Healthcheck(_) => TrialErrorKind::Healthcheck,
            ProvisionError::EngineDown(inner) | ProvisionError::Lost(inner) => inner.kind(),
        }
    }

    /// The engine did not answer once this error had happened.
    pub fn engine_down(&self) -> bool {
        match self {
            ProvisionError::EngineDown(_) => true,
            ProvisionError::Lost(inner) => inner.engine_down(),
            _ => false,
        }
    }

    /// The swarm node under the container was lost.
    pub fn lost(&self) -> bool {
        matches!(self, ProvisionError::Lost(_))
    }
}

impl From<&ProvisionError> for TrialError {
    fn from(error: &ProvisionError) -> TrialError {
        TrialError::new(error.kind(), error.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_befell_the_backend_keeps_the_cause_s_kind_and_message() {
        let build = ProvisionError::Build("no space".into());
        let both = ProvisionError::Lost(Box::new(ProvisionError::EngineDown(Box::new(build.clone()))));
        assert_eq!(both.kind(), TrialErrorKind::EnvironmentBuild);
        assert_eq!(both.message(), "no space");
        assert!(both.lost() && both.engine_down());
        assert!(!build.lost() && !build.engine_down());
        let error = TrialError::from(&ProvisionError::Healthcheck("failed".into()));
        assert_eq!((error.kind, error.message.as_str()), (TrialErrorKind::Healthcheck, "failed"));
    }
}
