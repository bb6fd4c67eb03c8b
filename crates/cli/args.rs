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
    /// Datasets of a Harbor registry file (registry.json).
    #[command(subcommand)]
    Datasets(DatasetsCommand),
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
    /// Keeps task images after the job (containers are always removed).
    #[arg(long)]
    pub no_delete: bool,
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
    /// Replays a recorded trial in a fresh container: its model's recorded replies, so its
    /// keystrokes and waits, typed through the same terminal (no model is asked, no key is
    /// needed); each episode's prompt is compared with the recorded one, the first divergence
    /// reported, then the tests run. The replay is a new trial directory; the original is not
    /// touched.
    Replay(TrialReplayArgs),
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
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use clap::CommandFactory;
    use clap::error::ErrorKind;

    use super::*;
    use crate::exit;

    fn parse(argv: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("terminus").chain(argv.iter().copied()))
    }

    fn run(argv: &[&str]) -> RunArgs {
        match parse(&[&["run"], argv].concat()).unwrap().command {
            Command::Run(args) => *args,
            other => panic!("not run: {other:?}"),
        }
    }

    fn resume(argv: &[&str]) -> ResumeArgs {
        match parse(&[&["resume"], argv].concat()).unwrap().command {
            Command::Resume(args) => args,
            other => panic!("not resume: {other:?}"),
        }
    }

    fn refused(argv: &[&str]) -> clap::Error {
        parse(argv).expect_err("the command line is refused")
    }

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn preflight_is_off_oracle_or_strict() {
        assert_eq!(run(&["-p", "t"]).job.preflight, None);
        assert_eq!(run(&["-p", "t", "--preflight"]).job.preflight, Some(PreflightArg::Oracle));
        assert_eq!(run(&["--preflight", "-p", "t"]).job.preflight, Some(PreflightArg::Oracle));
        assert_eq!(run(&["-p", "t", "--preflight=strict"]).job.preflight, Some(PreflightArg::Strict));
        assert!(parse(&["run", "-p", "t", "--preflight=maybe"]).is_err());
    }

    /// The `terminus` command lines of a Markdown file's shell blocks, without environment
    /// assignments or trailing comments; synopsis lines (`[…]`, `|`) are not commands.
    fn documented_commands(markdown: &str) -> Vec<Vec<String>> {
        let mut in_shell = false;
        let mut out = Vec::new();
        for line in markdown.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("```") {
                in_shell = trimmed == "```sh";
                continue;
            }
            let command = trimmed.split(" #").next().unwrap_or_default();
            if !in_shell || command.contains(['[', '|']) {
                continue;
            }
            let words: Vec<String> =
                command.split_whitespace().skip_while(|w| w.contains('=')).map(String::from).collect();
            if words.first().is_some_and(|w| w == "terminus" || w.ends_with("/terminus")) {
                out.push(words[1..].to_vec());
            }
        }
        out
    }

    #[test]
    fn every_terminus_command_in_the_readme_parses_as_written() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let commands = documented_commands(&readme);
        assert!(commands.len() >= 5, "the reader found {} commands in the README: it is broken", commands.len());
        for argv in commands {
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            if let Err(e) = parse(&argv) {
                panic!("README: `terminus {}` does not parse: {e}", argv.join(" "));
            }
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_reads_every_job_flag() {
        let args = run(&[
            "-c",
            "job.yaml",
            "-p",
            "tasks/a",
            "-t",
            "hello-*",
            "-x",
            "slow-*",
            "-a",
            "terminus-2",
            "-m",
            "openai/gpt-4o",
            "--ak",
            "max_turns=5",
            "--job-name",
            "nightly",
            "-o",
            "out",
            "-n",
            "8",
            "-k",
            "3",
            "--force-build",
            "--no-delete",
            "-q",
            "--max-cost-usd",
            "2.5",
            "--max-tokens",
            "100000",
        ]);
        assert_eq!(args.config, Some(PathBuf::from("job.yaml")));
        let job = &args.job;
        assert_eq!(job.paths, [PathBuf::from("tasks/a")]);
        assert_eq!(job.include, ["hello-*"]);
        assert_eq!(job.exclude, ["slow-*"]);
        assert_eq!(job.agent.as_deref(), Some("terminus-2"));
        assert_eq!(job.models, ["openai/gpt-4o"]);
        assert_eq!(job.agent_kwargs, ["max_turns=5"]);
        assert_eq!(job.job_name.as_deref(), Some("nightly"));
        assert_eq!(job.jobs_dir, Some(PathBuf::from("out")));
        assert_eq!((job.n_concurrent, job.n_attempts), (Some(8), Some(3)));
        assert!(job.force_build && job.no_delete && job.quiet);
        assert_eq!((job.budget.max_cost_usd, job.budget.max_tokens), (Some(2.5), Some(100_000)));
    }

    #[test]
    fn registry_datasets_are_named_with_their_registry() {
        let args = run(&["-d", "terminal-bench@2.0", "--dataset", "hello", "--registry-path", "registry.json"]);
        assert_eq!(args.job.datasets, ["terminal-bench@2.0", "hello"]);
        assert_eq!(args.job.registry.registry_path, Some(PathBuf::from("registry.json")));
        let both = refused(&["run", "-d", "x", "--registry-path", "r.json", "--registry-url", "file:///r.json"]);
        assert_eq!(both.kind(), ErrorKind::ArgumentConflict);
        let Command::Datasets(DatasetsCommand::List(list)) =
            parse(&["datasets", "list", "--registry-url", "file:///r.json"]).unwrap().command
        else {
            panic!("not datasets list")
        };
        assert_eq!(list.registry.registry_url.as_deref(), Some("file:///r.json"));
        let Command::Datasets(DatasetsCommand::Fetch(fetch)) =
            parse(&["datasets", "fetch", "hello@1.0", "-q", "--registry-path", "r"]).unwrap().command
        else {
            panic!("not datasets fetch")
        };
        assert_eq!((fetch.dataset.as_str(), fetch.quiet), ("hello@1.0", true));
    }

    #[test]
    fn run_without_flags_leaves_every_value_to_the_job_file() {
        let args = run(&["-c", "job.yaml"]);
        let job = &args.job;
        assert!(job.paths.is_empty() && job.include.is_empty() && job.exclude.is_empty());
        assert!(job.datasets.is_empty() && job.registry.registry_path.is_none() && job.registry.registry_url.is_none());
        assert!(job.agent.is_none() && job.models.is_empty() && job.agent_kwargs.is_empty());
        assert!(job.job_name.is_none() && job.jobs_dir.is_none());
        assert!(job.n_concurrent.is_none() && job.n_attempts.is_none());
        assert!(!job.force_build && !job.no_delete && !job.quiet);
        assert!(job.budget.max_cost_usd.is_none() && job.budget.max_tokens.is_none());
        assert!(!args.view.view);
        assert_eq!((args.view.view_port, args.view.view_host), (terminus_view::DEFAULT_PORT, LOOPBACK));
    }

    #[test]
    fn run_takes_paths_models_and_agent_kwargs_repeatedly_in_order() {
        let args = run(&["-p", "a", "--path", "b", "-m", "m1", "--model", "m2", "--ak", "x=1", "--ak", "y=2"]);
        assert_eq!(args.job.paths, [PathBuf::from("a"), PathBuf::from("b")]);
        assert_eq!(args.job.models, ["m1", "m2"]);
        assert_eq!(args.job.agent_kwargs, ["x=1", "y=2"]);
        assert_eq!(args.config, None);
    }

    #[test]
    fn run_reads_the_viewer_flags() {
        let args = run(&["-p", "a", "--view", "--view-port", "0", "--view-host", "0.0.0.0"]);
        assert!(args.view.view);
        assert_eq!(args.view.view_port, 0);
        assert_eq!(args.view.view_host, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn run_refuses_an_unknown_flag_naming_it() {
        let err = refused(&["run", "-p", "a", "--bogus"]);
        assert_eq!(err.kind(), ErrorKind::UnknownArgument);
        assert!(err.to_string().contains("--bogus"), "{err}");
    }

    #[test]
    fn numeric_flags_refuse_what_is_not_their_number_naming_the_flag() {
        for (argv, flag) in [
            (&["run", "-n", "lots"][..], "--n-concurrent"),
            (&["run", "-k", "1.5"], "--n-attempts"),
            (&["run", "--max-cost-usd", "ten"], "--max-cost-usd"),
            (&["run", "--max-tokens", "1e6"], "--max-tokens"),
            (&["run", "--view-port", "70000"], "--view-port"),
            (&["resume", "j", "--n-concurrent=-1"], "--n-concurrent"),
        ] {
            let err = refused(argv);
            assert!(err.to_string().contains(flag), "{argv:?}: {err}");
        }
    }

    #[test]
    fn viewer_addresses_must_be_ip_addresses() {
        let err = refused(&["run", "--view-host", "localhost"]);
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert!(err.to_string().contains("--view-host"), "{err}");
        assert_eq!(refused(&["view", "--host", "my-box"]).kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn resume_reads_its_job_directory_and_flags() {
        let args =
            resume(&["jobs/j", "--only", "errored", "-n", "3", "-q", "--max-cost-usd", "4", "--max-tokens", "9"]);
        assert_eq!(args.job_dir, PathBuf::from("jobs/j"));
        assert!(matches!(args.only, Some(OnlyArg::Errored)));
        assert_eq!(args.n_concurrent, Some(3));
        assert!(args.quiet);
        assert_eq!((args.budget.max_cost_usd, args.budget.max_tokens), (Some(4.0), Some(9)));
        assert!(args.config.is_none() && !args.view.view);
        let args = resume(&["jobs/j", "--only", "cancelled", "-c", "job.yaml", "--view"]);
        assert!(matches!(args.only, Some(OnlyArg::Cancelled)));
        assert_eq!(args.config, Some(PathBuf::from("job.yaml")));
        assert!(args.view.view);
        assert!(resume(&["jobs/j"]).only.is_none());
    }

    #[test]
    fn resume_needs_the_job_directory() {
        assert_eq!(refused(&["resume"]).kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn resume_refuses_an_unknown_only_value_listing_the_choices() {
        let err = refused(&["resume", "j", "--only", "failed"]);
        assert_eq!(err.kind(), ErrorKind::InvalidValue);
        let text = err.to_string();
        assert!(text.contains("errored") && text.contains("cancelled"), "{text}");
    }

    #[test]
    fn resume_does_not_take_the_flags_that_would_make_another_job() {
        for flag in [&["-m", "other-model"][..], &["-p", "tasks"], &["-k", "2"], &["--ak", "x=1"]] {
            let err = refused(&[&["resume", "j"], flag].concat());
            assert_eq!(err.kind(), ErrorKind::UnknownArgument, "{flag:?}");
        }
    }

    #[test]
    fn trials_start_runs_the_oracle_into_trials_unless_told_otherwise() {
        let Command::Trials(TrialsCommand::Start(args)) = parse(&["trials", "start", "-p", "tasks/x"]).unwrap().command
        else {
            panic!("not trials start")
        };
        assert_eq!(args.path, PathBuf::from("tasks/x"));
        assert_eq!(args.trials_dir, PathBuf::from("trials"));
        assert_eq!(args.agent, "oracle");
        assert!(args.model.is_none() && args.agent_kwargs.is_empty());
        let Command::Trials(TrialsCommand::Start(args)) = parse(&[
            "trials",
            "start",
            "-p",
            "t",
            "--trials-dir",
            "elsewhere",
            "-a",
            "terminus-2",
            "-m",
            "m",
            "--ak",
            "k=v",
        ])
        .unwrap()
        .command
        else {
            panic!("not trials start")
        };
        assert_eq!(args.trials_dir, PathBuf::from("elsewhere"));
        assert_eq!((args.agent.as_str(), args.model.as_deref()), ("terminus-2", Some("m")));
        assert_eq!(args.agent_kwargs, ["k=v"]);
    }

    #[test]
    fn trials_start_needs_a_task_and_takes_one_model() {
        assert_eq!(refused(&["trials", "start"]).kind(), ErrorKind::MissingRequiredArgument);
        assert_eq!(refused(&["trials", "start", "-p", "t", "-m", "a", "-m", "b"]).kind(), ErrorKind::ArgumentConflict);
    }

    #[test]
    fn the_small_subcommands_read_their_arguments() {
        let Command::Tasks(TasksCommand::Check(check)) = parse(&["tasks", "check", "ds", "--build"]).unwrap().command
        else {
            panic!("not tasks check")
        };
        assert_eq!((check.paths, check.build, check.oracle), (vec![PathBuf::from("ds")], true, false));
        let Command::Tasks(TasksCommand::Check(check)) =
            parse(&["tasks", "check", "--oracle", "a", "b", "-n", "2"]).unwrap().command
        else {
            panic!("not tasks check")
        };
        assert_eq!((check.paths.len(), check.oracle, check.n_concurrent), (2, true, 2));
        assert!(parse(&["tasks", "check", "-d", "x@1"]).is_err(), "-d needs --oracle");
        assert!(parse(&["tasks", "check"]).is_err(), "a path or a dataset is needed");
        assert!(parse(&["tasks", "check", "--oracle", "-d", "x@1"]).is_ok());
        let Command::Jobs(JobsCommand::Summarize(summarize)) = parse(&["jobs", "summarize", "jobs/j"]).unwrap().command
        else {
            panic!("not jobs summarize")
        };
        assert_eq!(summarize.job_dir, PathBuf::from("jobs/j"));
        let Command::Gc(gc) = parse(&["gc"]).unwrap().command else { panic!("not gc") };
        assert!(gc.config.is_none() && !gc.images);
        let Command::Gc(gc) = parse(&["gc", "-c", "swarm.yaml", "--images"]).unwrap().command else { panic!("not gc") };
        assert_eq!((gc.config, gc.images), (Some(PathBuf::from("swarm.yaml")), true));
    }

    #[test]
    fn view_serves_jobs_on_the_loopback_address_by_default() {
        let Command::View(view) = parse(&["view"]).unwrap().command else { panic!("not view") };
        assert_eq!(view.jobs_dir, PathBuf::from("jobs"));
        assert_eq!((view.listen.port, view.listen.host), (terminus_view::DEFAULT_PORT, LOOPBACK));
        let Command::View(view) = parse(&["view", "runs", "--port", "0", "--host", "::1"]).unwrap().command else {
            panic!("not view")
        };
        assert_eq!(view.jobs_dir, PathBuf::from("runs"));
        assert_eq!(view.listen.port, 0);
        assert!(view.listen.host.is_loopback() && view.listen.host.is_ipv6());
    }

    #[test]
    fn import_harbor_needs_an_output_directory_and_defaults_to_python3() {
        assert_eq!(refused(&["texts", "import-harbor"]).kind(), ErrorKind::MissingRequiredArgument);
        let Command::Texts(TextsCommand::ImportHarbor(args)) =
            parse(&["texts", "import-harbor", "-o", "texts"]).unwrap().command
        else {
            panic!("not import-harbor")
        };
        assert_eq!((args.python, args.out), (PathBuf::from("python3"), PathBuf::from("texts")));
    }

    #[test]
    fn a_subcommand_is_required_and_an_unknown_one_refused() {
        assert!(parse(&[]).is_err());
        let err = refused(&["launch"]);
        assert_eq!(err.kind(), ErrorKind::InvalidSubcommand);
        assert!(err.to_string().contains("launch"), "{err}");
        assert_eq!(refused(&["jobs"]).kind(), ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand);
    }

    const ALL_CODES: [u8; 9] = [
        exit::OK,
        exit::TRIAL_ERRORS,
        exit::INVALID,
        exit::NO_DOCKER,
        exit::HALTED,
        exit::BUSY,
        exit::BUDGET,
        exit::PREFLIGHT,
        exit::INTERRUPTED,
    ];

    /// The codes a text lists, one per line that starts (after `prefix`) with a number.
    fn listed_codes(text: &str, prefix: &str) -> Vec<u8> {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix(prefix))
            .filter_map(|l| l.split([' ', ':']).next()?.parse().ok())
            .collect()
    }

    #[test]
    fn the_help_lists_exactly_the_exit_codes_there_are() {
        assert_eq!(listed_codes(EXIT_CODES, ""), ALL_CODES);
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains(EXIT_CODES.lines().last().unwrap()), "{help}");
        let mut command = Cli::command();
        let run_help = command.find_subcommand_mut("run").unwrap().render_long_help().to_string();
        assert!(run_help.contains("Exit codes:"), "{run_help}");
    }

    #[test]
    fn the_crate_doc_lists_exactly_the_exit_codes_there_are() {
        assert_eq!(listed_codes(include_str!("main.rs"), "//! - "), ALL_CODES);
    }
}
