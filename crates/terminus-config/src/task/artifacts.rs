//! Where a task's (or a step's) `artifacts` land: under the trial's `artifacts/` at the given
//! `destination`, else at the source path without its root (`/app/out.txt` → `app/out.txt`),
//! with their `exclude` patterns and service — as Harbor 0.26 places them.

use std::path::Path;

use terminus_core::layout::container::MAIN_SERVICE;

use super::schema::ArtifactSpec;
use crate::policy;

/// `artifacts` of a task or a step (`key` names them in notes), placed; what cannot be
/// collected (a relative source, a destination that leaves `artifacts/`) is left out and noted.
pub fn placed_artifacts(key: &str, artifacts: &[ArtifactSpec]) -> (Vec<policy::ArtifactSpec>, Vec<String>) {
    let mut notes = Vec::new();
    let specs = artifacts
        .iter()
        .filter_map(|artifact| {
            let (source, destination, exclude, service) = match artifact {
                ArtifactSpec::Path(source) => (source, None, &[][..], None),
                ArtifactSpec::Detailed { source, destination, exclude, service } => {
                    (source, destination.as_deref(), exclude.as_slice(), service.as_deref())
                }
            };
            let relative: Vec<&str> = source.split('/').filter(|p| !p.is_empty() && *p != "." && *p != "..").collect();
            let destination = destination.map(str::to_string).unwrap_or_else(|| relative.join("/"));
            // Loading refuses a destination that leaves `artifacts/`; checked again where it is used.
            let confined = confined_relative(&destination);
            let usable = source.starts_with('/') && confined;
            if !source.starts_with('/') {
                notes.push(format!(
                    "task.toml `{key}`: {source:?} is not an absolute path in the container; not collected"
                ));
            } else if !confined {
                notes.push(format!("task.toml `{key}`: destination {destination:?} leaves artifacts/; not collected"));
            }
            usable.then(|| policy::ArtifactSpec {
                source: source.clone(),
                destination,
                exclude: exclude.to_vec(),
                service: service.filter(|s| *s != MAIN_SERVICE).map(str::to_string),
            })
        })
        .collect();
    (specs, notes)
}

/// A path that, joined to a directory, stays inside it: relative, not empty, no `..`, no NUL.
pub fn confined_relative(path: &str) -> bool {
    let path = Path::new(path);
    !path.as_os_str().is_empty()
        && !path.as_os_str().as_encoded_bytes().contains(&0)
        && path.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
        && path.components().any(|c| matches!(c, std::path::Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_land_at_their_destination_or_their_path_and_strays_are_noted() {
        let artifacts = [
            ArtifactSpec::Path("/app/out.txt".into()),
            ArtifactSpec::Detailed {
                source: "/data".into(),
                destination: Some("d".into()),
                exclude: vec!["*.tmp".into()],
                service: Some("main".into()),
            },
            ArtifactSpec::Path("relative.txt".into()),
            ArtifactSpec::Detailed {
                source: "/x".into(),
                destination: Some("../up".into()),
                exclude: Vec::new(),
                service: Some("db".into()),
            },
        ];
        let (specs, notes) = placed_artifacts("artifacts", &artifacts);
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].destination, "app/out.txt");
        assert_eq!((specs[1].destination.as_str(), specs[1].service.as_deref()), ("d", None));
        assert_eq!(specs[1].exclude, ["*.tmp"]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("relative.txt") && notes[1].contains("../up"));
    }
}
