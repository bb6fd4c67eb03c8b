//! Terminus 2, the agent, as pure logic: the prompt it sends, the parser of the model's replies,
//! the observation it builds from terminal output, the episode state machine with its registers,
//! and the ATIF trajectory it records.
//!
//! Architecture invariant: no I/O and no async here. The Trial actor feeds this crate model
//! replies and terminal output and carries out what it decides (send keys, wait, ask again),
//! which keeps every behaviour of the reference testable without Docker or HTTP.

pub mod agent_loop;
#[cfg(test)]
mod fuzz;
pub mod limit;
pub mod parser;
pub mod prompts;
pub mod pydump;
pub mod pyjson;
pub mod pyrepr;
pub mod recording;
pub mod summarize;
pub mod tokens;
pub mod trajectory;
pub mod xml_parser;

pub use agent_loop::{
    Action, AgentLoop, Command, Finish, LoopSettings, ModelTurn, Next, Reply, ResponseLog, SummaryPurpose, Totals,
};
pub use parser::{ParseResult, ParsedCommand, parse_json_response};
