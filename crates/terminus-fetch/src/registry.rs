//! Registries on the network, asked as Harbor 0.25's and 0.26's clients ask them:
//! [`NetworkResolver`] is the [`Resolver`] the `terminus` binary installs.
//!
//! - The Harbor hub (its read API, a Supabase project's PostgREST): the dataset's versions by
//!   `GET /rest/v1/dataset?select=version&name=eq.NAME` when none is given (the best one then
//!   picked by Harbor's rule), the dataset by `POST /rest/v1/rpc/get_dataset`
//!   (`{"p_name", "p_version"}`), both with the publishable key as `apikey` and bearer token;
//!   rows listed twice are kept once, as Harbor does.
//! - A JSON registry: one `GET` of the URL, parsed as a `registry.json`.
//!
//! Every request is bounded: [`TIMEOUT_ENV`] seconds in all (default 30) and
//! [`MAX_REGISTRY_BYTES`] of answer. What a name resolved to is kept in the task cache
//! (`<cache>/registries/<key>.json`), and a registry that cannot be reached, answers an error or
//! sends what does not parse is answered from there when it can be, saying so; otherwise the
//! error names the URL and what came back.

mod repo;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use terminus_config::registry::{
    DatasetSpec, HubApi, MAX_REGISTRY_BYTES, Registry, RegistryError, RegistryLocation, RegistryTask, RemoteProblem,
    Resolution, Resolver, TaskCache, resolve_version,
};

/// The variable that bounds one registry request, in seconds.
pub const TIMEOUT_ENV: &str = "TERMINUS_REGISTRY_TIMEOUT_SEC";
const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// How much of a refused or unparsable answer an error shows.
const HEAD_BYTES: usize = 160;

/// Asks network registries, keeping each answer in the task cache.
pub struct NetworkResolver {
    agent: ureq::Agent,
    timeout: Duration,
    cache: Option<TaskCache>,
}

impl NetworkResolver {
    /// A resolver bounded by [`TIMEOUT_ENV`] (default 30 s), remembering in `cache`.
    pub fn new(cache: Option<TaskCache>) -> NetworkResolver {
        let secs = std::env::var(TIMEOUT_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok()).filter(|s| *s > 0);
        let timeout = Duration::from_secs(secs.unwrap_or(DEFAULT_TIMEOUT_SECS));
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .user_agent(concat!("terminus/", env!("CARGO_PKG_VERSION")))
            .build();
        NetworkResolver { agent: config.into(), timeout, cache }
    }

    /// Every dataset version a network registry lists, in its order.
    pub fn list(&self, location: &RegistryLocation) -> Result<Vec<DatasetSummary>, RegistryError> {
        match location {
            RegistryLocation::Hub(api) => {
                #[derive(Deserialize)]
                struct Row {
                    name: String,
                    version: Option<String>,
                    description: Option<String>,
                    #[serde(default)]
                    dataset_task: Vec<Count>,
                }
                #[derive(Deserialize)]
                struct Count {
                    count: usize,
                }
                let url = format!("{}/rest/v1/dataset?select=name,version,description,dataset_task(count)", api.url);
                let answer = self.request(&url, &hub_headers(api), None).map_err(|p| remote(location, p))?;
                let rows: Vec<Row> =
                    parse_json(&url, &answer, "the hub's list of datasets").map_err(|p| remote(location, p))?;
                Ok(rows
                    .into_iter()
                    .map(|row| DatasetSummary {
                        name: row.name,
                        version: row.version.unwrap_or_default(),
                        description: row.description.unwrap_or_default(),
                        task_count: row.dataset_task.first().map_or(0, |c| c.count),
                    })
                    .collect())
            }
            RegistryLocation::Json(url) => {
                let body = self.request(url, &[], None).map_err(|problem| remote(location, problem))?;
                let registry = std::str::from_utf8(&body)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        Registry::parse(location, text).map_err(|e| match e {
                            RegistryError::Malformed { message, .. } => message,
                            other => other.to_string(),
                        })
                    })
                    .map_err(|message| {
                        remote(
                            location,
                            RemoteProblem::Malformed {
                                url: url.clone(),
                                expected: "a Harbor registry (a JSON list of datasets)",
                                message,
                                head: head(&body),
                            },
                        )
                    })?;
                Ok(registry.datasets.iter().map(DatasetSummary::of).collect())
            }
            RegistryLocation::File(_) => {
                Ok(Registry::read(location)?.datasets.iter().map(DatasetSummary::of).collect())
            }
            RegistryLocation::Repo(source) => {
                let (_, text) = repo::read(source).map_err(|problem| remote(location, problem))?;
                let registry = parse_repo_registry(location, &source.git_url, &text)?;
                Ok(registry.datasets.iter().map(DatasetSummary::of).collect())
            }
        }
    }

    /// The dataset as the registry gives it now.
    fn ask(
        &self,
        location: &RegistryLocation,
        name: &str,
        version: Option<&str>,
    ) -> Result<DatasetSpec, RegistryError> {
        match location {
            RegistryLocation::Hub(api) => self.ask_hub(location, api, name, version),
            RegistryLocation::Json(url) => {
                let body = self.request(url, &[], None).map_err(|problem| remote(location, problem))?;
                let malformed = |message: String| {
                    remote(
                        location,
                        RemoteProblem::Malformed {
                            url: url.clone(),
                            expected: "a Harbor registry (a JSON list of datasets)",
                            message,
                            head: head(&body),
                        },
                    )
                };
                let text = std::str::from_utf8(&body).map_err(|e| malformed(e.to_string()))?;
                let registry = Registry::parse(location, text).map_err(|e| match e {
                    RegistryError::Malformed { message, .. } => malformed(message),
                    other => other,
                })?;
                registry.dataset(name, version).cloned()
            }
            RegistryLocation::File(_) => Ok(Registry::read(location)?.dataset(name, version)?.clone()),
            RegistryLocation::Repo(source) => {
                let (commit, text) = repo::read(source).map_err(|problem| remote(location, problem))?;
                let registry = parse_repo_registry(location, &source.git_url, &text)?;
                Ok(repo::pin(registry.dataset(name, version)?.clone(), source, &commit))
            }
        }
    }

    fn ask_hub(
        &self,
        location: &RegistryLocation,
        api: &HubApi,
        name: &str,
        version: Option<&str>,
    ) -> Result<DatasetSpec, RegistryError> {
        let version = match version {
            Some(version) => version.to_string(),
            None => {
                let versions = self.hub_versions(location, api, name)?;
                resolve_version(&versions.iter().map(String::as_str).collect::<Vec<_>>())
                    .ok_or_else(|| RegistryError::UnknownDataset {
                        registry: location.to_string(),
                        name: name.to_string(),
                        known: Vec::new(),
                    })?
                    .to_string()
            }
        };
        let url = format!("{}/rest/v1/rpc/get_dataset", api.url);
        let body = json!({"p_name": name, "p_version": version});
        let answer = self.request(&url, &hub_headers(api), Some(&body)).map_err(|p| remote(location, p))?;
        let parsed: Option<HubDataset> =
            parse_json(&url, &answer, "the hub's dataset (get_dataset)").map_err(|p| remote(location, p))?;
        match parsed.filter(|d| !d.name.is_empty()) {
            Some(found) => Ok(found.into_spec()),
            None => {
                let versions = self.hub_versions(location, api, name)?;
                Err(RegistryError::UnknownVersion {
                    registry: location.to_string(),
                    name: name.into(),
                    version,
                    versions,
                })
            }
        }
    }

    /// The versions the hub lists of `name`; none is an unknown dataset.
    fn hub_versions(
        &self,
        location: &RegistryLocation,
        api: &HubApi,
        name: &str,
    ) -> Result<Vec<String>, RegistryError> {
        #[derive(Deserialize)]
        struct Row {
            version: String,
        }
        let url = format!("{}/rest/v1/dataset?select=version&name=eq.{}", api.url, percent_encode(name));
        let answer = self.request(&url, &hub_headers(api), None).map_err(|p| remote(location, p))?;
        let rows: Vec<Row> =
            parse_json(&url, &answer, "the hub's list of versions").map_err(|p| remote(location, p))?;
        if rows.is_empty() {
            return Err(RegistryError::UnknownDataset {
                registry: location.to_string(),
                name: name.to_string(),
                known: Vec::new(),
            });
        }
        Ok(rows.into_iter().map(|r| r.version).collect())
    }

    /// One request: a GET, or a POST of `body` as JSON. The answer's bytes when it is a success.
    fn request(&self, url: &str, headers: &[(&str, String)], body: Option<&Value>) -> Result<Vec<u8>, RemoteProblem> {
        let unreachable = |reason: String| RemoteProblem::Unreachable { url: url.to_string(), reason };
        let result = match body {
            Some(body) => {
                let mut request = self.agent.post(url);
                for (name, value) in headers {
                    request = request.header(*name, value);
                }
                request.send_json(body)
            }
            None => {
                let mut request = self.agent.get(url);
                for (name, value) in headers {
                    request = request.header(*name, value);
                }
                request.call()
            }
        };
        let mut response = result.map_err(|e| self.problem(url, e))?;
        let status = response.status().as_u16();
        let bytes =
            response.body_mut().with_config().limit(MAX_REGISTRY_BYTES).read_to_vec().map_err(|e| self.problem(url, e));
        if !(200..300).contains(&status) {
            let head = bytes.as_deref().map(head).unwrap_or_default();
            return Err(RemoteProblem::Status { url: url.to_string(), status, head });
        }
        bytes.map_err(|problem| match problem {
            RemoteProblem::Unreachable { reason, .. } => unreachable(reason),
            other => other,
        })
    }

    fn problem(&self, url: &str, error: ureq::Error) -> RemoteProblem {
        match error {
            ureq::Error::Timeout(_) => RemoteProblem::TimedOut { url: url.to_string(), secs: self.timeout.as_secs() },
            ureq::Error::BodyExceedsLimit(_) => {
                RemoteProblem::TooLarge { url: url.to_string(), limit_mib: MAX_REGISTRY_BYTES >> 20 }
            }
            other => RemoteProblem::Unreachable { url: url.to_string(), reason: other.to_string() },
        }
    }

    /// Where the resolution of `name` at `version` (None: the best) of `location` is kept.
    fn memo_path(&self, location: &RegistryLocation, name: &str, version: Option<&str>) -> Option<PathBuf> {
        let root = self.cache.as_ref()?.tasks_dir().parent()?.join("registries");
        let registry = match location {
            RegistryLocation::Hub(api) => format!("hub\0{}", api.url),
            RegistryLocation::Json(url) => format!("json\0{url}"),
            RegistryLocation::File(path) => format!("file\0{}", path.display()),
            RegistryLocation::Repo(repo) => {
                format!("repo\0{}\0{}\0{}", repo.git_url, repo.reference.as_deref().unwrap_or(""), repo.registry_file)
            }
        };
        let mut hasher = Sha256::new();
        for part in [registry.as_str(), name, version.unwrap_or("")] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        let key: String = hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
        Some(root.join(format!("{key}.json")))
    }

    fn remember(&self, location: &RegistryLocation, name: &str, version: Option<&str>, spec: &DatasetSpec) {
        let Some(path) = self.memo_path(location, name, version) else { return };
        let memo = Memo {
            registry: location.to_string(),
            name: name.to_string(),
            version: version.map(str::to_string),
            resolved_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            dataset: spec.clone(),
        };
        if let Err(e) = write_atomically(&path, &serde_json::to_vec_pretty(&memo).unwrap_or_default()) {
            tracing::warn!("could not keep the resolution of {name} in {}: {e}", path.display());
        }
    }

    fn recall(&self, location: &RegistryLocation, name: &str, version: Option<&str>) -> Option<(DatasetSpec, String)> {
        let path = self.memo_path(location, name, version)?;
        let text = std::fs::read(&path).ok()?;
        let memo: Memo = serde_json::from_slice(&text).ok()?;
        Some((memo.dataset, format!("as resolved at {} (kept in {})", memo.resolved_at, path.display())))
    }
}

impl Resolver for NetworkResolver {
    fn resolve(
        &self,
        location: &RegistryLocation,
        name: &str,
        version: Option<&str>,
    ) -> Result<Resolution, RegistryError> {
        match self.ask(location, name, version) {
            Ok(spec) => {
                self.remember(location, name, version, &spec);
                Ok(Resolution { spec, from_cache: None })
            }
            // The registry gave no answer: an earlier one stands in, said so.
            Err(RegistryError::Remote { registry, problem }) => match self.recall(location, name, version) {
                Some((spec, when)) => Ok(Resolution { spec, from_cache: Some(format!("{problem}; {when}")) }),
                None => Err(RegistryError::Remote { registry, problem }),
            },
            Err(other) => Err(other),
        }
    }
}

/// One dataset version as a registry lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetSummary {
    pub name: String,
    pub version: String,
    pub description: String,
    pub task_count: usize,
}

impl DatasetSummary {
    pub fn of(spec: &DatasetSpec) -> DatasetSummary {
        DatasetSummary {
            name: spec.name.clone(),
            version: spec.version.clone(),
            description: spec.description.clone(),
            task_count: spec.tasks.len(),
        }
    }
}

/// What the cache keeps of one resolution.
#[derive(Serialize, Deserialize)]
struct Memo {
    registry: String,
    name: String,
    /// The version asked for; None when the registry's best was asked for.
    version: Option<String>,
    resolved_at: String,
    dataset: DatasetSpec,
}

/// A repository's registry file, parsed; what does not parse is the repository's answer.
fn parse_repo_registry(location: &RegistryLocation, url: &str, text: &str) -> Result<Registry, RegistryError> {
    Registry::parse(location, text).map_err(|e| match e {
        RegistryError::Malformed { message, .. } => remote(
            location,
            RemoteProblem::Malformed {
                url: url.to_string(),
                expected: "a Harbor registry (a JSON list of datasets)",
                message,
                head: head(text.as_bytes()),
            },
        ),
        other => other,
    })
}

/// The hub's answer to `get_dataset`.
#[derive(Deserialize)]
struct HubDataset {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tasks: Vec<RegistryTask>,
    #[serde(default)]
    metrics: Vec<HubMetric>,
}

#[derive(Deserialize)]
struct HubMetric {
    name: String,
    #[serde(default)]
    kwargs: Option<Value>,
}

impl HubDataset {
    /// As a registry lists it: the metrics as Harbor's `MetricConfig`s, each task once.
    fn into_spec(self) -> DatasetSpec {
        let mut tasks: Vec<RegistryTask> = Vec::with_capacity(self.tasks.len());
        for task in self.tasks {
            if !tasks.contains(&task) {
                tasks.push(task);
            }
        }
        let metrics = self
            .metrics
            .into_iter()
            .map(|m| json!({"type": m.name, "kwargs": m.kwargs.filter(|k| !k.is_null()).unwrap_or(json!({}))}))
            .collect();
        DatasetSpec {
            name: self.name,
            version: self.version,
            description: self.description.unwrap_or_default(),
            tasks,
            metrics,
        }
    }
}

/// The headers Harbor's hub client sends (supabase-py's).
fn hub_headers(api: &HubApi) -> Vec<(&'static str, String)> {
    vec![
        ("apikey", api.key.clone()),
        ("Authorization", format!("Bearer {}", api.key)),
        ("Accept-Profile", "public".into()),
        ("Content-Profile", "public".into()),
    ]
}

fn remote(location: &RegistryLocation, problem: RemoteProblem) -> RegistryError {
    RegistryError::Remote { registry: location.to_string(), problem }
}

fn parse_json<T: serde::de::DeserializeOwned>(
    url: &str,
    bytes: &[u8],
    expected: &'static str,
) -> Result<T, RemoteProblem> {
    serde_json::from_slice(bytes).map_err(|e| RemoteProblem::Malformed {
        url: url.to_string(),
        expected,
        message: e.to_string(),
        head: head(bytes),
    })
}

/// The first bytes of an answer, printable: control characters escaped, cut at
/// [`HEAD_BYTES`] with `…`.
fn head(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(HEAD_BYTES)];
    let text: String = String::from_utf8_lossy(cut).chars().flat_map(char::escape_debug).collect();
    let text = if text.is_empty() { "(nothing)".to_string() } else { format!("\"{text}\"") };
    if bytes.len() > HEAD_BYTES { format!("{text}…") } else { text }
}

/// `text` for a URL's query: everything but unreserved characters percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.{}", path.file_name().unwrap_or_default().to_string_lossy(), std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_short_and_printable() {
        assert_eq!(head(b""), "(nothing)");
        assert_eq!(head(b"a\nb"), "\"a\\nb\"");
        let long = head(&[b'x'; 1000]);
        assert!(long.ends_with('…') && long.len() < HEAD_BYTES + 10, "{long}");
    }

    #[test]
    fn names_are_encoded_for_queries() {
        assert_eq!(percent_encode("terminal-bench"), "terminal-bench");
        assert_eq!(percent_encode("a b&c=d"), "a%20b%26c%3Dd");
    }

    #[test]
    fn hub_answers_keep_each_task_once_and_metrics_as_configs() {
        let answer: HubDataset = serde_json::from_value(json!({
            "name": "d", "version": "1", "description": null,
            "tasks": [
                {"name": "t", "git_url": "u", "git_commit_id": "c", "path": "p"},
                {"name": "t", "git_url": "u", "git_commit_id": "c", "path": "p"},
                {"name": "t2", "git_url": "u", "git_commit_id": "c", "path": "p2"}
            ],
            "metrics": [{"name": "mean", "kwargs": null}]
        }))
        .unwrap();
        let spec = answer.into_spec();
        assert_eq!(spec.tasks.len(), 2);
        assert_eq!(spec.description, "");
        assert_eq!(spec.metrics, vec![json!({"type": "mean", "kwargs": {}})]);
    }

    #[test]
    fn resolutions_are_kept_and_recalled_per_registry_name_and_version() {
        let dir = tempfile::tempdir().unwrap();
        let resolver = NetworkResolver::new(Some(TaskCache::at(dir.path())));
        let hub = RegistryLocation::Hub(HubApi { url: "http://127.0.0.1:9".into(), key: "k".into() });
        let json = RegistryLocation::Json("http://127.0.0.1:9/registry.json".into());
        let spec = DatasetSpec {
            name: "d".into(),
            version: "2.0".into(),
            description: String::new(),
            tasks: Vec::new(),
            metrics: Vec::new(),
        };
        resolver.remember(&hub, "d", None, &spec);
        assert_eq!(resolver.recall(&hub, "d", None).unwrap().0, spec);
        assert!(resolver.recall(&hub, "d", Some("2.0")).is_none(), "by the version asked for");
        assert!(resolver.recall(&json, "d", None).is_none(), "by registry");
        // Nothing listens on port 9: the registry cannot be reached, and the cache answers.
        let resolution = resolver.resolve(&hub, "d", None).unwrap();
        assert_eq!(resolution.spec, spec);
        assert!(resolution.from_cache.unwrap().contains("cannot be reached"));
        let err = resolver.resolve(&json, "d", None).unwrap_err();
        assert!(matches!(err, RegistryError::Remote { problem: RemoteProblem::Unreachable { .. }, .. }), "{err}");
    }
}
