//! The conversation sent to the model, each message's token count kept beside it.
//!
//! The chat changes only at its end (a prompt and its reply) and, at a summarization or an
//! unwinding, by losing its tail; so a message is counted at most once, and the check before each
//! episode (proactive summarization) costs the new messages, not the whole history.
//! A message is not counted at all while the conversation's bytes show it is far from the limit
//! (a token covers at least one byte): the tokenizer runs only near the limit. Reads go through
//! `Deref` to the messages.

use std::ops::Deref;

use terminus_core::llm::ChatMessage;

use crate::tokens;

#[derive(Clone, Debug, Default)]
pub struct Chat {
    messages: Vec<ChatMessage>,
    /// `counts[i]`: the exact count of `messages[i]` ([`tokens::count_message`]), once one was
    /// needed.
    counts: Vec<Option<usize>>,
    /// Σ over the messages of the exact count where known, else [`upper_bound`].
    bound: usize,
}

/// At least the tokens of a message: every cl100k token covers at least one byte.
fn upper_bound(message: &ChatMessage) -> usize {
    tokens::PER_MESSAGE_TOKENS + message.role.len() + message.content.len()
}

impl Chat {
    pub fn push(&mut self, message: ChatMessage) {
        self.bound += upper_bound(&message);
        self.counts.push(None);
        self.messages.push(message);
    }

    /// Keeps the first `len` messages.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.messages.len());
        for (message, count) in self.messages.drain(len..).zip(self.counts.drain(len..)) {
            self.bound -= count.unwrap_or_else(|| upper_bound(&message));
        }
    }

    /// Whether the conversation, as a chat request would send it ([`tokens::count_messages`]),
    /// holds more than `limit` tokens. Exact, but messages are counted (BPE, the costly part)
    /// only while the bytes alone cannot settle it, newest first; a count, once made, is kept.
    pub fn exceeds(&mut self, limit: i64) -> bool {
        let total = |bound: usize| (bound + tokens::PRIMING_TOKENS) as i64;
        for i in (0..self.messages.len()).rev() {
            if total(self.bound) <= limit {
                return false;
            }
            if self.counts[i].is_none() {
                let count = tokens::count_message(&self.messages[i]);
                self.bound = self.bound - upper_bound(&self.messages[i]) + count;
                self.counts[i] = Some(count);
            }
        }
        total(self.bound) > limit
    }

    /// Tokens of the conversation as a chat request would send it (every message counted).
    #[cfg(test)]
    pub fn tokens(&mut self) -> usize {
        self.exceeds(-1);
        self.bound + tokens::PRIMING_TOKENS
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

    fn check(chat: &mut Chat) {
        let exact = tokens::count_messages(chat) as i64;
        // Decisions at, around and far from the exact count are the exact count's decisions.
        for limit in [-1, 0, exact - 100, exact - 1, exact, exact + 1, exact + 100, exact * 4] {
            assert_eq!(chat.clone().exceeds(limit), exact > limit, "limit {limit}, exact {exact}");
        }
        assert_eq!(chat.tokens() as i64, exact);
    }

    #[test]
    fn decisions_and_counts_are_exact_after_every_change() {
        let mut chat = Chat::default();
        check(&mut chat);
        for i in 0..6 {
            chat.push(ChatMessage::user(format!("prompt {i} with some words")));
            chat.push(ChatMessage::assistant("é".repeat(i * 10)));
            check(&mut chat);
        }
        chat.truncate(7);
        check(&mut chat);
        chat.truncate(1);
        check(&mut chat);
        chat.truncate(5);
        check(&mut chat);
        chat.push(ChatMessage::user("again"));
        check(&mut chat);
        assert_eq!(chat.len(), 2);
    }

    #[test]
    fn far_from_the_limit_nothing_is_counted() {
        let mut chat = Chat::default();
        for i in 0..40 {
            chat.push(ChatMessage::user(format!("{i} ").repeat(2000)));
        }
        assert!(!chat.exceeds(1_000_000));
        assert!(chat.counts.iter().all(Option::is_none), "the bytes settled it");
        // Near the limit the newest messages are counted until the answer is known.
        let exact = tokens::count_messages(&chat) as i64;
        assert!(!chat.exceeds(exact));
        assert!(chat.exceeds(exact - 1));
        assert!(chat.counts.iter().all(Option::is_some));
    }
}
