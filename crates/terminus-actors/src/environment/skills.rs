//! Skills in the agent's container: the job's agent-level skills uploaded into the skills
//! directory, and the `SKILL.md` files found there for Terminus 2's first prompt.

use std::time::Duration;

use terminus_agent::prompts::SkillFile;
use terminus_config::skills::InjectedSkill;
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_sandbox::container::ExecOptions;
use terminus_sandbox::{Container, archive, blocking};

/// Uploads each skill into `root/<name>` (emptied first), then makes them readable by every
/// user, as root, as Harbor's trial injects them. Nothing to do without skills.
pub async fn inject_skills(container: &Container, root: &str, skills: &[InjectedSkill]) -> Result<(), TrialError> {
    if skills.is_empty() {
        return Ok(());
    }
    let error = |what: String| TrialError::new(TrialErrorKind::Runtime, format!("could not upload the skills: {what}"));
    let quote = terminus_sandbox::tmux::shell_quote;
    let targets: Vec<String> = skills.iter().map(|s| quote(&format!("{root}/{}", s.name))).collect();
    let root_quoted = quote(root);
    let options =
        ExecOptions { user: Some("root".into()), timeout: Some(Duration::from_secs(60)), ..ExecOptions::default() };
    let empty = format!("rm -rf {targets} && mkdir -p {root_quoted}", targets = targets.join(" "));
    match container.exec(&empty, &options).await {
        Ok(out) if out.exit_code == Some(0) => {}
        Ok(out) => return Err(error(format!("exit code {:?}: {}", out.exit_code, out.output.trim()))),
        Err(e) => return Err(error(e.to_string())),
    }
    for skill in skills {
        let (source, name) = (skill.source.clone(), skill.name.clone());
        let tar = blocking(move || archive::tar_dir(&source, &name)).await.map_err(|e| error(e.to_string()))?;
        container.upload_tar(root, tar).await.map_err(|e| error(e.to_string()))?;
    }
    let readable = format!("chmod -R a+rX {}", targets.join(" "));
    match container.exec(&readable, &options).await {
        Ok(out) if out.exit_code == Some(0) => Ok(()),
        Ok(out) => Err(error(format!("exit code {:?}: {}", out.exit_code, out.output.trim()))),
        Err(e) => Err(error(e.to_string())),
    }
}

/// The `SKILL.md` of each directory right below `dir` in the container, read as the agent's
/// user (each cut at 1 MiB; none when `dir` is no directory). A failure leaves the prompt
/// without skills and is logged: the run goes on, as the reference's does.
pub async fn find_skills(container: &Container, dir: &str, user: Option<String>) -> Vec<SkillFile> {
    const SKILL_MD_MAX: usize = 1 << 20;
    let quoted = terminus_sandbox::tmux::shell_quote(dir);
    let script = format!(
        "[ -d {quoted} ] || exit 0; find {quoted} -mindepth 2 -maxdepth 2 -name SKILL.md -type f | sort | \
         while IFS= read -r f; do printf '%s\\0' \"$f\"; head -c {SKILL_MD_MAX} \"$f\" | tr -d '\\0'; printf '\\0'; done"
    );
    let options = ExecOptions { user, timeout: Some(Duration::from_secs(20)), ..ExecOptions::default() };
    match container.exec(&script, &options).await {
        Ok(out) if out.exit_code == Some(0) => {
            let fields: Vec<&str> = out.output.split('\0').collect();
            fields
                .chunks_exact(2)
                .map(|pair| SkillFile { path: pair[0].to_string(), text: pair[1].to_string() })
                .collect()
        }
        Ok(out) => {
            tracing::warn!(dir, exit_code = ?out.exit_code, "could not list the task's skills");
            Vec::new()
        }
        Err(error) => {
            tracing::warn!(dir, %error, "could not list the task's skills");
            Vec::new()
        }
    }
}
