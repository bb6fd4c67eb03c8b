//! A git repository as a registry (Harbor's `repo` / `--repo`): the source as Harbor's
//! `resolve_repo_source` reads it (`org/name` on GitHub, a `host/org/name`, a full git URL, an
//! scp-style `git@host:org/name`, a trailing `@ref`, a `/tree/<ref>/<subdir>` URL; local paths
//! refused), and where its `registry.json` is. Which commit it is and what the file holds are
//! asked by the installed resolver.

/// A repository registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoSource {
    /// The repository as git reaches it.
    pub git_url: String,
    /// The branch, tag or commit asked for (None: the repository's HEAD).
    pub reference: Option<String>,
    /// The registry file in the repository (`registry.json`, or as `registry_path` gives it).
    pub registry_file: String,
}

const SCHEMES: [&str; 4] = ["https://", "http://", "ssh://", "git://"];

impl RepoSource {
    /// Reads `source` as Harbor does; `registry_path` is relative to the repository (a `.json`
    /// file, else a directory holding `registry.json`).
    pub fn parse(source: &str, registry_path: Option<&str>) -> Result<RepoSource, String> {
        let source = source.trim();
        if source.is_empty() {
            return Err("a repo source cannot be empty".into());
        }
        if source.starts_with(['.', '/', '~']) {
            return Err(format!(
                "`{source}` looks like a local path: repo takes a git repository (give a local dataset with path)"
            ));
        }
        let (base, reference) = split_ref(source);
        let (git_url, tree_ref) = if SCHEMES.iter().any(|s| base.starts_with(s)) {
            url_repo(base)?
        } else if base.starts_with("git@") {
            let path = base.split_once(':').map(|(_, p)| p).unwrap_or_default();
            if path.split('/').filter(|p| !p.is_empty()).count() < 2 {
                return Err(format!("cannot read org/name from repo source `{source}`"));
            }
            (base.to_string(), None)
        } else if base.split('/').next().is_some_and(|first| first.contains('.')) {
            url_repo(&format!("https://{base}"))?
        } else {
            let parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
            let [org, name] = parts.as_slice() else {
                return Err(format!(
                    "cannot read `{source}` as a repo source: give `org/name`, a host URL or a git URL"
                ));
            };
            (format!("https://github.com/{org}/{}.git", name.trim_end_matches(".git")), None)
        };
        if reference.is_some() && tree_ref.is_some() {
            return Err(format!("repo source `{source}` names its ref twice (`@…` and `/tree/…/`)"));
        }
        let registry_file = match registry_path.map(|p| p.trim_matches('/')) {
            None | Some("") => "registry.json".to_string(),
            Some(path) if path.ends_with(".json") => path.to_string(),
            Some(path) => format!("{path}/registry.json"),
        };
        if registry_file.split('/').any(|p| p == "..") || registry_file.starts_with('-') {
            return Err(format!("registry_path `{registry_file}` must stay inside the repository"));
        }
        Ok(RepoSource { git_url, reference: reference.or(tree_ref), registry_file })
    }
}

/// A trailing `@ref` split off (not one holding `/` or `:`, nor a leading `@`).
fn split_ref(source: &str) -> (&str, Option<String>) {
    match source.rfind('@') {
        Some(at) if at > 0 => {
            let candidate = &source[at + 1..];
            if candidate.is_empty() || candidate.contains(['/', ':']) {
                (source, None)
            } else {
                (&source[..at], Some(candidate.to_string()))
            }
        }
        _ => (source, None),
    }
}

/// A URL's repository (`scheme://host/org/name`) and the ref of a `/tree/<ref>/…` path.
fn url_repo(url: &str) -> Result<(String, Option<String>), String> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (repo_parts, tree_ref) = match parts.iter().position(|p| *p == "tree") {
        Some(i) => (&parts[..i], parts.get(i + 1).map(|r| r.to_string())),
        None => (&parts[..], None),
    };
    if repo_parts.len() < 2 {
        return Err(format!("cannot read org/name from repo source `{url}`: give a URL like https://host/org/name"));
    }
    Ok((format!("{scheme}://{host}/{}", repo_parts.join("/")), tree_ref))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_read_as_harbor_reads_them() {
        let parse = |s: &str| RepoSource::parse(s, None).unwrap();
        assert_eq!(parse("org/bench").git_url, "https://github.com/org/bench.git");
        let at = parse("org/bench@v2");
        assert_eq!((at.git_url.as_str(), at.reference.as_deref()), ("https://github.com/org/bench.git", Some("v2")));
        assert_eq!(parse("gitlab.com/org/bench").git_url, "https://gitlab.com/org/bench");
        let tree = parse("https://github.com/org/bench/tree/main/tasks");
        assert_eq!((tree.git_url.as_str(), tree.reference.as_deref()), ("https://github.com/org/bench", Some("main")));
        assert_eq!(parse("git://127.0.0.1:9418/org/bench.git").git_url, "git://127.0.0.1:9418/org/bench.git");
        assert_eq!(parse("git@github.com:org/bench.git").git_url, "git@github.com:org/bench.git");
        assert_eq!(parse("org/bench").registry_file, "registry.json");
        assert_eq!(RepoSource::parse("org/b", Some("sets/")).unwrap().registry_file, "sets/registry.json");
        assert_eq!(RepoSource::parse("org/b", Some("sets/r.json")).unwrap().registry_file, "sets/r.json");
        for bad in ["", "./here", "/abs", "~/x", "justone", "a/b/c", "https://host/only"] {
            assert!(RepoSource::parse(bad, None).is_err(), "{bad}");
        }
        assert!(RepoSource::parse("org/b", Some("../x.json")).is_err());
    }
}
