//! Rules of the codebase, checked as tests rather than kept by habit: each test reads the
//! checkout's files and fails naming the file and line that breaks its rule.
//!
//! What clippy can enforce lives in `clippy.toml` (bollard, reqwest and subprocesses each in
//! one crate); what it cannot is here: every file's `//!` opener, `#[expect]` over `#[allow]`,
//! no pointer to a document the repository does not hold, dependencies declared where they
//! belong, no `docker` CLI in the product, and no product file or function over its line budget.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files under `dirs` whose name ends with one of `exts`, skipping build output and
/// installed JavaScript packages.
fn files(dirs: &[&str], exts: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                    walk(&path, exts, out);
                }
            } else if exts.iter().any(|e| name.ends_with(e)) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        walk(&root().join(dir), exts, &mut out);
    }
    out.sort();
    assert!(!out.is_empty(), "no {exts:?} files under {dirs:?}: the walk itself is broken");
    out
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn fail_if_any(rule: &str, offences: Vec<String>) {
    assert!(offences.is_empty(), "{rule}:\n  {}", offences.join("\n  "));
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let offences = files(&["crates", "tests"], &[".rs"])
        .into_iter()
        .filter(|f| !text(f).starts_with("//!"))
        .map(|f| shown(&f))
        .collect();
    fail_if_any("each .rs file starts with a `//!` line saying what it is", offences);
}

#[test]
fn lints_are_expected_not_allowed() {
    let mut offences = Vec::new();
    for file in files(&["crates", "tests"], &[".rs"]) {
        for (n, line) in text(&file).lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[allow(") || code.starts_with("#![allow(") {
                offences.push(format!("{}:{}: {}", shown(&file), n + 1, code));
            }
        }
    }
    fail_if_any("use #[expect(lint, reason = \"…\")], which warns once the lint no longer fires", offences);
}

/// Words that point at documents outside the repository: the agent's reference notes, the
/// measurement notes, numbered work items. A reader of the repo has none of them.
const OUTSIDE_REFERENCES: &[&str] = &[
    "../shared",
    "terminus2-reference",
    "harbor-orchestration-reference",
    "stack-probe",
    "swarm-probe",
    "machine-notes",
    "targets.md",
    "style.md",
    "§",
];

/// Further words that are fine in prose under docs/ (which traces the handbook's registers to
/// the code) but not in code comments.
const OUTSIDE_REFERENCES_IN_CODE: &[&str] = &["handbook", "seed 0", "seeds 0", "issue 1", "issue 2", "issue #"];

#[test]
fn nothing_points_at_documents_outside_the_repository() {
    let code = files(
        &["crates", "tests", "scripts", "configs", "examples", ".ci"],
        &[".rs", ".sh", ".py", ".mjs", ".js", ".html", ".css", ".toml", ".yaml", ".yml", "run"],
    );
    let mut docs = files(&["docs"], &[".md"]);
    docs.extend(["README.md", "ARCHITECTURE.md"].map(|f| root().join(f)));
    let mut offences = Vec::new();
    for (set, words) in
        [(code, [OUTSIDE_REFERENCES, OUTSIDE_REFERENCES_IN_CODE].concat()), (docs, OUTSIDE_REFERENCES.to_vec())]
    {
        for file in set {
            if file.ends_with("tests/tidy.rs") {
                continue;
            }
            for (n, line) in text(&file).lines().enumerate() {
                let lower = line.to_lowercase();
                if let Some(word) = words.iter().find(|w| lower.contains(&w.to_lowercase())) {
                    offences.push(format!("{}:{}: `{word}` in {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    fail_if_any("comments and docs point only at files in the repository", offences);
}

/// The `[dependencies]` (or other) table of a manifest as `name` lines, without a TOML parser:
/// manifests here keep one dependency per line.
fn dependency_names(manifest: &Path, table: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in text(manifest).lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == format!("[{table}]");
        } else if inside && let Some((name, _)) = line.split_once('=') {
            names.push(name.trim().trim_end_matches(".workspace").to_string());
        }
    }
    names
}

#[test]
fn engine_and_http_clients_are_each_a_dependency_of_one_crate() {
    let mut manifests = files(&["crates"], &["Cargo.toml"]);
    manifests.push(root().join("Cargo.toml"));
    let owner = |dependency: &str| match dependency {
        "bollard" => Some("crates/terminus-sandbox/Cargo.toml"),
        "reqwest" => Some("crates/terminus-llm/Cargo.toml"),
        _ => None,
    };
    let mut offences = Vec::new();
    for manifest in &manifests {
        for table in ["dependencies", "build-dependencies"] {
            for name in dependency_names(manifest, table) {
                if let Some(home) = owner(&name)
                    && shown(manifest) != home
                {
                    offences.push(format!("{}: [{table}] {name} (it belongs to {home} only)", shown(manifest)));
                }
            }
        }
    }
    assert!(
        dependency_names(&root().join("crates/terminus-sandbox/Cargo.toml"), "dependencies")
            .contains(&"bollard".into()),
        "the manifest reader found no bollard where it is: it is broken"
    );
    fail_if_any("bollard only in terminus-sandbox, reqwest only in terminus-llm (tests may use both)", offences);
}

#[test]
fn clippy_keeps_the_engine_the_http_client_and_subprocesses_in_their_crates() {
    let rules = text(&root().join("clippy.toml"));
    for rule in ["bollard::Docker", "reqwest::Client", "std::process::Command::new", "tokio::process::Command::new"] {
        assert!(rules.contains(rule), "clippy.toml no longer disallows {rule}");
    }
    for (krate, owned) in [
        ("terminus-sandbox", "bollard::Docker"),
        ("terminus-llm", "reqwest::Client"),
        ("terminus-bench", "std::process::Command::new"),
        ("terminus-fetch", "std::process::Command::new"),
        ("terminus-warden", "std::process::Command::new"),
    ] {
        let own = text(&root().join(format!("crates/{krate}/clippy.toml")));
        for rule in ["bollard::Docker", "reqwest::Client"] {
            assert!(
                rule == owned || own.contains(rule),
                "crates/{krate}/clippy.toml replaces the workspace's and must keep disallowing {rule}"
            );
        }
    }
}

/// terminus-fetch may start programs (its clippy.toml allows it) for one purpose: git, from
/// `git.rs`. Its unit tests (`tests.rs`, which make repositories) are not the product.
#[test]
fn the_fetch_crate_starts_git_and_nothing_else() {
    let mut seen = 0;
    let mut offences = Vec::new();
    for file in files(&["crates/terminus-fetch/src"], &[".rs"]).into_iter().filter(|f| !f.ends_with("tests.rs")) {
        let source = text(&file);
        for (n, line) in source.lines().take(code_lines(&source)).enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if squeezed.contains("Command::new(") {
                seen += 1;
                if !(file.ends_with("git.rs") && squeezed.contains("Command::new(\"git\")")) {
                    offences.push(format!("{}:{}: {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    assert_eq!(seen - offences.len(), 1, "the reader found no `Command::new(\"git\")` in git.rs: it is broken");
    fail_if_any("terminus-fetch starts git only, in git.rs", offences);
}

/// terminus-sandbox reaches Docker through bollard; the one program it starts is the user's
/// Docker credential helper (`docker-credential-<name> get`), from `credentials.rs`.
#[test]
fn the_sandbox_starts_credential_helpers_and_nothing_else() {
    let mut seen = 0;
    let mut offences = Vec::new();
    for file in files(&["crates/terminus-sandbox/src"], &[".rs"]).into_iter().filter(|f| !f.ends_with("tests.rs")) {
        let source = text(&file);
        for (n, line) in source.lines().take(code_lines(&source)).enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if squeezed.contains("Command::new(") {
                seen += 1;
                if !(file.ends_with("credentials.rs") && squeezed.contains("Command::new(program)")) {
                    offences.push(format!("{}:{}: {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    assert_eq!(seen - offences.len(), 1, "the reader found no `Command::new(program)` in credentials.rs: it is broken");
    fail_if_any("terminus-sandbox starts credential helpers only, in credentials.rs", offences);
}

/// The warden (a container's verification program) starts programs for one purpose: the
/// task's tests, from `verdict.rs` (the script, or bash given the script when it has no `#!`).
#[test]
fn the_warden_starts_the_tests_and_nothing_else() {
    let mut seen = 0;
    let mut offences = Vec::new();
    for file in files(&["crates/terminus-warden/src"], &[".rs"]) {
        let source = text(&file);
        for (n, line) in source.lines().take(code_lines(&source)).enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if squeezed.contains("Command::new(") {
                seen += 1;
                if !(file.ends_with("verdict.rs") && squeezed.contains("Command::new(program)")) {
                    offences.push(format!("{}:{}: {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    assert_eq!(seen - offences.len(), 1, "the reader found no `Command::new(program)` in verdict.rs: it is broken");
    fail_if_any("the warden starts the tests only, in verdict.rs", offences);
}

/// The actors load, resolve and ask the backend; how an environment is made is the sandbox's
/// (`Backend`, `Site`, `ProvisionRequest`). They name no engine, no bollard type and nothing of
/// one backend's.
#[test]
fn the_actors_reach_environments_through_the_backend_only() {
    const DOCKER_WORDS: &[&str] = &[
        "Engine",
        "bollard",
        "ImageBuilder",
        "ContainerSpec",
        "swarm_",
        ".local()",
        ".engine()",
        "Backend::Docker",
        "Backend::Swarm",
        "compose::Project",
        "EgressSpec",
    ];
    let is_word_end = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut offences = Vec::new();
    for file in files(&["crates/terminus-actors/src"], &[".rs"]) {
        for (n, line) in text(&file).lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in DOCKER_WORDS {
                let named = code.match_indices(word).any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + word.len()..].chars().next();
                    let bounded = |c: Option<char>| word.ends_with('_') || word.ends_with(')') || is_word_end(c);
                    (word.starts_with('.') || is_word_end(before)) && bounded(after)
                });
                if named {
                    offences.push(format!("{}:{}: `{word}` in {}", shown(&file), n + 1, line.trim()));
                }
            }
        }
    }
    fail_if_any("terminus-actors reach environments through `Backend` and `Site` only", offences);
}

#[test]
fn the_product_runs_no_docker_cli() {
    let mut offences = Vec::new();
    for file in files(&["crates"], &[".rs"]) {
        for (n, line) in text(&file).lines().enumerate() {
            let squeezed: String = line.split_whitespace().collect();
            if squeezed.contains("Command::new(\"docker") {
                offences.push(format!("{}:{}", shown(&file), n + 1));
            }
        }
    }
    fail_if_any("the product reaches Docker through bollard only", offences);
}

/// The most lines a file of the product may hold, inline unit tests included (a file of unit
/// tests of its own, `tests.rs`, is not the product).
const MAX_FILE_LINES: usize = 800;

/// Files over the budget that are still to be split. The list may only shrink: a file that
/// fits fails the test until it is taken off.
const OVER_BUDGET: &[&str] = &[];

/// Whether `file` holds unit tests only: a `tests.rs` that its parent module (`<dir>.rs`, or
/// `lib.rs`/`main.rs` in the same directory) declares as `#[cfg(test)] mod tests;`.
fn is_test_file(file: &Path) -> bool {
    let (Some(dir), true) = (file.parent(), file.file_name().is_some_and(|n| n == "tests.rs")) else {
        return false;
    };
    let parents = [dir.with_extension("rs"), dir.join("lib.rs"), dir.join("main.rs")];
    parents.iter().any(|parent| text_or_empty(parent).contains("#[cfg(test)]\nmod tests;"))
}

/// A file's text, or nothing when it cannot be read.
fn text_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The lines of a file before its unit tests (`#[cfg(test)]` at the start of a line).
fn code_lines(source: &str) -> usize {
    source.lines().take_while(|l| !l.starts_with("#[cfg(test)]") && !l.starts_with("#[cfg(all(test")).count()
}

#[test]
fn no_product_file_is_over_its_line_budget() {
    let mut offences = Vec::new();
    for file in files(&["crates"], &[".rs"]).into_iter().filter(|f| !is_test_file(f)) {
        let name = shown(&file);
        let lines = text(&file).lines().count();
        let listed = OVER_BUDGET.contains(&name.as_str());
        if lines > MAX_FILE_LINES && !listed {
            offences.push(format!("{name}: {lines} lines (at most {MAX_FILE_LINES}); split it by concern"));
        } else if lines <= MAX_FILE_LINES && listed {
            offences.push(format!("{name}: {lines} lines now; take it off OVER_BUDGET in tests/tidy.rs"));
        }
    }
    fail_if_any("files stay under their line budget", offences);
}

#[test]
fn only_declared_unit_test_files_are_left_out_of_the_budget() {
    let src = root().join("crates/terminus-agent/src");
    assert!(is_test_file(&src.join("agent_loop/tests.rs")), "declared by agent_loop.rs");
    assert!(is_test_file(&root().join("crates/terminus-fetch/src/tests.rs")), "declared by lib.rs");
    assert!(!is_test_file(&src.join("agent_loop.rs")));
    assert!(!is_test_file(&src.join("nowhere/tests.rs")), "no parent declares it");
}

#[test]
fn code_lines_stop_at_the_unit_tests() {
    assert_eq!(code_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(code_lines("a\n#[cfg(all(test, unix))]\nmod tests {}\n"), 1);
    assert_eq!(code_lines("a\nb\n"), 2);
}

/// The most lines a product function may span, its signature and closing brace included.
const MAX_FN_LINES: usize = 120;

/// The lines of `source`, those of its inline test modules (`#[cfg(test)]` then `mod … {` up to
/// the `}` at the module's indentation) left blank so that line numbers stay: code after a test
/// module, and items marked `#[cfg(test)]` elsewhere, are still read.
fn without_test_modules(source: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = source.lines().collect();
    let mut i = 0;
    while i + 1 < lines.len() {
        let attribute = lines[i].trim_start();
        let next = lines[i + 1].trim_start();
        if attribute.starts_with("#[cfg(test)]") && next.starts_with("mod ") && next.ends_with('{') {
            let indent = &lines[i + 1][..lines[i + 1].len() - next.len()];
            let close = format!("{indent}}}");
            let last = lines.len() - 1;
            let end = lines[i + 1..].iter().position(|l| *l == close).map_or(last, |e| i + 1 + e);
            for line in &mut lines[i..=end] {
                *line = "";
            }
            i = end;
        }
        i += 1;
    }
    lines
}

/// Each function of `source` outside its inline test modules, as (line, name, lines spanned): a `fn` at
/// the start of a line (after its indentation and qualifiers) with a body, which rustfmt closes
/// with a `}` at the same indentation.
fn function_spans(source: &str) -> Vec<(usize, String, usize)> {
    let lines = without_test_modules(source);
    let mut spans = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let mut rest = body;
        for qualifier in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        let Some(after) = rest.strip_prefix("fn ") else { continue };
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if body.contains('{') && body.ends_with('}') {
            spans.push((i + 1, name, 1));
            continue;
        }
        let close = format!("{indent}}}");
        let Some(end) = lines[i..].iter().position(|l| *l == close) else { continue };
        // A declaration without a body (a trait's) ends with `;` before any `{`.
        let head = lines[i..=i + end].join("\n");
        if head.find(';').is_some_and(|semi| head.find('{').is_none_or(|brace| semi < brace)) {
            continue;
        }
        spans.push((i + 1, name, end + 1));
    }
    spans
}

#[test]
fn no_product_function_is_over_its_line_budget() {
    let mut offences = Vec::new();
    for file in files(&["crates"], &[".rs"]) {
        for (line, name, span) in function_spans(&text(&file)) {
            if span > MAX_FN_LINES {
                offences.push(format!(
                    "{}:{line}: fn {name} spans {span} lines (at most {MAX_FN_LINES}); split it into steps",
                    shown(&file)
                ));
            }
        }
    }
    fail_if_any("functions stay under their line budget", offences);
}

#[test]
fn function_spans_run_from_fn_to_its_closing_brace() {
    let source = "pub async fn a(\n    x: u8,\n) {\n    x;\n}\nimpl T {\n    fn b(&self) {}\n    fn c() {\n    }\n}\ntrait U {\n    fn d(&self);\n}\n#[cfg(test)]\nfn e() {\n}\n";
    let spans = function_spans(source);
    let names: Vec<(&str, usize)> = spans.iter().map(|(_, n, s)| (n.as_str(), *s)).collect();
    // `b` is one line, `d` has no body, `e` (test-only, but outside a test module) is measured.
    assert_eq!(names, [("a", 5), ("b", 1), ("c", 2), ("e", 2)]);
}

/// The integration tests (`module::name`) whose body takes `heavy_lock()`: a test is a
/// function at the start of a line after a `#[test]` or `#[tokio::test…]` attribute, and its
/// body runs to the next function at the start of a line.
fn tests_taking_the_heavy_lock() -> Vec<String> {
    let mut out = Vec::new();
    for file in files(&["tests/integration"], &[".rs"]) {
        // The module path: `real_model/parity.rs` is `real_model::parity`.
        let relative = file.strip_prefix(root().join("tests/integration")).unwrap_or(&file).with_extension("");
        let module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect::<Vec<_>>().join("::");
        let (mut attribute, mut test) = (false, None::<String>);
        for line in text(&file).lines() {
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                attribute = true;
            } else if let Some(rest) =
                ["async fn ", "fn ", "pub fn ", "pub async fn ", "pub(crate) fn ", "pub(crate) async fn "]
                    .iter()
                    .find_map(|start| line.strip_prefix(start))
            {
                let name = rest.split(['(', '<']).next().unwrap_or_default();
                test = attribute.then(|| format!("{module}::{name}"));
                attribute = false;
            } else if line.contains("heavy_lock()")
                && let Some(name) = test.take()
            {
                out.push(name);
            }
        }
    }
    out.sort();
    out
}

/// The tests `.config/nextest.toml` names in `test(=…)` filters.
fn nextest_named_tests() -> Vec<String> {
    let config = text(&root().join(".config/nextest.toml"));
    let mut out: Vec<String> = config
        .split("test(=")
        .skip(1)
        .filter_map(|rest| rest.split_once(')'))
        .map(|(name, _)| name.to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn nextest_runs_the_tests_that_take_the_heavy_lock_one_at_a_time() {
    let taking = tests_taking_the_heavy_lock();
    assert!(
        taking.contains(&"jobs::scripted_model_job_over_all_examples".to_string()),
        "the reader found no test taking the lock where one does: it is broken"
    );
    let config = text(&root().join(".config/nextest.toml"));
    assert!(config.contains("docker-heavy = { max-threads = 1 }"), "the group runs one test at a time");
    assert!(config.contains("test-group = \"docker-heavy\""), "the tests named are put in the group");
    let named = nextest_named_tests();
    let mut offences: Vec<String> = taking
        .iter()
        .filter(|t| !named.contains(t))
        .map(|t| format!("{t}: takes heavy_lock, not in the group"))
        .collect();
    offences.extend(
        named.iter().filter(|t| !taking.contains(t)).map(|t| format!("{t}: in the group, takes no heavy_lock")),
    );
    fail_if_any(".config/nextest.toml's docker-heavy group names exactly the tests that take heavy_lock", offences);
}

/// The rows of a Markdown table as (line number, cells): the lines that start with `| `, the
/// header first, each split at its ` | ` separators.
fn table_rows(doc: &str) -> Vec<(usize, Vec<&str>)> {
    doc.lines()
        .enumerate()
        .filter(|(_, line)| line.starts_with("| "))
        .map(|(n, line)| (n + 1, line.trim_start_matches("| ").trim_end_matches(" |").split(" | ").collect()))
        .collect()
}

/// The tests a cell names: `path::function` items in backticks, separated by commas.
fn named_tests(cell: &str) -> Vec<&str> {
    cell.split(',').map(|item| item.trim().trim_matches('`')).filter(|item| !item.is_empty()).collect()
}

/// Why `name` (`path::function`, the path from the repository's root) names no function of the
/// checkout, or None when its file holds `fn function`.
fn missing_test(name: &str) -> Option<String> {
    let Some((path, function)) = name.split_once("::") else {
        return Some(format!("`{name}` is not path::function"));
    };
    match std::fs::read_to_string(root().join(path)) {
        Err(e) => Some(format!("{path}: {e}")),
        Ok(source) if !source.contains(&format!("fn {function}(")) => Some(format!("{path} has no `fn {function}`")),
        Ok(_) => None,
    }
}

/// The Harbor versions whose wheels the reference column is checked against.
const HARBOR_WHEELS: &[&str] = &["0.25.0", "0.26.0"];

#[test]
fn every_difference_names_its_harbor_versions_and_the_tests_that_hold_it() {
    let path = root().join("docs/DIFFERENCES.md");
    let doc = text(&path);
    let rows = table_rows(&doc);
    let Some(((_, header), rows)) = rows.split_first() else { panic!("docs/DIFFERENCES.md has no table") };
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no `{name}` column"));
    let (harbor, tests) = (column("Harbor"), column("test"));
    assert!(rows.len() > 10, "the reader found {} rows: it is broken", rows.len());
    let mut offences = Vec::new();
    for (line, cells) in rows {
        let at = format!("docs/DIFFERENCES.md:{line} ({})", cells[0]);
        if cells.len() != header.len() {
            offences.push(format!("{at}: {} cells, the header has {}", cells.len(), header.len()));
            continue;
        }
        let versions: Vec<&str> = cells[harbor].split(',').map(str::trim).collect();
        if versions.iter().any(|v| !HARBOR_WHEELS.contains(v)) {
            offences.push(format!("{at}: Harbor `{}` is not a list of {HARBOR_WHEELS:?}", cells[harbor]));
        }
        let named = named_tests(cells[tests]);
        if named.is_empty() {
            offences.push(format!("{at}: no test"));
        }
        offences.extend(named.iter().filter_map(|name| missing_test(name)).map(|why| format!("{at}: {why}")));
    }
    fail_if_any("each difference names the Harbor wheels it was checked against and tests that exist", offences);
}

#[test]
fn difference_cells_are_read_as_the_table_writes_them() {
    let rows = table_rows("text\n| a | b |\n|---|---|\n| x | `p.rs::f`, `q.rs::g` |\n");
    assert_eq!(rows, [(2, vec!["a", "b"]), (4, vec!["x", "`p.rs::f`, `q.rs::g`"])]);
    assert_eq!(named_tests(rows[1].1[1]), ["p.rs::f", "q.rs::g"]);
    assert!(named_tests(" ").is_empty());
    assert_eq!(missing_test("tests/tidy.rs::missing_test"), None);
    assert!(missing_test("tests/tidy.rs::no_such_function").is_some());
    assert!(missing_test("tests/no_such_file.rs::f").is_some());
    assert!(missing_test("no_path").is_some());
}

#[test]
#[expect(clippy::disallowed_methods, reason = "the checkers are programs of their own")]
fn shell_programs_are_files_that_bash_and_shellcheck_accept() {
    let mut offences = Vec::new();
    // The shell programs the product carries: `.sh` files in the crates, included at build time.
    for file in files(&["crates"], &[".sh"]) {
        let bash = std::process::Command::new("bash").arg("-n").arg(&file).output().expect("bash runs");
        if !bash.status.success() {
            offences.push(format!("{}: bash -n: {}", shown(&file), String::from_utf8_lossy(&bash.stderr).trim()));
        }
        let check = std::process::Command::new("shellcheck").args(["--shell=bash", "--format=gcc"]).arg(&file).output();
        let check = check.unwrap_or_else(|e| panic!("shellcheck cannot be run ({e}): scripts/setup.sh installs it"));
        if !check.status.success() {
            offences.push(format!("{}: shellcheck:\n{}", shown(&file), String::from_utf8_lossy(&check.stdout).trim()));
        }
    }
    fail_if_any("shell programs parse and pass shellcheck", offences);
}

/// Words that make a string a shell program rather than a command line.
const SHELL_PROGRAM_WORDS: &[&str] = &["; then", "; do", "() {", "esac", "\nfi", "\ndone"];

/// The multi-line raw strings (`r#"…"#`) of `source` outside its inline test modules: (first
/// line, text).
fn raw_strings(source: &str) -> Vec<(usize, String)> {
    let code = without_test_modules(source).join("\n");
    let mut out = Vec::new();
    let mut rest = code.as_str();
    let mut offset = 0;
    while let Some(start) = rest.find("r#\"") {
        let body = &rest[start + 3..];
        let Some(end) = body.find("\"#") else { break };
        let line = code[..offset + start].matches('\n').count() + 1;
        if body[..end].contains('\n') {
            out.push((line, body[..end].to_string()));
        }
        offset += start + 3 + end + 2;
        rest = &code[offset..];
    }
    out
}

#[test]
fn no_shell_program_is_written_in_a_rust_string() {
    let mut offences = Vec::new();
    for file in files(&["crates"], &[".rs"]) {
        let name = shown(&file);
        if is_test_file(&file) || name.starts_with("crates/terminus-bench/") {
            continue;
        }
        for (line, body) in raw_strings(&text(&file)) {
            if body.lines().count() >= 3 && SHELL_PROGRAM_WORDS.iter().any(|w| body.contains(w)) {
                offences.push(format!("{name}:{line}"));
            }
        }
    }
    fail_if_any("shell programs are .sh files (include_str!), checked by bash -n and shellcheck", offences);
}

/// The std calls that wait on a child process without a limit.
const UNBOUNDED_WAITS: [&str; 4] = [".output()", ".status()", ".wait()", ".wait_with_output()"];

#[test]
fn integration_tests_wait_on_processes_only_within_a_bound() {
    let mut offences = Vec::new();
    for file in files(&["tests/integration"], &[".rs"]) {
        let name = shown(&file);
        if name == "tests/integration/bounded.rs" {
            continue;
        }
        for (number, line) in text(&file).lines().enumerate() {
            if let Some(call) = UNBOUNDED_WAITS.iter().find(|call| line.contains(*call)) {
                offences.push(format!("{name}:{}: {call} (use its _bounded form from bounded.rs)", number + 1));
            }
        }
    }
    fail_if_any("a test waits on a process it started within a limit", offences);
}

#[test]
fn functions_after_a_cfg_test_item_are_still_measured() {
    let long_body = "    x();\n".repeat(3);
    let source = format!(
        "#[cfg(test)]\nuse a::b;\nfn before() {{\n{long_body}}}\n#[cfg(test)]\nmod tests {{\n    fn t() {{\n    }}\n}}\nfn after() {{\n{long_body}}}\n"
    );
    let spans = function_spans(&source);
    let names: Vec<&str> = spans.iter().map(|(_, name, _)| name.as_str()).collect();
    assert_eq!(names, ["before", "after"], "{spans:?}");
    assert_eq!(spans[1].0, 13, "line numbers are the file's");
}

#[test]
fn raw_strings_are_found_with_their_lines() {
    let source = "fn a() {}\nconst S: &str = r#\"x\nfor a in b; do\n  c\ndone\"#;\nconst T: &str = r#\"one line\"#;\n";
    let found = raw_strings(source);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 2);
    assert!(found[0].1.contains("; do"));
}
