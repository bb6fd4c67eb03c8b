//! Private images: a task image that is only in a registry behind basic auth (Debian's
//! docker-registry on 127.0.0.1, started here), pulled as a task's `docker_image` and as a
//! Dockerfile's `FROM`, with the credentials of a `DOCKER_CONFIG` directory as the docker CLI
//! reads them; without them each trial fails naming the image and the registry's answer. No
//! credential appears in any file under the job directories, nor in what terminus printed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;

use crate::support::{BoundedChild, BoundedCommand};
use crate::support::{
    copy_task, docker, example, heavy_lock, read_json, temp_dir, terminus_bin, trial_dirs, wait_until,
};

const USER: &str = "alice";
const PASSWORD: &str = "pw-7f3a9c-never-shown";

/// The registry process, stopped when dropped.
struct PrivateRegistry {
    child: Child,
    host: String,
}

impl Drop for PrivateRegistry {
    fn drop(&mut self) {
        self.child.reap();
    }
}

/// Starts Debian's docker-registry on a free loopback port, behind basic auth for USER.
async fn start_registry(dir: &Path) -> PrivateRegistry {
    let htpasswd = Command::new("htpasswd")
        .args(["-Bbn", USER, PASSWORD])
        .output_bounded()
        .expect("htpasswd (apache2-utils) runs");
    assert!(htpasswd.status.success());
    std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let host = format!("127.0.0.1:{port}");
    let config = format!(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {data}\nhttp:\n  addr: {host}\nauth:\n  htpasswd:\n    realm: terminus-test\n    path: {htpasswd}\n",
        data = dir.join("data").display(),
        htpasswd = dir.join("htpasswd").display()
    );
    std::fs::write(dir.join("registry.yml"), config).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(dir.join("registry.yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry (scripts/setup.sh installs it) runs");
    let registry = PrivateRegistry { child, host };
    let address = registry.host.clone();
    wait_until("the registry to listen", Duration::from_secs(30), || std::net::TcpStream::connect(&address).is_ok())
        .await;
    registry
}

/// A DOCKER_CONFIG directory whose config.json holds `auths` for `host`.
fn docker_config(dir: &Path, host: &str) -> PathBuf {
    let config = dir.join("docker-config");
    std::fs::create_dir_all(&config).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::write(config.join("config.json"), format!("{{\"auths\": {{\"{host}\": {{\"auth\": \"{auth}\"}}}}}}"))
        .unwrap();
    config
}

/// Builds `image` (the base image and /app) and pushes it to the registry; then removes it from
/// the engine, so that only the registry has it.
async fn push_private(docker: &bollard::Docker, image: &str) {
    let mut archive = tar::Builder::new(Vec::new());
    let dockerfile = b"FROM terminus-base:bookworm\nRUN echo private > /private.txt\nWORKDIR /app\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(dockerfile.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    archive.append_data(&mut header, "Dockerfile", &dockerfile[..]).unwrap();
    let context = archive.into_inner().unwrap();
    let options = bollard::query_parameters::BuildImageOptionsBuilder::default().t(image).rm(true).build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(item) = build.next().await {
        let info = item.expect("the private image builds");
        assert!(info.error_detail.is_none(), "{info:?}");
    }
    let (name, tag) = image.rsplit_once(':').unwrap();
    let credentials = bollard::auth::DockerCredentials {
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    let options = bollard::query_parameters::PushImageOptionsBuilder::default().tag(tag).build();
    let mut push = docker.push_image(name, Some(options), Some(credentials));
    while let Some(item) = push.next().await {
        let info = item.expect("the push is accepted");
        assert!(info.error_detail.is_none(), "{info:?}");
    }
    forget(docker, image).await;
}

async fn forget(docker: &bollard::Docker, image: &str) {
    let _ = docker.remove_image(image, None::<bollard::query_parameters::RemoveImageOptions>, None).await;
    assert!(docker.inspect_image(image).await.is_err(), "{image} is only in the registry");
}

/// hello-world at `dir/name` whose image is `image` itself (`docker_image`), or built `FROM` it.
fn private_task(dir: &Path, name: &str, image: &str, prebuilt: bool) -> PathBuf {
    let task = copy_task(&example("hello-world"), &dir.join(name));
    if prebuilt {
        let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
        let toml = toml.replace("[environment]\n", &format!("[environment]\ndocker_image = \"{image}\"\n"));
        std::fs::write(task.join("task.toml"), toml).unwrap();
        std::fs::remove_dir_all(task.join("environment")).unwrap();
    } else {
        std::fs::write(task.join("environment/Dockerfile"), format!("FROM {image}\nRUN cat /private.txt\n")).unwrap();
    }
    task
}

fn run(dir: &Path, docker_config: &Path, job: &str, task: &Path) -> Output {
    Command::new(terminus_bin())
        .args(["run", "-a", "oracle", "--job-name", job, "--jobs-dir"])
        .arg(dir.join("jobs"))
        .arg("-p")
        .arg(task)
        .env("DOCKER_CONFIG", docker_config)
        .env("TERMINUS_CACHE_DIR", dir.join("cache"))
        .output_bounded()
        .unwrap()
}

/// Every file under `dir`, read as bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() => out.push((path.clone(), std::fs::read(&path).unwrap_or_default())),
                _ => {}
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn private_images_pull_and_build_with_the_docker_config_and_fail_clearly_without() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("private-images");
    let dir = dir.path();
    let registry = start_registry(dir).await;
    let image = format!("{}/private/hello:1", registry.host);
    push_private(&docker, &image).await;
    let prebuilt = private_task(dir, "prebuilt", &image, true);
    let built = private_task(dir, "built", &image, false);
    let with = docker_config(dir, &registry.host);
    let without = dir.join("empty-docker-config");
    std::fs::create_dir_all(&without).unwrap();
    let mut printed = Vec::new();

    for (task, job) in [(&prebuilt, "prebuilt"), (&built, "built")] {
        // Without credentials: the trial fails, naming the image and the registry's answer.
        forget(&docker, &image).await;
        let out = run(dir, &without, &format!("{job}-without"), task);
        assert_eq!(out.status.code(), Some(1), "{job}: {}", String::from_utf8_lossy(&out.stderr));
        let trials = trial_dirs(&dir.join(format!("jobs/{job}-without")));
        let result = read_json(&trials[0].join("result.json"));
        let message = result["exception_info"]["exception_message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(&image) || message.contains(&registry.host), "{job}: {message}");
        assert!(message.contains("no basic auth credentials") || message.contains("unauthorized"), "{job}: {message}");
        if job == "prebuilt" {
            assert!(message.contains("no credentials for it in the Docker config"), "{message}");
        }
        printed.push(out);

        // With them: the trial runs on the private image.
        forget(&docker, &image).await;
        let out = run(dir, &with, &format!("{job}-with"), task);
        assert_eq!(out.status.code(), Some(0), "{job}: {}", String::from_utf8_lossy(&out.stderr));
        let trials = trial_dirs(&dir.join(format!("jobs/{job}-with")));
        assert_eq!(read_json(&trials[0].join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0);
        printed.push(out);
    }

    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    for (path, bytes) in files(&dir.join("jobs")) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(PASSWORD) && !text.contains(&encoded), "a credential in {}", path.display());
    }
    for out in &printed {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains(PASSWORD) && !text.contains(&encoded), "a credential printed: {text}");
    }
    forget(&docker, &image).await;
}
