//! The oracle preflight: before any model call, every task's own solution runs once, and tasks
//! whose solution does not score 1 leave the job (`preflight: oracle`) or refuse it
//! (`preflight: strict`). Here: the oracle job made from a job; the key's values are
//! [`PreflightMode`](super::spec::PreflightMode).

use serde_json::{Map, Value};

use super::spec::{AgentKind, AgentSpec, JobSpec, PreflightMode};

/// The suffix of the oracle job's name: `<job_name>__oracle-preflight`, beside the job.
pub const PREFLIGHT_SUFFIX: &str = "__oracle-preflight";

impl JobSpec {
    /// The job that runs every task of this one once with the `oracle` agent: same tasks,
    /// environment, concurrency and backend; one attempt; no budget (no model is called); no
    /// preflight of its own. It lives beside the job, in `<job_name>__oracle-preflight`.
    pub fn oracle_preflight(&self) -> JobSpec {
        let mut job = self.clone();
        job.job_name = format!("{}{PREFLIGHT_SUFFIX}", self.job_name);
        job.n_attempts = 1;
        job.preflight = PreflightMode::None;
        job.budget = Default::default();
        let llm = self.agents.first().map(|a| a.llm).expect("a validated job has an agent");
        job.agents = vec![AgentSpec {
            name: "oracle".into(),
            kind: AgentKind::Oracle,
            model_name: None,
            override_timeout_sec: None,
            override_setup_timeout_sec: None,
            max_timeout_sec: None,
            env: Default::default(),
            kwargs: Map::new(),
            llm,
            extra_allowed_hosts: Vec::new(),
            budget: Default::default(),
            mcp_servers: Vec::new(),
            skills: Vec::new(),
        }];
        if let Value::Object(raw) = &mut job.raw {
            raw.insert("job_name".into(), Value::String(job.job_name.clone()));
            raw.insert("n_attempts".into(), Value::from(1));
            raw.insert("agents".into(), serde_json::json!([{ "name": "oracle" }]));
            raw.remove("preflight");
            raw.remove("budget");
        }
        job
    }

    /// The names of the job's tasks, each once, in the job's order.
    pub fn task_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for task in &self.tasks {
            if !names.contains(&task.name) {
                names.push(task.name.clone());
            }
        }
        names
    }

    /// Leaves the tasks named in `names` out of the job.
    pub fn leave_out<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        let names: Vec<&str> = names.into_iter().collect();
        self.tasks.retain(|task| !names.contains(&task.name.as_str()));
    }
}
