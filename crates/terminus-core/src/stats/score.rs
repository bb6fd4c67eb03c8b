//! A group's score under both of Harbor's conventions ([`Scores`]): Harbor 0.25 counts every
//! completed trial (one without a reward as 0); Harbor 0.26 counts only the trials whose reward
//! is valid ([`TrialResult::reward_valid`]) and leaves the others out, each with its reason.
//! [`ScoreConvention`] (the job's `score_convention`) says which of the two is the headline;
//! [`Scores::describe`] writes the headline with the other beside it, as every reporter shows it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::result::TrialResult;

/// Whose rule makes a job's headline score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ScoreConvention {
    /// Every completed trial counts; a trial without a reward counts 0.
    #[default]
    #[serde(rename = "harbor-0.25")]
    Harbor025,
    /// Only the trials with a valid reward count.
    #[serde(rename = "harbor-0.26")]
    Harbor026,
}

impl ScoreConvention {
    pub const ALL: [ScoreConvention; 2] = [ScoreConvention::Harbor025, ScoreConvention::Harbor026];

    /// Its name in job files and results: `harbor-0.25`, `harbor-0.26`.
    pub fn name(self) -> &'static str {
        match self {
            ScoreConvention::Harbor025 => "harbor-0.25",
            ScoreConvention::Harbor026 => "harbor-0.26",
        }
    }

    pub fn parse(name: &str) -> Option<ScoreConvention> {
        ScoreConvention::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The convention shown beside this one.
    pub fn other(self) -> ScoreConvention {
        match self {
            ScoreConvention::Harbor025 => ScoreConvention::Harbor026,
            ScoreConvention::Harbor026 => ScoreConvention::Harbor025,
        }
    }
}

/// The reason of a trial left out that recorded no error: it has no reward.
pub const NO_REWARD: &str = "no reward";

/// One convention's figures over a group of trials. The first three keep the names Harbor's
/// `AgentDatasetStats` gives them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Harbor's `n_trials`: under 0.25 the trials with rewards, under 0.26 those with a valid
    /// reward.
    pub n_trials: u64,
    /// One entry per metric of the job, as Harbor computes it (`{"mean": x}` for one reward key,
    /// one value per key for several); empty when no trial is counted.
    pub metrics: Vec<BTreeMap<String, f64>>,
    /// pass@k by k, over the counted trials (empty when a reward is not 0 or 1, or a trial has
    /// several reward keys).
    pub pass_at_k: BTreeMap<String, f64>,
    /// The mean reward over the counted trials (the single reward key's, else `reward`'s).
    pub mean: Option<f64>,
    /// Trials the mean counts.
    pub n_counted: u64,
    /// Completed trials of the group.
    pub n_completed: u64,
    /// The trials left out, by reason: the name of the error that spoiled the reward (or the
    /// first error of a trial without one), or [`NO_REWARD`]. Only Harbor 0.26 leaves any out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub left_out: BTreeMap<String, u64>,
}

/// Both conventions' figures of one group (or of the whole job).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    #[serde(rename = "harbor-0.25")]
    pub harbor_025: Score,
    #[serde(rename = "harbor-0.26")]
    pub harbor_026: Score,
}

impl Scores {
    /// Both scores of `results`; `metrics` names the aggregates (`mean`, `sum`, `min`, `max`).
    /// `with_pass_at_k` is false for figures over several groups, where pass@k means nothing.
    pub fn compute(results: &[&TrialResult], metrics: &[&str], with_pass_at_k: bool) -> Scores {
        let mut scores = Scores::default();
        for convention in ScoreConvention::ALL {
            let counted: Vec<&TrialResult> = match convention {
                ScoreConvention::Harbor025 => results.to_vec(),
                ScoreConvention::Harbor026 => results.iter().copied().filter(|r| r.reward_valid()).collect(),
            };
            let rewards: Vec<Option<&BTreeMap<String, f64>>> = counted.iter().map(|r| rewards_of(r)).collect();
            let score = Score {
                n_trials: match convention {
                    ScoreConvention::Harbor025 => results.iter().filter(|r| rewards_of(r).is_some()).count() as u64,
                    ScoreConvention::Harbor026 => counted.len() as u64,
                },
                metrics: if rewards.is_empty() {
                    Vec::new()
                } else {
                    metrics.iter().map(|name| aggregate(&rewards, name)).collect()
                },
                pass_at_k: if with_pass_at_k { mean_pass_at_k(&counted) } else { BTreeMap::new() },
                mean: (!rewards.is_empty())
                    .then(|| aggregate(&rewards, "mean"))
                    .and_then(|m| m.get("mean").or_else(|| m.get("reward")).copied()),
                n_counted: counted.len() as u64,
                n_completed: results.len() as u64,
                left_out: match convention {
                    ScoreConvention::Harbor025 => BTreeMap::new(),
                    ScoreConvention::Harbor026 => left_out(results),
                },
            };
            *scores.get_mut(convention) = score;
        }
        scores
    }

    pub fn get(&self, convention: ScoreConvention) -> &Score {
        match convention {
            ScoreConvention::Harbor025 => &self.harbor_025,
            ScoreConvention::Harbor026 => &self.harbor_026,
        }
    }

    fn get_mut(&mut self, convention: ScoreConvention) -> &mut Score {
        match convention {
            ScoreConvention::Harbor025 => &mut self.harbor_025,
            ScoreConvention::Harbor026 => &mut self.harbor_026,
        }
    }

    /// The headline mean with the other convention's beside it, each with what it counts and
    /// leaves out, e.g. `mean 0.500 (harbor-0.26: 0.667 over 6 of 8; 2 left out: 1 RateLimitError,
    /// 1 no reward)`; `mean -` before any trial is counted.
    pub fn describe(&self, headline: ScoreConvention) -> String {
        let other = headline.other();
        format!("mean {} ({}: {})", score_text(self.get(headline)), other.name(), score_text(self.get(other)))
    }

    /// The two means alone, for a progress line: `0.500 (harbor-0.26: 0.667)`.
    pub fn brief(&self, headline: ScoreConvention) -> String {
        let other = headline.other();
        format!("{} ({}: {})", mean_text(self.get(headline).mean), other.name(), mean_text(self.get(other).mean))
    }
}

/// A mean as every reporter writes it: three decimals, `-` when there is none.
pub fn mean_text(mean: Option<f64>) -> String {
    mean.map_or_else(|| "-".to_string(), |m| format!("{m:.3}"))
}

/// What a convention counts and leaves out, when it leaves any trial out: `over 6 of 8; 2 left
/// out: 1 RateLimitError, 1 no reward`; empty otherwise.
pub fn counted_text(score: &Score) -> String {
    let mut text = String::new();
    if score.n_counted != score.n_completed {
        text.push_str(&format!("over {} of {}", score.n_counted, score.n_completed));
    }
    if !score.left_out.is_empty() {
        let n: u64 = score.left_out.values().sum();
        let mut reasons: Vec<(&String, &u64)> = score.left_out.iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let reasons: Vec<String> = reasons.iter().map(|(why, n)| format!("{n} {why}")).collect();
        text.push_str(&format!("; {n} left out: {}", reasons.join(", ")));
    }
    text
}

/// One convention's mean, what it counts and what it leaves out: `0.667 over 6 of 8; 2 left
/// out: 1 RateLimitError, 1 no reward`.
pub fn score_text(score: &Score) -> String {
    let counted = counted_text(score);
    if counted.is_empty() { mean_text(score.mean) } else { format!("{} {counted}", mean_text(score.mean)) }
}

/// A trial's rewards, when its verifier gave any (possibly an empty map).
fn rewards_of(result: &TrialResult) -> Option<&BTreeMap<String, f64>> {
    result.verifier_result.as_ref()?.rewards.as_ref()
}

/// Why Harbor 0.26 leaves each of `results` out that it does, counted by reason.
fn left_out(results: &[&TrialResult]) -> BTreeMap<String, u64> {
    let mut reasons = BTreeMap::new();
    for result in results.iter().filter(|r| !r.reward_valid()) {
        let spoiler = result.recorded_errors().find(|info| !info.policy().has_valid_reward);
        let why = spoiler
            .or_else(|| result.recorded_errors().next())
            .map_or_else(|| NO_REWARD.to_string(), |info| info.exception_type.clone());
        *reasons.entry(why).or_insert(0) += 1;
    }
    reasons
}

/// Harbor's aggregate of reward maps (its `aggregate_reward_dicts`): with at most one reward key
/// in all, `{name: f(values)}`, a trial without a reward counting 0; with several keys, `f` of
/// each key's values, a key a trial lacks counting 0.
fn aggregate(rewards: &[Option<&BTreeMap<String, f64>>], name: &str) -> BTreeMap<String, f64> {
    let f = |values: Vec<f64>| -> f64 {
        match name {
            "sum" => values.iter().sum(),
            "min" => values.iter().copied().fold(f64::INFINITY, f64::min),
            "max" => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            _ => values.iter().sum::<f64>() / values.len() as f64,
        }
    };
    let keys: BTreeSet<&String> = rewards.iter().flatten().flat_map(|r| r.keys()).collect();
    if keys.len() <= 1 {
        let values = rewards.iter().map(|r| r.and_then(|r| r.values().next().copied()).unwrap_or(0.0)).collect();
        return BTreeMap::from([(name.to_string(), f(values))]);
    }
    keys.into_iter()
        .map(|key| {
            let values = rewards.iter().map(|r| r.and_then(|r| r.get(key).copied()).unwrap_or(0.0)).collect();
            (key.clone(), f(values))
        })
        .collect()
}

/// pass@k with the unbiased estimator, averaged over tasks, for every k from 1 to the smallest
/// number of trials any task has. A trial without a reward counts as failed; empty when a reward
/// is not 0 or 1 or a trial has other than one reward key, as in Harbor.
fn mean_pass_at_k(results: &[&TrialResult]) -> BTreeMap<String, f64> {
    let mut by_task: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for result in results {
        let entry = by_task.entry(result.task_name.as_str()).or_default();
        entry.0 += 1;
        if let Some(rewards) = rewards_of(result) {
            let mut values = rewards.values();
            match (values.next(), values.next()) {
                (Some(reward), None) if *reward == 1.0 => entry.1 += 1,
                (Some(reward), None) if *reward == 0.0 => {}
                _ => return BTreeMap::new(),
            }
        }
    }
    let Some(min_n) = by_task.values().map(|(n, _)| *n).min() else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for k in 1..=min_n {
        let total: f64 = by_task.values().map(|(n, c)| pass_at_k(*n, *c, k)).sum();
        out.insert(k.to_string(), total / by_task.len() as f64);
    }
    out
}

/// The unbiased pass@k estimate of one task with `n` trials of which `c` passed.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    let mut fail = 1.0;
    for i in 0..k {
        fail *= (n - c - i) as f64 / (n - i) as f64;
    }
    1.0 - fail
}

#[cfg(test)]
mod tests;
