//! Harbor's own Terminus 2 and ours, driven by one scripted model through the same
//! conversations: parse errors and warnings, keys ending in `;` and empty keys, long outputs
//! (the output limit, the reference's history limit), a completion confirmation, an overflow
//! with its summarization, proactive summarization with a small context, and the XML parser.
//! Every request of each is recorded: its messages, every other body field and the headers the
//! job makes Harbor send. No group sets a sampling parameter but one, which sets `temperature`
//! (with a session id, its headers and extra headers and body fields). With the texts
//! `terminus texts import-harbor` writes and `model_view: reference`, every request must be
//! identical to Harbor's (the container's hostname and the trial's name aside); in our default
//! view the body fields and headers must be identical too, and every difference in the messages
//! one that docs/DIFFERENCES.md lists (the test says which). A request that matches no scenario
//! is a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use terminus_mock_llm::{Conversation, MockServer, Script, Turn};

use crate::support::{
    HarborRuntime, docker, harbor_runtime, heavy_lock, instructed_task, reply_text, repo_root, run_terminus, temp_dir,
    write_job,
};

const HARBOR: &str = "0.25.0";

/// A JSON reply of the model, the same analysis and plan each time.
fn reply(commands: Value, complete: bool) -> Turn {
    text(&reply_text("looking", "next", commands, complete))
}

fn text(content: &str) -> Turn {
    Turn { content: content.to_string(), ..Turn::default() }
}

fn run(keys: &str, duration: f64) -> Value {
    json!({"keystrokes": keys, "duration": duration})
}

/// The overflow a provider reports (OpenAI's wording and code), which both map to a context
/// overflow.
fn overflow() -> Turn {
    let body = json!({"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 131000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    Turn { status: Some(400), body: Some(body.to_string()), ..Turn::default() }
}

/// One scripted conversation: the task it runs in (its instruction carries `marker`) and the
/// replies, served in the order the requests arrive (summarization calls included).
struct Scenario {
    marker: &'static str,
    turns: Vec<Turn>,
}

/// Scenarios that share agent kwargs run as one job.
struct Group {
    name: &'static str,
    kwargs: Value,
    scenarios: Vec<Scenario>,
}

fn groups() -> Vec<Group> {
    let done = || reply(json!([]), true);
    let xml = |body: &str| text(body);
    vec![
        Group {
            name: "json",
            kwargs: json!({}),
            scenarios: vec![
                Scenario {
                    marker: "DIFF-PARSE",
                    turns: vec![
                        text(&format!(
                            "Here is my answer.\n{}",
                            json!({"analysis": "a", "plan": "p", "commands": [run("echo parse-one\n", 0.5)], "extra": 1})
                        )),
                        text("this is not JSON at all"),
                        reply(
                            json!([run("echo semi;", 0.3), run("", 0.3), run("\n", 0.5), run("echo after\n", 0.5)]),
                            false,
                        ),
                        done(),
                        done(),
                    ],
                },
                Scenario {
                    marker: "DIFF-LONG",
                    turns: vec![
                        // 1,501 lines of 7 bytes: over the output limit, within tmux's history.
                        reply(json!([run("seq 100000 101500\n", 1.5)]), false),
                        // 4,000 lines: past the 2,000 lines a pane keeps by default.
                        reply(json!([run("seq 1 4000\n", 1.5)]), false),
                        reply(json!([run("echo short\n", 0.5)]), false),
                        done(),
                        done(),
                    ],
                },
                Scenario {
                    marker: "DIFF-OVERFLOW",
                    turns: vec![
                        reply(json!([run("echo before-overflow\n", 0.5)]), false),
                        overflow(),
                        text("Summary: echoed a line."),
                        text("1. What ran? 2. What is left? 3. Any files? 4. Any errors? 5. Done?"),
                        text("1. echo. 2. nothing. 3. none. 4. none. 5. almost."),
                        reply(json!([run("echo after-handoff\n", 0.5)]), false),
                        done(),
                        done(),
                    ],
                },
            ],
        },
        Group {
            name: "xml",
            kwargs: json!({"parser_name": "xml"}),
            scenarios: vec![Scenario {
                marker: "DIFF-XML",
                turns: vec![
                    xml(
                        "Let me start.\n<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>\n<keystrokes duration=\"0.5\">echo xml-one\n</keystrokes>\n</commands>\n</response>",
                    ),
                    xml("<response>\n<analysis>a</analysis>\n</response>"),
                    xml(
                        "<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands>\n<keystrokes duration=\"0.5\">echo xml-two\n</keystrokes>\n</commands>\n<task_complete>true</task_complete>\n</response>",
                    ),
                    xml(
                        "<response>\n<analysis>a</analysis>\n<plan>p</plan>\n<commands></commands>\n<task_complete>true</task_complete>\n</response>",
                    ),
                ],
            }],
        },
        Group {
            name: "sampled",
            // A temperature, a session id of the user's, headers that carry the session id
            // and a header of the job's own: all go out as Harbor sends them.
            kwargs: json!({"temperature": 0.3, "session_id": "user-session-1",
                "session_id_headers": ["X-Trace-Session"],
                "llm_call_kwargs": {"extra_headers": {"X-Team": "evals"}, "extra_body": {"top_k": 5}}}),
            scenarios: vec![Scenario {
                marker: "DIFF-SAMPLED",
                turns: vec![reply(json!([run("echo sampled\n", 0.5)]), false), done(), done()],
            }],
        },
        Group {
            name: "small",
            // Small enough that the chat passes the 8,000-token threshold once the first
            // prompt and a reply are in it (whichever tokenizer counts).
            kwargs: json!({"model_info": {"max_input_tokens": 8500, "max_output_tokens": 1000,
                "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}}),
            scenarios: vec![Scenario {
                marker: "DIFF-PROACTIVE",
                turns: vec![
                    reply(json!([run("echo proactive\n", 0.5)]), false),
                    text("Summary: echoed."),
                    text("1. What ran? 2. What is left? 3. Files? 4. Errors? 5. Done?"),
                    text("1. echo. 2. finishing. 3. none. 4. none. 5. nearly."),
                    done(),
                    text("Summary: confirmed once."),
                    text("1. Confirmed? 2. Left? 3. Files? 4. Errors? 5. Done?"),
                    text("1. yes. 2. nothing. 3. none. 4. none. 5. yes."),
                    done(),
                ],
            }],
        },
    ]
}

/// The scenario tasks of `group` under `root`, by marker.
fn write_tasks(root: &Path, group: &Group) -> Vec<PathBuf> {
    group
        .scenarios
        .iter()
        .map(|scenario| {
            instructed_task(
                root,
                &scenario.marker.to_lowercase(),
                &format!("{}: follow the operator's lead.", scenario.marker),
                "[agent]\ntimeout_sec = 300.0\n[verifier]\ntimeout_sec = 60.0\n",
                "",
                "echo 1 > /logs/verifier/reward.txt",
            )
        })
        .collect()
}

fn script(group: &Group) -> Script {
    Script {
        sequential: group
            .scenarios
            .iter()
            .map(|s| Conversation { when: format!("{}:", s.marker), turns: s.turns.clone() })
            .collect(),
        ..Script::default()
    }
}

/// A job file for either tool (the keys both read alike).
fn job_yaml(dir: &Path, name: &str, kwargs: &Value, tasks: &[PathBuf]) -> PathBuf {
    let agent = format!(
        "  - name: terminus-2\n    model_name: openai/gpt-4o\n    kwargs: {}\n",
        serde_json::to_string(kwargs).unwrap()
    );
    write_job(dir, name, "n_attempts: 1\nn_concurrent_trials: 4\n", &agent, tasks)
}

/// One request as compared: its messages (role, text; hostnames normalised), every other body
/// field, and the headers Harbor sets itself (the session id's, the job's `extra_headers`).
#[derive(Clone, Debug, PartialEq)]
struct Sent {
    messages: Vec<(String, String)>,
    fields: BTreeMap<String, Value>,
    headers: BTreeMap<String, String>,
}

/// The requests of every scenario, and how many requests matched no scenario.
#[derive(Default)]
struct Requests {
    by_scenario: BTreeMap<&'static str, Vec<Sent>>,
    unmatched: usize,
}

/// Headers an HTTP client or SDK sets on its own (the OpenAI SDK's `x-stainless-*`, the user
/// agent, …) are not compared; these are the ones a job makes Harbor's Terminus 2 send.
fn compared_header(name: &str, group: &Group) -> bool {
    let named = |key: &str| {
        group.kwargs[key]
            .as_array()
            .into_iter()
            .flatten()
            .any(|h| h.as_str().is_some_and(|h| h.eq_ignore_ascii_case(name)))
    };
    let extra = group.kwargs["llm_call_kwargs"]["extra_headers"]
        .as_object()
        .is_some_and(|headers| headers.keys().any(|h| h.eq_ignore_ascii_case(name)));
    name == "x-session-id" || name == "authorization" || name == "content-type" || named("session_id_headers") || extra
}

fn recorded(server: &MockServer, group: &Group) -> Requests {
    let host = regex::Regex::new(r"@[0-9a-f]{12}:").unwrap();
    // The trial's name differs between runs; the session id derived from it is compared by its
    // form.
    let trial_session = regex::Regex::new(r"^[a-z0-9-]+__[A-Za-z0-9]{7}__agent").unwrap();
    let mut requests =
        Requests { by_scenario: group.scenarios.iter().map(|s| (s.marker, Vec::new())).collect(), unmatched: 0 };
    for request in server.requests() {
        let Some(scenario) = request.conversation.and_then(|index| group.scenarios.get(index)) else {
            requests.unmatched += 1;
            continue;
        };
        let messages = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let content = match &m["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (m["role"].as_str().unwrap_or("").to_string(), host.replace_all(&content, "@HOST:").into_owned())
            })
            .collect();
        let fields = request
            .body
            .as_object()
            .unwrap()
            .iter()
            .filter(|(key, _)| *key != "messages")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let headers = request
            .headers
            .iter()
            .filter(|(name, _)| compared_header(name, group))
            .map(|(name, value)| (name.clone(), trial_session.replace(value, "<trial>__agent").into_owned()))
            .collect();
        requests.by_scenario.get_mut(scenario.marker).unwrap().push(Sent { messages, fields, headers });
    }
    requests
}

/// Runs `group` with Harbor's Terminus 2, then ours with each of `views` (kwargs added to the
/// group's); the recorded requests of each run.
async fn run_group(
    harbor: &HarborRuntime,
    texts: &Path,
    dir: &Path,
    group: &Group,
    views: &[(&str, Value)],
) -> (Requests, Vec<Requests>) {
    let tasks = write_tasks(&dir.join(format!("tasks-{}", group.name)), group);
    let env = [("OPENAI_API_KEY", "sk-differential-test")];
    let server = MockServer::start(script(group), 0).await.unwrap();
    let mut kwargs = group.kwargs.clone();
    kwargs["api_base"] = json!(server.api_base());
    kwargs["record_terminal_session"] = json!(false);
    let config = job_yaml(dir, &format!("harbor-{}", group.name), &kwargs, &tasks);
    let runtime = harbor.clone();
    let out = tokio::task::spawn_blocking(move || runtime.run(&config, &env)).await.unwrap();
    assert!(
        out.status.success(),
        "Harbor {HARBOR} failed on {}: {}{}",
        group.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = recorded(&server, group);
    keep(dir, &format!("harbor-{}", group.name), &theirs);
    server.shutdown();

    let mut ours = Vec::new();
    for (view, extra) in views {
        let server = MockServer::start(script(group), 0).await.unwrap();
        let mut kwargs = kwargs.clone();
        kwargs["api_base"] = json!(server.api_base());
        kwargs["texts"] = json!(texts);
        for (key, value) in extra.as_object().unwrap() {
            kwargs[key] = value.clone();
        }
        let config = job_yaml(dir, &format!("ours-{view}-{}", group.name), &kwargs, &tasks);
        let out = tokio::task::spawn_blocking(move || run_terminus(&config, &env)).await.unwrap();
        assert_eq!(out.status.code(), Some(0), "terminus on {}: {}", group.name, String::from_utf8_lossy(&out.stderr));
        let requests = recorded(&server, group);
        keep(dir, &format!("ours-{view}-{}", group.name), &requests);
        ours.push(requests);
        server.shutdown();
    }
    (theirs, ours)
}

/// Writes a run's requests beside its job (`TERMINUS_TEST_KEEP=1` keeps them).
fn keep(dir: &Path, run: &str, requests: &Requests) {
    let scenarios: serde_json::Map<String, Value> = requests
        .by_scenario
        .iter()
        .map(|(marker, sent)| {
            let sent = sent
                .iter()
                .map(|r| json!({"messages": r.messages, "fields": r.fields, "headers": r.headers}))
                .collect::<Vec<_>>();
            (marker.to_string(), Value::Array(sent))
        })
        .collect();
    let json = serde_json::to_string_pretty(&json!({"scenarios": scenarios, "unmatched": requests.unmatched})).unwrap();
    std::fs::write(dir.join(format!("{run}.requests.json")), json).unwrap();
}

/// Where two texts first differ, with some context of each.
fn first_difference(a: &str, b: &str) -> String {
    let at =
        a.char_indices().zip(b.chars()).find(|((_, x), y)| x != y).map(|((i, _), _)| i).unwrap_or(a.len().min(b.len()));
    let at = (0..=at).rev().find(|i| a.is_char_boundary(*i) && b.is_char_boundary(*i)).unwrap_or(0);
    let context = |s: &str| {
        let start = (0..=at.saturating_sub(80)).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        let end = (at + 160).min(s.len());
        let end = (end..=s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
        format!("{:?}", &s[start..end])
    };
    format!("at byte {at} (lengths {} and {}):\n  Harbor: {}\n  ours:   {}", a.len(), b.len(), context(a), context(b))
}

/// Every difference between Harbor's requests and ours, one line each (empty: identical), with
/// the DIFFERENCES.md rows that explain it (empty: none does). Requests that matched no
/// scenario are differences.
fn differences(theirs: &Requests, ours: &Requests) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    if theirs.unmatched + ours.unmatched > 0 {
        found.push((
            "-".to_string(),
            format!("requests matching no scenario: {} from Harbor, {} from us", theirs.unmatched, ours.unmatched),
            String::new(),
        ));
    }
    for (marker, their_requests) in &theirs.by_scenario {
        let our_requests = &ours.by_scenario[marker];
        if their_requests.len() != our_requests.len() {
            found.push((
                marker.to_string(),
                format!("{} requests from Harbor, {} from us", their_requests.len(), our_requests.len()),
                String::new(),
            ));
        }
        for (n, (a, b)) in their_requests.iter().zip(our_requests).enumerate() {
            if a.fields != b.fields {
                found.push((
                    marker.to_string(),
                    format!(
                        "request {n}: body fields {} from Harbor, {} from us",
                        serde_json::to_string(&a.fields).unwrap(),
                        serde_json::to_string(&b.fields).unwrap()
                    ),
                    String::new(),
                ));
            }
            if a.headers != b.headers {
                found.push((
                    marker.to_string(),
                    format!("request {n}: headers {:?} from Harbor, {:?} from us", a.headers, b.headers),
                    String::new(),
                ));
            }
            let (a, b) = (&a.messages, &b.messages);
            if a.len() != b.len() {
                found.push((
                    marker.to_string(),
                    format!("request {n}: {} messages from Harbor, {} from us", a.len(), b.len()),
                    String::new(),
                ));
                continue;
            }
            for (m, ((ra, ca), (rb, cb))) in a.iter().zip(b).enumerate() {
                let (ca, cb) = (&set_order(ca), &set_order(cb));
                if ra != rb {
                    found.push((
                        marker.to_string(),
                        format!("request {n}, message {m}: role {ra} vs {rb}"),
                        String::new(),
                    ));
                } else if ca != cb {
                    found.push((
                        marker.to_string(),
                        format!("request {n}, message {m} ({ra}): {}", first_difference(ca, cb)),
                        classify(ca, cb),
                    ));
                }
            }
        }
    }
    found
}

/// Every `trajectory*.json` of the trial of `task` in `job`, by file name, with every string
/// masked where runs differ by nature (times, UUIDs, the container's hostname, the trial's name)
/// and its set-ordered warnings sorted.
pub(crate) fn trajectories(job: &Path, task: &str) -> BTreeMap<String, Value> {
    let trial = std::fs::read_dir(job)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{task}__")))
        .unwrap_or_else(|| panic!("no trial of {task} in {}", job.display()));
    let masks = [
        (regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?").unwrap(), "<time>"),
        (regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap(), "<uuid>"),
        (regex::Regex::new(r"@[0-9a-f]{12}:").unwrap(), "@HOST:"),
        (regex::Regex::new(r"__[A-Za-z0-9]{7}__agent").unwrap(), "__<trial>__agent"),
    ];
    fn mask(value: &mut Value, masks: &[(regex::Regex, &str)]) {
        match value {
            Value::String(text) => {
                let mut out = text.clone();
                for (pattern, with) in masks {
                    out = pattern.replace_all(&out, *with).into_owned();
                }
                *text = set_order(&out);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| mask(v, masks)),
            Value::Object(map) => map.values_mut().for_each(|v| mask(v, masks)),
            _ => {}
        }
    }
    std::fs::read_dir(trial.join("agent"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("trajectory") && name.ends_with(".json")
        })
        .map(|p| {
            let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            mask(&mut value, &masks);
            (p.file_name().unwrap().to_string_lossy().into_owned(), value)
        })
        .collect()
}

/// Where `ours` differs from `theirs` (one line each into `found`); the keys only we write that
/// the ATIF row of DIFFERENCES.md lists go into `extras` instead.
pub(crate) fn compare_values(
    theirs: &Value,
    ours: &Value,
    at: &str,
    found: &mut Vec<String>,
    extras: &mut std::collections::BTreeSet<String>,
) {
    const OURS_ONLY: &[&str] = &["trajectory_id", "llm_call_count"];
    match (theirs, ours) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => compare_values(value, other, &format!("{at}/{key}"), found, extras),
                    None => found.push(format!("{at}/{key}: only Harbor writes it ({value})")),
                }
            }
            for (key, value) in b.iter().filter(|(key, _)| !a.contains_key(*key)) {
                if OURS_ONLY.contains(&key.as_str()) {
                    extras.insert(key.clone());
                } else {
                    found.push(format!("{at}/{key}: only we write it ({value})"));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (n, (x, y)) in a.iter().zip(b).enumerate() {
                compare_values(x, y, &format!("{at}[{n}]"), found, extras);
            }
        }
        (a, b) if a != b => {
            let show = |v: &Value| v.to_string().chars().take(200).collect::<String>();
            found.push(format!("{at}: Harbor {}, ours {}", show(a), show(b)));
        }
        _ => {}
    }
}

/// `text` with the warnings the reference takes from a Python set (several missing XML
/// sections, several unknown XML tags) in sorted order: their order in Harbor changes from one
/// process to the next (string hashing is randomised), so no order can be reproduced.
fn set_order(text: &str) -> String {
    let kinds = [
        regex::Regex::new(r"^(WARNINGS: )?- (Missing <\w+> section)$").unwrap(),
        regex::Regex::new(
            r"^(WARNINGS: )?- (Unknown tag found: <[^>]*>, expected analysis/plan/commands/task_complete)$",
        )
        .unwrap(),
    ];
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(kind) = kinds.iter().find(|k| k.is_match(lines[i])) else {
            out.push(lines[i].to_string());
            i += 1;
            continue;
        };
        let prefix = kind.captures(lines[i]).unwrap().get(1).map_or("", |m| m.as_str());
        let mut run = Vec::new();
        while i < lines.len() && kind.is_match(lines[i]) {
            run.push(kind.captures(lines[i]).unwrap()[2].to_string());
            i += 1;
        }
        run.sort();
        for (n, warning) in run.iter().enumerate() {
            out.push(format!("{}- {warning}", if n == 0 { prefix } else { "" }));
        }
    }
    out.join("\n")
}

/// The docs/DIFFERENCES.md rows (their first column) that explain why our default view shows
/// `ours` where the reference shows `theirs`, or "" when they do not: each row's rewrite is
/// applied to both, in turn, until the two agree.
fn classify(theirs: &str, ours: &str) -> String {
    type Rewrite = fn(&str) -> String;
    let marker =
        regex::Regex::new(r"\[\.\.\. output limited to 10000 bytes; \d+ interior bytes omitted \.\.\.\]").unwrap();
    let rewrites: [(&str, Rewrite); 2] = [
        // The pane's blank rows: we drop them.
        ("incremental output", |s| {
            let rows = regex::Regex::new(r"\n{2,}").unwrap().replace_all(s, "\n\n").into_owned();
            format!("{}\n", rows.trim_end_matches('\n'))
        }),
        // A key's final `;`: we type it, the reference's tmux takes it for a separator.
        ("keys ending in `;`", |s| s.replace(";\n", "\n")),
    ];
    let (mut a, mut b) = (theirs.to_string(), ours.to_string());
    let mut rows = Vec::new();
    for (row, rewrite) in rewrites {
        let (ra, rb) = (rewrite(&a), rewrite(&b));
        if (ra.clone(), rb.clone()) != (a.clone(), b.clone()) {
            rows.push(row);
        }
        (a, b) = (ra, rb);
        if a == b {
            return rows.join(", ");
        }
    }
    // The reference limits a long output twice (its marker counts the first marker's bytes).
    let (ma, mb) = (marker.replace_all(&a, "[limited]").into_owned(), marker.replace_all(&b, "[limited]").into_owned());
    if ma == mb {
        rows.push("output limiting");
        return rows.join(", ");
    }
    // Past the 2,000 lines its pane keeps, the reference loses its anchor and shows the screen.
    let common = a.char_indices().zip(b.chars()).find(|((_, x), y)| x != y).map_or(a.len(), |((i, _), _)| i);
    if a[common..].starts_with("Current Terminal Screen:") && b[common..].starts_with("New Terminal Output:") {
        rows.push("tmux history limit");
        return rows.join(", ");
    }
    String::new()
}

#[tokio::test(flavor = "multi_thread")]
async fn harbors_terminus_2_and_ours_send_the_same_requests() {
    let Some(_docker) = docker().await else { return };
    let Some(harbor) = harbor_runtime(HARBOR) else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("differential");
    let texts = harbor.import_texts(&dir.path().join("harbor-texts"));
    let differences_md = std::fs::read_to_string(repo_root().join("docs/DIFFERENCES.md")).unwrap();
    let views = [("reference", json!({"model_view": "reference"})), ("ours", json!({}))];
    let mut report = String::new();
    let mut failures = Vec::new();
    for group in groups() {
        let (theirs, ours) = run_group(&harbor, &texts, dir.path(), &group, &views).await;
        for (marker, requests) in &theirs.by_scenario {
            assert!(requests.len() >= 3, "{marker}: Harbor sent {} requests", requests.len());
        }
        // Not vacuous: what each group's job asks for is on Harbor's wire.
        for sent in theirs.by_scenario.values().flatten() {
            if group.name == "sampled" {
                assert_eq!(sent.fields.get("temperature"), Some(&json!(0.3)), "{sent:?}");
                assert_eq!(sent.fields.get("top_k"), Some(&json!(5)), "{sent:?}");
                assert_eq!(sent.headers.get("x-session-id").map(String::as_str), Some("user-session-1"), "{sent:?}");
                assert_eq!(sent.headers.get("x-trace-session").map(String::as_str), Some("user-session-1"));
                assert_eq!(sent.headers.get("x-team").map(String::as_str), Some("evals"));
            } else {
                assert!(!sent.fields.contains_key("temperature"), "no sampling parameter: {sent:?}");
            }
        }
        let reference = differences(&theirs, &ours[0]);
        let total: usize = theirs.by_scenario.values().map(Vec::len).sum();
        report.push_str(&format!(
            "{}: {total} requests, model_view reference: {} differences\n",
            group.name,
            reference.len()
        ));
        for (marker, what, _) in &reference {
            failures.push(format!("reference view, {marker}, {what}"));
        }
        // The trajectories of the reference view: identical once times, ids random on both
        // sides, the hostname and the trial's name are masked; the fields only we write are
        // those the ATIF row lists.
        for scenario in &group.scenarios {
            let task = scenario.marker.to_lowercase();
            let their_files = trajectories(&dir.path().join(format!("harbor-{}", group.name)), &task);
            let our_files = trajectories(&dir.path().join(format!("ours-reference-{}", group.name)), &task);
            let names: Vec<&String> = their_files.keys().collect();
            assert!(!names.is_empty(), "{task}: Harbor wrote no trajectory");
            let mut extras = std::collections::BTreeSet::new();
            let mut found = Vec::new();
            if their_files.keys().ne(our_files.keys()) {
                found.push(format!(
                    "files {:?} from Harbor, {:?} from us",
                    names,
                    our_files.keys().collect::<Vec<_>>()
                ));
            }
            for (name, theirs) in &their_files {
                if let Some(ours) = our_files.get(name) {
                    compare_values(theirs, ours, name, &mut found, &mut extras);
                }
            }
            report.push_str(&format!(
                "{task}: {} trajectory files, model_view reference: {} differences{}\n",
                their_files.len(),
                found.len(),
                if extras.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (fields only we write, [ATIF v1.7/v1.8 fields]: {})",
                        extras.into_iter().collect::<Vec<_>>().join(", ")
                    )
                }
            ));
            failures.extend(found.into_iter().map(|what| format!("reference view trajectory, {task}, {what}")));
        }
        for (marker, what, row) in differences(&theirs, &ours[1]) {
            report.push_str(&format!(
                "  default view, {marker}: [{}] {what}\n",
                if row.is_empty() { "unlisted" } else { &row }
            ));
            let listed = !row.is_empty()
                && row.split(", ").all(|row| differences_md.lines().any(|l| l.starts_with(&format!("| {row} |"))));
            if !listed {
                failures.push(format!("default view, {marker}, a difference DIFFERENCES.md does not list: {what}"));
            }
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "{}\n\n{report}", failures.join("\n"));
}
