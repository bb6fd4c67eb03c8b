//! Registries on the network, as this crate sees them: the hub's address ([`HubApi`]), what can
//! go wrong asking one ([`RemoteProblem`]), and the [`Resolver`] that asks. This crate does no
//! network I/O: the program installs a resolver once ([`install_resolver`]; the `terminus`
//! binary installs terminus-fetch's, which keeps what each name resolved to in the task cache),
//! and [`resolve`] goes through it for a network registry, or reads the file for a file one.

use std::sync::{Arc, RwLock};

use super::{DatasetSpec, Registry, RegistryError, RegistryLocation};

/// The variable that points Harbor's hub client (and terminus) at another hub API.
pub const HUB_URL_ENV: &str = "HARBOR_SUPABASE_URL";
/// The variable that gives the hub API's publishable key.
pub const HUB_KEY_ENV: &str = "HARBOR_SUPABASE_PUBLISHABLE_KEY";
/// Harbor's hub API (a Supabase project), as Harbor 0.25 and 0.26 name it.
pub const HUB_URL: &str = "https://hlqxxzsirfrgeqasvaps.supabase.co";
/// Harbor's publishable key for it: meant to be public, it lets anyone read the registry.
pub const HUB_KEY: &str = "sb_publishable_RGMKhIM1NKzZ8bL3qCVNuA_5TsD6rbF";

/// The Harbor hub's read API: its base URL and the publishable key it is asked with.
#[derive(Clone, PartialEq, Eq)]
pub struct HubApi {
    pub url: String,
    pub key: String,
}

impl HubApi {
    /// The hub Harbor's client asks: `HARBOR_SUPABASE_URL` and `HARBOR_SUPABASE_PUBLISHABLE_KEY`
    /// when set (and not empty), else Harbor's own.
    pub fn from_env() -> HubApi {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        HubApi {
            url: var(HUB_URL_ENV).unwrap_or_else(|| HUB_URL.to_string()).trim_end_matches('/').to_string(),
            key: var(HUB_KEY_ENV).unwrap_or_else(|| HUB_KEY.to_string()),
        }
    }
}

// The key is publishable, but a key all the same: it stays out of debug output.
impl std::fmt::Debug for HubApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubApi").field("url", &self.url).finish_non_exhaustive()
    }
}

/// Why a registry on the network gave no dataset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteProblem {
    #[error(
        "{url} cannot be reached: {reason} (offline, a registry file is read with registry_path / --registry-path)"
    )]
    Unreachable { url: String, reason: String },
    #[error("{url} did not answer within {secs} s")]
    TimedOut { url: String, secs: u64 },
    #[error("{url} answered HTTP {status}: {head}")]
    Status { url: String, status: u16, head: String },
    #[error("{url} sent more than {limit_mib} MiB: not read further")]
    TooLarge { url: String, limit_mib: u64 },
    #[error("{url} sent what is not {expected} ({message}); it began: {head}")]
    Malformed { url: String, expected: &'static str, message: String, head: String },
    #[error("repository {url}: {message}")]
    Git { url: String, message: String },
    #[error("repository {url} has no `{file}` at commit {commit}")]
    NoRegistryFile { url: String, file: String, commit: String },
}

/// A dataset a registry gave, and how.
#[derive(Clone, Debug)]
pub struct Resolution {
    pub spec: DatasetSpec,
    /// Set when the dataset came from the cache of an earlier resolution instead of the
    /// registry: why, and from when, for the user to read.
    pub from_cache: Option<String>,
}

/// Asks registries on the network for datasets.
pub trait Resolver: Send + Sync {
    /// Dataset `name` at `version` (or at the version Harbor's rule picks) of the network
    /// registry `location`.
    fn resolve(
        &self,
        location: &RegistryLocation,
        name: &str,
        version: Option<&str>,
    ) -> Result<Resolution, RegistryError>;
}

static RESOLVER: RwLock<Option<Arc<dyn Resolver>>> = RwLock::new(None);

/// Makes `resolver` the one every later [`resolve`] of a network registry asks.
pub fn install_resolver(resolver: Arc<dyn Resolver>) {
    *RESOLVER.write().unwrap_or_else(|e| e.into_inner()) = Some(resolver);
}

/// Dataset `name` (at `version`, or the best one) of the registry at `location`: read from the
/// file, or asked of the installed resolver.
pub fn resolve(location: &RegistryLocation, name: &str, version: Option<&str>) -> Result<Resolution, RegistryError> {
    if name.contains('/') {
        return Err(RegistryError::Package { name: name.to_string() });
    }
    if location.path().is_some() {
        let registry = Registry::read(location)?;
        return Ok(Resolution { spec: registry.dataset(name, version)?.clone(), from_cache: None });
    }
    let resolver = RESOLVER.read().unwrap_or_else(|e| e.into_inner()).clone();
    match resolver {
        Some(resolver) => resolver.resolve(location, name, version),
        None => Err(RegistryError::NoResolver { registry: location.to_string() }),
    }
}
