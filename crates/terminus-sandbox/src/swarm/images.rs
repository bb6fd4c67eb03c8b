//! Getting a trial's image onto the nodes: pushed to the cluster's registry when there is one,
//! else streamed to each node's daemon.

use super::*;
use crate::error::SandboxError;
use bollard::query_parameters::{PushImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::StreamExt;
use std::time::Instant;

impl Swarm {
    /// The image reference services use for the manager's image `tag`: in the registry, by
    /// digest; or, without one, `tag` itself once every eligible node has it.
    pub(super) async fn image_for(&self, tag: &str) -> Result<String, SandboxError> {
        let cell = self.images.lock().await.entry(tag.to_string()).or_default().clone();
        match &self.settings.registry {
            Some(registry) => cell.get_or_try_init(|| self.push(tag, registry)).await.cloned(),
            None => {
                // Nodes join and come back: every start checks that the eligible ones have it.
                self.stream_to_nodes(tag).await?;
                Ok(tag.to_string())
            }
        }
    }

    /// Tags `tag` for the registry, pushes it, and returns its reference by digest.
    pub(super) async fn push(&self, tag: &str, registry: &str) -> Result<String, SandboxError> {
        let err = |message: String| SandboxError::Build { tag: tag.to_string(), message };
        let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
        let remote = format!("{registry}/{repo}");
        let options = TagImageOptionsBuilder::default().repo(&remote).tag(version).build();
        self.manager.docker.tag_image(tag, Some(options)).await.map_err(|e| err(format!("tagging: {e}")))?;
        let options = PushImageOptionsBuilder::default().tag(version).build();
        let mut push = self.manager.docker.push_image(&remote, Some(options), None);
        while let Some(info) = push.next().await {
            let info = info.map_err(|e| err(format!("pushing to {registry}: {e}")))?;
            if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                return Err(err(format!("pushing to {registry}: {detail}")));
            }
        }
        let image = self.manager.docker.inspect_image(&format!("{remote}:{version}")).await.map_err(Self::api)?;
        image
            .repo_digests
            .unwrap_or_default()
            .into_iter()
            .find(|d| d.starts_with(&format!("{remote}@")))
            .ok_or_else(|| err(format!("{registry} gave no digest for {remote}:{version}")))
    }

    /// Copies image `tag` from the manager to every eligible node that lacks it (export,
    /// import), one node at a time.
    pub(super) async fn stream_to_nodes(&self, tag: &str) -> Result<(), SandboxError> {
        let views = self.node_views().await?;
        for (id, view) in &views {
            if !self.eligible(id, view)
                || self.streamed.lock().expect("not poisoned").contains(&(id.clone(), tag.into()))
            {
                continue;
            }
            let engine = self.node(id, Some(view)).await?;
            if engine.docker.inspect_image(tag).await.is_err() {
                let started = Instant::now();
                let export = self.manager.docker.export_image(tag).map(|chunk| chunk.map_err(std::io::Error::other));
                let options = bollard::query_parameters::ImportImageOptionsBuilder::default().quiet(true).build();
                let mut import = engine.docker.import_image_stream(options, export, None);
                while let Some(progress) = import.next().await {
                    let progress = progress.map_err(|e| SandboxError::Build {
                        tag: tag.into(),
                        message: format!("streaming to node {}: {e}", view.hostname),
                    })?;
                    if let Some(message) = progress.error_detail.and_then(|d| d.message) {
                        return Err(SandboxError::Build { tag: tag.into(), message });
                    }
                }
                tracing::info!(node = %view.hostname, image = %tag, secs = started.elapsed().as_secs_f64(), "streamed an image to a node");
            }
            self.streamed.lock().expect("not poisoned").insert((id.clone(), tag.to_string()));
        }
        Ok(())
    }
}
