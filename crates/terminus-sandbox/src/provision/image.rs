//! An environment's image: the task's prebuilt image as it is, or built from the compose
//! file's `main.build` or the environment's directory under a content-hash tag.

use std::collections::BTreeMap;
use std::path::Path;

use terminus_config::compose;

use super::{ProvisionError, ProvisionRequest};
use crate::image::ImageBuilder;
use crate::site::Site;

/// An environment's image, made, with what its making read.
pub(super) struct MadeImage {
    pub(super) tag: String,
    /// The environment's own variables, `${VAR}` resolved.
    pub(super) task_env: BTreeMap<String, String>,
    /// The environment's compose file.
    pub(super) compose: Option<compose::ComposeFile>,
}

/// Reads the environment's compose file (it may say how `main` is built) and makes its image:
/// the task's prebuilt image as it is (unless a rebuild is forced and the task has the recipe),
/// else built from the compose file's `main.build` or the environment's directory.
pub(super) async fn make_image(
    site: &Site,
    request: &ProvisionRequest,
    task_env: BTreeMap<String, String>,
    notes: &mut Vec<String>,
) -> Result<MadeImage, ProvisionError> {
    let task = &request.task_name;
    let prebuilt =
        request.docker_image.clone().filter(|_| !(request.force_build && request.dir.join("Dockerfile").is_file()));
    let tag = match &prebuilt {
        Some(image) => image.clone(),
        None => {
            let hash = site
                .dir_hash(&request.dir)
                .await
                .map_err(|e| ProvisionError::Start(format!("cannot read {}: {e}", request.dir.display())))?;
            ImageBuilder::tag_for(&request.image_name, &hash)
        }
    };
    let infra = ComposeInfra {
        task_env: task_env.clone(),
        host_vars: request.host_vars.clone(),
        main_image: tag.clone(),
        prebuilt: prebuilt.is_some(),
        cpus: request.cpus,
        memory_mb: request.memory_mb,
    };
    let compose = read_compose(&request.dir, infra)
        .await
        .map_err(|message| ProvisionError::Start(format!("task `{task}`: {message}")))?;
    let main_build = compose.as_ref().and_then(|f| f.main.build.clone());
    let (images, limit, force) = (&site.images, request.build_timeout, request.force_build);
    let built = match (&prebuilt, main_build) {
        (Some(image), build) => {
            if build.is_some() {
                notes.push(format!(
                    "task `{task}`: services.main.build in environment/docker-compose.yaml is not used: the task names docker_image `{image}`"
                ));
            }
            images.ensure_prebuilt(image, limit).await.map(|_| ()).map_err(|e| format!("task `{task}`: {e}"))
        }
        (None, Some(compose::ServiceImage::Build { context, dockerfile })) => {
            images.ensure_with(&tag, &context, &dockerfile, force, limit).await.map(|_| ()).map_err(|e| e.to_string())
        }
        (None, _) => images.ensure(&tag, &request.dir, force, limit).await.map(|_| ()).map_err(|e| e.to_string()),
    };
    built.map_err(ProvisionError::Build)?;
    Ok(MadeImage { tag, task_env, compose })
}

/// What a compose file is told about the trial ([`compose::Infra`]), owned to cross threads.
struct ComposeInfra {
    task_env: BTreeMap<String, String>,
    host_vars: BTreeMap<String, String>,
    main_image: String,
    prebuilt: bool,
    cpus: f64,
    memory_mb: u64,
}

/// An environment's `docker-compose.yaml` in `dir` ([`compose::read`]), off the async workers.
async fn read_compose(dir: &Path, infra: ComposeInfra) -> Result<Option<compose::ComposeFile>, String> {
    let dir = dir.to_path_buf();
    crate::blocking::blocking(move || {
        let infra = compose::Infra {
            task_env: &infra.task_env,
            host_vars: &infra.host_vars,
            main_image: &infra.main_image,
            prebuilt: infra.prebuilt,
            cpus: infra.cpus,
            memory_mb: Some(infra.memory_mb),
        };
        compose::read(&dir, &infra)
    })
    .await
}
