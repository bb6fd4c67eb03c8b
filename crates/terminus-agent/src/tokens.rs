//! Counting the tokens of a conversation, for proactive summarization and unwinding.
//!
//! A real BPE (tiktoken's cl100k_base, embedded in the binary, no download) with the usual
//! chat framing of OpenAI's cookbook: three tokens per message for its role and separators, plus
//! three to prime the reply. The vocabulary is loaded once per process, on first use, and shared.
//! It is an estimate for models with other tokenizers, which is all the threshold needs.

use std::sync::OnceLock;

use terminus_core::llm::ChatMessage;
use tiktoken_rs::CoreBPE;

fn bpe() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::cl100k_base().ok()).as_ref()
}

/// Tokens of one text.
pub fn count_text(text: &str) -> usize {
    match bpe() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        // Unreachable with the embedded vocabulary; a rough bytes/4 keeps the caller working.
        None => text.len().div_ceil(4),
    }
}

/// Tokens a chat request adds once, whatever its messages.
pub const PRIMING_TOKENS: usize = 3;
/// Tokens each message adds for its framing, besides its role and content.
pub const PER_MESSAGE_TOKENS: usize = 3;

/// Tokens one message costs in a chat request.
pub fn count_message(message: &ChatMessage) -> usize {
    PER_MESSAGE_TOKENS + count_text(&message.role) + count_text(&message.content)
}

/// Tokens of a conversation as a chat request would send it.
pub fn count_messages(messages: &[ChatMessage]) -> usize {
    messages.iter().map(count_message).sum::<usize>() + PRIMING_TOKENS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_tiktoken() {
        // "hello world" is two cl100k tokens.
        assert_eq!(count_text("hello world"), 2);
        let messages = vec![ChatMessage::user("hello world"), ChatMessage::assistant("hi")];
        // 3 + 1 (user) + 2, 3 + 1 (assistant) + 1, + 3.
        assert_eq!(count_messages(&messages), 14);
    }
}
