//! The Terminus 2 driver: the pure loop ([`terminus_agent::AgentLoop`]) performed through the
//! trial's effects — model calls, keystrokes, waits for the terminal, summarization as a side
//! actor — with the trajectory and episode logs written as it goes.

use super::cx::{AgentTurn, Cx, Step};
use crate::protocol::SummarizerEvent;
use crate::tmux_session::TmuxError;
use crate::trial::effects::{TerminalSetup, TerminalStart, TrialEvent};
use crate::trial::record::{Timings, msec};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use terminus_agent::prompts::{self, Format};
use terminus_agent::summarize::{SummaryError, SummaryOutcome};
use terminus_agent::trajectory::Trajectory;
use terminus_agent::{Action, AgentLoop, Command, Finish, LoopSettings, ModelTurn, ResponseLog};
use terminus_config::trial::ResolvedTrial;
use terminus_config::{AgentSpec, Task, Terminus2Options};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::{ProgressUsage, TrialPhase};
use terminus_core::ids::TrialName;
use terminus_core::layout::names;
use terminus_core::result::AgentContext;
use terminus_sandbox::tmux::PaneSize;

/// The trajectory is rewritten after an episode only if its last version is older than this:
/// a rewrite costs the whole history, so fast episodes must not pay it each time. Readers of a
/// running trial see it at most this stale; the last version (the agent's end) is always written.
pub(super) const TRAJECTORY_INTERVAL: Duration = Duration::from_secs(2);

/// How often `early_return` looks at a terminal that looks idle (to confirm it)…
pub(super) const IDLE_PROBE_INTERVAL: Duration = Duration::from_millis(50);

/// … and at one still busy. Probes also back off to twice their own duration, so a loaded
/// machine (hundreds of trials on two cores) is not made busier by them.
pub(super) const BUSY_PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// Consecutive idle probes with an unchanged screen that end a wait early.
pub(super) const IDLE_STABLE_PROBES: u32 = 2;

/// Terminus 2: the pure loop (which holds the agent's registers) and what performing its
/// actions needs.
pub struct Terminus2 {
    pub(super) opts: Terminus2Options,
    pub(super) model_name: String,
    pub(super) state: T2State,
    pub(super) timings: Timings,
    /// Retries of this trial's model calls, summarization included.
    pub(super) llm_retries: u32,
    /// The instruction of the run under way.
    pub(super) instruction: String,
    /// When the terminal's recording began (markers of every step count from it).
    pub(super) recording_started: Option<Instant>,
    /// The markers of the steps before this one (their loops are gone).
    pub(super) past_markers: Vec<(f64, String)>,
    /// The skills found when the terminal started; a later step's first prompt lists them too.
    pub(super) skills: Vec<prompts::SkillFile>,
}

pub(super) enum T2State {
    NotStarted,
    /// Waiting for the TmuxSession's set-up and first screen.
    StartingTerminal,
    /// A later step: waiting for what the terminal shows now, for its first prompt.
    Resuming,
    Running(Box<Running>),
}

pub(super) struct Running {
    pub(super) agent_loop: AgentLoop,
    pub(super) episode: u64,
    /// The command whose keys are being sent (its wait starts when they are).
    pub(super) command: Option<Command>,
    /// With `early_return`: the wait being watched by idle probes.
    pub(super) wait: Option<IdleWait>,
    /// When the trajectory was last written after an episode.
    pub(super) trajectory_written: Option<Instant>,
    /// What of the current segment's file is on disk.
    pub(super) trajectory_file: TrajectoryFile,
}

/// A trajectory file written step by step: the steps already on disk are not written again,
/// only the new ones and the tail after them (the file is whole JSON after each write). Steps on
/// disk may be released from memory ([`AgentLoop::release_written`]): their text is then read
/// back from here when the file is rewritten or a summarization copies them.
#[derive(Default)]
pub(super) struct TrajectoryFile {
    /// The segment file on disk, its head, and where each of its steps ends.
    file: String,
    head: String,
    step_ends: Vec<u64>,
}

impl TrajectoryFile {
    pub(super) fn steps_end(&self) -> u64 {
        self.step_ends.last().copied().unwrap_or(self.head.len() as u64)
    }

    /// Writes `steps` (the first `released` of them without bodies: on disk here already)
    /// under `frame` to `file`.
    pub(super) fn write(
        &mut self,
        cx: &mut Cx<'_>,
        file: &str,
        frame: &Trajectory,
        steps: &[terminus_agent::trajectory::Step],
        released: usize,
        durable: bool,
    ) {
        let (head, tail) = frame.frame_json();
        let path = cx.dir.agent_file(file);
        let same_file = self.file == file && steps.len() >= self.step_ends.len() && released <= self.step_ends.len();
        if same_file && self.head == head {
            // The usual case: the new steps and the tail after the ones on disk.
            let offset = self.steps_end();
            let (mut bytes, mut ends) = (String::new(), Vec::new());
            for (idx, step) in steps.iter().enumerate().skip(self.step_ends.len()) {
                bytes.push_str(Trajectory::step_separator(idx));
                bytes.push_str(&Trajectory::step_json(step));
                ends.push(offset + bytes.len() as u64);
            }
            bytes.push_str(Trajectory::steps_close(steps.len()));
            bytes.push_str(&tail);
            if !cx.may_write(bytes.len()) {
                return;
            }
            match cx.effects.write_from(&path, offset, bytes.as_bytes(), durable) {
                Ok(()) => self.step_ends.extend(ends),
                // What is before `offset` is untouched: the next write starts there again.
                Err(e) => tracing::warn!(trial = %cx.setup.name, file, error = %e, "could not write a trajectory file"),
            }
            return;
        }
        // Written anew: another file, another head, or fewer steps. Released steps take their
        // text from the file as it is (their bytes do not depend on the head).
        let mut bytes = head.clone();
        let mut ends = Vec::with_capacity(steps.len());
        if released > 0 {
            if !same_file {
                tracing::error!(trial = %cx.setup.name, file, "released steps are not in this trajectory file");
            }
            let start = self.head.len() as u64;
            let end = self.step_ends.get(released.wrapping_sub(1)).copied().unwrap_or(start);
            match cx.effects.read_range(&path, start, end) {
                Ok(old) => {
                    let shift = head.len() as i64 - start as i64;
                    bytes.push_str(&String::from_utf8_lossy(&old));
                    ends.extend(self.step_ends[..released].iter().map(|e| (*e as i64 + shift) as u64));
                }
                Err(e) => {
                    // Nothing better than the frames is left: they keep the file valid JSON.
                    tracing::error!(trial = %cx.setup.name, file, error = %e, "could not read back a trajectory's steps");
                    cx.record
                        .result
                        .warnings
                        .push(format!("{file}: the text of {released} steps could not be read back ({e})"));
                    for (idx, step) in steps[..released].iter().enumerate() {
                        bytes.push_str(Trajectory::step_separator(idx));
                        bytes.push_str(&Trajectory::step_json(step));
                        ends.push(bytes.len() as u64);
                    }
                }
            }
        }
        for (idx, step) in steps.iter().enumerate().skip(released) {
            bytes.push_str(Trajectory::step_separator(idx));
            bytes.push_str(&Trajectory::step_json(step));
            ends.push(bytes.len() as u64);
        }
        bytes.push_str(Trajectory::steps_close(steps.len()));
        bytes.push_str(&tail);
        if !cx.may_write(bytes.len()) {
            return;
        }
        // A rewrite of a file holding released steps must not lose them if it fails halfway:
        // it replaces the file whole.
        let written = if released > 0 {
            cx.effects.replace_file(&path, bytes.as_bytes())
        } else {
            cx.effects.write_from(&path, 0, bytes.as_bytes(), durable)
        };
        match written {
            Ok(()) => *self = TrajectoryFile { file: file.to_string(), head, step_ends: ends },
            Err(e) => {
                tracing::warn!(trial = %cx.setup.name, file, error = %e, "could not write a trajectory file");
                if released == 0 {
                    // What is on disk is unknown: the next write starts the file anew.
                    *self = TrajectoryFile::default();
                }
            }
        }
    }

    /// The first `n` steps of the file as written (for a summarization's copies).
    pub(super) fn read_steps(
        &self,
        cx: &mut Cx<'_>,
        n: usize,
    ) -> Result<Vec<terminus_agent::trajectory::Step>, String> {
        let Some(&end) = n.checked_sub(1).and_then(|last| self.step_ends.get(last)) else {
            return Err(format!("{n} steps asked, {} on disk", self.step_ends.len()));
        };
        let path = cx.dir.agent_file(&self.file);
        let bytes = cx.effects.read_range(&path, self.head.len() as u64, end).map_err(|e| e.to_string())?;
        let mut list = Vec::with_capacity(bytes.len() + 2);
        list.push(b'[');
        list.extend_from_slice(&bytes);
        list.push(b']');
        serde_json::from_slice(&list).map_err(|e| format!("{}: {e}", self.file))
    }
}

pub(super) struct IdleWait {
    deadline: Instant,
    last_screen: Option<String>,
    stable: u32,
}

impl Terminus2 {
    pub(super) fn new(opts: &Terminus2Options, agent: &AgentSpec) -> Terminus2 {
        Terminus2 {
            opts: opts.clone(),
            model_name: agent.model_name.clone().unwrap_or_default(),
            state: T2State::NotStarted,
            timings: Timings::default(),
            llm_retries: 0,
            instruction: String::new(),
            recording_started: None,
            skills: Vec::new(),
            past_markers: Vec::new(),
        }
    }

    pub(super) fn running(&self) -> Option<&Running> {
        match &self.state {
            T2State::Running(running) => Some(running),
            T2State::NotStarted | T2State::StartingTerminal | T2State::Resuming => None,
        }
    }

    pub(super) fn usage(&self) -> Option<ProgressUsage> {
        self.running().map(|r| {
            let totals = r.agent_loop.final_totals();
            ProgressUsage {
                input_tokens: totals.input_tokens,
                output_tokens: totals.output_tokens,
                cost_usd: totals.cost_usd,
            }
        })
    }

    pub(super) fn start(&mut self, trial: &ResolvedTrial, turn: AgentTurn, cx: &mut Cx<'_>) -> Step {
        let task = &trial.task;
        self.instruction = turn.instruction;
        if let T2State::Running(running) = &self.state {
            // A later step: the terminal is up, its network set by the step's preparation.
            self.past_markers.extend(running.agent_loop.asciinema_markers().iter().cloned());
            // Each step reports its own run (`steps[i].agent_result`), as Harbor's per-run state.
            self.timings = Timings::default();
            self.llm_retries = 0;
            self.state = T2State::Resuming;
            cx.effects.observe();
            return Step::Running;
        }
        let size = match PaneSize::new(self.opts.pane_width as i64, self.opts.pane_height as i64) {
            Ok(size) => size,
            Err(e) => return Step::Finished(Some(TrialError::new(TrialErrorKind::InvalidValue, e))),
        };
        self.state = T2State::StartingTerminal;
        // The proxy's variables for an allowlisted agent phase; the agent's own `env` wins. The
        // terminal lives through every step of a multi-step task: its shell keeps these.
        let mut extra_env: BTreeMap<String, String> = turn
            .network
            .proxy_env()
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        extra_env.extend(cx.setup.agent.env.clone());
        // The job's skills go into the task's skills directory, else a default one, as
        // Harbor's trial puts them (which refuses a relative directory for them).
        let injected = &cx.setup.agent.skills;
        let skills_dir = match &task.config.environment.skills_dir {
            Some(dir) if !injected.is_empty() && !dir.starts_with('/') => {
                let message = format!(
                    "the job's agent skills need the task's environment.skills_dir to be absolute; got {dir:?}"
                );
                return Step::Finished(Some(TrialError::new(TrialErrorKind::InvalidValue, message)));
            }
            Some(dir) => Some(dir.clone()),
            None if !injected.is_empty() => Some(terminus_config::skills::DEFAULT_SKILLS_DIR.to_string()),
            None => None,
        };
        cx.effects.start_terminal(TerminalSetup {
            user: turn.user,
            size,
            extra_env,
            record: self.opts.record_terminal_session,
            reference: self.opts.reference_view,
            limit: trial.limits.agent_setup,
            network: turn.network,
            skills_dir,
            inject_skills: injected.clone(),
        });
        Step::Running
    }

    /// The loop's settings. The session id is the user's, else `<trial name>__agent` as the
    /// reference's trial names its agent's session (subagent ids derive from it).
    pub(super) fn settings(&self, trial_name: &str) -> LoopSettings {
        let opts = &self.opts;
        let model_info = opts.model_info(&self.model_name);
        LoopSettings {
            model_name: self.model_name.clone(),
            temperature: opts.temperature,
            max_turns: opts.max_turns,
            llm_call_kwargs: opts.llm_call_kwargs.clone(),
            llm_kwargs: opts.llm_kwargs.clone(),
            texts: opts.texts.clone(),
            reference: opts.reference_view,
            session_id: opts.session_id.clone().unwrap_or_else(|| format!("{trial_name}__agent")),
            send_session_id: opts.session_id.is_some(),
            session_id_headers: opts.session_id_headers.clone(),
            format: Format::from_name(&opts.parser_name),
            raw_content: opts.raw_content,
            linear_history: opts.linear_history,
            atif: opts.atif,
            interleaved_thinking: opts.interleaved_thinking,
            store_all_messages: opts.store_all_messages,
            enable_summarize: opts.enable_summarize,
            proactive_summarization_threshold: opts.proactive_summarization_threshold,
            context_limit: model_info.context_limit(),
            output_limit: model_info.max_output_tokens,
            max_cost_usd: opts.max_cost_usd,
            max_llm_calls: opts.max_llm_calls,
        }
    }

    pub(super) fn on_event(&mut self, event: TrialEvent, task: &Task, cx: &mut Cx<'_>) -> Step {
        if let TrialEvent::TerminalStarted(started) = event {
            if !matches!(self.state, T2State::StartingTerminal) {
                return Step::Running;
            }
            return match started {
                Ok(start) => self.terminal_up(start, task, cx),
                Err(error) => Step::Finished(Some(error)),
            };
        }
        if matches!(self.state, T2State::Resuming) {
            return match event {
                TrialEvent::Observed { result: Ok(screen), .. } => {
                    let skills = self.skills.clone();
                    let start = TerminalStart { recording_started: self.recording_started, screen, skills };
                    self.terminal_up(start, task, cx)
                }
                TrialEvent::Observed { result: Err(e), .. } => Step::Finished(Some(tmux_error("capture the pane", e))),
                _ => Step::Running,
            };
        }
        let T2State::Running(running) = &mut self.state else { return Step::Running };
        let setup = cx.setup;
        let name = &setup.name;
        let action = match event {
            TrialEvent::TerminalChecked { alive } => {
                let action = running.agent_loop.on_terminal_checked(alive);
                if !matches!(action, Action::Finish(_)) {
                    let episode = Some(running.episode as u32);
                    let usage = Some(usage_of(&running.agent_loop));
                    cx.progress(TrialPhase::RunningAgent, episode, usage);
                }
                action
            }
            TrialEvent::ModelReplied(call) => {
                self.llm_retries += call.retries;
                if let Ok(response) = &call.result {
                    note_dropped_params(cx, &self.model_name, &response.dropped_params);
                }
                let ModelTurn { action, log, replied, note } =
                    running.agent_loop.on_model_result(call.result, call.elapsed_msec);
                if let Some(note) = note {
                    tracing::warn!(trial = %name, "{note}");
                }
                if let Some(log) = log {
                    write_response_log(cx, log);
                }
                if replied {
                    self.timings.replied();
                }
                write_segments(running, cx);
                action
            }
            TrialEvent::Summarizer(SummarizerEvent::CallDone { which, call }) => {
                note_dropped_params(cx, &self.model_name, &call.response.dropped_params);
                if let Some((file, trajectory)) = running.agent_loop.on_subagent_call(which, *call) {
                    write_agent_file(cx, &file, &trajectory.to_json(), true);
                }
                return Step::Running;
            }
            TrialEvent::Summarizer(SummarizerEvent::Finished { result, retries }) => {
                self.llm_retries += retries;
                summary_finished(running, *result, name)
            }
            TrialEvent::ScreenCaptured(screen) => match running.agent_loop.on_screen_captured(&screen) {
                Some(action) => action,
                None => return Step::Running,
            },
            TrialEvent::ShortSummaryReplied(call) => {
                self.llm_retries += call.retries;
                if let Err(error) = &call.result {
                    tracing::error!(trial = %name, %error, "the short summary failed too; restarting from the instruction");
                }
                running.agent_loop.on_short_summary_result(call.result, call.elapsed_msec)
            }
            TrialEvent::KeysSent { result, took } => {
                self.timings.tmux_send_keys_msec.push(msec(took));
                if let Err(e) = result {
                    return Step::Finished(Some(tmux_error("send keys", e)));
                }
                let duration = running.command.take().map_or(0.0, |c| c.duration);
                start_wait(running, &mut self.timings, duration, self.opts.early_return, cx);
                return Step::Running;
            }
            TrialEvent::ProbeDue => {
                cx.effects.idle_probe();
                return Step::Running;
            }
            TrialEvent::IdleProbed { probe, took } => match idle_probed(running, &mut self.timings, probe, took, cx) {
                Some(action) => action,
                None => return Step::Running,
            },
            TrialEvent::WaitOver => {
                self.timings.end_wait();
                running.agent_loop.on_command_done()
            }
            TrialEvent::Observed { result, took } => {
                self.timings.tmux_capture_msec.push(msec(took));
                let output = match result {
                    Ok(output) => output,
                    Err(e) => return Step::Finished(Some(tmux_error("capture the pane", e))),
                };
                let action = running.agent_loop.observe(&output);
                if running.trajectory_written.is_none_or(|at| at.elapsed() >= TRAJECTORY_INTERVAL) {
                    write_trajectory(running, cx, false);
                    running.trajectory_written = Some(Instant::now());
                }
                action
            }
            _ => return Step::Running,
        };
        self.perform(action, cx)
    }

    /// The terminal is up: the loop starts with the instruction and the first screen.
    pub(super) fn terminal_up(&mut self, start: TerminalStart, task: &Task, cx: &mut Cx<'_>) -> Step {
        let mut agent_loop = AgentLoop::new(self.settings(&cx.setup.name.0));
        self.recording_started = start.recording_started;
        if let Some(at) = start.recording_started {
            agent_loop.set_recording_started(at);
        }
        let servers: Vec<prompts::McpServer<'_>> = cx
            .setup
            .agent
            .merged_mcp_servers(&task.config.environment.mcp_servers)
            .into_iter()
            .map(|s| prompts::McpServer {
                name: &s.name,
                transport: &s.transport,
                url: s.url.as_deref(),
                command: s.command.as_deref(),
                args: &s.args,
            })
            .collect();
        // The reference's order: the MCP servers, then the skills.
        let texts = &self.opts.texts;
        let extras = prompts::mcp_servers_section(texts, &servers) + &prompts::skills_section(texts, &start.skills);
        self.skills = start.skills;
        let action = agent_loop.begin_with(&self.instruction, &extras, &start.screen);
        cx.begin_execution(Some(usage_of(&agent_loop)));
        self.state = T2State::Running(Box::new(Running {
            agent_loop,
            episode: 0,
            command: None,
            wait: None,
            trajectory_written: None,
            trajectory_file: TrajectoryFile::default(),
        }));
        self.perform(action, cx)
    }

    /// Carries out what the loop decided.
    pub(super) fn perform(&mut self, action: Action, cx: &mut Cx<'_>) -> Step {
        let T2State::Running(running) = &mut self.state else { return Step::Running };
        let setup = cx.setup;
        let name = &setup.name;
        for warning in running.agent_loop.take_warnings() {
            tracing::warn!(trial = %name, "{warning}");
            if !cx.record.result.warnings.contains(&warning) {
                cx.record.result.warnings.push(warning);
            }
        }
        match action {
            Action::CheckTerminal { episode } => {
                running.episode = episode;
                cx.effects.check_terminal();
            }
            Action::Query => {
                self.timings.querying();
                let prompt_file = cx.dir.episode_dir(running.agent_loop.episode()).join(names::PROMPT_TXT);
                if cx.may_write(running.agent_loop.prompt().len()) {
                    cx.effects.write_episode_log(&prompt_file, running.agent_loop.prompt());
                }
                cx.effects.query(running.agent_loop.request());
            }
            Action::Summarize { purpose, job } => {
                // Summarizing is model time, not loop overhead.
                self.timings.reply_at = None;
                if purpose == terminus_agent::SummaryPurpose::Proactive {
                    tracing::info!(trial = %name, episode = running.episode, "context nearly full; summarizing proactively");
                }
                // Steps it copies that left memory come back from the segment file.
                let job = match job.bodies_on_disk {
                    0 => Some(job),
                    n => {
                        drop(job);
                        let bodies = running.trajectory_file.read_steps(cx, n);
                        running.agent_loop.restore_copied_bodies(bodies)
                    }
                };
                if let Some(job) = job {
                    cx.effects.summarize(job);
                }
            }
            Action::CaptureScreen => cx.effects.capture_screen(),
            Action::ShortSummary(request) => cx.effects.short_summary(request),
            Action::Execute(command) => {
                // The reference types an empty key too (a no-op for tmux); we only wait.
                if command.keystrokes.is_empty() && !self.opts.reference_view {
                    start_wait(running, &mut self.timings, command.duration, self.opts.early_return, cx);
                } else {
                    cx.effects.send_keys(vec![command.keystrokes.clone()]);
                    running.command = Some(command);
                }
            }
            Action::Observe => cx.effects.observe(),
            Action::Finish(finish) => {
                return Step::Finished(match finish {
                    Finish::Completed => None,
                    Finish::MaxTurns => {
                        tracing::info!(trial = %name, "max_turns reached");
                        None
                    }
                    Finish::SessionEnded => {
                        tracing::warn!(trial = %name, "the tmux session has ended; stopping the agent");
                        None
                    }
                    Finish::CostLimit => {
                        tracing::info!(trial = %name, limit = ?self.opts.max_cost_usd, "the trial's cost limit is reached; stopping the agent");
                        None
                    }
                    Finish::BudgetReached(why) => {
                        tracing::info!(trial = %name, "{why}; stopping the agent");
                        None
                    }
                    Finish::Failed(error) => Some(error),
                });
            }
        }
        Step::Running
    }

    pub(super) fn stop(&mut self, cx: &mut Cx<'_>) -> Option<AgentContext> {
        cx.effects.stop_summarizer();
        let T2State::Running(running) = &mut self.state else { return None };
        write_trajectory(running, cx, true);
        let agent_loop = &running.agent_loop;
        let totals = agent_loop.final_totals();
        let mut metadata = agent_loop.metadata();
        metadata.insert("llm_retries".into(), json!(self.llm_retries));
        metadata.insert("timings".into(), self.timings.to_json());
        if let Some(reason) = agent_loop.stop_reason() {
            metadata.insert("stop_reason".into(), json!(reason));
        }
        Some(AgentContext {
            n_input_tokens: Some(totals.input_tokens),
            n_cache_tokens: Some(totals.cache_tokens),
            n_output_tokens: Some(totals.output_tokens),
            cost_usd: (totals.cost_usd > 0.0).then_some(totals.cost_usd),
            rollout_details: Some(agent_loop.rollout_details()),
            metadata: Some(metadata),
        })
    }
}

/// The summarizer's result, taken by the loop; a failure is logged with what follows it.
fn summary_finished(running: &mut Running, result: Result<SummaryOutcome, SummaryError>, name: &TrialName) -> Action {
    let failure = result.as_ref().err().map(ToString::to_string);
    let action = running.agent_loop.on_summary_result(result);
    match (&failure, &action) {
        (None, _) => {
            let count = running.agent_loop.summarization_count();
            tracing::info!(trial = %name, count, "summarization handed over")
        }
        (Some(error), Action::CaptureScreen) => {
            tracing::error!(trial = %name, %error, "summarization after a context overflow failed; trying a short summary")
        }
        (Some(error), _) => tracing::error!(trial = %name, %error, "proactive summarization failed"),
    }
    action
}

/// An idle probe's answer during a command's wait: the wait goes on (the next probe is
/// scheduled, None) until the screen has been idle and unchanged long enough or the wait's
/// deadline passes; then the command is done. A failed probe is not fatal: the wait runs its
/// full duration.
fn idle_probed(
    running: &mut Running,
    timings: &mut Timings,
    probe: Result<(bool, String), TmuxError>,
    took: Duration,
    cx: &mut Cx<'_>,
) -> Option<Action> {
    let wait = running.wait.as_mut()?;
    let (idle, screen) = probe.unwrap_or((false, String::new()));
    wait.stable = if idle && wait.last_screen.as_deref() == Some(screen.as_str()) { wait.stable + 1 } else { 0 };
    let now = Instant::now();
    if wait.stable < IDLE_STABLE_PROBES && now < wait.deadline {
        let base = if idle { IDLE_PROBE_INTERVAL } else { BUSY_PROBE_INTERVAL };
        let next = base.max(took * 2).min(wait.deadline - now);
        wait.last_screen = Some(screen);
        cx.effects.after(next, TrialEvent::ProbeDue);
        return None;
    }
    running.wait = None;
    timings.end_wait();
    Some(running.agent_loop.on_command_done())
}

pub(super) fn usage_of(agent_loop: &AgentLoop) -> ProgressUsage {
    let totals = agent_loop.final_totals();
    ProgressUsage { input_tokens: totals.input_tokens, output_tokens: totals.output_tokens, cost_usd: totals.cost_usd }
}

/// Starts a command's wait: a timer, or with `early_return` idle probes that may end it sooner.
pub(super) fn start_wait(
    running: &mut Running,
    timings: &mut Timings,
    duration: f64,
    early_return: bool,
    cx: &mut Cx<'_>,
) {
    let wait = Duration::from_secs_f64(duration);
    timings.requested_wait_sec += duration;
    timings.wait_started = Some(Instant::now());
    if early_return && wait > IDLE_PROBE_INTERVAL {
        running.wait = Some(IdleWait { deadline: Instant::now() + wait, last_screen: None, stable: 0 });
        cx.effects.after(IDLE_PROBE_INTERVAL, TrialEvent::ProbeDue);
    } else {
        cx.effects.after(wait, TrialEvent::WaitOver);
    }
}

pub(super) fn tmux_error(what: &str, error: crate::tmux_session::TmuxError) -> TrialError {
    TrialError::new(TrialErrorKind::TmuxSession, format!("failed to {what}: {error}"))
}

/// `episode-N/response.txt`, and `debug.json` (redacted) when the provider kept it.
pub(super) fn write_response_log(cx: &mut Cx<'_>, log: ResponseLog) {
    let episode_dir = cx.dir.episode_dir(log.episode);
    if cx.may_write(log.response.len()) {
        cx.effects.write_episode_log(&episode_dir.join(names::RESPONSE_TXT), &log.response);
    }
    // Already redacted, made in the model call's task (see terminus-llm's `wire`).
    if let Some(debug) = log.debug.filter(|d| cx.may_write(d.len())) {
        cx.effects.write_episode_log(&episode_dir.join(names::DEBUG_JSON), &debug);
    }
}

/// Writes a trajectory file: `durable` for a segment's last version (fsynced); the versions
/// after each episode only replace the file (a trial cut short is run again, so what a power cut
/// could lose of them is never read).
pub(super) fn write_agent_file(cx: &mut Cx<'_>, file: &str, text: &str, durable: bool) {
    if !cx.may_write(text.len()) {
        return;
    }
    let path = cx.dir.agent_file(file);
    let written = if durable {
        cx.effects.write_atomic(&path, text.as_bytes())
    } else {
        cx.effects.replace_file(&path, text.as_bytes())
    };
    if let Err(e) = written {
        tracing::warn!(trial = %cx.setup.name, file, error = %e, "could not write a trajectory file");
    }
}

/// Writes the segments a linear-history split closed.
pub(super) fn write_segments(running: &mut Running, cx: &mut Cx<'_>) {
    for closed in running.agent_loop.take_finished_segments() {
        let trajectory = &closed.trajectory;
        running.trajectory_file.write(cx, &closed.file, trajectory, &trajectory.steps, closed.released, true);
    }
}

/// Writes the current trajectory segment (`final_totals`: with the subagents folded in).
pub(super) fn write_trajectory(running: &mut Running, cx: &mut Cx<'_>, final_totals: bool) {
    write_segments(running, cx);
    let frame = running.agent_loop.trajectory_frame(final_totals);
    let file = running.agent_loop.segment_file();
    let released = running.agent_loop.released();
    running.trajectory_file.write(cx, &file, &frame, running.agent_loop.steps(), released, final_totals);
    if running.trajectory_file.file == file {
        running.agent_loop.release_written(running.trajectory_file.step_ends.len());
    }
}

/// Names, once per trial, each request parameter the model's endpoint refused and that is no
/// longer sent (as LiteLLM's `drop_params` leaves out what a model does not take).
pub(super) fn note_dropped_params(cx: &mut Cx<'_>, model: &str, dropped: &[String]) {
    for param in dropped {
        let note = format!("the model `{model}` does not take the request parameter `{param}`: it is not sent");
        if !cx.record.result.warnings.contains(&note) {
            tracing::warn!(trial = %cx.setup.name, "{note}");
            cx.record.result.warnings.push(note);
        }
    }
}
