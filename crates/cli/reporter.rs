//! What the user sees while a job runs: indicatif bars on a terminal — one overall bar (done/total,
//! errors, retries, mean reward, cost) and one line per running trial (phase, episode, tokens,
//! cost, retries or backoff, and a stall flag when it reports nothing for `stall_warning_sec`) —
//! and plain lines otherwise. Driven only by the Supervisor's events; every job figure it shows
//! (done, errors, mean reward, cost, the final tables) is the `JobSummary` those events carry,
//! computed in terminus-core from the same statistics as the job's `result.json`, so a resumed
//! job shows what its file says. At the end, a summary table.
//!
//! Log lines go to `job.log` in the job directory; warnings and errors also reach the terminal,
//! printed above the bars so they do not tear them.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use terminus_core::events::{ProgressUsage, RunEvent, TrialPhase};
use terminus_core::ids::TrialName;
use terminus_core::stats::{BudgetStatus, JobSummary, RewardCell, counted_text, score_text};
use tokio::sync::mpsc::UnboundedReceiver;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub struct Reporter {
    multi: Option<MultiProgress>,
    quiet: bool,
    stall_warning: Duration,
}

/// One running trial's line.
struct Line {
    bar: Option<ProgressBar>,
    text: String,
    last_update: Instant,
}

impl Reporter {
    pub fn new(quiet: bool, stall_warning: Duration) -> Reporter {
        let multi = std::io::stdout()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(10)));
        Reporter { multi, quiet, stall_warning }
    }

    /// Clears the bars before an early exit.
    pub fn abandon(&self) {
        if let Some(multi) = &self.multi {
            let _ = multi.clear();
        }
    }

    fn note(&self, overall: &Option<ProgressBar>, text: &str) {
        match overall {
            Some(bar) => bar.println(text),
            None => println!("{text}"),
        }
    }

    /// Consumes events until the job finishes; returns its summary.
    pub async fn run(self, mut events: UnboundedReceiver<RunEvent>) -> Option<JobSummary> {
        let mut board = Board::default();
        let mut stall_check = tokio::time::interval(Duration::from_secs(5));
        loop {
            let event = tokio::select! {
                event = events.recv() => match event { Some(event) => event, None => return None },
                _ = stall_check.tick() => {
                    self.flag_stalls(&board.lines);
                    continue;
                }
            };
            if let Some(summary) = self.show(&mut board, event) {
                return Some(summary);
            }
        }
    }

    /// Flags the trials that reported nothing for `stall_warning`: on their line, or in a plain
    /// line without bars.
    fn flag_stalls(&self, lines: &HashMap<TrialName, Line>) {
        for (name, line) in lines {
            let quiet_for = line.last_update.elapsed();
            if quiet_for >= self.stall_warning {
                let text = format!("⚠ stalled {}s · {}", quiet_for.as_secs(), line.text);
                match &line.bar {
                    Some(bar) => bar.set_message(text),
                    None => println!("{name}: no progress for {} s", quiet_for.as_secs()),
                }
            }
        }
    }

    /// Shows one event; returns the job's summary once it has finished.
    fn show(&self, board: &mut Board, event: RunEvent) -> Option<JobSummary> {
        match event {
            RunEvent::JobStarted { job_name, job_dir, n_total: total, n_already_done, summary } => {
                board.n_total = total;
                let resumed =
                    if n_already_done > 0 { format!(" ({n_already_done} already finished)") } else { String::new() };
                let heading = format!("job {job_name}: {total} trials{resumed}, results in {job_dir}");
                if let Some(bar) = self.open_overall(total, n_already_done, &summary, &heading) {
                    board.overall = Some(bar);
                }
            }
            RunEvent::TrialStarted { trial_name, task_name } => {
                let line = self.trial_line(&trial_name, &task_name);
                board.lines.insert(trial_name, line);
            }
            RunEvent::TrialProgress { trial_name, phase, episode, usage } => {
                let text = progress_text(&trial_name, phase, episode, usage);
                if let Some(line) = board.lines.get_mut(&trial_name) {
                    line.last_update = Instant::now();
                    line.text = text.clone();
                    if let Some(bar) = &line.bar {
                        bar.set_message(text);
                    }
                }
            }
            RunEvent::TrialQueued { trial_name, reason } => {
                let text = match reason {
                    Some(reason) => format!("{trial_name}: queued on the cluster ({reason})"),
                    None => format!("{trial_name}: placed on the cluster"),
                };
                if let Some(line) = board.lines.get_mut(&trial_name) {
                    // Waiting in the cluster's queue is not a stall.
                    line.last_update = Instant::now();
                    line.text = text.clone();
                    match &line.bar {
                        Some(bar) => bar.set_message(text),
                        None => println!("{text}"),
                    }
                }
            }
            RunEvent::TrialRetrying { trial_name, attempt, wait_sec, reason } => {
                let text = format!("{trial_name}: model call failed ({reason}); retry {attempt} in {wait_sec:.1} s");
                match board.lines.get_mut(&trial_name) {
                    Some(line) => {
                        line.last_update = Instant::now();
                        match &line.bar {
                            Some(bar) => bar.set_message(text),
                            None => println!("{text}"),
                        }
                    }
                    None => self.note(&board.overall, &text),
                }
            }
            RunEvent::TrialWillRetry { trial_name, retry, wait_sec, reason } => {
                drop_line(&self.multi, &mut board.lines, &trial_name);
                self.note(
                    &board.overall,
                    &format!("  {trial_name}: failed ({reason}); attempt {} in {wait_sec:.1} s", retry + 1),
                );
            }
            RunEvent::TrialRestarting { trial_name, restart, reason } => {
                drop_line(&self.multi, &mut board.lines, &trial_name);
                self.note(
                    &board.overall,
                    &format!("  {trial_name}: restarting ({restart}) in a fresh container: {reason}"),
                );
            }
            RunEvent::JobHalted { reason } => self.note(&board.overall, &format!("job halted: {reason}")),
            RunEvent::BudgetReached { reason } => self.note(
                &board.overall,
                &format!("{reason}: running trials stop at their next model call and are graded; no new trial starts"),
            ),
            RunEvent::Admission { limit, running, why } => {
                if let Some(bar) = &board.overall {
                    bar.set_prefix(format!("≤{limit} at once · "));
                }
                // Growth is routine; a cut is worth a line (and says what was measured).
                if why.starts_with("saturated") || board.overall.is_none() {
                    self.note(
                        &board.overall,
                        &format!("admission: up to {limit} trials at once ({why}; {running} running)"),
                    );
                }
            }
            RunEvent::HostSaturated { reason, n_concurrent } => {
                if let Some(bar) = &board.overall {
                    bar.set_prefix(format!("host saturated at n_concurrent_trials {n_concurrent} · "));
                }
                self.note(
                    &board.overall,
                    &format!(
                        "the host is saturated ({reason}): trials may run out of time because of it; lower n_concurrent_trials ({n_concurrent}) or set admission: adaptive"
                    ),
                );
            }
            RunEvent::Controlled { change } => self.note(&board.overall, &format!("control: {change}")),
            RunEvent::EngineWaiting { reason } => self.note(
                &board.overall,
                &format!("the Docker engine does not answer ({reason}); waiting for it before starting more trials"),
            ),
            RunEvent::TrialFinished { trial_name, task_name: _, reward, error, summary } => {
                self.trial_finished(board, &trial_name, reward, error.as_deref(), &summary);
            }
            RunEvent::JobFinished { summary } => {
                if let Some(bar) = board.overall.take() {
                    bar.finish_and_clear();
                }
                if let Some(multi) = &self.multi {
                    let _ = multi.clear();
                }
                print_summary(&summary);
                return Some(*summary);
            }
        }
        None
    }

    /// On a terminal, the overall bar, `heading` printed above it; otherwise prints `heading`
    /// alone and returns None.
    fn open_overall(
        &self,
        total: u64,
        n_already_done: u64,
        summary: &JobSummary,
        heading: &str,
    ) -> Option<ProgressBar> {
        match &self.multi {
            Some(multi) => {
                let bar = multi.add(ProgressBar::new(total));
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {prefix}{msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.set_position(n_already_done);
                bar.enable_steady_tick(Duration::from_millis(200));
                bar.set_message(if n_already_done > 0 { overall_text(summary) } else { "running…".into() });
                bar.println(heading);
                Some(bar)
            }
            None => {
                println!("{heading}");
                None
            }
        }
    }

    /// The line of a trial that has started: a spinner on a terminal, else a plain line
    /// printed once (nothing when quiet).
    fn trial_line(&self, trial_name: &TrialName, task_name: &str) -> Line {
        let text = format!("{trial_name}: preparing");
        let bar = match (&self.multi, self.quiet) {
            (Some(multi), false) => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.enable_steady_tick(Duration::from_millis(200));
                bar.set_message(text.clone());
                Some(bar)
            }
            (None, false) => {
                println!("started  {trial_name} ({task_name})");
                None
            }
            _ => None,
        };
        Line { bar, text, last_update: Instant::now() }
    }

    /// Takes a finished trial's line away and shows its outcome: on the overall bar (errors
    /// printed above it), or in a plain line.
    fn trial_finished(
        &self,
        board: &mut Board,
        trial_name: &TrialName,
        reward: Option<f64>,
        error: Option<&str>,
        summary: &JobSummary,
    ) {
        let n_done = summary.n_finished + summary.n_errored + summary.n_cancelled;
        let outcome = match (&error, reward) {
            (Some(e), _) => format!("error: {e}"),
            (None, Some(r)) => format!("reward {r}"),
            (None, None) => "no reward".to_string(),
        };
        drop_line(&self.multi, &mut board.lines, trial_name);
        match &board.overall {
            Some(bar) => {
                bar.set_position(n_done);
                bar.set_message(overall_text(summary));
                if error.is_some() {
                    bar.println(format!("  {trial_name}: {outcome}"));
                }
            }
            None => {
                println!(
                    "finished {trial_name} ({n_done}/{}): {outcome} · mean reward {}",
                    board.n_total,
                    mean_text(summary)
                )
            }
        }
    }
}

/// What the reporter shows while the job runs: the overall bar (on a terminal), each running
/// trial's line, and the job's count of trials.
#[derive(Default)]
struct Board {
    overall: Option<ProgressBar>,
    lines: HashMap<TrialName, Line>,
    n_total: u64,
}

/// A trial's line while it runs: its phase, episode, tokens and cost.
fn progress_text(
    trial_name: &TrialName,
    phase: TrialPhase,
    episode: Option<u32>,
    usage: Option<ProgressUsage>,
) -> String {
    let mut text = format!("{trial_name}: {}", phase.label());
    if let Some(episode) = episode {
        text.push_str(&format!(" (episode {episode})"));
    }
    if let Some(usage) = usage {
        text.push_str(&format!(" · {} tok", human(usage.input_tokens + usage.output_tokens)));
        if usage.cost_usd > 0.0 {
            text.push_str(&format!(" · ${:.4}", usage.cost_usd));
        }
    }
    text
}

fn drop_line(multi: &Option<MultiProgress>, lines: &mut HashMap<TrialName, Line>, name: &TrialName) {
    if let Some(line) = lines.remove(name)
        && let Some(bar) = line.bar
    {
        bar.finish_and_clear();
        if let Some(multi) = multi {
            multi.remove(&bar);
        }
    }
}

/// The job's headline mean with the other convention's beside it: `0.500 (harbor-0.26: 0.667)`.
fn mean_text(summary: &JobSummary) -> String {
    match &summary.scores {
        Some(scores) => scores.brief(summary.score_convention),
        None => terminus_core::stats::mean_text(summary.mean_reward),
    }
}

/// The overall bar's message.
fn overall_text(summary: &JobSummary) -> String {
    let mean = mean_text(summary);
    let cost = match &summary.budget {
        Some(budget) => format!(" · {}", budget_text(budget)),
        None => summary.cost_usd.filter(|c| *c > 0.0).map(|c| format!(" · ${c:.2}")).unwrap_or_default(),
    };
    format!("errors {} · retries {} · mean reward {mean}{cost}", summary.n_errored, summary.n_model_retries)
}

/// Spend against the job's budget, in what it limits.
fn budget_text(budget: &BudgetStatus) -> String {
    let mut parts = Vec::new();
    if let Some(max) = budget.max_cost_usd {
        parts.push(format!("${:.2} of ${max:.2}", budget.spent_cost_usd));
    }
    if let Some(max) = budget.max_tokens {
        parts.push(format!("{} of {max} tokens", budget.spent_tokens));
    }
    if parts.is_empty() {
        // Only agents have budgets: the job's spend, in dollars.
        parts.push(format!("${:.2} spent", budget.spent_cost_usd));
    }
    parts.join(", ")
}

fn cell(cell: &RewardCell) -> String {
    match cell {
        RewardCell::Error => "err".to_string(),
        RewardCell::Reward(r) => format!("{r}"),
        RewardCell::Missing => "-".to_string(),
    }
}

fn human(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 1_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}

pub fn print_summary(summary: &JobSummary) {
    write_summary(&mut std::io::stdout().lock(), summary);
}

/// The end-of-job tables (what `print_summary` prints), into `out`.
fn write_summary(out: &mut impl Write, summary: &JobSummary) {
    let _ = writeln!(
        out,
        "\nJob {} in {:.1} s: {} trials — {} finished, {} errored, {} cancelled, {} not run",
        if summary.halted {
            "halted"
        } else if summary.cancelled {
            "interrupted"
        } else {
            "finished"
        },
        summary.wall_seconds,
        summary.n_total,
        summary.n_finished,
        summary.n_errored,
        summary.n_cancelled,
        summary.n_pending
    );
    if summary.n_retries > 0 || summary.n_restarts > 0 {
        let _ = writeln!(out, "Trial retries: {}, restarts: {}", summary.n_retries, summary.n_restarts);
    }
    match &summary.scores {
        Some(scores) if scores.harbor_025.n_completed > 0 => {
            let convention = summary.score_convention;
            let _ = writeln!(out, "Score ({}): {}", convention.name(), scores.describe(convention));
        }
        Some(_) => {}
        None => {
            if let Some(mean) = summary.mean_reward {
                let _ = writeln!(out, "Mean reward: {mean:.3} (errored trials count as 0)");
            }
        }
    }
    if !summary.evals.is_empty() {
        let width = summary.evals.iter().map(|e| e.key.len()).max().unwrap_or(4).max(5);
        let _ = writeln!(out, "\n  {:width$}  trials  errors  mean    pass@k", "agent__model__dataset");
        for eval in &summary.evals {
            let pass: Vec<String> = shown_pass_at_k(&eval.pass_at_k).map(|(k, v)| format!("@{k}={v:.2}")).collect();
            let mean = eval.mean_reward.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "  {:width$}  {:>6}  {:>6}  {mean:6}  {}",
                eval.key,
                eval.n_trials,
                eval.n_errors,
                pass.join(" ")
            );
            if let Some(scores) = &eval.scores {
                let other = summary.score_convention.other();
                let score = scores.get(other);
                let pass: Vec<String> =
                    shown_pass_at_k(&score.pass_at_k.iter().map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>())
                        .map(|(k, v)| format!("@{k}={v:.2}"))
                        .collect();
                let pass = if pass.is_empty() { String::new() } else { format!(" · pass {}", pass.join(" ")) };
                // What the headline left out, when it left out any, then the other convention.
                let counted = counted_text(scores.get(summary.score_convention));
                let counted = if counted.is_empty() { counted } else { format!("{counted} · ") };
                let _ = writeln!(out, "  {:width$}    {counted}{}: mean {}{pass}", "", other.name(), score_text(score));
            }
            for (kind, n) in &eval.exceptions {
                let _ = writeln!(out, "  {:width$}    {n} × {kind}", "");
            }
        }
    }
    let rewards = &summary.task_rewards;
    if !rewards.is_empty() {
        let width = rewards.keys().map(String::len).max().unwrap_or(4).max(4);
        let _ = writeln!(out, "\n  {:width$}  rewards", "task");
        for (task, values) in rewards {
            // Past a screen line, a count of each value instead of every one.
            let line = if values.len() <= MAX_REWARD_CELLS {
                values.iter().map(cell).collect::<Vec<_>>().join(" ")
            } else {
                let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
                for value in values {
                    *counts.entry(cell(value)).or_default() += 1;
                }
                counts.iter().map(|(value, n)| format!("{value} ×{n}")).collect::<Vec<_>>().join(", ")
            };
            let _ = writeln!(out, "  {task:width$}  {line}");
        }
    }
    let cost = summary.cost_usd.map(|c| format!(", cost ${c:.4}")).unwrap_or_default();
    let _ = writeln!(out, "\nTokens: {} in, {} out{cost}", summary.n_input_tokens, summary.n_output_tokens);
    if let Some(budget) = &summary.budget {
        let mut line = format!("Budget: {}", budget_text(budget));
        for (idx, agent) in &budget.agents {
            line.push_str(&format!("; agents[{idx}]: {}", budget_text(agent)));
        }
        if budget.n_not_run > 0 {
            line.push_str(&format!(
                "; spent, {} trials not run (`terminus resume {} --max-cost-usd N` or `--max-tokens N` runs them)",
                budget.n_not_run, summary.job_dir
            ));
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "Results: {}/result.json", summary.job_dir);
    if summary.halted || summary.cancelled {
        let _ = writeln!(out, "Continue with: terminus resume {}", summary.job_dir);
    }
}

/// The most rewards a task's line lists one by one.
const MAX_REWARD_CELLS: usize = 30;

/// The most bollard may log (see `init_tracing`).
const BOLLARD_AT_MOST: &str = "bollard=info";

/// Sends log lines to `job.log` and, at WARN and above, to the terminal (above the bars).
pub fn init_tracing(reporter: &Reporter, job_dir: &Path, debug: bool) {
    let _ = std::fs::create_dir_all(job_dir);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(terminus_core::layout::JobDir::new(job_dir).job_log())
        .ok();
    // A command that runs two jobs (the oracle preflight, then the job) sends each one's lines
    // to its own job.log and bars; the subscriber itself is installed once.
    *SINKS.lock().unwrap_or_else(|e| e.into_inner()) = Sinks { file, multi: reporter.multi.clone() };
    let file_level = if debug { "debug" } else { "info" };
    let file_filter = EnvFilter::try_from_env("TERMINUS_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{file_level},bollard=warn,hyper=warn,reqwest=warn,ractor=warn")))
        // Whatever the user asks for: bollard's debug and trace lines print request and reply
        // bodies, which hold containers' and verifiers' environments (keys among them).
        .add_directive(BOLLARD_AT_MOST.parse().expect("a valid directive"));
    let file_layer = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(JobLog).with_filter(file_filter);
    let terminal_layer = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time()
        .with_writer(TerminalWriter)
        .with_filter(EnvFilter::new("warn,ractor=error"));
    let _ = tracing_subscriber::registry().with(file_layer).with(terminal_layer).try_init();
}

/// The running job's log file and bars.
struct Sinks {
    file: Option<std::fs::File>,
    multi: Option<MultiProgress>,
}

static SINKS: Mutex<Sinks> = Mutex::new(Sinks { file: None, multi: None });

/// A tracing writer to the running job's `job.log`.
struct JobLog;

impl Write for JobLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match &mut SINKS.lock().unwrap_or_else(|e| e.into_inner()).file {
            Some(file) => file.write(bytes),
            None => Ok(bytes.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for JobLog {
    type Writer = JobLog;

    fn make_writer(&'a self) -> JobLog {
        JobLog
    }
}

/// A tracing writer that prints through the running job's progress bars when they are drawn.
struct TerminalWriter;

struct LineBuffer {
    buffer: Vec<u8>,
}

impl Write for LineBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buffer);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        let multi = SINKS.lock().unwrap_or_else(|e| e.into_inner()).multi.clone();
        match multi {
            Some(multi) => {
                let _ = multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }
}

impl<'a> MakeWriter<'a> for TerminalWriter {
    type Writer = LineBuffer;

    fn make_writer(&'a self) -> LineBuffer {
        LineBuffer { buffer: Vec::new() }
    }
}

/// The pass@k values a summary line shows, by k: 1 to 5, then 10, 20, 50, 100, 200, 500, …,
/// and the largest (result.json keeps every k).
fn shown_pass_at_k(pass_at_k: &[(String, f64)]) -> impl Iterator<Item = (u64, f64)> {
    let mut all: Vec<(u64, f64)> = pass_at_k.iter().filter_map(|(k, v)| Some((k.parse().ok()?, *v))).collect();
    all.sort_by_key(|(k, _)| *k);
    let largest = all.last().map(|(k, _)| *k);
    let round = |k: u64| {
        let mut step = 10;
        while step <= k {
            if [step, 2 * step, 5 * step].contains(&k) {
                return true;
            }
            step *= 10;
        }
        false
    };
    all.into_iter().filter(move |(k, _)| *k <= 5 || round(*k) || Some(*k) == largest)
}

#[cfg(test)]
mod tests;
