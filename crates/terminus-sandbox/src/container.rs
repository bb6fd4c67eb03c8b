//! One trial container: created with limits and labels, used through execs and file copies,
//! removed at the end.
//!
//! Containers run `sleep infinity` under `init: true`, so removal takes ~0.15 s instead of
//! waiting out a 10 s stop grace period.

use std::collections::HashMap;
use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;

use crate::channel::ShellChannel;
use crate::engine::Engine;
use crate::error::SandboxError;

/// An attached exec's output and input.
type Attached = (crate::channel::OutputStream, std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>);

/// What to create.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    pub image: String,
    pub name: String,
    pub labels: HashMap<String, String>,
    /// CPU limit in CPUs (1.0 = one core).
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    /// `network_mode: none`, for tasks with `allow_internet = false`.
    pub no_network: bool,
    /// The network to join otherwise (the job's own bridge, where trials cannot reach each
    /// other); None: the engine's default bridge.
    pub network: Option<String>,
    pub confinement: Confinement,
    /// Environment for every process of the container (`KEY=VALUE`).
    pub env: Vec<String>,
    pub workdir: Option<String>,
    /// GPUs to pass through (a device request to the engine's GPU driver); 0: none.
    pub gpus: u32,
    /// Names it answers to on `network` besides its own (`main`, for a task's sidecars).
    pub aliases: Vec<String>,
    /// Volumes and bind mounts, `SOURCE:TARGET[:ro]`.
    pub binds: Vec<String>,
    /// Directories the container's own command creates (mode 777) before it idles. Only for
    /// images whose default user is root; it saves an upload after start.
    pub make_dirs: Vec<String>,
    /// `/etc/hosts` entries, `NAME:ADDRESS` (the egress proxy's, which must resolve whatever
    /// resolver the container was given).
    pub extra_hosts: Vec<String>,
    /// The idle command is the container's PID 1 (no init process of the engine's): it reaps
    /// orphans itself, and nothing in the container can end it (a root `kill -9 -1` included),
    /// so only what stops the container from outside ends it. For images without an
    /// `ENTRYPOINT`, which run the command they are given.
    pub pid1: bool,
    /// The warden's volume, mounted read-only at [`crate::warden::DIR`] (None: the warden is
    /// copied in after the start, as on a swarm).
    pub warden: Option<String>,
}

/// The most of an exec's output kept (its end).
pub const MAX_EXEC_OUTPUT: usize = 1024 * 1024;

pub use terminus_core::confinement::{Confinement, DEFAULT_CAP_DROP};

/// What confines a container, as the engine takes it (with `init`): every container of a
/// trial, `main` and its sidecars alike, starts from this.
pub(crate) fn confined(confinement: &Confinement, cpus: Option<f64>, memory_mb: Option<u64>) -> HostConfig {
    let mut security_opt = confinement.security_opt.clone();
    if confinement.no_new_privileges {
        security_opt.push("no-new-privileges:true".to_string());
    }
    HostConfig {
        init: Some(true),
        nano_cpus: cpus.map(|c| (c * 1e9) as i64),
        memory: memory_mb.map(|m| (m * 1024 * 1024) as i64),
        pids_limit: confinement.pids_limit,
        cap_drop: (!confinement.cap_drop.is_empty()).then(|| confinement.cap_drop.clone()),
        cap_add: (!confinement.cap_add.is_empty()).then(|| confinement.cap_add.clone()),
        security_opt: (!security_opt.is_empty()).then_some(security_opt),
        runtime: confinement.runtime.clone(),
        log_config: (!confinement.keep_container_logs)
            .then(|| HostConfigLogConfig { typ: Some("none".to_string()), config: None }),
        storage_opt: confinement.storage_mb.map(|mb| HashMap::from([("size".to_string(), format!("{mb}M"))])),
        ..Default::default()
    }
}

/// The engine's view of a spec: limits, network, confinement.
fn host_config(spec: &ContainerSpec) -> HostConfig {
    let network_mode = if spec.no_network { Some("none".to_string()) } else { spec.network.clone() };
    HostConfig {
        network_mode,
        binds: {
            let mut binds = spec.binds.clone();
            binds.extend(spec.warden.as_ref().map(|volume| format!("{volume}:{}:ro", crate::warden::DIR)));
            (!binds.is_empty()).then_some(binds)
        },
        extra_hosts: (!spec.extra_hosts.is_empty()).then(|| spec.extra_hosts.clone()),
        device_requests: (spec.gpus > 0).then(|| {
            vec![bollard::models::DeviceRequest {
                count: Some(i64::from(spec.gpus)),
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                ..Default::default()
            }]
        }),
        // An idle command that is PID 1 needs no init (see `REAPER`).
        init: Some(!spec.pid1),
        ..confined(&spec.confinement, spec.cpus, spec.memory_mb)
    }
}

/// The last argument of the idle command as PID 1 ([`ContainerSpec::pid1`]): what scripts in
/// the container read in `/proc/1/cmdline` to know PID 1 is it (no process can change that).
pub const IDLE_MARK: &str = "terminus-idle";

/// The idle command as PID 1: a shell that blocks reading a pseudo-terminal master nobody opens
/// the other side of, reaps the orphans it adopts on each SIGCHLD (which ends the read; the loop
/// reads again), and ends on SIGTERM. It never has a child of its own, so a census of the
/// container finds nothing of it. The kernel delivers no signal to a namespace's init from inside
/// it unless init handles it, and it handles none that ends it but SIGTERM, which `kill -9 -1`
/// does not send.
const REAPER: &str = "if [ -c /dev/ptmx ]; then exec 3<>/dev/ptmx; else exec sleep infinity; fi; trap 'exit 0' TERM; trap 'wait' CHLD; while :; do read -r _ <&3; done";

/// The container's command: idle forever, after creating `make_dirs` when there are any.
pub(crate) fn idle_command(make_dirs: &[String], pid1: bool) -> Vec<String> {
    let dirs: Vec<String> = make_dirs.iter().map(|d| crate::tmux::shell_quote(d)).collect();
    let dirs = dirs.join(" ");
    let make = if dirs.is_empty() { String::new() } else { format!("mkdir -p {dirs} && chmod 777 {dirs}; ") };
    if pid1 {
        return vec!["sh".into(), "-c".into(), format!("{make}{REAPER}"), IDLE_MARK.into()];
    }
    if make.is_empty() {
        return vec!["sleep".into(), "infinity".into()];
    }
    vec!["sh".into(), "-c".into(), format!("{make}exec sleep infinity")]
}

/// A running container. Dropping it does not remove it: call [`Container::remove`] (the trial
/// does, whatever happened) or sweep by label.
#[derive(Clone, Debug)]
pub struct Container {
    engine: Engine,
    pub id: String,
    pub name: String,
    /// The network it was started on (None: `network_mode: none`, or the default bridge).
    network: Option<String>,
    /// On a swarm: its service and node ([`crate::swarm`]); `engine` is then the node's daemon.
    placement: Option<std::sync::Arc<crate::placement::Placement>>,
    /// When this process started it (or took it over).
    started: std::time::Instant,
}

/// How to run one exec.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    pub user: Option<String>,
    pub env: Vec<String>,
    pub workdir: Option<String>,
    /// None waits for as long as the command runs.
    pub timeout: Option<Duration>,
}

/// A file that differs from the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    pub kind: ChangeKind,
}

/// How it differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
}

/// What a download wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Downloaded {
    pub bytes: u64,
    /// It was cut at its size limit.
    pub truncated: bool,
}

/// What an exec printed (stdout and stderr interleaved) and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: Option<i64>,
    pub output: String,
}

impl Engine {
    /// Creates and starts a container from `spec`.
    pub async fn start_container(&self, spec: &ContainerSpec) -> Result<Container, SandboxError> {
        let err = |message: String| SandboxError::Start { name: spec.name.clone(), message };
        let host_config = host_config(spec);
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: Some(idle_command(&spec.make_dirs, spec.pid1)),
            labels: Some(spec.labels.clone()),
            env: (!spec.env.is_empty()).then(|| spec.env.clone()),
            working_dir: spec.workdir.clone(),
            host_config: Some(host_config),
            networking_config: match (&spec.network, spec.aliases.is_empty() || spec.no_network) {
                (Some(network), false) => Some(bollard::models::NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(
                        network.clone(),
                        bollard::models::EndpointSettings { aliases: Some(spec.aliases.clone()), ..Default::default() },
                    )])),
                }),
                _ => None,
            },
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(&spec.name).build();
        let created = self.docker.create_container(Some(options), body).await.map_err(|e| err(e.to_string()))?;
        let network =
            if spec.no_network { None } else { Some(spec.network.clone().unwrap_or_else(|| "bridge".into())) };
        let container = Container {
            engine: self.clone(),
            id: created.id,
            name: spec.name.clone(),
            network,
            placement: None,
            started: std::time::Instant::now(),
        };
        if let Err(e) = self.docker.start_container(&container.id, None).await {
            let _ = self.remove_container(&container.id).await;
            return Err(err(e.to_string()));
        }
        Ok(container)
    }
}

impl Container {
    /// A container made elsewhere in this crate (a task's sidecar).
    pub(crate) fn adopt(engine: Engine, id: String, name: String, network: Option<String>) -> Container {
        Container { engine, id, name, network, placement: None, started: std::time::Instant::now() }
    }

    /// Marks the container as a swarm trial's: removing it removes its service.
    pub(crate) fn placed(mut self, placement: crate::placement::Placement) -> Container {
        self.placement = Some(std::sync::Arc::new(placement));
        self
    }

    /// On a swarm: the manager, which answers for the cluster while a node is lost.
    pub(crate) fn swarm_manager(&self) -> Option<&Engine> {
        self.placement.as_ref().map(|p| &p.manager)
    }

    /// On a swarm: the hostname of the node the container runs on.
    pub(crate) fn swarm_host(&self) -> Option<&str> {
        self.placement.as_ref().map(|p| p.hostname.as_str())
    }

    /// On a swarm: confinement its engine did not apply to this container, each said.
    pub(crate) fn swarm_unapplied(&self) -> &[String] {
        self.placement.as_ref().map_or(&[], |p| p.unapplied.as_slice())
    }

    /// On a swarm: the nodes the trial was placed on first, lost before its container ran.
    pub(crate) fn swarm_lost_before(&self) -> &[String] {
        self.placement.as_ref().map_or(&[], |p| p.lost_before.as_slice())
    }

    /// Records the nodes lost before this placement.
    pub(crate) fn placed_after(mut self, lost: Vec<String>) -> Container {
        if let Some(placement) = self.placement.as_mut() {
            std::sync::Arc::make_mut(placement).lost_before = lost;
        }
        self
    }

    /// The engine the container runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The network it was started on (None: `network_mode: none`).
    pub(crate) fn network(&self) -> Option<&str> {
        self.network.as_deref()
    }

    /// Runs `bash -c script` and waits for it (or for the timeout).
    pub async fn exec(&self, script: &str, options: &ExecOptions) -> Result<ExecOutput, SandboxError> {
        self.exec_argv(vec!["bash".to_string(), "-c".to_string(), script.to_string()], options).await
    }

    /// Runs the warden (by its absolute path: nothing of the container's chooses what runs)
    /// with `args`, and waits for it (or for the timeout).
    pub async fn exec_warden(&self, args: &[&str], options: &ExecOptions) -> Result<ExecOutput, SandboxError> {
        let mut argv = vec![crate::warden::PATH.to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        self.exec_argv(argv, options).await
    }

    /// The files that differ from the image, as the engine's storage driver knows them (not
    /// what the container says: nothing in it can hide a change from this).
    pub async fn changes(&self) -> Result<Vec<FileChange>, SandboxError> {
        let changes = self
            .engine
            .docker
            .container_changes(&self.id)
            .await
            .map_err(|e| SandboxError::Exec { container: self.name.clone(), message: e.to_string() })?;
        Ok(changes
            .unwrap_or_default()
            .into_iter()
            .map(|c| FileChange {
                path: c.path,
                kind: match c.kind {
                    bollard::models::ChangeType::_0 => ChangeKind::Modified,
                    bollard::models::ChangeType::_1 => ChangeKind::Added,
                    bollard::models::ChangeType::_2 => ChangeKind::Deleted,
                },
            })
            .collect())
    }

    /// Copies the warden in (where no volume holds it: a swarm's node).
    pub(crate) async fn install_warden(&self) -> Result<(), SandboxError> {
        let dir = crate::warden::DIR.trim_start_matches('/');
        let name = format!("{dir}/warden");
        let archive = crate::archive::tar_dirs_and_files(&[], &[(name.as_str(), crate::warden::WARDEN, 0o755)])
            .map_err(|e| SandboxError::Exec { container: self.name.clone(), message: e.to_string() })?;
        self.upload_tar("/", archive).await
    }

    /// Runs `argv` (its first word found by the container's `PATH` unless absolute) and waits
    /// for it (or for the timeout).
    pub async fn exec_argv(&self, argv: Vec<String>, options: &ExecOptions) -> Result<ExecOutput, SandboxError> {
        let script = argv.last().cloned().unwrap_or_default();
        let script = script.as_str();
        let err = |message: String| SandboxError::Exec { container: self.name.clone(), message };
        let config = CreateExecOptions {
            cmd: Some(argv),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: options.user.clone(),
            env: (!options.env.is_empty()).then(|| options.env.clone()),
            working_dir: options.workdir.clone(),
            ..Default::default()
        };
        let asked = std::time::Instant::now();
        let exec = self.engine.docker.create_exec(&self.id, config).await.map_err(|e| err(e.to_string()))?;
        let drain = async {
            let mut bytes = Vec::new();
            let started = self.engine.docker.start_exec(&exec.id, None).await.map_err(|e| err(e.to_string()))?;
            // The engine's part: creating the exec and attaching to it (the script runs after).
            self.engine.latency.exec(asked.elapsed());
            if let StartExecResults::Attached { mut output, .. } = started {
                while let Some(chunk) = output.next().await {
                    bytes.extend_from_slice(&chunk.map_err(|e| err(e.to_string()))?.into_bytes());
                    // Only the end is kept: what reads exec output looks at its last lines, and a
                    // command that prints gigabytes must not make the orchestrator hold them.
                    if bytes.len() > 2 * MAX_EXEC_OUTPUT {
                        bytes.drain(..bytes.len() - MAX_EXEC_OUTPUT);
                    }
                }
                if bytes.len() > MAX_EXEC_OUTPUT {
                    bytes.drain(..bytes.len() - MAX_EXEC_OUTPUT);
                }
            }
            Ok::<_, SandboxError>(bytes)
        };
        let bytes = match options.timeout {
            Some(limit) => tokio::time::timeout(limit, drain).await.map_err(|_| SandboxError::Timeout {
                container: self.name.clone(),
                what: short(script),
                after: limit,
            })??,
            None => drain.await?,
        };
        // The exit code is final once the output stream has ended; retry briefly regardless.
        let mut exit_code = None;
        for _ in 0..20 {
            let inspect = self.engine.docker.inspect_exec(&exec.id).await.map_err(|e| err(e.to_string()))?;
            if inspect.running != Some(true) {
                exit_code = inspect.exit_code;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(ExecOutput { exit_code, output: String::from_utf8_lossy(&bytes).into_owned() })
    }

    /// Extracts a tar archive into the container at `dest` (a directory).
    /// Copies a file or directory of the host to `target` in the container (its parents made as
    /// needed): a task's writable bind, which must not write the task's own directory.
    pub async fn copy_in(&self, source: &std::path::Path, target: &str) -> Result<(), SandboxError> {
        let (source, name) = (source.to_path_buf(), target.trim_start_matches('/').to_string());
        let archive =
            crate::blocking::blocking(move || crate::archive::tar_path(&source, &name)).await.map_err(|e| {
                SandboxError::Transfer {
                    container: self.name.clone(),
                    path: target.into(),
                    direction: "into",
                    message: e.to_string(),
                }
            })?;
        self.upload_tar("/", archive).await
    }

    pub async fn upload_tar(&self, dest: &str, archive: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptionsBuilder::default().path(dest).build();
        self.engine
            .docker
            .upload_to_container(&self.id, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| SandboxError::Transfer {
                container: self.name.clone(),
                path: dest.into(),
                direction: "into",
                message: e.to_string(),
            })
    }

    /// Downloads `path` as a tar archive (whose top entry is the path's base name) into the file
    /// `into`, streaming: at most `max_bytes` reach the disk, and no more than a chunk is ever
    /// held in memory, whatever the container holds. The download is cut at the limit (the
    /// archive then ends early; its unpacking keeps what came before and says so). Each chunk
    /// must arrive within `stall`, so a hung engine cannot hold the trial past its deadlines.
    pub async fn download_to_file(
        &self,
        path: &str,
        into: &std::path::Path,
        max_bytes: u64,
        stall: Duration,
    ) -> Result<Downloaded, SandboxError> {
        use tokio::io::AsyncWriteExt;
        let err = |message: String| SandboxError::Transfer {
            container: self.name.clone(),
            path: path.into(),
            direction: "from",
            message,
        };
        let options = DownloadFromContainerOptionsBuilder::default().path(path).build();
        let mut stream = self.engine.docker.download_from_container(&self.id, Some(options));
        let mut file = tokio::fs::File::create(into).await.map_err(|e| err(e.to_string()))?;
        let mut done = Downloaded { bytes: 0, truncated: false };
        loop {
            let chunk = match tokio::time::timeout(stall, stream.next()).await {
                Ok(Some(chunk)) => chunk.map_err(|e| err(e.to_string()))?,
                Ok(None) => break,
                Err(_) => return Err(err(format!("no data for {:.0} s", stall.as_secs_f64()))),
            };
            let room = max_bytes.saturating_sub(done.bytes);
            let take = (chunk.len() as u64).min(room) as usize;
            file.write_all(&chunk[..take]).await.map_err(|e| err(e.to_string()))?;
            done.bytes += take as u64;
            if take < chunk.len() {
                done.truncated = true;
                break;
            }
        }
        file.flush().await.map_err(|e| err(e.to_string()))?;
        Ok(done)
    }

    /// Opens a long-lived shell running as `user` (the image's default user when None).
    pub async fn open_shell(&self, user: Option<&str>) -> Result<ShellChannel, SandboxError> {
        let (output, mut input) = self.attach(vec!["bash".to_string()], user).await?;
        // Read by the shell before the first command (no answer is awaited).
        tokio::io::AsyncWriteExt::write_all(&mut input, crate::channel::PREAMBLE.as_bytes())
            .await
            .map_err(|e| SandboxError::Exec { container: self.name.clone(), message: e.to_string() })?;
        Ok(ShellChannel::new(self.name.clone(), output, input, self.engine.latency.clone()))
    }

    /// Creates and starts an exec of `cmd` as `user` with its stdin, stdout and stderr attached,
    /// without a terminal.
    async fn attach(&self, cmd: Vec<String>, user: Option<&str>) -> Result<Attached, SandboxError> {
        let err = |message: String| SandboxError::Exec { container: self.name.clone(), message };
        let config = CreateExecOptions {
            cmd: Some(cmd),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            user: user.map(str::to_string),
            ..Default::default()
        };
        let exec = self.engine.docker.create_exec(&self.id, config).await.map_err(|e| err(e.to_string()))?;
        match self.engine.docker.start_exec(&exec.id, None).await.map_err(|e| err(e.to_string()))? {
            StartExecResults::Attached { output, input } => Ok((output, input)),
            StartExecResults::Detached => Err(err("the exec started detached".into())),
        }
    }

    /// Whether the container stopped because of what ran inside it: it exists, does not run,
    /// was not killed by the OOM killer, and nothing outside stopped it (on a swarm, or when the
    /// engine's stop watch was not up throughout, nobody can tell: false).
    pub async fn ended_from_inside(&self) -> bool {
        if self.placement.is_some() {
            return false;
        }
        let Ok(info) = self.engine.docker.inspect_container(&self.id, None).await else { return false };
        let state = info.state.unwrap_or_default();
        if state.running == Some(true) || state.oom_killed == Some(true) {
            return false;
        }
        self.engine.stopped_from_outside(&self.id, self.started) == Some(false)
    }

    /// Whether the container is still running.
    pub async fn is_running(&self) -> bool {
        match self.engine.docker.inspect_container(&self.id, None).await {
            Ok(info) => info.state.and_then(|s| s.running).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Stops the container (SIGTERM to init, SIGKILL after `grace`), keeping its files: what is
    /// left in it can still be copied out, and [`Container::remove`] removes it later. Stopping
    /// a stopped container is no error.
    pub async fn stop(&self, grace: Duration) -> Result<(), SandboxError> {
        let options = bollard::query_parameters::StopContainerOptionsBuilder::default()
            .t(grace.as_secs().try_into().unwrap_or(i32::MAX))
            .build();
        match self.engine.docker.stop_container(&self.id, Some(options)).await {
            // 304: already stopped.
            Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 304, .. }) => Ok(()),
            Err(e) => Err(SandboxError::Api(format!("stopping container `{}`: {e}", self.id))),
        }
    }

    /// Force-removes the container (and its anonymous volumes); on a swarm its service first
    /// (a lost node's container is swept when the node comes back).
    pub async fn remove(&self) -> Result<(), SandboxError> {
        if let Some(placement) = &self.placement {
            match placement.manager.docker.delete_service(&placement.service).await {
                Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                Err(e) => return Err(SandboxError::Api(format!("removing service of `{}`: {e}", self.name))),
            }
            // The service's removal stops the container; removing it too spares the wait.
            let _ = tokio::time::timeout(Duration::from_secs(10), self.engine.remove_container(&self.id)).await;
            return Ok(());
        }
        self.engine.remove_container(&self.id).await
    }
}

/// The first line of a script, shortened, for error messages.
fn short(script: &str) -> String {
    let line = script.lines().next().unwrap_or("");
    if line.chars().count() > 80 {
        format!("{}…", line.chars().take(80).collect::<String>())
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_confined_by_default() {
        let spec = ContainerSpec { network: Some("terminus-job".into()), ..ContainerSpec::default() };
        let host = host_config(&spec);
        assert_eq!(host.pids_limit, Some(4096));
        assert_eq!(host.security_opt, Some(vec!["no-new-privileges:true".to_string()]));
        assert!(host.cap_drop.unwrap().contains(&"NET_RAW".to_string()));
        assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
        assert_eq!(host.network_mode.as_deref(), Some("terminus-job"));
        let offline = ContainerSpec { no_network: true, ..spec };
        assert_eq!(host_config(&offline).network_mode.as_deref(), Some("none"), "no internet wins");
        let open = ContainerSpec {
            confinement: Confinement {
                pids_limit: None,
                no_new_privileges: false,
                cap_drop: Vec::new(),
                keep_container_logs: true,
                runtime: Some("runsc".into()),
                ..Confinement::default()
            },
            ..ContainerSpec::default()
        };
        let host = host_config(&open);
        assert_eq!((host.pids_limit, host.security_opt, host.cap_drop, host.log_config), (None, None, None, None));
        assert_eq!(host.runtime.as_deref(), Some("runsc"));
    }

    #[test]
    fn the_idle_command_creates_directories_only_when_asked() {
        assert_eq!(idle_command(&[], false), ["sleep", "infinity"]);
        let command = idle_command(&["/logs".into(), "/logs/agent".into()], false);
        assert_eq!(command[..2], ["sh", "-c"]);
        assert_eq!(command[2], "mkdir -p /logs /logs/agent && chmod 777 /logs /logs/agent; exec sleep infinity");
        let pid1 = idle_command(&["/logs".into()], true);
        assert!(pid1[2].starts_with("mkdir -p /logs && chmod 777 /logs; if [ -c /dev/ptmx ]"), "{pid1:?}");
        assert_eq!(pid1.last().map(String::as_str), Some(IDLE_MARK));
    }
}
