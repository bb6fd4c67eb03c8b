//! Talking to language models.
//!
//! Architecture invariant: this is the only crate that speaks HTTP to model providers. It knows
//! nothing about ractor, Docker or Terminus' prompt format; it takes a list of chat messages and
//! returns one reply with its usage, or a typed [`LlmError`] the agent can react to.
//!
//! Providers are chosen from the model name's LiteLLM prefix ([`providers`], [`settings`]):
//! `anthropic/…` uses the native Messages API, `oracle` is the offline model that runs a task's
//! reference solution, `azure/…` an Azure OpenAI deployment, and the other known prefixes an
//! OpenAI-compatible chat-completions endpoint; an unknown prefix is refused. One retry layer
//! ([`retry`]) and one limiter ([`limiter`]: concurrency with adaptive back-off, requests and
//! tokens per minute) sit in front of every provider.

pub mod anthropic;
pub mod error;
mod http;
pub mod limiter;
pub mod openai;
pub mod oracle;
pub mod preflight;
pub mod probe;
pub use terminus_core::models;
pub mod provider;
pub mod providers;
pub mod retry;
pub mod settings;
pub use terminus_core::llm as types;
mod wire;

pub use error::LlmError;
pub use provider::Provider;
pub use settings::{ProviderKind, ProviderSettings};
pub use types::{ChatMessage, LlmRequest, LlmResponse, Usage};
