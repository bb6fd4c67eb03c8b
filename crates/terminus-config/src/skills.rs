//! Agent-level skills (`agents[].skills` in the job file): local directories of skills, each a
//! directory holding a `SKILL.md`, uploaded into every trial's container before the agent
//! starts and listed in Terminus 2's first prompt with the task's own.

use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// Where injected skills go when the task names no `skills_dir`.
pub const DEFAULT_SKILLS_DIR: &str = "/runtime/skills";

/// One skill to upload: its directory's name (its directory in the container) and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedSkill {
    pub name: String,
    pub source: PathBuf,
}

/// The skills `values` name: each a skill directory, or a directory whose every visible child is
/// one. A later skill of the same name replaces an earlier one; sorted by name. Only local
/// directories are taken (a relative path from the current directory, as a job's other paths);
/// anything else is an error naming `key[index]`.
pub fn resolve(path: &Path, key: &str, values: &[String]) -> Result<Vec<InjectedSkill>, ConfigError> {
    let mut skills: std::collections::BTreeMap<String, PathBuf> = std::collections::BTreeMap::new();
    for (index, value) in values.iter().enumerate() {
        let error = |message: String| ConfigError::invalid(path, format!("{key}[{index}]"), message);
        let dir = PathBuf::from(value);
        if !dir.exists() {
            return Err(error(format!(
                "{value:?} does not exist (skills are local directories; git sources are not fetched)"
            )));
        }
        if !dir.is_dir() {
            return Err(error(format!("{value:?} is not a directory")));
        }
        let found: Vec<PathBuf> = if dir.join(SKILL_FILE).is_file() {
            vec![dir]
        } else {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| error(format!("{value:?}: {e}")))?
                .flatten()
                .map(|entry| entry.path())
                .filter(|child| {
                    child.is_dir() && !child.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            children.sort();
            let invalid: Vec<String> = children
                .iter()
                .filter(|child| !child.join(SKILL_FILE).is_file())
                .map(|child| child.file_name().unwrap_or_default().to_string_lossy().into_owned())
                .collect();
            if !invalid.is_empty() {
                return Err(error(format!("{value:?} has directories without {SKILL_FILE}: {}", invalid.join(", "))));
            }
            if children.is_empty() {
                return Err(error(format!("{value:?} must hold {SKILL_FILE}, or directories that each hold one")));
            }
            children
        };
        for skill in found {
            let source = skill.canonicalize().unwrap_or(skill);
            let name = source.file_name().unwrap_or_default().to_string_lossy().into_owned();
            skills.insert(name, source);
        }
    }
    Ok(skills.into_iter().map(|(name, source)| InjectedSkill { name, source }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_are_skill_directories_or_roots_of_them_last_wins() {
        let dir = tempfile::tempdir().unwrap();
        let make = |rel: &str| {
            std::fs::create_dir_all(dir.path().join(rel)).unwrap();
            std::fs::write(dir.path().join(rel).join(SKILL_FILE), format!("# {rel}\n")).unwrap();
        };
        make("root/alpha");
        make("root/beta");
        make("other/beta");
        let at = |rel: &str| dir.path().join(rel).display().to_string();
        let skills = resolve(Path::new("job.yaml"), "agents[0].skills", &[at("root"), at("other/beta")]).unwrap();
        let names: Vec<(&str, bool)> =
            skills.iter().map(|s| (s.name.as_str(), s.source.ends_with("other/beta"))).collect();
        assert_eq!(names, [("alpha", false), ("beta", true)], "sorted, the later beta wins");
        let missing = resolve(Path::new("job.yaml"), "agents[0].skills", &["org/repo@main".into()]).unwrap_err();
        assert!(missing.to_string().contains("agents[0].skills[0]"), "{missing}");
        std::fs::create_dir_all(dir.path().join("root/not-a-skill")).unwrap();
        let bad = resolve(Path::new("job.yaml"), "agents[0].skills", &[at("root")]).unwrap_err();
        assert!(bad.to_string().contains("not-a-skill"), "{bad}");
    }
}
