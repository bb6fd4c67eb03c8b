//! Registry credentials as the docker CLI finds them, for the engine's pulls and builds: the
//! user's Docker config (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), its
//! `credHelpers` (per registry), `auths` (inline `auth`, or an identity token), and
//! `credsStore` (for every other registry), a helper being the `docker-credential-<name>`
//! program asked `get` with the registry's address on stdin.
//!
//! A credential is never printed, logged or stored: [`Credentials`] shows only its registry and
//! where it came from, and an error names the registry and the config file, not its contents.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde_json::Value;

/// Docker Hub's key in a Docker config (the docker CLI's `IndexServer`).
const DOCKER_HUB: &str = "https://index.docker.io/v1/";
/// How long a credential helper may take.
const HELPER_TIMEOUT: Duration = Duration::from_secs(20);

/// The user's Docker config: where each registry's credentials come from.
#[derive(Clone, Debug, Default)]
pub struct DockerConfig {
    /// The file read (None: there is none).
    file: Option<PathBuf>,
    auths: BTreeMap<String, AuthEntry>,
    creds_store: Option<String>,
    cred_helpers: BTreeMap<String, String>,
    /// Where `docker-credential-*` programs are (None: on PATH, as the docker CLI finds them).
    helper_dir: Option<PathBuf>,
}

/// One `auths` entry, its secrets kept out of `Debug`.
#[derive(Clone, Default)]
struct AuthEntry {
    username: Option<String>,
    password: Option<String>,
    identity_token: Option<String>,
}

impl std::fmt::Debug for AuthEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthEntry").field("username", &self.username.is_some()).finish_non_exhaustive()
    }
}

/// A registry's credentials, ready for the engine; `Debug` shows where they came from only.
#[derive(Clone)]
pub struct Credentials {
    pub registry: String,
    pub from: String,
    inner: DockerCredentials,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("registry", &self.registry).field("from", &self.from).finish()
    }
}

impl Credentials {
    pub(crate) fn engine(&self) -> DockerCredentials {
        self.inner.clone()
    }
}

/// Why credentials could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the Docker config `{}` cannot be read: {message}", .file.display())]
    Unreadable { file: PathBuf, message: String },
    #[error("credential helper `docker-credential-{helper}` for registry `{registry}` failed: {message}")]
    Helper { helper: String, registry: String, message: String },
}

impl DockerConfig {
    /// The config the docker CLI would read: `$DOCKER_CONFIG/config.json`, else
    /// `$HOME/.docker/config.json`; an empty one when neither exists.
    pub fn load() -> Result<DockerConfig, CredentialError> {
        let dir = match std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join(".docker"),
                None => return Ok(DockerConfig::default()),
            },
        };
        DockerConfig::read(&dir.join("config.json"))
    }

    /// Reads `file`; a missing file is an empty config.
    pub fn read(file: &Path) -> Result<DockerConfig, CredentialError> {
        let unreadable = |message: String| CredentialError::Unreadable { file: file.to_path_buf(), message };
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DockerConfig::default()),
            Err(e) => return Err(unreadable(e.to_string())),
        };
        // The parser's message could quote the file's text: only its position is kept.
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| unreadable(format!("not JSON (line {}, column {})", e.line(), e.column())))?;
        let mut config = DockerConfig { file: Some(file.to_path_buf()), ..DockerConfig::default() };
        for (registry, entry) in value.get("auths").and_then(Value::as_object).into_iter().flatten() {
            let text = |key: &str| entry.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
            let mut auth = AuthEntry {
                username: text("username"),
                password: text("password"),
                identity_token: text("identitytoken"),
            };
            if let Some(encoded) = text("auth") {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| unreadable(format!("auths.{registry}.auth is not base64 of user:password")))?;
                let (user, password) = decoded
                    .split_once(':')
                    .ok_or_else(|| unreadable(format!("auths.{registry}.auth is not base64 of user:password")))?;
                auth.username = Some(user.to_string());
                auth.password = Some(password.to_string());
            }
            config.auths.insert(registry.clone(), auth);
        }
        config.creds_store =
            value.get("credsStore").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
        for (registry, helper) in value.get("credHelpers").and_then(Value::as_object).into_iter().flatten() {
            if let Some(helper) = helper.as_str().filter(|s| !s.is_empty()) {
                config.cred_helpers.insert(registry.clone(), helper.to_string());
            }
        }
        Ok(config)
    }

    /// The credentials for `registry` (a host as [`registry_of`] gives it), as the docker CLI
    /// picks them: its credential helper, else its `auths` entry, else the `credsStore`; None
    /// when the config has none for it.
    pub fn credentials(&self, registry: &str) -> Result<Option<Credentials>, CredentialError> {
        let helper = self.cred_helpers.iter().find(|(key, _)| same_registry(key, registry)).map(|(_, h)| h);
        if let Some(helper) = helper {
            return self.ask_helper(helper, registry);
        }
        let entry = self.auths.iter().find(|(key, _)| same_registry(key, registry));
        if let Some((key, auth)) = entry
            && (auth.password.is_some() || auth.identity_token.is_some())
        {
            let inner = DockerCredentials {
                username: auth.username.clone(),
                password: auth.password.clone(),
                identitytoken: auth.identity_token.clone(),
                serveraddress: Some(key.clone()),
                ..DockerCredentials::default()
            };
            let from = format!("auths in {}", self.file_name());
            return Ok(Some(Credentials { registry: registry.to_string(), from, inner }));
        }
        match &self.creds_store {
            Some(store) => self.ask_helper(store, registry),
            None => Ok(None),
        }
    }

    /// The credentials of every registry of `registries` the config has any for (a build's
    /// `FROM` images), keyed as the engine looks them up.
    pub fn credentials_for_all<'a>(
        &self,
        registries: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashMap<String, Credentials>, CredentialError> {
        let mut out = HashMap::new();
        for registry in registries {
            if let Some(credentials) = self.credentials(registry)? {
                out.insert(engine_key(registry), credentials);
            }
        }
        Ok(out)
    }

    fn file_name(&self) -> String {
        self.file.as_ref().map(|f| f.display().to_string()).unwrap_or_else(|| "(no file)".into())
    }

    /// Asks `docker-credential-<helper> get` for `registry`'s credentials. "not found" (the
    /// helper's exit with that message) is no credentials, not an error.
    #[expect(
        clippy::disallowed_methods,
        reason = "a credential helper is a program by the docker CLI's protocol, not the docker CLI"
    )]
    fn ask_helper(&self, helper: &str, registry: &str) -> Result<Option<Credentials>, CredentialError> {
        let failed =
            |message: String| CredentialError::Helper { helper: helper.into(), registry: registry.into(), message };
        let server = if registry == "docker.io" { DOCKER_HUB.to_string() } else { registry.to_string() };
        let program = format!("docker-credential-{helper}");
        let program = match &self.helper_dir {
            Some(dir) => dir.join(program),
            None => PathBuf::from(program),
        };
        let mut child = Command::new(program)
            .arg("get")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed(format!("cannot be started: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(server.as_bytes());
        }
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() > HELPER_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(failed(format!("no answer within {} s", HELPER_TIMEOUT.as_secs())));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(failed(e.to_string())),
            }
        };
        let mut stdout = Vec::new();
        if let Some(mut out) = child.stdout.take() {
            let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
        }
        if !status.success() {
            // A helper says "credentials not found in native keychain" on stdout: that is none.
            if String::from_utf8_lossy(&stdout).to_ascii_lowercase().contains("not found") {
                return Ok(None);
            }
            return Err(failed(format!("exited with {status}")));
        }
        let answer: Value = serde_json::from_slice(&stdout).map_err(|_| failed("its answer is not JSON".into()))?;
        let field = |key: &str| answer.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let (username, secret) = (field("Username"), field("Secret"));
        if secret.is_empty() {
            return Ok(None);
        }
        // The docker CLI's convention: a user named `<token>` means the secret is an identity token.
        let inner = if username == "<token>" {
            DockerCredentials { identitytoken: Some(secret), serveraddress: Some(server), ..Default::default() }
        } else {
            DockerCredentials {
                username: Some(username),
                password: Some(secret),
                serveraddress: Some(server),
                ..Default::default()
            }
        };
        Ok(Some(Credentials { registry: registry.to_string(), from: format!("docker-credential-{helper}"), inner }))
    }
}

/// The registry an image reference is pulled from, as the docker CLI reads it: the first path
/// part when it looks like a host (has `.` or `:`, or is `localhost`), else Docker Hub
/// (`docker.io`).
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_ascii_lowercase(),
        _ => "docker.io".to_string(),
    }
}

/// The images a Dockerfile's `FROM` lines name, less its own stages and `$`-templated ones.
pub fn from_images(dockerfile: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for line in dockerfile.lines() {
        let mut words = line.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let Some(image) = rest.first() else { continue };
        if let [_, as_word, name, ..] = rest.as_slice()
            && as_word.eq_ignore_ascii_case("AS")
        {
            stages.push(name.to_ascii_lowercase());
        }
        if image.contains('$') || image.eq_ignore_ascii_case("scratch") || stages.contains(&image.to_ascii_lowercase())
        {
            continue;
        }
        if !images.contains(&image.to_string()) {
            images.push(image.to_string());
        }
    }
    images
}

/// A config key (`https://reg.example:5000/v1/`, `reg.example:5000`) names `registry` (a host).
fn same_registry(key: &str, registry: &str) -> bool {
    let host = |text: &str| {
        let text = text.trim();
        let text = text.strip_prefix("https://").or_else(|| text.strip_prefix("http://")).unwrap_or(text);
        text.split('/').next().unwrap_or_default().to_ascii_lowercase()
    };
    let key = host(key);
    key == registry
        || registry == "docker.io" && matches!(key.as_str(), "index.docker.io" | "registry-1.docker.io" | "docker.io")
}

/// The key the engine looks a registry's credentials up by in a build's registry config.
fn engine_key(registry: &str) -> String {
    if registry == "docker.io" { DOCKER_HUB.to_string() } else { registry.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, json: &str) -> DockerConfig {
        std::fs::write(dir.join("config.json"), json).unwrap();
        DockerConfig::read(&dir.join("config.json")).unwrap()
    }

    #[test]
    fn registries_are_read_off_image_references_as_the_docker_cli_reads_them() {
        assert_eq!(registry_of("ubuntu:22.04"), "docker.io");
        assert_eq!(registry_of("library/ubuntu"), "docker.io");
        assert_eq!(registry_of("ghcr.io/org/img:1"), "ghcr.io");
        assert_eq!(registry_of("127.0.0.1:5000/private/hello:1"), "127.0.0.1:5000");
        assert_eq!(registry_of("localhost/img"), "localhost");
        assert_eq!(
            from_images(
                "FROM --platform=linux/amd64 reg.io/a:1 AS build\nRUN x\nfrom build\nFROM $BASE\nFROM scratch\nFROM reg.io/a:1\nFROM b"
            ),
            vec!["reg.io/a:1".to_string(), "b".to_string()]
        );
    }

    #[test]
    fn auths_are_decoded_and_matched_by_host_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:s3cret-pw");
        let config = config(
            dir.path(),
            &format!(
                r#"{{"auths": {{"http://127.0.0.1:5000/v2/": {{"auth": "{encoded}"}}, "https://index.docker.io/v1/": {{"identitytoken": "tok-9"}}}}}}"#
            ),
        );
        let found = config.credentials("127.0.0.1:5000").unwrap().unwrap();
        let engine = found.engine();
        assert_eq!((engine.username.as_deref(), engine.password.as_deref()), (Some("alice"), Some("s3cret-pw")));
        let shown = format!("{found:?} {config:?}");
        assert!(!shown.contains("s3cret") && !shown.contains(&encoded) && !shown.contains("alice"), "{shown}");
        assert_eq!(config.credentials("docker.io").unwrap().unwrap().engine().identitytoken.as_deref(), Some("tok-9"));
        assert!(config.credentials("ghcr.io").unwrap().is_none());
        let all = config.credentials_for_all(["127.0.0.1:5000", "docker.io", "ghcr.io"]).unwrap();
        let mut keys: Vec<&String> = all.keys().collect();
        keys.sort();
        assert_eq!(keys, [&"127.0.0.1:5000".to_string(), &DOCKER_HUB.to_string()]);
        let bad = config_err(dir.path(), r#"{"auths": {"r.io": {"auth": "not base64!"}}}"#);
        assert!(bad.contains("auths.r.io.auth") && !bad.contains("not base64!"), "{bad}");
        let bad = config_err(dir.path(), "{\"auths\": hunter2");
        assert!(bad.contains("not JSON") && !bad.contains("hunter2"), "{bad}");
        assert!(DockerConfig::read(&dir.path().join("none.json")).unwrap().credentials("r.io").unwrap().is_none());
    }

    fn config_err(dir: &Path, json: &str) -> String {
        std::fs::write(dir.join("bad.json"), json).unwrap();
        DockerConfig::read(&dir.join("bad.json")).unwrap_err().to_string()
    }

    #[test]
    fn helpers_are_asked_per_registry_before_auths_and_the_store_after() {
        let dir = tempfile::tempdir().unwrap();
        // A helper that knows one registry, and says "not found" for the others.
        let helper = dir.path().join("docker-credential-fake");
        std::fs::write(
            &helper,
            "#!/bin/sh\nread server\ncase \"$server\" in reg.io) echo '{\"ServerURL\":\"reg.io\",\"Username\":\"bob\",\"Secret\":\"pw-from-helper\"}';;\n tok.io) echo '{\"Username\":\"<token>\",\"Secret\":\"id-token\"}';;\n *) echo 'credentials not found in native keychain'; exit 1;; esac\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = config(
            dir.path(),
            r#"{"auths": {"reg.io": {"auth": "dTpw"}}, "credHelpers": {"reg.io": "fake"}, "credsStore": "fake"}"#,
        );
        config.helper_dir = Some(dir.path().to_path_buf());
        let found = config.credentials("reg.io").unwrap().unwrap();
        assert_eq!(found.engine().password.as_deref(), Some("pw-from-helper"), "the helper before auths");
        assert_eq!(found.from, "docker-credential-fake");
        let token = config.credentials("tok.io").unwrap().unwrap().engine();
        assert_eq!((token.identitytoken.as_deref(), token.password), (Some("id-token"), None));
        assert!(config.credentials("other.io").unwrap().is_none(), "not found is none");
        let missing = DockerConfig { creds_store: Some("absent-helper".into()), ..DockerConfig::default() };
        let err = missing.credentials("r.io").unwrap_err();
        assert!(matches!(err, CredentialError::Helper { .. }) && err.to_string().contains("r.io"), "{err}");
    }
}
