//! What the user sees while a job runs: indicatif bars on a terminal (one overall bar with
//! done/total, errors and the running mean reward, and one line per running trial with its
//! phase and episode), plain lines otherwise. Driven only by the Supervisor's events.
//!
//! Log lines go to `job.log` in the job directory; warnings and errors also reach the terminal,
//! printed above the bars so they do not tear them.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use terminus_core::events::{JobSummary, RunEvent};
use terminus_core::ids::TrialName;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub struct Reporter {
    multi: Option<MultiProgress>,
    quiet: bool,
}

impl Reporter {
    pub fn new(quiet: bool) -> Reporter {
        let multi = std::io::stdout()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout_with_hz(10)));
        Reporter { multi, quiet }
    }

    /// Clears the bars before an early exit.
    pub fn abandon(&self) {
        if let Some(multi) = &self.multi {
            let _ = multi.clear();
        }
    }

    /// Consumes events until the job finishes; returns its summary.
    pub async fn run(self, mut events: UnboundedReceiver<RunEvent>) -> Option<JobSummary> {
        let mut overall: Option<ProgressBar> = None;
        let mut lines: HashMap<TrialName, ProgressBar> = HashMap::new();
        let mut rewards: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let (mut n_done, mut n_errors, mut reward_sum, mut n_total, mut n_retries) = (0u64, 0u64, 0.0f64, 0u64, 0u64);
        while let Some(event) = events.recv().await {
            match event {
                RunEvent::JobStarted { job_name, job_dir, n_total: total } => {
                    n_total = total;
                    self.plain(&format!("job {job_name}: {total} trials, results in {job_dir}"));
                    if let Some(multi) = &self.multi {
                        let bar = multi.add(ProgressBar::new(total));
                        bar.set_style(
                            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
                                .unwrap_or_else(|_| ProgressStyle::default_bar()),
                        );
                        bar.enable_steady_tick(Duration::from_millis(200));
                        bar.set_message("running…");
                        overall = Some(bar);
                    }
                }
                RunEvent::TrialStarted { trial_name, task_name } => {
                    if let (Some(multi), false) = (&self.multi, self.quiet) {
                        let line = multi.add(ProgressBar::new_spinner());
                        line.set_style(
                            ProgressStyle::with_template("  {spinner} {msg} [{elapsed}]")
                                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                        );
                        line.enable_steady_tick(Duration::from_millis(200));
                        line.set_message(format!("{trial_name}: preparing"));
                        lines.insert(trial_name, line);
                    } else {
                        self.plain(&format!("started  {trial_name} ({task_name})"));
                    }
                }
                RunEvent::TrialProgress { trial_name, phase, episode } => {
                    let text = match episode {
                        Some(episode) => {
                            format!("{trial_name}: {} (episode {episode})", phase.label())
                        }
                        None => format!("{trial_name}: {}", phase.label()),
                    };
                    if let Some(line) = lines.get(&trial_name) {
                        line.set_message(text);
                    }
                }
                RunEvent::TrialRetrying { trial_name, attempt, wait_sec, reason } => {
                    n_retries += 1;
                    let text =
                        format!("{trial_name}: model call failed ({reason}); retry {attempt} in {wait_sec:.1} s");
                    match lines.get(&trial_name) {
                        Some(line) => line.set_message(text),
                        None => self.plain(&text),
                    }
                }
                RunEvent::TrialFinished { trial_name, task_name, reward, error } => {
                    n_done += 1;
                    reward_sum += reward.unwrap_or(0.0);
                    if error.is_some() {
                        n_errors += 1;
                    }
                    let outcome = match (&error, reward) {
                        (Some(e), _) => format!("error: {e}"),
                        (None, Some(r)) => format!("reward {r}"),
                        (None, None) => "no reward".to_string(),
                    };
                    rewards.entry(task_name).or_default().push(match (&error, reward) {
                        (Some(_), _) => "err".to_string(),
                        (None, Some(r)) => format!("{r}"),
                        (None, None) => "-".to_string(),
                    });
                    if let Some(line) = lines.remove(&trial_name) {
                        line.finish_and_clear();
                        if let Some(multi) = &self.multi {
                            multi.remove(&line);
                        }
                    }
                    match &overall {
                        Some(bar) => {
                            bar.inc(1);
                            bar.set_message(format!(
                                "errors {n_errors} · retries {n_retries} · mean reward {:.3}",
                                reward_sum / n_done as f64
                            ));
                            if error.is_some() {
                                bar.println(format!("  {trial_name}: {outcome}"));
                            }
                        }
                        None => self.plain(&format!("finished {trial_name} ({n_done}/{n_total}): {outcome}")),
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
        None
    }

    fn plain(&self, line: &str) {
        if self.multi.is_none() {
            println!("{line}");
        }
    }
}

fn print_summary(summary: &JobSummary, rewards: &BTreeMap<String, Vec<String>>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "\nJob finished in {:.1} s: {}/{} trials, {} with errors",
        summary.wall_seconds, summary.n_finished, summary.n_total, summary.n_errored
    );
    if let Some(mean) = summary.mean_reward {
        let _ = writeln!(out, "Mean reward: {mean:.3} (errored trials count as 0)");
    }
    let width = rewards.keys().map(String::len).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "\n  {:width$}  rewards", "task");
    for (task, values) in rewards {
        let _ = writeln!(out, "  {task:width$}  {}", values.join(" "));
    }
    let cost = summary.cost_usd.map(|c| format!(", cost ${c:.4}")).unwrap_or_default();
    let _ = writeln!(out, "\nTokens: {} in, {} out{cost}", summary.n_input_tokens, summary.n_output_tokens);
    let _ = writeln!(out, "Results: {}/result.json", summary.job_dir);
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
