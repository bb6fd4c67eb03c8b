//! The `terminus` command: runs Harbor-style jobs of Terminus 2 trials in Docker containers.
//!
//! Exit codes (also in `--help` and docs/cli.md):
//! - 0: every trial finished without an error (whatever its reward);
//! - 1: the job finished, but some trials recorded an error (see their `exception_info`);
//! - 2: the command line, the job file, a task or a registry dataset is invalid, or a task
//!   cannot be fetched from git (nothing was run);
//! - 3: the Docker engine cannot be reached (nothing was run);
//! - 4: the job stopped after too many restarts (or a full disk); `terminus resume` continues it;
//! - 5: the job directory is in use by another terminus (nothing was run);
//! - 6: the job's budget (`budget:` or `--max-cost-usd`/`--max-tokens`) was reached; trials not
//!   started are pending and `terminus resume` with a raised budget runs them;
//! - 7: the oracle preflight refused the job (`preflight: strict` and a task's solution fails,
//!   or no task's solution scores 1): nothing but the preflight was run;
//! - 8: a live control (`jobs status|pause|resume|set`, `trials cancel|retry`) found no
//!   terminus running the job;
//! - 9: the running job refused the live control (the message says why);
//! - 130: the job was interrupted (Ctrl-C or SIGTERM); finished results are kept.

mod args;
mod commands;
mod control;
mod datasets;
mod exit;
mod job;
mod preflight;
mod remote;
mod replay;
mod reporter;
mod serve;
mod tasks_from;
mod traces;

use std::process::ExitCode;

use clap::Parser;
use terminus_core::control::JobControl;

use crate::args::{
    Cli, Command, DatasetsCommand, JobsCommand, TasksCommand, TextsCommand, TracesCommand, TrialsCommand,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::TRIAL_ERRORS);
        }
    };
    datasets::install_resolver();
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => commands::run(*args).await,
            Command::Resume(args) => commands::resume(args).await,
            Command::Trials(TrialsCommand::Start(args)) => commands::trial_start(args).await,
            Command::Trials(TrialsCommand::Replay(args)) => replay::trial(args).await,
            Command::Tasks(TasksCommand::Check(args)) => commands::tasks_check(args).await,
            Command::Datasets(DatasetsCommand::List(args)) => datasets::list(args).await,
            Command::Datasets(DatasetsCommand::Show(args)) => datasets::show(args).await,
            Command::Datasets(DatasetsCommand::Fetch(args)) => datasets::fetch(args).await,
            Command::Jobs(JobsCommand::Summarize(args)) => commands::summarize(args),
            Command::Traces(TracesCommand::Export(args)) => traces::export(args),
            Command::Jobs(JobsCommand::Regrade(args)) => replay::regrade(args).await,
            Command::Jobs(JobsCommand::Status(args)) => control::job_command(&args, JobControl::Status).await,
            Command::Jobs(JobsCommand::Pause(args)) => control::job_command(&args, JobControl::Pause).await,
            Command::Jobs(JobsCommand::Resume(args)) => control::job_command(&args, JobControl::Resume).await,
            Command::Jobs(JobsCommand::Set(args)) => control::set(&args).await,
            Command::Trials(TrialsCommand::Cancel(args)) => {
                control::trial_command(&args, JobControl::CancelTrial).await
            }
            Command::Trials(TrialsCommand::Retry(args)) => control::trial_command(&args, JobControl::RetryTrial).await,
            Command::Texts(TextsCommand::ImportHarbor(args)) => commands::import_harbor(args),
            Command::Gc(args) => commands::gc(args).await,
            Command::View(args) => commands::view(args).await,
            Command::Serve(args) => serve::serve(args).await,
        }
    });
    // Trials may still hold runtime tasks (timers of cancelled work); do not wait for them.
    runtime.shutdown_background();
    ExitCode::from(code)
}
