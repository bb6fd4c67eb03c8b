//! Command-line arguments. The job file is the source of truth; flags override its values.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "terminus", version, about = "Run Terminus 2 agent trials in Docker containers, Harbor-compatible")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs a job: every task × agent × attempt of a job file, writing results under jobs_dir.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (Harbor's job YAML).
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// Overrides `job_name` (the job directory's name).
    #[arg(long)]
    pub job_name: Option<String>,
    /// Overrides `jobs_dir`.
    #[arg(short = 'o', long = "jobs-dir")]
    pub jobs_dir: Option<PathBuf>,
    /// Overrides `n_concurrent_trials`.
    #[arg(short = 'n', long = "n-concurrent")]
    pub n_concurrent: Option<usize>,
    /// Overrides `n_attempts`.
    #[arg(short = 'k', long = "n-attempts")]
    pub n_attempts: Option<u32>,
    /// Shows only the overall progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}
