//! A trial's page: what its directory holds (results, trajectories, the recording, verifier
//! output, earlier attempts, steps), trajectories served a page of steps at a time, and its files
//! served within caps.
//!
//! A trial is viewed at a *root*: the trial directory itself (`""`), an earlier attempt
//! (`attempts/N`), or a step of a multi-step task (`steps/<name>`); each holds the same layout.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;
use terminus_core::layout::{TrialDir, names};
use terminus_core::secrets;

use crate::confine::{self, is_plain_name};
use crate::error::ViewError;
use crate::scan::{self, Catalog, TrialRow};

/// Text files shown inline are cut here (the rest is a click away, paged).
pub const INLINE_CAP: u64 = 256 * 1024;
/// The most one file request returns.
pub const MAX_READ: u64 = 64 * 1024 * 1024;
/// What one file request returns unless it asks for more.
pub const DEFAULT_READ: u64 = 8 * 1024 * 1024;
/// Trajectories above this are indexed instead of parsed whole (see [`crate::step_index`]): a
/// page of steps is read from the file by its offsets, whatever the file's size.
pub const PARSE_WHOLE_BELOW: u64 = 32 * 1024 * 1024;
/// The most step bytes one page of an indexed trajectory holds.
pub const PAGE_BYTES: u64 = 2 * 1024 * 1024;
/// Entries listed in a trial's file tree.
const MAX_LISTED: usize = 5000;

/// A file, by its path below the trial directory.
#[derive(Clone, Debug, Serialize)]
pub struct FileRef {
    pub path: String,
    pub size: u64,
}

/// A text shown inline: its start, and whether there is more.
#[derive(Clone, Debug, Serialize)]
pub struct Capped {
    pub path: String,
    pub text: String,
    pub size: u64,
    pub truncated: bool,
}

/// A trajectory document of the trial.
#[derive(Clone, Debug, Serialize)]
pub struct TrajectoryRef {
    pub path: String,
    pub size: u64,
    /// `main` (trajectory.json), `cont` (a linear-history segment), `subagent` (a
    /// summarization subagent), `other`.
    pub kind: &'static str,
    /// The segment's or summarization's number.
    pub index: u32,
    pub label: String,
}

/// A place in the trial to view it at.
#[derive(Clone, Debug, Serialize)]
pub struct RootRef {
    pub path: String,
    pub label: String,
}

/// The verifier's output.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifierView {
    pub reward_txt: Option<String>,
    pub reward_json: Option<Value>,
    pub stdout: Option<Capped>,
    pub files: Vec<FileRef>,
}

/// The pane's size, for the live terminal.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PaneSize {
    pub cols: u64,
    pub rows: u64,
}

/// Everything a trial's page shows, at one root.
#[derive(Clone, Debug, Serialize)]
pub struct TrialDetail {
    pub job: String,
    pub trial: String,
    pub root: String,
    pub roots: Vec<RootRef>,
    pub row: TrialRow,
    pub result: Option<Value>,
    pub config: Option<Value>,
    pub exception: Option<Capped>,
    pub trajectories: Vec<TrajectoryRef>,
    pub recording: Option<FileRef>,
    pub pane_log: Option<FileRef>,
    pub verifier: VerifierView,
    pub artifacts: Vec<FileRef>,
    pub files: Vec<FileRef>,
    pub files_truncated: bool,
    pub pane: PaneSize,
}

/// The pane's size from a trial's config (Terminus 2's `tmux_pane_width`/`tmux_pane_height`,
/// 200 × 50 by default, the reference's 160 × 40 with `model_view: reference`).
fn pane_of(config: Option<&Value>) -> PaneSize {
    let kwargs = config.and_then(|c| c.pointer("/agent/kwargs"));
    let reference = kwargs.and_then(|k| k.get("model_view")).and_then(Value::as_str) == Some("reference");
    let (cols, rows) = if reference { (160, 40) } else { (200, 50) };
    let dim = |key: &str, default: u64| kwargs.and_then(|k| k.get(key)).and_then(Value::as_u64).unwrap_or(default);
    PaneSize { cols: dim("tmux_pane_width", cols), rows: dim("tmux_pane_height", rows) }
}

/// The pane's size of the trial in `trial_dir`: its `config.json` alone is read.
pub fn pane_size(trial_dir: &Path) -> PaneSize {
    pane_of(scan::read_json(&TrialDir::new(trial_dir).config_json()).ok().flatten().as_ref())
}

/// The roots a trial has: itself, each earlier attempt, each step.
pub fn roots(trial_dir: &Path) -> Vec<RootRef> {
    let mut out = vec![RootRef { path: String::new(), label: "this trial".into() }];
    let mut attempts: Vec<u32> = entries(&trial_dir.join(names::ATTEMPTS_DIR))
        .into_iter()
        .filter_map(|(name, is_dir)| if is_dir { name.parse().ok() } else { None })
        .collect();
    attempts.sort_unstable();
    for n in attempts {
        out.push(RootRef { path: format!("{}/{n}", names::ATTEMPTS_DIR), label: format!("earlier attempt {}", n + 1) });
    }
    let mut steps: Vec<String> = entries(&trial_dir.join(names::STEPS_DIR))
        .into_iter()
        .filter_map(|(name, is_dir)| is_dir.then_some(name))
        .collect();
    steps.sort();
    for step in steps {
        out.push(RootRef { path: format!("{}/{step}", names::STEPS_DIR), label: format!("step {step}") });
    }
    out
}

/// The plain entries of a directory: name and whether it is a directory.
pub(crate) fn entries(dir: &Path) -> Vec<(String, bool)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            is_plain_name(&name).then(|| (name, e.file_type().is_ok_and(|t| t.is_dir())))
        })
        .collect()
}

fn size_of(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The start of a text file, cut at `cap` bytes (on a character boundary).
pub fn read_capped(path: &Path, rel: &str, cap: u64) -> Option<Capped> {
    let size = std::fs::metadata(path).ok()?.len();
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(cap).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Some(Capped { path: rel.to_string(), text, size, truncated: size > cap })
}

/// Orders and labels trajectory files by their names (see `terminus_core::layout`).
fn trajectory_ref(rel: String, name: &str, size: u64) -> Option<TrajectoryRef> {
    let stem = name.strip_prefix("trajectory")?.strip_suffix(".json")?;
    let (kind, index, label) = if stem.is_empty() {
        ("main", 0, "main".to_string())
    } else if let Some(n) = stem.strip_prefix(".cont-").and_then(|n| n.parse().ok()) {
        ("cont", n, format!("continued ({n})"))
    } else if let Some(rest) = stem.strip_prefix(".summarization-") {
        let (n, suffix) = rest.split_once('-')?;
        let n: u32 = n.parse().ok()?;
        ("subagent", n, format!("summarization {n}: {suffix}"))
    } else {
        ("other", 0, stem.trim_start_matches('.').to_string())
    };
    Some(TrajectoryRef { path: rel, size, kind, index, label })
}

fn kind_rank(kind: &str) -> u8 {
    match kind {
        "main" | "cont" => 0,
        "subagent" => 1,
        _ => 2,
    }
}

/// The subagent suffixes in the order the summarization runs them.
fn suffix_rank(label: &str) -> u8 {
    ["summary", "questions", "answers"].iter().position(|s| label.ends_with(s)).unwrap_or(3) as u8
}

/// A trial's page at `root` (validated by the caller).
pub fn detail(
    catalog: &Catalog,
    job: &str,
    trial: &str,
    root: &str,
    job_running: bool,
) -> Result<TrialDetail, ViewError> {
    let trial_dir = catalog.root().trial(job, trial)?;
    if !root.is_empty() && !roots(&trial_dir).iter().any(|r| r.path == root) {
        return Err(ViewError::NoFile(root.to_string()));
    }
    let base = confine::below(&trial_dir, root)?;
    let at = TrialDir::new(&base);
    let prefix = if root.is_empty() { String::new() } else { format!("{root}/") };
    // A step has no result of its own (the trial's holds its `step_results`); an earlier
    // attempt has its whole record.
    let row_dir = if root.starts_with(names::STEPS_DIR) { &trial_dir } else { &base };
    let mut row = (*catalog.trial_row(row_dir, job_running && !root.starts_with(names::ATTEMPTS_DIR))).clone();
    row.name = trial.to_string();
    let redacted = |path: PathBuf| {
        scan::read_json(&path).ok().flatten().map(|mut v| {
            secrets::redact_json(&mut v);
            v
        })
    };
    // A step keeps its config and result in the trial's files.
    let result = redacted(at.result_json()).or_else(|| redacted(TrialDir::new(&trial_dir).result_json()));
    let config = redacted(at.config_json()).or_else(|| redacted(TrialDir::new(&trial_dir).config_json()));
    let mut trajectories: Vec<TrajectoryRef> = entries(&at.agent_dir())
        .into_iter()
        .filter(|(_, is_dir)| !is_dir)
        .filter_map(|(name, _)| {
            let size = size_of(&at.agent_file(&name));
            trajectory_ref(format!("{prefix}{}/{name}", names::AGENT_DIR), &name, size)
        })
        .collect();
    trajectories.sort_by(|a, b| {
        (kind_rank(a.kind), a.index, suffix_rank(&a.label)).cmp(&(kind_rank(b.kind), b.index, suffix_rank(&b.label)))
    });
    let agent_file = |name: &str| {
        let path = at.agent_file(name);
        path.is_file().then(|| FileRef { path: format!("{prefix}{}/{name}", names::AGENT_DIR), size: size_of(&path) })
    };
    let verifier_dir = at.verifier_dir();
    let verifier = VerifierView {
        reward_txt: read_capped(&verifier_dir.join(names::REWARD_TXT), names::REWARD_TXT, 4096).map(|c| c.text),
        reward_json: scan::read_json(&verifier_dir.join(names::REWARD_JSON)).ok().flatten(),
        stdout: read_capped(
            &verifier_dir.join(names::TEST_STDOUT),
            &format!("{prefix}{}/{}", names::VERIFIER_DIR, names::TEST_STDOUT),
            INLINE_CAP,
        ),
        files: list_files(&base, &verifier_dir, &prefix, 200).0,
    };
    let (files, files_truncated) = list_files(&base, &base, &prefix, MAX_LISTED);
    let artifacts = list_files(&base, &at.artifacts_dir(), &prefix, 500).0;
    let pane = pane_of(config.as_ref());
    Ok(TrialDetail {
        job: job.to_string(),
        trial: trial.to_string(),
        root: root.to_string(),
        roots: roots(&trial_dir),
        row,
        result,
        config,
        exception: read_capped(&at.exception_txt(), &format!("{prefix}{}", names::EXCEPTION_TXT), INLINE_CAP),
        trajectories,
        recording: agent_file(names::RECORDING_CAST),
        pane_log: agent_file(names::PANE_LOG),
        verifier,
        artifacts,
        files,
        files_truncated,
        pane,
    })
}

/// The files below `dir` (inside `base`), breadth first, at most `cap`; links are not followed.
fn list_files(base: &Path, dir: &Path, prefix: &str, cap: usize) -> (Vec<FileRef>, bool) {
    let mut out = Vec::new();
    let mut queue = VecDeque::from([dir.to_path_buf()]);
    while let Some(dir) = queue.pop_front() {
        let mut items: Vec<(String, std::fs::FileType, u64)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let meta = e.metadata().ok()?;
                let kind = e.file_type().ok()?;
                is_plain_name(&name).then_some((name, kind, meta.len()))
            })
            .collect();
        items.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind, size) in items {
            let path = dir.join(&name);
            if kind.is_dir() {
                queue.push_back(path);
            } else if kind.is_file() {
                if out.len() >= cap {
                    return (out, true);
                }
                let rel = path.strip_prefix(base).unwrap_or(&path).to_string_lossy().replace('\\', "/");
                out.push(FileRef { path: format!("{prefix}{rel}"), size });
            }
        }
    }
    (out, false)
}

/// A slice of a file.
pub struct FileSlice {
    pub bytes: Vec<u8>,
    pub total: u64,
    pub offset: u64,
    pub binary: bool,
    pub name: String,
}

/// `limit` bytes of a trial's file from `offset` (at most [`MAX_READ`]).
pub fn read_slice(trial_dir: &Path, rel: &str, offset: u64, limit: Option<u64>) -> Result<FileSlice, ViewError> {
    let path = confine::below(trial_dir, rel)?;
    if !path.is_file() {
        return Err(ViewError::NoFile(rel.to_string()));
    }
    let unreadable = |e: std::io::Error| ViewError::Unreadable { path: rel.to_string(), message: e.to_string() };
    let mut file = std::fs::File::open(&path).map_err(unreadable)?;
    let total = file.metadata().map_err(unreadable)?.len();
    let limit = limit.unwrap_or(DEFAULT_READ);
    if limit > MAX_READ {
        return Err(ViewError::TooLarge { path: rel.to_string(), size: limit, limit: MAX_READ });
    }
    let offset = offset.min(total);
    file.seek(SeekFrom::Start(offset)).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).map_err(unreadable)?;
    let binary = bytes.iter().take(8192).any(|b| *b == 0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(FileSlice { bytes, total, offset, binary, name })
}

/// A page of a trajectory's steps, with the document's other fields.
#[derive(Clone, Debug, Serialize)]
pub struct TrajectoryPage {
    pub path: String,
    pub total_steps: usize,
    pub offset: usize,
    pub steps: Vec<Value>,
    /// Everything but `steps`: schema version, session and trajectory ids, agent, final metrics…
    pub document: Value,
}

/// A trajectory parsed whole (a small one) or indexed (a large one).
enum Loaded {
    Parsed(Value),
    Indexed(crate::step_index::StepIndex),
}

/// A loaded trajectory, by its path, modification time and size.
type ParsedTrajectory = (PathBuf, (SystemTime, u64), Arc<Loaded>);

/// Parsed trajectories, the few most recently asked for: paging through a long one parses it
/// once.
#[derive(Default)]
pub struct TrajectoryCache {
    entries: Mutex<VecDeque<ParsedTrajectory>>,
}

const CACHED_TRAJECTORIES: usize = 4;

impl TrajectoryCache {
    /// Steps `offset..offset + limit` of the trajectory at `rel` below `trial_dir`.
    pub fn page(&self, trial_dir: &Path, rel: &str, offset: usize, limit: usize) -> Result<TrajectoryPage, ViewError> {
        let path = confine::below(trial_dir, rel)?;
        let meta = std::fs::metadata(&path).map_err(|_| ViewError::NoFile(rel.to_string()))?;
        let unreadable = |message: String| ViewError::Unreadable { path: rel.to_string(), message };
        let key = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
        let cached = {
            let entries = self.entries.lock().expect("not poisoned");
            entries.iter().find(|(p, k, _)| *p == path && *k == key).map(|(_, _, v)| v.clone())
        };
        let doc = match cached {
            Some(doc) => doc,
            None => {
                let doc = if meta.len() < PARSE_WHOLE_BELOW {
                    let bytes = std::fs::read(&path).map_err(|e| unreadable(e.to_string()))?;
                    Loaded::Parsed(serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?)
                } else {
                    Loaded::Indexed(crate::step_index::index(&path).map_err(|e| unreadable(e.to_string()))?)
                };
                let doc = Arc::new(doc);
                let mut entries = self.entries.lock().expect("not poisoned");
                entries.retain(|(p, _, _)| *p != path);
                entries.push_front((path.clone(), key, doc.clone()));
                entries.truncate(CACHED_TRAJECTORIES);
                doc
            }
        };
        match doc.as_ref() {
            Loaded::Parsed(doc) => {
                let steps = doc.get("steps").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let mut document = serde_json::Map::new();
                for (k, v) in doc.as_object().into_iter().flatten() {
                    if k != "steps" {
                        document.insert(k.clone(), v.clone());
                    }
                }
                let offset = offset.min(steps.len());
                let end = offset.saturating_add(limit).min(steps.len());
                Ok(TrajectoryPage {
                    path: rel.to_string(),
                    total_steps: steps.len(),
                    offset,
                    steps: steps[offset..end].to_vec(),
                    document: Value::Object(document),
                })
            }
            Loaded::Indexed(index) => {
                let total = index.steps.len();
                let offset = offset.min(total);
                let mut end = offset.saturating_add(limit).min(total);
                // A page of large steps is cut short (one step at least): the reader asks on.
                let mut bytes = 0;
                for (idx, (start, stop)) in index.steps[offset..end].iter().enumerate() {
                    bytes += stop - start;
                    if bytes > PAGE_BYTES && idx > 0 {
                        end = offset + idx;
                        break;
                    }
                }
                let steps =
                    crate::step_index::read_steps(&path, index, offset, end).map_err(|e| unreadable(e.to_string()))?;
                Ok(TrajectoryPage {
                    path: rel.to_string(),
                    total_steps: total,
                    offset,
                    steps,
                    document: index.document.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pane_is_the_configured_one_or_the_default_of_the_view() {
        let size = |kwargs: Value| {
            let p = pane_of(Some(&serde_json::json!({"agent": {"kwargs": kwargs}})));
            (p.cols, p.rows)
        };
        assert_eq!(size(serde_json::json!({})), (200, 50));
        assert_eq!(size(serde_json::json!({"model_view": "reference"})), (160, 40));
        assert_eq!(size(serde_json::json!({"model_view": "reference", "tmux_pane_height": 30})), (160, 30));
        assert_eq!(size(serde_json::json!({"tmux_pane_width": 120})), (120, 50));
    }

    #[test]
    fn trajectory_files_are_ordered_segments_first_then_subagents_in_run_order() {
        let mut refs: Vec<TrajectoryRef> = [
            "trajectory.summarization-1-answers.json",
            "trajectory.cont-2.json",
            "trajectory.json",
            "trajectory.summarization-1-summary.json",
            "trajectory.cont-1.json",
            "trajectory.summarization-1-questions.json",
            "notes.json",
        ]
        .iter()
        .filter_map(|n| trajectory_ref(format!("agent/{n}"), n, 1))
        .collect();
        refs.sort_by(|a, b| {
            (kind_rank(a.kind), a.index, suffix_rank(&a.label)).cmp(&(
                kind_rank(b.kind),
                b.index,
                suffix_rank(&b.label),
            ))
        });
        let labels: Vec<&str> = refs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "main",
                "continued (1)",
                "continued (2)",
                "summarization 1: summary",
                "summarization 1: questions",
                "summarization 1: answers"
            ]
        );
    }

    #[test]
    fn slices_and_pages_stay_inside_the_trial() {
        let dir = tempfile::tempdir().unwrap();
        let trial = dir.path().join("t");
        std::fs::create_dir_all(trial.join("agent")).unwrap();
        let steps: Vec<Value> = (1..=5).map(|i| serde_json::json!({"step_id": i, "source": "agent"})).collect();
        std::fs::write(
            trial.join("agent/trajectory.json"),
            serde_json::json!({"schema_version": "ATIF-v1.8", "steps": steps}).to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
        let cache = TrajectoryCache::default();
        let page = cache.page(&trial, "agent/trajectory.json", 3, 10).unwrap();
        assert_eq!((page.total_steps, page.offset, page.steps.len()), (5, 3, 2));
        assert_eq!(page.document["schema_version"], "ATIF-v1.8");
        assert!(page.document.get("steps").is_none());
        let slice = read_slice(&trial, "agent/trajectory.json", 2, Some(5)).unwrap();
        assert_eq!(slice.bytes.len(), 5);
        assert!(matches!(read_slice(&trial, "../outside.txt", 0, None), Err(ViewError::Refused(_))));
        assert!(matches!(read_slice(&trial, "agent", 0, None), Err(ViewError::NoFile(_))));
        assert!(matches!(
            read_slice(&trial, "agent/trajectory.json", 0, Some(MAX_READ + 1)),
            Err(ViewError::TooLarge { .. })
        ));
    }
}
