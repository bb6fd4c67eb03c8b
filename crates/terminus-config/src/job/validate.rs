//! From the raw job file to a `JobSpec`: every key checked and named when wrong, agents
//! built, hosts and instructions gathered.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::overrides::Overrides;
use super::paths::{absolute, chrono_like_now};
use super::spec::*;
use super::tasks::resolve_tasks;
use crate::error::ConfigError;
use crate::policy::{ArtifactSpec, ContainerPolicy, ErrorPolicySpec, MetricKind, RetrySpec, SupervisionSpec};
use crate::raw::{RawAgent, RawConcurrency, RawJob};
use crate::terminus::{KwargError, Terminus2Options};

impl JobSpec {
    pub(super) fn from_raw(
        path: &Path,
        mut raw: RawJob,
        file_only: &Value,
        overrides: &Overrides,
        mut warnings: Vec<String>,
    ) -> Result<JobSpec, ConfigError> {
        let containers = ContainerPolicy::from_raw(path, &raw.environment)?;
        let mut host_env = crate::host_env::HostEnv::from_raw(path, raw.environment.host_env.as_ref())?;
        let backend = backend(path, &raw, &mut warnings)?;
        let orchestrator = raw.orchestrator.clone().unwrap_or_default();
        if let Some(version) = raw.schema_version.filter(|v| *v != 1) {
            return Err(ConfigError::invalid(
                path,
                "schema_version",
                format!("only version 1 exists (Harbor's, and the one terminus reads), got {version}"),
            ));
        }
        let (retry, error_policy) = retry_and_errors(path, &mut raw, file_only, &mut warnings)?;
        let extra_instructions = extra_instructions(path, &raw)?;
        let supervision = SupervisionSpec::from_raw(path, &raw.supervision.clone().unwrap_or_default())?;
        let metrics = raw
            .metrics
            .iter()
            .flatten()
            .enumerate()
            .map(|(idx, m)| MetricKind::from_raw(path, idx, m))
            .collect::<Result<Vec<_>, _>>()?;
        let artifacts = raw
            .artifacts
            .iter()
            .flatten()
            .enumerate()
            .map(|(idx, a)| ArtifactSpec::from_raw(path, idx, a))
            .collect::<Result<Vec<_>, _>>()?;
        let durations = Durations::from_raw(path, &raw)?;
        let (n_concurrent, admission, n_attempts) = counts(path, &raw, overrides)?;
        warn_adaptive_on_swarm(&backend, admission, &mut warnings);
        let multipliers = multipliers(path, &raw)?;
        let raw_agents =
            raw.agents.clone().unwrap_or_else(|| vec![RawAgent { name: Some("oracle".into()), ..RawAgent::default() }]);
        let agents = agents(path, &raw, &raw_agents, n_concurrent as usize, &mut warnings)?;
        let budget = crate::policy::BudgetSpec::from_raw(path, "budget", &raw.budget.clone().unwrap_or_default())?;
        check_dollar_budget(path, &budget, &agents)?;
        let tasks = resolve_tasks(path, &raw, &mut warnings)?;
        if tasks.is_empty() {
            return Err(ConfigError::invalid(
                path,
                "tasks",
                "either datasets or tasks must be provided (no task found)",
            ));
        }
        refuse_resume_on_steps(path, &raw_agents, &agents, &tasks, &mut warnings)?;
        let job_name = overrides.job_name.clone().or(raw.job_name.clone()).unwrap_or_else(chrono_like_now);
        // The job's directory is `jobs_dir/job_name`: a name that is not one plain directory name
        // would put the job (and what a resume cleans up) somewhere else, even in `jobs_dir`.
        if job_name.is_empty() || job_name == "." || job_name == ".." || job_name.contains(['/', '\\', '\0']) {
            return Err(ConfigError::invalid(path, "job_name", format!("{job_name:?} cannot be a directory name")));
        }
        let jobs_dir = overrides.jobs_dir.clone().or(raw.jobs_dir.clone()).unwrap_or_else(|| PathBuf::from("jobs"));
        let quiet = overrides.quiet.or(raw.quiet).or(orchestrator.quiet).unwrap_or(false);
        let extra_environment_hosts =
            extra_hosts(path, "environment.extra_allowed_hosts", &raw.environment.extra_allowed_hosts)?;
        let extra_verifier_hosts =
            extra_hosts(path, "verifier.extra_allowed_hosts", &raw.verifier.extra_allowed_hosts)?;
        host_env.protect(agents.iter().filter_map(AgentSpec::key_variable).map(str::to_string));
        let environment = raw.environment.clone();
        let verifier = raw.verifier.clone();
        let debug = raw.debug.unwrap_or(false);
        let skip_credential_checks = raw.skip_credential_checks.unwrap_or(false);
        let preflight = PreflightMode::parse(path, raw.preflight.as_deref())?;
        let score_convention = score_convention(path, raw.score_convention.as_deref())?;
        let resolved =
            Resolved { job_name: &job_name, jobs_dir: &jobs_dir, n_concurrent, admission, n_attempts, raw_agents };
        let raw_value = recorded_config(raw, resolved, &agents);
        Ok(JobSpec {
            job_name,
            jobs_dir,
            n_attempts: n_attempts as u32,
            n_concurrent_trials: n_concurrent as usize,
            admission,
            multipliers,
            force_build: environment.force_build,
            delete: environment.delete,
            quiet,
            debug,
            verifier_disable: verifier.disable,
            verifier_override_timeout_sec: verifier.override_timeout_sec,
            verifier_max_timeout_sec: verifier.max_timeout_sec,
            agent_processes: verifier.agent_processes,
            override_cpus: environment.override_cpus,
            override_memory_mb: environment.override_memory_mb.map(|m| m.max(4) as u64),
            containers,
            backend,
            agents,
            tasks,
            retry,
            error_policy,
            extra_instructions,
            supervision,
            budget,
            metrics: if metrics.is_empty() { vec![MetricKind::Mean] } else { metrics },
            score_convention,
            artifacts,
            environment_env: environment.env,
            host_env,
            verifier_env: verifier.env,
            extra_environment_hosts,
            extra_verifier_hosts,
            grace_period: durations.grace_period,
            stall_warning: durations.stall_warning,
            terminal_timeout: durations.terminal_timeout,
            max_trial_disk_bytes: durations.max_trial_disk_bytes,
            skip_credential_checks,
            preflight,
            raw: raw_value,
            warnings,
        })
    }
}

/// `score_convention`: `harbor-0.25` when not given.
fn score_convention(path: &Path, value: Option<&str>) -> Result<ScoreConvention, ConfigError> {
    match value {
        None => Ok(ScoreConvention::default()),
        Some(name) => ScoreConvention::parse(name).ok_or_else(|| {
            ConfigError::invalid(
                path,
                "score_convention",
                format!("must be `harbor-0.25` or `harbor-0.26`, got `{name}`"),
            )
        }),
    }
}

/// The backend the trials run on; GPUs are refused (no Docker environment here has them), and a
/// swarm reached without TLS is warned about.
fn backend(path: &Path, raw: &RawJob, warnings: &mut Vec<String>) -> Result<crate::cluster::BackendSpec, ConfigError> {
    if raw.environment.override_gpus.is_some_and(|g| g > 0) {
        return Err(ConfigError::invalid(path, "environment.override_gpus", "the Docker environment has no GPUs"));
    }
    let backend = crate::cluster::BackendSpec::from_raw(path, &raw.environment)?;
    if let crate::cluster::BackendSpec::Swarm(swarm) = &backend
        && swarm.insecure_nodes()
    {
        warnings.push(
            "environment.swarm.insecure_nodes: the nodes' daemons are reached on plain TCP, without TLS: whoever \
             reaches their port, a trial container included, controls the node"
                .to_string(),
        );
    }
    Ok(backend)
}

/// Adaptive admission measures the host the orchestrator runs on: on a swarm, a warning.
fn warn_adaptive_on_swarm(backend: &crate::cluster::BackendSpec, admission: AdmissionMode, warnings: &mut Vec<String>) {
    if admission == AdmissionMode::Adaptive && matches!(backend, crate::cluster::BackendSpec::Swarm(_)) {
        warnings.push(
            "admission: adaptive on a swarm judges by the trials' terminal round trips and engine latencies, \
             and by this host's CPU and memory: the nodes' own CPU and memory are not measured"
                .to_string(),
        );
    }
}

/// The retry policy and the error policy, with the legacy `orchestrator.retry` block applied
/// where the file has no top-level `retry` (Harbor's rule), and the error policy's overrides
/// applied to the retries.
fn retry_and_errors(
    path: &Path,
    raw: &mut RawJob,
    file_only: &Value,
    warnings: &mut Vec<String>,
) -> Result<(RetrySpec, ErrorPolicySpec), ConfigError> {
    let legacy = raw.orchestrator.as_ref().and_then(|o| o.retry.clone());
    if let Some(legacy) = legacy
        && file_only.get("retry").is_none()
    {
        let parsed: crate::raw::RawRetry = serde_json::from_value(legacy)
            .map_err(|e| ConfigError::invalid(path, "orchestrator.retry", e.to_string()))?;
        raw.retry = Some(parsed);
    }
    let mut retry = RetrySpec::from_raw(path, &raw.retry.clone().unwrap_or_default(), warnings)?;
    let error_policy =
        ErrorPolicySpec::from_raw(raw.override_error_policy.as_ref().unwrap_or(&BTreeMap::new()), warnings);
    // Harbor lets explicit exclusions win over the overrides: those of the file (top level or
    // the legacy block), not the built-in defaults layered under it.
    let explicit_exclusions = file_only.pointer("/retry/exclude_exceptions").is_some()
        || (file_only.get("retry").is_none() && file_only.pointer("/orchestrator/retry/exclude_exceptions").is_some());
    retry.apply_overrides(&error_policy, explicit_exclusions);
    Ok((retry, error_policy))
}

/// The job's time and disk settings.
struct Durations {
    grace_period: Duration,
    stall_warning: Duration,
    terminal_timeout: Duration,
    max_trial_disk_bytes: u64,
}

impl Durations {
    fn from_raw(path: &Path, raw: &RawJob) -> Result<Durations, ConfigError> {
        let seconds = |key: &str, value: Option<f64>, default: f64| -> Result<Duration, ConfigError> {
            let v = value.unwrap_or(default);
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ConfigError::invalid(path, key, format!("must be a non-negative number, got {v}")))
            }
        };
        let max_trial_disk_mb = raw.max_trial_disk_mb.unwrap_or(1024.0);
        if !(max_trial_disk_mb.is_finite() && max_trial_disk_mb > 0.0) {
            return Err(ConfigError::invalid(
                path,
                "max_trial_disk_mb",
                format!("must be a positive number, got {max_trial_disk_mb}"),
            ));
        }
        Ok(Durations {
            grace_period: seconds("grace_period_sec", raw.grace_period_sec, 30.0)?,
            stall_warning: seconds("stall_warning_sec", raw.stall_warning_sec, 300.0)?,
            terminal_timeout: seconds("terminal_timeout_sec", raw.terminal_timeout_sec, 60.0)?,
            max_trial_disk_bytes: (max_trial_disk_mb * 1024.0 * 1024.0) as u64,
        })
    }
}

/// How many trials run at once (and whether that is a bound for adaptive admission) and how
/// many attempts each task gets, the command line's over the file's.
fn counts(path: &Path, raw: &RawJob, overrides: &Overrides) -> Result<(i64, AdmissionMode, i64), ConfigError> {
    let orchestrator = raw.orchestrator.clone().unwrap_or_default();
    let n_concurrent_key = if raw.n_concurrent_trials.is_some() || orchestrator.n_concurrent_trials.is_none() {
        "n_concurrent_trials"
    } else {
        "orchestrator.n_concurrent_trials"
    };
    let mut admission = match raw.admission.as_deref() {
        None | Some("fixed") => AdmissionMode::Fixed,
        Some("adaptive") => AdmissionMode::Adaptive,
        Some(other) => {
            return Err(ConfigError::invalid(
                path,
                "admission",
                format!("must be `fixed` or `adaptive`, got `{other}`"),
            ));
        }
    };
    let n_concurrent =
        match (overrides.n_concurrent_trials, raw.n_concurrent_trials.clone().or(orchestrator.n_concurrent_trials)) {
            (Some(n), _) => n as i64,
            (None, None) => 4,
            (None, Some(RawConcurrency::Count(n))) => n,
            (None, Some(RawConcurrency::Word(word))) if word == "auto" => {
                admission = AdmissionMode::Adaptive;
                AUTO_CONCURRENCY as i64
            }
            (None, Some(RawConcurrency::Word(word))) => {
                return Err(ConfigError::invalid(
                    path,
                    n_concurrent_key,
                    format!("must be a number or `auto`, got `{word}`"),
                ));
            }
        };
    if n_concurrent < 1 {
        return Err(ConfigError::invalid(path, n_concurrent_key, format!("must be at least 1, got {n_concurrent}")));
    }
    let n_attempts = match overrides.n_attempts {
        Some(n) => n as i64,
        None => raw.n_attempts.unwrap_or(1),
    };
    if n_attempts < 1 {
        return Err(ConfigError::invalid(path, "n_attempts", format!("must be at least 1, got {n_attempts}")));
    }
    Ok((n_concurrent, admission, n_attempts))
}

/// The timeout multipliers: each its own key, else `timeout_multiplier`, else 1.
fn multipliers(path: &Path, raw: &RawJob) -> Result<Multipliers, ConfigError> {
    let base = raw.timeout_multiplier.unwrap_or(1.0);
    let check_multiplier = |key: &str, value: Option<f64>| -> Result<f64, ConfigError> {
        let value = value.unwrap_or(base);
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(path, key, format!("must be a positive number, got {value}")))
        }
    };
    check_multiplier("timeout_multiplier", raw.timeout_multiplier)?;
    Ok(Multipliers {
        agent: check_multiplier("agent_timeout_multiplier", raw.agent_timeout_multiplier)?,
        verifier: check_multiplier("verifier_timeout_multiplier", raw.verifier_timeout_multiplier)?,
        agent_setup: check_multiplier("agent_setup_timeout_multiplier", raw.agent_setup_timeout_multiplier)?,
        environment_build: check_multiplier(
            "environment_build_timeout_multiplier",
            raw.environment_build_timeout_multiplier,
        )?,
    })
}

/// The job's agents, each with the job's `llm` block under its own.
fn agents(
    path: &Path,
    raw: &RawJob,
    raw_agents: &[RawAgent],
    n_concurrent: usize,
    warnings: &mut Vec<String>,
) -> Result<Vec<AgentSpec>, ConfigError> {
    if raw_agents.is_empty() {
        return Err(ConfigError::invalid(path, "agents", "needs at least one agent"));
    }
    let job_llm = raw.llm.clone().unwrap_or_default();
    LlmSettings::from_raw(path, "llm", &job_llm, n_concurrent)?;
    let mut agents = Vec::new();
    for (idx, agent) in raw_agents.iter().enumerate() {
        let merged = job_llm.overlaid(&agent.llm.clone().unwrap_or_default());
        let llm = LlmSettings::from_raw(path, &format!("agents[{idx}].llm"), &merged, n_concurrent)?;
        agents.push(agent_spec(path, idx, agent, llm, warnings)?);
    }
    Ok(agents)
}

/// Spend in dollars is counted at the model's prices: a model without them could never reach a
/// dollar budget.
fn check_dollar_budget(
    path: &Path,
    budget: &crate::policy::BudgetSpec,
    agents: &[AgentSpec],
) -> Result<(), ConfigError> {
    for (idx, agent) in agents.iter().enumerate() {
        let dollars = budget.max_cost_usd.is_some() || agent.budget.max_cost_usd.is_some();
        if let (true, AgentKind::Terminus2(opts), Some(model)) = (dollars, &agent.kind, agent.model_name.as_deref()) {
            let limits = opts.model_limits(model);
            if model != crate::terminus::ORACLE_MODEL
                && (limits.input_cost_per_token.value.is_none() || limits.output_cost_per_token.value.is_none())
            {
                return Err(ConfigError::invalid(
                    path,
                    format!("agents[{idx}].model_name"),
                    format!(
                        "a dollar budget needs the model's prices, and `{model}` has none in the price table: give them in kwargs.model_info (input_cost_per_token, output_cost_per_token), or budget with max_tokens"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The values resolved from the file, the command line and the defaults, for the record.
struct Resolved<'a> {
    job_name: &'a str,
    jobs_dir: &'a Path,
    n_concurrent: i64,
    admission: AdmissionMode,
    n_attempts: i64,
    raw_agents: Vec<RawAgent>,
}

/// What `config.json` records: the file's values with the resolved ones filled in, paths made
/// absolute, secrets redacted.
fn recorded_config(mut raw: RawJob, resolved: Resolved<'_>, agents: &[AgentSpec]) -> Value {
    raw.job_name = Some(resolved.job_name.to_string());
    raw.jobs_dir = Some(resolved.jobs_dir.to_path_buf());
    raw.n_concurrent_trials = Some(RawConcurrency::Count(resolved.n_concurrent));
    // Recorded only when adaptive: Harbor's tools read the number as the concurrency.
    raw.admission = (resolved.admission == AdmissionMode::Adaptive).then(|| "adaptive".to_string());
    raw.n_attempts = Some(resolved.n_attempts);
    raw.agents = Some(resolved.raw_agents);
    // Harbor's `JobConfig` requires lists here (its defaults are empty lists): a null makes its
    // tools (`harbor view`) refuse the whole file. An empty list means the same to us.
    raw.metrics = Some(raw.metrics.take().unwrap_or_default());
    raw.artifacts = Some(raw.artifacts.take().unwrap_or_default());
    raw.schema_version = Some(1);
    raw.override_error_policy = Some(raw.override_error_policy.take().unwrap_or_default());
    raw.extra_instruction_paths =
        Some(raw.extra_instruction_paths.take().unwrap_or_default().iter().map(|p| absolute(p)).collect());
    raw.extra_instructions = Some(raw.extra_instructions.take().unwrap_or_default());
    // Absolute paths, so a resume from another directory finds the same tasks.
    for dataset in &mut raw.datasets {
        dataset.path = dataset.path.as_deref().map(absolute);
        dataset.registry_path = dataset.registry_path.as_deref().map(absolute);
        if let Some(registry) = &mut dataset.registry {
            registry.path = registry.path.as_deref().map(absolute);
        }
    }
    // A git task's path is inside its repository.
    for task in raw.tasks.iter_mut().filter(|t| t.git_url.is_none()) {
        task.path = task.path.as_deref().map(absolute);
    }
    let mut raw_value = serde_json::to_value(&raw).unwrap_or(Value::Null);
    terminus_core::secrets::redact_json(&mut raw_value);
    // The variable an agent's key is read from is a secret whatever its name (Harbor treats
    // `model_api_key_name`'s variable so too).
    for (idx, agent) in agents.iter().enumerate() {
        if let Some(name) = agent.key_variable()
            && let Some(Value::String(value)) = raw_value.pointer_mut(&format!("/agents/{idx}/env/{name}"))
        {
            *value = terminus_core::secrets::redact_value(name, value);
        }
    }
    raw_value
}

pub(super) fn agent_spec(
    path: &Path,
    idx: usize,
    agent: &RawAgent,
    llm: LlmSettings,
    warnings: &mut Vec<String>,
) -> Result<AgentSpec, ConfigError> {
    let key = |k: &str| format!("agents[{idx}].{k}");
    if agent.import_path.is_some() {
        return Err(ConfigError::invalid(
            path,
            key("import_path"),
            "custom agent classes are not supported; use name: terminus-2, oracle or nop",
        ));
    }
    let name = agent.name.clone().unwrap_or_else(|| "oracle".to_string());
    let kind = match name.as_str() {
        "terminus-2" | "terminus2" | "terminus" => {
            let mut local = Vec::new();
            let mut opts = Terminus2Options::from_kwargs(&agent.kwargs, &mut local).map_err(|e| match e {
                KwargError::Invalid { key: k, message } => {
                    ConfigError::invalid(path, key(&format!("kwargs.{k}")), message)
                }
                KwargError::PromptTemplate { file, problem } => ConfigError::PromptTemplate {
                    path: path.to_path_buf(),
                    key: key("kwargs.prompt_template"),
                    template: file,
                    problem: Box::new(problem),
                },
                KwargError::Texts(problem) => ConfigError::invalid(path, key("kwargs.texts"), problem.to_string()),
            })?;
            warnings.extend(local.into_iter().map(|w| format!("agents[{idx}].{w}")));
            connection_keys(path, idx, agent, &mut opts)?;
            if agent.model_name.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::invalid(path, key("model_name"), "model_name is required for Terminus 2"));
            }
            AgentKind::Terminus2(Box::new(opts))
        }
        "oracle" | "nop" => {
            // These agents call no model: a connection key is a slip worth pointing out.
            for (k, set) in [
                ("base_url", agent.base_url.is_some()),
                ("model_api_key_name", agent.model_api_key_name.is_some()),
                ("model_api_format", agent.model_api_format.is_some()),
            ] {
                if set {
                    warnings.push(format!("{}: the {name} agent calls no model, so this has no effect", key(k)));
                }
            }
            if name == "oracle" { AgentKind::Oracle } else { AgentKind::Nop }
        }
        other => {
            return Err(ConfigError::invalid(
                path,
                key("name"),
                format!("unknown agent {other:?}; this build runs terminus-2, oracle and nop"),
            ));
        }
    };
    let name = if matches!(kind, AgentKind::Terminus2(_)) { "terminus-2".to_string() } else { name };
    for (k, v) in [("override_timeout_sec", agent.override_timeout_sec), ("max_timeout_sec", agent.max_timeout_sec)] {
        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(ConfigError::invalid(path, key(k), format!("must be a positive number, got {v}")));
        }
    }
    Ok(AgentSpec {
        name,
        kind,
        model_name: agent.model_name.clone(),
        override_timeout_sec: agent.override_timeout_sec,
        override_setup_timeout_sec: agent.override_setup_timeout_sec,
        max_timeout_sec: agent.max_timeout_sec,
        env: agent.env.clone(),
        kwargs: agent.kwargs.clone(),
        llm,
        extra_allowed_hosts: extra_hosts(path, &key("extra_allowed_hosts"), &agent.extra_allowed_hosts)?,
        budget: crate::policy::BudgetSpec::from_raw(path, &key("budget"), &agent.budget.clone().unwrap_or_default())?,
        mcp_servers: agent.mcp_servers.clone(),
        skills: crate::skills::resolve(path, &key("skills"), &agent.skills)?,
    })
}

/// Terminus 2 cannot continue a previous step's chat: `resume_trajectory: true` with a
/// multi-step task among the job's is refused when the job loads, naming both, as Harbor 0.25
/// refuses it when such a trial starts. With single-step tasks only the key has no effect (a
/// warning says so).
fn refuse_resume_on_steps(
    path: &Path,
    raw_agents: &[RawAgent],
    agents: &[AgentSpec],
    tasks: &[super::spec::TaskRef],
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    for (idx, (raw, agent)) in raw_agents.iter().zip(agents).enumerate() {
        if raw.resume_trajectory != Some(true) || !matches!(agent.kind, AgentKind::Terminus2(_)) {
            continue;
        }
        let multi_step = tasks.iter().find(|task| crate::task::has_steps(&task.path));
        if let Some(task) = multi_step {
            return Err(ConfigError::invalid(
                path,
                format!("agents[{idx}].resume_trajectory"),
                format!(
                    "terminus-2 cannot resume a trajectory, and task {} has steps; remove the key (each step begins a fresh chat)",
                    task.name
                ),
            ));
        }
        warnings.push(format!(
            "agents[{idx}].resume_trajectory: Terminus 2 cannot resume a trajectory; no effect on single-step tasks"
        ));
    }
    Ok(())
}

/// Run-specific allowlist hosts, normalized as a task's `allowed_hosts` are (Harbor validates
/// them with the same rule); an entry that is no host, wildcard, address or range is refused.
pub(super) fn extra_hosts(path: &Path, key: &str, hosts: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::new();
    for host in hosts {
        let normal = crate::task::normalize_allowed_host(host).ok_or_else(|| {
            ConfigError::invalid(
                path,
                key,
                format!("{host:?} must be a host name, `*.suffix`, an IP address or a CIDR range"),
            )
        })?;
        if !out.contains(&normal) {
            out.push(normal);
        }
    }
    Ok(out)
}

/// The contents of `extra_instruction_paths` (read now, so a missing file stops the job before
/// any trial runs, naming its key), then `extra_instructions`.
pub(super) fn extra_instructions(path: &Path, raw: &RawJob) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (idx, file) in raw.extra_instruction_paths.iter().flatten().enumerate() {
        let text = std::fs::read_to_string(file).map_err(|e| {
            ConfigError::invalid(path, format!("extra_instruction_paths[{idx}]"), format!("{}: {e}", file.display()))
        })?;
        out.push(text);
    }
    out.extend(raw.extra_instructions.iter().flatten().cloned());
    Ok(out)
}

/// Harbor 0.26's connection keys of an agent, applied to Terminus 2's options: `base_url` is its
/// `api_base`, `model_api_key_name` its `api_key_env`, `model_api_format` the protocol. A key
/// and the kwarg it stands for may both be given only with the same value.
pub(super) fn connection_keys(
    path: &Path,
    idx: usize,
    agent: &RawAgent,
    opts: &mut Terminus2Options,
) -> Result<(), ConfigError> {
    let key = |k: &str| format!("agents[{idx}].{k}");
    let conflict = |k: &str, kwarg: &str| {
        ConfigError::invalid(path, key(k), format!("differs from agents[{idx}].kwargs.{kwarg}; give one of them"))
    };
    if let Some(base_url) = &agent.base_url {
        if opts.api_base.as_ref().is_some_and(|b| b != base_url) {
            return Err(conflict("base_url", "api_base"));
        }
        opts.api_base = Some(base_url.clone());
    }
    if let Some(name) = &agent.model_api_key_name {
        if !crate::terminus::is_variable_name(name) {
            return Err(ConfigError::invalid(path, key("model_api_key_name"), "must be an environment variable name"));
        }
        if opts.api_key_env.as_ref().is_some_and(|n| n != name) {
            return Err(conflict("model_api_key_name", "api_key_env"));
        }
        opts.api_key_env = Some(name.clone());
    }
    if let Some(format) = &agent.model_api_format {
        let format = crate::terminus::ModelApiFormat::from_harbor_name(format)
            .map_err(|message| ConfigError::invalid(path, key("model_api_format"), message))?;
        opts.api_format = Some(format);
    }
    Ok(())
}
