//! The data that crosses the Effects seam: what the machine asks for (terminal set-up, the
//! oracle's run, verification and teardown plans) and what comes back ([`TrialEvent`], wrapped
//! in a [`Delivery`]).

use crate::environment::{self, ContainerCheck, Provisioned};
use crate::llm::LlmCall;
use crate::protocol::SummarizerEvent;
use crate::tmux_session::TmuxError;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use terminus_agent::prompts::SkillFile;
use terminus_config::task::NetworkPolicy;
use terminus_core::error::TrialError;
use terminus_core::layout::TrialDir;
use terminus_sandbox::tmux::PaneSize;

/// The outcome of one effect: what the Trial's state machine reacts to.
pub enum TrialEvent {
    /// The task, its image and container (the container is taken by [`LiveEffects::absorb`]).
    Provisioned(Box<Provisioned>),
    TerminalStarted(Result<TerminalStart, TrialError>),
    TerminalChecked {
        alive: bool,
    },
    ModelReplied(Box<LlmCall>),
    Summarizer(SummarizerEvent),
    ScreenCaptured(String),
    ShortSummaryReplied(Box<LlmCall>),
    KeysSent {
        result: Result<(), TmuxError>,
        took: Duration,
    },
    /// A command's wait is over (a timer).
    WaitOver,
    /// Time for the next idle probe (a timer, with `early_return`).
    ProbeDue,
    IdleProbed {
        probe: Result<(bool, String), TmuxError>,
        took: Duration,
    },
    Observed {
        result: Result<String, TmuxError>,
        took: Duration,
    },
    /// The oracle (or nop) agent is done.
    AgentRan(Option<TrialError>),
    /// A multi-step task's step is ready for its agent (or cannot be); `notes` says what was
    /// cut from the previous step's artifacts.
    StepPrepared {
        result: Result<(), TrialError>,
        notes: Vec<String>,
    },
    ContainerChecked(ContainerCheck),
    /// The tests ran (or could not); `notes` says what was cut from the copied logs,
    /// `processes` what ran when the tests started.
    Verified {
        rewards: Result<BTreeMap<String, f64>, TrialError>,
        notes: Vec<String>,
        processes: Option<environment::ProcessCensus>,
    },
    TornDown {
        notes: Vec<String>,
    },
}

/// A terminal that is up.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalStart {
    pub recording_started: Option<Instant>,
    /// The first screen, for the initial prompt.
    pub screen: String,
    /// The `SKILL.md` files found in the task's `skills_dir`, for the initial prompt.
    pub skills: Vec<SkillFile>,
}

/// What the effects deliver to the Trial's inbox.
pub enum Delivery {
    Event {
        generation: u64,
        event: TrialEvent,
    },
    /// The agent's time limit passed (set in that generation: a step's limit does not outlive
    /// its step).
    Deadline {
        generation: u64,
    },
    /// An effect's task panicked (a bug).
    Panicked(String),
}

/// How the terminal is set up.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminalSetup {
    pub user: Option<String>,
    pub size: PaneSize,
    pub extra_env: BTreeMap<String, String>,
    pub record: bool,
    /// The reference's terminal (`model_view: reference`): its observation and history limit,
    /// keys typed as it types them.
    pub reference: bool,
    /// The agent's set-up limit: tools, session, recording and the first screen.
    pub limit: Duration,
    /// The network the agent phase gets, entered once the tools are in place.
    pub network: NetworkPolicy,
    /// The skills directory (the task's `environment.skills_dir`, else where injected skills go),
    /// looked through after the first screen.
    pub skills_dir: Option<String>,
    /// The job's agent-level skills, uploaded into `skills_dir` first.
    pub inject_skills: Vec<terminus_config::skills::InjectedSkill>,
}

/// How the oracle runs the task's solution.
#[derive(Clone, Debug)]
pub struct OracleRun {
    pub user: Option<String>,
    /// Where `exit-code.txt` goes (the trial's or the step's `agent/`).
    pub agent_dir: std::path::PathBuf,
    pub timeout: Option<Duration>,
    /// `[solution].env`, resolved (`KEY=VALUE`).
    pub env: Vec<String>,
    pub network: NetworkPolicy,
}

/// What verification needs.
#[derive(Clone, Debug)]
pub struct VerifyPlan {
    pub trial: std::sync::Arc<terminus_config::trial::ResolvedTrial>,
    /// The agent timed out (it is stopped like any other before the tests arrive).
    pub timed_out: bool,
    pub timeout: Duration,
    /// Where the verifier's and agent's logs go: the trial's directory or its step's.
    pub dir: TrialDir,
    /// For a multi-step task: the step being verified.
    pub step: Option<StepVerify>,
}

/// The step a verification is for.
#[derive(Clone, Debug)]
pub struct StepVerify {
    pub step: terminus_config::task::StepSection,
    /// More steps may follow: the terminal must survive (with `agent_processes: kill`, what the
    /// agent started is killed but the tmux server and its shell are not) and the verifier's
    /// network is left for the next set-up.
    pub more: bool,
}

/// What teardown needs.
#[derive(Clone, Debug)]
pub struct TeardownPlan {
    pub markers: Vec<(f64, String)>,
    /// Verification did not run, so `/logs/agent` is still to be fetched.
    pub download_agent_logs: bool,
    /// Where the agent's logs and the artifacts go: the trial's directory, or the last step's.
    pub dir: TrialDir,
    /// Extra artifacts of the last step (its `artifacts`).
    pub step_artifacts: Vec<terminus_config::policy::ArtifactSpec>,
    /// The last step's own collect hooks, run after the task's.
    pub step_hooks: Vec<terminus_config::task::CollectSpec>,
}
