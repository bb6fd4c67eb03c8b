//! `terminus-bench --runaway`: what a trial of long replies costs in disk and memory, at two
//! sizes in one run. One trial of N episodes, each reply carrying about 400 KB of text (a long
//! `analysis`), against a model whose context is set large (`model_info.max_input_tokens`) so
//! that nothing is summarized away: every reply stays in the chat, the worst case for what is
//! written per episode and what is held. Run at N and 2N episodes.
//!
//! Reported for each: the trial directory's bytes and files, the orchestrator's peak RSS
//! (`wait4`), bytes per long episode and per byte of reply; and between the sizes: the bytes
//! per long episode of the large run over the small's (1.0: linear growth; quadratic growth
//! doubles it) and what each added episode costs in disk and RSS.
//!
//! Then the same two sizes with a bounded context (about six replies fit): the chat is
//! summarized again and again while the trajectory keeps every step. What the orchestrator
//! holds must not follow the trajectory: its RSS per added episode is reported there too.

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::hostile::{TESTS_42, conversation, done, raw, run, write_task};
use terminus_bench::{dir_size, repo_root, spawn_terminus, trial_results, wait_with_usage};
use terminus_mock_llm::{MockServer, Script};

/// The size of each long reply.
pub const REPLY_KB: usize = 400;

/// A reply of about `REPLY_KB` KB that runs a quick command and does not claim completion.
fn long_reply(episode: usize) -> terminus_mock_llm::Turn {
    // Text that does not compress into a run of one character (some readers special-case that).
    let analysis: String = (0..REPLY_KB * 1024 / 64)
        .map(|i| format!("episode {episode:04} line {i:06} of a long analysis ......\n"))
        .collect();
    raw(json!({
        "analysis": analysis,
        "plan": "p",
        "commands": [{"keystrokes": "echo step\n", "duration": 0.1}],
        "task_complete": false,
    })
    .to_string())
}

/// The summarization subagents' short replies, by the prompts that start them.
fn summarization_rules() -> Vec<terminus_mock_llm::Rule> {
    let rule = |when_last: &str, content: &str| terminus_mock_llm::Rule {
        when_last: Some(when_last.into()),
        when_any: None,
        when_body: None,
        reply: raw(content.into()),
    };
    vec![
        rule("hand your work over", "Echoed a step after each long analysis."),
        rule("picking up work from a previous AI agent", "1. What is left?"),
        rule("The next agent has a few questions", "1. Write 42 to /app/answer.txt."),
    ]
}

/// The context of the bounded runs, in tokens: about six long replies.
const BOUNDED_CONTEXT: usize = 6 * REPLY_KB * 1024 / 4;

/// One trial of `episodes` episodes (`bounded`: in a context a few replies fill); its figures.
async fn one(dir: &Path, episodes: usize, bounded: bool) -> anyhow::Result<Value> {
    let kind = if bounded { "bounded" } else { "unbounded" };
    let marker = format!("RUNAWAY-{episodes}-EPISODES-{kind}");
    let task = write_task(&dir.join("tasks"), &format!("runaway-{kind}-{episodes}"), &marker, TESTS_42, "")?;
    let mut turns: Vec<_> = (0..episodes.saturating_sub(3)).map(long_reply).collect();
    turns.extend([run("echo 42 > /app/answer.txt\n", 0.1), done(), done()]);
    // Served in arrival order: a summarization starts a fresh chat, not the script again.
    let script = if bounded {
        Script { rules: summarization_rules(), sequential: vec![conversation(&marker, turns)], ..Script::default() }
    } else {
        Script { conversations: vec![conversation(&marker, turns)], ..Script::default() }
    };
    let server = MockServer::start(script, 0).await?;
    let name = format!("runaway-{kind}-{episodes}");
    let context = if bounded { BOUNDED_CONTEXT } else { 100_000_000 };
    let yaml = format!(
        "jobs_dir: {}\njob_name: {name}\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n      model_info:\n        max_input_tokens: {context}\ntasks:\n  - path: {}\n",
        dir.display(),
        server.api_base(),
        task.display()
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml)?;
    let job_dir = dir.join(&name);
    let _ = std::fs::remove_dir_all(&job_dir);
    let started = Instant::now();
    let child = spawn_terminus(&["run", "-q", "-c", &config.to_string_lossy()], dir, &dir.join(format!("{name}.log")))?;
    let usage = tokio::task::spawn_blocking(move || wait_with_usage(child, started)).await?;
    let n_calls = server.requests().len();
    server.shutdown();
    let result = trial_results(&job_dir).into_iter().next().unwrap_or(Value::Null);
    let trial_dir = std::fs::read_dir(&job_dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .ok_or_else(|| anyhow::anyhow!("no trial directory in {}", job_dir.display()))?;
    let (bytes, files) = dir_size(&trial_dir);
    let trajectory = std::fs::metadata(trial_dir.join("agent/trajectory.json")).map(|m| m.len()).unwrap_or(0);
    let summarizations = trial_dir.join("agent").read_dir().map_or(0, |entries| {
        entries.flatten().filter(|e| e.file_name().to_string_lossy().ends_with("-summary.json")).count()
    });
    let figures = json!({
        "episodes": episodes,
        "context": kind,
        "summarizations": summarizations,
        "model_calls": n_calls,
        "reward": result["verifier_result"]["rewards"]["reward"],
        "error": result["exception_info"]["exception_type"],
        "trial_dir_bytes": bytes,
        "trial_dir_files": files,
        "trajectory_bytes": trajectory,
        "bytes_per_episode": bytes as f64 / episodes as f64,
        // The last three episodes are short (the answer, the claim, the confirmation).
        "bytes_per_long_episode": bytes as f64 / episodes.saturating_sub(3).max(1) as f64,
        "bytes_per_reply_byte": bytes as f64 / (episodes.saturating_sub(3).max(1) * REPLY_KB * 1024) as f64,
        "orchestrator_peak_rss_mib": usage.max_rss_mib,
        "job_wall_sec": usage.wall.as_secs_f64(),
    });
    println!(
        "  {kind}, {episodes} episodes: {} calls, {summarizations} summarizations, trial dir {:.1} MB in {files} files (trajectory {:.1} MB), peak RSS {:.0} MiB, reward {}",
        n_calls,
        bytes as f64 / 1e6,
        trajectory as f64 / 1e6,
        usage.max_rss_mib,
        figures["reward"]
    );
    Ok(figures)
}

/// Both sizes, unbounded and bounded, and the ratios between the sizes.
pub async fn run_runaway(episodes: usize) -> anyhow::Result<Value> {
    let dir = repo_root().join("target/bench/runaway");
    std::fs::create_dir_all(&dir)?;
    println!("runaway: one trial of N episodes with a {REPLY_KB} KB reply each, N = {episodes} and {}", 2 * episodes);
    let unbounded = sizes(&dir, episodes, false).await?;
    let bounded = sizes(&dir, episodes, true).await?;
    Ok(json!({"reply_kb": REPLY_KB, "unbounded": unbounded, "bounded": bounded}))
}

async fn sizes(dir: &Path, episodes: usize, bounded: bool) -> anyhow::Result<Value> {
    let small = one(dir, episodes, bounded).await?;
    let large = one(dir, 2 * episodes, bounded).await?;
    let ratio = |key: &str| large[key].as_f64().unwrap_or(0.0) / small[key].as_f64().unwrap_or(1.0).max(1e-9);
    // Growth per added episode: what the N extra episodes cost, each.
    let per_added =
        |key: &str| (large[key].as_f64().unwrap_or(0.0) - small[key].as_f64().unwrap_or(0.0)) / episodes as f64;
    let figures = json!({
        "small": small,
        "large": large,
        "disk_ratio": ratio("trial_dir_bytes"),
        "per_episode_disk_ratio": ratio("bytes_per_long_episode"),
        "disk_bytes_per_added_episode": per_added("trial_dir_bytes"),
        "rss_ratio": ratio("orchestrator_peak_rss_mib"),
        "rss_mib_per_added_episode": per_added("orchestrator_peak_rss_mib"),
    });
    println!(
        "  bytes per long episode ×{:.2} at twice the episodes; {:.2} MB on disk per added episode; peak RSS ×{:.2} ({:.2} MiB per added episode)",
        figures["per_episode_disk_ratio"].as_f64().unwrap_or(0.0),
        figures["disk_bytes_per_added_episode"].as_f64().unwrap_or(0.0) / 1e6,
        figures["rss_ratio"].as_f64().unwrap_or(0.0),
        figures["rss_mib_per_added_episode"].as_f64().unwrap_or(0.0),
    );
    Ok(figures)
}
