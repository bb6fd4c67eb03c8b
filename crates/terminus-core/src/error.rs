//! Why a trial ended badly, as a kind the code decides on.
//!
//! Every error a trial can record is a [`TrialErrorKind`], each with a unique name
//! ([`TrialErrorKind::name`]): mostly Harbor's exception names, plus terminus's own
//! (`EnvironmentLostError`, `InternalError`, `TrialOverdueError`, `LlmCallLimitExceededError`,
//! `TrialDiskLimitExceededError`, and finer kinds such as `TmuxSessionError`). Retries, restarts,
//! resume filters and statistics ask the kind's predicates.
//!
//! On disk, `exception_info.exception_type` is the name Harbor writes for the same failure
//! ([`TrialError::exception_type`]: a tmux failure is `RuntimeError`, a provider's 503
//! `ServiceUnavailableError`, as LiteLLM names it), so analyses and Harbor's own policy table
//! count it as Harbor's would; `exception_info.kind` holds the kind's name beside it. An
//! [`ExceptionInfo`] is built from a [`TrialError`] when a result is written, and read back with
//! [`ExceptionInfo::kind`], the one place a name turns into a kind.
//!
//! [`ExceptionInfo`]: crate::result::ExceptionInfo
//! [`ExceptionInfo::kind`]: crate::result::ExceptionInfo::kind

use std::fmt;

use crate::llm::LlmError;
use crate::time::Timestamp;

/// What went wrong, by kind. The table in ARCHITECTURE.md lists each with its Harbor name, its
/// retry default and whether the trial is still graded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrialErrorKind {
    // The agent phase.
    /// The agent's time limit passed.
    AgentTimeout,
    /// The agent's set-up (its terminal, tools) took longer than allowed.
    AgentSetupTimeout,
    /// The terminal (tmux in the container) failed.
    TmuxSession,
    /// A setting had an impossible value (a pane size, say).
    InvalidValue,
    /// A command in the container failed in a way nothing more specific names.
    Runtime,
    /// The model's replies kept exceeding its output limit.
    OutputLengthExceeded,
    /// The agent made as many model calls as `max_llm_calls` allows (its trial is still graded).
    LlmCallLimit,
    // The model (each maps one `LlmError` kind).
    ContextLengthExceeded,
    RateLimit,
    ApiConnection,
    Authentication,
    BadRequest,
    /// The provider's reply could not be read.
    Api,
    // The job.
    /// The job was interrupted (Ctrl-C, SIGTERM).
    Cancelled,
    // The task and its environment.
    /// The task directory could not be read.
    TaskLoad,
    /// A file the agent needs is missing (the oracle's `solution/solve.sh`).
    FileNotFound,
    EnvironmentBuild,
    EnvironmentStart,
    /// The task's `healthcheck` kept failing after the container started.
    Healthcheck,
    /// The task asks for what this orchestrator or engine cannot give (a multi-container
    /// environment, GPUs on an engine without them…); the message names the key.
    Unsupported,
    // Verification.
    AddTestsDir,
    DownloadVerifierDir,
    VerifierTimeout,
    VerifierOutputParse,
    RewardFileEmpty,
    RewardFileNotFound,
    /// With `verifier.agent_processes: kill`: the agent changed what the verification runs (a
    /// shell, `env`, the tests' interpreter, a program the tests name, the loader's preload
    /// list), so the tests' verdict cannot be trusted and is not taken (graded 0).
    VerifierTampered,
    // Ours.
    /// The container stopped from inside while the agent ran (its processes ended the
    /// engine's init: a `kill -9 -1` under an image's `ENTRYPOINT`), nothing outside stopping
    /// it: the agent's doing, not a loss; not restarted, not verified. Harbor's exec fails then:
    /// written as `RuntimeError`.
    AgentEndedEnvironment,
    /// The container died under the trial and the restarts are used up.
    EnvironmentLost,
    /// The trial actor crashed (a panic) and the restarts are used up, or could not start.
    Internal,
    /// The model's replies after summarizations made no progress: the same reply, or the same
    /// unparsable one, again and again. Ours; the trial is still verified.
    NoProgress,
    /// The trial outlived all its deadlines plus a margin and the Supervisor's watchdog ended it
    /// (something it waited on had no deadline); the restarts are used up.
    Overdue,
    /// What the orchestrator wrote into the trial's directory reached `max_trial_disk_mb`.
    TrialDiskLimit,
}

impl TrialErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [TrialErrorKind; 33] = [
        TrialErrorKind::AgentTimeout,
        TrialErrorKind::AgentSetupTimeout,
        TrialErrorKind::TmuxSession,
        TrialErrorKind::InvalidValue,
        TrialErrorKind::Runtime,
        TrialErrorKind::OutputLengthExceeded,
        TrialErrorKind::LlmCallLimit,
        TrialErrorKind::ContextLengthExceeded,
        TrialErrorKind::RateLimit,
        TrialErrorKind::ApiConnection,
        TrialErrorKind::Authentication,
        TrialErrorKind::BadRequest,
        TrialErrorKind::Api,
        TrialErrorKind::Cancelled,
        TrialErrorKind::TaskLoad,
        TrialErrorKind::FileNotFound,
        TrialErrorKind::EnvironmentBuild,
        TrialErrorKind::EnvironmentStart,
        TrialErrorKind::Healthcheck,
        TrialErrorKind::Unsupported,
        TrialErrorKind::AddTestsDir,
        TrialErrorKind::DownloadVerifierDir,
        TrialErrorKind::VerifierTimeout,
        TrialErrorKind::VerifierOutputParse,
        TrialErrorKind::RewardFileEmpty,
        TrialErrorKind::RewardFileNotFound,
        TrialErrorKind::VerifierTampered,
        TrialErrorKind::AgentEndedEnvironment,
        TrialErrorKind::EnvironmentLost,
        TrialErrorKind::Internal,
        TrialErrorKind::NoProgress,
        TrialErrorKind::Overdue,
        TrialErrorKind::TrialDiskLimit,
    ];

    /// The kind's own name (unique; `exception_info.kind` on disk). Mostly Harbor's exception
    /// name; where Harbor's is coarser ([`TrialErrorKind::exception_types`]), ours.
    pub fn name(self) -> &'static str {
        match self {
            TrialErrorKind::AgentTimeout => "AgentTimeoutError",
            TrialErrorKind::AgentSetupTimeout => "AgentSetupTimeoutError",
            TrialErrorKind::TmuxSession => "TmuxSessionError",
            TrialErrorKind::InvalidValue => "ValueError",
            TrialErrorKind::Runtime => "RuntimeError",
            TrialErrorKind::OutputLengthExceeded => "OutputLengthExceededError",
            TrialErrorKind::LlmCallLimit => "LlmCallLimitExceededError",
            TrialErrorKind::ContextLengthExceeded => "ContextLengthExceededError",
            TrialErrorKind::RateLimit => "RateLimitError",
            TrialErrorKind::ApiConnection => "APIConnectionError",
            TrialErrorKind::Authentication => "AuthenticationError",
            TrialErrorKind::BadRequest => "BadRequestError",
            TrialErrorKind::Api => "APIError",
            TrialErrorKind::Cancelled => "CancelledError",
            TrialErrorKind::TaskLoad => "TaskLoadError",
            TrialErrorKind::FileNotFound => "FileNotFoundError",
            TrialErrorKind::EnvironmentBuild => "EnvironmentBuildError",
            TrialErrorKind::EnvironmentStart => "EnvironmentStartError",
            TrialErrorKind::Healthcheck => "HealthcheckError",
            TrialErrorKind::Unsupported => "UnsupportedTaskError",
            TrialErrorKind::AddTestsDir => "AddTestsDirError",
            TrialErrorKind::DownloadVerifierDir => "DownloadVerifierDirError",
            TrialErrorKind::VerifierTimeout => "VerifierTimeoutError",
            TrialErrorKind::VerifierOutputParse => "VerifierOutputParseError",
            TrialErrorKind::RewardFileEmpty => "RewardFileEmptyError",
            TrialErrorKind::RewardFileNotFound => "RewardFileNotFoundError",
            TrialErrorKind::VerifierTampered => "VerifierTamperedError",
            TrialErrorKind::AgentEndedEnvironment => "AgentEndedEnvironmentError",
            TrialErrorKind::EnvironmentLost => "EnvironmentLostError",
            TrialErrorKind::Internal => "InternalError",
            TrialErrorKind::NoProgress => "AgentNoProgressError",
            TrialErrorKind::Overdue => "TrialOverdueError",
            TrialErrorKind::TrialDiskLimit => "TrialDiskLimitExceededError",
        }
    }

    /// The kind a name stands for; None for names that are no kind's (Harbor has more, e.g.
    /// `NonZeroAgentExitCodeError`). Derived from [`TrialErrorKind::name`], so the two cannot
    /// disagree.
    pub fn from_name(name: &str) -> Option<TrialErrorKind> {
        TrialErrorKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The `exception_type` Harbor writes for this kind's failures, unless the failure itself
    /// says more (a provider's HTTP status, see [`llm_exception_type`]).
    pub fn default_exception_type(self) -> &'static str {
        match self {
            // Harbor's tmux session and Docker environment raise plain RuntimeErrors.
            TrialErrorKind::TmuxSession
            | TrialErrorKind::EnvironmentBuild
            | TrialErrorKind::EnvironmentStart
            | TrialErrorKind::AgentEndedEnvironment => "RuntimeError",
            other => other.name(),
        }
    }

    /// Every `exception_type` a failure of this kind may be written as.
    pub fn exception_types(self) -> &'static [&'static str] {
        match self {
            TrialErrorKind::TmuxSession => &["RuntimeError"],
            TrialErrorKind::EnvironmentBuild => &["RuntimeError"],
            TrialErrorKind::EnvironmentStart => &["RuntimeError"],
            TrialErrorKind::AgentEndedEnvironment => &["RuntimeError"],
            TrialErrorKind::ApiConnection => &[
                "APIConnectionError",
                "Timeout",
                "InternalServerError",
                "BadGatewayError",
                "ServiceUnavailableError",
                "APIError",
            ],
            TrialErrorKind::Authentication => &["AuthenticationError", "PermissionDeniedError"],
            TrialErrorKind::BadRequest => &["BadRequestError", "NotFoundError"],
            TrialErrorKind::Runtime => &["RuntimeError"],
            TrialErrorKind::Api => &["APIError"],
            _ => &[],
        }
    }

    /// The kinds a name in a job file means: the kind of that name, and every kind a failure of
    /// which is written with that `exception_type` (`RuntimeError` covers tmux and Docker
    /// failures, `InternalServerError` the provider errors it is among).
    pub fn matching(name: &str) -> Vec<TrialErrorKind> {
        TrialErrorKind::ALL
            .into_iter()
            .filter(|kind| kind.name() == name || kind.exception_types().contains(&name))
            .collect()
    }

    /// The fault lies with the machinery (engine, container, orchestrator), not with the agent,
    /// the model or the task's tests: the viewer and summaries show these apart.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            TrialErrorKind::EnvironmentBuild
                | TrialErrorKind::EnvironmentStart
                | TrialErrorKind::Healthcheck
                | TrialErrorKind::EnvironmentLost
                | TrialErrorKind::Internal
                | TrialErrorKind::Overdue
                | TrialErrorKind::AddTestsDir
                | TrialErrorKind::DownloadVerifierDir
                | TrialErrorKind::TmuxSession
                | TrialErrorKind::AgentSetupTimeout
        )
    }

    /// Whether the default retry policy tries a trial with this error again (Harbor's default
    /// exclusions: the agent's and the tests' own verdicts are not retried; nor is a cancel).
    pub fn is_retryable_by_default(self) -> bool {
        !matches!(
            self,
            TrialErrorKind::AgentTimeout
                | TrialErrorKind::VerifierTimeout
                | TrialErrorKind::RewardFileNotFound
                | TrialErrorKind::RewardFileEmpty
                | TrialErrorKind::VerifierOutputParse
                | TrialErrorKind::VerifierTampered
                | TrialErrorKind::Cancelled
                | TrialErrorKind::Unsupported
                | TrialErrorKind::LlmCallLimit
                | TrialErrorKind::NoProgress
                | TrialErrorKind::TrialDiskLimit
        )
    }

    /// Whether a configured retry policy may retry this kind at all (a cancellation never is).
    pub fn is_retryable(self) -> bool {
        self != TrialErrorKind::Cancelled
    }

    /// A crash: the trial did not fail, its machinery did. The Supervisor restarts such trials
    /// in a fresh container (up to `max_restarts`); it records the kind only when it gives up.
    pub fn is_crash(self) -> bool {
        matches!(self, TrialErrorKind::EnvironmentLost | TrialErrorKind::Internal | TrialErrorKind::Overdue)
    }

    /// The trial is still verified and graded after this error (Harbor's rule for a timed-out
    /// agent: its work so far is what gets tested).
    pub fn still_graded(self) -> bool {
        matches!(
            self,
            TrialErrorKind::AgentTimeout
                | TrialErrorKind::LlmCallLimit
                | TrialErrorKind::NoProgress
                | TrialErrorKind::TrialDiskLimit
        )
    }

    /// An error that may only be the visible end of a dead container (an exec or a copy that
    /// broke): before recording it, the trial checks whether its container is gone, giving the
    /// engine a moment to notice.
    pub fn may_mean_lost_container(self) -> bool {
        matches!(
            self,
            TrialErrorKind::TmuxSession
                | TrialErrorKind::Runtime
                | TrialErrorKind::AddTestsDir
                | TrialErrorKind::DownloadVerifierDir
        )
    }

    /// An error the engine itself may cause (it stopped answering while the trial was being
    /// prepared): the trial then goes back to the queue without using an attempt.
    pub fn may_be_engine_outage(self) -> bool {
        matches!(self, TrialErrorKind::EnvironmentBuild | TrialErrorKind::EnvironmentStart)
    }
}

impl fmt::Display for TrialErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<&LlmError> for TrialErrorKind {
    fn from(error: &LlmError) -> TrialErrorKind {
        match error {
            LlmError::ContextLengthExceeded(_) => TrialErrorKind::ContextLengthExceeded,
            LlmError::OutputLengthExceeded { .. } => TrialErrorKind::OutputLengthExceeded,
            LlmError::RateLimited { .. } => TrialErrorKind::RateLimit,
            LlmError::Transient(_) | LlmError::TimedOut(_) | LlmError::Server { .. } => TrialErrorKind::ApiConnection,
            LlmError::Authentication(_) | LlmError::PermissionDenied(_) => TrialErrorKind::Authentication,
            LlmError::BadRequest(_) | LlmError::NotFound(_) | LlmError::UnsupportedParam { .. } => {
                TrialErrorKind::BadRequest
            }
            // A call the budget kept from being sent: the run stops as if cancelled (the loop
            // ends cleanly on it before this is needed).
            LlmError::Cancelled | LlmError::BudgetReached(_) => TrialErrorKind::Cancelled,
            LlmError::InvalidResponse(_) => TrialErrorKind::Api,
        }
    }
}

/// One error of a trial: its kind, what happened, and when.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialError {
    pub kind: TrialErrorKind,
    pub message: String,
    pub occurred_at: Timestamp,
    /// Harbor's name for this failure when it is not the kind's default (a provider error's,
    /// by its HTTP status).
    pub harbor_type: Option<&'static str>,
}

impl TrialError {
    pub fn new(kind: TrialErrorKind, message: impl Into<String>) -> TrialError {
        TrialError { kind, message: message.into(), occurred_at: crate::time::now(), harbor_type: None }
    }

    /// The `exception_type` Harbor writes for this failure.
    pub fn exception_type(&self) -> &'static str {
        self.harbor_type.unwrap_or(self.kind.default_exception_type())
    }
}

/// The name LiteLLM gives a model call's failure (and Harbor writes as its `exception_type`).
pub fn llm_exception_type(error: &LlmError) -> &'static str {
    match error {
        LlmError::Server { status, .. } => match status {
            500 => "InternalServerError",
            502 => "BadGatewayError",
            503 => "ServiceUnavailableError",
            408 | 504 => "Timeout",
            _ => "APIError",
        },
        LlmError::TimedOut(_) => "Timeout",
        LlmError::PermissionDenied(_) => "PermissionDeniedError",
        LlmError::NotFound(_) => "NotFoundError",
        other => TrialErrorKind::from(other).default_exception_type(),
    }
}

impl fmt::Display for TrialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.name(), self.message)
    }
}

impl From<&LlmError> for TrialError {
    fn from(error: &LlmError) -> TrialError {
        let kind = TrialErrorKind::from(error);
        let harbor = llm_exception_type(error);
        let mut trial = TrialError::new(kind, error.to_string());
        trial.harbor_type = (harbor != kind.default_exception_type()).then_some(harbor);
        trial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for kind in TrialErrorKind::ALL {
            assert!(seen.insert(kind.name()), "{kind:?} repeats a name");
            assert_eq!(TrialErrorKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(TrialErrorKind::from_name("NonZeroAgentExitCodeError"), None);
        assert_eq!(TrialErrorKind::from_name("agenttimeouterror"), None, "names are exact");
    }

    #[test]
    fn policy_predicates() {
        use TrialErrorKind as K;
        let not_retried: Vec<K> = K::ALL.into_iter().filter(|k| !k.is_retryable_by_default()).collect();
        assert_eq!(
            not_retried,
            [
                K::AgentTimeout,
                K::LlmCallLimit,
                K::Cancelled,
                K::Unsupported,
                K::VerifierTimeout,
                K::VerifierOutputParse,
                K::RewardFileEmpty,
                K::RewardFileNotFound,
                K::VerifierTampered,
                K::NoProgress,
                K::TrialDiskLimit
            ]
        );
        assert!(!K::Cancelled.is_retryable());
        assert!(K::AgentTimeout.is_retryable(), "a policy may opt in");
        let crashes: Vec<K> = K::ALL.into_iter().filter(|k| k.is_crash()).collect();
        assert_eq!(crashes, [K::EnvironmentLost, K::Internal, K::Overdue]);
        let graded: Vec<K> = K::ALL.into_iter().filter(|k| k.still_graded()).collect();
        assert_eq!(graded, [K::AgentTimeout, K::LlmCallLimit, K::NoProgress, K::TrialDiskLimit]);
        assert!(K::EnvironmentStart.is_infrastructure() && !K::RateLimit.is_infrastructure());
        assert!(!K::Cancelled.is_infrastructure() && !K::RewardFileNotFound.is_infrastructure());
    }

    #[test]
    fn model_errors_map_to_their_kinds() {
        let error = LlmError::RateLimited { retry_after: None, message: "slow down".into() };
        let trial = TrialError::from(&error);
        assert_eq!(trial.kind, TrialErrorKind::RateLimit);
        let info = trial.to_exception_info();
        assert_eq!(info.exception_type, "RateLimitError");
        assert_eq!(info.kind(), Some(TrialErrorKind::RateLimit));
        assert_eq!(TrialErrorKind::from(&LlmError::Transient(String::new())).name(), "APIConnectionError");
    }

    /// `exception_type` is Harbor's name for the failure; the kind goes beside it and is what
    /// the record is read back as.
    #[test]
    fn records_carry_harbors_name_and_our_kind() {
        let unavailable = TrialError::from(&LlmError::Server { status: 503, message: "down".into() });
        assert_eq!(unavailable.kind, TrialErrorKind::ApiConnection);
        let info = unavailable.to_exception_info();
        assert_eq!(
            (info.exception_type.as_str(), info.kind.as_deref()),
            ("ServiceUnavailableError", Some("APIConnectionError"))
        );
        assert_eq!(info.kind(), Some(TrialErrorKind::ApiConnection));
        let timeout = TrialError::from(&LlmError::TimedOut("no reply".into())).to_exception_info();
        assert_eq!(timeout.exception_type, "Timeout");
        let tmux = TrialError::new(TrialErrorKind::TmuxSession, "send-keys failed").to_exception_info();
        assert_eq!((tmux.exception_type.as_str(), tmux.kind()), ("RuntimeError", Some(TrialErrorKind::TmuxSession)));
        let json = serde_json::to_value(&tmux).unwrap();
        assert_eq!(json["kind"], "TmuxSessionError");
        // A record without `kind` (Harbor's, or an older one of ours) is read by its name.
        let mut harbors = tmux.clone();
        harbors.kind = None;
        assert_eq!(harbors.kind(), Some(TrialErrorKind::Runtime));
        // A job file's Harbor name means every kind written under it.
        assert_eq!(TrialErrorKind::matching("InternalServerError"), [TrialErrorKind::ApiConnection]);
        assert!(TrialErrorKind::matching("RuntimeError").contains(&TrialErrorKind::EnvironmentBuild));
        assert_eq!(TrialErrorKind::matching("TmuxSessionError"), [TrialErrorKind::TmuxSession]);
    }
}
