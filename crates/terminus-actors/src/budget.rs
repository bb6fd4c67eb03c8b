//! The job's budget: what its model calls may spend in all, and what they spent.
//!
//! One [`Budget`] per job (when the job or one of its agents has a `budget:`), shared by every
//! trial's [`LlmHandle`](crate::llm::LlmHandle): a call starts only while neither the job's
//! limit nor its agent's is reached, and each reply's usage is charged as it arrives (the
//! prices are the model's, already in the usage). So the job stops within one call per running
//! trial of its limit.
//!
//! Every charge is also a line of the job's spend journal (`spend.jsonl`), appended before the
//! reply goes on: a kill -9 loses nothing the process had charged, and a resumed job starts
//! from the sum of the journal. A line torn by a crash is skipped when the journal is read.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use terminus_config::policy::BudgetSpec;
use terminus_core::llm::Usage;
use terminus_core::stats::BudgetStatus;

/// What was spent: dollars, tokens (input and output), calls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Spent {
    cost_usd: f64,
    tokens: u64,
    calls: u64,
}

impl Spent {
    fn add(&mut self, cost_usd: f64, tokens: u64) {
        // A cost that is no finite non-negative number cannot lower what was spent.
        self.cost_usd += if cost_usd.is_finite() { cost_usd.max(0.0) } else { 0.0 };
        self.tokens = self.tokens.saturating_add(tokens);
        self.calls += 1;
    }

    /// Why `limit` is reached by this spend, if it is.
    fn reached(&self, limit: &BudgetSpec, whose: &str) -> Option<String> {
        if let Some(max) = limit.max_cost_usd
            && self.cost_usd >= max
        {
            return Some(format!("{whose} budget of ${max} is spent (${:.4})", self.cost_usd));
        }
        if let Some(max) = limit.max_tokens
            && self.tokens >= max
        {
            return Some(format!("{whose} budget of {max} tokens is spent ({})", self.tokens));
        }
        None
    }

    fn status(&self, limit: &BudgetSpec) -> BudgetStatus {
        BudgetStatus {
            max_cost_usd: limit.max_cost_usd,
            max_tokens: limit.max_tokens,
            spent_cost_usd: self.cost_usd,
            spent_tokens: self.tokens,
            n_calls: self.calls,
            reached: self.reached(limit, "").is_some(),
            n_not_run: 0,
            agents: BTreeMap::new(),
        }
    }
}

/// One line of the spend journal.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    agent: usize,
    trial: String,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
}

struct Ledger {
    /// The job's limit now.
    limit: BudgetSpec,
    job: Spent,
    agents: Vec<Spent>,
    journal: Option<std::fs::File>,
}

/// The job's budget and its spend.
pub struct Budget {
    /// The job's limit as it started (a live control may change it: see [`Budget::set_job_limit`]).
    job: BudgetSpec,
    agents: Vec<BudgetSpec>,
    ledger: Mutex<Ledger>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget").field("job", &self.job).field("agents", &self.agents).finish_non_exhaustive()
    }
}

impl Budget {
    /// The budget of a job whose journal is `journal` (its spend so far read from it, a new one
    /// made when there is none); `agents`: each agent's own limit, by index.
    pub fn open(journal: &Path, job: BudgetSpec, agents: Vec<BudgetSpec>) -> std::io::Result<Budget> {
        let mut ledger =
            Ledger { limit: job, job: Spent::default(), agents: vec![Spent::default(); agents.len()], journal: None };
        let text = std::fs::read_to_string(journal).unwrap_or_default();
        for entry in text.lines().filter_map(|line| serde_json::from_str::<Entry>(line).ok()) {
            let tokens = entry.input_tokens.saturating_add(entry.output_tokens);
            ledger.job.add(entry.cost_usd, tokens);
            if let Some(spent) = ledger.agents.get_mut(entry.agent) {
                spent.add(entry.cost_usd, tokens);
            }
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(journal)?;
        if !text.is_empty() && !text.ends_with('\n') {
            // A line torn by a crash: the next one starts on a line of its own.
            file.write_all(b"\n")?;
        }
        ledger.journal = Some(file);
        Ok(Budget { job, agents, ledger: Mutex::new(ledger) })
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why `agent`'s calls may not start, if they may not: the job's limit or its own is spent.
    pub fn reached(&self, agent: usize) -> Option<String> {
        let ledger = self.ledger();
        if let Some(why) = ledger.job.reached(&ledger.limit, "the job's") {
            return Some(why);
        }
        let limit = self.agents.get(agent)?;
        ledger.agents.get(agent)?.reached(limit, &format!("agents[{agent}]'s"))
    }

    /// Changes the job's limit while it runs (each field given replaces that limit); returns it.
    /// Calls stopped by the old limit start again if the new one allows them.
    pub fn set_job_limit(&self, max_cost_usd: Option<f64>, max_tokens: Option<u64>) -> BudgetSpec {
        let mut ledger = self.ledger();
        if max_cost_usd.is_some() {
            ledger.limit.max_cost_usd = max_cost_usd;
        }
        if max_tokens.is_some() {
            ledger.limit.max_tokens = max_tokens;
        }
        ledger.limit
    }

    /// Counts one call's usage for `agent` (of `trial`), in memory and in the journal.
    pub fn charge(&self, agent: usize, trial: &str, usage: &Usage) {
        let tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        let mut ledger = self.ledger();
        ledger.job.add(usage.cost_usd, tokens);
        if let Some(spent) = ledger.agents.get_mut(agent) {
            spent.add(usage.cost_usd, tokens);
        }
        let entry = Entry {
            agent,
            trial: trial.to_string(),
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cost_usd: usage.cost_usd,
        };
        if let (Some(file), Ok(mut line)) = (ledger.journal.as_mut(), serde_json::to_string(&entry)) {
            line.push('\n');
            // One write per line (O_APPEND): a crash leaves at most the last line torn.
            if let Err(e) = file.write_all(line.as_bytes()) {
                tracing::error!(error = %e, "could not record a model call's spend in the job's journal");
            }
        }
    }

    /// The budget and its spend, as the job's result records them; `not_run`: trials left
    /// unstarted for it.
    pub fn status(&self, not_run: u64) -> BudgetStatus {
        let ledger = self.ledger();
        let mut status = ledger.job.status(&ledger.limit);
        status.n_not_run = not_run;
        for (idx, limit) in self.agents.iter().enumerate().filter(|(_, limit)| limit.is_set()) {
            let mut agent = ledger.agents[idx].status(limit);
            agent.reached |= status.reached;
            status.agents.insert(idx.to_string(), agent);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tokens: u64, cost_usd: f64) -> Usage {
        Usage { prompt_tokens: tokens, completion_tokens: 0, cache_tokens: 0, cost_usd, estimated: false }
    }

    #[test]
    fn limits_are_reached_by_the_job_or_the_agent_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("spend.jsonl");
        let job = BudgetSpec { max_cost_usd: Some(1.0), max_tokens: None };
        let agents = vec![BudgetSpec::default(), BudgetSpec { max_cost_usd: None, max_tokens: Some(100) }];
        let budget = Budget::open(&journal, job, agents.clone()).unwrap();
        assert_eq!(budget.reached(0), None);
        budget.charge(1, "t1", &usage(60, 0.1));
        budget.charge(1, "t1", &usage(60, 0.1));
        assert!(budget.reached(1).unwrap().contains("agents[1]'s budget of 100 tokens"));
        assert_eq!(budget.reached(0), None, "the other agent goes on");
        budget.charge(0, "t2", &usage(10, 0.85));
        assert!(budget.reached(0).unwrap().contains("the job's budget of $1"));
        // A torn last line (a crash mid-write) is skipped; the rest is the spend so far.
        std::fs::OpenOptions::new().append(true).open(&journal).unwrap().write_all(b"{\"agent\": 0, \"tri").unwrap();
        let reopened =
            Budget::open(&journal, BudgetSpec { max_cost_usd: Some(2.0), max_tokens: None }, agents.clone()).unwrap();
        reopened.charge(0, "t3", &usage(1, 0.0));
        drop(reopened);
        let reopened =
            Budget::open(&journal, BudgetSpec { max_cost_usd: Some(2.0), max_tokens: None }, agents).unwrap();
        let status = reopened.status(3);
        assert_eq!(
            (status.n_calls, status.spent_tokens, status.n_not_run),
            (4, 131, 3),
            "the line after the torn one counts"
        );
        assert!((status.spent_cost_usd - 1.05).abs() < 1e-9);
        assert!(!status.reached, "a raised budget goes on");
        assert!(status.agents["1"].reached);
        assert_eq!(reopened.reached(0), None);
    }
}
