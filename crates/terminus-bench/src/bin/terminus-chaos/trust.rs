//! `trust`: what an agent (root in its container), a model, a provider or a task does to the
//! number a job reports, each in a job of its own beside ordinary trials:
//! - forgery, with `verifier.agent_processes: kill`: a `bash` put in front of the image's (the
//!   tamper error), a daemon the tests start that rewrites the verdict once they end (0), and in
//!   a two-step task a loop in a tmux window of the agent's (step one 0); never a reward of 1;
//! - self-destruct: 12 trials whose agent runs `kill -9 -1` under an image's `ENTRYPOINT` beside
//!   12 ordinary ones: exit 0 or 1, every trial a result, the ordinary ones all rewarded, none
//!   restarted;
//! - no progress: a model that answers every request with the same 200 KB of brackets (under 60
//!   calls and 50 MB, `AgentNoProgressError`);
//! - builds: a foreground fork bomb and a 64 GB reader in Dockerfiles (`EnvironmentBuildError`
//!   each, the ordinary trial rewarded);
//! - budget: `max_tokens: 3000` against a provider that omits usage, one that sends garbage and
//!   one whose counts wrap (exit 6, within one call per running trial);
//! - planted replay: an agent that writes `/logs/agent/episode-00/response.txt`; the trial's
//!   replay never types what it planted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terminus_bench::hostile::{TESTS_42, conversation, done, raw, reply, run, write_task};
use terminus_bench::{Tally, dir_bytes, spawn_terminus, tally, trial_results};
use terminus_mock_llm::{MockServer, Script, Turn};

use crate::case::{Case, Ctx, JOB_DEADLINE, wait_bounded};

/// What one job of the case did.
struct Ran {
    code: Option<i32>,
    calls: usize,
    results: Vec<Value>,
    tally: Tally,
    job_dir: PathBuf,
}

/// Runs a Terminus 2 job named `name` of `tasks` (each `attempts` times) against `script`,
/// with `extra` top-level YAML.
async fn run_job(
    ctx: &Ctx,
    dir: &Path,
    name: &str,
    script: Script,
    tasks: &[PathBuf],
    attempts: usize,
    extra: &str,
) -> anyhow::Result<Ran> {
    let server = MockServer::start(script, 0).await?;
    let list: String = tasks.iter().map(|t| format!("  - path: {}\n", t.display())).collect();
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_attempts: {attempts}\n{extra}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\ntasks:\n{list}",
        dir.display(),
        server.api_base(),
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let job_dir = dir.join(name);
    let _ = std::fs::remove_dir_all(&job_dir);
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &dir.join(format!("{name}.log")))?;
    let code = wait_bounded(child, JOB_DEADLINE).await;
    let calls = server.requests().len();
    server.shutdown();
    let tally = tally(&job_dir, tasks.len() * attempts, &ctx.engine).await;
    Ok(Ran { code, calls, results: trial_results(&job_dir), tally, job_dir })
}

fn of<'a>(results: &'a [Value], task: &str) -> Vec<&'a Value> {
    results.iter().filter(|r| r["task_name"] == task).collect()
}

fn reward(result: &Value) -> Option<f64> {
    result["verifier_result"]["rewards"]["reward"].as_f64()
}

fn kind(result: &Value) -> &str {
    result["exception_info"]["kind"].as_str().unwrap_or("")
}

fn add(total: &mut Tally, more: Tally) {
    total.expected += more.expected;
    total.present += more.present;
    total.duplicated += more.duplicated;
    total.leaked += more.leaked;
}

pub(crate) async fn trust(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("trust")?;
    let tasks = dir.join("tasks");
    let mut checks = Vec::new();
    let mut total = Tally::default();
    let mut figures = serde_json::Map::new();
    forgery(ctx, &dir, &tasks, &mut checks, &mut total).await?;
    steps_forgery(ctx, &dir, &tasks, &mut checks, &mut total).await?;
    self_destruct(ctx, &dir, &tasks, &mut checks, &mut total).await?;
    figures.insert("no_progress".into(), no_progress(ctx, &dir, &tasks, &mut checks, &mut total).await?);
    builds(ctx, &dir, &tasks, &mut checks, &mut total).await?;
    figures.insert("budget".into(), budget(ctx, &dir, &tasks, &mut checks, &mut total).await?);
    planted_replay(ctx, &dir, &tasks, &mut checks, &mut total).await?;
    Ok(Case {
        name: "trust",
        tally: total,
        checks,
        figures: Value::Object(figures),
        seconds: started.elapsed().as_secs_f64(),
    })
}

const BASH_WRAPPER: &str = "printf '%s\\n' '#!/bin/sh' 'case \"$*\" in *tests/test.sh*) echo 1 > /logs/verifier/reward.txt; exit 0;; esac' 'exec /usr/bin/bash \"$@\"' > /usr/local/bin/bash && chmod +x /usr/local/bin/bash\n";
const DAEMON: &str = "printf '%s\\n' \"setsid sh -c 'until [ \\\"\\$(cat /logs/verifier/reward.txt 2>/dev/null)\\\" = 0 ]; do sleep 0.01; done; sleep 0.1; while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' </dev/null >/dev/null 2>&1 &\" > /app/solution.sh\n";
const SOLVE_42: &str = "echo 42 > /app/answer.txt\n";

async fn forgery(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<()> {
    let zero = "#!/usr/bin/env bash\necho 0 > /logs/verifier/reward.txt\n";
    let wrapped = write_task(tasks, "wrapped-bash", "WRAP-BASH", zero, "")?;
    let tests = "#!/bin/bash\nbash /app/solution.sh; echo 0 > /logs/verifier/reward.txt\n";
    let daemon = write_task(tasks, "daemon", "LEAVE-A-DAEMON", tests, "")?;
    let honest = write_task(tasks, "honest", "WRITE-42", TESTS_42, "")?;
    let script = Script {
        conversations: vec![
            conversation("WRAP-BASH", vec![run(BASH_WRAPPER, 0.5), done(), done()]),
            conversation("LEAVE-A-DAEMON", vec![run(DAEMON, 0.5), done(), done()]),
            conversation("WRITE-42", vec![run(SOLVE_42, 0.3), done(), done()]),
        ],
        ..Script::default()
    };
    let extra = "n_concurrent_trials: 4\nverifier:\n  agent_processes: kill\n";
    let ran = run_job(ctx, dir, "forgery", script, &[wrapped, daemon, honest], 2, extra).await?;
    let wrapped = of(&ran.results, "wrapped-bash");
    checks.push((
        "kill mode: a bash put in front of the image's is VerifierTamperedError, never 1".into(),
        wrapped.len() == 2 && wrapped.iter().all(|r| kind(r) == "VerifierTamperedError" && reward(r) != Some(1.0)),
    ));
    let daemon = of(&ran.results, "daemon");
    checks.push((
        "kill mode: a verdict-rewriting daemon the tests start leaves their 0".into(),
        daemon.len() == 2 && daemon.iter().all(|r| reward(r) == Some(0.0)),
    ));
    let honest = of(&ran.results, "honest");
    checks.push(("the honest trials beside them: 1".into(), honest.iter().all(|r| reward(r) == Some(1.0))));
    add(total, ran.tally);
    Ok(())
}

async fn steps_forgery(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<()> {
    let task = tasks.join("window-loop");
    let _ = std::fs::remove_dir_all(&task);
    let files = [
        ("environment/Dockerfile", "FROM terminus-base:bookworm\nWORKDIR /app\n"),
        (
            "task.toml",
            "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n",
        ),
        ("steps/one/instruction.md", "STEP-one\n"),
        ("steps/one/tests/test.sh", "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\nsleep 0.5\n"),
        ("steps/two/instruction.md", "STEP-two\n"),
        ("steps/two/tests/test.sh", TESTS_42),
    ];
    for (path, text) in files {
        std::fs::create_dir_all(task.join(path).parent().unwrap_or(&task))?;
        std::fs::write(task.join(path), text)?;
    }
    let forge = "while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.01; done";
    let keys = format!("tmux new-window -d \"sh -c '{forge}'\"; tmux run-shell -b \"sh -c '{forge}'\"\n");
    let script = Script {
        conversations: vec![
            conversation("STEP-one", vec![run(&keys, 0.5), done(), done()]),
            conversation("STEP-two", vec![run(SOLVE_42, 0.3), done(), done()]),
        ],
        ..Script::default()
    };
    let extra = "n_concurrent_trials: 2\nverifier:\n  agent_processes: kill\n";
    let ran = run_job(ctx, dir, "steps-forgery", script, &[task], 2, extra).await?;
    let steps: Vec<Vec<Option<f64>>> = ran
        .results
        .iter()
        .map(|r| {
            r["step_results"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s["verifier_result"]["rewards"]["reward"].as_f64())
                .collect()
        })
        .collect();
    checks.push((
        format!("kill mode: a tmux window loop forges no step (step rewards {steps:?}; want 0 then 1)"),
        steps.len() == 2 && steps.iter().all(|s| s == &[Some(0.0), Some(1.0)]),
    ));
    add(total, ran.tally);
    Ok(())
}

async fn self_destruct(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<()> {
    let killer = write_task(tasks, "entrypoint-killer", "KILL-EVERYTHING", TESTS_42, "")?;
    std::fs::write(
        killer.join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nWORKDIR /app\nENTRYPOINT [\"/bin/sh\", \"-c\", \"exec \\\"$@\\\"\", \"--\"]\n",
    )?;
    let honest = write_task(tasks, "honest", "WRITE-42", TESTS_42, "")?;
    let script = Script {
        conversations: vec![
            conversation("KILL-EVERYTHING", vec![run("kill -9 -1\n", 1.0), done(), done()]),
            conversation("WRITE-42", vec![run(SOLVE_42, 0.3), done(), done()]),
        ],
        ..Script::default()
    };
    let ran = run_job(ctx, dir, "self-destruct", script, &[killer, honest], 12, "n_concurrent_trials: 4\n").await?;
    let killers = of(&ran.results, "entrypoint-killer");
    let honest = of(&ran.results, "honest");
    checks.push((
        format!("12 kill -9 -1 trials beside 12 ordinary: exit {:?} (0 or 1)", ran.code),
        matches!(ran.code, Some(0 | 1)),
    ));
    checks.push((
        "each killer's trial is its own AgentEndedEnvironmentError, none restarted".into(),
        killers.len() == 12 && killers.iter().all(|r| kind(r) == "AgentEndedEnvironmentError" && r["restarts"] == 0),
    ));
    checks.push((
        "every ordinary trial beside them is rewarded".into(),
        honest.len() == 12 && honest.iter().all(|r| reward(r) == Some(1.0)),
    ));
    add(total, ran.tally);
    Ok(())
}

async fn no_progress(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<Value> {
    let task = write_task(tasks, "repeating", "REPEAT-FOREVER", TESTS_42, "")?;
    let nested = format!(
        "{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut turns: Vec<Turn> = vec![raw(nested); 3000];
    turns.push(run(SOLVE_42, 0.3));
    let script = Script {
        sequential: vec![conversation("REPEAT-FOREVER", turns)],
        context_chars: Some(256_000),
        ..Script::default()
    };
    let ran = run_job(ctx, dir, "no-progress", script, &[task], 1, "").await?;
    let bytes = dir_bytes(&ran.job_dir);
    let named = ran.results.iter().all(|r| kind(r) == "AgentNoProgressError");
    checks.push((
        format!(
            "the same 200 KB reply after each summary: {} calls, {} KB, AgentNoProgressError",
            ran.calls,
            bytes >> 10
        ),
        named && ran.results.len() == 1 && ran.calls < 60 && bytes < 50 << 20,
    ));
    add(total, ran.tally);
    Ok(json!({"calls": ran.calls, "bytes": bytes}))
}

async fn builds(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<()> {
    let hostile = |name: &str, run: &str| -> anyhow::Result<PathBuf> {
        let task = write_task(tasks, name, "NEVER-ASKED", TESTS_42, "[environment]\nbuild_timeout_sec = 30.0\n")?;
        std::fs::write(task.join("environment/Dockerfile"), format!("FROM terminus-base:bookworm\nRUN {run}\n"))?;
        Ok(task)
    };
    let bomb = hostile("build-fork-bomb", "bash -c 'f() { f | f & f | f; }; f'")?;
    let hog = hostile("build-memory-hog", "head -c 64G /dev/zero | tail -c 1")?;
    let honest = write_task(tasks, "honest", "WRITE-42", TESTS_42, "")?;
    let script = Script {
        conversations: vec![conversation("WRITE-42", vec![run(SOLVE_42, 0.3), done(), done()])],
        ..Script::default()
    };
    let extra = "n_concurrent_trials: 3\nenvironment:\n  build_memory_mb: 256\n  build_cpus: 1\n";
    let ran = run_job(ctx, dir, "builds", script, &[bomb, hog, honest], 1, extra).await?;
    let failed = |task: &str| of(&ran.results, task).iter().all(|r| kind(r) == "EnvironmentBuildError");
    checks.push(("a fork-bombing Dockerfile fails its own build".into(), failed("build-fork-bomb")));
    checks.push(("a memory-eating Dockerfile fails its own build".into(), failed("build-memory-hog")));
    checks.push((
        "the ordinary trial beside them is rewarded".into(),
        of(&ran.results, "honest").iter().all(|r| reward(r) == Some(1.0)),
    ));
    add(total, ran.tally);
    Ok(())
}

async fn budget(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<Value> {
    let task = write_task(tasks, "unmetered", "UNMETERED", TESTS_42, "")?;
    let mut figures = serde_json::Map::new();
    for (name, usage) in [
        ("usage-omitted", Value::Null),
        ("usage-garbage", json!({"prompt_tokens": "lots", "completion_tokens": -5, "total_tokens": "?"})),
        ("usage-wrapping", json!({"prompt_tokens": 18446744073709551615u64, "completion_tokens": 1})),
    ] {
        let turn = |t: Turn| Turn { raw_usage: Some(usage.clone()), delay_ms: Some(100), ..t };
        let turns =
            vec![turn(reply(json!([{"keystrokes": SOLVE_42, "duration": 0.1}]), false)), turn(done()), turn(done())];
        let script = Script { conversations: vec![conversation("UNMETERED", turns)], ..Script::default() };
        let extra = "n_concurrent_trials: 4\nbudget:\n  max_tokens: 3000\n";
        let ran = run_job(ctx, dir, name, script, std::slice::from_ref(&task), 24, extra).await?;
        // Every call is charged (`spend.jsonl`, an estimate here); after the charge that reached
        // 3,000 tokens, at most one more call per running trial (4).
        let charged: Vec<u64> = std::fs::read_to_string(ran.job_dir.join("spend.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|l| l["input_tokens"].as_u64().unwrap_or(0) + l["output_tokens"].as_u64().unwrap_or(0))
            .collect();
        let reached = charged
            .iter()
            .scan(0u64, |sum, t| {
                *sum += t;
                Some(*sum)
            })
            .position(|sum| sum >= 3000);
        let after = reached.map(|i| ran.calls.saturating_sub(i + 1));
        checks.push((
            format!(
                "{name}: a 3,000-token budget stops the job (exit {:?}; {} of 72 possible calls, each charged; {after:?} after the limit)",
                ran.code, ran.calls
            ),
            ran.code == Some(6) && charged.len() == ran.calls && after.is_some_and(|n| n <= 4),
        ));
        figures.insert(name.into(), json!({"code": ran.code, "calls": ran.calls}));
        // A budget-stopped job leaves trials unstarted on purpose: only leaks and duplicates count.
        add(total, Tally { expected: ran.tally.present, ..ran.tally });
    }
    Ok(Value::Object(figures))
}

async fn planted_replay(
    ctx: &Ctx,
    dir: &Path,
    tasks: &Path,
    checks: &mut Vec<(String, bool)>,
    total: &mut Tally,
) -> anyhow::Result<()> {
    let task = write_task(tasks, "planter", "PLANT-EPISODES", TESTS_42, "")?;
    // The planted reply names `PLANTED-REPLY`; the command that plants it spells the `P` as
    // `\x50`, so the marker is in no file unless the planted reply itself is replayed.
    let plant = r#"mkdir -p /logs/agent/episode-00 && printf '%b' '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "echo \x50LANTED-REPLY > /app/planted\\n", "duration": 0.1}], "task_complete": false}' > /logs/agent/episode-00/response.txt
"#;
    let script = Script {
        conversations: vec![conversation("PLANT-EPISODES", vec![run(plant, 0.3), run(SOLVE_42, 0.3), done(), done()])],
        ..Script::default()
    };
    let ran = run_job(ctx, dir, "planted", script, &[task], 1, "").await?;
    add(total, ran.tally);
    let Some(trial) =
        std::fs::read_dir(&ran.job_dir)?.flatten().map(|e| e.path()).find(|p| p.join("result.json").is_file())
    else {
        checks.push(("the planting trial has a result".into(), false));
        return Ok(());
    };
    let out = dir.join("planted-replays");
    let _ = std::fs::remove_dir_all(&out);
    let log = dir.join("planted-replay.log");
    let args = ["trials", "replay", &trial.to_string_lossy(), "-o", &out.to_string_lossy()];
    let code = wait_bounded(spawn_terminus(&args, dir, &log)?, Duration::from_secs(300)).await;
    let wrote = std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_some());
    let holding = crate::hostile_tasks::files_holding(&out, "PLANTED-REPLY");
    checks.push((
        format!("a planted episode-00/response.txt is never replayed (replay exit {code:?})"),
        code == Some(0) && wrote && holding.is_empty(),
    ));
    Ok(())
}
