//! The time limits a job gives a trial: each phase's limit from the task's value, the job's
//! overrides, caps and multipliers (the watchdog's budget over all phases is the trial plan's).

use std::time::Duration;

use super::spec::*;
use crate::task::{StepSection, Task};

impl JobSpec {
    /// The agent's time limit for a task: `min(override or task value, max) × multiplier`;
    /// None when neither the agent nor the task sets one.
    pub fn agent_timeout(&self, agent: &AgentSpec, task: &Task) -> Option<Duration> {
        self.agent_limit(agent, task.config.agent.timeout_sec)
    }

    /// The agent's time limit for one step of a multi-step task: the step's own
    /// `timeout_sec`, else the task's, then the same overrides, cap and multiplier.
    pub fn step_agent_timeout(&self, agent: &AgentSpec, task: &Task, step: &StepSection) -> Option<Duration> {
        self.agent_limit(agent, step.agent.timeout_sec.or(task.config.agent.timeout_sec))
    }

    fn agent_limit(&self, agent: &AgentSpec, task_sec: Option<f64>) -> Option<Duration> {
        let base = agent.override_timeout_sec.or(task_sec)?;
        let capped = agent.max_timeout_sec.map_or(base, |max| base.min(max));
        Some(Duration::from_secs_f64((capped * self.multipliers.agent).max(0.0)))
    }

    /// The verifier's time limit for a task.
    pub fn verifier_timeout(&self, task: &Task) -> Duration {
        self.verifier_limit(task.config.verifier.timeout_sec)
    }

    /// The verifier's time limit for one step: the step's `[steps.verifier].timeout_sec`, which
    /// has a default of its own (600 s) as in Harbor, so the task's is never inherited.
    pub fn step_verifier_timeout(&self, step: &StepSection) -> Duration {
        self.verifier_limit(step.verifier.timeout_sec)
    }

    fn verifier_limit(&self, task_sec: f64) -> Duration {
        let base = self.verifier_override_timeout_sec.unwrap_or(task_sec);
        let capped = self.verifier_max_timeout_sec.map_or(base, |max| base.min(max));
        Duration::from_secs_f64((capped * self.multipliers.verifier).max(0.0))
    }

    /// The time limit for setting the agent up (its terminal): `override_setup_timeout_sec`, else
    /// 360 s, × the multiplier.
    pub fn agent_setup_timeout(&self, agent: &AgentSpec) -> Duration {
        Duration::from_secs_f64(
            (agent.override_setup_timeout_sec.unwrap_or(360.0) * self.multipliers.agent_setup).max(0.0),
        )
    }

    /// The time limit for building the image and starting the container.
    pub fn build_timeout(&self, task: &Task) -> Duration {
        Duration::from_secs_f64(
            (task.config.environment.build_timeout_sec * self.multipliers.environment_build).max(0.0),
        )
    }
}
