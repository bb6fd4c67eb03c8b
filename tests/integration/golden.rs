//! Content identity of what a run writes: the trajectories, episode files
//! (`prompt.txt`, `response.txt`, `debug.json`) and results of two deterministic jobs are
//! compared with the outputs recorded from the code before the per-episode costs were cut
//! (`tests/fixtures/golden-outputs.json`). Only what differs from run to run by nature is
//! masked: times, durations, ids, container host names, the temporary directory, the clone's
//! path, and the count of processes at verification (the harness's own are among them). A
//! difference is shown as a unified diff of the first file that differs; the files are then
//! read by Harbor 0.25's and 0.26's own models.
//!
//! The jobs: two of the summarization scenario's trials (an overflow, the same with linear
//! history) and one long trial of 15 episodes whose commands print 1.5 KB each, with a proactive
//! summarization on the way (the token counts decide when it starts).
//!
//! `TERMINUS_BLESS=1` rewrites the fixture from the current code (only when an output is meant
//! to change).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::Value;
use terminus_mock_llm::{Conversation, MockServer, Rule, Script, Turn, UsageSpec};

use crate::scenarios::{run_job, summarization_job};
use crate::support::{
    HARBOR_VERSIONS, all_files, docker, heavy_lock, repo_root, run_terminus, temp_dir, trial_dirs,
    validate_job_with_harbor,
};

const FIXTURE: &str = "tests/fixtures/golden-outputs.json";
const LONG_MARKER: &str = "GOLDEN-LONG-TRIAL";

/// One reply of the long trial (its usage grows with `i`).
pub(crate) fn long_turn(commands: Value, complete: bool, i: u64) -> Turn {
    Turn {
        content: serde_json::json!({"analysis": format!("step {i}"), "plan": "print", "commands": commands, "task_complete": complete})
            .to_string(),
        usage: Some(UsageSpec { prompt_tokens: 1000 + 37 * i, completion_tokens: 40 + i, cached_tokens: 5 * i }),
        ..Turn::default()
    }
}

/// The long trial's replies: twelve commands printing kilobytes, the answer, a claim and its
/// confirmation.
pub(crate) fn long_turns() -> Vec<Turn> {
    let mut turns: Vec<Turn> = (0..12)
        .map(|i| {
            let keys = format!("seq {} {} | sed 's/$/ golden line/'\n", i * 1000, i * 1000 + 60);
            long_turn(serde_json::json!([{"keystrokes": keys, "duration": 0.3}]), false, i)
        })
        .collect();
    turns.push(long_turn(serde_json::json!([{"keystrokes": "echo 42 > answer.txt\n", "duration": 0.2}]), false, 12));
    turns.push(long_turn(serde_json::json!([]), true, 13));
    turns.push(long_turn(serde_json::json!([]), true, 14));
    turns
}

/// The summarization subagents' replies, by the prompts that start them (the main
/// conversation is served in arrival order, so it goes on where it was after the handoff).
pub(crate) fn summarization_rules() -> Vec<Rule> {
    let rule = |when_last: &str, content: &str| Rule {
        when_last: Some(when_last.into()),
        when_any: None,
        when_body: None,
        reply: Turn {
            content: content.into(),
            usage: Some(UsageSpec { prompt_tokens: 900, completion_tokens: 80, cached_tokens: 0 }),
            ..Turn::default()
        },
    };
    vec![
        rule("hand your work over", "Printed numbered lines with seq, twelve times."),
        rule("picking up work from a previous AI agent", "1. Which file?\n2. What value?"),
        rule("The next agent has a few questions", "1. /app/answer.txt\n2. 42"),
    ]
}

/// One trial of 14 episodes: twelve commands with kilobytes of deterministic output, then the
/// answer, a claim and its confirmation.
async fn long_job(dir: &Path) -> (PathBuf, MockServer) {
    let task = dir.join("tasks/golden-long");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(task.join("task.toml"), "version = \"1.0\"\n[agent]\ntimeout_sec = 300.0\n").unwrap();
    std::fs::write(task.join("instruction.md"), format!("{LONG_MARKER}: write 42 to /app/answer.txt\n")).unwrap();
    std::fs::write(task.join("environment/Dockerfile"), "FROM terminus-base:bookworm\nWORKDIR /app\n").unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        "#!/bin/bash\n[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let script = Script {
        rules: summarization_rules(),
        sequential: vec![Conversation { when: LONG_MARKER.into(), turns: long_turns() }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let yaml = format!(
        "jobs_dir: {}\njob_name: long\nagents:\n  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n      session_id: golden-long\n      model_info:\n        max_input_tokens: 6000\n      proactive_summarization_threshold: 2000\ntasks:\n  - path: {}\n",
        dir.display(),
        server.api_base(),
        task.display()
    );
    let config = dir.join("long.yaml");
    std::fs::write(&config, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    (dir.join("long"), server)
}

/// What differs between two runs of the same code, masked.
struct Masks {
    replacements: Vec<(Regex, &'static str)>,
}

impl Masks {
    fn new(dirs: &[&Path]) -> Masks {
        let mut replacements: Vec<(Regex, &'static str)> =
            dirs.iter().map(|d| (Regex::new(&regex::escape(&d.display().to_string())).unwrap(), "<dir>")).collect();
        // Task paths are absolute: CI runs from another clone than the one that recorded.
        replacements.push((Regex::new(&regex::escape(env!("CARGO_MANIFEST_DIR"))).unwrap(), "<repo>"));
        replacements.extend([
            (Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?").unwrap(), "<time>"),
            (Regex::new(r"\d{4}-\d{2}-\d{2}__\d{2}-\d{2}-\d{2}").unwrap(), "<job-time>"),
            (Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap(), "<uuid>"),
            (Regex::new(r"root@[0-9a-f]{12}").unwrap(), "root@<host>"),
            // The session id is `<trial name>__agent` (no word boundary after the suffix).
            (Regex::new(r"__[A-Za-z0-9]{7}__agent").unwrap(), "__<trial>__agent"),
            (Regex::new(r"__[A-Za-z0-9]{7}\b").unwrap(), "__<trial>"),
            (Regex::new(r"127\.0\.0\.1:\d+").unwrap(), "127.0.0.1:<port>"),
            (Regex::new(r"terminus-task-[0-9a-z_.-]+").unwrap(), "<image>"),
            // The first look at the pane may come before the shell printed its prompt.
            (
                Regex::new(r"Current Terminal Screen:\n(root@<host>:/app#)?\n").unwrap(),
                "Current Terminal Screen:\n<prompt?>\n",
            ),
        ]);
        Masks { replacements }
    }

    fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (re, with) in &self.replacements {
            out = re.replace_all(&out, *with).into_owned();
        }
        out
    }

    /// Numbers that are times or durations become "<n>"; strings are masked like text.
    fn json(&self, value: &mut Value, key: &str) {
        self.json_in(value, key, false)
    }

    /// `unordered`: below a job file's kwargs, which come through the `config` crate, whose maps
    /// have no order; their keys are sorted.
    fn json_in(&self, value: &mut Value, key: &str, unordered: bool) {
        let unordered = unordered || key == "kwargs";
        let timing = ["time", "duration", "msec", "_sec", "elapsed", "latency", "created", "_at", "pid"]
            .iter()
            .any(|k| key.contains(k));
        // What runs in the container at verification counts the harness's own processes too
        // (the terminal's control client, the shell channel): only the policy is the run's.
        if key == "processes_at_verification"
            && let Value::Object(census) = value
        {
            for field in ["count", "commands"] {
                if let Some(counted) = census.get_mut(field) {
                    *counted = Value::String("<census>".into());
                }
            }
            return;
        }
        match value {
            Value::Number(_) if timing => *value = Value::String("<n>".into()),
            Value::Array(items) if timing && items.iter().all(Value::is_number) => {
                *value = Value::String(format!("<{} numbers>", items.len()))
            }
            Value::String(s) => *s = self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.json_in(v, key, unordered)),
            Value::Object(map) => {
                if unordered {
                    map.sort_keys();
                }
                map.iter_mut().for_each(|(k, v)| self.json_in(v, k, unordered))
            }
            _ => {}
        }
    }
}

/// The compared files of a job: path below the job (trial names masked) → masked content.
fn outputs(job_dir: &Path, masks: &Masks, into: &mut BTreeMap<String, String>) {
    let job = job_dir.file_name().unwrap().to_string_lossy().to_string();
    for trial in trial_dirs(job_dir) {
        // Trials sort by their random suffix; name them by what they ran instead.
        let result: Value = serde_json::from_str(&std::fs::read_to_string(trial.join("result.json")).unwrap()).unwrap();
        let trajectory: Value =
            serde_json::from_str(&std::fs::read_to_string(trial.join("agent/trajectory.json")).unwrap()).unwrap();
        let label = format!(
            "{job}/{}:{}",
            result["task_name"].as_str().unwrap(),
            trajectory["session_id"].as_str().unwrap_or("?")
        );
        for file in all_files(&trial) {
            let rel = file.strip_prefix(&trial).unwrap().to_string_lossy().to_string();
            let wanted = rel == "result.json"
                || rel.ends_with(".json") && rel.starts_with("agent/")
                || rel.ends_with("prompt.txt")
                || rel.ends_with("response.txt");
            if !wanted {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let content = if rel.ends_with(".json") {
                let mut value: Value = serde_json::from_str(&text).unwrap();
                masks.json(&mut value, "");
                // Key order and layout are part of the content (the reference's files are
                // pretty JSON): compare the masked value in the file's own format.
                if text.trim_start().starts_with("{\n") {
                    serde_json::to_string_pretty(&value).unwrap()
                } else {
                    value.to_string()
                }
            } else {
                masks.text(&text)
            };
            into.insert(format!("{label}/{rel}"), content);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn outputs_match_the_recorded_run() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let (script, agents) = summarization_job();
    // The scenario's proactive trial is left out: its summarization starts within a few tokens
    // of the threshold, where the first screen (with or without the prompt yet) decides it.
    let (summary_dir, summary_job, code, _server) = run_job("summarization", script, &agents[..2], &[]).await;
    assert_eq!(code, 0);
    let long_dir = temp_dir("golden-long");
    let (long_job_dir, _long_server) = long_job(long_dir.path()).await;

    let masks = Masks::new(&[summary_dir.path(), long_dir.path()]);
    let mut now = BTreeMap::new();
    outputs(&summary_job, &masks, &mut now);
    outputs(&long_job_dir, &masks, &mut now);
    assert!(now.len() > 60, "{} files", now.len());
    assert!(now.keys().any(|k| k.ends_with("debug.json")), "debug.json is compared");

    let fixture = repo_root().join(FIXTURE);
    if std::env::var("TERMINUS_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(fixture.parent().unwrap()).unwrap();
        std::fs::write(&fixture, serde_json::to_string_pretty(&now).unwrap()).unwrap();
        return;
    }
    let recorded: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&fixture).expect("the recorded outputs")).unwrap();
    let missing: Vec<&String> = recorded.keys().filter(|k| !now.contains_key(*k)).collect();
    let extra: Vec<&String> = now.keys().filter(|k| !recorded.contains_key(*k)).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, new {extra:?}");
    if let Some((name, want)) = recorded.iter().find(|(name, want)| now[*name] != **want) {
        panic!("{name} differs from the recorded run:\n{}", unified_diff(name, want, &now[name]));
    }
    // The outputs are Harbor's files: its own models read them.
    for job_dir in [&summary_job, &long_job_dir] {
        for version in HARBOR_VERSIONS {
            if let Some(listed) = validate_job_with_harbor(job_dir, version) {
                assert!(listed["trajectories"].as_u64().unwrap_or(0) > 0, "Harbor {version}: {listed}");
            }
        }
    }
}

/// The lines that differ between `recorded` and `now` as one unified diff hunk: the common
/// start and end left out but for three lines of context, each side cut at 60 lines.
fn unified_diff(name: &str, recorded: &str, now: &str) -> String {
    const CONTEXT: usize = 3;
    const SHOWN: usize = 60;
    let (old, new): (Vec<&str>, Vec<&str>) = (recorded.lines().collect(), now.lines().collect());
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..].iter().rev().zip(new[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
    let start = prefix.saturating_sub(CONTEXT);
    let (old_end, new_end) =
        ((old.len() - suffix + CONTEXT).min(old.len()), (new.len() - suffix + CONTEXT).min(new.len()));
    let mut out = format!(
        "--- recorded/{name}\n+++ now/{name}\n@@ -{},{} +{},{} @@\n",
        start + 1,
        old_end - start,
        start + 1,
        new_end - start
    );
    let side = |out: &mut String, lines: &[&str], mark: char| {
        for line in lines.iter().take(SHOWN) {
            out.push_str(&format!("{mark}{line}\n"));
        }
        if lines.len() > SHOWN {
            out.push_str(&format!("{mark}… {} more lines\n", lines.len() - SHOWN));
        }
    };
    side(&mut out, &old[start..prefix], ' ');
    side(&mut out, &old[prefix..old.len() - suffix], '-');
    side(&mut out, &new[prefix..new.len() - suffix], '+');
    side(&mut out, &old[old.len() - suffix..old_end], ' ');
    out
}

#[test]
fn a_difference_is_shown_as_a_unified_diff_hunk() {
    let recorded = "a\nb\nc\nd\ne\nf\ng\nh\n";
    let now = "a\nb\nc\nd\nE\nf\ng\nh\n";
    assert_eq!(
        unified_diff("x.json", recorded, now),
        "--- recorded/x.json\n+++ now/x.json\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n"
    );
    let grown = unified_diff("y", "a\nb\n", "a\nb\nc\n");
    assert_eq!(grown, "--- recorded/y\n+++ now/y\n@@ -1,2 +1,3 @@\n a\n b\n+c\n");
}
