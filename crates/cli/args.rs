//! Command-line arguments. A job file is the source of truth; flags override its values.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "Exit codes:
  0    every trial finished without an error (whatever its reward)
  1    the job finished, but some trials recorded an error
  2    the command line, the job file or a task is invalid (nothing ran)
  3    the Docker engine cannot be reached (run scripts/setup.sh)
  4    the job stopped after too many restarts or on a full disk; `terminus resume` continues it
  5    the job directory is in use by another terminus (nothing ran)
  6    the job's budget is spent: trials left unstarted; `terminus resume --max-cost-usd` continues it
  130  interrupted (Ctrl-C / SIGTERM); `terminus resume` continues it";

#[derive(Debug, Parser)]
#[command(name = "terminus", version, about = "Run Terminus 2 agent trials in Docker containers, Harbor-compatible", after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs a job: every task × agent × attempt, writing results under jobs_dir. Running a job
    /// whose directory exists continues it when the configuration is the same.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Continues a job: keeps its finished trials, cleans up what a crash left, runs the rest.
    #[command(after_help = EXIT_CODES)]
    Resume(ResumeArgs),
    /// Single trials.
    #[command(subcommand)]
    Trials(TrialsCommand),
    /// Tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// The texts Terminus 2 shows the model (the `texts` agent kwarg).
    #[command(subcommand)]
    Texts(TextsCommand),
    /// Removes the containers (and with --images the task images) of jobs that are not running.
    Gc(GcArgs),
    /// Serves a read-only web viewer of a jobs directory (also Harbor-written ones): jobs, trials,
    /// trajectories with their recordings, two jobs compared. Ctrl-C stops it (exit 0).
    View(ViewArgs),
}

/// Where a viewer listens.
#[derive(Debug, Args, Clone)]
pub struct ListenFlags {
    /// The viewer's port (0: any free port).
    #[arg(long = "port", default_value_t = terminus_view::DEFAULT_PORT)]
    pub port: u16,
    /// The address the viewer listens on. Anything but a loopback address exposes every
    /// trajectory of the jobs directory to the network.
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The jobs directory (`jobs_dir` of the job files), or one job's directory.
    #[arg(default_value = "jobs")]
    pub jobs_dir: PathBuf,
    #[command(flatten)]
    pub listen: ListenFlags,
}

/// `--view` for the commands that run a job.
#[derive(Debug, Args, Clone)]
pub struct ViewFlags {
    /// Serves the web viewer while the job runs, with its trials' phases, episodes, tokens,
    /// retries and stalls live (the URL is printed at the start; it stops with the job).
    #[arg(long)]
    pub view: bool,
    /// The viewer's port with --view (0: any free port).
    #[arg(long = "view-port", default_value_t = terminus_view::DEFAULT_PORT)]
    pub view_port: u16,
    /// The address the viewer listens on with --view.
    #[arg(long = "view-host", default_value = "127.0.0.1")]
    pub view_host: std::net::IpAddr,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (Harbor's job YAML).
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobFlags,
    #[command(flatten)]
    pub view: ViewFlags,
}

/// Flags that override the job file.
#[derive(Debug, Args, Default)]
pub struct JobFlags {
    /// A task directory or a dataset directory (repeatable); replaces the file's tasks and datasets.
    #[arg(short = 'p', long = "path")]
    pub paths: Vec<PathBuf>,
    /// Only tasks whose name matches this glob (repeatable).
    #[arg(short = 't', long = "task-name")]
    pub include: Vec<String>,
    /// Leave out tasks whose name matches this glob (repeatable).
    #[arg(short = 'x', long = "exclude-task-name")]
    pub exclude: Vec<String>,
    /// The agent: terminus-2, oracle or nop (replaces the file's agents).
    #[arg(short = 'a', long = "agent")]
    pub agent: Option<String>,
    /// The model (repeatable with -a: one agent per model).
    #[arg(short = 'm', long = "model")]
    pub models: Vec<String>,
    /// An agent option, key=value (repeatable; the value is read as JSON when it can be).
    #[arg(long = "ak", value_name = "KEY=VALUE")]
    pub agent_kwargs: Vec<String>,
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
    /// Rebuilds task images even when an image with the same content exists.
    #[arg(long)]
    pub force_build: bool,
    /// Keeps task images after the job (containers are always removed).
    #[arg(long)]
    pub no_delete: bool,
    /// Shows only the overall progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[command(flatten)]
    pub budget: BudgetFlags,
}

/// The job's budget, in place of the file's `budget:`.
#[derive(Debug, Args, Default, Clone, Copy)]
pub struct BudgetFlags {
    /// Stops the job's model calls once they cost this many dollars (at the models' prices);
    /// trials not yet started stay pending.
    #[arg(long = "max-cost-usd", value_name = "DOLLARS")]
    pub max_cost_usd: Option<f64>,
    /// Stops the job's model calls once they used this many tokens (input and output).
    #[arg(long = "max-tokens", value_name = "N")]
    pub max_tokens: Option<u64>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnlyArg {
    Errored,
    Cancelled,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The job directory (jobs_dir/job_name).
    pub job_dir: PathBuf,
    /// A job file to continue with instead of the stored configuration; it must describe the same
    /// job (runtime settings such as the model server's address or the concurrency may differ).
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// Run exactly the trials that ended with an error, or exactly the cancelled ones.
    #[arg(long, value_enum)]
    pub only: Option<OnlyArg>,
    /// Overrides `n_concurrent_trials`.
    #[arg(short = 'n', long = "n-concurrent")]
    pub n_concurrent: Option<usize>,
    /// Shows only the overall progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// A raised (or new) budget for the rest of the job; the spend so far counts.
    #[command(flatten)]
    pub budget: BudgetFlags,
    #[command(flatten)]
    pub view: ViewFlags,
}

#[derive(Debug, Subcommand)]
pub enum TrialsCommand {
    /// Runs one trial of one task and prints its result.
    Start(TrialStartArgs),
}

#[derive(Debug, Args)]
pub struct TrialStartArgs {
    /// The task directory.
    #[arg(short = 'p', long = "path")]
    pub path: PathBuf,
    /// Where the trial goes (a job directory named after the task and the time is made there).
    #[arg(long = "trials-dir", default_value = "trials")]
    pub trials_dir: PathBuf,
    /// The agent: terminus-2, oracle or nop.
    #[arg(short = 'a', long = "agent", default_value = "oracle")]
    pub agent: String,
    /// The model (for terminus-2).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// An agent option, key=value (repeatable).
    #[arg(long = "ak", value_name = "KEY=VALUE")]
    pub agent_kwargs: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Checks task directories (a task, or a dataset of tasks): task.toml, instruction, Dockerfile
    /// (unless a prebuilt `docker_image` is named), tests; with --build, also builds each image
    /// (or finds or pulls the prebuilt one).
    Check(TaskCheckArgs),
}

#[derive(Debug, Args)]
pub struct TaskCheckArgs {
    /// A task directory or a dataset directory.
    pub path: PathBuf,
    /// Also build each task's image.
    #[arg(long)]
    pub build: bool,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Prints the summary tables of a job directory.
    Summarize(SummarizeArgs),
}

#[derive(Debug, Args)]
pub struct SummarizeArgs {
    /// The job directory.
    pub job_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// A job file whose `environment` says where to look (a swarm: its services, and the
    /// containers of every node); without it, the local engine.
    #[arg(short = 'c', long = "config")]
    pub config: Option<PathBuf>,
    /// Also remove task images (`terminus-task-*`) no container uses.
    #[arg(long)]
    pub images: bool,
}

#[derive(Debug, Subcommand)]
pub enum TextsCommand {
    /// Writes a `texts` directory from an installed Harbor: its Terminus 2 template files as they
    /// are, and the other texts read from its source. With it (and `model_view: reference`), a
    /// run shows the model what Harbor's Terminus 2 shows it. Exit 2 when that Python has no
    /// Harbor or its source no longer has a text where it is expected (the text is named).
    ImportHarbor(ImportHarborArgs),
}

#[derive(Debug, Args)]
pub struct ImportHarborArgs {
    /// The Python interpreter that has Harbor installed (`pip install harbor`).
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
    /// The directory to write (replaced if it exists).
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
}
