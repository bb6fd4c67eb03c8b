//! Multi-container tasks: the subset of `environment/docker-compose.yaml` that Harbor-format
//! tasks use, read here; the sandbox runs what is read through the Engine API (no compose CLI).
//!
//! The file is merged over the trial's own `main` service, as Harbor stacks it over its base
//! file: `main` may add `environment`, `depends_on`, `volumes`, `working_dir` and resource
//! limits, build from another recipe, and restate what Harbor's base file says (its image name,
//! its idle command, its log mounts); every other service is a sidecar started before `main` on
//! a network of the trial's own, where each service is reachable by its name. Keys outside the
//! subset are refused by their path (`services.db.privileged`), never ignored; bind mounts must
//! stay inside the task's `environment/` directory.
//!
//! Harbor's variables are answered as its Docker backend answers them (`CONTEXT_DIR`,
//! `MAIN_IMAGE_NAME`, `CPUS`, `MEMORY`, and the legacy log mounts `HOST_<X>_PATH` /
//! `ENV_<X>_PATH`). Harbor binds a trial's host log directories into any service that names
//! them, so a sidecar can write where `main`'s verifier reads (`/logs/verifier`); here such a
//! directory is a volume of the trial's own, mounted in `main` and in each sidecar that names
//! it.
//!
//! The file as a whole is read here; each key's reader is in `fields`; what is read, and the
//! error naming a key that cannot be run, are in `model`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;
use terminus_core::layout::container::MAIN_SERVICE;

mod fields;
mod model;

use fields::{interpolate, key_str, networks_plain, parse_main, parse_service};
use model::error;
pub use model::{
    ComposeError, ComposeFile, Condition, Dependency, Limits, MainService, Mount, Service, ServiceHealth, ServiceImage,
};

/// The file, in the task's `environment/` (Harbor reads no other spelling).
pub const FILE_NAME: &str = "docker-compose.yaml";

/// Top-level keys that carry nothing a trial needs (`version`, `name`, extensions).
const IGNORED_TOP: [&str; 2] = ["version", "name"];

/// Harbor's legacy log-mount variables, `HOST_<X>_PATH` and `ENV_<X>_PATH`, with the directory
/// in `main` each names.
pub const LOG_MOUNTS: [(&str, &str); 3] =
    [("VERIFIER_LOGS", "/logs/verifier"), ("AGENT_LOGS", "/logs/agent"), ("ARTIFACTS", "/logs/artifacts")];

/// What `HOST_<X>_PATH` reads as: the name of the trial's volume for that directory.
fn log_volume(suffix: &str) -> String {
    format!("terminus-{}", suffix.to_ascii_lowercase().replace('_', "-"))
}

/// The directory in `main` of a log volume's name, if it is one.
fn log_dir_of(volume: &str) -> Option<&'static str> {
    LOG_MOUNTS.iter().find(|(suffix, _)| log_volume(suffix) == volume).map(|(_, dir)| *dir)
}

/// Reads the file. `vars` answers `${VAR}` interpolation (compose's rules: `${VAR}`,
/// `${VAR:-default}`, `${VAR-default}`, `$VAR`, `$$` for a dollar sign).
pub fn parse(
    text: &str,
    project_dir: &Path,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<ComposeFile, ComposeError> {
    let doc: Value = serde_yaml::from_str(text).map_err(|e| error("(file)", e.to_string()))?;
    let doc = interpolate(doc, vars, "")?;
    let Value::Mapping(top) = doc else { return Err(error("(file)", "must be a mapping")) };
    let mut file = ComposeFile::default();
    let mut services: Vec<Service> = Vec::new();
    for (key, value) in &top {
        let key = key_str(key, "(file)")?;
        match key {
            "services" => {
                let Value::Mapping(map) = value else { return Err(error("services", "must be a mapping")) };
                for (name, body) in map {
                    let name = key_str(name, "services")?;
                    if name == MAIN_SERVICE {
                        file.main = parse_main(body, project_dir, vars)?;
                    } else {
                        services.push(parse_service(name, body, project_dir)?);
                    }
                }
            }
            "volumes" => {
                if let Value::Mapping(map) = value {
                    for (name, spec) in map {
                        let name = key_str(name, "volumes")?;
                        if !matches!(spec, Value::Null) && spec.as_mapping().is_none_or(|m| !m.is_empty()) {
                            return Err(error(format!("volumes.{name}"), "volume options are not supported"));
                        }
                        file.volumes.push(name.to_string());
                    }
                } else if !matches!(value, Value::Null) {
                    return Err(error("volumes", "must be a mapping"));
                }
            }
            // Every service shares the trial's one network: plain network definitions add nothing.
            "networks" if networks_plain(value) => {}
            k if IGNORED_TOP.contains(&k) || k.starts_with("x-") => {}
            other => return Err(error(other, "not supported by terminus")),
        }
    }
    share_log_volumes(&mut file, &services)?;
    if file.main.bridge && !services.is_empty() {
        return Err(error(
            "services.main.network_mode",
            "`main` on the engine's bridge would not reach the other services; leave it out (every service shares the trial's network)",
        ));
    }
    // Every reference points at something the file defines.
    let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    let check = |owner: &str, deps: &[Dependency], mounts: &[Mount]| -> Result<(), ComposeError> {
        for dep in deps {
            if !names.contains(&dep.service) {
                return Err(error(format!("services.{owner}.depends_on"), format!("no service `{}`", dep.service)));
            }
        }
        for mount in mounts {
            if let Mount::Volume { name, .. } = mount
                && !file.volumes.contains(name)
            {
                return Err(error(format!("services.{owner}.volumes"), format!("volume `{name}` is not declared")));
            }
        }
        Ok(())
    };
    check(MAIN_SERVICE, &file.main.depends_on, &file.main.mounts)?;
    for service in &services {
        check(&service.name, &service.depends_on, &service.mounts)?;
    }
    file.services = start_order(services)?;
    Ok(file)
}

/// What Harbor's Docker backend tells a compose file about the trial.
pub struct Infra<'a> {
    /// The task's resolved `[environment].env`.
    pub task_env: &'a BTreeMap<String, String>,
    /// The host's variables the job passes to this task (what is not here reads as unset).
    pub host_vars: &'a BTreeMap<String, String>,
    /// `main`'s image: `MAIN_IMAGE_NAME` (and `PREBUILT_IMAGE_NAME` for a `docker_image`).
    pub main_image: &'a str,
    pub prebuilt: bool,
    /// `CPUS` and `MEMORY` (`<n>M`), the task's limits.
    pub cpus: f64,
    pub memory_mb: Option<u64>,
}

/// Reads `environment_dir`'s compose file, if it has one, as Harbor stacks its variables: its
/// own (`CONTEXT_DIR`, `MAIN_IMAGE_NAME`, `CPUS`, `MEMORY`, the log mounts) over the task's
/// resolved `[environment].env` over the host variables the job passes.
pub fn read(environment_dir: &Path, infra: &Infra<'_>) -> Result<Option<ComposeFile>, String> {
    let path = environment_dir.join(FILE_NAME);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let project = std::path::absolute(environment_dir).unwrap_or_else(|_| environment_dir.to_path_buf());
    let context = project.display().to_string();
    // Python's str() of Harbor's int-or-float cpus: `1`, `0.5`.
    let cpus = if infra.cpus.fract() == 0.0 { format!("{}", infra.cpus as i64) } else { infra.cpus.to_string() };
    let vars = |name: &str| {
        let log = |prefix: &str| {
            let suffix = name.strip_prefix(prefix)?.strip_suffix("_PATH")?;
            LOG_MOUNTS.iter().find(|(s, _)| *s == suffix)
        };
        match name {
            "CONTEXT_DIR" => Some(context.clone()),
            "MAIN_IMAGE_NAME" => Some(infra.main_image.to_string()),
            "PREBUILT_IMAGE_NAME" if infra.prebuilt => Some(infra.main_image.to_string()),
            "CPUS" => Some(cpus.clone()),
            "MEMORY" => infra.memory_mb.map(|m| format!("{m}M")),
            _ => {
                if let Some((suffix, _)) = log("HOST_") {
                    return Some(log_volume(suffix));
                }
                if let Some((_, dir)) = log("ENV_") {
                    return Some(dir.to_string());
                }
                infra.task_env.get(name).or_else(|| infra.host_vars.get(name)).cloned()
            }
        }
    };
    parse(&text, &project, &vars).map(Some).map_err(|e| e.to_string())
}

/// A log volume a sidecar mounts is the trial's own, mounted in `main` at its directory too; in
/// `main` alone it adds nothing (`main` has the directory), and is dropped.
fn share_log_volumes(file: &mut ComposeFile, services: &[Service]) -> Result<(), ComposeError> {
    let mut shared: Vec<String> = Vec::new();
    for service in services {
        for mount in &service.mounts {
            if let Mount::Volume { name, .. } = mount
                && log_dir_of(name).is_some()
                && !shared.contains(name)
            {
                shared.push(name.clone());
            }
        }
    }
    let mut kept = Vec::new();
    for mount in std::mem::take(&mut file.main.mounts) {
        match &mount {
            Mount::Volume { name, target, .. } if let Some(dir) = log_dir_of(name) => {
                if target.trim_end_matches('/') != dir {
                    return Err(error(
                        "services.main.volumes",
                        format!(
                            "the trial's log directory `{dir}` is mounted in `main` at {dir} only, not at {target:?}"
                        ),
                    ));
                }
                if shared.contains(name) {
                    kept.push(mount);
                }
            }
            _ => kept.push(mount),
        }
    }
    file.main.mounts = kept;
    for name in shared {
        let dir = log_dir_of(&name).unwrap_or_default().to_string();
        let in_main = file.main.mounts.iter().any(|m| matches!(m, Mount::Volume { name: n, .. } if *n == name));
        if !in_main {
            file.main.mounts.push(Mount::Volume { name: name.clone(), target: dir.clone(), read_only: false });
        }
        file.shared_logs.push(dir);
        file.volumes.push(name);
    }
    Ok(())
}

/// Dependencies first; a cycle is refused.
fn start_order(mut pending: Vec<Service>) -> Result<Vec<Service>, ComposeError> {
    let mut ordered: Vec<Service> = Vec::new();
    while !pending.is_empty() {
        let ready = pending
            .iter()
            .position(|s| s.depends_on.iter().all(|d| ordered.iter().any(|o| o.name == d.service)))
            .ok_or_else(|| error(format!("services.{}.depends_on", pending[0].name), "dependencies form a cycle"))?;
        ordered.push(pending.remove(ready));
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fields::{duration, memory_mb};
    use std::time::Duration;

    fn vars(name: &str) -> Option<String> {
        match name {
            "GREETING" => Some("hi".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    const FILE: &str = r#"
version: "3.8"
services:
  main:
    depends_on:
      db:
        condition: service_healthy
    environment:
      DB_URL: "tcp://db:7000"
    volumes:
      - shared:/shared
  db:
    build: ./db
    environment:
      - GREETING=${GREETING}
      - OTHER=${MISSING:-fallback}-${EMPTY:-e}-$$literal
    command: ["perl", "-e", "1"]
    healthcheck:
      test: ["CMD", "test", "-f", "/ready"]
      interval: 1s
      timeout: 1m30s
      retries: 5
    volumes:
      - shared:/shared
      - ./data:/data:ro
  cache:
    image: redis:7
    depends_on: [db]
volumes:
  shared:
"#;

    #[test]
    fn the_subset_parses_with_interpolation_and_start_order() {
        let file = parse(FILE, Path::new("/task/environment"), &vars).unwrap();
        assert_eq!(file.volumes, ["shared"]);
        assert_eq!(file.main.depends_on, [Dependency { service: "db".into(), condition: Condition::Healthy }]);
        assert_eq!(file.main.environment, ["DB_URL=tcp://db:7000"]);
        let names: Vec<&str> = file.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["db", "cache"]);
        let db = &file.services[0];
        assert_eq!(
            db.image,
            ServiceImage::Build { context: "/task/environment/db".into(), dockerfile: "Dockerfile".into() }
        );
        assert_eq!(db.environment, ["GREETING=hi", "OTHER=fallback-e-$literal"]);
        let health = db.healthcheck.as_ref().unwrap();
        assert_eq!(
            (health.interval, health.timeout, health.retries),
            (Duration::from_secs(1), Duration::from_secs(90), 5)
        );
        assert_eq!(
            db.mounts[1],
            Mount::Bind { source: "/task/environment/data".into(), target: "/data".into(), read_only: true }
        );
        assert_eq!(db.mounts[0], Mount::Volume { name: "shared".into(), target: "/shared".into(), read_only: false });
        assert_eq!(file.services[1].image, ServiceImage::Image("redis:7".into()));
    }

    #[test]
    fn what_is_outside_the_subset_is_refused_by_key() {
        let env = Path::new("/task/environment");
        for (text, key) in [
            ("services:\n  db:\n    image: x\n    privileged: true\n", "services.db.privileged"),
            ("services:\n  db:\n    image: x\n    volumes: [\"/etc:/host-etc\"]\n", "services.db.volumes"),
            (
                "services:\n  db:\n    image: x\n    volumes: [\"/task/environment/../../etc:/e\"]\n",
                "services.db.volumes",
            ),
            ("services:\n  db:\n    image: x\n    volumes: [\"../../secrets:/s\"]\n", "services.db.volumes"),
            ("services:\n  main:\n    image: other\n", "services.main.image"),
            ("services:\n  db:\n    image: x\n    depends_on: [nope]\n", "services.db.depends_on"),
            (
                "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n",
                "services.a.depends_on",
            ),
            ("services:\n  db:\n    command: x\n", "services.db"),
            ("networks:\n  n:\n    driver: overlay\n", "networks"),
            (
                "services:\n  db:\n    build: { context: ., dockerfile: ../../Dockerfile }\n",
                "services.db.build.dockerfile",
            ),
            ("services:\n  db:\n    image: x\n    volumes: [\"data:/d\"]\n", "services.db.volumes"),
        ] {
            let err = parse(text, env, &vars).unwrap_err();
            assert_eq!(err.key, key, "{text}: {err}");
        }
    }

    #[test]
    fn what_the_corpus_uses_beyond_the_basics_is_accepted() {
        let text = "services:\n  app:\n    build:\n      context: ./app\n      dockerfile: Dockerfile.server\n    ports: [\"8080:8080\"]\n    platform: linux/amd64\n    networks: [backend]\nnetworks:\n  backend:\n";
        let file = parse(text, Path::new("/t/environment"), &vars).unwrap();
        // A bind without a mode is read-only; `rw` makes it a copy, never a bind of the task.
        let absolute = "services:\n  db:\n    image: x\n    volumes: [\"/t/environment/data:/data\", \"./state:/state:rw\", {type: bind, source: ./conf, target: /conf, read_only: false}]\n";
        let mounts = &parse(absolute, Path::new("/t/environment"), &vars).unwrap().services[0].mounts;
        assert_eq!(
            mounts[0],
            Mount::Bind { source: "/t/environment/data".into(), target: "/data".into(), read_only: true }
        );
        let writable = |dir: &str, target: &str| Mount::Bind {
            source: Path::new("/t/environment").join(dir),
            target: target.into(),
            read_only: false,
        };
        assert_eq!(mounts[1..], [writable("state", "/state"), writable("conf", "/conf")]);
        assert_eq!(
            file.services[0].image,
            ServiceImage::Build { context: "/t/environment/app".into(), dockerfile: "Dockerfile.server".into() }
        );
    }

    /// Reads `text` as a trial of a task with 1 CPU and 2048 MiB whose image is `img:1`.
    fn read_as_trial(text: &str) -> Result<ComposeFile, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
        let env = BTreeMap::from([("MODEL_FOR_TOOLS".to_string(), "m".to_string())]);
        let none = BTreeMap::new();
        let infra = Infra {
            task_env: &env,
            host_vars: &none,
            main_image: "img:1",
            prebuilt: false,
            cpus: 1.0,
            memory_mb: Some(2048),
        };
        read(dir.path(), &infra).map(|f| f.expect("the file is there"))
    }

    /// Harbor adapters restate its base file for `main` (build, image, idle command, log
    /// mounts, limits from its variables): accepted; a sidecar naming a log mount shares that
    /// directory with `main` (the KUMO adapter's verifier service writes `/logs/verifier`).
    #[test]
    fn harbor_adapter_files_restating_the_base_are_accepted() {
        let finance = "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}\n    image: ${MAIN_IMAGE_NAME}\n\
            \x20   command: [ \"sh\", \"-c\", \"sleep infinity\" ]\n    network_mode: ${NETWORK_MODE:-bridge}\n\
            \x20   environment:\n      - TEST_DIR=${TEST_DIR}\n      - MODEL_FOR_TOOLS=${MODEL_FOR_TOOLS}\n\
            \x20   volumes:\n      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}\n      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}\n\
            \x20   deploy:\n      resources:\n        limits:\n          cpus: ${CPUS}\n          memory: ${MEMORY}\n";
        let file = read_as_trial(finance).unwrap();
        assert_eq!(file.main.build, None, "the base file's own build");
        assert!(file.main.bridge && file.main.mounts.is_empty() && file.shared_logs.is_empty());
        assert_eq!(file.main.environment, ["TEST_DIR=", "MODEL_FOR_TOOLS=m"]);
        assert_eq!(file.main.limits, Limits { cpus: Some(1.0), memory_mb: Some(2048) });

        let kumo = "services:\n  verifier:\n    build:\n      context: ${CONTEXT_DIR}\n      dockerfile: Dockerfile_verifier\n\
            \x20   image: ${MAIN_IMAGE_NAME}_verifier\n    volumes:\n      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}\n    networks:\n      - internal\n\
            \x20 main:\n    build:\n      context: ${CONTEXT_DIR}\n      dockerfile: Dockerfile.agent\n    image: ${MAIN_IMAGE_NAME}\n\
            \x20   networks: [internal]\n    deploy: { resources: { limits: { cpus: \"0.5\", memory: 1g } } }\n\
            networks:\n  internal:\n    internal: false\n  other:\n    driver: bridge\n";
        let file = read_as_trial(kumo).unwrap();
        assert_eq!(file.shared_logs, ["/logs/verifier"]);
        assert_eq!(file.volumes, ["terminus-verifier-logs"]);
        let shared =
            Mount::Volume { name: "terminus-verifier-logs".into(), target: "/logs/verifier".into(), read_only: false };
        assert_eq!(file.main.mounts, std::slice::from_ref(&shared), "`main` mounts what its sidecar writes");
        assert_eq!(file.services[0].mounts, [shared]);
        assert!(
            matches!(&file.main.build, Some(ServiceImage::Build { dockerfile, .. }) if dockerfile == "Dockerfile.agent")
        );
        assert_eq!(file.main.limits, Limits { cpus: Some(0.5), memory_mb: Some(1024) });

        for (text, key) in [
            ("services:\n  main:\n    network_mode: bridge\n  db:\n    image: x\n", "services.main.network_mode"),
            ("services:\n  main:\n    command: [\"python\", \"serve.py\"]\n", "services.main.command"),
            ("services:\n  main:\n    image: ubuntu:24.04\n", "services.main.image"),
            ("services:\n  main:\n    volumes: [\"${HOST_VERIFIER_LOGS_PATH}:/elsewhere\"]\n", "services.main.volumes"),
            ("services:\n  main:\n    deploy: { replicas: 2 }\n", "services.main.deploy.replicas"),
            (
                "services:\n  main:\n    deploy: { resources: { reservations: { cpus: 1 } } }\n",
                "services.main.deploy.resources.reservations",
            ),
            (
                "services:\n  main:\n    deploy: { resources: { limits: { memory: lots } } }\n",
                "services.main.deploy.resources.limits.memory",
            ),
            ("networks:\n  n:\n    internal: true\n", "networks"),
        ] {
            let message = read_as_trial(text).unwrap_err();
            assert!(message.contains(&format!("`{key}`")), "{text}: {message}");
        }
    }

    #[test]
    fn sizes_read_as_compose_writes_them() {
        assert_eq!(memory_mb("2048M"), Some(2048));
        assert_eq!(memory_mb("2g"), Some(2048));
        assert_eq!(memory_mb("512mb"), Some(512));
        assert_eq!(memory_mb("1073741824"), Some(1024));
        assert_eq!(memory_mb("1.5G"), Some(1536));
        assert_eq!(memory_mb("10x"), None);
        assert_eq!(memory_mb("0"), None);
    }

    #[test]
    fn durations_read_as_compose_writes_them() {
        let d = |s: &str| duration(&Value::String(s.into()), "x");
        assert_eq!(d("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(d("500ms").unwrap(), Duration::from_millis(500));
        assert!(d("10").is_err(), "a unit is needed");
        assert_eq!(duration(&serde_yaml::to_value(2).unwrap(), "x").unwrap(), Duration::from_secs(2));
    }
}
