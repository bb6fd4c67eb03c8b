//! A connection to one daemon of a swarm: the manager's, or a node's (exec has no Swarm API,
//! so a trial's container is reached on its node's own daemon).

use bollard::Docker;
use terminus_core::cluster::TlsFiles;

use crate::engine::Engine;
use crate::error::SandboxError;

/// How long a request to a daemon may take (bollard's timeout, in seconds).
const REQUEST_TIMEOUT: u64 = 120;

/// Connects to a daemon at `address` (`unix://`, `tcp://`, `ssh://`), negotiating the API
/// version (Debian's engine speaks 1.41, bollard asks for newer) and pinging it.
pub async fn connect_daemon(address: &str, tls: Option<&TlsFiles>) -> Result<Engine, SandboxError> {
    let fail = |e: bollard::errors::Error| SandboxError::Connect(format!("{address}: {e}"));
    let version = bollard::API_DEFAULT_VERSION;
    let docker = if let Some(path) = address.strip_prefix("unix://") {
        Docker::connect_with_socket(path, REQUEST_TIMEOUT, version).map_err(fail)?
    } else if address.starts_with("ssh://") {
        Docker::connect_with_ssh(address, REQUEST_TIMEOUT, version, None).map_err(fail)?
    } else if let Some(tls) = tls {
        let host = address.replacen("tcp://", "", 1);
        Docker::connect_with_ssl(&host, &tls.key, &tls.cert, &tls.ca, REQUEST_TIMEOUT, version).map_err(fail)?
    } else {
        Docker::connect_with_http(address, REQUEST_TIMEOUT, version).map_err(fail)?
    };
    let docker = docker.negotiate_version().await.map_err(fail)?;
    docker.ping().await.map_err(fail)?;
    Ok(Engine::from_docker(docker))
}
