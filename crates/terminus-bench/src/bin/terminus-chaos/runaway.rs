//! `runaway`: models that would make a trial run away, each in a job of its own, and a budget
//! reached mid-job. Every job must end on its own with bounded model calls, disk and
//! orchestrator memory (peak RSS under 200 MiB):
//! - degenerate: two replies of 200,000-deep nested JSON (400 KB each, more than the context),
//!   summaries included, then the solution (reward 1 in under 60 calls);
//! - big summaries: a small context that fills in a few episodes and summarization subagents
//!   that answer with 600 KB each (cut to fit; the trial ends, under its call limit);
//! - never done: a model that never claims completion (`max_llm_calls: 30`: exactly 30 calls,
//!   `LlmCallLimitExceededError`, graded);
//! - budget: 30 trials against a priced model with a $0.02 budget (stopped within one call per
//!   running trial, the rest not run, exit code 6).

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::{Tally, dir_bytes, spawn_terminus, tally, trial_results, wait_with_usage};
use terminus_mock_llm::{Conversation, MockServer, Rule, Script, Turn, UsageSpec};

use crate::case::{Case, Ctx};

const MAX_RSS_MIB: f64 = 200.0;
const MAX_TRIAL_BYTES: u64 = 200 << 20;

/// A reply with these commands, reporting a usage (the budget case charges it).
fn reply(commands: Value, complete: bool) -> Turn {
    Turn {
        usage: Some(UsageSpec { prompt_tokens: 1000, completion_tokens: 100, cached_tokens: 0 }),
        ..terminus_bench::hostile::reply(commands, complete)
    }
}

fn solve() -> Turn {
    reply(json!([{"keystrokes": "printf 'Hello, world!\\n' > hello.txt\n", "duration": 0.2}]), false)
}

/// What one job did.
struct Ran {
    code: Option<i32>,
    calls: usize,
    peak_rss_mib: f64,
    /// The largest trial directory.
    max_trial_bytes: u64,
    results: Vec<Value>,
    tally: Tally,
    seconds: f64,
    job_dir: std::path::PathBuf,
}

/// Runs a job of `attempts` hello-world trials against `script` with `kwargs` (agent kwargs
/// indented by six spaces) and `extra` top-level YAML.
async fn run_job(
    ctx: &Ctx,
    dir: &Path,
    name: &str,
    script: Script,
    attempts: usize,
    kwargs: &str,
    extra: &str,
) -> anyhow::Result<Ran> {
    let server = MockServer::start(script, 0).await?;
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nn_attempts: {attempts}\nn_concurrent_trials: 4\n{extra}agents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n{kwargs}tasks:\n  - path: {}\n",
        dir.display(),
        server.api_base(),
        ctx.hello.display()
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let job_dir = dir.join(name);
    let started = Instant::now();
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &dir.join(format!("{name}.log")))?;
    // The job ends by itself or the case fails: a deadline kill would show as no exit code.
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let calls = server.requests().len();
    server.shutdown();
    let results = trial_results(&job_dir);
    let max_trial_bytes = std::fs::read_dir(&job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| dir_bytes(&e.path()))
        .max()
        .unwrap_or(0);
    let tally = tally(&job_dir, results.len().max(1), &ctx.engine).await;
    Ok(Ran {
        code: usage.exit_code,
        calls,
        peak_rss_mib: usage.max_rss_mib,
        max_trial_bytes,
        results,
        tally,
        seconds: started.elapsed().as_secs_f64(),
        job_dir,
    })
}

fn bounded(checks: &mut Vec<(String, bool)>, name: &str, ran: &Ran) {
    checks.push((
        format!("{name}: orchestrator peak RSS {:.0} MiB (under {MAX_RSS_MIB})", ran.peak_rss_mib),
        ran.peak_rss_mib < MAX_RSS_MIB,
    ));
    checks.push((
        format!("{name}: largest trial directory {:.1} MB (under 200)", ran.max_trial_bytes as f64 / 1e6),
        ran.max_trial_bytes < MAX_TRIAL_BYTES,
    ));
}

pub async fn runaway(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("runaway")?;
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    let mut total = Tally { expected: 0, present: 0, duplicated: 0, leaked: 0 };
    let mut add = |ran: &Ran, name: &str, figures: &mut Vec<Value>| {
        total.expected += ran.tally.expected;
        total.present += ran.tally.present;
        total.duplicated += ran.tally.duplicated;
        total.leaked += ran.tally.leaked;
        figures.push(json!({"job": name, "exit_code": ran.code, "model_calls": ran.calls,
            "peak_rss_mib": ran.peak_rss_mib, "max_trial_bytes": ran.max_trial_bytes, "seconds": ran.seconds}));
    };

    let ran = degenerate(ctx, &dir, &mut checks).await?;
    add(&ran, "degenerate", &mut figures);
    let ran = big_summaries(ctx, &dir, &mut checks).await?;
    add(&ran, "big-summaries", &mut figures);
    let ran = never_done(ctx, &dir, &mut checks).await?;
    add(&ran, "never-done", &mut figures);
    let ran = budget(ctx, &dir, &mut checks).await?;
    add(&ran, "budget", &mut figures);

    Ok(Case {
        name: "runaway",
        tally: total,
        checks,
        figures: json!(figures),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Degenerate replies larger than the context, summaries included: the trial still ends
/// rewarded, in under 60 calls.
async fn degenerate(ctx: &Ctx, dir: &Path, checks: &mut Vec<(String, bool)>) -> anyhow::Result<Ran> {
    let nested = |n: usize| Turn {
        content: format!("{{\"analysis\": \"a\", \"plan\": \"p\", \"commands\": {}{}}}", "[".repeat(n), "]".repeat(n)),
        ..Turn::default()
    };
    let script = Script {
        sequential: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![nested(200_000), nested(200_000), solve(), reply(json!([]), true)],
        }],
        context_chars: Some(256_000),
        ..Script::default()
    };
    let ran = run_job(ctx, dir, "degenerate", script, 1, "", "").await?;
    let reward = ran.results.first().map(|r| r["verifier_result"]["rewards"]["reward"].clone()).unwrap_or(Value::Null);
    checks.push((
        format!("degenerate: exit {:?}, reward {reward}, {} calls (under 60)", ran.code, ran.calls),
        ran.code == Some(0) && reward == 1.0 && ran.calls < 60,
    ));
    bounded(checks, "degenerate", &ran);
    Ok(ran)
}

/// Summaries larger than the context, every subagent answering with 600 KB: the trial ends
/// within its call limit.
async fn big_summaries(ctx: &Ctx, dir: &Path, checks: &mut Vec<(String, bool)>) -> anyhow::Result<Ran> {
    let huge: String = (0..10_000).map(|i| format!("summary line {i:05} that says a great deal ......\n")).collect();
    let rule = |when_last: &str| Rule {
        when_last: Some(when_last.into()),
        when_any: None,
        when_body: None,
        reply: Turn { content: huge.clone(), ..Turn::default() },
    };
    let chatty = reply(json!([{"keystrokes": "seq 1 300\n", "duration": 0.1}]), false);
    let mut turns = vec![chatty; 12];
    turns.extend([solve(), reply(json!([]), true), reply(json!([]), true)]);
    let script = Script {
        rules: vec![
            rule("hand your work over"),
            rule("picking up work from a previous AI agent"),
            rule("The next agent has a few questions"),
        ],
        sequential: vec![Conversation { when: "hello.txt".into(), turns }],
        context_chars: Some(64_000),
        ..Script::default()
    };
    let kwargs = "      max_turns: 40\n      model_info:\n        max_input_tokens: 8000\n";
    let ran = run_job(ctx, dir, "big-summaries", script, 1, kwargs, "").await?;
    let limit = 4 * 40 + 20;
    let error = ran.results.first().map(|r| r["exception_info"]["exception_type"].clone()).unwrap_or(Value::Null);
    checks.push((
        format!("big summaries: exit {:?} ({error}), {} calls (at most max_llm_calls {limit})", ran.code, ran.calls),
        matches!(ran.code, Some(0) | Some(1)) && ran.calls <= limit && ran.results.len() == 1,
    ));
    bounded(checks, "big summaries", &ran);
    Ok(ran)
}

/// A model that never says it is done: exactly `max_llm_calls` calls, then the trial is graded.
async fn never_done(ctx: &Ctx, dir: &Path, checks: &mut Vec<(String, bool)>) -> anyhow::Result<Ran> {
    let script = Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![reply(json!([{"keystrokes": "echo more\n", "duration": 0.1}]), false)],
        }],
        ..Script::default()
    };
    let ran = run_job(ctx, dir, "never-done", script, 1, "      max_llm_calls: 30\n", "").await?;
    let result = ran.results.first().cloned().unwrap_or(Value::Null);
    checks.push((
        format!(
            "never done: {} calls (30), {}, verified: {}",
            ran.calls,
            result["exception_info"]["exception_type"],
            !result["verifier_result"].is_null()
        ),
        ran.calls == 30
            && result["exception_info"]["exception_type"] == "LlmCallLimitExceededError"
            && !result["verifier_result"].is_null(),
    ));
    bounded(checks, "never done", &ran);
    Ok(ran)
}

/// A budget reached mid-job: 30 trials of three $0.0035 calls, $0.02 for all. The job stops
/// within a call per running trial and leaves the rest not run.
async fn budget(ctx: &Ctx, dir: &Path, checks: &mut Vec<(String, bool)>) -> anyhow::Result<Ran> {
    let mut script = terminus_bench::hello_world_script(0.2);
    for turn in &mut script.conversations[0].turns {
        turn.usage = Some(UsageSpec { prompt_tokens: 1000, completion_tokens: 100, cached_tokens: 0 });
        turn.delay_ms = Some(200);
    }
    let ran = run_job(ctx, dir, "budget", script, 30, "", "budget:\n  max_cost_usd: 0.02\n").await?;
    let status = terminus_bench::job_result(&ran.job_dir).map(|r| r["budget"].clone()).unwrap_or(Value::Null);
    let spent = status["spent_cost_usd"].as_f64().unwrap_or(f64::NAN);
    let not_run = status["n_not_run"].as_u64().unwrap_or(0);
    checks.push((
        format!(
            "budget: exit {:?} (6), ${spent:.4} spent of $0.02 (at most 4 calls over), {} run, {not_run} not run",
            ran.code,
            ran.results.len()
        ),
        ran.code == Some(6)
            && spent <= 0.02 + 4.0 * 0.0035 + 1e-9
            && ran.results.len() as u64 + not_run == 30
            && not_run > 0,
    ));
    bounded(checks, "budget", &ran);
    Ok(ran)
}
