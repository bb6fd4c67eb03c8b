//! One trial as the job plans it: [`TrialBasis`], what the job says of it before its task loads
//! (its agent, its `config.json`, its disk limit), and [`ResolvedTrial`], what the job, its agent
//! and the loaded task say together, computed once right after the task loads. The trial's
//! machine, its drivers and effects, and the container code read these; none of them asks the
//! job again.

use std::collections::BTreeMap;
use std::time::Duration;

use terminus_core::models::ModelLimits;
use terminus_core::result::{
    AgentConfigRecord, ConfinementRecord, EnvironmentConfigRecord, TrialConfig, VerifierConfigRecord,
};

use crate::host_env::HostEnv;
use crate::job::{AgentKind, AgentSpec, JobSpec, TrialPlan};
use crate::policy::{AgentProcesses, ArtifactSpec, ContainerPolicy, ErrorPolicySpec};
use crate::task::{NetworkPlan, StepSection, Task, VerifierMode, placed_artifacts};
use crate::terminus::ORACLE_MODEL;

/// What the job says of one trial before its task loads.
#[derive(Clone, Debug)]
pub struct TrialBasis {
    pub agent: AgentSpec,
    /// The trial's `config.json` (Harbor's TrialConfig shape), secrets redacted.
    pub config: TrialConfig,
    /// The most terminus writes into the trial's directory for its agent, in bytes.
    pub disk_limit: u64,
}

impl TrialBasis {
    /// The trial `plan` of `job`, named `trial_name`, its directory in `trials_dir`.
    pub(crate) fn new(
        job: &JobSpec,
        job_id: &str,
        plan: &TrialPlan,
        trial_name: &str,
        trials_dir: String,
    ) -> TrialBasis {
        let agent = job.agents[plan.agent_idx].clone();
        let config = TrialConfig {
            task: plan.task.record(),
            trial_name: trial_name.to_string(),
            trials_dir,
            agent_timeout_multiplier: job.multipliers.agent,
            verifier_timeout_multiplier: job.multipliers.verifier,
            agent_setup_timeout_multiplier: job.multipliers.agent_setup,
            environment_build_timeout_multiplier: job.multipliers.environment_build,
            agent: AgentConfigRecord {
                name: agent.name.clone(),
                model_name: agent.model_name.clone(),
                override_timeout_sec: agent.override_timeout_sec,
                max_timeout_sec: agent.max_timeout_sec,
                kwargs: agent.kwargs.clone(),
                env: agent.env.clone(),
                model_limits: model_limits(&agent),
            },
            environment: EnvironmentConfigRecord {
                kind: "docker".to_string(),
                force_build: job.force_build,
                delete: job.delete,
                confinement: Some(confinement(&job.containers)),
            },
            verifier: VerifierConfigRecord {
                disable: job.verifier_disable,
                override_timeout_sec: job.verifier_override_timeout_sec,
            },
            override_error_policy: job.error_policy.overrides.clone(),
            attempt: Some(plan.attempt),
            agent_index: Some(plan.agent_idx),
            job_id: job_id.to_string(),
        }
        .redacted()
        .with_secret_env(agent.key_variable());
        TrialBasis { agent, config, disk_limit: job.max_trial_disk_bytes }
    }
}

/// The limits a Terminus 2 agent's model runs with and where each came from (None for agents,
/// and the offline oracle model, that need none).
fn model_limits(agent: &AgentSpec) -> Option<ModelLimits> {
    let AgentKind::Terminus2(opts) = &agent.kind else { return None };
    let model = agent.model_name.as_deref().unwrap_or_default();
    (model != ORACLE_MODEL).then(|| opts.model_limits(model))
}

/// How the job confines its trials' containers, as the trial's config records it. The network
/// and the storage limit are settled per task when the container starts; this says what the job
/// asked for.
fn confinement(policy: &ContainerPolicy) -> ConfinementRecord {
    let network = if policy.isolate_network { "job" } else { "default" };
    ConfinementRecord { confinement: policy.confinement.clone(), network: network.to_string() }
}

/// Everything one trial attempt runs by.
#[derive(Clone, Debug)]
pub struct ResolvedTrial {
    pub agent: AgentSpec,
    /// The task, its network plans merged with the job's and the agent's extra hosts.
    pub task: Task,
    pub limits: TrialLimits,
    /// The instruction the agent gets: the task's, then the job's extra instructions.
    pub instruction: String,
    /// The same for each step of a multi-step task.
    pub step_instructions: Vec<String>,
    /// The job's artifacts, then the task's (placed).
    pub artifacts: Vec<ArtifactSpec>,
    /// Each step's own artifacts, placed.
    pub step_artifacts: Vec<Vec<ArtifactSpec>>,
    /// Artifacts of the task or its steps that cannot be collected, each said.
    pub artifact_notes: Vec<String>,
    pub container: ContainerInputs,
    pub verifier: VerifierSettings,
    /// The host variables the job passes to the task.
    pub host_env: HostEnv,
    /// Which errors are still graded.
    pub error_policy: ErrorPolicySpec,
}

/// Every time limit of the trial.
#[derive(Clone, Debug, PartialEq)]
pub struct TrialLimits {
    /// Building the image and starting the container (each environment).
    pub build: Duration,
    /// Setting the agent up (its terminal).
    pub agent_setup: Duration,
    /// The agent of a single-step task (None: no limit).
    pub agent: Option<Duration>,
    /// The verifier of a single-step task.
    pub verifier: Duration,
    /// Per step of a multi-step task.
    pub steps: Vec<StepLimits>,
    /// The whole trial, after which the Supervisor's watchdog ends it: every phase's limit, a
    /// tenth on top for the steps between them, and `supervision.watchdog_margin_sec` (None: an
    /// agent without a limit may run for ever).
    pub watchdog: Option<Duration>,
    /// Each terminal operation.
    pub terminal: Duration,
}

impl TrialLimits {
    /// Every phase's limit added up, the build counted `builds` times; None when the agent has
    /// no limit (such a trial may run for ever, and only its phases' own deadlines apply).
    fn phases(&self, builds: u32) -> Option<Duration> {
        let mut total = self.build * builds + self.agent_setup;
        if self.steps.is_empty() {
            total += self.agent? + self.verifier;
        }
        // A multi-step task runs each step's agent and verifier in turn.
        for step in &self.steps {
            total += step.agent? + step.verifier;
        }
        Some(total)
    }
}

/// The limits of one step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLimits {
    pub agent: Option<Duration>,
    pub verifier: Duration,
}

/// What the job adds to the task's container settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerInputs {
    /// `override_cpus`, over the task's.
    pub cpus: Option<f64>,
    /// `override_memory_mb`, over the task's.
    pub memory_mb: Option<u64>,
    /// The job's `environment.env`, after the task's.
    pub env: BTreeMap<String, String>,
    /// Rebuild images even when they exist.
    pub force_build: bool,
    /// How the container is confined, and how much of it is copied out.
    pub policy: ContainerPolicy,
}

/// How the trial is graded.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifierSettings {
    /// `verifier.disable`: no tests run.
    pub disabled: bool,
    /// The job's `verifier.env`, after the task's.
    pub env: BTreeMap<String, String>,
    /// What becomes of what the agent left running.
    pub agent_processes: AgentProcesses,
}

impl ResolvedTrial {
    /// Resolves the trial of `agent_idx` on `task` under `job`.
    pub(crate) fn new(job: &JobSpec, agent_idx: usize, mut task: Task) -> ResolvedTrial {
        let agent = job.agents[agent_idx].clone();
        task.extra_hosts = job.extra_hosts(&agent);
        let steps = task
            .steps()
            .iter()
            .map(|step| StepLimits {
                agent: job.step_agent_timeout(&agent, &task, step),
                verifier: job.step_verifier_timeout(step),
            })
            .collect();
        let mut limits = TrialLimits {
            build: job.build_timeout(&task),
            agent_setup: job.agent_setup_timeout(&agent),
            agent: job.agent_timeout(&agent, &task),
            verifier: job.verifier_timeout(&task),
            steps,
            watchdog: None,
            terminal: job.terminal_timeout,
        };
        // A separate verifier's environment is built and started within the same limit again.
        let builds = if task.config.verifier_mode(None) == VerifierMode::Separate { 2 } else { 1 };
        limits.watchdog = limits.phases(builds).map(|phases| phases + phases / 10 + job.supervision.watchdog_margin);
        let (own, mut artifact_notes) = task.artifact_specs();
        let mut step_artifacts = Vec::new();
        for (i, step) in task.steps().iter().enumerate() {
            let (specs, notes) = placed_artifacts(&format!("steps[{i}].artifacts"), &step.artifacts);
            step_artifacts.push(specs);
            artifact_notes.extend(notes);
        }
        ResolvedTrial {
            instruction: job.instruction(&task.instruction),
            step_instructions: task.step_instructions.iter().map(|text| job.instruction(text)).collect(),
            artifacts: job.artifacts.iter().cloned().chain(own).collect(),
            step_artifacts,
            artifact_notes,
            container: ContainerInputs {
                cpus: job.override_cpus,
                memory_mb: job.override_memory_mb,
                env: job.environment_env.clone(),
                force_build: job.force_build,
                policy: job.containers.clone(),
            },
            verifier: VerifierSettings {
                disabled: job.verifier_disable,
                env: job.verifier_env.clone(),
                agent_processes: job.agent_processes,
            },
            host_env: job.host_env.clone(),
            error_policy: job.error_policy.clone(),
            limits,
            agent,
            task,
        }
    }

    /// The network of each phase of the task, or of its `step`.
    pub fn network(&self, step: Option<&StepSection>) -> NetworkPlan {
        self.task.phase_plan(step)
    }

    /// The limits of step `index`.
    pub fn step_limits(&self, index: usize) -> StepLimits {
        self.limits.steps[index]
    }
}

#[cfg(test)]
mod tests;
