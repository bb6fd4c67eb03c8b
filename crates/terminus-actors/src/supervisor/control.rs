//! The Supervisor's live controls: a [`JobControl`] applied to the ledger (and to the budget
//! and adaptive admission's ceiling), and the [`JobStatus`] the control is answered with.

use terminus_core::control::{ControlChange, ControlRefusal, JobControl, JobStatus, TrialState, TrialStatus};
use terminus_core::error::TrialErrorKind;
use terminus_core::events::RunEvent;

use super::SupervisorState;
use super::ledger::{Action, Slot};

impl SupervisorState {
    /// Applies a live control to the ledger (and the budget, and adaptive admission's ceiling);
    /// returns what the shell performs, or why it was refused.
    pub(super) fn control(&mut self, request: JobControl) -> Result<Vec<Action>, ControlRefusal> {
        let changes_admission = matches!(
            request,
            JobControl::Pause | JobControl::Resume | JobControl::SetConcurrency(_) | JobControl::SetBudget(_)
        );
        if changes_admission && self.ledger.closed() {
            // Nothing starts any more: a change of what may start would say otherwise.
            return Err(ControlRefusal::Closed);
        }
        match request {
            JobControl::Status => Ok(Vec::new()),
            JobControl::Pause => self.ledger.set_paused(true),
            JobControl::Resume => self.ledger.set_paused(false),
            JobControl::SetConcurrency(0) => Err(ControlRefusal::ZeroConcurrency),
            JobControl::SetConcurrency(n) => {
                if let Some(admission) = &mut self.admission {
                    admission.set_max(n);
                }
                self.ledger.set_limit(n);
                Ok(vec![Action::Emit(RunEvent::Controlled { change: ControlChange::Concurrency(n) })])
            }
            JobControl::SetBudget(change) => {
                let valid = |x: f64| x.is_finite() && x >= 0.0;
                if change.max_cost_usd.is_some_and(|x| !valid(x)) || change == Default::default() {
                    return Err(ControlRefusal::InvalidBudget);
                }
                let Some(budget) = &self.budget else { return Err(ControlRefusal::NoBudget) };
                budget.set_job_limit(change.max_cost_usd, change.max_tokens);
                self.ledger.release_held();
                Ok(vec![
                    Action::Emit(RunEvent::Controlled { change: ControlChange::Budget(change) }),
                    Action::WriteJobResult,
                ])
            }
            JobControl::CancelTrial(trial) => self.ledger.cancel_trial(&trial),
            JobControl::RetryTrial(trial) => {
                let slot = self.ledger.finished().iter().rfind(|r| r.trial_name == trial).and_then(|result| {
                    let key = result.config.trial_key()?;
                    let plan = self.ctx.plan.trials.iter().find(|p| p.key() == key)?;
                    let mut slot = Slot::new(plan.clone(), trial.clone());
                    slot.retries = result.retries;
                    Some(slot)
                });
                self.ledger.retry_trial(&trial, slot)
            }
        }
    }

    /// The job and every trial of it, as a live control answers.
    pub(super) fn status(&self) -> JobStatus {
        let live = self.ledger.live();
        let mut trials: Vec<TrialStatus> = self
            .ledger
            .live_slots()
            .into_iter()
            .map(|(slot, state)| TrialStatus {
                name: slot.name.clone(),
                task_name: slot.plan.task.name.clone(),
                state,
                retries: slot.retries,
                reward: None,
                key: Some(terminus_core::control::plan_key(&slot.plan.key())),
            })
            .collect();
        trials.extend(self.ledger.finished().iter().map(|r| TrialStatus {
            name: r.trial_name.clone(),
            task_name: r.task_name.clone(),
            state: if r.error_kind() == Some(TrialErrorKind::Cancelled) {
                TrialState::Cancelled
            } else {
                TrialState::Finished
            },
            retries: r.retries,
            reward: r.reward(),
            key: r.config.trial_key().as_ref().map(terminus_core::control::plan_key),
        }));
        trials.sort_by(|a, b| a.name.cmp(&b.name));
        JobStatus {
            job_id: self.ctx.job_id.to_string(),
            job_name: self.ctx.plan.name().to_string(),
            paused: self.ledger.paused(),
            closed: self.ledger.closed(),
            n_concurrent: self.ledger.limit(),
            n_total: live.n_total,
            n_running: live.n_running,
            n_pending: live.n_pending,
            n_finished: self.ledger.finished().len() as u64,
            budget: self.budget_status(),
            trials,
        }
    }
}
