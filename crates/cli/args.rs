//! Command-line arguments. A job file is the source of truth; flags override its values.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXIT_CODES: &str = "Exit codes:
  0    every trial finished without an error (whatever its reward)
  1    the job finished, but some trials recorded an error
  2    the command line, the job file, a task or a registry dataset is invalid or cannot be
       fetched (nothing ran)
  3    the Docker engine cannot be reached (run scripts/setup.sh)
  4    the job stopped after too many restarts or on a full disk; `terminus resume` continues it
  5    the job directory is in use by another terminus (nothing ran)
  6    the job's budget is spent: trials left unstarted; `terminus resume --max-cost-usd` continues it
  7    the oracle preflight refused the job (`preflight: strict`, or no task's solution scores 1)
  8    live control: no terminus runs the job (it ended, or never started)
  9    live control: the job refused the request (the message says why)
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
    Run(Box<RunArgs>),
    /// Continues a job: keeps its finished trials, cleans up what a crash left, runs the rest.
    #[command(after_help = EXIT_CODES)]
    Resume(ResumeArgs),
    /// Single trials.
    #[command(subcommand)]
    Trials(TrialsCommand),
    /// Tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Datasets of Harbor's registries: the hub, a JSON registry, a registry file.
    #[command(subcommand)]
    Datasets(DatasetsCommand),
    /// Training traces from jobs' trajectories.
    #[command(subcommand)]
    Traces(TracesCommand),
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
    /// Serves a job queue with Harbor 0.26's HTTP API (`harbor run --server URL`, Harbor's
    /// Python client): jobs run with one limit on running trials over all of them, their
    /// rollouts and results are kept in SQLite, and a restart resumes what was running.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where the database and the jobs' directories live (made if missing).
    #[arg(long = "data-dir", default_value = "terminus-serve")]
    pub data_dir: PathBuf,
    /// The address to listen on. Anything but a loopback address needs HARBOR_API_KEY.
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    #[arg(long = "port", default_value_t = terminus_serve::DEFAULT_PORT)]
    pub port: u16,
    /// Trials running at once over every job (each job's n_concurrent_trials still applies).
    #[arg(long = "max-concurrent", default_value_t = 8)]
    pub max_concurrent: usize,
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
    /// Browses the jobs of a `terminus serve` at this URL instead (mirrored into a temporary
    /// directory every 2 s; a trial shows once it has ended).
    #[arg(long, value_name = "URL", conflicts_with = "jobs_dir")]
    pub server: Option<String>,
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
    /// Submits the job file to a `terminus serve` (or `harbor serve`) at this URL instead of
    /// running it here: prints the job's id; task paths are the server's.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// With --server: follows the job with a progress bar until it ends, then prints its scores
    /// and exits as `harbor run --watch` does (1 when any trial errored or was cancelled).
    #[arg(long, requires = "server")]
    pub watch: bool,
}

/// Flags that override the job file.
#[derive(Debug, Args, Default)]
pub struct JobFlags {
    /// A task directory or a dataset directory (repeatable); replaces the file's tasks and datasets.
    #[arg(short = 'p', long = "path")]
    pub paths: Vec<PathBuf>,
    /// A registry dataset, NAME@VERSION or NAME (its best version; repeatable); replaces the
    /// file's tasks and datasets. Its tasks are fetched into the task cache before the job starts.
    #[arg(short = 'd', long = "dataset", value_name = "NAME[@VERSION]")]
    pub datasets: Vec<String>,
    #[command(flatten)]
    pub registry: RegistryFlags,
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
    /// Shows only the overall progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Starts without checking the agents' API keys and endpoints first.
    #[arg(long)]
    pub skip_credential_checks: bool,
    /// Runs every task's own solution first (the oracle agent) and leaves out the tasks whose
    /// solution does not score 1; `--preflight=strict` refuses the job instead.
    #[arg(long, value_name = "MODE", value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "oracle")]
    pub preflight: Option<PreflightArg>,
    #[command(flatten)]
    pub budget: BudgetFlags,
}

/// `--preflight[=MODE]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PreflightArg {
    None,
    Oracle,
    Strict,
}

/// The registry datasets are read from.
#[derive(Debug, Args, Default, Clone)]
pub struct RegistryFlags {
    /// A Harbor registry file (registry.json, or a directory holding one), for every dataset
    /// given by name.
    #[arg(long = "registry-path", value_name = "FILE")]
    pub registry_path: Option<PathBuf>,
    /// A registry URL: a JSON registry over http(s)://, or a file:// one; Harbor's default
    /// registry URL means the Harbor hub. With neither flag, datasets come from the Harbor hub
    /// (HARBOR_SUPABASE_URL and HARBOR_SUPABASE_PUBLISHABLE_KEY move it, as in Harbor).
    #[arg(long = "registry-url", value_name = "URL", conflicts_with = "registry_path")]
    pub registry_url: Option<String>,
    /// A git repository whose registry.json lists the datasets (Harbor's `--repo`: `org/name`,
    /// a git URL, `…@ref`); with it, --registry-path is a path inside the repository.
    #[arg(long = "repo", value_name = "SOURCE", conflicts_with = "registry_url")]
    pub repo: Option<String>,
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
    /// Cancels one trial of a running job: a queued trial never starts, a running one stops and
    /// its container is removed; its result records `CancelledError`.
    #[command(after_help = EXIT_CODES)]
    Cancel(TrialControlArgs),
    /// Runs a finished trial of a running job again: its files move under `attempts/<n>/` and it
    /// goes first in line.
    #[command(after_help = EXIT_CODES)]
    Retry(TrialControlArgs),
    /// Replays a recorded trial in a fresh container: its model's recorded replies, so its
    /// keystrokes and waits, typed through the same terminal (no model is asked, no key is
    /// needed); each episode's prompt is compared with the recorded one, the first divergence
    /// reported, then the tests run. The replay is a new trial directory; the original is not
    /// touched.
    Replay(TrialReplayArgs),
}

#[derive(Debug, Args)]
pub struct TrialControlArgs {
    /// The trial's directory (JOB_DIR/TRIAL_NAME).
    pub trial_dir: PathBuf,
    /// Prints the job's status after the change as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TrialReplayArgs {
    /// The trial directory (jobs_dir/job_name/trial_name).
    pub trial_dir: PathBuf,
    /// Where the replay's job directory (<trial_name>__replay-<time>) is made.
    #[arg(short = 'o', long = "output", default_value = "replays")]
    pub output: PathBuf,
    /// Takes the task from DIR instead of where the trial took it (changed tests, say): the
    /// task directory in DIR, at any depth, whose task.toml name (else directory name) is the
    /// trial's task name.
    #[arg(long = "tasks-from", value_name = "DIR")]
    pub tasks_from: Option<PathBuf>,
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
    /// (or finds or pulls the prebuilt one); with --oracle, runs each task's own solution once
    /// and lists the tasks whose solution does not score 1 (exit 1 when one does not).
    Check(TaskCheckArgs),
}

#[derive(Debug, Args)]
pub struct TaskCheckArgs {
    /// Task directories or dataset directories.
    #[arg(value_name = "PATH", required_unless_present = "dataset")]
    pub paths: Vec<PathBuf>,
    /// Also build each task's image.
    #[arg(long, conflicts_with = "oracle")]
    pub build: bool,
    /// Runs each task's solution (the oracle agent) once, all in one job, and lists the tasks
    /// that do not score 1, each with its reason.
    #[arg(long)]
    pub oracle: bool,
    /// With --oracle: a registry dataset, NAME[@VERSION], instead of (or besides) PATHs.
    #[arg(short = 'd', long = "dataset", value_name = "NAME[@VERSION]", requires = "oracle")]
    pub dataset: Option<String>,
    #[command(flatten)]
    pub registry: RegistryFlags,
    /// With --oracle: how many tasks run at once.
    #[arg(short = 'n', long = "n-concurrent", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub n_concurrent: u32,
    /// With --oracle: where the oracle job's directory (tasks-check__<time>) is made.
    #[arg(short = 'o', long = "jobs-dir", default_value = "jobs")]
    pub jobs_dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// Lists a registry's datasets: name, version, number of tasks, description.
    List(DatasetsListArgs),
    /// Shows what a dataset name resolves to: its version and tasks (repository, commit, path).
    Show(DatasetsShowArgs),
    /// Fetches a dataset's tasks into the task cache (TERMINUS_CACHE_DIR, default
    /// ~/.cache/terminus) and prints where each is; `run -d` does the same before a job.
    Fetch(DatasetsFetchArgs),
}

#[derive(Debug, Args)]
pub struct DatasetsListArgs {
    #[command(flatten)]
    pub registry: RegistryFlags,
}

#[derive(Debug, Args)]
pub struct DatasetsShowArgs {
    /// The dataset: NAME@VERSION, or NAME for its best version.
    #[arg(value_name = "NAME[@VERSION]")]
    pub dataset: String,
    #[command(flatten)]
    pub registry: RegistryFlags,
    /// Prints the dataset as JSON (Harbor's registry entry: name, version, description, tasks,
    /// metrics).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DatasetsFetchArgs {
    /// The dataset: NAME@VERSION, or NAME for its best version.
    #[arg(value_name = "NAME[@VERSION]")]
    pub dataset: String,
    #[command(flatten)]
    pub registry: RegistryFlags,
    /// Shows no progress.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Prints the summary tables of a job directory.
    Summarize(SummarizeArgs),
    /// Replays every trial of a job that finished without an error (as `trials replay`, under
    /// the job's concurrency) and grades it with the task's current tests, or those of
    /// --tasks-from; writes a new job directory and reports, per task, the rewards that changed.
    Regrade(RegradeArgs),
    /// Shows a running job: paused or not, its limit, its budget, and where each trial is.
    #[command(after_help = EXIT_CODES)]
    Status(JobControlArgs),
    /// Pauses a running job: no new trial starts; running ones go on.
    #[command(after_help = EXIT_CODES)]
    Pause(JobControlArgs),
    /// Resumes a paused job's admission (`terminus resume` continues a job that stopped).
    #[command(after_help = EXIT_CODES)]
    Resume(JobControlArgs),
    /// Changes a running job's n_concurrent_trials or budget (for this run: a resume reads the
    /// job file again).
    #[command(after_help = EXIT_CODES)]
    Set(JobSetArgs),
}

#[derive(Debug, Args)]
pub struct JobControlArgs {
    /// The job directory (jobs_dir/job_name).
    pub job_dir: PathBuf,
    /// Prints the job's status as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JobSetArgs {
    #[command(flatten)]
    pub job: JobControlArgs,
    /// How many trials may run at once (running ones are never stopped for it).
    #[arg(short = 'n', long = "n-concurrent", value_parser = clap::value_parser!(u32).range(1..))]
    pub n_concurrent: Option<u32>,
    #[command(flatten)]
    pub budget: BudgetFlags,
}

#[derive(Debug, Args)]
pub struct RegradeArgs {
    /// The job directory to regrade (it is not touched).
    pub job_dir: PathBuf,
    /// The new job directory (default: JOB_DIR__regrade-<time> beside it); an existing one with
    /// the same configuration is continued.
    #[arg(short = 'o', long = "output", value_name = "NEW_JOB")]
    pub output: Option<PathBuf>,
    /// Takes each task from DIR instead of where the job took it: the task directory in DIR, at
    /// any depth, whose task.toml name (else directory name) is the task's name.
    #[arg(long = "tasks-from", value_name = "DIR")]
    pub tasks_from: Option<PathBuf>,
    /// Overrides the job's `n_concurrent_trials`.
    #[arg(short = 'n', long = "n-concurrent", value_parser = clap::value_parser!(u32).range(1..))]
    pub n_concurrent: Option<u32>,
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
pub enum TracesCommand {
    /// Writes the trajectories of every trial at or below a directory (a job, a jobs directory,
    /// a trial) as the rows of Harbor 0.26's `harbor traces export`: one per episode of each main
    /// trajectory (continuations followed), one per subagent trajectory (`trace_source` names
    /// it), as JSON Lines that HuggingFace `datasets` loads (`load_dataset("json", …)`).
    Export(TracesExportArgs),
}

/// Which trials a trace export keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFilter {
    All,
    Success,
    Failure,
}

/// Which episodes a trace export keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceEpisodes {
    All,
    Last,
}

/// The formats of `traces export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TraceFormat {
    /// Rows of a HuggingFace dataset, as JSON Lines.
    Hf,
    /// OpenTelemetry spans (Harbor's `harbor-atif2otel`): not built; refused with exit 2.
    Otel,
}

#[derive(Debug, Args)]
pub struct TracesExportArgs {
    /// A job directory, a jobs directory or a trial directory.
    #[arg(value_name = "DIR", required_unless_present = "path", conflicts_with = "path")]
    pub dir: Option<PathBuf>,
    /// The same, as Harbor names it.
    #[arg(short = 'p', long = "path", value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// Where the rows go (JSON Lines; default `traces.jsonl` in the working directory).
    #[arg(short = 'o', long = "output", value_name = "FILE", default_value = "traces.jsonl")]
    pub output: PathBuf,
    /// Only DIR itself, not the trials below it.
    #[arg(long = "no-recursive")]
    pub no_recursive: bool,
    /// Every episode, or each trial's last.
    #[arg(long, value_enum, default_value_t = TraceEpisodes::All)]
    pub episodes: TraceEpisodes,
    /// Adds a `conversations_sharegpt` column (`{from: human|gpt|system, value}`).
    #[arg(long)]
    pub sharegpt: bool,
    /// Keeps trials whose result is a reward above 0 (success) or not (failure).
    #[arg(long, value_enum, default_value_t = TraceFilter::All)]
    pub filter: TraceFilter,
    /// Leaves subagent trajectories (the summarization's) out.
    #[arg(long = "no-subagents")]
    pub no_subagents: bool,
    /// Adds an `instruction` column.
    #[arg(long = "instruction-metadata")]
    pub instruction_metadata: bool,
    /// Adds a `verifier_output` column (the verifier's stdout and stderr).
    #[arg(long = "verifier-metadata")]
    pub verifier_metadata: bool,
    /// `hf` (rows of a HuggingFace dataset) or `otel`.
    #[arg(short = 'f', long, value_enum, default_value_t = TraceFormat::Hf)]
    pub format: TraceFormat,
    /// Prints each trial left out, and why.
    #[arg(long)]
    pub verbose: bool,
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

#[cfg(test)]
mod tests;
