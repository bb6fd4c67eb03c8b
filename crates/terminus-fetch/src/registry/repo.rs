//! A registry in a git repository, read as Harbor's `GitRepoRegistryClient` reads it: the
//! commit the source names (`git ls-remote`, the ref picked as Harbor picks it; the
//! repository's HEAD when none is named), then the registry file at that commit from a
//! shallow, blob-less fetch of that one commit. Its tasks without a repository or commit are
//! the repository's at that commit.

use std::path::PathBuf;

use terminus_config::registry::{DatasetSpec, RemoteProblem, RepoSource};

use crate::git;

/// The commit `repo` names and its registry file's text.
pub(super) fn read(repo: &RepoSource) -> Result<(String, String), RemoteProblem> {
    let failed = |e: git::GitFailure| RemoteProblem::Git { url: repo.git_url.clone(), message: e.to_string() };
    let commit = match &repo.reference {
        Some(reference) if is_commit(reference) => reference.to_ascii_lowercase(),
        reference => {
            let wanted = reference.clone().unwrap_or_else(|| "HEAD".into());
            let listed =
                git::run(None, ["ls-remote", "--", repo.git_url.as_str(), wanted.as_str()], None).map_err(failed)?;
            pick(&listed, &wanted).ok_or_else(|| RemoteProblem::Git {
                url: repo.git_url.clone(),
                message: format!("it has no ref `{wanted}`"),
            })?
        }
    };
    let dir = scratch();
    let result = (|| {
        std::fs::create_dir_all(&dir)
            .map_err(|e| RemoteProblem::Git { url: repo.git_url.clone(), message: e.to_string() })?;
        git::run(Some(&dir), ["init", "--quiet"], None).map_err(failed)?;
        let fetch = ["fetch", "--quiet", "--depth", "1", "--filter=blob:none", "--", &repo.git_url, &commit];
        git::run(Some(&dir), fetch, None).map_err(failed)?;
        let object = format!("{commit}:{}", repo.registry_file);
        git::run(Some(&dir), ["show", object.as_str()], None).map_err(|_| RemoteProblem::NoRegistryFile {
            url: repo.git_url.clone(),
            file: repo.registry_file.clone(),
            commit: commit.clone(),
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((commit.clone(), result?))
}

/// A dataset's tasks as the repository gives them: with no `git_url`, the repository's; with
/// no commit, the registry's commit.
pub(super) fn pin(mut spec: DatasetSpec, repo: &RepoSource, commit: &str) -> DatasetSpec {
    for task in &mut spec.tasks {
        task.git_url.get_or_insert_with(|| repo.git_url.clone());
        task.git_commit_id.get_or_insert_with(|| commit.to_string());
    }
    spec
}

fn is_commit(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.chars().all(|c| c.is_ascii_hexdigit())
}

/// The commit of `wanted` in `git ls-remote` output, as Harbor picks it: an exact ref name
/// (itself, under `refs/heads/`, `refs/tags/`, `refs/`), else a ref ending in it (review refs
/// left out), else the first line.
fn pick(listed: &str, wanted: &str) -> Option<String> {
    let lines: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once('\t')).collect();
    let targets =
        [wanted.to_string(), format!("refs/heads/{wanted}"), format!("refs/tags/{wanted}"), format!("refs/{wanted}")];
    for target in targets {
        if let Some((sha, _)) = lines.iter().find(|(_, name)| *name == target) {
            return Some(sha.to_string());
        }
    }
    let suffix = format!("/{wanted}");
    lines
        .iter()
        .find(|(_, name)| name.ends_with(&suffix) && !name.starts_with("refs/for/"))
        .or(lines.first())
        .map(|(sha, _)| sha.to_string())
}

/// A fresh directory for one fetch.
fn scratch() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("terminus-registry-{}-{nanos}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_picked_as_harbor_picks_them() {
        let listed =
            "a1\trefs/remotes/x/main\nb2\trefs/heads/main\nc3\trefs/tags/v1\nd4\trefs/for/v2\ne5\trefs/heads/v2";
        assert_eq!(pick(listed, "main").as_deref(), Some("b2"));
        assert_eq!(pick(listed, "v1").as_deref(), Some("c3"));
        assert_eq!(pick(listed, "v2").as_deref(), Some("e5"));
        assert_eq!(pick("f6\tHEAD", "HEAD").as_deref(), Some("f6"));
        assert_eq!(pick("", "main"), None);
    }
}
