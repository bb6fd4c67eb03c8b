//! Live updates for the browser, pushed as server-sent events — no polling from the page.
//!
//! Two sources. In `terminus run --view` the Supervisor's [`RunEvent`]s (the same events the
//! progress bars draw) go through a [`LiveHub`]: each trial's phase, episode, tokens, cost,
//! model-call retries, whole-trial retries, restarts and stalls, as they happen. For a job that
//! another `terminus` process runs, the viewer sees only its files: a watcher stats them once a
//! second on the server and pushes `changed` when a trial starts or finishes, so the page
//! re-reads the job then and only then.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use terminus_core::events::{RunEvent, TrialPhase};
use terminus_core::layout::names;
use terminus_core::stats::{BudgetStatus, JobSummary};
use tokio::sync::broadcast;

/// One server-sent event: its name and its JSON data.
#[derive(Clone, Debug)]
pub struct LiveMessage {
    pub event: &'static str,
    pub data: String,
}

impl LiveMessage {
    fn new(event: &'static str, data: &impl Serialize) -> LiveMessage {
        LiveMessage { event, data: serde_json::to_string(data).unwrap_or_else(|_| "null".into()) }
    }
}

/// What a running trial is doing, as its row shows it.
#[derive(Clone, Debug, Serialize)]
pub struct TrialLive {
    pub trial: String,
    pub task: String,
    pub phase: &'static str,
    pub episode: Option<u32>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Model calls of this trial retried so far, and the last reason.
    pub model_retries: u32,
    pub last_retry: Option<String>,
    /// The whole trial failed and waits to run again.
    pub will_retry: Option<String>,
    pub restarts: u32,
    /// Nothing reported for the job's `stall_warning_sec`.
    pub stalled: bool,
    /// Held in the cluster's queue, and why (a swarm's scheduler).
    pub queued: Option<String>,
    pub finished: bool,
    pub reward: Option<f64>,
    pub error: Option<String>,
    #[serde(skip)]
    last_progress: Instant,
}

/// The job's figures, as the progress bar's summary line shows them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobLive {
    pub n_total: u64,
    pub n_finished: u64,
    pub n_errored: u64,
    pub n_cancelled: u64,
    pub mean_reward: Option<f64>,
    /// The headline mean with the other convention's beside it (see `Scores::describe`).
    pub score_text: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
    pub model_retries: u64,
    /// The job's budget and its spend (a job with `budget:`).
    pub budget: Option<BudgetStatus>,
    /// `running`, `engine_waiting`, `budget_reached`, `halted` or `finished`.
    pub state: &'static str,
    pub message: Option<String>,
}

struct State {
    trials: BTreeMap<String, TrialLive>,
    job: JobLive,
}

impl TrialLive {
    /// A trial first heard of at `now`, preparing.
    fn new(name: &str, task: Option<&str>, now: Instant) -> TrialLive {
        TrialLive {
            trial: name.to_string(),
            task: task.unwrap_or_default().to_string(),
            phase: TrialPhase::Preparing.label(),
            episode: None,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            model_retries: 0,
            last_retry: None,
            will_retry: None,
            restarts: 0,
            stalled: false,
            queued: None,
            finished: false,
            reward: None,
            error: None,
            last_progress: now,
        }
    }
}

impl State {
    /// Applies `change` to trial `name` (added if new), counts it as heard from at `now`, and
    /// returns its message.
    fn trial_changed(
        &mut self,
        name: &str,
        task: Option<&str>,
        now: Instant,
        change: impl FnOnce(&mut TrialLive),
    ) -> LiveMessage {
        let entry = self.trials.entry(name.to_string()).or_insert_with(|| TrialLive::new(name, task, now));
        change(entry);
        entry.last_progress = now;
        entry.stalled = false;
        LiveMessage::new("trial", entry)
    }

    /// Puts the job in `state` for `reason`; returns its message.
    fn job_in(&mut self, state: &'static str, reason: &str) -> LiveMessage {
        self.job.state = state;
        self.job.message = Some(reason.to_string());
        LiveMessage::new("job", &self.job)
    }

    /// Takes one event of the Supervisor's, received at `now`; returns the messages it makes.
    fn apply(&mut self, event: &RunEvent, now: Instant) -> Vec<LiveMessage> {
        let mut messages = Vec::new();
        match event {
            RunEvent::JobStarted { n_total, summary, .. } => {
                self.job.n_total = *n_total;
                apply_summary(&mut self.job, summary);
                messages.push(LiveMessage::new("job", &self.job));
            }
            RunEvent::TrialStarted { trial_name, task_name } => {
                messages.push(self.trial_changed(trial_name.as_str(), Some(task_name), now, |t| {
                    t.finished = false;
                    t.will_retry = None;
                    t.phase = TrialPhase::Preparing.label();
                }));
            }
            RunEvent::TrialProgress { trial_name, phase, episode, usage } => {
                messages.push(self.trial_changed(trial_name.as_str(), None, now, |t| {
                    t.phase = phase.label();
                    if episode.is_some() {
                        t.episode = *episode;
                    }
                    if let Some(usage) = usage {
                        t.input_tokens = usage.input_tokens;
                        t.output_tokens = usage.output_tokens;
                        t.cost_usd = usage.cost_usd;
                    }
                }));
            }
            RunEvent::TrialQueued { trial_name, reason } => {
                messages.push(self.trial_changed(trial_name.as_str(), None, now, |t| {
                    t.queued = reason.clone();
                    if reason.is_some() {
                        t.phase = "queued on the cluster";
                    }
                }));
            }
            RunEvent::TrialRetrying { trial_name, attempt, wait_sec, reason } => {
                let text = format!("model call retry {attempt} in {wait_sec:.1}s: {reason}");
                messages.push(self.trial_changed(trial_name.as_str(), None, now, |t| {
                    t.model_retries += 1;
                    t.last_retry = Some(text);
                }));
            }
            RunEvent::TrialWillRetry { trial_name, retry, wait_sec, reason } => {
                let text = format!("retry {retry} in {wait_sec:.0}s: {reason}");
                messages.push(self.trial_changed(trial_name.as_str(), None, now, |t| {
                    t.finished = true;
                    t.will_retry = Some(text);
                }));
            }
            RunEvent::TrialRestarting { trial_name, restart, reason } => {
                let text = format!("restart {restart}: {reason}");
                messages.push(self.trial_changed(trial_name.as_str(), None, now, |t| {
                    t.restarts = *restart;
                    t.will_retry = Some(text);
                }));
            }
            RunEvent::TrialFinished { trial_name, task_name, reward, error, summary } => {
                messages.push(self.trial_changed(trial_name.as_str(), Some(task_name), now, |t| {
                    t.finished = true;
                    t.reward = *reward;
                    t.error = error.clone();
                }));
                apply_summary(&mut self.job, summary);
                messages.push(LiveMessage::new(
                    "finished",
                    &serde_json::json!({"trial": trial_name.as_str(), "reward": reward, "error": error}),
                ));
                messages.push(LiveMessage::new("job", &self.job));
            }
            RunEvent::Admission { limit, running, why } => {
                self.job.message = Some(format!("admitting up to {limit} at once ({why}; {running} running)"));
                messages.push(LiveMessage::new("job", &self.job));
            }
            RunEvent::HostSaturated { reason, n_concurrent } => {
                self.job.message = Some(format!(
                    "host saturated ({reason}) at n_concurrent_trials {n_concurrent}: trials may run out of time"
                ));
                messages.push(LiveMessage::new("job", &self.job));
            }
            RunEvent::Controlled { change } => {
                self.job.message = Some(change.to_string());
                messages.push(LiveMessage::new("job", &self.job));
            }
            RunEvent::EngineWaiting { reason } => messages.push(self.job_in("engine_waiting", reason)),
            RunEvent::BudgetReached { reason } => messages.push(self.job_in("budget_reached", reason)),
            RunEvent::JobHalted { reason } => messages.push(self.job_in("halted", reason)),
            RunEvent::JobFinished { summary } => {
                apply_summary(&mut self.job, summary);
                if self.job.state != "halted" && self.job.state != "budget_reached" {
                    self.job.state = "finished";
                }
                messages.push(LiveMessage::new("job", &self.job));
            }
        }
        messages
    }
}

/// The live state of the job this process runs, and its subscribers.
pub struct LiveHub {
    job: String,
    /// How the page controls the job (installed once the job has started).
    controls: std::sync::OnceLock<Arc<dyn Controls>>,
    stall_after: Duration,
    state: Mutex<State>,
    tx: broadcast::Sender<LiveMessage>,
}

/// What answers the job page's live controls: the Supervisor of the job this process runs. The
/// viewer only passes requests on; it changes no file and no container itself.
pub trait Controls: Send + Sync {
    fn ask(
        &self,
        request: terminus_core::control::JobControl,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = terminus_core::control::ControlReply> + Send>>;
}

/// A snapshot and what follows it.
pub struct Subscription {
    pub snapshot: LiveMessage,
    pub rx: broadcast::Receiver<LiveMessage>,
}

impl LiveHub {
    /// The hub of job `job` (its directory's name); trials quiet for `stall_after` are flagged.
    pub fn new(job: &str, stall_after: Duration) -> Arc<LiveHub> {
        let (tx, _) = broadcast::channel(1024);
        let state = State { trials: BTreeMap::new(), job: JobLive { state: "running", ..JobLive::default() } };
        Arc::new(LiveHub {
            job: job.to_string(),
            controls: std::sync::OnceLock::new(),
            stall_after,
            state: Mutex::new(state),
            tx,
        })
    }

    pub fn job(&self) -> &str {
        &self.job
    }

    /// Lets the job page control the job through `controls` (once; later calls are ignored).
    pub fn install_controls(&self, controls: Arc<dyn Controls>) {
        let _ = self.controls.set(controls);
    }

    /// The job's controls, once installed.
    pub fn controls(&self) -> Option<Arc<dyn Controls>> {
        self.controls.get().cloned()
    }

    /// Whether `trial` is running in this process now.
    pub fn is_running(&self, trial: &str) -> bool {
        self.state.lock().expect("not poisoned").trials.get(trial).is_some_and(|t| !t.finished)
    }

    /// The live rows of the trials that have started.
    pub fn trials(&self) -> Vec<TrialLive> {
        self.state.lock().expect("not poisoned").trials.values().cloned().collect()
    }

    /// The current state, then every change.
    pub fn subscribe(&self) -> Subscription {
        let state = self.state.lock().expect("not poisoned");
        let snapshot = LiveMessage::new(
            "snapshot",
            &serde_json::json!({"trials": state.trials.values().collect::<Vec<_>>(), "job": &state.job}),
        );
        // Subscribed under the lock: nothing published between the snapshot and the receiver.
        Subscription { snapshot, rx: self.tx.subscribe() }
    }

    fn send(&self, message: LiveMessage) {
        // No subscriber is not an error: the page may not be open.
        let _ = self.tx.send(message);
    }

    /// Takes one event of the Supervisor's.
    pub fn publish(&self, event: &RunEvent) {
        let now = Instant::now();
        let mut state = self.state.lock().expect("not poisoned");
        let mut messages = state.apply(event, now);
        // Trials moving again end an engine wait: the job is running, not waiting, from here.
        let moving = matches!(
            event,
            RunEvent::TrialStarted { .. } | RunEvent::TrialProgress { .. } | RunEvent::TrialFinished { .. }
        );
        if moving && state.job.state == "engine_waiting" {
            state.job.state = "running";
            state.job.message = None;
            messages.push(LiveMessage::new("job", &state.job));
        }
        drop(state);
        for message in messages {
            self.send(message);
        }
    }

    /// Flags the trials quiet for longer than the stall limit (once each, until they report
    /// again). Run every few seconds by [`LiveHub::watch_stalls`].
    pub fn check_stalls(&self, now: Instant) {
        let mut state = self.state.lock().expect("not poisoned");
        let mut messages = Vec::new();
        for trial in state.trials.values_mut() {
            // A trial in the cluster's queue waits by design.
            if !trial.finished
                && !trial.stalled
                && trial.queued.is_none()
                && now.duration_since(trial.last_progress) >= self.stall_after
            {
                trial.stalled = true;
                messages.push(LiveMessage::new("trial", trial));
            }
        }
        drop(state);
        for message in messages {
            self.send(message);
        }
    }

    /// Checks for stalls every five seconds while the hub is alive.
    pub fn watch_stalls(self: &Arc<Self>) {
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                let Some(hub) = hub.upgrade() else { break };
                hub.check_stalls(Instant::now());
            }
        });
    }
}

fn apply_summary(job: &mut JobLive, summary: &JobSummary) {
    job.n_total = summary.n_total;
    job.n_finished = summary.n_finished;
    job.n_errored = summary.n_errored;
    job.n_cancelled = summary.n_cancelled;
    job.mean_reward = summary.mean_reward;
    job.score_text = summary.scores.as_ref().map(|s| s.describe(summary.score_convention));
    job.input_tokens = summary.n_input_tokens;
    job.output_tokens = summary.n_output_tokens;
    job.cost_usd = summary.cost_usd;
    job.model_retries = summary.n_model_retries;
    job.budget = summary.budget.clone();
}

/// What a job directory looks like from outside, cheaply: its result file's stamp and its trial
/// directories with whether each has a result.
pub fn fingerprint(job_dir: &std::path::Path) -> Vec<(String, Option<SystemTime>)> {
    let mut out: Vec<(String, Option<SystemTime>)> = std::fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| {
            let result = std::fs::metadata(e.path().join(names::RESULT_JSON)).and_then(|m| m.modified()).ok();
            (e.file_name().to_string_lossy().into_owned(), result)
        })
        .collect();
    out.push(("".into(), std::fs::metadata(job_dir.join(names::RESULT_JSON)).and_then(|m| m.modified()).ok()));
    out.sort();
    out
}

/// Watches a job another process runs: `changed` whenever its files change, until its lock is
/// released (then one last `changed` and `done`). Ends when the receiver is dropped.
pub fn watch_files(job_dir: PathBuf) -> tokio::sync::mpsc::Receiver<LiveMessage> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut last = None;
        loop {
            let dir = job_dir.clone();
            let (now, held) =
                tokio::task::spawn_blocking(move || (fingerprint(&dir), terminus_core::lock::JobLock::is_held(&dir)))
                    .await
                    .unwrap_or_default();
            if last.as_ref().is_some_and(|l| *l != now) && tx.send(LiveMessage::new("changed", &"files")).await.is_err()
            {
                break;
            }
            if !held {
                let _ = tx.send(LiveMessage::new("changed", &"stopped")).await;
                let _ = tx.send(LiveMessage::new("done", &"")).await;
                break;
            }
            last = Some(now);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = tx.closed() => break,
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_core::events::ProgressUsage;
    use terminus_core::ids::TrialName;

    #[test]
    fn events_become_trial_rows_and_stalls_are_flagged_once() {
        let hub = LiveHub::new("j", Duration::from_secs(60));
        let sub = hub.subscribe();
        let mut rx = sub.rx;
        let name = TrialName::with_suffix("hello", "abcdefg");
        hub.publish(&RunEvent::TrialStarted { trial_name: name.clone(), task_name: "hello".into() });
        hub.publish(&RunEvent::TrialProgress {
            trial_name: name.clone(),
            phase: TrialPhase::RunningAgent,
            episode: Some(3),
            usage: Some(ProgressUsage { input_tokens: 10, output_tokens: 2, cost_usd: 0.5 }),
        });
        let _started = rx.try_recv().unwrap();
        let progress = rx.try_recv().unwrap();
        assert_eq!(progress.event, "trial");
        let row: serde_json::Value = serde_json::from_str(&progress.data).unwrap();
        assert_eq!(row["phase"], "running agent");
        assert_eq!(row["episode"], 3);
        assert_eq!(row["input_tokens"], 10);
        assert!(hub.is_running("hello__abcdefg"));
        hub.check_stalls(Instant::now() + Duration::from_secs(61));
        let stalled: serde_json::Value = serde_json::from_str(&rx.try_recv().unwrap().data).unwrap();
        assert_eq!(stalled["stalled"], true);
        hub.check_stalls(Instant::now() + Duration::from_secs(120));
        assert!(rx.try_recv().is_err(), "flagged once");
        hub.publish(&RunEvent::TrialFinished {
            trial_name: name,
            task_name: "hello".into(),
            reward: Some(1.0),
            error: None,
            summary: Box::new(JobSummary { n_total: 2, n_finished: 1, ..JobSummary::default() }),
        });
        let events: Vec<&str> = std::iter::from_fn(|| rx.try_recv().ok()).map(|m| m.event).collect();
        assert_eq!(events, ["trial", "finished", "job"]);
        assert!(!hub.is_running("hello__abcdefg"));
        let snapshot: serde_json::Value = serde_json::from_str(&hub.subscribe().snapshot.data).unwrap();
        assert_eq!(snapshot["job"]["n_finished"], 1);
        assert_eq!(snapshot["trials"][0]["reward"], 1.0);
    }

    #[test]
    fn an_engine_wait_ends_when_trials_move_again() {
        let hub = LiveHub::new("j", Duration::from_secs(60));
        let mut rx = hub.subscribe().rx;
        let job_state = |rx: &mut broadcast::Receiver<LiveMessage>| -> Vec<String> {
            std::iter::from_fn(|| rx.try_recv().ok())
                .filter(|m| m.event == "job")
                .map(|m| {
                    serde_json::from_str::<serde_json::Value>(&m.data).unwrap()["state"].as_str().unwrap().to_string()
                })
                .collect()
        };
        hub.publish(&RunEvent::EngineWaiting { reason: "the engine is down".into() });
        assert_eq!(job_state(&mut rx), ["engine_waiting"]);
        let name = TrialName::with_suffix("hello", "abcdefg");
        hub.publish(&RunEvent::TrialStarted { trial_name: name, task_name: "hello".into() });
        assert_eq!(job_state(&mut rx), ["running"]);
        let snapshot: serde_json::Value = serde_json::from_str(&hub.subscribe().snapshot.data).unwrap();
        assert_eq!(snapshot["job"]["state"], "running");
        assert!(snapshot["job"]["message"].is_null());
    }
}
