//! The compose file's keys, one reader each: a service's image or build, environment,
//! command, dependencies, health check, mounts, resources and networks, with `${VAR}`
//! interpolation as compose does it. Each refuses what is outside the subset by its key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::model::{
    ComposeError, Condition, Dependency, Limits, MainService, Mount, Service, ServiceHealth, ServiceImage, error,
};

/// Service keys that are accepted and have no effect on a trial's private network.
/// `ports` is among them: services reach each other on the trial's network, and nothing is
/// published on the host (two trials would fight over a host port).
/// `pull_policy` is Harbor's base file's (`build`): images are built or used as they are anyway.
const HARMLESS: [&str; 9] =
    ["restart", "expose", "container_name", "stdin_open", "tty", "init", "ports", "platform", "pull_policy"];

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

pub(super) fn key_str<'a>(key: &'a Value, owner: &str) -> Result<&'a str, ComposeError> {
    key.as_str().ok_or_else(|| error(owner, "keys must be strings"))
}

pub(super) fn parse_main(
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
pub(super) fn deploy(value: &Value, path: &str) -> Result<Limits, ComposeError> {
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
pub(super) fn memory_mb(text: &str) -> Option<u64> {
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
pub(super) fn networks_plain(value: &Value) -> bool {
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

pub(super) fn parse_service(name: &str, body: &Value, project_dir: &Path) -> Result<Service, ComposeError> {
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

pub(super) fn string(value: &Value, path: &str) -> Result<String, ComposeError> {
    value.as_str().map(str::to_string).ok_or_else(|| error(path, "must be a string"))
}

/// A string, number or boolean as compose writes it in the environment.
pub(super) fn scalar(value: &Value, path: &str) -> Result<String, ComposeError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Ok(String::new()),
        _ => Err(error(path, "must be a string or a number")),
    }
}

pub(super) fn build_context(value: &Value, path: &str, project_dir: &Path) -> Result<ServiceImage, ComposeError> {
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
pub(super) fn within(root: &Path, path: &str) -> Option<PathBuf> {
    match Path::new(path).strip_prefix(root) {
        Ok(rest) => inside(root, &format!("./{}", rest.display())),
        Err(_) if path.starts_with('/') || path.starts_with('~') => None,
        Err(_) => inside(root, path),
    }
}

/// `relative` resolved under `root`, when it stays there (no `..` out, no absolute host path).
pub(super) fn inside(root: &Path, relative: &str) -> Option<PathBuf> {
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

pub(super) fn environment(value: &Value, path: &str) -> Result<Vec<String>, ComposeError> {
    match value {
        Value::Mapping(map) => {
            map.iter().map(|(k, v)| Ok(format!("{}={}", key_str(k, path)?, scalar(v, path)?))).collect()
        }
        Value::Sequence(items) => items.iter().map(|item| string(item, path)).collect(),
        Value::Null => Ok(Vec::new()),
        _ => Err(error(path, "must be a mapping or a list of KEY=VALUE")),
    }
}

pub(super) fn command(value: &Value, path: &str) -> Result<Vec<String>, ComposeError> {
    match value {
        // A string runs through a shell, as compose runs it after splitting; a shell is the
        // faithful reading for the quoting tasks use.
        Value::String(s) => Ok(vec!["/bin/sh".into(), "-c".into(), s.clone()]),
        Value::Sequence(items) => items.iter().map(|item| scalar(item, path)).collect(),
        _ => Err(error(path, "must be a string or a list")),
    }
}

pub(super) fn depends_on(value: &Value, path: &str) -> Result<Vec<Dependency>, ComposeError> {
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

pub(super) fn healthcheck(value: &Value, path: &str) -> Result<Option<ServiceHealth>, ComposeError> {
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
pub(super) fn duration(value: &Value, path: &str) -> Result<Duration, ComposeError> {
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

pub(super) fn mounts(value: &Value, path: &str, project_dir: &Path) -> Result<Vec<Mount>, ComposeError> {
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
pub(super) fn interpolate(
    value: Value,
    vars: &dyn Fn(&str) -> Option<String>,
    path: &str,
) -> Result<Value, ComposeError> {
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

pub(super) fn interpolate_str(text: &str, vars: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
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
