//! What can go wrong with the agent's terminal.

/// What can go wrong with the terminal.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TmuxError {
    /// The shell channel into the container failed (the container may be gone).
    #[error("{0}")]
    Channel(String),
    #[error("tmux is not installed in the task image and could not be installed")]
    NotInstalled,
    #[error("failed to start tmux session: {0}")]
    Start(String),
    /// A tmux command exited non-zero.
    #[error("{what} failed: {output}")]
    Command { what: &'static str, output: String },
    #[error("the capture lost its separator")]
    Garbled,
    #[error("no reply in time")]
    Timeout,
    #[error("the tmux session actor is gone")]
    Gone,
}
