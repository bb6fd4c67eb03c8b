//! Integration tests: the real `terminus` binary, a real Docker engine, real HTTP on loopback.
//!
//! Tests that need Docker call [`support::docker`] first: without an engine they print a skip
//! notice, unless `TERMINUS_REQUIRE_DOCKER=1` (set by `scripts/test.sh`), which makes them fail.

#![expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "tests drive the binary and its helpers as processes, and inspect the engine directly"
)]

mod adversary;
mod bounded;
mod cli;
mod compat;
mod control;
mod datasets;
mod differential;
mod forgery;
mod golden;
mod harbor_io;
mod jobs;
mod llm;
mod orchestrator;
mod parity;
mod preflight;
mod private_images;
mod real_model;
mod registries;
mod replay;
mod runaway;
mod sandbox;
mod scenarios;
mod scores;
mod separate_verifier;
mod serve;
mod steps;
mod support;
mod swarm;
mod traces;
mod view;
