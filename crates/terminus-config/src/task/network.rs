//! A task's network: each phase's policy (allowlist, none, public), the plan over the
//! phases and steps, hosts normalised and checked, and the job's extra hosts added.

use super::schema::{NetworkMode, StepSection, TaskToml};

/// Run-specific hosts a job adds to a task's allowlists: Harbor's `extra_allowed_hosts` of the
/// job's `environment` (the environment's baseline), of the agent (its phase) and of `verifier`
/// (the tests' phase), normalized as task hosts are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtraHosts {
    pub environment: Vec<String>,
    pub agent: Vec<String>,
    pub verifier: Vec<String>,
}

impl ExtraHosts {
    pub fn is_empty(&self) -> bool {
        self.environment.is_empty() && self.agent.is_empty() && self.verifier.is_empty()
    }
}

/// What one phase may reach (Harbor's `NetworkPolicy`): its mode and, for an allowlist, the
/// hosts it admits, normalized as Harbor normalizes them ([`normalize_allowed_host`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    pub mode: NetworkMode,
    pub allowed_hosts: Vec<String>,
}

impl NetworkPolicy {
    /// The environment a phase's processes get for this policy: for an allowlist, the variables
    /// that send HTTP clients through the trial's egress proxy (`KEY=VALUE`).
    pub fn proxy_env(&self) -> Vec<String> {
        if self.mode == NetworkMode::Allowlist { terminus_core::layout::container::proxy_env() } else { Vec::new() }
    }

    /// A policy without hosts.
    pub fn new(mode: NetworkMode) -> NetworkPolicy {
        NetworkPolicy { mode, allowed_hosts: Vec::new() }
    }

    /// Harbor's `merge_extra_allowlists`: a public phase stays public (the hosts are ignored);
    /// any other becomes an allowlist of its hosts and `extra` (so `no-network` with extra hosts
    /// reaches those hosts only).
    pub(super) fn merged(self, extra: &[String]) -> NetworkPolicy {
        if extra.is_empty() || self.mode == NetworkMode::Public {
            return self;
        }
        let mut allowed_hosts = self.allowed_hosts;
        for host in extra {
            if !allowed_hosts.contains(host) {
                allowed_hosts.push(host.clone());
            }
        }
        NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts }
    }

    /// `mode` with `hosts` (validated when the task loaded; what does not normalize is dropped).
    pub(super) fn with_hosts(mode: NetworkMode, hosts: &Option<Vec<String>>) -> NetworkPolicy {
        let mut allowed_hosts: Vec<String> = Vec::new();
        for host in hosts.iter().flatten().filter_map(|h| normalize_allowed_host(h)) {
            if !allowed_hosts.contains(&host) {
                allowed_hosts.push(host);
            }
        }
        NetworkPolicy { mode, allowed_hosts }
    }
}

/// A phase's own policy, when it sets its own `network_mode`: that mode with that phase's hosts
/// only, never another's (Harbor's `_explicit_phase_policy`).
pub(super) fn explicit_phase_policy(mode: Option<NetworkMode>, hosts: &Option<Vec<String>>) -> Option<NetworkPolicy> {
    mode.map(|mode| NetworkPolicy::with_hosts(mode, hosts))
}

/// The network each phase of a trial gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkPlan {
    /// From the container's start through the agent's set-up (the environment's baseline).
    pub setup: NetworkPolicy,
    pub agent: NetworkPolicy,
    /// While the tests run: `verifier.network_mode` (with its hosts), else the baseline of the
    /// environment they run in (the agent's, or a separate verifier's own).
    pub verifier: NetworkPolicy,
    /// A separate verifier's environment: its own baseline, from its start until the tests
    /// run. None when the tests run in the agent's container.
    pub verifier_env: Option<NetworkPolicy>,
}

impl NetworkPlan {
    /// The phases spent in the agent's container (the verifier's only when the tests run in it).
    pub(super) fn agent_container_phases(&self) -> impl Iterator<Item = &NetworkPolicy> {
        let verifier = self.verifier_env.is_none().then_some(&self.verifier);
        [Some(&self.setup), Some(&self.agent), verifier].into_iter().flatten()
    }

    /// Whether the agent's container must be able to join a network at some phase (the
    /// verifier's only when the tests run in it).
    pub fn ever_online(&self) -> bool {
        self.agent_container_phases().any(|p| p.mode != NetworkMode::NoNetwork)
    }

    /// Whether some phase of the agent's container reaches out only through the egress proxy.
    pub fn any_allowlist(&self) -> bool {
        self.agent_container_phases().any(|p| p.mode == NetworkMode::Allowlist)
    }

    /// Whether a separate verifier's container must be able to join a network at some phase.
    pub fn verifier_env_ever_online(&self) -> bool {
        self.verifier_env.as_ref().is_some_and(|baseline| {
            baseline.mode != NetworkMode::NoNetwork || self.verifier.mode != NetworkMode::NoNetwork
        })
    }
}

impl TaskToml {
    /// Harbor's rules: `allowed_hosts` only with `network_mode = "allowlist"`; entries are host
    /// names, `*.suffix` wildcards, IP addresses or CIDR ranges (no URLs, ports or paths).
    pub(super) fn validate_network(&self) -> Result<(), String> {
        let sections = [
            (
                "environment".to_string(),
                self.environment.network_mode.or(Some(NetworkMode::Public)),
                &self.environment.allowed_hosts,
            ),
            ("agent".to_string(), self.agent.network_mode, &self.agent.allowed_hosts),
            ("verifier".to_string(), self.verifier.network_mode, &self.verifier.allowed_hosts),
        ];
        // A step's phases follow the same rules (Harbor validates them with the same models).
        let steps = self.steps.iter().flatten().flat_map(|step| {
            [
                (format!("steps.{}.agent", step.name), step.agent.network_mode, &step.agent.allowed_hosts),
                (format!("steps.{}.verifier", step.name), step.verifier.network_mode, &step.verifier.allowed_hosts),
            ]
        });
        for (section, mode, hosts) in sections.into_iter().chain(steps) {
            if let Some(hosts) = hosts {
                // A phase's list needs the phase's own mode; an empty list is fine with any mode.
                if mode.is_none() || mode != Some(NetworkMode::Allowlist) && !hosts.is_empty() {
                    return Err(format!(
                        "task.toml: key `{section}.allowed_hosts` is only valid with `{section}.network_mode = \"allowlist\"`"
                    ));
                }
                for host in hosts {
                    if normalize_allowed_host(host).is_none() {
                        return Err(format!(
                            "task.toml: key `{section}.allowed_hosts`: {host:?} must be a host name, `*.suffix`, an IP address or a CIDR range (not a URL, port or path)"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// An `allowed_hosts` entry as Harbor normalizes it (trimmed, lower case, no trailing dot; IPv6
/// addresses and CIDR ranges in their compressed form), or None when Harbor refuses it: host
/// names (letters, digits and `-` in labels of at most 63), `*.suffix` wildcards of a host name,
/// IP addresses and CIDR ranges without host bits; not URLs, ports or paths.
pub fn normalize_allowed_host(host: &str) -> Option<String> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let host = host.trim().to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    if host.is_empty() || host.contains('%') {
        return None;
    }
    if let Some((addr, bits)) = host.split_once('/') {
        if bits.is_empty() || !bits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let bits: u32 = bits.parse().ok()?;
        // Harbor's `ip_network(strict=True)`: no bits set past the prefix.
        return match addr.parse::<IpAddr>().ok()? {
            IpAddr::V4(ip) if bits <= 32 => {
                let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
                (u32::from(ip) & !mask == 0).then(|| format!("{}/{bits}", Ipv4Addr::from(u32::from(ip))))
            }
            IpAddr::V6(ip) if bits <= 128 => {
                let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
                (u128::from(ip) & !mask == 0).then(|| format!("{}/{bits}", Ipv6Addr::from(u128::from(ip))))
            }
            _ => None,
        };
    }
    if host.contains(':') {
        return host.parse::<Ipv6Addr>().ok().map(|ip| ip.to_string());
    }
    let name = match host.strip_prefix("*.") {
        Some(suffix) if suffix.parse::<IpAddr>().is_ok() => return None,
        Some(suffix) => suffix,
        None => host,
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    name.split('.').all(label_ok).then(|| host.to_string())
}

impl TaskToml {
    /// The network of each phase of the task, with the job's `extra` hosts.
    pub(super) fn network_plan(&self, extra: &ExtraHosts) -> NetworkPlan {
        let baseline = NetworkPolicy::with_hosts(self.environment.baseline_network(), &self.environment.allowed_hosts)
            .merged(&extra.environment);
        let verifier_env = self
            .verifier_environment_config(None)
            .map(|env| NetworkPolicy::with_hosts(env.baseline_network(), &env.allowed_hosts));
        let verifier = match &verifier_env {
            // Allowlists are enforced on the agent's container only: a separate verifier keeps
            // its own policy.
            Some(own) => explicit_phase_policy(self.verifier.network_mode, &self.verifier.allowed_hosts)
                .unwrap_or_else(|| own.clone()),
            None => explicit_phase_policy(self.verifier.network_mode, &self.verifier.allowed_hosts)
                .unwrap_or_else(|| baseline.clone())
                .merged(&extra.verifier),
        };
        NetworkPlan {
            agent: explicit_phase_policy(self.agent.network_mode, &self.agent.allowed_hosts)
                .unwrap_or_else(|| baseline.clone())
                .merged(&extra.agent),
            verifier,
            verifier_env,
            setup: baseline,
        }
    }

    /// What the job's `extra` hosts do not change.
    pub(super) fn extra_host_notices(&self, extra: &ExtraHosts) -> Vec<String> {
        if extra.is_empty() {
            return Vec::new();
        }
        let plan = self.network_plan(extra);
        let separate = plan.verifier_env.is_some();
        let mut notices = Vec::new();
        for (key, hosts, phase) in [
            ("environment.extra_allowed_hosts", &extra.environment, Some(&plan.setup)),
            ("agents[].extra_allowed_hosts", &extra.agent, Some(&plan.agent)),
            ("verifier.extra_allowed_hosts", &extra.verifier, (!separate).then_some(&plan.verifier)),
        ] {
            if hosts.is_empty() {
                continue;
            }
            match phase {
                Some(policy) if policy.mode == NetworkMode::Public => {
                    notices.push(format!("{key} {hosts:?}: ignored, the phase's network is public"))
                }
                Some(_) => {}
                None => notices.push(format!("{key} {hosts:?}: not applied to a separate verifier's environment")),
            }
        }
        notices
    }

    /// The network of each phase of `step`, with the job's `extra` hosts.
    pub(super) fn step_network_plan(&self, extra: &ExtraHosts, step: &StepSection) -> NetworkPlan {
        let task = self.network_plan(extra);
        let step_verifier = explicit_phase_policy(step.verifier.network_mode, &step.verifier.allowed_hosts);
        NetworkPlan {
            agent: explicit_phase_policy(step.agent.network_mode, &step.agent.allowed_hosts)
                .map_or(task.agent, |own| own.merged(&extra.agent)),
            verifier: match step_verifier {
                Some(own) if task.verifier_env.is_none() => own.merged(&extra.verifier),
                Some(own) => own,
                None => task.verifier,
            },
            ..task
        }
    }
}
