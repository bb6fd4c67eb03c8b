//! Registry datasets on the command line: `datasets list` and `datasets fetch`, and the fetch of
//! a job's git tasks before it starts (`fetch_tasks`), shown as a progress bar on a terminal
//! (plain lines otherwise, nothing with `quiet`). Every failure here exits 2, naming the
//! registry, the dataset, the repository, the commit or the path.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use terminus_config::TaskRef;
use terminus_config::registry::{self, Registry, RegistryError, RegistryLocation, TaskCache};
use terminus_fetch::{DatasetSummary, FetchEvent, FetchReport, NetworkResolver};

use crate::args::{DatasetsFetchArgs, DatasetsListArgs, DatasetsShowArgs, RegistryFlags};
use crate::exit;
use crate::exit::invalid;

/// The resolver every command of this program asks network registries with: Harbor's hub and
/// JSON registries over HTTP(S), its answers kept in the task cache.
pub fn install_resolver() {
    registry::install_resolver(std::sync::Arc::new(NetworkResolver::new(TaskCache::from_env())));
}

fn location(flags: &RegistryFlags) -> Result<RegistryLocation, RegistryError> {
    RegistryLocation::from_dataset_keys(
        flags.repo.as_deref(),
        flags.registry_url.as_deref(),
        flags.registry_path.as_deref(),
    )
}

/// `terminus datasets list`: one line per dataset version, in the registry's order.
pub async fn list(args: DatasetsListArgs) -> u8 {
    let location = match location(&args.registry) {
        Ok(location) => location,
        Err(e) => return invalid(e),
    };
    let listed = match location.path() {
        Some(_) => Registry::read(&location).map(|registry| registry.datasets.iter().map(DatasetSummary::of).collect()),
        None => {
            let asked = location.clone();
            let listed = tokio::task::spawn_blocking(move || NetworkResolver::new(None).list(&asked)).await;
            listed.unwrap_or_else(|e| Err(RegistryError::NoResolver { registry: format!("{location} ({e})") }))
        }
    };
    let datasets = match listed {
        Ok(datasets) => datasets,
        Err(e) => return invalid(e),
    };
    print!("{}", table(&datasets));
    let tasks: usize = datasets.iter().map(|d| d.task_count).sum();
    println!("{} datasets, {tasks} tasks in {location}", datasets.len());
    exit::OK
}

/// The datasets as aligned columns: name, version, task count, description (its first line).
fn table(datasets: &[DatasetSummary]) -> String {
    let rows: Vec<[String; 4]> = datasets
        .iter()
        .map(|d| {
            let description = d.description.lines().next().unwrap_or_default().to_string();
            [d.name.clone(), d.version.clone(), d.task_count.to_string(), description]
        })
        .collect();
    let header = ["NAME", "VERSION", "TASKS", "DESCRIPTION"].map(String::from);
    let width = |col: usize| std::iter::once(&header).chain(&rows).map(|r| r[col].chars().count()).max().unwrap_or(0);
    let (name, version, count) = (width(0), width(1), width(2));
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let line = format!("{:<name$}  {:<version$}  {:>count$}  {}", row[0], row[1], row[2], row[3]);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `terminus datasets show NAME[@VERSION] [--json]`: what the name resolves to, from the
/// registry (or the cache of an earlier resolution, said on stderr).
pub async fn show(args: DatasetsShowArgs) -> u8 {
    let resolved = tokio::task::block_in_place(|| {
        let location = location(&args.registry)?;
        let (name, version) = split_name(&args.dataset);
        registry::resolve(&location, name, version)
    });
    let resolution = match resolved {
        Ok(resolution) => resolution,
        Err(e) => return invalid(e),
    };
    let spec = &resolution.spec;
    if let Some(why) = &resolution.from_cache {
        eprintln!("warning: {}@{} resolved from the cache: {why}", spec.name, spec.version);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(spec).unwrap_or_default());
        return exit::OK;
    }
    println!("{}@{}: {} tasks", spec.name, spec.version, spec.tasks.len());
    for task in &spec.tasks {
        let commit = task.git_commit_id.as_deref().unwrap_or("-");
        println!("{}\t{}\t{commit}\t{}", task.name, task.git_url.as_deref().unwrap_or("(local)"), task.path);
    }
    exit::OK
}

/// `NAME@VERSION` as (NAME, VERSION); `NAME` as (NAME, None).
fn split_name(dataset: &str) -> (&str, Option<&str>) {
    match dataset.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (dataset, None),
    }
}

/// `terminus datasets fetch NAME[@VERSION]`: fetches the dataset's git tasks and prints each
/// task's name and where it is.
pub async fn fetch(args: DatasetsFetchArgs) -> u8 {
    let tasks = match tokio::task::block_in_place(|| dataset_tasks(&args)) {
        Ok(tasks) => tasks,
        Err(e) => return invalid(e),
    };
    let report = match fetch_tasks(&tasks, args.quiet).await {
        Ok(report) => report,
        Err(code) => return code,
    };
    for task in &tasks {
        println!("{}\t{}", task.name, task.path.display());
    }
    if !args.quiet {
        eprintln!("{} tasks: {} fetched, {} already in the cache", tasks.len(), report.fetched, report.cached);
    }
    exit::OK
}

fn dataset_tasks(args: &DatasetsFetchArgs) -> Result<Vec<TaskRef>, RegistryError> {
    let location = location(&args.registry)?;
    let (name, version) = split_name(&args.dataset);
    let resolution = registry::resolve(&location, name, version)?;
    if let Some(why) = &resolution.from_cache {
        eprintln!("warning: {name}@{} resolved from the cache: {why}", resolution.spec.version);
    }
    let spec = resolution.spec;
    let cache = TaskCache::from_env();
    let tasks: Vec<TaskRef> = spec.task_refs(&location, cache.as_ref())?.into_iter().map(|(_, t)| t).collect();
    for task in &tasks {
        spec.check_local(&location, task)?;
    }
    Ok(tasks)
}

/// Fetches the git tasks of `tasks` that the cache lacks (none: nothing runs), showing progress
/// unless `quiet`; exit 2 when one cannot be fetched.
pub async fn fetch_tasks(tasks: &[TaskRef], quiet: bool) -> Result<FetchReport, u8> {
    if tasks.iter().all(|t| t.git.is_none()) {
        return Ok(FetchReport::default());
    }
    let tasks = tasks.to_vec();
    let fetched = tokio::task::spawn_blocking(move || {
        let mut progress = Progress { quiet, terminal: std::io::stderr().is_terminal(), bar: None };
        let result = terminus_fetch::fetch(&tasks, &mut |event| progress.show(event));
        if let Some(bar) = progress.bar {
            bar.finish_and_clear();
        }
        result.map_err(Box::new)
    })
    .await;
    match fetched {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(invalid(e)),
        Err(e) => Err(invalid(format!("the fetch of the tasks stopped: {e}"))),
    }
}

/// What the user sees of a fetch: a bar on a terminal, else a line per checkout.
struct Progress {
    quiet: bool,
    terminal: bool,
    bar: Option<ProgressBar>,
}

impl Progress {
    fn show(&mut self, event: FetchEvent) {
        if self.quiet {
            return;
        }
        match event {
            FetchEvent::Planned { tasks, missing } if missing > 0 => {
                let line = format!("fetching {missing} of {tasks} tasks from git into the task cache");
                if self.terminal {
                    let bar = ProgressBar::with_draw_target(Some(missing as u64), ProgressDrawTarget::stderr());
                    let style = ProgressStyle::with_template("{spinner} tasks {pos}/{len} [{elapsed}] {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                    bar.set_style(style);
                    bar.enable_steady_tick(std::time::Duration::from_millis(200));
                    bar.println(line);
                    self.bar = Some(bar);
                } else {
                    eprintln!("{line}");
                }
            }
            FetchEvent::Planned { .. } => {}
            FetchEvent::Waiting { cache } => {
                self.say(&format!("waiting for another terminus fetching into {}", cache.display()))
            }
            FetchEvent::Checkout { git_url, commit, tasks } => {
                let text = format!("{git_url} at {} ({tasks} tasks)", &commit[..commit.len().min(12)]);
                match &self.bar {
                    Some(bar) => bar.set_message(text),
                    None => eprintln!("fetching {text}"),
                }
            }
            FetchEvent::Placed { .. } => {
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                }
            }
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_aligned_in_columns() {
        let spec = |name: &str, version: &str, n: usize, description: &str| DatasetSummary {
            name: name.into(),
            version: version.into(),
            description: description.into(),
            task_count: n,
        };
        let text = table(&[spec("hello", "1.0", 2, "Hello.\nMore."), spec("terminal-bench", "2.0", 89, "")]);
        assert_eq!(
            text,
            "NAME            VERSION  TASKS  DESCRIPTION\nhello           1.0          2  Hello.\nterminal-bench  2.0         89\n"
        );
    }
}
