//! Hostile replies in bulk: thousands of generated inputs (mutations of real replies, nesting
//! bursts, brace and tag soup, random unicode) through both parsers, their salvage, the JSON
//! decoder, and the whole loop. None may panic or overflow the stack; every one must come back
//! as a parse result the model can be told about. Deterministic: the generator is seeded.

use std::panic::{AssertUnwindSafe, catch_unwind};

use terminus_core::llm::{LlmError, LlmResponse};

use crate::agent_loop::{AgentLoop, LoopSettings};
use crate::prompts::Format;

/// xorshift64*: a small, seeded generator (no dependency, reproducible failures).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const JSON_SEEDS: &[&str] = &[
    r#"{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}], "task_complete": false}"#,
    r#"{"analysis": "done", "plan": "", "commands": [], "task_complete": true}"#,
    r#"Sure! {"analysis": {"nested": [1, 2, {"x": "y"}]}, "plan": 3, "commands": [{"keystrokes": "cat <<'EOF'\n{\"a\": 1}\nEOF\n"}]} trailing"#,
];

const XML_SEEDS: &[&str] = &[
    "<response><analysis>a</analysis><plan>p</plan><commands><keystrokes duration=\"0.1\">ls\n</keystrokes></commands><task_complete>true</task_complete></response>",
    "text <response><analysis>x</analysis><commands></commands></response> more",
];

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "\\",
    "\\u",
    "\\ud83d",
    "\n",
    "NaN",
    "-Infinity",
    "1e99999",
    "-0",
    "null",
    "true",
    "<response>",
    "</response>",
    "<keystrokes duration=\"",
    "</keystrokes>",
    "<commands>",
    "<![CDATA[",
    "&amp;",
    "\u{0}",
    "\u{1b}[31m",
    "é",
    "😀",
    "\u{fffd}",
    "\"keystrokes\": ",
    "\"commands\": [",
    "-a ",
    "--help",
];

fn mutate(rng: &mut Rng, seed: &str) -> String {
    let mut chars: Vec<char> = seed.chars().collect();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(chars.len() + 1);
        match rng.below(5) {
            0 if !chars.is_empty() => {
                let end = (at + 1 + rng.below(10)).min(chars.len());
                chars.drain(at.min(end)..end);
            }
            1 => {
                let piece: Vec<char> = rng.pick(PIECES).chars().collect();
                chars.splice(at..at, piece);
            }
            2 => {
                // A burst of one opener: a model stuck in a loop.
                let opener = rng.pick(&["[", "{", "{\"a\": ", "<response>", "\\", "\""]);
                let burst: Vec<char> = opener.repeat(1 + rng.below(5000)).chars().collect();
                chars.splice(at..at, burst);
            }
            3 => chars.truncate(at),
            _ => {
                let c = char::from_u32(rng.next() as u32 % 0x11000).unwrap_or('x');
                chars.insert(at, c);
            }
        }
    }
    chars.into_iter().collect()
}

fn survives(what: &str, input: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        let shown: String = input.chars().take(300).collect();
        panic!("{what} panicked on input {shown:?}");
    }
}

#[test]
fn thousands_of_hostile_replies_never_panic() {
    let mut rng = Rng(0x7e57_ab1e_5eed_0001);
    let mut cases = 0;
    for round in 0..4000 {
        let (format, seeds) = if round % 2 == 0 { (Format::Json, JSON_SEEDS) } else { (Format::Xml, XML_SEEDS) };
        let seed = rng_pick(&mut rng, seeds);
        let input = mutate(&mut rng, seed);
        survives("parse", &input, || {
            let parsed = format.parse(&input);
            assert!(parsed.commands.len() <= input.len() + 1);
        });
        survives("salvage", &input, || drop(format.salvage(&input)));
        survives("json decoder", &input, || drop(crate::pyjson::loads(&input)));
        cases += 1;
    }
    assert_eq!(cases, 4000);
}

fn rng_pick<'a>(rng: &mut Rng, seeds: &[&'a str]) -> &'a str {
    seeds[rng.below(seeds.len())]
}

#[test]
fn the_loop_takes_hostile_replies_as_feedback() {
    let mut rng = Rng(0xdead_beef_0bad_cafe);
    for format in [Format::Json, Format::Xml] {
        // Without summarization: its token count of the whole chat per episode would make this slow.
        let settings =
            LoopSettings { format, max_turns: 10_000, enable_summarize: false, ..LoopSettings::new("m", "s") };
        let mut agent = AgentLoop::new(settings);
        agent.begin("task", "$ ");
        agent.on_terminal_checked(true);
        for round in 0..500 {
            let seeds = if format == Format::Json { JSON_SEEDS } else { XML_SEEDS };
            let seed = rng_pick(&mut rng, seeds);
            let content = mutate(&mut rng, seed);
            let result = if round % 7 == 0 {
                Err(LlmError::OutputLengthExceeded { truncated: content.clone(), usage: None })
            } else {
                Ok(LlmResponse { content: content.clone(), ..LlmResponse::default() })
            };
            survives("the loop", &content, || {
                let mut action = agent.on_model_result(result, 1.0).action;
                // Carry the reply's commands out until the loop asks the model again.
                for _ in 0..10_000 {
                    action = match action {
                        crate::Action::Execute(_) => agent.on_command_done(),
                        crate::Action::Observe => agent.observe("$ "),
                        crate::Action::CheckTerminal { .. } => agent.on_terminal_checked(true),
                        _ => break,
                    };
                }
            });
        }
    }
}

#[test]
fn a_reply_of_a_million_brackets_is_ordinary_feedback() {
    for reply in ["[".repeat(1_000_000), "{".repeat(1_000_000), format!("{{\"analysis\": {}", "[".repeat(1_000_000))] {
        let parsed = Format::Json.parse(&reply);
        assert!(!parsed.error.is_empty(), "an error the model is told about");
        assert!(parsed.commands.is_empty());
    }
}
