//! The exit codes of `terminus`, as the crate root's doc lists them, and the one a job that ran
//! exits with.

use terminus_core::stats::JobSummary;

pub const OK: u8 = 0;
pub const TRIAL_ERRORS: u8 = 1;
pub const INVALID: u8 = 2;
pub const NO_DOCKER: u8 = 3;
pub const HALTED: u8 = 4;
pub const BUSY: u8 = 5;
pub const BUDGET: u8 = 6;
pub const PREFLIGHT: u8 = 7;
pub const NOT_RUNNING: u8 = 8;
pub const REFUSED: u8 = 9;
pub const INTERRUPTED: u8 = 130;

/// Prints `message` as the error of invalid input; returns [`INVALID`].
pub fn invalid(message: impl std::fmt::Display) -> u8 {
    eprintln!("error: {message}");
    INVALID
}

/// The exit code of a job that ran: an interrupt first, then a halt, then trials left unstarted
/// by the budget; without any of them, OK when no trial errored or was cancelled. A job without
/// a summary (its reporter ended before the job did) counts as one with errors.
pub fn of_job(interrupted: bool, summary: Option<&JobSummary>) -> u8 {
    match summary {
        _ if interrupted => INTERRUPTED,
        Some(s) if s.halted => HALTED,
        Some(s) if s.budget.as_ref().is_some_and(|b| b.n_not_run > 0) => BUDGET,
        Some(s) if s.n_errored == 0 && s.n_cancelled == 0 => OK,
        _ => TRIAL_ERRORS,
    }
}

#[cfg(test)]
mod tests {
    use terminus_core::stats::BudgetStatus;

    use super::*;

    fn summary(n_errored: u64, n_cancelled: u64) -> JobSummary {
        JobSummary {
            n_total: 4,
            n_finished: 4 - n_errored - n_cancelled,
            n_errored,
            n_cancelled,
            ..JobSummary::default()
        }
    }

    fn budget(n_not_run: u64) -> Option<BudgetStatus> {
        Some(BudgetStatus { max_cost_usd: Some(1.0), reached: true, n_not_run, ..BudgetStatus::default() })
    }

    #[test]
    fn a_job_whose_trials_all_finished_without_error_exits_ok_whatever_the_budget() {
        assert_eq!(of_job(false, Some(&summary(0, 0))), OK);
        let spent_but_all_ran = JobSummary { budget: budget(0), ..summary(0, 0) };
        assert_eq!(of_job(false, Some(&spent_but_all_ran)), OK);
    }

    #[test]
    fn an_errored_or_cancelled_trial_exits_with_trial_errors() {
        assert_eq!(of_job(false, Some(&summary(1, 0))), TRIAL_ERRORS);
        assert_eq!(of_job(false, Some(&summary(0, 1))), TRIAL_ERRORS);
    }

    #[test]
    fn a_job_without_a_summary_exits_with_trial_errors() {
        assert_eq!(of_job(false, None), TRIAL_ERRORS);
    }

    #[test]
    fn trials_left_unstarted_by_the_budget_exit_with_budget_even_after_errors() {
        assert_eq!(of_job(false, Some(&JobSummary { budget: budget(2), ..summary(0, 0) })), BUDGET);
        assert_eq!(of_job(false, Some(&JobSummary { budget: budget(2), ..summary(1, 0) })), BUDGET);
    }

    #[test]
    fn a_halt_outranks_the_budget_and_an_interrupt_outranks_everything() {
        let halted = JobSummary { halted: true, budget: budget(2), ..summary(1, 0) };
        assert_eq!(of_job(false, Some(&halted)), HALTED);
        assert_eq!(of_job(true, Some(&halted)), INTERRUPTED);
        assert_eq!(of_job(true, Some(&summary(0, 0))), INTERRUPTED);
        assert_eq!(of_job(true, None), INTERRUPTED);
    }

    #[test]
    fn every_exit_code_is_distinct() {
        let mut codes = vec![OK, TRIAL_ERRORS, INVALID, NO_DOCKER, HALTED, BUSY, BUDGET, INTERRUPTED];
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), 8);
    }
}
