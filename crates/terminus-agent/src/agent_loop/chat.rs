//! The conversation sent to the model, each message's token count kept beside it.
//!
//! The chat changes only at its end (a prompt and its reply) and, at a summarization or an
//! unwinding, by losing its tail; so counting it before each episode (proactive summarization,
//! seed 001) costs the new messages, not the whole history. Reads go through `Deref` to the
//! messages.

use std::ops::Deref;

use terminus_core::llm::ChatMessage;

use crate::tokens;

#[derive(Clone, Debug, Default)]
pub struct Chat {
    messages: Vec<ChatMessage>,
    /// `tokens[i]` is the count of `messages[i]` ([`tokens::count_message`]).
    tokens: Vec<usize>,
    total: usize,
}

impl Chat {
    pub fn push(&mut self, message: ChatMessage) {
        let count = tokens::count_message(&message);
        self.total += count;
        self.tokens.push(count);
        self.messages.push(message);
    }

    /// Keeps the first `len` messages.
    pub fn truncate(&mut self, len: usize) {
        self.messages.truncate(len);
        for count in self.tokens.drain(len.min(self.tokens.len())..) {
            self.total -= count;
        }
    }

    /// Tokens of the conversation as a chat request would send it ([`tokens::count_messages`]).
    pub fn tokens(&self) -> usize {
        self.total + tokens::PRIMING_TOKENS
    }
}

impl Deref for Chat {
    type Target = [ChatMessage];

    fn deref(&self) -> &[ChatMessage] {
        &self.messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_count_is_the_full_count_after_every_change() {
        let mut chat = Chat::default();
        let check = |chat: &Chat| assert_eq!(chat.tokens(), tokens::count_messages(chat));
        check(&chat);
        for i in 0..6 {
            chat.push(ChatMessage::user(format!("prompt {i} with some words")));
            chat.push(ChatMessage::assistant("é".repeat(i * 10)));
            check(&chat);
        }
        chat.truncate(7);
        check(&chat);
        chat.truncate(1);
        check(&chat);
        chat.truncate(5);
        check(&chat);
        chat.push(ChatMessage::user("again"));
        check(&chat);
        assert_eq!(chat.len(), 2);
    }
}
