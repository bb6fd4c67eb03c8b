//! The warden: the verification's own program in every trial container (built from
//! `crates/terminus-warden` by this crate's build script, statically linked, embedded here).
//!
//! On an engine the host reaches directly it lives in a named volume, made once per engine and
//! warden build (`terminus-warden-<digest>`, filled from a `FROM scratch` image holding only
//! it), which every trial container mounts read-only at [`DIR`]: root in the container cannot
//! write, move or unmount it, so what the host starts there by absolute path is the host's
//! program whatever the agent did. A swarm's trial containers run on nodes the host does not
//! prepare: there it is copied in when the container starts, before the agent runs, and is
//! as writable as the rest of the container.

use std::sync::OnceLock;

use crate::engine::Engine;
use crate::error::SandboxError;

/// The warden's executable.
pub const WARDEN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/terminus-warden"));

/// Where containers have it.
pub const DIR: &str = "/.terminus-warden";
/// Its path in a container.
pub const PATH: &str = "/.terminus-warden/warden";

/// The label on the warden's image and volume.
pub const LABEL: &str = "terminus.warden";

/// The first 16 hex digits of the warden's SHA-256.
pub fn digest() -> &'static str {
    static DIGEST: OnceLock<String> = OnceLock::new();
    DIGEST.get_or_init(|| {
        use sha2::{Digest, Sha256};
        let hash = Sha256::digest(WARDEN);
        hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
    })
}

/// The volume's name on every engine.
pub fn volume() -> String {
    format!("terminus-warden-{}", digest())
}

impl Engine {
    /// The warden's volume, made and filled if the engine has none yet (once per connection;
    /// a failure is retried by the next caller).
    pub async fn warden_volume(&self) -> Result<String, SandboxError> {
        self.warden.get_or_try_init(|| self.make_warden_volume()).await.cloned()
    }

    async fn make_warden_volume(&self) -> Result<String, SandboxError> {
        let name = volume();
        if self.docker.inspect_volume(&name).await.is_ok() {
            return Ok(name);
        }
        let tag = format!("terminus-warden:{}", digest());
        let builder = crate::image::ImageBuilder::new(self.clone());
        if !builder.exists(&tag).await {
            let dockerfile = format!("FROM scratch\nLABEL {LABEL}={}\nCOPY warden {PATH}\n", digest());
            let context = crate::archive::tar_dirs_and_files(
                &[],
                &[("Dockerfile", dockerfile.as_bytes(), 0o644), ("warden", WARDEN, 0o755)],
            )
            .map_err(|e| SandboxError::Build { tag: tag.clone(), message: e.to_string() })?;
            builder.build(&tag, "Dockerfile", context, None).await?;
        }
        // A new named volume is filled from the image of the first container that mounts it,
        // when that container is created.
        let body = bollard::models::ContainerCreateBody {
            image: Some(tag.clone()),
            cmd: Some(vec![PATH.to_string()]),
            labels: Some([(LABEL.to_string(), digest().to_string())].into()),
            host_config: Some(bollard::models::HostConfig {
                binds: Some(vec![format!("{name}:{DIR}")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = |message: String| SandboxError::Start { name: name.clone(), message };
        let created = self
            .docker
            .create_container(None::<bollard::query_parameters::CreateContainerOptions>, body)
            .await
            .map_err(|e| err(e.to_string()))?;
        let _ = self.remove_container(&created.id).await;
        self.docker.inspect_volume(&name).await.map_err(|e| err(format!("the warden's volume was not made: {e}")))?;
        tracing::info!(volume = %name, "made the warden's volume");
        Ok(name)
    }
}
