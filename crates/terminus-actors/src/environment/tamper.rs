//! Tamper evidence: whether the agent changed what the verification runs. The engine's storage
//! driver knows which files of the container differ from the image (nothing in the container can
//! hide that); the task's own `test.sh`, read on the host, says what the tests run. A change
//! counts when it touches:
//! - the interpreter `test.sh`'s first line names, by its absolute path (added or modified);
//! - the loader's preload list or the C library and loader themselves;
//! - a program by a watched name — the shells, `env`, the program `env` is asked for, and every
//!   command `test.sh` runs by name — in a `bin` or `sbin` directory: modified, or added where
//!   the image has one of that name elsewhere (in front of it on some `PATH`). A program the
//!   agent installed where the image had none is its work, not a change (tests that rely on it
//!   trust the agent anyway).

use std::collections::BTreeSet;

use terminus_sandbox::{ChangeKind, ExecOptions, FileChange};

/// What the tests run, as `test.sh` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// The absolute path on its `#!` line.
    pub interpreter: Option<String>,
    /// Program names looked up through `PATH`.
    pub names: BTreeSet<String>,
}

/// Words that start a command but are none.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "in", "function",
    "select", "time", "!", "{", "}", "[[", "]]", "[", "exec", "command", "builtin", "sudo", "nohup", "timeout",
    "xargs", "return", "exit", "export", "local", "declare", "readonly", "set", "unset", "source", ".", "cd", "echo",
    "printf", "read", "test", "true", "false", "shift", "trap", "wait", "eval",
];

/// The programs `test_sh` runs.
pub fn watch(test_sh: &str) -> Watch {
    let mut watch = Watch::default();
    watch.names.extend(["bash", "sh", "dash", "env"].map(String::from));
    let mut lines = test_sh.lines();
    if let Some(shebang) = test_sh.strip_prefix("#!") {
        lines.next();
        let words: Vec<&str> = shebang.lines().next().unwrap_or_default().split_whitespace().collect();
        if let Some(first) = words.first() {
            watch.interpreter = Some(first.to_string());
            add_program(&mut watch, first);
            if first.ends_with("/env") {
                let asked = words.iter().skip(1).find(|w| !w.starts_with('-'));
                if let Some(program) = asked {
                    add_program(&mut watch, program);
                }
            }
        }
    }
    for line in lines.map(str::trim).filter(|l| !l.starts_with('#')) {
        let line = line.replace("$(", ";").replace(['(', ')', '`', '|', '&', ';'], ";");
        for segment in line.split(';') {
            let words = segment.split_whitespace().skip_while(|w| w.contains('=') && !w.starts_with('='));
            if let Some(word) = words.into_iter().find(|w| !KEYWORDS.contains(w)) {
                add_program(&mut watch, word);
            }
        }
    }
    watch
}

/// A program word: a bare name, or an absolute path in a program directory (a path elsewhere is
/// the agent's work under test).
fn add_program(watch: &mut Watch, word: &str) {
    let word = word.trim_matches(|c| c == '"' || c == '\'');
    let plain = |name: &str| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c));
    match word.rsplit_once('/') {
        None if plain(word) => {
            watch.names.insert(word.to_string());
        }
        Some((dir, name)) if word.starts_with('/') && in_program_dir(dir) && plain(name) => {
            watch.names.insert(name.to_string());
        }
        _ => {}
    }
}

fn in_program_dir(dir: &str) -> bool {
    dir.rsplit('/').next().is_some_and(|last| last == "bin" || last == "sbin")
}

/// The path with a merged `/usr` folded in (`/bin` is `/usr/bin` on most images).
fn canonical(path: &str) -> String {
    for (short, long) in
        [("/bin/", "/usr/bin/"), ("/sbin/", "/usr/sbin/"), ("/lib/", "/usr/lib/"), ("/lib64/", "/usr/lib64/")]
    {
        if let Some(rest) = path.strip_prefix(short) {
            return format!("{long}{rest}");
        }
    }
    path.to_string()
}

/// The evidence, one line per changed file (empty: none). `found`: every file of a watched
/// name in the container's program directories now.
pub fn tampered(watch: &Watch, changes: &[FileChange], found: &[String]) -> Vec<String> {
    let added: BTreeSet<String> =
        changes.iter().filter(|c| c.kind == ChangeKind::Added).map(|c| canonical(&c.path)).collect();
    let interpreter = watch.interpreter.as_deref().map(canonical);
    let mut evidence = Vec::new();
    for change in changes.iter().filter(|c| c.kind != ChangeKind::Deleted) {
        let path = canonical(&change.path);
        let how = if change.kind == ChangeKind::Added { "added" } else { "modified" };
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
        if interpreter.as_deref() == Some(path.as_str()) {
            evidence.push(format!("{} {how}: the interpreter test.sh names", change.path));
        } else if path == "/etc/ld.so.preload" {
            evidence.push(format!("{} {how}: the loader preloads it into every program", change.path));
        } else if change.kind == ChangeKind::Modified
            && (name.starts_with("ld-linux") || name.starts_with("libc.so"))
            && dir.contains("/lib")
        {
            evidence.push(format!("{} modified: the C library or loader", change.path));
        } else if in_program_dir(dir) && watch.names.contains(name) {
            if change.kind == ChangeKind::Modified {
                evidence.push(format!("{} modified: the verification runs `{name}`", change.path));
            } else if let Some(original) = found
                .iter()
                .find(|f| canonical(f) != path && !added.contains(&canonical(f)) && f.ends_with(&format!("/{name}")))
            {
                evidence.push(format!(
                    "{} added beside the image's {original}: the verification runs `{name}`",
                    change.path
                ));
            }
        }
    }
    evidence
}

/// The evidence in `container` against what `test_sh` runs.
pub async fn evidence(container: &terminus_sandbox::Environment, test_sh: &str) -> Result<Vec<String>, String> {
    let watch = watch(test_sh);
    let names: Vec<&str> = watch.names.iter().map(String::as_str).collect();
    let names = names.join(",");
    let options = ExecOptions {
        user: Some("root".into()),
        timeout: Some(std::time::Duration::from_secs(60)),
        ..Default::default()
    };
    let out = container.exec_warden(&["which", "--names", &names], &options).await.map_err(|e| e.to_string())?;
    if !out.output.lines().any(|l| l == "ok") {
        return Err(format!("the warden did not answer: {}", out.output.trim()));
    }
    let found: Vec<String> = out.output.lines().filter_map(|l| l.strip_prefix("found ")).map(String::from).collect();
    let changes = tokio::time::timeout(std::time::Duration::from_secs(60), container.changes())
        .await
        .map_err(|_| "the engine did not list the container's changes within 60 s".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(tampered(&watch, &changes, &found))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, kind: ChangeKind) -> FileChange {
        FileChange { path: path.into(), kind }
    }

    #[test]
    fn the_programs_test_sh_runs_are_watched() {
        let w = watch(
            "#!/usr/bin/env -S python3 -u\nset -e\nX=1 pytest -q /tests | tee out\nif [ -f a ]; then uv run x; fi\n$(curl -s y) && /usr/local/bin/jq . f\n/app/run.sh\n# rm -rf\n",
        );
        assert_eq!(w.interpreter.as_deref(), Some("/usr/bin/env"));
        for name in ["python3", "pytest", "tee", "uv", "curl", "jq", "bash", "sh", "env"] {
            assert!(w.names.contains(name), "{name}: {:?}", w.names);
        }
        for name in ["set", "X=1", "if", "[", "run.sh", "rm", "then"] {
            assert!(!w.names.contains(name), "{name}: {:?}", w.names);
        }
    }

    #[test]
    fn a_shadowing_or_modified_program_is_evidence_a_new_one_is_not() {
        let w = watch("#!/bin/bash\npytest /tests\ncurl -s x\n");
        let found = ["/usr/local/bin/bash".to_string(), "/usr/bin/bash".into(), "/usr/local/bin/curl".into()];
        let changes = [
            change("/usr/local/bin/bash", ChangeKind::Added),
            change("/usr/local/bin", ChangeKind::Modified),
            change("/usr/local/bin/curl", ChangeKind::Added),
            change("/usr/bin/pytest", ChangeKind::Modified),
            change("/app/answer.txt", ChangeKind::Added),
            change("/usr/lib/python3", ChangeKind::Modified),
        ];
        let evidence = tampered(&w, &changes, &found);
        assert_eq!(evidence.len(), 2, "{evidence:?}");
        assert!(evidence[0].starts_with("/usr/local/bin/bash added beside the image's /usr/bin/bash"));
        assert!(evidence[1].starts_with("/usr/bin/pytest modified"));
        let swapped = tampered(&w, &[change("/usr/bin/bash", ChangeKind::Modified)], &[]);
        assert_eq!(swapped, ["/usr/bin/bash modified: the interpreter test.sh names"], "/bin is /usr/bin");
        let preload = tampered(&w, &[change("/etc/ld.so.preload", ChangeKind::Added)], &[]);
        assert_eq!(preload.len(), 1);
        assert!(tampered(&w, &[change("/usr/bin/bash", ChangeKind::Deleted)], &[]).is_empty());
    }
}
