//! `lost-lines`: many trials at once whose terminals print lines at random delays while the
//! agent keeps looking. Each trial's pane log (tmux's `pipe-pane`, every byte the terminal
//! printed) is held against its trajectory: every numbered line the pane printed must be in
//! the observations, once seen, in order. Run at 24 and at 100 trials at once.

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use terminus_bench::{JobFile, Tally, spawn_terminus, tally};
use terminus_mock_llm::{Conversation, MockServer, Script};

use crate::case::{Case, Ctx, JOB_DEADLINE, errored, wait_bounded};

/// Lines each trial's terminal prints.
const LINES: usize = 400;
/// Looks the agent takes while they arrive.
const LOOKS: usize = 20;

fn script() -> Script {
    use terminus_bench::hostile::reply;
    // Bursts and pauses, so that lines arrive while an observation is being made.
    let printer = format!(
        "for i in $(seq 1 {LINES}); do echo lost-check-$i; [ $((RANDOM % 5)) = 0 ] && sleep 0.0$((RANDOM % 10)); done; echo lost-check-end\n"
    );
    let mut turns = vec![reply(json!([{"keystrokes": printer, "duration": 0.1}]), false)];
    turns.extend((0..LOOKS).map(|_| reply(json!([{"keystrokes": "", "duration": 0.15}]), false)));
    // Then long enough for the printer to be done: what it prints after the last look is in the
    // pane log but, rightly, in no observation.
    turns.push(reply(json!([{"keystrokes": "", "duration": 10.0}]), false));
    turns.push(reply(json!([]), true));
    turns.push(reply(json!([]), true));
    Script { conversations: vec![Conversation { when: "hello.txt".into(), turns }], ..Script::default() }
}

/// The numbers of the `lost-check-N` lines in `text`, in order.
fn numbers(text: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("lost-check-") {
        rest = &rest[at + "lost-check-".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(n) = digits.parse() {
            found.push(n);
        }
    }
    found
}

/// What the agent was shown, in order: the first prompt, then every observation.
fn observations(trajectory: &Value) -> String {
    let mut shown = String::new();
    for step in trajectory["steps"].as_array().into_iter().flatten() {
        if step["source"] == "user" {
            shown.push_str(step["message"].as_str().unwrap_or(""));
        }
        for result in step["observation"]["results"].as_array().into_iter().flatten() {
            shown.push_str(result["content"].as_str().unwrap_or(""));
            shown.push('\n');
        }
    }
    shown
}

/// Whether the printer's last line (not the command that names it) is in `text`.
fn ended(text: &str) -> bool {
    text.contains("\nlost-check-end\n") || text.contains("\nlost-check-end\r\n")
}

/// What the trials of a job showed: trials checked, lines the panes printed, lines never
/// shown, lines shown out of order, trials whose printer's end was never shown.
#[derive(Default)]
struct Count {
    trials: usize,
    printed: usize,
    lost: usize,
    disordered: usize,
    unfinished: usize,
}

fn count_lost(job_dir: &Path) -> Count {
    let mut count = Count::default();
    for entry in std::fs::read_dir(job_dir).into_iter().flatten().flatten() {
        let agent = entry.path().join("agent");
        let (Ok(pane), Ok(trajectory)) =
            (std::fs::read(agent.join("terminus_2.pane")), std::fs::read_to_string(agent.join("trajectory.json")))
        else {
            continue;
        };
        let Ok(trajectory) = serde_json::from_str::<Value>(&trajectory) else { continue };
        count.trials += 1;
        let shown_text = observations(&trajectory);
        if !ended(&shown_text) {
            count.unfinished += 1;
        }
        let in_pane = numbers(&String::from_utf8_lossy(&pane));
        let shown = numbers(&shown_text);
        let shown_set: HashSet<usize> = shown.iter().copied().collect();
        count.printed += in_pane.len();
        count.lost += in_pane.iter().filter(|n| !shown_set.contains(n)).count();
        // First sightings must come in the order the pane printed them.
        let mut seen = HashSet::new();
        let firsts: Vec<usize> = shown.into_iter().filter(|n| seen.insert(*n)).collect();
        count.disordered += firsts.windows(2).filter(|w| w[1] < w[0]).count();
    }
    count
}

pub async fn lost_lines(ctx: &Ctx) -> anyhow::Result<Case> {
    let started = Instant::now();
    let dir = ctx.case_dir("lost-lines")?;
    let server = MockServer::start(script(), 0).await?;
    let api_base = server.api_base();
    let mut checks = Vec::new();
    let mut figures = Vec::new();
    let mut total = Tally { expected: 0, present: 0, duplicated: 0, leaked: 0 };
    for (trials, concurrency) in [(48, 24), (100, 100)] {
        let name = format!("at-{concurrency}");
        let config = JobFile {
            dir: &dir,
            name: &name,
            api_base: &api_base,
            task: &ctx.hello,
            attempts: trials,
            concurrency,
            kwargs: "      record_terminal_session: false\n",
            extra: "",
        }
        .write()?;
        let job_dir = dir.join(&name);
        let log = dir.join(format!("{name}.log"));
        let child = spawn_terminus(&["run", "-q", "-c", config.to_str().unwrap_or_default()], &dir, &log)?;
        let code = wait_bounded(child, JOB_DEADLINE).await;
        let tally = tally(&job_dir, trials, &ctx.engine).await;
        let Count { trials: checked, printed, lost, disordered, unfinished } = count_lost(&job_dir);
        let errors = errored(&job_dir);
        checks.push((format!("{concurrency} at once: the job exited {code:?} (expected 0)"), code == Some(0)));
        checks.push((
            format!("{concurrency} at once: {checked} trials checked, {printed} lines printed, {lost} never shown"),
            checked > 0 && printed >= checked * LINES && lost == 0,
        ));
        checks.push((format!("{concurrency} at once: {disordered} lines shown out of order"), disordered == 0));
        checks.push((
            format!("{concurrency} at once: {unfinished} trials never shown the printer's end"),
            unfinished == 0,
        ));
        figures.push(json!({"concurrency": concurrency, "trials": trials, "checked": checked,
            "printed": printed, "lost": lost, "disordered": disordered, "unfinished": unfinished, "errored": errors}));
        total.expected += tally.expected;
        total.present += tally.present;
        total.duplicated += tally.duplicated;
        total.leaked += tally.leaked;
    }
    server.shutdown();
    Ok(Case {
        name: "lost-lines",
        tally: total,
        checks,
        figures: json!(figures),
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_lines_are_found_in_order_and_the_typed_command_is_not() {
        let text = "# for i in $(seq 1 3); do echo lost-check-$i; done\nlost-check-1\nlost-check-2\r\nlost-check-10\n";
        assert_eq!(numbers(text), vec![1, 2, 10]);
        assert!(!ended("# echo lost-check-end\n"), "the command is not the line");
        assert!(ended("lost-check-400\nlost-check-end\nroot@box:/app# "));
    }
}
