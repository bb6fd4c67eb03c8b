//! Dispatch under a limit shared with other jobs of the process ([`SharedLimit`]): the ledger
//! starts what the job's own limit and the others' running trials leave room for; a job held
//! back by the others looks again shortly (it hears nothing from them).

use ractor::ActorRef;

use super::ledger::Action;
use super::{SupervisorMsg, SupervisorState};
use crate::shared_limit::{RECHECK, SharedLimit};

/// Starts queued trials as the job's limits allow (the shared one too, if any).
pub(super) fn dispatch(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState) -> Vec<Action> {
    let budget = state.budget.clone();
    let reached = |agent| budget.as_ref().and_then(|b| b.reached(agent));
    let Some(shared) = state.ctx.shared_limit.clone() else {
        return state.ledger.dispatch(&reached);
    };
    let ledger = &mut state.ledger;
    let (actions, held_back) = shared.admit(&state.ctx.job_id, |room| {
        let actions = ledger.dispatch_within(room, &reached);
        let held_back = ledger.n_queued() > 0 && ledger.n_running() >= room && room < ledger.limit();
        ((actions, held_back), ledger.n_running())
    });
    if held_back && !state.recheck_armed {
        state.recheck_armed = true;
        myself.send_after(RECHECK, || SupervisorMsg::Dispatch);
    }
    actions
}

/// Says how many trials the job runs now (after trials ended or failed to start).
pub(super) fn publish(state: &SupervisorState) {
    if let Some(shared) = &state.ctx.shared_limit {
        shared.publish(&state.ctx.job_id, state.ledger.n_running());
    }
}

/// The job is over: its places go to the others.
pub(super) fn leave(state: &SupervisorState) {
    if let Some(shared) = &state.ctx.shared_limit {
        SharedLimit::leave(shared, &state.ctx.job_id);
    }
}
