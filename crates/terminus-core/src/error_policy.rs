//! Harbor 0.26's error policy: what an exception name means for a trial (retried? graded? does
//! its reward count?), as Harbor 0.26 computes it from the name alone, with the job's
//! `override_error_policy` entry for that name applied.
//!
//! Terminus retries and grades by its own kinds ([`crate::error::TrialErrorKind`]); this table
//! only decides which trials Harbor 0.26's score counts (`reward_valid`) and what a result's
//! `exception_info.policy` says, so that Harbor 0.26 reading our files computes the same. A
//! name missing from the table (terminus's own kinds, among others) gets the policy of an
//! unknown name: retried, graded, reward valid.

use serde::{Deserialize, Serialize};

/// Three answers for one exception name (Harbor's `ErrorPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorPolicy {
    pub should_retry: bool,
    pub should_grade: bool,
    pub has_valid_reward: bool,
}

/// One entry of `override_error_policy` (Harbor's `ErrorPolicyOverride`): each answer given
/// replaces the table's. Written with all three keys, null where not given, as Harbor writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyOverride {
    #[serde(default)]
    pub should_retry: Option<bool>,
    #[serde(default)]
    pub should_grade: Option<bool>,
    #[serde(default)]
    pub has_valid_reward: Option<bool>,
}

impl ErrorPolicy {
    /// The policy of a name the table does not hold.
    pub const UNKNOWN: ErrorPolicy = ErrorPolicy::new(true, true, true);

    const fn new(should_retry: bool, should_grade: bool, has_valid_reward: bool) -> ErrorPolicy {
        ErrorPolicy { should_retry, should_grade, has_valid_reward }
    }

    /// Harbor 0.26's policy for `exception_type`, with `over` applied.
    pub fn of(exception_type: &str, over: Option<&PolicyOverride>) -> ErrorPolicy {
        let base = TABLE
            .iter()
            .find(|(_, names)| names.contains(&exception_type))
            .map_or(ErrorPolicy::UNKNOWN, |(policy, _)| *policy);
        match over {
            Some(over) => ErrorPolicy {
                should_retry: over.should_retry.unwrap_or(base.should_retry),
                should_grade: over.should_grade.unwrap_or(base.should_grade),
                has_valid_reward: over.has_valid_reward.unwrap_or(base.has_valid_reward),
            },
            None => base,
        }
    }
}

/// Harbor 0.26's table, by (retry, grade, valid reward).
const TABLE: [(ErrorPolicy, &[&str]); 5] = [
    (
        ErrorPolicy::new(true, false, false),
        &[
            "EnvironmentStartTimeoutError",
            "SandboxBuildFailedError",
            "AgentSetupTimeoutError",
            "HealthcheckError",
            "SandboxLikelyOutOfMemoryError",
            "MemoryLimitExceededError",
            "SSHAccessError",
            "GKEExecStreamClosedError",
            "GKEPodNotFoundError",
            "RuntimeRequestError",
            "AddTestsDirError",
            "DownloadVerifierDirError",
        ],
    ),
    (
        ErrorPolicy::new(true, true, false),
        &[
            "ApiError",
            "ApiRateLimitError",
            "ApiInternalServerError",
            "ApiOverloadedError",
            "ApiConnectionClosedError",
            "ApiResponseStalledError",
            "UnknownApiError",
            "NetworkConnectionError",
            "ApiConnectionError",
            "ApiUsageLimitError",
            "RateLimitError",
            "InternalServerError",
            "ServiceUnavailableError",
            "APIConnectionError",
            "APIError",
            "Timeout",
        ],
    ),
    (
        ErrorPolicy::new(false, true, false),
        &[
            "UnsupportedModelParametersError",
            "BadRequestError",
            "UnprocessableEntityError",
            "UnsupportedParamsError",
            "APIResponseValidationError",
            "BudgetExceededError",
            "VerifierTimeoutError",
            "RewardFileNotFoundError",
            "RewardFileEmptyError",
            "VerifierOutputParseError",
        ],
    ),
    (
        ErrorPolicy::new(false, false, false),
        &[
            "AgentAuthenticationError",
            "ModelNotFoundError",
            "ApiProviderResourceNotFoundError",
            "AuthenticationError",
            "PermissionDeniedError",
            "NotFoundError",
            "ServiceOperationsUnsupportedError",
            "VercelScopeError",
            "DspyImportError",
            "MissingExtraError",
            "RegradeError",
            "CancelledError",
        ],
    ),
    (
        ErrorPolicy::new(false, true, true),
        &[
            "NonZeroAgentExitCodeError",
            "AgentTimeoutError",
            "ContextWindowExceededError",
            "OutputTokenExceededError",
            "ContextLengthExceededError",
            "OutputLengthExceededError",
            "AgentSafetyRefusalError",
            "ContentPolicyViolationError",
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TrialErrorKind;

    #[test]
    fn names_are_looked_up_and_overridden_answer_by_answer() {
        assert_eq!(ErrorPolicy::of("AgentTimeoutError", None), ErrorPolicy::new(false, true, true));
        assert_eq!(ErrorPolicy::of("RateLimitError", None), ErrorPolicy::new(true, true, false));
        assert_eq!(ErrorPolicy::of("NoSuchError", None), ErrorPolicy::UNKNOWN);
        let over = PolicyOverride { has_valid_reward: Some(false), ..PolicyOverride::default() };
        assert_eq!(ErrorPolicy::of("AgentTimeoutError", Some(&over)), ErrorPolicy::new(false, true, false));
        let text = serde_json::to_string(&over).unwrap();
        assert_eq!(text, r#"{"should_retry":null,"should_grade":null,"has_valid_reward":false}"#);
        assert!(serde_json::from_str::<PolicyOverride>(r#"{"retry": true}"#).is_err(), "Harbor forbids other keys");
    }

    #[test]
    fn no_name_is_in_two_groups() {
        let mut seen = std::collections::HashSet::new();
        for (_, names) in TABLE {
            for name in names {
                assert!(seen.insert(*name), "{name} twice");
            }
        }
    }

    /// What Harbor 0.26 makes of the names terminus writes: a verdict of the tests that failed
    /// and a model error spoil the reward, the agent's own limits do not.
    #[test]
    fn terminus_kinds_under_harbors_table() {
        let valid = |kind: TrialErrorKind| ErrorPolicy::of(kind.name(), None).has_valid_reward;
        for kind in [
            TrialErrorKind::RewardFileNotFound,
            TrialErrorKind::VerifierTimeout,
            TrialErrorKind::RateLimit,
            TrialErrorKind::ApiConnection,
            TrialErrorKind::Authentication,
            TrialErrorKind::Cancelled,
            TrialErrorKind::AgentSetupTimeout,
        ] {
            assert!(!valid(kind), "{kind}");
        }
        for kind in [
            TrialErrorKind::AgentTimeout,
            TrialErrorKind::ContextLengthExceeded,
            TrialErrorKind::LlmCallLimit,
            TrialErrorKind::TrialDiskLimit,
            // Ours, unknown to Harbor: graded, its 0 counted.
            TrialErrorKind::VerifierTampered,
        ] {
            assert!(valid(kind), "{kind}");
        }
    }
}
