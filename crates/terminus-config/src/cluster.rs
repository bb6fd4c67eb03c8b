//! Where trials run (`environment.type`): the local Docker engine, or a Docker Swarm described by
//! `environment.swarm`. Plain data, checked here; the sandbox crate connects.

use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::raw::RawEnvironment;

pub use terminus_core::cluster::{SwarmSettings, TlsFiles};

/// `environment.type`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackendSpec {
    #[default]
    Docker,
    Swarm(Box<SwarmSettings>),
}

impl BackendSpec {
    pub fn from_raw(path: &Path, env: &RawEnvironment) -> Result<BackendSpec, ConfigError> {
        match env.kind.as_deref() {
            None | Some("docker") => {
                if env.swarm.is_some() {
                    return Err(ConfigError::invalid(
                        path,
                        "environment.swarm",
                        "is only read with `environment.type: swarm`",
                    ));
                }
                Ok(BackendSpec::Docker)
            }
            Some("swarm") => {
                // What a swarm service cannot be given is refused, not dropped silently.
                if env.runtime.is_some() {
                    return Err(ConfigError::invalid(
                        path,
                        "environment.runtime",
                        "a swarm service cannot choose its OCI runtime: set it as the nodes' daemons' default instead",
                    ));
                }
                if env.security_opt.as_ref().is_some_and(|o| !o.is_empty()) {
                    return Err(ConfigError::invalid(
                        path,
                        "environment.security_opt",
                        "a swarm service takes no security_opt (profiles are the nodes' daemons' defaults there)",
                    ));
                }
                swarm(path, env).map(|spec| BackendSpec::Swarm(Box::new(spec)))
            }
            Some(other) => Err(ConfigError::invalid(
                path,
                "environment.type",
                format!("{other:?} is not available; \"docker\" (the local engine) and \"swarm\" (a Docker Swarm) are"),
            )),
        }
    }
}

fn swarm(path: &Path, env: &RawEnvironment) -> Result<SwarmSettings, ConfigError> {
    let raw = env.swarm.clone().ok_or_else(|| {
        ConfigError::invalid(
            path,
            "environment.swarm",
            "`environment.type: swarm` needs this block (at least `manager`)",
        )
    })?;
    let manager = raw.manager.filter(|m| !m.trim().is_empty()).ok_or_else(|| {
        ConfigError::invalid(path, "environment.swarm.manager", "is required (unix://, tcp:// or ssh://)")
    })?;
    if !["unix://", "tcp://", "ssh://"].iter().any(|scheme| manager.starts_with(scheme)) {
        return Err(ConfigError::invalid(
            path,
            "environment.swarm.manager",
            format!("{manager:?}: give unix:///path, tcp://host:port or ssh://user@host"),
        ));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let tls = raw.tls.as_ref().map(|t| tls_spec(path, base, "environment.swarm.tls", t)).transpose()?;
    if tls.is_some() && !manager.starts_with("tcp://") {
        return Err(ConfigError::invalid(path, "environment.swarm.tls", "applies to a tcp:// manager only"));
    }
    let node_tls = match &raw.node_tls {
        Some(t) => Some(tls_spec(path, base, "environment.swarm.node_tls", t)?),
        None => tls.clone(),
    };
    let node_port = raw.node_port.unwrap_or(if node_tls.is_some() { 2376 } else { 2375 });
    if node_port == 0 {
        return Err(ConfigError::invalid(path, "environment.swarm.node_port", "must be a port (1-65535)"));
    }
    if let Some(registry) = &raw.registry
        && (registry.is_empty() || registry.contains("://") || registry.contains('/'))
    {
        return Err(ConfigError::invalid(
            path,
            "environment.swarm.registry",
            format!("{registry:?}: give host:port, as nodes pull from it (no scheme, no path)"),
        ));
    }
    for (i, constraint) in raw.constraints.iter().enumerate() {
        if !constraint.contains("==") && !constraint.contains("!=") {
            return Err(ConfigError::invalid(
                path,
                format!("environment.swarm.constraints[{i}]"),
                format!("{constraint:?}: a constraint is `attribute==value` or `attribute!=value`"),
            ));
        }
    }
    // A node's daemon on plain TCP answers whoever reaches its port (a trial container on that
    // node can): TLS is required unless the job says otherwise, knowingly.
    if node_tls.is_none() && !raw.insecure_nodes {
        return Err(ConfigError::invalid(
            path,
            "environment.swarm.node_tls",
            "the nodes' daemons are reached with TLS client certificates: give a certificate directory \
             (ca.pem, cert.pem, key.pem), or set `environment.swarm.insecure_nodes: true` on a network no trial can reach",
        ));
    }
    Ok(SwarmSettings {
        manager,
        tls,
        node_port,
        node_tls,
        registry: raw.registry,
        constraints: raw.constraints,
        labels: raw.labels,
    })
}

/// A certificate directory (`ca.pem`, `cert.pem`, `key.pem`), resolved against the job file's
/// directory, each file checked.
fn tls_spec(path: &Path, base: &Path, key: &str, dir: &Path) -> Result<TlsFiles, ConfigError> {
    let dir = if dir.is_absolute() { dir.to_path_buf() } else { base.join(dir) };
    let file = |name: &str| -> Result<PathBuf, ConfigError> {
        let file = dir.join(name);
        if !file.is_file() {
            return Err(ConfigError::invalid(
                path,
                key,
                format!(
                    "`{}` has no readable {name} (a certificate directory holds ca.pem, cert.pem and key.pem)",
                    dir.display()
                ),
            ));
        }
        Ok(file)
    };
    Ok(TlsFiles { ca: file("ca.pem")?, cert: file("cert.pem")?, key: file("key.pem")? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::RawSwarm;

    fn env(kind: Option<&str>, swarm: Option<RawSwarm>) -> RawEnvironment {
        RawEnvironment { kind: kind.map(String::from), swarm, ..RawEnvironment::default() }
    }

    fn err_key(result: Result<BackendSpec, ConfigError>) -> String {
        match result {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn each_mistake_names_its_key() {
        let path = Path::new("/jobs/job.yaml");
        assert_eq!(BackendSpec::from_raw(path, &env(None, None)).unwrap(), BackendSpec::Docker);
        assert_eq!(err_key(BackendSpec::from_raw(path, &env(Some("k8s"), None))), "environment.type");
        assert_eq!(err_key(BackendSpec::from_raw(path, &env(Some("swarm"), None))), "environment.swarm");
        assert_eq!(
            err_key(BackendSpec::from_raw(path, &env(Some("swarm"), Some(RawSwarm::default())))),
            "environment.swarm.manager"
        );
        let with = |swarm: RawSwarm| BackendSpec::from_raw(path, &env(Some("swarm"), Some(swarm)));
        let manager = || Some("tcp://10.0.0.1:2375".to_string());
        assert_eq!(
            err_key(with(RawSwarm { manager: Some("http://x".into()), ..RawSwarm::default() })),
            "environment.swarm.manager"
        );
        assert_eq!(
            err_key(with(RawSwarm {
                manager: manager(),
                registry: Some("http://r:5000".into()),
                ..RawSwarm::default()
            })),
            "environment.swarm.registry"
        );
        assert_eq!(
            err_key(with(RawSwarm {
                manager: manager(),
                constraints: vec!["node.role".into()],
                ..RawSwarm::default()
            })),
            "environment.swarm.constraints[0]"
        );
        assert_eq!(
            err_key(with(RawSwarm { manager: manager(), tls: Some("no-such-dir".into()), ..RawSwarm::default() })),
            "environment.swarm.tls"
        );
        assert_eq!(
            err_key(BackendSpec::from_raw(path, &env(Some("docker"), Some(RawSwarm::default())))),
            "environment.swarm"
        );
        // Nodes without TLS are refused, naming the key; `insecure_nodes` takes plain TCP.
        assert_eq!(
            err_key(with(RawSwarm {
                manager: manager(),
                registry: Some("10.0.0.1:5000".into()),
                ..RawSwarm::default()
            })),
            "environment.swarm.node_tls"
        );
        let BackendSpec::Swarm(spec) = with(RawSwarm {
            manager: manager(),
            registry: Some("10.0.0.1:5000".into()),
            insecure_nodes: true,
            ..RawSwarm::default()
        })
        .unwrap() else {
            panic!("a swarm")
        };
        assert_eq!(spec.node_port, 2375, "plain TCP without certificates");
        assert!(spec.insecure_nodes());
        // What a service cannot be given is refused.
        let runsc = RawEnvironment { runtime: Some("runsc".into()), ..env(Some("swarm"), Some(RawSwarm::default())) };
        assert_eq!(err_key(BackendSpec::from_raw(path, &runsc)), "environment.runtime");
    }
}
