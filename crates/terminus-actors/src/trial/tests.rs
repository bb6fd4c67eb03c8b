//! The Trial's state machine driven through a recording fake of [`Effects`]: no Docker, no model,
//! no actor; each test feeds the events the real effects would deliver and checks what the
//! machine asked for and recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::{sync::Arc, time::Duration};

use terminus_agent::summarize::{Subagent, SubagentCall, SummaryError, SummaryJob};
use terminus_config::{JobPlan, job::Overrides, trial::ResolvedTrial};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::ids::{JobId, TrialName};
use terminus_core::layout::JobDir;
use terminus_core::llm::{LlmError, LlmRequest, LlmResponse, Usage};
use terminus_core::result::TrialResult;

use super::effects::{Effects, OracleRun, TeardownPlan, TerminalSetup, TerminalStart, TrialEvent, VerifyPlan};
use super::record::TrialSetup;
use super::stage::{Stage, TrialMachine};
use crate::environment::{ContainerCheck, Provisioned, Stopped};
use crate::llm::LlmCall;
use crate::protocol::{SummarizerEvent, TrialReport};

fn example(task: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tasks").join(task)
}

/// A job over hello-world with one terminus-2 agent (or what `agent` says).
pub fn job(agent: &str) -> JobPlan {
    let agent = if agent.is_empty() {
        "  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: http://127.0.0.1:9\n"
    } else {
        agent
    };
    let yaml = format!(
        "jobs_dir: /nonexistent/jobs\njob_name: unit\nagents:\n{agent}tasks:\n  - path: {}\n",
        example("hello-world").display()
    );
    JobPlan::from_yaml(Path::new("job.yaml"), &yaml, &Overrides::default()).expect("the test job is valid")
}

/// What the machine asked for, in order.
#[derive(Clone, Debug, PartialEq)]
enum Did {
    Invalidate,
    Stop,
    Deadline,
    After(&'static str),
    Provision { needs_solution: bool },
    AbortWork,
    StartTerminal,
    CheckTerminal,
    SendKeys(Vec<String>),
    IdleProbe,
    Observe,
    CaptureScreen,
    StopTerminal,
    Query,
    ShortSummary,
    Summarize(u32),
    StopSummarizer,
    RunOracle,
    CheckContainer { settle: bool },
    Verify { timed_out: bool },
    Teardown { download_agent_logs: bool },
    PrepareStep(String),
    VerifyStep { name: String, more: bool },
}

#[derive(Default)]
struct Fake {
    did: Vec<Did>,
    reports: Vec<TrialReport>,
    files: BTreeMap<PathBuf, String>,
    /// The next query's request (what the model would be sent).
    last_request: Option<LlmRequest>,
    /// Atomic writes of this file name fail.
    failing: Option<&'static str>,
}

impl Fake {
    /// Takes what was done since the last call.
    fn take(&mut self) -> Vec<Did> {
        std::mem::take(&mut self.did)
    }

    fn finished(&self) -> Option<(&TrialResult, Option<TrialErrorKind>, bool)> {
        self.reports.iter().find_map(|r| match r {
            TrialReport::Finished { result, error, written } => Some((result.as_ref(), *error, *written)),
            _ => None,
        })
    }

    fn file_named(&self, name: &str) -> Option<&String> {
        self.files.iter().find(|(path, _)| path.file_name().is_some_and(|n| n == name)).map(|(_, text)| text)
    }
}

impl Effects for Fake {
    fn invalidate(&mut self) {
        self.did.push(Did::Invalidate);
    }
    fn report(&mut self, report: TrialReport) {
        self.reports.push(report);
    }
    fn stop(&mut self) {
        self.did.push(Did::Stop);
    }
    fn set_deadline(&mut self, _after: Duration) {
        self.did.push(Did::Deadline);
    }
    fn after(&mut self, _delay: Duration, event: TrialEvent) {
        self.did.push(Did::After(match event {
            TrialEvent::WaitOver => "wait",
            TrialEvent::ProbeDue => "probe",
            _ => "other",
        }));
    }
    fn write_text(&mut self, path: &Path, text: &str) {
        self.files.insert(path.to_path_buf(), text.to_string());
    }
    fn write_episode_log(&mut self, path: &Path, text: &str) {
        self.files.insert(path.to_path_buf(), text.to_string());
    }
    fn write_atomic(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        if self.failing.is_some_and(|name| path.ends_with(name)) {
            return Err(std::io::Error::other("disk full"));
        }
        self.files.insert(path.to_path_buf(), String::from_utf8_lossy(bytes).into_owned());
        Ok(())
    }
    fn replace_file(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.write_atomic(path, bytes)
    }
    fn read_range(&mut self, path: &Path, start: u64, end: u64) -> std::io::Result<Vec<u8>> {
        let file = self.files.get(path).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        file.as_bytes()
            .get(start as usize..end as usize)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| std::io::Error::other("short file"))
    }
    fn write_from(&mut self, path: &Path, offset: u64, bytes: &[u8], _durable: bool) -> std::io::Result<()> {
        if self.failing.is_some_and(|name| path.ends_with(name)) {
            return Err(std::io::Error::other("disk full"));
        }
        let file = self.files.entry(path.to_path_buf()).or_default();
        file.truncate(offset as usize);
        file.push_str(&String::from_utf8_lossy(bytes));
        Ok(())
    }
    fn provision(&mut self, needs_solution: bool) {
        self.did.push(Did::Provision { needs_solution });
    }
    fn abort_work(&mut self) {
        self.did.push(Did::AbortWork);
    }
    fn start_terminal(&mut self, _setup: TerminalSetup) {
        self.did.push(Did::StartTerminal);
    }
    fn check_terminal(&mut self) {
        self.did.push(Did::CheckTerminal);
    }
    fn send_keys(&mut self, keys: Vec<String>) {
        self.did.push(Did::SendKeys(keys));
    }
    fn idle_probe(&mut self) {
        self.did.push(Did::IdleProbe);
    }
    fn observe(&mut self) {
        self.did.push(Did::Observe);
    }
    fn capture_screen(&mut self) {
        self.did.push(Did::CaptureScreen);
    }
    fn stop_terminal(&mut self) {
        self.did.push(Did::StopTerminal);
    }
    fn query(&mut self, request: LlmRequest) {
        self.last_request = Some(request);
        self.did.push(Did::Query);
    }
    fn short_summary(&mut self, request: LlmRequest) {
        self.last_request = Some(request);
        self.did.push(Did::ShortSummary);
    }
    fn summarize(&mut self, job: Arc<SummaryJob>) {
        self.did.push(Did::Summarize(job.index));
    }
    fn stop_summarizer(&mut self) {
        self.did.push(Did::StopSummarizer);
    }
    fn run_oracle(&mut self, _run: OracleRun) {
        self.did.push(Did::RunOracle);
    }
    fn check_container(&mut self, settle: bool) {
        self.did.push(Did::CheckContainer { settle });
    }
    fn verify(&mut self, plan: VerifyPlan) {
        self.did.push(match plan.step {
            Some(step) => Did::VerifyStep { name: step.step.name, more: step.more },
            None => Did::Verify { timed_out: plan.timed_out },
        });
    }
    fn prepare_step(&mut self, prep: crate::environment::steps::StepPrep) {
        self.did.push(Did::PrepareStep(prep.name));
    }
    fn teardown(&mut self, plan: TeardownPlan) {
        self.did.push(Did::Teardown { download_agent_logs: plan.download_agent_logs });
    }
}

fn machine(agent: &str) -> TrialMachine {
    let job = job(agent);
    let plan = job.trials[0].clone();
    let name = TrialName::with_suffix("hello-world", "abcdefg");
    let dir = JobDir::new("/nonexistent/jobs/unit").trial(&name);
    let basis = job.basis("job", &plan, name.as_str(), "/nonexistent/jobs/unit".into());
    TrialMachine::new(TrialSetup::new(basis, JobId::new(), plan, name, dir), 0, 0)
}

/// The machine's trial as resolved from a job of its agent and `task`.
fn resolved(m: &TrialMachine, task: terminus_config::Task) -> Arc<ResolvedTrial> {
    let mut job = job("");
    job.agents_mut()[0] = m.setup().agent.clone();
    Arc::new(job.resolve(0, task))
}

fn provisioned(m: &TrialMachine) -> TrialEvent {
    let task = terminus_config::Task::load(&example("hello-world")).unwrap();
    TrialEvent::Provisioned(Box::new(Provisioned {
        trial: Some(resolved(m, task)),
        checksum: Some("sum".into()),
        container: None,
        stopped: None,
        host: None,
        notes: vec!["storage_mb = 512 is not enforced".into()],
    }))
}

fn reply(content: &str) -> TrialEvent {
    let response = LlmResponse {
        content: content.into(),
        usage: Some(Usage { prompt_tokens: 100, completion_tokens: 10, ..Usage::default() }),
        ..LlmResponse::default()
    };
    TrialEvent::ModelReplied(Box::new(LlmCall { result: Ok(response), retries: 1, elapsed_msec: 5.0 }))
}

fn failed_call(error: LlmError) -> Box<LlmCall> {
    Box::new(LlmCall { result: Err(error), retries: 0, elapsed_msec: 1.0 })
}

const RUN: &str =
    r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.5}], "task_complete": false}"#;

/// A Terminus 2 trial up to its first query (terminal up, session alive).
fn querying(fake: &mut Fake) -> TrialMachine {
    let mut m = machine("");
    m.start(fake);
    assert_eq!(fake.take(), [Did::Provision { needs_solution: false }]);
    m.on_event(provisioned(&m), fake);
    assert_eq!(fake.take(), [Did::StartTerminal], "the terminal's set-up is not charged to the agent");
    let start = TerminalStart { recording_started: None, screen: "root@box:/app# ".into(), skills: Vec::new() };
    m.on_event(TrialEvent::TerminalStarted(Ok(start)), fake);
    assert_eq!(fake.take(), [Did::CheckTerminal, Did::Deadline], "hello-world's 120 s start with the agent");
    m.on_event(TrialEvent::TerminalChecked { alive: true }, fake);
    assert_eq!(fake.take(), [Did::Query]);
    assert!(fake.file_named("prompt.txt").is_some_and(|p| p.contains("hello.txt")), "the episode's prompt is logged");
    m
}

#[test]
fn the_agents_deadline_starts_once_its_terminal_is_up_and_ends_it_with_a_verification() {
    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    m.on_event(provisioned(&m), &mut fake);
    assert!(matches!(m.stage(), Stage::Agent { .. }));
    assert!(!fake.take().contains(&Did::Deadline), "no deadline while the terminal is set up");
    let start = TerminalStart { recording_started: None, screen: String::new(), skills: Vec::new() };
    m.on_event(TrialEvent::TerminalStarted(Ok(start)), &mut fake);
    assert!(fake.take().contains(&Did::Deadline));
    m.on_deadline(&mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::StopSummarizer, Did::Verify { timed_out: true }]);
    assert!(matches!(m.stage(), Stage::Verifying { .. }));
    // A late terminal report no longer moves anything.
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    assert!(fake.take().is_empty());
    m.on_event(
        TrialEvent::Verified {
            notes: Vec::new(),
            processes: None,
            rewards: Ok(BTreeMap::from([("reward".to_string(), 0.0)])),
        },
        &mut fake,
    );
    assert_eq!(fake.take(), [Did::Invalidate, Did::Teardown { download_agent_logs: false }]);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    assert_eq!(fake.take(), [Did::Stop]);
    let (result, error, written) = fake.finished().expect("a result");
    assert_eq!((error, written), (Some(TrialErrorKind::AgentTimeout), true));
    assert_eq!(
        result.exception_info.as_ref().unwrap().exception_message,
        "Agent execution timed out after 120 seconds"
    );
    assert_eq!(result.reward(), Some(0.0), "the agent's work so far was graded");
    assert!(fake.file_named("result.json").is_some_and(|t| t.contains("AgentTimeoutError")));
    assert!(fake.file_named("exception.txt").is_some());
}

#[test]
fn a_cancel_during_a_model_call_tears_down_at_once_and_records_the_cancel() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    m.on_cancel(&mut fake);
    assert_eq!(
        fake.take(),
        [Did::Invalidate, Did::StopSummarizer, Did::Invalidate, Did::Teardown { download_agent_logs: true }]
    );
    assert!(fake.file_named("trajectory.json").is_some(), "the final trajectory is written");
    // The model's late reply is dropped (the shell drops stale ones; the machine ignores it too).
    m.on_event(reply(RUN), &mut fake);
    assert!(fake.take().is_empty());
    m.on_cancel(&mut fake);
    assert!(fake.take().is_empty(), "a second cancel does nothing");
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, error, _) = fake.finished().unwrap();
    assert_eq!(error, Some(TrialErrorKind::Cancelled));
    let agent = result.agent_result.as_ref().expect("the agent reports what it did");
    assert_eq!(agent.metadata.as_ref().unwrap()["n_episodes"], 1);
}

#[test]
fn a_command_runs_its_keys_then_waits_then_observes() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    m.on_event(reply(RUN), &mut fake);
    assert_eq!(fake.take(), [Did::SendKeys(vec!["ls\n".into()])]);
    assert!(fake.file_named("response.txt").is_some_and(|r| r == RUN));
    m.on_event(TrialEvent::KeysSent { result: Ok(()), took: Duration::from_millis(3) }, &mut fake);
    assert_eq!(fake.take(), [Did::After("wait")]);
    m.on_event(TrialEvent::WaitOver, &mut fake);
    assert_eq!(fake.take(), [Did::Observe]);
    let output = TrialEvent::Observed { result: Ok("New Terminal Output:\nfile\n".into()), took: Duration::ZERO };
    m.on_event(output, &mut fake);
    assert_eq!(fake.take(), [Did::CheckTerminal], "the next episode starts");
    assert!(fake.file_named("trajectory.json").is_some_and(|t| t.contains("bash_command")));
    // A terminal that died ends the agent quietly, and the trial is verified.
    m.on_event(TrialEvent::TerminalChecked { alive: false }, &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::StopSummarizer, Did::Verify { timed_out: false }]);
}

const WAIT: &str =
    r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "", "duration": 2}], "task_complete": false}"#;

#[test]
fn an_empty_keystroke_is_not_typed_but_its_wait_happens() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    m.on_event(reply(WAIT), &mut fake);
    assert_eq!(fake.take(), [Did::After("wait")], "nothing is typed; the wait starts at once");
}

#[test]
fn the_trajectory_is_written_at_most_every_two_seconds_and_always_at_the_end() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    for output in ["the first output", "the second output"] {
        m.on_event(reply(RUN), &mut fake);
        m.on_event(TrialEvent::KeysSent { result: Ok(()), took: Duration::ZERO }, &mut fake);
        m.on_event(TrialEvent::WaitOver, &mut fake);
        m.on_event(TrialEvent::Observed { result: Ok(output.into()), took: Duration::ZERO }, &mut fake);
        m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    }
    let written = fake.file_named("trajectory.json").expect("written at the first observation");
    assert!(written.contains("the first output"), "{written}");
    assert!(!written.contains("the second output"), "not again within 2 s: {written}");
    m.on_cancel(&mut fake);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    assert!(fake.file_named("trajectory.json").unwrap().contains("the second output"), "the agent's end writes it");
}

#[test]
fn a_failed_keystroke_checks_the_container_and_a_dead_one_is_reported_lost() {
    for check in [ContainerCheck::Gone, ContainerCheck::EndedFromInside] {
        let mut fake = Fake::default();
        let mut m = querying(&mut fake);
        m.on_event(reply(RUN), &mut fake);
        fake.take();
        let broken = Err(crate::tmux_session::TmuxError::Channel("the shell exited".into()));
        m.on_event(TrialEvent::KeysSent { result: broken, took: Duration::ZERO }, &mut fake);
        assert_eq!(fake.take(), [Did::Invalidate, Did::StopSummarizer, Did::CheckContainer { settle: true }]);
        m.on_event(TrialEvent::ContainerChecked(check), &mut fake);
        if check == ContainerCheck::EndedFromInside {
            let lost = fake.reports.iter().any(|r| matches!(r, TrialReport::Lost { .. }));
            assert!(!lost && fake.take().iter().any(|d| matches!(d, Did::Teardown { .. })), "no loss, no verification");
            m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
            assert_eq!(fake.finished().unwrap().1, Some(TrialErrorKind::AgentEndedEnvironment));
            continue;
        }
        assert_eq!(fake.take(), [Did::StopTerminal, Did::Invalidate, Did::Stop]);
        assert!(matches!(&fake.reports[..], [.., TrialReport::Lost { .. }]));
        assert!(fake.finished().is_none(), "a lost trial writes no result: it is restarted");
        assert!(fake.file_named("result.json").is_none());
    }
}

#[test]
fn container_loss_during_verification_is_a_restart_an_absent_engine_a_requeue_and_a_live_container_records_the_error() {
    let nop = "  - name: nop\n";
    for check in [ContainerCheck::Gone, ContainerCheck::EngineDown, ContainerCheck::Alive] {
        let mut fake = Fake::default();
        let mut m = machine(nop);
        m.start(&mut fake);
        m.on_event(provisioned(&m), &mut fake);
        // The nop agent is done at once and goes straight to verification.
        assert_eq!(
            fake.take(),
            [
                Did::Provision { needs_solution: false },
                Did::Deadline,
                Did::Invalidate,
                Did::Verify { timed_out: false }
            ]
        );
        let error = TrialError::new(TrialErrorKind::DownloadVerifierDir, "failed to copy from container `x`");
        m.on_event(TrialEvent::Verified { rewards: Err(error), notes: Vec::new(), processes: None }, &mut fake);
        assert_eq!(fake.take(), [Did::CheckContainer { settle: true }]);
        m.on_event(TrialEvent::ContainerChecked(check), &mut fake);
        if check == ContainerCheck::Gone {
            assert!(matches!(&fake.reports[..], [.., TrialReport::Lost { .. }]));
            assert!(fake.take().contains(&Did::Stop));
        } else if check == ContainerCheck::EngineDown {
            // Not the trial's error: no result, and the Supervisor runs it again later.
            assert!(matches!(&fake.reports[..], [.., TrialReport::EngineUnavailable { .. }]));
            assert!(fake.finished().is_none());
            assert_eq!(fake.take(), [Did::StopTerminal, Did::Invalidate, Did::Stop]);
        } else {
            assert_eq!(fake.take(), [Did::Invalidate, Did::Teardown { download_agent_logs: false }]);
            m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
            assert_eq!(fake.finished().unwrap().1, Some(TrialErrorKind::DownloadVerifierDir));
        }
    }
    // A verdict of the tests themselves is checked once, without waiting for the engine.
    let mut fake = Fake::default();
    let mut m = machine(nop);
    m.start(&mut fake);
    m.on_event(provisioned(&m), &mut fake);
    fake.take();
    let error = TrialError::new(TrialErrorKind::RewardFileNotFound, "no reward file");
    m.on_event(TrialEvent::Verified { rewards: Err(error), notes: Vec::new(), processes: None }, &mut fake);
    assert_eq!(fake.take(), [Did::CheckContainer { settle: false }]);
}

fn call(content: &str, tokens: u64) -> Box<SubagentCall> {
    Box::new(SubagentCall {
        prompt: "p".into(),
        response: LlmResponse {
            content: content.into(),
            usage: Some(Usage { prompt_tokens: tokens, completion_tokens: 1, ..Usage::default() }),
            ..LlmResponse::default()
        },
        elapsed_msec: 2.0,
        timestamp: "t".into(),
    })
}

#[test]
fn a_summarization_failing_mid_chain_keeps_the_finished_call_and_falls_back() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    // One exchange, then the next call overflows.
    m.on_event(reply(RUN), &mut fake);
    m.on_event(TrialEvent::KeysSent { result: Ok(()), took: Duration::ZERO }, &mut fake);
    m.on_event(TrialEvent::WaitOver, &mut fake);
    m.on_event(TrialEvent::Observed { result: Ok("out".into()), took: Duration::ZERO }, &mut fake);
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    fake.take();
    m.on_event(TrialEvent::ModelReplied(failed_call(LlmError::ContextLengthExceeded("too long".into()))), &mut fake);
    assert_eq!(fake.take(), [Did::Summarize(1)]);
    // The summary call finishes (counted, its file written), then the questions call fails.
    let done = SummarizerEvent::CallDone { which: Subagent::Summary, call: call("SUMMARY", 500) };
    m.on_event(TrialEvent::Summarizer(done), &mut fake);
    assert!(fake.file_named("trajectory.summarization-1-summary.json").is_some());
    let failure = SummaryError::Call { subagent: Subagent::Questions, error: LlmError::Transient("503".into()) };
    let finished = SummarizerEvent::Finished { result: Box::new(Err(failure)), retries: 2 };
    m.on_event(TrialEvent::Summarizer(finished), &mut fake);
    assert_eq!(fake.take(), [Did::CaptureScreen], "fallback 2: a short summary of the screen");
    m.on_event(TrialEvent::ScreenCaptured("root@box:/app# ls\nfile".into()), &mut fake);
    assert_eq!(fake.take(), [Did::ShortSummary]);
    assert!(fake.last_request.as_ref().unwrap().messages[0].content.contains("root@box:/app# ls"));
    m.on_event(TrialEvent::ShortSummaryReplied(failed_call(LlmError::Transient("down".into()))), &mut fake);
    assert_eq!(fake.take(), [Did::CaptureScreen], "fallback 3 captures the screen again");
    m.on_event(TrialEvent::ScreenCaptured("root@box:/app# later".into()), &mut fake);
    assert_eq!(fake.take(), [Did::Query], "fallback 3: the instruction and the fresh screen");
    assert!(fake.last_request.as_ref().unwrap().messages.last().unwrap().content.contains("later"));
    // The call after the fallbacks fails too: the stand-in reply keeps the run going.
    m.on_event(TrialEvent::ModelReplied(failed_call(LlmError::Transient("down".into()))), &mut fake);
    assert_eq!(fake.take(), [Did::CheckTerminal]);
    m.on_cancel(&mut fake);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, _, _) = fake.finished().unwrap();
    let agent = result.agent_result.as_ref().unwrap();
    assert_eq!(agent.n_input_tokens, Some(100 + 500), "the finished subagent call is in the totals");
    let metadata = agent.metadata.as_ref().unwrap();
    assert_eq!(metadata["llm_retries"], 1 + 2);
    assert_eq!(metadata["summarization_count"], 1);
    // Main call, summary call, and the failed ones are not timed.
    assert_eq!(metadata["api_request_times_msec"].as_array().unwrap().len(), 2);
    assert!(fake.file_named("trajectory.summarization-1-questions.json").is_none());
}

#[test]
fn steps_released_after_their_write_come_back_for_a_summary_and_the_final_file() {
    let mut fake = Fake::default();
    let mut m = querying(&mut fake);
    // One exchange, written (and released from memory) at its observation; then an overflow.
    m.on_event(reply(RUN), &mut fake);
    m.on_event(TrialEvent::KeysSent { result: Ok(()), took: Duration::ZERO }, &mut fake);
    m.on_event(TrialEvent::WaitOver, &mut fake);
    m.on_event(TrialEvent::Observed { result: Ok("the first output".into()), took: Duration::ZERO }, &mut fake);
    let written = fake.file_named("trajectory.json").expect("written at the first observation").clone();
    assert!(written.contains("the first output"));
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    fake.take();
    m.on_event(TrialEvent::ModelReplied(failed_call(LlmError::ContextLengthExceeded("too long".into()))), &mut fake);
    assert_eq!(fake.take(), [Did::Summarize(1)]);
    let done = SummarizerEvent::CallDone { which: Subagent::Summary, call: call("SUMMARY", 500) };
    m.on_event(TrialEvent::Summarizer(done), &mut fake);
    // The summary's file copies the first steps with their text, read back from the file.
    let summary: serde_json::Value =
        serde_json::from_str(fake.file_named("trajectory.summarization-1-summary.json").unwrap()).unwrap();
    let copied = summary["steps"].as_array().unwrap();
    assert!(copied[0]["message"].as_str().unwrap().contains("hello.txt"), "{:?}", copied[0]);
    assert_eq!(copied[0]["is_copied_context"], true);
    assert_eq!(
        copied[0]["message"],
        serde_json::from_str::<serde_json::Value>(&written).unwrap()["steps"][0]["message"]
    );
    m.on_cancel(&mut fake);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    // The final file still holds the released steps' text, byte for byte as first written.
    let last = fake.file_named("trajectory.json").unwrap();
    let steps_of = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap()["steps"].clone();
    let (before, after) = (steps_of(&written), steps_of(last));
    assert_eq!(before.as_array().unwrap()[..], after.as_array().unwrap()[..2]);
    let (result, _, _) = fake.finished().unwrap();
    assert!(result.warnings.iter().all(|w| !w.contains("read back")), "{:?}", result.warnings);
}

#[test]
fn a_result_that_cannot_be_written_is_reported_not_crashed() {
    let mut fake = Fake { failing: Some("result.json"), ..Fake::default() };
    let mut m = machine("  - name: nop\n");
    m.start(&mut fake);
    m.on_event(provisioned(&m), &mut fake);
    m.on_event(
        TrialEvent::Verified {
            notes: Vec::new(),
            processes: None,
            rewards: Ok(BTreeMap::from([("reward".to_string(), 1.0)])),
        },
        &mut fake,
    );
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, error, written) = fake.finished().expect("reported all the same");
    assert_eq!((result.reward(), error, written), (Some(1.0), None, false));
    assert_eq!(fake.take().last(), Some(&Did::Stop));
}

#[test]
fn provisioning_ends_in_an_engine_outage_a_recorded_error_or_a_prompt_cancel() {
    let outcome = |stopped: Stopped| {
        TrialEvent::Provisioned(Box::new(Provisioned {
            trial: None,
            checksum: None,
            container: None,
            stopped: Some(stopped),
            host: None,
            notes: Vec::new(),
        }))
    };
    let build = || TrialError::new(TrialErrorKind::EnvironmentBuild, "the engine is gone");
    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    m.on_event(outcome(Stopped::EngineDown(build())), &mut fake);
    assert!(matches!(&fake.reports[..], [.., TrialReport::EngineUnavailable { .. }]));
    assert!(fake.finished().is_none(), "it goes back to the queue without a result");

    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    m.on_event(outcome(Stopped::Failed(build())), &mut fake);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    assert_eq!(fake.finished().unwrap().1, Some(TrialErrorKind::EnvironmentBuild));

    // A swarm node lost under the container being set up: lost, restarted by the Supervisor.
    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    let upload = TrialError::new(TrialErrorKind::EnvironmentStart, "connection refused");
    m.on_event(outcome(Stopped::Lost(upload)), &mut fake);
    assert!(matches!(&fake.reports[..], [.., TrialReport::Lost { .. }]));
    assert!(fake.finished().is_none(), "it runs again without a result");

    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    fake.take();
    m.on_cancel(&mut fake);
    assert_eq!(fake.take(), [Did::AbortWork, Did::Invalidate, Did::Teardown { download_agent_logs: true }]);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    assert_eq!(fake.finished().unwrap().1, Some(TrialErrorKind::Cancelled));
}

#[test]
fn an_oracle_runs_the_solution_and_an_agent_error_skips_verification() {
    let mut fake = Fake::default();
    let mut m = machine("  - name: oracle\n");
    m.start(&mut fake);
    assert_eq!(fake.take(), [Did::Provision { needs_solution: true }]);
    m.on_event(provisioned(&m), &mut fake);
    assert_eq!(fake.take(), [Did::RunOracle, Did::Deadline]);
    let error = TrialError::new(TrialErrorKind::Runtime, "exec failed");
    m.on_event(TrialEvent::AgentRan(Some(error)), &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::CheckContainer { settle: true }]);
    m.on_event(TrialEvent::ContainerChecked(ContainerCheck::Alive), &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::Teardown { download_agent_logs: true }], "no verification");
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, error, _) = fake.finished().unwrap();
    assert_eq!(error, Some(TrialErrorKind::Runtime));
    assert!(result.agent_result.is_some() && result.verifier_result.is_none());
    assert!(result.warnings.iter().any(|w| w.contains("not enforced")), "provisioning's notes reach the result");
}

/// A three-step task in a temporary directory; step `two` gates on `min_reward`.
fn multi_step_task(strategy: &str) -> (tempfile::TempDir, terminus_config::Task) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("steps-task");
    let toml = format!(
        "{strategy}\n[agent]\ntimeout_sec = 30.0\n[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\nmin_reward = 1.0\n[steps.agent]\ntimeout_sec = 5.0\n[[steps]]\nname = \"three\"\n"
    );
    std::fs::create_dir_all(dir.join("environment")).unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("tests/test.sh"), "#!/bin/bash\n").unwrap();
    for step in ["one", "two", "three"] {
        std::fs::create_dir_all(dir.join("steps").join(step)).unwrap();
        std::fs::write(dir.join("steps").join(step).join("instruction.md"), format!("Do {step}.\n")).unwrap();
    }
    let task = terminus_config::Task::load(&dir).unwrap();
    (tmp, task)
}

fn provisioned_with(m: &TrialMachine, task: terminus_config::Task) -> TrialEvent {
    TrialEvent::Provisioned(Box::new(Provisioned {
        trial: Some(resolved(m, task)),
        checksum: Some("sum".into()),
        container: None,
        stopped: None,
        host: None,
        notes: Vec::new(),
    }))
}

fn verdict(reward: f64) -> TrialEvent {
    TrialEvent::Verified {
        notes: Vec::new(),
        processes: None,
        rewards: Ok(BTreeMap::from([("reward".to_string(), reward)])),
    }
}

fn prepared() -> TrialEvent {
    TrialEvent::StepPrepared { result: Ok(()), notes: Vec::new() }
}

#[test]
fn a_multi_step_task_runs_its_steps_in_turn_and_a_missed_min_reward_skips_the_rest() {
    let (_tmp, task) = multi_step_task("");
    let mut fake = Fake::default();
    let mut m = machine("  - name: oracle\n");
    m.start(&mut fake);
    fake.take();
    m.on_event(provisioned_with(&m, task), &mut fake);
    assert_eq!(fake.take(), [Did::PrepareStep("one".into())]);
    m.on_event(prepared(), &mut fake);
    assert_eq!(fake.take(), [Did::RunOracle, Did::Deadline]);
    m.on_event(TrialEvent::AgentRan(None), &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::VerifyStep { name: "one".into(), more: true }]);
    m.on_event(verdict(1.0), &mut fake);
    assert_eq!(fake.take(), [Did::PrepareStep("two".into())], "a passed step leads to the next");
    // A deadline of step one, arriving late, is dropped by the shell (its generation is gone);
    // here the stage alone shows that it is not this step's.
    m.on_deadline(&mut fake);
    assert!(fake.take().is_empty(), "no agent runs while a step is set up");
    m.on_event(prepared(), &mut fake);
    assert_eq!(fake.take(), [Did::RunOracle, Did::Deadline]);
    m.on_event(TrialEvent::AgentRan(None), &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::VerifyStep { name: "two".into(), more: true }]);
    m.on_event(verdict(0.0), &mut fake);
    assert_eq!(
        fake.take(),
        [Did::Invalidate, Did::Teardown { download_agent_logs: true }],
        "step two misses its min_reward: step three is skipped"
    );
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, error, _) = fake.finished().unwrap();
    assert_eq!(error, None);
    let steps = result.step_results.as_ref().expect("per-step results");
    let names: Vec<&str> = steps.iter().map(|s| s.step_name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);
    assert_eq!(result.reward(), Some(0.5), "the mean of the steps' rewards");
    assert!(result.agent_result.is_none() && result.agent_execution.is_none(), "agent results are per step");
    assert!(steps.iter().all(|s| s.agent_execution.is_some() && s.verifier.is_some()));
    let json = fake.file_named("result.json").unwrap();
    assert!(json.contains("\"step_results\""));
}

#[test]
fn a_step_error_is_the_steps_and_ends_the_run_while_a_timeout_is_still_graded() {
    let (_tmp, task) = multi_step_task("multi_step_reward_strategy = \"final\"");
    let mut fake = Fake::default();
    let mut m = machine("  - name: oracle\n");
    m.start(&mut fake);
    m.on_event(provisioned_with(&m, task), &mut fake);
    m.on_event(prepared(), &mut fake);
    // Step one times out: graded anyway, and the run goes on (its verdict exists).
    m.on_deadline(&mut fake);
    fake.take();
    m.on_event(verdict(1.0), &mut fake);
    assert_eq!(fake.take(), [Did::PrepareStep("two".into())]);
    // Step two's set-up fails: no verdict, so the run ends there.
    let error = TrialError::new(TrialErrorKind::Healthcheck, "step `two`: the healthcheck failed");
    m.on_event(TrialEvent::StepPrepared { result: Err(error), notes: Vec::new() }, &mut fake);
    assert_eq!(fake.take(), [Did::Invalidate, Did::Teardown { download_agent_logs: true }]);
    m.on_event(TrialEvent::TornDown { notes: Vec::new() }, &mut fake);
    let (result, error, _) = fake.finished().unwrap();
    assert!(result.exception_info.is_none(), "step errors are recorded on the steps");
    assert_eq!(error, Some(TrialErrorKind::AgentTimeout), "the first recorded error decides retries");
    let steps = result.step_results.as_ref().unwrap();
    assert_eq!(steps[0].exception_info.as_ref().unwrap().exception_type, "AgentTimeoutError");
    assert_eq!(steps[1].exception_info.as_ref().unwrap().exception_type, "HealthcheckError");
    assert_eq!(result.reward(), None, "`final`: the last step's verdict, which step two lacks");
}

#[test]
fn terminus_2_begins_a_fresh_chat_on_the_same_terminal_for_each_step() {
    let (_tmp, task) = multi_step_task("");
    let mut fake = Fake::default();
    let mut m = machine("");
    m.start(&mut fake);
    m.on_event(provisioned_with(&m, task), &mut fake);
    m.on_event(prepared(), &mut fake);
    assert_eq!(
        fake.take(),
        [Did::Provision { needs_solution: false }, Did::PrepareStep("one".into()), Did::StartTerminal]
    );
    let start = TerminalStart { recording_started: None, screen: "root@box:/app# ".into(), skills: Vec::new() };
    m.on_event(TrialEvent::TerminalStarted(Ok(start)), &mut fake);
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    assert_eq!(fake.take(), [Did::CheckTerminal, Did::Deadline, Did::Query]);
    assert!(fake.last_request.as_ref().unwrap().messages[0].content.contains("Do one."));
    let done = r#"{"analysis": "a", "plan": "p", "commands": [], "task_complete": true}"#;
    // Done, and done again when asked to confirm (each reply's empty command list is observed).
    let observed = || TrialEvent::Observed { result: Ok("root@box:/app# ".into()), took: Duration::ZERO };
    m.on_event(reply(done), &mut fake);
    m.on_event(observed(), &mut fake);
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    m.on_event(reply(done), &mut fake);
    m.on_event(observed(), &mut fake);
    assert_eq!(fake.take().last(), Some(&Did::VerifyStep { name: "one".into(), more: true }));
    m.on_event(verdict(1.0), &mut fake);
    m.on_event(prepared(), &mut fake);
    assert_eq!(
        fake.take(),
        [Did::PrepareStep("two".into()), Did::Observe],
        "the terminal is up: the step reads what it shows instead of starting another"
    );
    let screen = TrialEvent::Observed { result: Ok("root@box:/app# ".into()), took: Duration::ZERO };
    m.on_event(screen, &mut fake);
    m.on_event(TrialEvent::TerminalChecked { alive: true }, &mut fake);
    let did = fake.take();
    assert!(did.contains(&Did::Deadline) && did.ends_with(&[Did::Query]), "{did:?}");
    let request = fake.last_request.as_ref().unwrap();
    assert_eq!(request.messages.len(), 1, "a fresh chat");
    assert!(request.messages[0].content.contains("Do two."));
    let two = fake.files.keys().find(|p| p.ends_with("steps/two/agent/episode-0/prompt.txt"));
    assert!(two.is_some(), "step two's files are under steps/two/: {:?}", fake.files.keys());
}
