//! The reporter's texts: the overall bar, the end-of-job tables, pass@k's shown k.

use std::collections::BTreeMap;

use terminus_core::stats::{EvalLine, Score, ScoreConvention, Scores};

use super::*;

fn summary_text(summary: &JobSummary) -> String {
    let mut out = Vec::new();
    write_summary(&mut out, summary);
    String::from_utf8(out).unwrap()
}

fn finished_job() -> JobSummary {
    JobSummary {
        job_dir: "jobs/j".into(),
        n_total: 3,
        n_finished: 2,
        n_errored: 1,
        wall_seconds: 12.34,
        n_input_tokens: 1500,
        n_output_tokens: 20,
        ..JobSummary::default()
    }
}

#[test]
fn token_counts_are_shortened_past_a_thousand_and_a_million() {
    assert_eq!(human(0), "0");
    assert_eq!(human(999), "999");
    assert_eq!(human(1_000), "1.0k");
    assert_eq!(human(12_345), "12.3k");
    assert_eq!(human(1_000_000), "1.0M");
    assert_eq!(human(2_345_678), "2.3M");
}

#[test]
fn reward_cells_show_errors_rewards_and_missing_rewards_apart() {
    assert_eq!(cell(&RewardCell::Error), "err");
    assert_eq!(cell(&RewardCell::Reward(1.0)), "1");
    assert_eq!(cell(&RewardCell::Reward(0.25)), "0.25");
    assert_eq!(cell(&RewardCell::Missing), "-");
}

#[test]
fn budget_text_shows_spend_against_each_limit_set() {
    let spent = BudgetStatus { spent_cost_usd: 0.5, spent_tokens: 1200, ..BudgetStatus::default() };
    let dollars = BudgetStatus { max_cost_usd: Some(2.0), ..spent.clone() };
    assert_eq!(budget_text(&dollars), "$0.50 of $2.00");
    let tokens = BudgetStatus { max_tokens: Some(5000), ..spent.clone() };
    assert_eq!(budget_text(&tokens), "1200 of 5000 tokens");
    let both = BudgetStatus { max_cost_usd: Some(2.0), max_tokens: Some(5000), ..spent.clone() };
    assert_eq!(budget_text(&both), "$0.50 of $2.00, 1200 of 5000 tokens");
    // Only agents have limits: the job's spend alone.
    assert_eq!(budget_text(&spent), "$0.50 spent");
}

#[test]
fn the_overall_bar_shows_errors_retries_mean_and_cost_or_budget() {
    let mut summary = JobSummary { n_errored: 1, n_model_retries: 2, ..JobSummary::default() };
    assert_eq!(overall_text(&summary), "errors 1 · retries 2 · mean reward -");
    summary.mean_reward = Some(0.5);
    summary.cost_usd = Some(0.0);
    assert_eq!(overall_text(&summary), "errors 1 · retries 2 · mean reward 0.500", "a zero cost is not shown");
    summary.cost_usd = Some(1.234);
    assert_eq!(overall_text(&summary), "errors 1 · retries 2 · mean reward 0.500 · $1.23");
    summary.budget = Some(BudgetStatus { max_cost_usd: Some(5.0), spent_cost_usd: 1.234, ..BudgetStatus::default() });
    assert_eq!(overall_text(&summary), "errors 1 · retries 2 · mean reward 0.500 · $1.23 of $5.00");
}

#[test]
fn pass_at_k_always_shows_the_largest_k_and_skips_what_is_not_a_number() {
    let pass = |ks: &[&str]| -> Vec<(String, f64)> { ks.iter().map(|k| (k.to_string(), 0.5)).collect() };
    let shown = |all: &[(String, f64)]| shown_pass_at_k(all).map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(shown(&pass(&["7", "3", "1", "6", "2"])), [1, 2, 3, 7]);
    assert_eq!(shown(&pass(&["1", "best", "2"])), [1, 2]);
    assert!(shown(&[]).is_empty());
    let many: Vec<(String, f64)> = (1..=1000).map(|k| (k.to_string(), 0.5)).collect();
    assert_eq!(shown(&many), [1, 2, 3, 4, 5, 10, 20, 50, 100, 200, 500, 1000]);
}

#[test]
fn the_summary_heading_says_how_the_job_ended_with_its_counts() {
    let text = summary_text(&finished_job());
    assert!(
        text.starts_with("\nJob finished in 12.3 s: 3 trials — 2 finished, 1 errored, 0 cancelled, 0 not run\n"),
        "{text}"
    );
    let halted = summary_text(&JobSummary { halted: true, cancelled: true, ..finished_job() });
    assert!(halted.starts_with("\nJob halted in"), "{halted}");
    let interrupted = summary_text(&JobSummary { cancelled: true, ..finished_job() });
    assert!(interrupted.starts_with("\nJob interrupted in"), "{interrupted}");
}

#[test]
fn a_job_that_did_not_finish_says_how_to_continue_it() {
    let continue_line = "Continue with: terminus resume jobs/j\n";
    assert!(!summary_text(&finished_job()).contains(continue_line));
    assert!(summary_text(&JobSummary { halted: true, ..finished_job() }).ends_with(continue_line));
    assert!(summary_text(&JobSummary { cancelled: true, ..finished_job() }).ends_with(continue_line));
}

#[test]
fn the_summary_shows_retries_and_the_mean_reward_only_when_there_are_any() {
    let plain = summary_text(&finished_job());
    assert!(!plain.contains("Trial retries") && !plain.contains("Mean reward"), "{plain}");
    let text = summary_text(&JobSummary { n_restarts: 1, mean_reward: Some(2.0 / 3.0), ..finished_job() });
    assert!(text.contains("Trial retries: 0, restarts: 1\n"), "{text}");
    assert!(text.contains("Mean reward: 0.667 (errored trials count as 0)\n"), "{text}");
}

/// Both conventions' means: the headline, then the other with what it left out; the bar
/// shows the two means.
#[test]
fn the_score_line_shows_the_headline_and_the_other_convention() {
    let scores = two_scores();
    for (convention, line, bar) in [
        (
            ScoreConvention::Harbor025,
            "Score (harbor-0.25): mean 0.500 (harbor-0.26: 0.667 over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward)\n",
            "mean reward 0.500 (harbor-0.26: 0.667)",
        ),
        (
            ScoreConvention::Harbor026,
            "Score (harbor-0.26): mean 0.667 over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward (harbor-0.25: 0.500)\n",
            "mean reward 0.667 (harbor-0.25: 0.500)",
        ),
    ] {
        let summary = JobSummary { scores: Some(scores.clone()), score_convention: convention, ..finished_job() };
        let text = summary_text(&summary);
        assert!(text.contains(line), "{text}");
        assert!(overall_text(&summary).ends_with(bar), "{}", overall_text(&summary));
    }
}

fn two_scores() -> Scores {
    let old = Score { mean: Some(0.5), n_counted: 8, n_completed: 8, ..Score::default() };
    let new = Score {
        mean: Some(2.0 / 3.0),
        n_counted: 6,
        n_completed: 8,
        pass_at_k: BTreeMap::from([("1".into(), 0.5), ("2".into(), 0.75)]),
        left_out: BTreeMap::from([("RateLimitError".into(), 1), ("no reward".into(), 1)]),
        ..Score::default()
    };
    Scores { harbor_025: old, harbor_026: new }
}

#[test]
fn the_summary_ends_with_tokens_cost_and_where_the_results_are() {
    let text = summary_text(&finished_job());
    assert!(text.contains("\nTokens: 1500 in, 20 out\n"), "{text}");
    assert!(text.ends_with("Results: jobs/j/result.json\n"), "{text}");
    let text = summary_text(&JobSummary { cost_usd: Some(0.12345), ..finished_job() });
    assert!(text.contains("\nTokens: 1500 in, 20 out, cost $0.1235\n"), "{text}");
}

#[test]
fn the_eval_table_lists_each_eval_with_its_pass_at_k_and_exceptions() {
    let eval = EvalLine {
        key: "terminus-2__gpt__tasks".into(),
        n_trials: 4,
        n_errors: 1,
        mean_reward: Some(0.75),
        pass_at_k: vec![("2".into(), 1.0), ("1".into(), 0.75)],
        exceptions: vec![("AgentTimeoutError".into(), 1)],
        scores: Some(two_scores()),
    };
    let text = summary_text(&JobSummary { evals: vec![eval], ..finished_job() });
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.contains("agent__model__dataset")).expect(&text);
    assert!(lines[header].contains("trials  errors  mean    pass@k"), "{text}");
    let row = lines[header + 1];
    assert!(row.starts_with("  terminus-2__gpt__tasks  "), "{row}");
    assert!(row.contains("0.750") && row.ends_with("@1=0.75 @2=1.00"), "{row}");
    assert!(
        lines[header + 2].ends_with(
            "harbor-0.26: mean 0.667 over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward · pass @1=0.50 @2=0.75"
        ),
        "the other convention beside it: {text}"
    );
    assert!(lines[header + 3].ends_with("1 × AgentTimeoutError"), "{text}");
    // Under harbor-0.26 the line says first what the headline left out.
    let new = JobSummary { score_convention: ScoreConvention::Harbor026, ..finished_job() };
    let eval = EvalLine { scores: Some(two_scores()), ..EvalLine::default() };
    let text = summary_text(&JobSummary { evals: vec![eval], ..new });
    assert!(
        text.contains("    over 6 of 8; 2 left out: 1 RateLimitError, 1 no reward · harbor-0.25: mean 0.500\n"),
        "{text}"
    );
}

#[test]
fn a_tasks_rewards_are_listed_one_by_one_then_counted_past_a_screen_line() {
    let few = vec![RewardCell::Reward(1.0), RewardCell::Error, RewardCell::Missing];
    let many: Vec<RewardCell> = (0..MAX_REWARD_CELLS + 1)
        .map(|i| if i % 3 == 0 { RewardCell::Error } else { RewardCell::Reward((i % 3 - 1) as f64) })
        .collect();
    let rewards = BTreeMap::from([("few".to_string(), few), ("many".to_string(), many)]);
    let text = summary_text(&JobSummary { task_rewards: rewards, ..finished_job() });
    assert!(text.contains("\n  task  rewards\n"), "{text}");
    assert!(text.contains("\n  few   1 err -\n"), "{text}");
    assert!(text.contains("\n  many  0 ×10, 1 ×10, err ×11\n"), "{text}");
}

#[test]
fn the_budget_line_shows_each_budget_and_how_to_run_what_it_left() {
    let agent = BudgetStatus { max_tokens: Some(100), spent_tokens: 100, ..BudgetStatus::default() };
    let budget = BudgetStatus {
        max_cost_usd: Some(1.0),
        spent_cost_usd: 1.0,
        n_not_run: 2,
        agents: BTreeMap::from([("0".to_string(), agent)]),
        ..BudgetStatus::default()
    };
    let text = summary_text(&JobSummary { budget: Some(budget.clone()), ..finished_job() });
    let line = text.lines().find(|l| l.starts_with("Budget: ")).expect(&text);
    assert_eq!(
        line,
        "Budget: $1.00 of $1.00; agents[0]: 100 of 100 tokens; spent, 2 trials not run \
         (`terminus resume jobs/j --max-cost-usd N` or `--max-tokens N` runs them)"
    );
    let all_ran = BudgetStatus { n_not_run: 0, agents: BTreeMap::new(), ..budget };
    let text = summary_text(&JobSummary { budget: Some(all_ran), ..finished_job() });
    assert!(text.contains("\nBudget: $1.00 of $1.00\n"), "{text}");
    assert!(!summary_text(&finished_job()).contains("Budget:"));
}

#[test]
fn a_few_k_are_shown_in_numeric_order() {
    let all: Vec<(String, f64)> = (1..=300).map(|k| (k.to_string(), 0.5)).collect();
    let ks: Vec<u64> = shown_pass_at_k(&all).map(|(k, _)| k).collect();
    assert_eq!(ks, [1, 2, 3, 4, 5, 10, 20, 50, 100, 200, 300]);
    let few: Vec<(String, f64)> = (1..=3).map(|k| (k.to_string(), 1.0)).collect();
    assert_eq!(shown_pass_at_k(&few).map(|(k, _)| k).collect::<Vec<_>>(), [1, 2, 3]);
}
