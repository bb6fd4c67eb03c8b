//! The `terminus` command: runs Harbor-style jobs of Terminus 2 trials in Docker containers.
//!
//! Exit codes (documented in the README):
//! - 0: every trial finished without an error (whatever its reward);
//! - 1: the job finished, but some trials recorded an error (see their `exception_info`);
//! - 2: the command line or the job file is invalid (nothing was run);
//! - 3: the Docker engine cannot be reached (nothing was run);
//! - 130: the job was interrupted (Ctrl-C or SIGTERM); finished results are kept.

mod args;
mod reporter;

use std::process::ExitCode;

use clap::Parser;
use terminus_config::JobSpec;
use terminus_config::job::Overrides;

use crate::args::{Cli, Command, RunArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let overrides = Overrides {
        job_name: args.job_name.clone(),
        jobs_dir: args.jobs_dir.clone(),
        n_concurrent_trials: args.n_concurrent,
        n_attempts: args.n_attempts,
        quiet: args.quiet.then_some(true),
    };
    let spec = match JobSpec::load(&args.config, &overrides) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let job_dir = spec.job_dir();
    if job_dir.join("result.json").exists() {
        eprintln!(
            "error: `{}` already holds a job; choose another job_name (resuming is not built yet)",
            job_dir.display()
        );
        return ExitCode::from(2);
    }
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let reporter = reporter::Reporter::new(spec.quiet);
    reporter::init_tracing(&reporter, &job_dir, spec.debug);
    for warning in &spec.warnings {
        tracing::warn!("{}: {warning}", args.config.display());
    }
    raise_fd_limit();
    let handle = match terminus_actors::start_job(spec, events_tx).await {
        Ok(handle) => handle,
        Err(e) => {
            reporter.abandon();
            eprintln!("error: {e}");
            eprintln!("hint: run scripts/setup.sh to install and start the Docker engine");
            return ExitCode::from(3);
        }
    };
    let job_id = handle.job_id.clone();
    let canceller = handle.canceller();
    let report = tokio::spawn(reporter.run(events_rx));
    let wait = handle.wait();
    tokio::pin!(wait);
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = &mut wait => break,
            _ = interrupt() => {
                if interrupted {
                    eprintln!("second interrupt: removing the job's containers and exiting");
                    let _ = terminus_actors::sweep_job_containers(&job_id).await;
                    return ExitCode::from(130);
                }
                interrupted = true;
                eprintln!("interrupt: cancelling running trials (press Ctrl-C again to stop at once)");
                canceller.cancel();
            }
        }
    }
    let summary = report.await.ok().flatten();
    if interrupted {
        return ExitCode::from(130);
    }
    match summary {
        Some(summary) if summary.n_errored == 0 => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupt() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Each trial holds a few descriptors (its shell channel, transient exec connections); the
/// common default soft limit of 1024 is too low for hundreds of trials.
fn raise_fd_limit() {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    {
        // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
        unsafe {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
                limit.rlim_cur = limit.rlim_max.min(65_536);
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
        }
    }
}
