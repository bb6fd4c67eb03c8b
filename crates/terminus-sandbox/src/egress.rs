//! Allowlisted egress: Harbor 0.26's `network_mode = "allowlist"` with `allowed_hosts`.
//!
//! A trial with an allowlisted phase gets two more things, both labelled like its container and
//! removed with it ([`Container::remove`]; label sweeps, `resume` and `gc` catch them too): an
//! *internal* network `<container>-egress` (the engine gives it no route out), and a proxy
//! container `<container>-egress-proxy` on that network (as `terminus-egress`) and on the
//! network `main` uses otherwise (the job's bridge, or the trial's compose network, so the
//! task's sidecars are reachable through it). For an allowlisted phase `main` leaves its own
//! network and joins only the internal one: a direct connection anywhere but the proxy fails,
//! and the agent's shell and the phase's execs get `HTTP_PROXY`/`HTTPS_PROXY` (both cases)
//! pointing at the proxy, which admits `CONNECT` and plain `http://` requests to the hosts the
//! phase allows and answers 403 to the rest. A public or offline phase leaves the internal
//! network again; the proxy's list is rewritten at each allowlisted phase.
//!
//! Harbor's Docker environment enforces the same policy with a transparent proxy (gost with
//! nftables in a sidecar whose network namespace `main` shares), which needs an image pulled
//! from a registry and `NET_ADMIN`. Here nothing is pulled and nothing is privileged: the proxy
//! is a short core-Perl program ([`SCRIPT`]) passed on the command line of an image the engine
//! already has — `terminus-base:bookworm`, else the task's own image (every Debian or Ubuntu
//! image has perl, which Debian marks Essential). A Rust proxy would have meant copying a
//! binary built for the host's libc into a container of another distribution. The difference:
//! only clients that honour the proxy variables get out (Harbor's transparent proxy catches any
//! TCP connection), and sidecars are reached through the proxy, by a name in the list.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig, HostConfigLogConfig};
use bollard::query_parameters::CreateContainerOptionsBuilder;

use crate::container::{Container, ExecOptions};
use crate::engine::Engine;
use crate::error::SandboxError;

/// The proxy program (core Perl; its header says what the entries mean).
pub const SCRIPT: &str = include_str!("egress/proxy.pl");

pub use terminus_core::layout::container::{PROXY_HOST, PROXY_PORT, proxy_env};

/// The image the proxy runs in when the engine has it (scripts/setup.sh builds it).
pub const PROXY_IMAGE: &str = "terminus-base:bookworm";

/// Where the proxy reads the phase's allowlist (one entry a line, re-read per connection).
const ALLOWLIST_PATH: &str = "/etc/terminus-egress/allowed";

/// How long the proxy may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What a phase may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkAccess {
    /// Only loopback.
    Offline,
    /// The container's own network (the internet, the task's sidecars).
    Full,
    /// Only the proxy, which admits these hosts (normalized `allowed_hosts` entries).
    Allowlist(Vec<String>),
}

/// How a trial's proxy is made.
#[derive(Clone, Debug)]
pub struct EgressSpec {
    /// The trial container's name: the network is `<prefix>-egress`, the proxy
    /// `<prefix>-egress-proxy`.
    pub prefix: String,
    pub labels: HashMap<String, String>,
    /// The network the proxy reaches out on (`main`'s own); None: the engine's default bridge.
    pub upstream: Option<String>,
    /// The task's image, for an engine without [`PROXY_IMAGE`].
    pub fallback_image: String,
}

/// A trial's internal network and its proxy, owned by the trial's
/// [`Environment`](crate::environment::Environment) (give it with
/// [`Environment::with_egress`](crate::environment::Environment::with_egress); until then,
/// [`Egress::remove`] is the caller's).
#[derive(Debug)]
pub struct Egress {
    /// The internal network.
    pub network: String,
    pub proxy: Container,
    /// The proxy's address on the internal network.
    pub address: String,
}

impl Egress {
    /// The `/etc/hosts` entry that makes [`PROXY_HOST`] resolve in `main` (whose resolver, on the
    /// engine's default bridge, knows no container names).
    pub fn host_entry(&self) -> String {
        format!("{PROXY_HOST}:{}", self.address)
    }

    /// Makes `hosts` the proxy's allowlist (it answers 403 to everything else).
    pub async fn allow(&self, hosts: &[String]) -> Result<(), SandboxError> {
        let quoted: Vec<String> = hosts.iter().map(|h| crate::tmux::shell_quote(h)).collect();
        let write = if quoted.is_empty() { ":".to_string() } else { format!("printf '%s\\n' {}", quoted.join(" ")) };
        let dir = ALLOWLIST_PATH.rsplit_once('/').map_or("/", |(dir, _)| dir);
        let script =
            format!("mkdir -p {dir} && {write} > {ALLOWLIST_PATH}.new && mv -f {ALLOWLIST_PATH}.new {ALLOWLIST_PATH}");
        let options =
            ExecOptions { user: Some("0".into()), timeout: Some(Duration::from_secs(30)), ..ExecOptions::default() };
        let out = self.proxy.exec(&script, &options).await?;
        if out.exit_code != Some(0) {
            return Err(SandboxError::Exec {
                container: self.proxy.name.clone(),
                message: format!("cannot write the allowlist: {}", out.output.trim()),
            });
        }
        Ok(())
    }

    /// Removes the proxy, then the network (once `main` is gone).
    pub async fn remove(&self, engine: &Engine) {
        let _ = engine.remove_container(&self.proxy.id).await;
        let _ = engine.remove_network(&self.network).await;
    }
}

impl Engine {
    /// Makes the internal network and starts the proxy on it (allowing nothing yet); returns
    /// once the proxy listens. What was made is removed again on an error.
    pub async fn start_egress(&self, spec: &EgressSpec) -> Result<Egress, SandboxError> {
        let network = format!("{}-egress", spec.prefix);
        let request = bollard::models::NetworkCreateRequest {
            name: network.clone(),
            driver: Some("bridge".to_string()),
            internal: Some(true),
            labels: Some(spec.labels.clone()),
            ..Default::default()
        };
        self.docker
            .create_network(request)
            .await
            .map_err(|e| SandboxError::Api(format!("cannot create network `{network}`: {e}")))?;
        match self.start_proxy(spec, &network).await {
            Ok((proxy, address)) => Ok(Egress { network, proxy, address }),
            Err((proxy, e)) => {
                if let Some(id) = proxy {
                    let _ = self.remove_container(&id).await;
                }
                let _ = self.remove_network(&network).await;
                Err(e)
            }
        }
    }

    /// The proxy container and its address on `network`; on an error, its id when it was made.
    async fn start_proxy(
        &self,
        spec: &EgressSpec,
        network: &str,
    ) -> Result<(Container, String), (Option<String>, SandboxError)> {
        let name = format!("{}-egress-proxy", spec.prefix);
        let err = |message: String| SandboxError::Start { name: name.clone(), message };
        let image = if self.docker.inspect_image(PROXY_IMAGE).await.is_ok() {
            PROXY_IMAGE.to_string()
        } else {
            spec.fallback_image.clone()
        };
        let upstream = spec.upstream.clone().unwrap_or_else(|| "bridge".to_string());
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(vec!["perl".into(), "-e".into(), SCRIPT.into()]),
            cmd: Some(Vec::new()),
            // Nobody: the proxy needs no privilege at all.
            user: Some("65534:65534".into()),
            labels: Some(spec.labels.clone()),
            host_config: Some(HostConfig {
                init: Some(true),
                network_mode: Some(upstream),
                memory: Some(256 * 1024 * 1024),
                pids_limit: Some(512),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges:true".into()]),
                log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&name).build();
        let created =
            self.docker.create_container(Some(options), body).await.map_err(|e| (None, err(e.to_string())))?;
        let id = created.id;
        let fail = |e: SandboxError| (Some(id.clone()), e);
        let request = bollard::models::NetworkConnectRequest {
            container: id.clone(),
            endpoint_config: Some(EndpointSettings { aliases: Some(vec![PROXY_HOST.into()]), ..Default::default() }),
        };
        self.docker
            .connect_network(network, request)
            .await
            .map_err(|e| fail(err(format!("cannot join `{network}`: {e}"))))?;
        self.docker.start_container(&id, None).await.map_err(|e| fail(err(e.to_string())))?;
        let proxy = Container::adopt(self.clone(), id.clone(), name.clone(), Some(network.to_string()));
        let info = self
            .docker
            .inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .map_err(|e| fail(err(e.to_string())))?;
        let address = info
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|mut n| n.remove(network))
            .and_then(|endpoint| endpoint.ip_address)
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| fail(err(format!("the proxy has no address on `{network}`"))))?;
        // One pause, written once: the probe's sleep and its number of tries both come from it.
        const PAUSE: Duration = Duration::from_millis(50);
        let probe = format!(
            "perl -MIO::Socket::INET -e 'for (1..{tries}) {{ exit 0 if IO::Socket::INET->new(q(127.0.0.1:{PROXY_PORT})); select(undef, undef, undef, {pause}) }} exit 1'",
            tries = READY_TIMEOUT.as_millis() / PAUSE.as_millis(),
            pause = PAUSE.as_secs_f64()
        );
        let options = ExecOptions { timeout: Some(READY_TIMEOUT + Duration::from_secs(5)), ..ExecOptions::default() };
        match proxy.exec(&probe, &options).await {
            Ok(out) if out.exit_code == Some(0) => Ok((proxy, address)),
            Ok(out) => Err(fail(err(format!(
                "the egress proxy did not listen in image `{image}` (it needs perl and bash): {}",
                out.output.trim()
            )))),
            Err(e) => Err(fail(err(format!(
                "the egress proxy did not start in image `{image}` (it needs perl and bash): {e}"
            )))),
        }
    }
}

#[cfg(test)]
#[expect(
    clippy::disallowed_methods,
    reason = "the proxy's host matcher is a perl script, run here as the proxy runs it"
)]
mod tests {
    use super::*;

    /// The proxy's own matcher (the program that runs, in its test mode), through the host's
    /// perl: Harbor's meaning of each kind of entry.
    #[test]
    fn the_proxy_admits_what_each_kind_of_entry_names() {
        let entries =
            ["example.com", "*.debian.org", "10.0.0.0/8", "192.0.2.1", "2001:db8::/32", "::ffff:172.16.0.0/108"];
        let cases = [
            ("example.com", true),
            ("EXAMPLE.com.", true),
            ("www.example.com", false),
            ("example.org", false),
            ("deb.debian.org", true),
            ("a.b.debian.org", true),
            ("debian.org", false),
            ("xdebian.org", false),
            ("10.200.3.4", true),
            ("11.0.0.1", false),
            ("192.0.2.1", true),
            ("192.0.2.2", false),
            ("[2001:db8::5]", true),
            ("2001:db9::1", false),
            ("::ffff:10.0.0.1", true),
            ("172.16.5.5", true),
            ("172.31.0.1", true),
            ("172.32.0.1", false),
        ];
        let mut args = vec!["-e".to_string(), SCRIPT.to_string(), "--".into(), "--match".into()];
        args.extend(entries.iter().map(|e| e.to_string()));
        args.push("--".into());
        args.extend(cases.iter().map(|(host, _)| host.to_string()));
        let out = std::process::Command::new("perl").args(&args).output().expect("perl runs on the host");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let answers: Vec<bool> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l == "allow").collect();
        let expected: Vec<bool> = cases.iter().map(|(_, allowed)| *allowed).collect();
        for ((host, want), got) in cases.iter().zip(&answers) {
            assert_eq!(got, want, "{host}");
        }
        assert_eq!(answers, expected);
    }

    #[test]
    fn clients_are_pointed_at_the_proxy_in_both_spellings() {
        let env = proxy_env();
        assert!(env.contains(&"https_proxy=http://terminus-egress:3128".to_string()));
        assert!(env.contains(&"HTTP_PROXY=http://terminus-egress:3128".to_string()));
        assert!(env.iter().any(|v| v.starts_with("NO_PROXY=localhost")));
    }
}
