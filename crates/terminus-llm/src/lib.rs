//! Talking to language models.
//!
//! Architecture invariant: this is the only crate that speaks HTTP to model providers. It knows
//! nothing about ractor, Docker or Terminus' prompt format; it takes a list of chat messages and
//! returns one reply with its usage, or a typed [`LlmError`] the agent can react to.
//!
//! Providers are chosen from the model name: `oracle` is the offline scripted model that runs a
//! task's reference solution; everything else goes to an OpenAI-compatible chat-completions
//! endpoint (`api_base`, else `OPENAI_API_BASE`, else OpenAI's).

pub mod error;
pub mod openai;
pub mod oracle;
pub use terminus_core::models;
pub mod provider;
pub mod retry;
pub use terminus_core::llm as types;

pub use error::LlmError;
pub use provider::Provider;
pub use types::{ChatMessage, LlmRequest, LlmResponse, Usage};
