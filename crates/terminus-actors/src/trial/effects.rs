//! Everything a Trial does that is not in-memory: the [`Effects`] seam between the state machine
//! ([`super::stage`]) and the world, and [`LiveEffects`], its implementation over Docker, tmux,
//! the LLM actor and the disk.
//!
//! Every slow operation (provisioning, terminal set-up, tmux requests, model calls,
//! verification, teardown, container checks) runs in a spawned task that reports back with one
//! [`TrialEvent`] ([`Delivery::Event`]), stamped with the generation it started in. The machine
//! calls [`Effects::invalidate`] when it abandons what is in flight (a deadline, a cancel, the
//! end of the agent), so late replies arrive stale and are dropped by the shell. A task that
//! panics delivers [`Delivery::Panicked`] at once, and the trial fails (to be restarted) instead
//! of waiting for a reply that never comes. Deliveries reach the Trial's inbox through a
//! `DerivedActorRef<Delivery>`, so this file does not depend on the actor that uses it.
//!
//! Waits are timers (`send_after`), and small file writes (trajectories, episode logs, the
//! result) happen in place: they are the record of what happened and must stay in order.

mod events;
mod live;
mod replay;
mod seam;

pub use events::{Delivery, OracleRun, StepVerify, TeardownPlan, TerminalSetup, TerminalStart, TrialEvent, VerifyPlan};
pub use live::LiveEffects;
pub use seam::Effects;
