//! Configuration errors. Each one names the file and, where there is one, the key, so a user
//! can go straight to the line to fix.

use std::path::PathBuf;

/// Why a job file or a task could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is not valid YAML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("`{path}`: key `{key}`: {message}")]
    Invalid { path: PathBuf, key: String, message: String },
    /// An agent's `prompt_template` file cannot be read or is not a usable template.
    #[error("`{path}`: key `{key}`: template `{template}`: {problem}")]
    PromptTemplate {
        path: PathBuf,
        key: String,
        template: PathBuf,
        #[source]
        problem: Box<crate::terminus::TemplateProblem>,
    },
    /// A registry dataset that cannot be used: its registry, the dataset, a version or a task.
    #[error("`{path}`: key `{key}`: {source}")]
    Registry {
        path: PathBuf,
        key: String,
        #[source]
        source: Box<crate::registry::RegistryError>,
    },
    #[error("task `{task}`: {message}")]
    Task { task: PathBuf, message: String },
}

impl ConfigError {
    pub(crate) fn invalid(path: &std::path::Path, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: path.to_path_buf(), key: key.into(), message: message.into() }
    }
}
