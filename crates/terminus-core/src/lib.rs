//! The vocabulary every other terminus crate shares: identifiers, the Harbor-compatible result
//! records written to disk, and the events reporters consume.
//!
//! Architecture invariant: this crate knows nothing about tokio, ractor, Docker or HTTP. It is
//! plain data plus the pure functions that belong to that data (naming, statistics), so it can be
//! tested without a runtime and read by any reporter.

pub mod atif;
pub mod cluster;
pub mod confinement;
pub mod control;
pub mod error;
pub mod error_policy;
pub mod events;
pub mod ids;
pub mod layout;
pub mod llm;
pub mod lock;
pub mod models;
pub mod replay;
pub mod result;
pub mod secrets;
pub mod stats;
pub mod template;
pub mod texts;
pub mod time;
pub mod tree;
pub mod utf8;
