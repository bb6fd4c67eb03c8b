//! The container side of a trial, as plain async functions the Trial's effects run in spawned
//! tasks, one module per concern: [`provision`] (image, main container, sidecars, proxy),
//! [`network`] (each phase's access), [`verify`] (tests and rewards), [`collect`] (logs,
//! artifacts, teardown) and [`check`] (liveness, the oracle). A separate verifier's environment
//! is started with the same code ([`separate`]); [`steps`] runs a multi-step task's phases.

mod check;
mod collect;
mod network;
mod provision;
mod separate;
mod skills;
pub mod steps;
mod tamper;
mod verify;
mod warden;

pub use check::{ContainerCheck, check_container, run_oracle};
pub use collect::{
    CopyLimits, MAX_MERGED_CAST_BYTES, close_terminal, collect_and_remove, collect_artifacts, remove, seal_recording,
    settle_terminal,
};
pub use network::enter_phase;
pub use provision::{Provisioned, Stopped, TaskLoaded, provision};
pub use skills::{find_skills, inject_skills};
pub use verify::{
    Grading, MAX_REWARD_FILE_BYTES, TestRun, prepare_verification, read_rewards, run_tests, upload_test_dirs,
    upload_tests, verifier_env, verify_task,
};
pub use warden::{ProcessCensus, Reset, Sweep, TerminalReady, thaw};

pub use separate::{SeparateState, SeparateVerify, verify_separately, with_convention};
