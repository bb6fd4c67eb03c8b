//! Chaos case bad-inputs: broken job files and broken tasks, each refused by name with the
//! documented exit code, and nothing already done lost.

use crate::case::*;
use crate::faults::{changed, snapshot};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use terminus_bench::{Tally, hello_world_script, job_id, spawn_terminus, terminus_bin, trial_results};
use terminus_mock_llm::MockServer;
use terminus_sandbox::LABEL_JOB_ID;

/// Malformed job files: (file stem, YAML, words the error must contain besides the file name).
pub(super) fn bad_job_files(task: &Path, api_base: &str) -> Vec<(&'static str, String, Vec<&'static str>)> {
    let task = task.display();
    let head = |jobs: &str| format!("jobs_dir: {jobs}\njob_name: bad\n");
    let agent = format!(
        "agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api_base}\n"
    );
    let tasks = format!("tasks:\n  - path: {task}\n");
    let ok = |extra: &str| format!("{}{extra}{agent}{tasks}", head("jobs"));
    vec![
        ("not-yaml", "agents: [\n  - name: {{\n".to_string(), vec![]),
        ("empty", String::new(), vec!["tasks"]),
        ("a-list", "- one\n- two\n".to_string(), vec![]),
        ("attempts-negative", ok("n_attempts: -1\n"), vec!["n_attempts"]),
        ("attempts-word", ok("n_attempts: three\n"), vec!["n_attempts"]),
        ("concurrency-zero", ok("n_concurrent_trials: 0\n"), vec!["n_concurrent_trials"]),
        ("no-agents", format!("{}agents: []\n{tasks}", head("jobs")), vec!["agents"]),
        (
            "kwargs-not-a-map",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs: fast\n{tasks}",
                head("jobs")
            ),
            vec!["kwargs"],
        ),
        (
            "unknown-agent",
            format!("{}agents:\n  - name: terminus-9\n    model_name: openai/gpt-4o\n{tasks}", head("jobs")),
            vec!["terminus-9"],
        ),
        (
            "missing-task",
            format!("{}{agent}tasks:\n  - path: /nonexistent/task-dir\n", head("jobs")),
            vec!["/nonexistent/task-dir"],
        ),
        ("no-tasks", format!("{}{agent}", head("jobs")), vec!["tasks"]),
        ("retries-negative", ok("retry:\n  max_retries: -3\n"), vec!["retry.max_retries"]),
        ("window-zero", ok("supervision:\n  intensity_window_sec: 0\n"), vec!["supervision.intensity_window_sec"]),
        ("metric-median", ok("metrics:\n  - type: median\n"), vec!["metrics[0].type"]),
        ("artifact-relative", ok("artifacts:\n  - logs/out.txt\n"), vec!["artifacts[0]"]),
        (
            "temperature-word",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      temperature: hot\n{tasks}",
                head("jobs")
            ),
            vec!["temperature"],
        ),
        (
            "parser-yaml",
            format!(
                "{}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      parser_name: yaml\n{tasks}",
                head("jobs")
            ),
            vec!["parser_name"],
        ),
        ("llm-zero-requests", ok("llm:\n  max_concurrent_requests: 0\n"), vec!["max_concurrent_requests"]),
        ("timeout-multiplier-negative", ok("timeout_multiplier: -1\n"), vec!["timeout_multiplier"]),
        ("job-name-escapes", format!("jobs_dir: jobs\njob_name: ../../escaped\n{agent}{tasks}"), vec!["job_name"]),
    ]
}

/// A malformed task: (name, how to break a copy of hello-world, expected exit code of `run`,
/// words its error must contain).
pub(super) type Breaker = fn(&Path) -> std::io::Result<()>;

pub(super) fn write(path: PathBuf, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

pub(super) fn append_toml(dir: &Path, text: &str) -> std::io::Result<()> {
    let mut toml = std::fs::read_to_string(dir.join("task.toml"))?;
    toml.push_str(text);
    std::fs::write(dir.join("task.toml"), toml)
}

pub(super) fn set_section(dir: &Path, section: &str, line: &str) -> std::io::Result<()> {
    let toml = std::fs::read_to_string(dir.join("task.toml"))?;
    let header = format!("[{section}]\n");
    let toml = toml.replacen(&header, &format!("{header}{line}\n"), 1);
    // Later keys of the same name would win in TOML's eyes (and be an error): drop the originals.
    let mut seen = false;
    let key = line.split('=').next().unwrap_or_default().trim().to_string();
    let mut out = String::new();
    let mut in_section = false;
    for l in toml.lines() {
        if l.starts_with('[') {
            in_section = l == format!("[{section}]");
        }
        if in_section && l.split('=').next().unwrap_or_default().trim() == key {
            if seen {
                continue;
            }
            seen = true;
        }
        out.push_str(l);
        out.push('\n');
    }
    std::fs::write(dir.join("task.toml"), out)
}

pub(super) fn bad_tasks() -> Vec<(&'static str, Breaker, u8, Vec<&'static str>)> {
    vec![
        ("no-task-toml", |d| std::fs::remove_file(d.join("task.toml")), 2, vec!["lacks task.toml"]),
        ("no-instruction", |d| std::fs::remove_file(d.join("instruction.md")), 2, vec!["lacks instruction.md"]),
        ("no-environment", |d| std::fs::remove_dir_all(d.join("environment")), 2, vec!["lacks environment/"]),
        ("no-test-sh", |d| std::fs::remove_file(d.join("tests/test.sh")), 2, vec!["lacks tests/test.sh"]),
        ("toml-syntax", |d| append_toml(d, "[agent\ntimeout_sec = \n"), 1, vec!["task.toml"]),
        (
            "toml-wrong-type",
            |d| set_section(d, "agent", "timeout_sec = \"soon\""),
            1,
            vec!["task.toml", "agent.timeout_sec"],
        ),
        ("windows", |d| set_section(d, "environment", "os = \"windows\""), 1, vec!["Linux containers"]),
        ("gpus", |d| set_section(d, "environment", "gpus = 2"), 1, vec!["gpus"]),
        ("memory-word", |d| set_section(d, "environment", "memory = \"lots\""), 1, vec!["environment.memory"]),
        (
            "negative-timeout",
            |d| set_section(d, "agent", "timeout_sec = -5.0"),
            1,
            vec!["agent.timeout_sec", "positive"],
        ),
        ("no-dockerfile", |d| std::fs::remove_file(d.join("environment/Dockerfile")), 1, vec!["Dockerfile"]),
        (
            "dockerfile-syntax",
            |d| write(d.join("environment/Dockerfile"), "FROMM terminus-base:bookworm\n"),
            1,
            vec!["FROMM"],
        ),
        (
            "dockerfile-no-image",
            |d| write(d.join("environment/Dockerfile"), "FROM terminus-nonexistent:none\n"),
            1,
            vec!["terminus-nonexistent"],
        ),
        (
            "dockerfile-run-fails",
            |d| write(d.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nRUN exit 3\n"),
            1,
            vec!["exit 3"],
        ),
        (
            "no-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho checked\n"),
            1,
            vec!["RewardFileNotFoundError"],
        ),
        (
            "empty-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\n: > /logs/verifier/reward.txt\n"),
            1,
            vec!["RewardFileEmptyError"],
        ),
        (
            "word-reward",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho yes > /logs/verifier/reward.txt\n"),
            1,
            vec!["VerifierOutputParseError"],
        ),
        (
            "broken-reward-json",
            |d| write(d.join("tests/test.sh"), "#!/bin/bash\necho '{\"reward\": ' > /logs/verifier/reward.json\n"),
            1,
            vec!["VerifierOutputParseError"],
        ),
        (
            "verifier-hangs",
            |d| {
                write(d.join("tests/test.sh"), "#!/bin/bash\nsleep 600\n")?;
                set_section(d, "verifier", "timeout_sec = 2.0")
            },
            1,
            vec!["VerifierTimeoutError"],
        ),
        (
            "bad-shebang",
            |d| write(d.join("tests/test.sh"), "#!/nonexistent/interpreter\necho 1 > /logs/verifier/reward.txt\n"),
            1,
            vec!["RewardFileNotFoundError"],
        ),
    ]
}

pub(super) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// What the case has counted so far: the inputs given, those answered as expected, the files
/// written where nothing should be, and what went wrong.
#[derive(Default)]
struct Count {
    inputs: usize,
    answered: usize,
    stray: usize,
    failures: Vec<String>,
}

/// Where the case works: its directory and the log of the jobs it runs there.
struct Place<'a> {
    dir: &'a Path,
    log: &'a Path,
}

/// 20 malformed job files and 20 malformed tasks.
pub(super) async fn bad_inputs(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("bad-inputs")?;
    // The jobs directory exists beforehand, so that any file under it counts as written.
    let _ = std::fs::remove_dir_all(dir.join("jobs"));
    std::fs::create_dir_all(dir.join("jobs"))?;
    let server = MockServer::start(hello_world_script(0.1), 0).await?;
    let api_base = server.api_base();
    let log = dir.join("terminus.log");
    let place = Place { dir: &dir, log: &log };
    let mut count = Count::default();

    refuse_job_files(ctx, &place, &api_base, &mut count)?;
    let in_job = write_bad_tasks(ctx, &place, &mut count)?;
    let job_dir = dir.join("jobs/broken-tasks");
    let code = run_broken_tasks(ctx, &place, &api_base, &in_job, &mut count).await?;
    server.shutdown();
    let hello_reward = check_broken_trials(&job_dir, code, &in_job, &mut count);
    let leaked_containers = match job_id(&job_dir) {
        Some(id) => ctx.engine.containers_with_label(LABEL_JOB_ID, Some(&id)).await.map(|c| c.len()).unwrap_or(0),
        None => 0,
    };
    let Count { inputs, answered, stray, failures } = count;
    for failure in &failures {
        println!("    {failure}");
    }
    Ok(Case {
        name: "bad-inputs",
        tally: Tally { expected: inputs, present: answered, duplicated: 0, leaked: stray + leaked_containers },
        checks: vec![(
            format!("the sibling hello-world trial still passed (reward {hello_reward:?})"),
            hello_reward == Some(json!(1.0)),
        )],
        figures: json!({"job_files": 20, "tasks": 20, "failures": failures}),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Job files: each refused before anything runs, exit 2, the file and the key named, nothing
/// written.
fn refuse_job_files(ctx: &Ctx, place: &Place<'_>, api_base: &str, count: &mut Count) -> anyhow::Result<()> {
    let Place { dir, log } = *place;
    for (stem, yaml, words) in bad_job_files(&ctx.hello, api_base) {
        count.inputs += 1;
        let file = dir.join(format!("bad-{stem}.yaml"));
        std::fs::write(&file, yaml)?;
        let before = snapshot(dir, log);
        let output = Command::new(terminus_bin())
            .args(["run", "-q", "-c"])
            .arg(&file)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()?;
        let after = snapshot(dir, log);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let code = output.status.code();
        let named = stderr.contains(&format!("bad-{stem}.yaml")) && words.iter().all(|w| stderr.contains(w));
        let written = changed(&before, &after);
        count.stray += written.len();
        if code == Some(2) && named {
            count.answered += 1;
        } else {
            count.failures.push(format!("job file {stem}: exit {code:?}, stderr: {}", stderr.trim()));
        }
        if !written.is_empty() {
            count.failures.push(format!("job file {stem} wrote {written:?}"));
        }
    }
    Ok(())
}

/// Writes each broken task (a copy of hello-world, broken). One that is not a task directory
/// is checked at once: `run -p` refuses it and names it. Returns the others, for one job, with
/// the words their errors must contain.
fn write_bad_tasks(
    ctx: &Ctx,
    place: &Place<'_>,
    count: &mut Count,
) -> anyhow::Result<Vec<(&'static str, Vec<&'static str>)>> {
    let Place { dir, log } = *place;
    let tasks_dir = dir.join("tasks");
    let _ = std::fs::remove_dir_all(&tasks_dir);
    let mut in_job = Vec::new();
    for (name, breaker, exit, words) in bad_tasks() {
        count.inputs += 1;
        let task = tasks_dir.join(name);
        copy_dir(&ctx.hello, &task)?;
        breaker(&task)?;
        if exit == 2 {
            // Not a task directory: `run -p` refuses it and names it.
            let before = snapshot(dir, log);
            let output = Command::new(terminus_bin())
                .args(["run", "-q", "--jobs-dir", "jobs", "--job-name", name, "-m", "oracle", "-p"])
                .arg(&task)
                .current_dir(dir)
                .stdin(Stdio::null())
                .output()?;
            let after = snapshot(dir, log);
            let stderr = String::from_utf8_lossy(&output.stderr);
            let code = output.status.code();
            let written = changed(&before, &after);
            count.stray += written.len();
            if code == Some(2) && stderr.contains(name) && words.iter().all(|w| stderr.contains(w)) {
                count.answered += 1;
            } else {
                count.failures.push(format!("task {name}: exit {code:?}, stderr: {}", stderr.trim()));
            }
            if !written.is_empty() {
                count.failures.push(format!("task {name} wrote {written:?}"));
            }
        } else {
            in_job.push((name, words));
        }
    }
    Ok(in_job)
}

/// Runs one job holding the broken tasks that load as tasks, plus hello-world, and counts what
/// it wrote outside its directory; returns its exit code.
async fn run_broken_tasks(
    ctx: &Ctx,
    place: &Place<'_>,
    api_base: &str,
    in_job: &[(&'static str, Vec<&'static str>)],
    count: &mut Count,
) -> anyhow::Result<Option<i32>> {
    let Place { dir, log } = *place;
    let mut yaml = format!(
        "jobs_dir: jobs\njob_name: broken-tasks\nn_concurrent_trials: 4\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {api_base}\ntasks:\n  - path: {}\n",
        ctx.hello.display()
    );
    for (name, _) in in_job {
        yaml.push_str(&format!("  - path: tasks/{name}\n"));
    }
    let job_file = dir.join("broken-tasks.yaml");
    std::fs::write(&job_file, yaml)?;
    let job_dir = dir.join("jobs/broken-tasks");
    let before = snapshot(dir, &job_dir);
    let child = spawn_terminus(&["run", "-q", "-c", "broken-tasks.yaml"], dir, log)?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let after = snapshot(dir, &job_dir);
    let written: Vec<PathBuf> = changed(&before, &after).into_iter().filter(|p| p != log).collect();
    count.stray += written.len();
    if !written.is_empty() {
        count.failures.push(format!("the broken-tasks job wrote outside its directory: {written:?}"));
    }
    Ok(code)
}

/// Each broken trial errors with its own message, and the job exits 1. Returns the reward of
/// the hello-world trial beside them.
fn check_broken_trials(
    job_dir: &Path,
    code: Option<i32>,
    in_job: &[(&'static str, Vec<&'static str>)],
    count: &mut Count,
) -> Option<Value> {
    let results = trial_results(job_dir);
    let by_task: BTreeMap<String, &Value> =
        results.iter().map(|r| (r["task_name"].as_str().unwrap_or_default().to_string(), r)).collect();
    for (name, words) in in_job {
        let Some(result) = by_task.get(*name) else {
            count.failures.push(format!("task {name}: no trial result"));
            continue;
        };
        let error = result["exception_info"].to_string();
        if code == Some(1) && words.iter().all(|w| error.contains(w)) {
            count.answered += 1;
        } else {
            count.failures.push(format!("task {name}: job exit {code:?}, error {error}"));
        }
    }
    by_task.get("hello-world").map(|r| r["verifier_result"]["rewards"]["reward"].clone())
}
