//! Errors of the sandbox layer. Each names what it acted on (image tag, container, path).

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot reach the Docker engine: {0}")]
    Connect(String),
    #[error("failed to build image `{tag}`: {message}")]
    Build { tag: String, message: String },
    #[error("image `{image}` is not on this engine and could not be pulled: {message}")]
    Pull { image: String, message: String },
    #[error("failed to create or start container `{name}`: {message}")]
    Start { name: String, message: String },
    #[error("failed to exec in container `{container}`: {message}")]
    Exec { container: String, message: String },
    #[error("`{what}` in container `{container}` timed out after {:.1} s", .after.as_secs_f64())]
    Timeout { container: String, what: String, after: Duration },
    #[error("failed to copy `{path}` {direction} container `{container}`: {message}")]
    Transfer { container: String, path: String, direction: &'static str, message: String },
    #[error("the command channel into container `{container}` is closed: {message}")]
    ChannelClosed { container: String, message: String },
    #[error("docker API error: {0}")]
    Api(String),
    #[error("archive error: {0}")]
    Archive(#[from] std::io::Error),
}
