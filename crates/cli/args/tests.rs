//! The command line's parsing: flags, defaults and conflicts.
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
        let words: Vec<String> = command.split_whitespace().skip_while(|w| w.contains('=')).map(String::from).collect();
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
    assert!(job.force_build && job.quiet);
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
    assert!(!job.force_build && !job.quiet);
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
    let args = resume(&["jobs/j", "--only", "errored", "-n", "3", "-q", "--max-cost-usd", "4", "--max-tokens", "9"]);
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

const ALL_CODES: [u8; 11] = [
    exit::OK,
    exit::TRIAL_ERRORS,
    exit::INVALID,
    exit::NO_DOCKER,
    exit::HALTED,
    exit::BUSY,
    exit::BUDGET,
    exit::PREFLIGHT,
    exit::NOT_RUNNING,
    exit::REFUSED,
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
    assert_eq!(listed_codes(include_str!("../main.rs"), "//! - "), ALL_CODES);
}

#[test]
fn no_delete_is_not_a_flag_since_nothing_would_be_kept_by_it() {
    // Containers are always removed and task images always kept: Harbor's `--no-delete` would
    // change nothing here, so it is refused rather than accepted and ignored.
    assert_eq!(refused(&["run", "-p", "tasks", "--no-delete"]).kind(), ErrorKind::UnknownArgument);
}
