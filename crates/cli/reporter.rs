//! What the user sees while a job runs: indicatif bars on a terminal — one overall bar (done/total,
//! errors, retries, mean reward, cost) and one line per running trial (phase, episode, tokens,
//! cost, retries or backoff, and a stall flag when it reports nothing for `stall_warning_sec`) —
//! and plain lines otherwise. Driven only by the Supervisor's events. At the end, a summary table.
//!
//! Log lines go to `job.log` in the job directory; warnings and errors also reach the terminal,
//! printed above the bars so they do not tear them.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use terminus_core::events::{JobSummary, RunEvent};
use terminus_core::ids::TrialName;
use terminus_core::result::TrialResult;
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
        let mut overall: Option<ProgressBar> = None;
        let mut lines: HashMap<TrialName, Line> = HashMap::new();
        let mut rewards: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let (mut n_done, mut n_errors, mut n_retries, mut reward_sum, mut n_total) = (0u64, 0u64, 0u64, 0.0f64, 0u64);
        let mut cost: HashMap<TrialName, f64> = HashMap::new();
        let mut finished_cost = 0.0;
        let mut stall_check = tokio::time::interval(Duration::from_secs(5));
        loop {
            let event = tokio::select! {
                event = events.recv() => match event { Some(event) => event, None => return None },
                _ = stall_check.tick() => {
                    for (name, line) in &lines {
                        let quiet_for = line.last_update.elapsed();
                        if quiet_for >= self.stall_warning {
                            let text = format!("⚠ stalled {}s · {}", quiet_for.as_secs(), line.text);
                            match &line.bar {
                                Some(bar) => bar.set_message(text),
                                None => println!("{name}: no progress for {} s", quiet_for.as_secs()),
                            }
                        }
                    }
                    continue;
                }
            };
            match event {
                RunEvent::JobStarted { job_name, job_dir, n_total: total, n_already_done } => {
                    n_total = total;
                    n_done = n_already_done;
                    let resumed = if n_already_done > 0 {
                        format!(" ({n_already_done} already finished)")
                    } else {
                        String::new()
                    };
                    match &self.multi {
                        Some(multi) => {
                            let bar = multi.add(ProgressBar::new(total));
                            bar.set_style(
                                ProgressStyle::with_template(
                                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
                                )
                                .unwrap_or_else(|_| ProgressStyle::default_bar()),
                            );
                            bar.set_position(n_already_done);
                            bar.enable_steady_tick(Duration::from_millis(200));
                            bar.set_message("running…");
                            bar.println(format!("job {job_name}: {total} trials{resumed}, results in {job_dir}"));
                            overall = Some(bar);
                        }
                        None => println!("job {job_name}: {total} trials{resumed}, results in {job_dir}"),
                    }
                }
                RunEvent::TrialStarted { trial_name, task_name } => {
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
                    lines.insert(trial_name, Line { bar, text, last_update: Instant::now() });
                }
                RunEvent::TrialProgress { trial_name, phase, episode, usage } => {
                    let mut text = format!("{trial_name}: {}", phase.label());
                    if let Some(episode) = episode {
                        text.push_str(&format!(" (episode {episode})"));
                    }
                    if let Some(usage) = usage {
                        text.push_str(&format!(" · {} tok", human(usage.input_tokens + usage.output_tokens)));
                        if usage.cost_usd > 0.0 {
                            text.push_str(&format!(" · ${:.4}", usage.cost_usd));
                            cost.insert(trial_name.clone(), usage.cost_usd);
                        }
                    }
                    if let Some(line) = lines.get_mut(&trial_name) {
                        line.last_update = Instant::now();
                        line.text = text.clone();
                        if let Some(bar) = &line.bar {
                            bar.set_message(text);
                        }
                    }
                }
                RunEvent::TrialRetrying { trial_name, attempt, wait_sec, reason } => {
                    n_retries += 1;
                    let text =
                        format!("{trial_name}: model call failed ({reason}); retry {attempt} in {wait_sec:.1} s");
                    match lines.get_mut(&trial_name) {
                        Some(line) => {
                            line.last_update = Instant::now();
                            match &line.bar {
                                Some(bar) => bar.set_message(text),
                                None => println!("{text}"),
                            }
                        }
                        None => self.note(&overall, &text),
                    }
                }
                RunEvent::TrialWillRetry { trial_name, retry, wait_sec, reason } => {
                    drop_line(&self.multi, &mut lines, &trial_name);
                    self.note(
                        &overall,
                        &format!("  {trial_name}: failed ({reason}); attempt {} in {wait_sec:.1} s", retry + 1),
                    );
                }
                RunEvent::TrialRestarting { trial_name, restart, reason } => {
                    drop_line(&self.multi, &mut lines, &trial_name);
                    self.note(
                        &overall,
                        &format!("  {trial_name}: restarting ({restart}) in a fresh container: {reason}"),
                    );
                }
                RunEvent::JobHalted { reason } => self.note(&overall, &format!("job halted: {reason}")),
                RunEvent::EngineWaiting { reason } => self.note(
                    &overall,
                    &format!(
                        "the Docker engine does not answer ({reason}); waiting for it before starting more trials"
                    ),
                ),
                RunEvent::TrialFinished { trial_name, task_name, reward, error } => {
                    n_done += 1;
                    reward_sum += reward.unwrap_or(0.0);
                    finished_cost += cost.remove(&trial_name).unwrap_or(0.0);
                    if error.is_some() {
                        n_errors += 1;
                    }
                    let outcome = match (&error, reward) {
                        (Some(e), _) => format!("error: {e}"),
                        (None, Some(r)) => format!("reward {r}"),
                        (None, None) => "no reward".to_string(),
                    };
                    rewards.entry(task_name).or_default().push(cell(error.is_some(), reward));
                    drop_line(&self.multi, &mut lines, &trial_name);
                    match &overall {
                        Some(bar) => {
                            bar.set_position(n_done);
                            let cost_text =
                                if finished_cost > 0.0 { format!(" · ${finished_cost:.2}") } else { String::new() };
                            bar.set_message(format!(
                                "errors {n_errors} · retries {n_retries} · mean reward {:.3}{cost_text}",
                                reward_sum / n_done.max(1) as f64
                            ));
                            if error.is_some() {
                                bar.println(format!("  {trial_name}: {outcome}"));
                            }
                        }
                        None => println!("finished {trial_name} ({n_done}/{n_total}): {outcome}"),
                    }
                }
                RunEvent::JobFinished { summary } => {
                    if let Some(bar) = overall.take() {
                        bar.finish_and_clear();
                    }
                    if let Some(multi) = &self.multi {
                        let _ = multi.clear();
                    }
                    print_summary(&summary, &rewards);
                    return Some(summary);
                }
            }
        }
    }
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

fn cell(error: bool, reward: Option<f64>) -> String {
    match (error, reward) {
        (true, _) => "err".to_string(),
        (false, Some(r)) => format!("{r}"),
        (false, None) => "-".to_string(),
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

/// The reward cells per task, from finished results.
pub fn rewards_by_task(results: &[TrialResult]) -> BTreeMap<String, Vec<String>> {
    let mut rewards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in results {
        rewards.entry(r.task_name.clone()).or_default().push(cell(r.exception_info.is_some(), r.reward()));
    }
    rewards
}

pub fn print_summary(summary: &JobSummary, rewards: &BTreeMap<String, Vec<String>>) {
    let mut out = std::io::stdout().lock();
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
    if let Some(mean) = summary.mean_reward {
        let _ = writeln!(out, "Mean reward: {mean:.3} (errored trials count as 0)");
    }
    if !summary.evals.is_empty() {
        let width = summary.evals.iter().map(|e| e.key.len()).max().unwrap_or(4).max(5);
        let _ = writeln!(out, "\n  {:width$}  trials  errors  mean    pass@k", "agent__model__dataset");
        for eval in &summary.evals {
            let pass: Vec<String> = eval.pass_at_k.iter().map(|(k, v)| format!("@{k}={v:.2}")).collect();
            let mean = eval.mean_reward.map(|m| format!("{m:.3}")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                out,
                "  {:width$}  {:>6}  {:>6}  {mean:6}  {}",
                eval.key,
                eval.n_trials,
                eval.n_errors,
                pass.join(" ")
            );
            for (kind, n) in &eval.exceptions {
                let _ = writeln!(out, "  {:width$}    {n} × {kind}", "");
            }
        }
    }
    if !rewards.is_empty() {
        let width = rewards.keys().map(String::len).max().unwrap_or(4).max(4);
        let _ = writeln!(out, "\n  {:width$}  rewards", "task");
        for (task, values) in rewards {
            let _ = writeln!(out, "  {task:width$}  {}", values.join(" "));
        }
    }
    let cost = summary.cost_usd.map(|c| format!(", cost ${c:.4}")).unwrap_or_default();
    let _ = writeln!(out, "\nTokens: {} in, {} out{cost}", summary.n_input_tokens, summary.n_output_tokens);
    let _ = writeln!(out, "Results: {}/result.json", summary.job_dir);
    if summary.halted || summary.cancelled {
        let _ = writeln!(out, "Continue with: terminus resume {}", summary.job_dir);
    }
}

/// Sends log lines to `job.log` and, at WARN and above, to the terminal (above the bars).
pub fn init_tracing(reporter: &Reporter, job_dir: &Path, debug: bool) {
    let _ = std::fs::create_dir_all(job_dir);
    let file = std::fs::OpenOptions::new().create(true).append(true).open(job_dir.join("job.log")).ok();
    let file_level = if debug { "debug" } else { "info" };
    let file_filter = EnvFilter::try_from_env("TERMINUS_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{file_level},bollard=warn,hyper=warn,reqwest=warn,ractor=warn")));
    let file_layer = file.map(|file| {
        tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Mutex::new(file)).with_filter(file_filter)
    });
    let terminal = TerminalWriter { multi: reporter.multi.clone() };
    let terminal_layer = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time()
        .with_writer(terminal)
        .with_filter(EnvFilter::new("warn,ractor=error"));
    let _ = tracing_subscriber::registry().with(file_layer).with(terminal_layer).try_init();
}

/// A tracing writer that prints through the progress bars when they are drawn.
#[derive(Clone)]
struct TerminalWriter {
    multi: Option<MultiProgress>,
}

struct LineBuffer {
    multi: Option<MultiProgress>,
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
        match &self.multi {
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
        LineBuffer { multi: self.multi.clone(), buffer: Vec::new() }
    }
}
