//! Multi-container tasks: the subset of `environment/docker-compose.yaml` that Harbor-format
//! tasks use, read here and run through the Engine API (no compose CLI).
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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, NetworkingConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use serde_yaml::Value;

use crate::container::Container;
use crate::engine::Engine;
use crate::error::SandboxError;
use crate::image::ImageBuilder;

/// The file, in the task's `environment/` (Harbor reads no other spelling).
pub const FILE_NAME: &str = "docker-compose.yaml";

/// The name of the service the agent and the verifier run in.
pub const MAIN: &str = "main";

/// A compose file that cannot be run, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("environment/docker-compose.yaml: `{key}`: {message}")]
pub struct ComposeError {
    pub key: String,
    pub message: String,
}

fn error(key: impl Into<String>, message: impl Into<String>) -> ComposeError {
    ComposeError { key: key.into(), message: message.into() }
}

/// The parsed file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComposeFile {
    /// Sidecars, in the order they can start (each after what it depends on).
    pub services: Vec<Service>,
    /// What the file adds to `main`.
    pub main: MainService,
    /// Named volumes (top-level `volumes:`), and the log volumes sidecars mount.
    pub volumes: Vec<String>,
    /// `main`'s log directories that sidecars mount too (`/logs/verifier`): what is in them
    /// comes from the task's own services, not only from the agent.
    pub shared_logs: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MainService {
    pub environment: Vec<String>,
    pub depends_on: Vec<Dependency>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    /// Another recipe than `environment/Dockerfile` (a `build` that says otherwise).
    pub build: Option<ServiceImage>,
    pub limits: Limits,
    /// `network_mode: bridge` (Harbor's adapters write it): the engine's bridge, which is the
    /// trial's own network here; refused when there are sidecars `main` would then not reach.
    pub bridge: bool,
}

/// `deploy.resources.limits`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Service {
    pub name: String,
    pub image: ServiceImage,
    /// `KEY=VALUE`.
    pub environment: Vec<String>,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub depends_on: Vec<Dependency>,
    pub healthcheck: Option<ServiceHealth>,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub limits: Limits,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ServiceImage {
    /// Used as it is (present, or pulled).
    Image(String),
    /// Built from a directory, with the recipe at `dockerfile` in it.
    Build { context: PathBuf, dockerfile: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    pub service: String,
    pub condition: Condition,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Started,
    Healthy,
    CompletedSuccessfully,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Mount {
    /// A named volume of the file (made per trial).
    Volume { name: String, target: String, read_only: bool },
    /// A directory or file inside the task's `environment/`: bound read-only, or, when the task
    /// says `rw`, copied into the container (the task's directory is never written).
    Bind { source: PathBuf, target: String, read_only: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ServiceHealth {
    /// Docker's form: `["CMD", ...]` or `["CMD-SHELL", "..."]`.
    pub test: Vec<String>,
    pub interval: Duration,
    pub timeout: Duration,
    pub retries: i64,
    pub start_period: Duration,
}

/// Top-level keys that carry nothing a trial needs (`version`, `name`, extensions).
const IGNORED_TOP: [&str; 2] = ["version", "name"];
/// Service keys that are accepted and have no effect on a trial's private network.
/// `ports` is among them: services reach each other on the trial's network, and nothing is
/// published on the host (two trials would fight over a host port).
/// `pull_policy` is Harbor's base file's (`build`): images are built or used as they are anyway.
const HARMLESS: [&str; 9] =
    ["restart", "expose", "container_name", "stdin_open", "tty", "init", "ports", "platform", "pull_policy"];

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

/// What Harbor's base file has `main` run: idle, as terminus's own command does.
fn is_idle_command(command: &[String]) -> bool {
    let words: Vec<&str> = match command {
        [shell, flag, script] if (shell == "sh" || shell == "/bin/sh" || shell == "bash") && flag == "-c" => {
            script.split_whitespace().collect()
        }
        _ => command.iter().map(String::as_str).collect(),
    };
    matches!(words.as_slice(), ["sleep", "infinity"] | ["tail", "-f", "/dev/null"])
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
                    if name == MAIN {
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
    check(MAIN, &file.main.depends_on, &file.main.mounts)?;
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

fn key_str<'a>(key: &'a Value, owner: &str) -> Result<&'a str, ComposeError> {
    key.as_str().ok_or_else(|| error(owner, "keys must be strings"))
}

fn parse_main(
    body: &Value,
    project_dir: &Path,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<MainService, ComposeError> {
    let mut main = MainService::default();
    let Value::Mapping(map) = body else { return Ok(main) };
    for (key, value) in map {
        let key = key_str(key, "services.main")?;
        let path = format!("services.main.{key}");
        match key {
            "environment" => main.environment = environment(value, &path)?,
            "depends_on" => main.depends_on = depends_on(value, &path)?,
            "volumes" => main.mounts = mounts(value, &path, project_dir)?,
            "working_dir" => main.working_dir = Some(string(value, &path)?),
            "build" => {
                let build = build_context(value, &path, project_dir)?;
                // Harbor's own base file already says `environment/` with its `Dockerfile`.
                let default =
                    ServiceImage::Build { context: project_dir.to_path_buf(), dockerfile: "Dockerfile".into() };
                main.build = (build != default).then_some(build);
            }
            // The name Harbor's base file gives `main`'s image (built, or the task's
            // `docker_image`); any other would be another image than the task's.
            "image" => {
                let image = string(value, &path)?;
                let ours =
                    ["MAIN_IMAGE_NAME", "PREBUILT_IMAGE_NAME"].iter().any(|v| vars(v).as_deref() == Some(&image));
                if !ours {
                    return Err(error(
                        path,
                        "`main`'s image comes from the task (`docker_image`, or environment/Dockerfile)",
                    ));
                }
            }
            "command" if is_idle_command(&command(value, &path)?) => {}
            "command" => {
                return Err(error(
                    path,
                    "`main` idles (`sleep infinity`, as Harbor's base file has it) while the agent works",
                ));
            }
            "network_mode" if matches!(value.as_str(), Some("bridge" | "default")) => main.bridge = true,
            "deploy" => main.limits = deploy(value, &path)?,
            "networks" if networks_plain(value) => {}
            k if HARMLESS.contains(&k) => {}
            _ => return Err(error(path, "not supported for `main` (its image, command and user come from the task)")),
        }
    }
    Ok(main)
}

/// `deploy`: only `resources.limits` (`cpus`, `memory`) has a meaning outside a swarm.
fn deploy(value: &Value, path: &str) -> Result<Limits, ComposeError> {
    let mut limits = Limits::default();
    let Value::Mapping(map) = value else { return Err(error(path, "must be a mapping")) };
    for (key, value) in map {
        let key = key_str(key, path)?;
        let sub = format!("{path}.{key}");
        let Value::Mapping(resources) = value else { return Err(error(sub, "must be a mapping")) };
        if key != "resources" {
            return Err(error(sub, "not supported by terminus"));
        }
        for (key, value) in resources {
            let key = key_str(key, &sub)?;
            let sub = format!("{sub}.{key}");
            if key != "limits" {
                return Err(error(sub, "not supported by terminus (only limits apply outside a swarm)"));
            }
            let Value::Mapping(items) = value else { return Err(error(sub, "must be a mapping")) };
            for (key, value) in items {
                let key = key_str(key, &sub)?;
                let item = format!("{sub}.{key}");
                match key {
                    "cpus" => {
                        let text = scalar(value, &item)?;
                        let cpus: f64 = text
                            .trim()
                            .parse()
                            .ok()
                            .filter(|c: &f64| *c > 0.0 && c.is_finite())
                            .ok_or_else(|| error(&item, format!("cannot read {text:?} as a number of CPUs")))?;
                        limits.cpus = Some(cpus);
                    }
                    "memory" => {
                        limits.memory_mb = Some(
                            memory_mb(&scalar(value, &item)?)
                                .ok_or_else(|| error(&item, "cannot read a size such as 2048M or 2g"))?,
                        )
                    }
                    _ => return Err(error(item, "not supported by terminus")),
                }
            }
        }
    }
    Ok(limits)
}

/// A compose byte size (`2048M`, `2g`, `512mb`, a number of bytes) in MiB, rounded up.
fn memory_mb(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let digits = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let number: f64 = text[..digits].parse().ok()?;
    let unit = match text[digits..].trim_end_matches('b') {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let mb = (number * unit / (1024.0 * 1024.0)).ceil();
    (mb >= 1.0 && mb.is_finite()).then_some(mb as u64)
}

/// Networks given by name (a list, or definitions with only what the trial's own network
/// already is: a `bridge` driver, not `internal`, `attachable`): all of them are the trial's one
/// network here. Another driver, addresses or an internal network would change what a service
/// can reach, and are refused.
fn networks_plain(value: &Value) -> bool {
    match value {
        Value::Sequence(items) => items.iter().all(Value::is_string),
        Value::Mapping(map) => map.values().all(|v| match v {
            Value::Null => true,
            Value::Mapping(m) => m.iter().all(|(k, v)| match k.as_str() {
                Some("aliases" | "attachable") => true,
                Some("driver") => v.as_str() == Some("bridge"),
                Some("internal" | "external") => v.as_bool() == Some(false),
                _ => false,
            }),
            _ => false,
        }),
        Value::Null => true,
        _ => false,
    }
}

fn parse_service(name: &str, body: &Value, project_dir: &Path) -> Result<Service, ComposeError> {
    let owner = format!("services.{name}");
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(error(owner, "service names are letters, digits, `-`, `_` and `.`"));
    }
    let Value::Mapping(map) = body else { return Err(error(owner, "must be a mapping")) };
    let mut image = None;
    let mut service = Service {
        name: name.to_string(),
        image: ServiceImage::Image(String::new()),
        environment: Vec::new(),
        command: None,
        entrypoint: None,
        depends_on: Vec::new(),
        healthcheck: None,
        mounts: Vec::new(),
        working_dir: None,
        user: None,
        limits: Limits::default(),
    };
    let mut build = None;
    for (key, value) in map {
        let key = key_str(key, &owner)?;
        let path = format!("{owner}.{key}");
        match key {
            "image" => image = Some(string(value, &path)?),
            "build" => build = Some(build_context(value, &path, project_dir)?),
            // Every service shares the trial's one network; named networks add nothing to it.
            "networks" if networks_plain(value) => {}
            "environment" => service.environment = environment(value, &path)?,
            "command" => service.command = Some(command(value, &path)?),
            "entrypoint" => service.entrypoint = Some(command(value, &path)?),
            "depends_on" => service.depends_on = depends_on(value, &path)?,
            "healthcheck" => service.healthcheck = healthcheck(value, &path)?,
            "volumes" => service.mounts = mounts(value, &path, project_dir)?,
            "working_dir" => service.working_dir = Some(string(value, &path)?),
            "user" => service.user = Some(scalar(value, &path)?),
            "deploy" => service.limits = deploy(value, &path)?,
            k if HARMLESS.contains(&k) => {}
            _ => return Err(error(path, "not supported by terminus")),
        }
    }
    service.image = match (build, image) {
        (Some(build), _) => build,
        (None, Some(image)) => ServiceImage::Image(image),
        (None, None) => return Err(error(owner, "needs an `image` or a `build`")),
    };
    Ok(service)
}

fn string(value: &Value, path: &str) -> Result<String, ComposeError> {
    value.as_str().map(str::to_string).ok_or_else(|| error(path, "must be a string"))
}

/// A string, number or boolean as compose writes it in the environment.
fn scalar(value: &Value, path: &str) -> Result<String, ComposeError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Ok(String::new()),
        _ => Err(error(path, "must be a string or a number")),
    }
}

fn build_context(value: &Value, path: &str, project_dir: &Path) -> Result<ServiceImage, ComposeError> {
    let mut dockerfile = "Dockerfile".to_string();
    let context = match value {
        Value::String(s) => s.clone(),
        Value::Mapping(map) => {
            let mut context = ".".to_string();
            for (key, value) in map {
                match key.as_str() {
                    Some("context") => context = string(value, &format!("{path}.context"))?,
                    Some("dockerfile") => dockerfile = string(value, &format!("{path}.dockerfile"))?,
                    Some(other) => return Err(error(format!("{path}.{other}"), "not supported by terminus")),
                    None => return Err(error(path, "keys must be strings")),
                }
            }
            context
        }
        _ => return Err(error(path, "must be a path or a mapping")),
    };
    let context = within(project_dir, &context)
        .ok_or_else(|| error(path, format!("{context:?} must be a directory inside environment/")))?;
    // The recipe travels in the build context: it must be inside it.
    if inside(&context, &dockerfile).is_none() {
        return Err(error(format!("{path}.dockerfile"), format!("{dockerfile:?} must be inside the build context")));
    }
    Ok(ServiceImage::Build { context, dockerfile })
}

/// A path of the file resolved under `root` when it stays there: relative, or absolute inside
/// `root` (`${CONTEXT_DIR}/data`, as Harbor's variables write it); never `~` or elsewhere.
fn within(root: &Path, path: &str) -> Option<PathBuf> {
    match Path::new(path).strip_prefix(root) {
        Ok(rest) => inside(root, &format!("./{}", rest.display())),
        Err(_) if path.starts_with('/') || path.starts_with('~') => None,
        Err(_) => inside(root, path),
    }
}

/// `relative` resolved under `root`, when it stays there (no `..` out, no absolute host path).
fn inside(root: &Path, relative: &str) -> Option<PathBuf> {
    let mut out = root.to_path_buf();
    let mut depth = 0usize;
    for part in Path::new(relative).components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::Normal(p) => {
                out.push(p);
                depth += 1;
            }
            std::path::Component::ParentDir if depth > 0 => {
                out.pop();
                depth -= 1;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn environment(value: &Value, path: &str) -> Result<Vec<String>, ComposeError> {
    match value {
        Value::Mapping(map) => {
            map.iter().map(|(k, v)| Ok(format!("{}={}", key_str(k, path)?, scalar(v, path)?))).collect()
        }
        Value::Sequence(items) => items.iter().map(|item| string(item, path)).collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(error(path, "must be a mapping or a list of KEY=VALUE")),
    }
}

fn command(value: &Value, path: &str) -> Result<Vec<String>, ComposeError> {
    match value {
        // A string runs through a shell, as compose runs it after splitting; a shell is the
        // faithful reading for the quoting tasks use.
        Value::String(s) => Ok(vec!["/bin/sh".into(), "-c".into(), s.clone()]),
        Value::Sequence(items) => items.iter().map(|item| scalar(item, path)).collect(),
        _ => Err(error(path, "must be a string or a list")),
    }
}

fn depends_on(value: &Value, path: &str) -> Result<Vec<Dependency>, ComposeError> {
    match value {
        Value::Sequence(items) => items
            .iter()
            .map(|item| Ok(Dependency { service: string(item, path)?, condition: Condition::Started }))
            .collect(),
        Value::Mapping(map) => map
            .iter()
            .map(|(name, spec)| {
                let service = key_str(name, path)?.to_string();
                let condition = match spec.get("condition").and_then(Value::as_str) {
                    None | Some("service_started") => Condition::Started,
                    Some("service_healthy") => Condition::Healthy,
                    Some("service_completed_successfully") => Condition::CompletedSuccessfully,
                    Some(other) => {
                        return Err(error(
                            format!("{path}.{service}.condition"),
                            format!("unknown condition {other:?}"),
                        ));
                    }
                };
                Ok(Dependency { service, condition })
            })
            .collect(),
        _ => Err(error(path, "must be a list or a mapping")),
    }
}

fn healthcheck(value: &Value, path: &str) -> Result<Option<ServiceHealth>, ComposeError> {
    let Value::Mapping(map) = value else { return Err(error(path, "must be a mapping")) };
    if map.get("disable").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    let mut health = ServiceHealth {
        test: Vec::new(),
        interval: Duration::from_secs(30),
        timeout: Duration::from_secs(30),
        retries: 3,
        start_period: Duration::ZERO,
    };
    for (key, value) in map {
        let key = key_str(key, path)?;
        let sub = format!("{path}.{key}");
        match key {
            "test" => {
                health.test = match value {
                    Value::String(s) => vec!["CMD-SHELL".into(), s.clone()],
                    Value::Sequence(_) => command(value, &sub)?,
                    _ => return Err(error(sub, "must be a string or a list")),
                }
            }
            "interval" => health.interval = duration(value, &sub)?,
            "timeout" => health.timeout = duration(value, &sub)?,
            "start_period" => health.start_period = duration(value, &sub)?,
            "start_interval" => {}
            "retries" => health.retries = value.as_i64().ok_or_else(|| error(&sub, "must be an integer"))?,
            "disable" => {}
            _ => return Err(error(sub, "not supported by terminus")),
        }
    }
    if health.test.is_empty() {
        return Err(error(format!("{path}.test"), "is required"));
    }
    Ok(Some(health))
}

/// Compose durations: `1m30s`, `10s`, `500ms`, `1h`, or a number of seconds.
fn duration(value: &Value, path: &str) -> Result<Duration, ComposeError> {
    if let Some(seconds) = value.as_f64() {
        return Ok(Duration::from_secs_f64(seconds.max(0.0)));
    }
    let text = value.as_str().ok_or_else(|| error(path, "must be a duration such as 10s"))?;
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = text.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('u', Some('s')) => {
                chars.next();
                0.000_001
            }
            ('h', _) => 3600.0,
            ('m', _) => 60.0,
            ('s', _) => 1.0,
            _ => return Err(error(path, format!("cannot read duration {text:?}"))),
        };
        let n: f64 = number.parse().map_err(|_| error(path, format!("cannot read duration {text:?}")))?;
        total += n * unit;
        number.clear();
    }
    if !number.is_empty() {
        return Err(error(path, format!("cannot read duration {text:?} (a unit is missing)")));
    }
    Ok(Duration::from_secs_f64(total))
}

fn mounts(value: &Value, path: &str, project_dir: &Path) -> Result<Vec<Mount>, ComposeError> {
    let Value::Sequence(items) = value else { return Err(error(path, "must be a list")) };
    items
        .iter()
        .map(|item| {
            let (source, target, read_only) = match item {
                Value::String(short) => {
                    let parts: Vec<&str> = short.split(':').collect();
                    // `ro`, `rw`, or neither (then a bind is read-only, a named volume writable).
                    match parts.as_slice() {
                        [source, target] => (source.to_string(), target.to_string(), None),
                        [source, target, mode] => {
                            let modes: Vec<&str> = mode.split(',').collect();
                            let read_only = if modes.contains(&"ro") {
                                Some(true)
                            } else if modes.contains(&"rw") {
                                Some(false)
                            } else {
                                None
                            };
                            (source.to_string(), target.to_string(), read_only)
                        }
                        _ => return Err(error(path, format!("{short:?}: expected SOURCE:TARGET[:ro|:rw]"))),
                    }
                }
                Value::Mapping(map) => {
                    let field = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
                    let (Some(source), Some(target)) = (field("source"), field("target")) else {
                        return Err(error(path, "a long-form volume needs `source` and `target`"));
                    };
                    (source, target, map.get("read_only").and_then(Value::as_bool))
                }
                _ => return Err(error(path, "entries are strings or mappings")),
            };
            if source.starts_with('.') || source.starts_with('/') || source.starts_with('~') {
                let bound = within(project_dir, &source)
                    .ok_or_else(|| error(path, format!("bind source {source:?} must stay inside environment/")))?;
                // Only an explicit `rw` (or `read_only: false`) makes a bind writable, and then
                // the container gets a copy: the task's own directory is never written.
                Ok(Mount::Bind { source: bound, target, read_only: read_only.unwrap_or(true) })
            } else {
                Ok(Mount::Volume { name: source, target, read_only: read_only.unwrap_or(false) })
            }
        })
        .collect()
}

/// Replaces `${…}` and `$VAR` in every string of the document.
fn interpolate(value: Value, vars: &dyn Fn(&str) -> Option<String>, path: &str) -> Result<Value, ComposeError> {
    Ok(match value {
        Value::String(s) => Value::String(
            interpolate_str(&s, vars).map_err(|m| error(if path.is_empty() { "(file)" } else { path }, m))?,
        ),
        Value::Sequence(items) => {
            Value::Sequence(items.into_iter().map(|v| interpolate(v, vars, path)).collect::<Result<_, _>>()?)
        }
        Value::Mapping(map) => {
            let mut out = serde_yaml::Mapping::new();
            for (k, v) in map {
                let sub = match k.as_str() {
                    Some(k) if path.is_empty() => k.to_string(),
                    Some(k) => format!("{path}.{k}"),
                    None => path.to_string(),
                };
                out.insert(k, interpolate(v, vars, &sub)?);
            }
            Value::Mapping(out)
        }
        other => other,
    })
}

fn interpolate_str(text: &str, vars: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| format!("unclosed `${{` in {text:?}"))?;
            let inner = &body[..end];
            let (name, fallback) = if let Some(i) = inner.find(":-") {
                let v = vars(&inner[..i]).filter(|v| !v.is_empty());
                (&inner[..i], Some(v.unwrap_or_else(|| inner[i + 2..].to_string())))
            } else if let Some(i) = inner.find('-') {
                (&inner[..i], Some(vars(&inner[..i]).unwrap_or_else(|| inner[i + 1..].to_string())))
            } else {
                (inner, None)
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("cannot read `${{{inner}}}`"));
            }
            // An unset variable without a default is empty, as compose makes it (with a warning).
            out.push_str(&fallback.unwrap_or_else(|| vars(name).unwrap_or_default()));
            rest = &body[end + 1..];
        } else {
            let len = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            if len == 0 {
                out.push('$');
            } else {
                out.push_str(&vars(&after[..len]).unwrap_or_default());
            }
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// How a trial's sidecars are made.
pub struct ProjectSpec<'a> {
    /// Containers are named `<prefix>-<service>`.
    pub prefix: String,
    /// The trial's own network, shared by `main` and the sidecars.
    pub network: String,
    pub labels: HashMap<String, String>,
    pub images: &'a ImageBuilder,
    /// Built sidecar images are tagged like the task's own image, with the service's name.
    pub task_name: String,
    /// For images, and for each dependency to be ready.
    pub timeout: Duration,
    /// `main`'s confinement, which every sidecar gets too.
    pub hardening: crate::Hardening,
    /// `main`'s limits: a sidecar's own (`deploy.resources.limits`) win where it has them.
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
}

/// What a trial's compose file made besides `main`: removed by [`Project::remove`], and by
/// label sweeps if the trial never gets to.
#[derive(Clone, Debug, Default)]
pub struct Project {
    pub network: String,
    pub sidecars: Vec<Container>,
    pub volumes: Vec<String>,
    /// `main`'s log directories its sidecars write in too ([`ComposeFile::shared_logs`]).
    pub shared_logs: Vec<String>,
}

impl Project {
    /// The volume name of the file's `name` for this project.
    pub fn volume_name(prefix: &str, name: &str) -> String {
        format!("{prefix}-{name}")
    }

    /// Writable binds of `mounts`: (source on the host, target in the container), copied into
    /// the container before it runs instead of bound.
    pub fn copies(mounts: &[Mount]) -> Vec<(PathBuf, String)> {
        mounts
            .iter()
            .filter_map(|mount| match mount {
                Mount::Bind { source, target, read_only: false } => Some((source.clone(), target.clone())),
                _ => None,
            })
            .collect()
    }

    /// Binds for `mounts` (named volumes under their project names; writable binds are
    /// [`Project::copies`], not binds).
    pub fn binds(prefix: &str, mounts: &[Mount]) -> Vec<String> {
        mounts
            .iter()
            .filter(|m| !matches!(m, Mount::Bind { read_only: false, .. }))
            .map(|m| match m {
                Mount::Volume { name, target, read_only } => {
                    format!("{}:{target}{}", Project::volume_name(prefix, name), if *read_only { ":ro" } else { "" })
                }
                Mount::Bind { source, target, read_only } => {
                    format!("{}:{target}{}", source.display(), if *read_only { ":ro" } else { "" })
                }
            })
            .collect()
    }

    /// Removes the sidecars, the volumes and the network (after `main` is gone).
    pub async fn remove(&self, engine: &Engine) {
        for sidecar in &self.sidecars {
            let _ = engine.remove_container(&sidecar.id).await;
        }
        for volume in &self.volumes {
            let _ = engine.docker.remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>).await;
        }
        let _ = engine.remove_network(&self.network).await;
    }
}

impl Engine {
    /// Makes the trial's network and volumes and starts the sidecars in order, each once what it
    /// depends on is ready; returns when `main`'s own dependencies are ready too. On an error,
    /// what was made so far is in the returned project (for removal) with the error.
    pub async fn start_project(
        &self,
        file: &ComposeFile,
        spec: &ProjectSpec<'_>,
    ) -> (Project, Result<(), SandboxError>) {
        let mut project =
            Project { network: spec.network.clone(), shared_logs: file.shared_logs.clone(), ..Project::default() };
        let result = self.start_project_steps(file, spec, &mut project).await;
        (project, result)
    }

    async fn start_project_steps(
        &self,
        file: &ComposeFile,
        spec: &ProjectSpec<'_>,
        project: &mut Project,
    ) -> Result<(), SandboxError> {
        self.ensure_network_with(&spec.network, spec.labels.clone(), true).await?;
        for name in &file.volumes {
            let volume = Project::volume_name(&spec.prefix, name);
            let request = bollard::models::VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(spec.labels.clone()),
                ..Default::default()
            };
            self.docker
                .create_volume(request)
                .await
                .map_err(|e| SandboxError::Api(format!("volume `{volume}`: {e}")))?;
            project.volumes.push(volume);
        }
        let mut started: BTreeMap<String, Container> = BTreeMap::new();
        for service in &file.services {
            self.wait_for(&service.depends_on, &started, spec.timeout).await?;
            let image = match &service.image {
                ServiceImage::Image(image) => {
                    spec.images.ensure_prebuilt(image, spec.timeout).await?;
                    image.clone()
                }
                ServiceImage::Build { context, dockerfile } => {
                    let dir = context.clone();
                    let hash = crate::blocking(move || content_tag(&dir)).await?;
                    let tag = ImageBuilder::tag_for(&format!("{}-{}", spec.task_name, service.name), &hash);
                    spec.images.ensure_with(&tag, context, dockerfile, false, spec.timeout).await?;
                    tag
                }
            };
            let name = format!("{}-{}", spec.prefix, service.name);
            let body = ContainerCreateBody {
                image: Some(image),
                cmd: service.command.clone(),
                entrypoint: service.entrypoint.clone(),
                env: (!service.environment.is_empty()).then(|| service.environment.clone()),
                working_dir: service.working_dir.clone(),
                user: service.user.clone(),
                labels: Some(spec.labels.clone()),
                healthcheck: service.healthcheck.as_ref().map(|h| HealthConfig {
                    test: Some(h.test.clone()),
                    interval: Some(h.interval.as_nanos() as i64),
                    timeout: Some(h.timeout.as_nanos() as i64),
                    retries: Some(h.retries),
                    start_period: Some(h.start_period.as_nanos() as i64),
                    ..Default::default()
                }),
                // Confined as `main` is: pids, memory and CPU limits, capabilities,
                // no-new-privileges, runtime, logging.
                host_config: Some(HostConfig {
                    network_mode: Some(spec.network.clone()),
                    binds: Some(Project::binds(&spec.prefix, &service.mounts)),
                    ..crate::container::confined(
                        &spec.hardening,
                        service.limits.cpus.or(spec.cpus),
                        service.limits.memory_mb.or(spec.memory_mb),
                    )
                }),
                networking_config: Some(NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(
                        spec.network.clone(),
                        EndpointSettings { aliases: Some(vec![service.name.clone()]), ..Default::default() },
                    )])),
                }),
                ..Default::default()
            };
            let err = |message: String| SandboxError::Start { name: name.clone(), message };
            let options = CreateContainerOptionsBuilder::default().name(&name).build();
            let created = self.docker.create_container(Some(options), body).await.map_err(|e| err(e.to_string()))?;
            let container = Container::adopt(self.clone(), created.id, name.clone(), Some(spec.network.clone()));
            project.sidecars.push(container.clone());
            for (source, target) in Project::copies(&service.mounts) {
                container.copy_in(&source, &target).await?;
            }
            self.docker.start_container(&container.id, None).await.map_err(|e| err(e.to_string()))?;
            started.insert(service.name.clone(), container);
        }
        self.wait_for(&file.main.depends_on, &started, spec.timeout).await
    }

    /// Waits until each dependency meets its condition, within `timeout` in all.
    async fn wait_for(
        &self,
        deps: &[Dependency],
        started: &BTreeMap<String, Container>,
        timeout: Duration,
    ) -> Result<(), SandboxError> {
        let deadline = tokio::time::Instant::now() + timeout;
        for dep in deps {
            let Some(container) = started.get(&dep.service) else { continue };
            loop {
                let info = self
                    .docker
                    .inspect_container(&container.id, None::<bollard::query_parameters::InspectContainerOptions>)
                    .await
                    .map_err(|e| SandboxError::Api(e.to_string()))?;
                let state = info.state.unwrap_or_default();
                let running = state.running == Some(true);
                let health = state.health.and_then(|h| h.status).map(|s| s.to_string());
                let ready = match dep.condition {
                    Condition::Started => true,
                    Condition::Healthy => health.as_deref() == Some("healthy"),
                    Condition::CompletedSuccessfully => !running && state.exit_code == Some(0),
                };
                if ready {
                    break;
                }
                let failed = match dep.condition {
                    Condition::Healthy => health.as_deref() == Some("unhealthy") || !running,
                    Condition::CompletedSuccessfully => !running && state.exit_code.is_some_and(|c| c != 0),
                    Condition::Started => false,
                };
                if failed || tokio::time::Instant::now() >= deadline {
                    let why = if failed { "failed" } else { "timed out" };
                    return Err(SandboxError::Start {
                        name: container.name.clone(),
                        message: format!(
                            "service `{}` {why} waiting for `{:?}` (state: {}, health: {})",
                            dep.service,
                            dep.condition,
                            state.status.map(|s| s.to_string()).unwrap_or_default(),
                            health.unwrap_or_else(|| "none".into())
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }
}

/// A short content hash of a build context, for its image tag.
fn content_tag(dir: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for entry in terminus_core::tree::walk(dir).map_err(std::io::Error::other)? {
        if let terminus_core::tree::TreeEntry::File { rel, path, .. } = entry {
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update(std::fs::read(path)?);
        }
    }
    Ok(format!("{:x}", hasher.finalize())[..16].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(Project::binds("p", &db.mounts), ["p-shared:/shared", "/task/environment/data:/data:ro"]);
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
        assert_eq!(Project::binds("p", mounts), ["/t/environment/data:/data:ro"]);
        assert_eq!(
            Project::copies(mounts),
            [
                ("/t/environment/state".into(), "/state".to_string()),
                ("/t/environment/conf".into(), "/conf".to_string())
            ]
        );
        assert_eq!(
            file.services[0].image,
            ServiceImage::Build { context: "/t/environment/app".into(), dockerfile: "Dockerfile.server".into() }
        );
    }

    /// Reads `text` as a trial of a task with 1 CPU and 2048 MiB whose image is `img:1`.
    fn read_as_trial(text: &str) -> Result<ComposeFile, String> {
        let dir =
            std::env::temp_dir().join(format!("terminus-compose-{}-{:08x}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(FILE_NAME), text).unwrap();
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
        let file = read(&dir, &infra);
        std::fs::remove_dir_all(&dir).unwrap();
        file.map(|f| f.expect("the file is there"))
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
