//! Where and how a task's tests run: in the agent's container or a separate verifier
//! environment, and with which variables.

use std::path::{Path, PathBuf};

use super::schema::{EnvironmentSection, StepSection, TaskToml, VerifierMode, VerifierSection};

/// Where a separate verifier runs: Harbor 0.26's `resolve_verifier_environment_definition`.
#[derive(Clone, Debug)]
pub struct VerifierEnvironment {
    /// Its settings: the step's `[verifier.environment]`, else the task's, else a copy of the
    /// task's `[environment]`. `docker_image` is the image to use as it is; None: built from
    /// `dir`.
    pub config: EnvironmentSection,
    /// Where its image is built from and its `docker-compose.yaml` read: the step's or the
    /// task's tests directory when that brings a `Dockerfile` or `docker-compose.yaml` (or the
    /// `[verifier.environment]` names a `docker_image`), else `environment/`.
    pub dir: PathBuf,
    /// Its image brings the tests at `/tests` (built from a tests directory, or a
    /// `[verifier.environment].docker_image`): the task's `tests/` is not uploaded.
    pub bundled_tests: bool,
}

impl TaskToml {
    /// Where the tests of the task (or of `step`) run. Harbor's precedence: the step's explicit
    /// `environment_mode`, a step's `[verifier.environment]` (separate), the same two of the
    /// task, else shared.
    pub fn verifier_mode(&self, step: Option<&StepSection>) -> VerifierMode {
        let own = |verifier: &VerifierSection| {
            verifier.environment_mode.or(verifier.environment.is_some().then_some(VerifierMode::Separate))
        };
        step.and_then(|s| own(&s.verifier)).or_else(|| own(&self.verifier)).unwrap_or(VerifierMode::Shared)
    }

    /// The settings of a separate verifier's environment (None when the verifier is shared):
    /// the step's `[verifier.environment]`, else the task's, else the task's `[environment]`.
    pub fn verifier_environment_config<'a>(&'a self, step: Option<&'a StepSection>) -> Option<&'a EnvironmentSection> {
        if self.verifier_mode(step) != VerifierMode::Separate {
            return None;
        }
        let own = step.and_then(|s| s.verifier.environment.as_deref()).or(self.verifier.environment.as_deref());
        Some(own.unwrap_or(&self.environment))
    }

    /// Where a separate verifier of the task in `task_dir` (or of its `step`) runs; None when
    /// the verifier shares the agent's container. The image: a `[verifier.environment]`'s
    /// `docker_image` (the step's, then the task's), else a `Dockerfile` or
    /// `docker-compose.yaml` in the step's tests directory, then in `tests/` (each bringing the
    /// tests), else the agent's environment again (`environment/`, or the task's prebuilt
    /// `docker_image`), in a container of its own, the tests uploaded.
    pub fn verifier_environment(&self, task_dir: &Path, step: Option<&StepSection>) -> Option<VerifierEnvironment> {
        let config = self.verifier_environment_config(step)?.clone();
        let mut candidates = Vec::new();
        if let Some(step) = step {
            candidates
                .push((step.verifier.environment.as_deref(), task_dir.join("steps").join(&step.name).join("tests")));
        }
        candidates.push((self.verifier.environment.as_deref(), task_dir.join("tests")));
        for (own, tests) in candidates {
            if let Some(image) = own.and_then(|env| env.docker_image.clone()) {
                let config = EnvironmentSection { docker_image: Some(image), ..config };
                return Some(VerifierEnvironment { config, dir: tests, bundled_tests: true });
            }
            if tests.join("Dockerfile").is_file() || tests.join("docker-compose.yaml").is_file() {
                let config = EnvironmentSection { docker_image: None, ..config };
                return Some(VerifierEnvironment { config, dir: tests, bundled_tests: true });
            }
        }
        let config = EnvironmentSection { docker_image: self.environment.docker_image.clone(), ..config };
        Some(VerifierEnvironment { config, dir: task_dir.join("environment"), bundled_tests: false })
    }
}
