//! Task images, built from a task's `environment/` directory under a content-hash tag.
//!
//! The tag is derived from the directory's contents, so an unchanged task reuses its image
//! across trials and jobs, and a changed one can never pick up a stale image (Harbor's
//! `74ae23f` bug). Builds of one tag are serialised; different tags build in parallel.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use crate::credentials::{self, DockerConfig};
use crate::engine::Engine;
use crate::error::SandboxError;

/// Builds images, at most once per tag per process when `force_build` is set, and not at all
/// when the tag already exists otherwise.
#[derive(Clone, Debug)]
pub struct ImageBuilder {
    engine: Engine,
    /// Per tag: a lock held while building, guarding "built by this process already".
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<bool>>>>>,
    /// Per image: whether its default user is root, asked of the engine once per process.
    facts: Arc<Mutex<HashMap<String, crate::engine::ImageFacts>>>,
    /// What a build's `RUN` steps may use (None: no limit).
    limits: Option<BuildLimits>,
}

/// The limits of a build's `RUN` containers. The engine's build API takes memory and CPU
/// limits, not a process count: a fork bomb is bounded by the memory (each process costs some)
/// and ended by the build's time limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BuildLimits {
    /// Memory and swap together, in MiB.
    pub memory_mb: u64,
    pub cpus: f64,
}

/// How an image came to be available.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// It existed already.
    Reused,
    /// We built it now.
    Built,
    /// The engine pulled it now.
    Pulled,
}

impl ImageBuilder {
    pub fn new(engine: Engine) -> ImageBuilder {
        ImageBuilder { engine, locks: Arc::default(), facts: Arc::default(), limits: None }
    }

    /// Builds run their `RUN` steps within `limits`.
    pub fn with_limits(mut self, limits: BuildLimits) -> ImageBuilder {
        self.limits = Some(limits);
        self
    }

    /// The tag for a task: `terminus-task-<name>:<first 16 hex of the content hash>`.
    pub fn tag_for(task_name: &str, content_hash: &str) -> String {
        let mut name: String = task_name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' { c } else { '-' })
            .collect();
        name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
        if name.is_empty() {
            name = "task".into();
        }
        name.truncate(100);
        format!("terminus-task-{name}:{}", &content_hash[..content_hash.len().min(16)])
    }

    /// What `image` does with a container's command ([`Engine::image_facts`]), remembered per
    /// image so that each trial does not inspect it again. None when it cannot be inspected.
    pub async fn facts(&self, image: &str) -> Option<crate::engine::ImageFacts> {
        if let Some(facts) = self.facts.lock().unwrap_or_else(|p| p.into_inner()).get(image) {
            return Some(*facts);
        }
        let facts = self.engine.image_facts(image).await?;
        self.facts.lock().unwrap_or_else(|p| p.into_inner()).insert(image.to_string(), facts);
        Some(facts)
    }

    /// Whether the engine has an image with this tag.
    pub async fn exists(&self, tag: &str) -> bool {
        self.engine.docker.inspect_image(tag).await.is_ok()
    }

    /// Makes `tag` available, building `context_dir` (which holds a `Dockerfile`) when needed.
    /// With `force_build`, the first call in this process rebuilds even if the tag exists.
    pub async fn ensure(
        &self,
        tag: &str,
        context_dir: &Path,
        force_build: bool,
        timeout: Duration,
    ) -> Result<ImageSource, SandboxError> {
        self.ensure_with(tag, context_dir, "Dockerfile", force_build, timeout).await
    }

    /// [`ImageBuilder::ensure`] with the recipe at `dockerfile` (relative to the context), as a
    /// compose service's `build.dockerfile` names it.
    pub async fn ensure_with(
        &self,
        tag: &str,
        context_dir: &Path,
        dockerfile: &str,
        force_build: bool,
        timeout: Duration,
    ) -> Result<ImageSource, SandboxError> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(tag.to_string()).or_default().clone()
        };
        let mut built_here = lock.lock().await;
        if *built_here || (!force_build && self.exists(tag).await) {
            return Ok(ImageSource::Reused);
        }
        let dir = context_dir.to_path_buf();
        let context = crate::blocking::blocking(move || crate::archive::tar_dir(&dir, "")).await?;
        let recipe = context_dir.join(dockerfile);
        let credentials = crate::blocking::blocking(move || {
            let text = std::fs::read_to_string(&recipe).unwrap_or_default();
            let images = credentials::from_images(&text);
            let registries: Vec<String> = images.iter().map(|image| credentials::registry_of(image)).collect();
            let config = DockerConfig::load().map_err(|e| e.to_string())?;
            config.credentials_for_all(registries.iter().map(String::as_str)).map_err(|e| e.to_string())
        })
        .await
        .map_err(|message| SandboxError::Build { tag: tag.into(), message })?;
        let credentials = credentials.into_iter().map(|(key, c)| (key, c.engine())).collect();
        match tokio::time::timeout(timeout, self.build(tag, dockerfile, context, Some(credentials))).await {
            Ok(Ok(())) => {
                *built_here = true;
                Ok(ImageSource::Built)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::Build {
                tag: tag.into(),
                message: format!("timed out after {:.0} s", timeout.as_secs_f64()),
            }),
        }
    }

    /// Makes a prebuilt image (a task's `docker_image`) available as it is: present on the
    /// engine, or pulled through it when a registry answers; else an error naming the image.
    pub async fn ensure_prebuilt(&self, image: &str, timeout: Duration) -> Result<ImageSource, SandboxError> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks.entry(image.to_string()).or_default().clone()
        };
        let _one_pull_at_a_time = lock.lock().await;
        if self.exists(image).await {
            return Ok(ImageSource::Reused);
        }
        let registry = credentials::registry_of(image);
        let asked = registry.clone();
        let found = crate::blocking::blocking(move || DockerConfig::load()?.credentials(&asked)).await;
        let found = found.map_err(|e| SandboxError::Pull { image: image.into(), message: e.to_string() })?;
        // What the user needs to tell a refusal apart: the registry, and which credentials went.
        let sent = match &found {
            Some(credentials) => format!("registry {registry}, credentials from {}", credentials.from),
            None => format!("registry {registry}, no credentials for it in the Docker config"),
        };
        let pull_error =
            |message: String| SandboxError::Pull { image: image.into(), message: format!("{message} ({sent})") };
        let options = bollard::query_parameters::CreateImageOptionsBuilder::default().from_image(image).build();
        let pull = async {
            let mut stream = self.engine.docker.create_image(Some(options), None, found.map(|c| c.engine()));
            while let Some(item) = stream.next().await {
                match item {
                    Ok(info) => {
                        if let Some(message) = info.error_detail.and_then(|d| d.message) {
                            return Err(pull_error(message));
                        }
                    }
                    Err(bollard::errors::Error::DockerStreamError { error }) => return Err(pull_error(error)),
                    Err(e) => return Err(pull_error(e.to_string())),
                }
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, pull).await {
            Ok(Ok(())) if self.exists(image).await => Ok(ImageSource::Pulled),
            Ok(Ok(())) => Err(pull_error("the pull ended without the image".into())),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(pull_error(format!("timed out after {:.0} s", timeout.as_secs_f64()))),
        }
    }

    /// Builds `context` as `tag`; `credentials` (per registry) are sent for its `FROM` pulls.
    pub(crate) async fn build(
        &self,
        tag: &str,
        dockerfile: &str,
        context: Vec<u8>,
        credentials: Option<HashMap<String, bollard::auth::DockerCredentials>>,
    ) -> Result<(), SandboxError> {
        let mut options = BuildImageOptionsBuilder::default().dockerfile(dockerfile).t(tag).rm(true).forcerm(true);
        if let Some(limits) = self.limits {
            let bytes = (limits.memory_mb * 1024 * 1024) as i32;
            const PERIOD: i32 = 100_000;
            options = options
                .memory(bytes)
                .memswap(bytes)
                .cpuperiod(PERIOD)
                .cpuquota((limits.cpus * f64::from(PERIOD)).round() as i32);
        }
        let options = options.build();
        let credentials = credentials.filter(|c| !c.is_empty());
        let mut stream = self.engine.docker.build_image(options, credentials, Some(bollard::body_full(context.into())));
        // The last lines of output make a failed build's message useful.
        let mut tail: Vec<String> = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(text) = info.stream {
                        tail.extend(text.lines().map(str::to_string));
                        let excess = tail.len().saturating_sub(20);
                        tail.drain(..excess);
                    }
                    if let Some(error) = info.error_detail.and_then(|d| d.message) {
                        return Err(SandboxError::Build { tag: tag.into(), message: error });
                    }
                }
                Err(e) => {
                    let message = match e {
                        bollard::errors::Error::DockerStreamError { error } => error,
                        other => other.to_string(),
                    };
                    return Err(SandboxError::Build {
                        tag: tag.into(),
                        message: format!("{message}\n{}", tail.join("\n")),
                    });
                }
            }
        }
        if self.exists(tag).await {
            Ok(())
        } else {
            Err(SandboxError::Build {
                tag: tag.into(),
                message: format!("the engine reported no image\n{}", tail.join("\n")),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ImageBuilder;

    #[test]
    fn tags_are_valid_docker_references() {
        assert_eq!(
            ImageBuilder::tag_for("Org/Hello World", "0123456789abcdef0123"),
            "terminus-task-org-hello-world:0123456789abcdef"
        );
        assert_eq!(ImageBuilder::tag_for("__", "ab"), "terminus-task-task:ab");
    }
}
