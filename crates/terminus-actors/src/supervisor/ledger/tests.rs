//! The ledger's rules, one decision per test: dispatch and the concurrency limit, retry,
//! restart, the restart intensity halt, the outage requeue, the watchdog, the budget, a full
//! disk and cancel.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use terminus_config::job::{TaskRef, TrialPlan};
use terminus_config::policy::{RetrySpec, SupervisionSpec};
use terminus_core::error::{TrialError, TrialErrorKind};
use terminus_core::events::RunEvent;
use terminus_core::ids::TrialName;

use super::*;

/// A result as the ledger sees it: whose it is, and which attempt made it.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    trial: TrialName,
    label: &'static str,
}

impl HasTrialName for Outcome {
    fn trial_name(&self) -> &TrialName {
        &self.trial
    }
}

fn name(i: usize) -> TrialName {
    TrialName::with_suffix("task", &format!("t{i}"))
}

fn slot(i: usize, agent_idx: usize) -> Slot {
    let task = TaskRef::local(&PathBuf::from("/tasks/task"), None);
    Slot::new(TrialPlan { task, agent_idx, attempt: 0, replay_of: None }, name(i))
}

fn rules(n_concurrent: usize) -> Rules {
    Rules {
        n_concurrent,
        retry: RetrySpec {
            max_retries: 2,
            min_wait: Duration::from_secs(1),
            max_wait: Duration::from_secs(60),
            ..RetrySpec::default()
        },
        supervision: SupervisionSpec {
            max_restarts: 1,
            intensity_max_restarts: 3,
            intensity_window: Duration::from_secs(60),
            watchdog_margin: Duration::from_secs(30),
        },
    }
}

fn ledger(n_trials: usize, n_concurrent: usize) -> Ledger<Outcome> {
    Ledger::new(rules(n_concurrent), (0..n_trials).map(|i| slot(i, 0)).collect(), Vec::new(), 0, 0)
}

fn no_budget(_: usize) -> Option<String> {
    None
}

fn spawned(actions: &[Action]) -> Vec<TrialName> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Spawn(slot) => Some(slot.name.clone()),
            _ => None,
        })
        .collect()
}

fn finishes(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Finish))
}

fn outcome(i: usize, label: &'static str) -> Outcome {
    Outcome { trial: name(i), label }
}

fn error(kind: TrialErrorKind) -> TrialError {
    TrialError::new(kind, "it went wrong")
}

/// Everything between a trial's removal and its next dispatch, as the shell does it.
fn clean(ledger: &mut Ledger<Outcome>, i: usize) -> Vec<Action> {
    ledger.cleaned_up(&name(i))
}

#[test]
fn dispatch_keeps_the_concurrency_limit_in_queue_order_and_finishes_once() {
    let mut ledger = ledger(3, 2);
    let first = ledger.dispatch(&no_budget);
    assert_eq!(spawned(&first), vec![name(0), name(1)]);
    assert!(ledger.dispatch(&no_budget).is_empty(), "no slot is free");
    assert!(matches!(
        ledger.finished_trial(&name(0), outcome(0, "done"), None, 0.5)[..],
        [Action::Recorded { write: false, .. }]
    ));
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(2)]);
    ledger.finished_trial(&name(1), outcome(1, "done"), None, 0.5);
    assert!(!finishes(&ledger.dispatch(&no_budget)), "trial 2 still runs");
    ledger.finished_trial(&name(2), outcome(2, "done"), None, 0.5);
    assert!(finishes(&ledger.dispatch(&no_budget)));
    assert!(ledger.dispatch(&no_budget).is_empty(), "the job finishes once");
    assert!(ledger.complete());
    assert_eq!(ledger.finished().len(), 3);
    assert_eq!(ledger.live().n_running + ledger.live().n_pending, 0);
}

#[test]
fn a_retryable_error_waits_out_a_backoff_without_a_slot_then_goes_first() {
    let mut ledger = ledger(2, 1);
    ledger.dispatch(&no_budget);
    let actions = ledger.finished_trial(&name(0), outcome(0, "attempt 1"), Some(TrialErrorKind::Runtime), 0.0);
    let Some(Action::RetryLater { trial, attempt: 0, wait }) =
        actions.iter().find(|a| matches!(a, Action::RetryLater { .. }))
    else {
        panic!("no retry in {actions:?}")
    };
    assert_eq!(trial, &name(0));
    assert_eq!(*wait, Duration::from_millis(500), "half the first bound at a jitter of 0");
    assert!(actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::TrialWillRetry { retry: 1, .. }))));
    assert_eq!(ledger.live().n_retries, 1);
    // The waiting trial holds no slot: the next one starts meanwhile.
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(1)]);
    ledger.finished_trial(&name(1), outcome(1, "done"), None, 0.5);
    assert!(!finishes(&ledger.dispatch(&no_budget)), "a waiting trial keeps the job open");
    assert!(ledger.retry_due(&name(0)).is_empty());
    let again = ledger.dispatch(&no_budget);
    let [Action::Spawn(slot)] = &again[..] else { panic!("{again:?}") };
    assert_eq!((slot.name.clone(), slot.retries), (name(0), 1));
}

#[test]
fn retries_end_at_the_limit_and_errors_that_cannot_succeed_are_not_retried() {
    let mut ledger = ledger(2, 2);
    ledger.dispatch(&no_budget);
    // An agent out of time is out of time again (excluded by default): recorded at once.
    let actions = ledger.finished_trial(&name(1), outcome(1, "timeout"), Some(TrialErrorKind::AgentTimeout), 0.5);
    assert!(matches!(actions[..], [Action::Recorded { .. }]), "{actions:?}");
    for attempt in 0..2 {
        let actions = ledger.finished_trial(&name(0), outcome(0, "failed"), Some(TrialErrorKind::Runtime), 0.5);
        assert!(
            actions.iter().any(|a| matches!(a, Action::RetryLater { attempt: a, .. } if *a == attempt)),
            "{actions:?}"
        );
        ledger.retry_due(&name(0));
        ledger.dispatch(&no_budget);
    }
    let last = ledger.finished_trial(&name(0), outcome(0, "third"), Some(TrialErrorKind::Runtime), 0.5);
    assert!(matches!(last[..], [Action::Recorded { .. }]), "max_retries 2: the third failure is the result");
    assert_eq!(ledger.finished().last(), Some(&outcome(0, "third")));
}

#[test]
fn a_lost_trial_restarts_once_in_a_fresh_container_then_its_error_is_its_result() {
    let mut ledger = ledger(1, 1);
    ledger.dispatch(&no_budget);
    let now = Instant::now();
    let actions = ledger.lost(&name(0), error(TrialErrorKind::EnvironmentLost), now);
    assert!(actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::TrialRestarting { restart: 1, .. }))));
    assert!(actions.iter().any(|a| matches!(a, Action::CleanUp { after_outage: false, .. })));
    assert!(ledger.dispatch(&no_budget).is_empty(), "nothing runs before its container is removed");
    assert!(clean(&mut ledger, 0).is_empty());
    let again = ledger.dispatch(&no_budget);
    let [Action::Spawn(slot)] = &again[..] else { panic!("{again:?}") };
    assert_eq!(slot.restarts, 1);
    // max_restarts 1: the second loss is given up, once its container is gone.
    let actions = ledger.lost(&name(0), error(TrialErrorKind::EnvironmentLost), now);
    assert!(matches!(actions[..], [Action::CleanUp { .. }]), "{actions:?}");
    let give_up = clean(&mut ledger, 0);
    let [Action::GiveUp { slot, error }] = &give_up[..] else { panic!("{give_up:?}") };
    assert_eq!((slot.restarts, error.kind), (1, TrialErrorKind::EnvironmentLost));
    assert_eq!(ledger.live().n_restarts, 1);
}

#[test]
fn too_many_restarts_within_the_window_halt_the_job_resumably() {
    let mut ledger = ledger(6, 5);
    ledger.dispatch(&no_budget);
    let now = Instant::now();
    for i in 0..3 {
        let actions = ledger.lost(&name(i), error(TrialErrorKind::Internal), now);
        assert!(
            !actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::JobHalted { .. }))),
            "{i}: within the limit"
        );
    }
    let actions = ledger.lost(&name(3), error(TrialErrorKind::Internal), now + Duration::from_secs(10));
    assert!(actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::JobHalted { .. }))), "{actions:?}");
    assert_eq!(ledger.mode(), JobMode::Halted);
    // A restart already under way is not run in a halted job; nothing new starts.
    assert!(matches!(clean(&mut ledger, 0)[..], [Action::GiveUp { .. }]));
    assert!(spawned(&ledger.dispatch(&no_budget)).is_empty());
    assert!(!ledger.complete(), "trial 5 never ran: the job stays resumable");
    // Restarts older than the window do not count: four losses, each two windows after the
    // last, keep the job running, where four within one window (above) halt it.
    let mut spaced = self::ledger(4, 4);
    spaced.dispatch(&no_budget);
    let window = rules(4).supervision.intensity_window;
    for i in 0..4 {
        let actions = spaced.lost(&name(i), error(TrialErrorKind::Internal), now + window * (i as u32 * 2));
        assert!(!actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::JobHalted { .. }))), "{i}: {actions:?}");
    }
    assert_eq!(spaced.mode(), JobMode::Running);
    assert_eq!(spaced.live().n_restarts, 4);
}

#[test]
fn an_engine_outage_requeues_without_using_an_attempt_and_pauses_dispatch() {
    let mut ledger = ledger(3, 2);
    ledger.dispatch(&no_budget);
    let actions = ledger.engine_unavailable(&name(0), "ping timed out".into());
    assert!(actions.iter().any(|a| matches!(a, Action::Emit(RunEvent::EngineWaiting { .. }))));
    assert!(actions.iter().any(|a| matches!(a, Action::WaitForEngine)));
    assert!(actions.iter().any(|a| matches!(a, Action::CleanUp { after_outage: true, .. })));
    // A second trial failing the same way does not start a second wait.
    let second = ledger.engine_unavailable(&name(1), "ping timed out".into());
    assert!(!second.iter().any(|a| matches!(a, Action::WaitForEngine)), "{second:?}");
    clean(&mut ledger, 0);
    clean(&mut ledger, 1);
    assert!(spawned(&ledger.dispatch(&no_budget)).is_empty(), "the engine is away");
    ledger.engine_back();
    let resumed = spawned(&ledger.dispatch(&no_budget));
    assert_eq!(resumed, vec![name(1), name(0)]);
    assert_eq!((ledger.live().n_retries, ledger.live().n_restarts), (0, 0));
    // Requeues are bounded: the sixth outage of one trial is its result.
    for _ in 1..MAX_ENGINE_REQUEUES {
        ledger.engine_unavailable(&name(0), "away".into());
        ledger.engine_back();
        clean(&mut ledger, 0);
        ledger.dispatch(&no_budget);
        assert!(ledger.is_running(&name(0)));
    }
    let last = ledger.engine_unavailable(&name(0), "away".into());
    assert!(matches!(&last[..], [Action::GiveUp { slot, .. }] if slot.requeues == MAX_ENGINE_REQUEUES), "{last:?}");
}

#[test]
fn the_watchdog_counts_only_its_current_arming_and_never_while_the_cluster_queues() {
    let mut ledger = ledger(1, 1);
    ledger.dispatch(&no_budget);
    let budget = Duration::from_secs(100);
    let armed = ledger.budget(&name(0), Some(budget));
    assert!(matches!(armed[..], [Action::ArmWatchdog { watch: 0, .. }]), "{armed:?}");
    assert!(ledger.queued(&name(0), true).is_empty(), "queued: no arming");
    assert!(ledger.overdue(&name(0), budget, 0, Instant::now()).is_empty(), "an older arming's timer");
    let placed = ledger.queued(&name(0), false);
    assert!(matches!(placed[..], [Action::ArmWatchdog { watch: 2, .. }]), "{placed:?}");
    let fired = ledger.overdue(&name(0), budget, 2, Instant::now());
    assert!(matches!(fired.first(), Some(Action::Kill(t)) if *t == name(0)), "{fired:?}");
    assert!(fired.iter().any(|a| matches!(a, Action::CleanUp { after_outage: false, .. })), "restarted: {fired:?}");
    // No budget (an agent without a time limit): never armed.
    let mut unlimited = self::ledger(1, 1);
    unlimited.dispatch(&no_budget);
    assert!(unlimited.budget(&name(0), None).is_empty());
}

#[test]
fn an_overdue_trial_while_the_engine_is_away_waits_for_it_instead_of_using_a_restart() {
    let mut ledger = ledger(2, 2);
    ledger.dispatch(&no_budget);
    ledger.engine_unavailable(&name(1), "away".into());
    ledger.budget(&name(0), Some(Duration::from_secs(5)));
    let fired = ledger.overdue(&name(0), Duration::from_secs(5), 0, Instant::now());
    assert!(fired.iter().any(|a| matches!(a, Action::CleanUp { after_outage: true, .. })), "{fired:?}");
    assert_eq!(ledger.live().n_restarts, 0);
}

#[test]
fn a_spent_budget_holds_unstarted_trials_pending_and_says_so_once() {
    let mut ledger = Ledger::<Outcome>::new(rules(4), vec![slot(0, 0), slot(1, 1), slot(2, 0)], Vec::new(), 0, 0);
    let spent = |agent: usize| (agent == 0).then(|| "agent 0 spent $5.00 of $5.00".to_string());
    let actions = ledger.dispatch(&spent);
    assert_eq!(spawned(&actions), vec![name(1)], "only the agent with budget left runs");
    let said = actions.iter().filter(|a| matches!(a, Action::Emit(RunEvent::BudgetReached { .. }))).count();
    assert_eq!(said, 1);
    assert_eq!(ledger.n_held(), 2);
    ledger.finished_trial(&name(1), outcome(1, "done"), None, 0.5);
    assert!(finishes(&ledger.dispatch(&spent)));
    assert!(!ledger.complete(), "held trials are pending for a resume");
    assert_eq!(ledger.live().n_pending, 2);
}

#[test]
fn a_full_disk_halts_the_job_and_keeps_the_trial_pending() {
    let mut ledger = ledger(2, 1);
    ledger.dispatch(&no_budget);
    let actions = ledger.disk_full(&name(0), "No space left on device");
    assert!(matches!(actions[..], [Action::Emit(RunEvent::JobHalted { .. })]));
    assert_eq!(ledger.mode(), JobMode::Halted);
    assert!(finishes(&ledger.dispatch(&no_budget)), "nothing runs: the job ends, resumable");
    assert_eq!(ledger.live().n_pending, 2);
    assert!(!ledger.complete());
}

#[test]
fn cancel_stops_the_queue_asks_running_trials_and_records_what_waits() {
    let mut ledger = ledger(5, 3);
    ledger.dispatch(&no_budget);
    ledger.finished_trial(&name(0), outcome(0, "attempt 1"), Some(TrialErrorKind::Runtime), 0.5);
    ledger.lost(&name(1), error(TrialErrorKind::EnvironmentLost), Instant::now());
    let actions = ledger.cancel();
    assert!(matches!(actions.first(), Some(Action::CancelRunning)));
    assert!(
        actions.iter().any(|a| matches!(a, Action::Recorded { trial, write: true } if *trial == name(0))),
        "the waiting trial's last attempt is its result: {actions:?}"
    );
    assert_eq!(ledger.finished(), &[outcome(0, "attempt 1")]);
    // Trial 1 was being cleaned up for a restart: it is given up instead.
    assert!(matches!(clean(&mut ledger, 1)[..], [Action::GiveUp { .. }]));
    assert!(spawned(&ledger.dispatch(&no_budget)).is_empty(), "nothing new starts");
    // Trials 3 and 4 never started: the job's total no longer counts them.
    assert_eq!(ledger.n_total(), 3);
    assert!(ledger.cancel().is_empty(), "a second cancel does nothing");
    ledger.finished_trial(&name(2), outcome(2, "cancelled"), Some(TrialErrorKind::Cancelled), 0.5);
    assert!(finishes(&ledger.dispatch(&no_budget)));
    assert!(!ledger.complete());
}

fn gave_up(actions: &[Action]) -> Vec<(TrialName, TrialErrorKind)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::GiveUp { slot, error } => Some((slot.name.clone(), error.kind)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_paused_job_starts_nothing_and_stays_open_until_resumed() {
    let mut ledger = ledger(3, 2);
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(0), name(1)]);
    let paused = ledger.set_paused(true).unwrap();
    assert!(paused.iter().any(|a| matches!(a, Action::Emit(RunEvent::Controlled { .. }))));
    assert!(ledger.set_paused(true).unwrap().is_empty(), "pausing twice says nothing more");
    ledger.finished_trial(&name(0), outcome(0, "done"), None, 0.5);
    ledger.finished_trial(&name(1), outcome(1, "done"), None, 0.5);
    let idle = ledger.dispatch(&no_budget);
    assert!(spawned(&idle).is_empty() && !finishes(&idle), "paused: trial 2 waits, the job stays open");
    assert!(ledger.paused() && !ledger.closed());
    ledger.set_paused(false).unwrap();
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(2)]);
    // Paused with nothing left, the job stays open (a finished trial can still be retried) until
    // it is resumed or cancelled.
    ledger.set_paused(true).unwrap();
    ledger.finished_trial(&name(2), outcome(2, "done"), None, 0.5);
    assert!(!finishes(&ledger.dispatch(&no_budget)), "paused: open with nothing left");
    ledger.set_paused(false).unwrap();
    assert!(finishes(&ledger.dispatch(&no_budget)), "resumed with nothing left: it ends");
}

#[test]
fn a_paused_job_ends_when_cancelled() {
    let mut ledger = ledger(2, 1);
    ledger.dispatch(&no_budget);
    ledger.set_paused(true).unwrap();
    ledger.cancel();
    ledger.finished_trial(&name(0), outcome(0, "cancelled"), Some(TrialErrorKind::Cancelled), 0.5);
    assert!(finishes(&ledger.dispatch(&no_budget)));
}

#[test]
fn a_cancelled_trial_never_runs_again_wherever_it_was() {
    let mut ledger = ledger(5, 2);
    ledger.dispatch(&no_budget);
    // Running: asked to stop, and its failure is not retried.
    let actions = ledger.cancel_trial(&name(0)).unwrap();
    assert!(actions.iter().any(|a| matches!(a, Action::CancelTrial(t) if *t == name(0))));
    assert!(ledger.cancel_trial(&name(0)).unwrap().is_empty(), "asked once");
    let ended = ledger.finished_trial(&name(0), outcome(0, "cancelled"), Some(TrialErrorKind::Runtime), 0.0);
    assert!(matches!(ended[..], [Action::Recorded { .. }]), "not retried: {ended:?}");
    // Queued: it never starts; its error is its result.
    assert_eq!(gave_up(&ledger.cancel_trial(&name(3)).unwrap()), vec![(name(3), TrialErrorKind::Cancelled)]);
    // Running, then lost: no restart.
    ledger.cancel_trial(&name(1)).unwrap();
    let lost = ledger.lost(&name(1), error(TrialErrorKind::EnvironmentLost), Instant::now());
    assert!(matches!(lost[..], [Action::CleanUp { .. }]), "{lost:?}");
    assert_eq!(gave_up(&clean(&mut ledger, 1)), vec![(name(1), TrialErrorKind::Cancelled)]);
    // Waiting out a backoff: its last attempt is its result; it does not come back when the
    // timer fires.
    let started = spawned(&ledger.dispatch(&no_budget));
    assert_eq!(started, vec![name(2), name(4)]);
    ledger.finished_trial(&name(2), outcome(2, "attempt 1"), Some(TrialErrorKind::Runtime), 0.0);
    let actions = ledger.cancel_trial(&name(2)).unwrap();
    assert!(actions.iter().any(|a| matches!(a, Action::Recorded { trial, write: true } if *trial == name(2))));
    assert_eq!(ledger.finished().last(), Some(&outcome(2, "attempt 1")));
    assert!(ledger.retry_due(&name(2)).is_empty());
    assert!(ledger.live_slots().iter().all(|(s, _)| s.name != name(2)));
    // Unknown and finished trials are refused by kind.
    let stranger = TrialName::with_suffix("task", "nobody");
    assert_eq!(ledger.cancel_trial(&stranger).unwrap_err(), ControlRefusal::UnknownTrial(stranger));
    assert_eq!(ledger.cancel_trial(&name(0)).unwrap_err(), ControlRefusal::AlreadyFinished(name(0)));
}

#[test]
fn a_retried_trial_archives_its_attempt_and_goes_first_in_line() {
    let mut ledger = ledger(3, 1);
    ledger.dispatch(&no_budget);
    assert_eq!(ledger.retry_trial(&name(0), Some(slot(0, 0))).unwrap_err(), ControlRefusal::NotFinished(name(0)));
    assert_eq!(ledger.retry_trial(&name(1), Some(slot(1, 0))).unwrap_err(), ControlRefusal::NotFinished(name(1)));
    ledger.finished_trial(&name(0), outcome(0, "done"), None, 0.5);
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(1)]);
    let total = ledger.n_total();
    let actions = ledger.retry_trial(&name(0), Some(slot(0, 0))).unwrap();
    assert!(
        actions.iter().any(
            |a| matches!(a, Action::RetryLater { trial, attempt: 0, wait } if *trial == name(0) && wait.is_zero())
        ),
        "{actions:?}"
    );
    assert!(ledger.finished().is_empty(), "its result is set aside");
    assert_eq!((ledger.n_total(), ledger.live().n_retries), (total, 1));
    assert_eq!(ledger.retry_trial(&name(0), Some(slot(0, 0))).unwrap_err(), ControlRefusal::NotFinished(name(0)));
    ledger.retry_due(&name(0));
    ledger.finished_trial(&name(1), outcome(1, "done"), None, 0.5);
    let next = ledger.dispatch(&no_budget);
    let [Action::Spawn(again)] = &next[..] else { panic!("{next:?}") };
    assert_eq!((again.name.clone(), again.retries), (name(0), 1), "before trial 2, with one retry more");
}

#[test]
fn a_closed_job_refuses_a_retry_and_keeps_the_result() {
    let mut ledger = ledger(2, 2);
    ledger.dispatch(&no_budget);
    ledger.finished_trial(&name(0), outcome(0, "done"), None, 0.5);
    ledger.cancel();
    assert_eq!(ledger.retry_trial(&name(0), Some(slot(0, 0))).unwrap_err(), ControlRefusal::Closed);
    assert_eq!(ledger.finished(), &[outcome(0, "done")]);
}

#[test]
fn a_raised_budget_puts_held_trials_back_in_their_order() {
    let mut ledger = ledger(4, 2);
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(0), name(1)]);
    ledger.finished_trial(&name(0), outcome(0, "done"), None, 0.5);
    let spent = |_: usize| Some("the job's budget is spent".to_string());
    let held = ledger.dispatch(&spent);
    assert!(spawned(&held).is_empty() && !finishes(&held), "trial 1 still runs");
    assert_eq!(ledger.n_held(), 2);
    ledger.release_held();
    assert_eq!(spawned(&ledger.dispatch(&no_budget)), vec![name(2)], "within the limit, in order");
    assert_eq!(ledger.n_held(), 0);
}

#[test]
fn a_retry_cancelled_before_it_runs_keeps_the_result_it_had() {
    let mut ledger = ledger(2, 1);
    ledger.dispatch(&no_budget);
    ledger.finished_trial(&name(0), outcome(0, "solved"), None, 0.5);
    ledger.dispatch(&no_budget);
    ledger.retry_trial(&name(0), Some(slot(0, 0))).unwrap();
    let actions = ledger.cancel_trial(&name(0)).unwrap();
    assert!(actions.iter().any(|a| matches!(a, Action::Recorded { write: true, .. })), "{actions:?}");
    assert!(ledger.finished().contains(&outcome(0, "solved")));
}

#[test]
fn a_cancelled_trial_that_meets_a_full_disk_is_not_queued_again() {
    let mut ledger = ledger(2, 1);
    ledger.dispatch(&no_budget);
    ledger.cancel_trial(&name(0)).unwrap();
    assert_eq!(gave_up(&ledger.disk_full(&name(0), "no space")), vec![(name(0), TrialErrorKind::Cancelled)]);
    assert_eq!(ledger.n_queued(), 1, "only the other trial is queued");
}
