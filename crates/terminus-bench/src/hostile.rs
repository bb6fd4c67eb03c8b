//! Hostile agents for the chaos case `adversary` and the benchmark's `--hostile` run: the
//! tasks they work on, the mock model's turns that drive them, and how a turn's cost is read
//! from the mock's request times.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, RecordedRequest, Turn};

/// Tests that give 1 only for `/app/answer.txt` = 42.
pub const TESTS_42: &str = "#!/bin/bash\n[ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n";

/// The instruction marker of [`flood`].
pub const FLOOD_MARKER: &str = "FLOOD-THE-TERMINAL";
/// The instruction marker of [`log_bomb`].
pub const LOG_BOMB_MARKER: &str = "LOG-BOMB";
/// The wait each quick command of [`flood`] asks for.
pub const QUICK_WAIT: f64 = 0.1;

/// A Terminus 2 reply with these commands.
pub fn reply(commands: Value, complete: bool) -> Turn {
    Turn {
        content: json!({"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete}).to_string(),
        ..Turn::default()
    }
}

/// A reply that types `keystrokes` and waits `duration`.
pub fn run(keystrokes: &str, duration: f64) -> Turn {
    reply(json!([{"keystrokes": keystrokes, "duration": duration}]), false)
}

/// A claim (or confirmation) of completion.
pub fn done() -> Turn {
    reply(json!([]), true)
}

/// A reply of exactly `content`.
pub fn raw(content: String) -> Turn {
    Turn { content, ..Turn::default() }
}

pub fn conversation(when: &str, turns: Vec<Turn>) -> Conversation {
    Conversation { when: when.into(), turns }
}

/// A task under `root` whose instruction carries `marker`, whose tests are `tests`, with `toml`
/// appended to its `task.toml` (agent limit 300 s).
pub fn write_task(root: &Path, name: &str, marker: &str, tests: &str, toml: &str) -> anyhow::Result<PathBuf> {
    let task = root.join(name);
    let _ = std::fs::remove_dir_all(&task);
    std::fs::create_dir_all(task.join("environment"))?;
    std::fs::create_dir_all(task.join("tests"))?;
    std::fs::write(task.join("task.toml"), format!("version = \"1.0\"\n[agent]\ntimeout_sec = 300.0\n{toml}"))?;
    std::fs::write(task.join("instruction.md"), format!("{marker}\n"))?;
    std::fs::write(task.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nWORKDIR /app\n")?;
    std::fs::write(task.join("tests/test.sh"), tests)?;
    Ok(task)
}

/// An agent that prints `lines` lines, then runs `echo hi` `quick` times, then solves a
/// [`TESTS_42`] task. Its conversation is chosen by [`FLOOD_MARKER`].
pub fn flood(lines: u64, quick: usize) -> Conversation {
    let mut turns = vec![run(&format!("seq 1 {lines}\n"), 60.0)];
    turns.extend((0..quick).map(|_| run("echo hi\n", QUICK_WAIT)));
    turns.extend([run("echo 42 > /app/answer.txt\n", QUICK_WAIT), done(), done()]);
    conversation(FLOOD_MARKER, turns)
}

/// An agent that writes one file of `mb` MiB and `files` empty files under `/logs/agent`, then
/// solves a [`TESTS_42`] task. Its conversation is chosen by [`LOG_BOMB_MARKER`].
pub fn log_bomb(mb: u64, files: u64) -> Conversation {
    let keys = format!(
        "head -c {mb}M /dev/zero > /logs/agent/big; mkdir -p /logs/agent/many && (cd /logs/agent/many && seq 1 {files} | xargs touch); echo 42 > /app/answer.txt\n"
    );
    conversation(LOG_BOMB_MARKER, vec![run(&keys, 60.0), done(), done()])
}

/// The cost of each of [`flood`]'s quick turns, in seconds: from the request its reply answered
/// to the next request, less the wait it asked for (the model answers at once). `conversation`
/// is the flood's index in the mock's script.
pub fn quick_turn_costs(requests: &[RecordedRequest], conversation: usize, quick: usize) -> Vec<f64> {
    let times: Vec<Instant> =
        requests.iter().filter(|r| r.conversation == Some(conversation)).map(|r| r.received).collect();
    (1..=quick).filter(|t| t + 1 < times.len()).map(|t| (times[t + 1] - times[t]).as_secs_f64() - QUICK_WAIT).collect()
}
