//! The exit codes of `terminus`, as the crate root's doc lists them.

pub const OK: u8 = 0;
pub const TRIAL_ERRORS: u8 = 1;
pub const INVALID: u8 = 2;
pub const NO_DOCKER: u8 = 3;
pub const HALTED: u8 = 4;
pub const BUSY: u8 = 5;
pub const BUDGET: u8 = 6;
pub const INTERRUPTED: u8 = 130;
