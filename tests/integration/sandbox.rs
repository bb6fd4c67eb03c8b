//! The Docker layer and the TmuxSession actor against the real engine: limits and labels on
//! containers, the shell channel, and tmux typing exactly what it is given.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ractor::Actor;
use terminus_actors::tmux_session::{RecordTo, TmuxHandle, TmuxSessionActor, TmuxSessionArgs};
use terminus_sandbox::tmux::PaneSize;
use terminus_sandbox::{Container, ContainerSpec, Engine, ExecOptions};

use crate::support::{docker, poll};

const TEST_LABEL: &str = "terminus.test";

/// Waits until the pane (its history too with `history`) shows `text`, for at most `timeout`;
/// returns what it shows.
async fn pane_showing(tmux: &TmuxHandle, history: bool, text: &str, timeout: Duration) -> String {
    let shows = async || {
        let seen = tmux.capture_pane(history).await.unwrap();
        if seen.contains(text) { Ok(seen) } else { Err(tail(&seen)) }
    };
    poll(&format!("the pane to show {text:?}"), timeout, Duration::from_millis(100), shows).await
}

/// The last lines of `text`, for a failure's message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

async fn start(engine: &Engine, name: &str, no_network: bool) -> Container {
    let spec = ContainerSpec {
        gpus: 0,
        aliases: Vec::new(),
        binds: Vec::new(),
        image: "terminus-base:bookworm".into(),
        name: format!("terminus-test-{name}-{}", std::process::id()),
        labels: HashMap::from([(TEST_LABEL.to_string(), name.to_string())]),
        cpus: Some(0.5),
        memory_mb: Some(256),
        no_network,
        env: vec!["GREETING=hi there".into()],
        workdir: Some("/tmp".into()),
        make_dirs: vec!["/made/by the command".into()],
        extra_hosts: Vec::new(),
        network: None,
        confinement: terminus_sandbox::Confinement::default(),
        pid1: true,
        warden: None,
    };
    engine.remove_with_label(TEST_LABEL, Some(name)).await.unwrap();
    engine.start_container(&spec).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_get_limits_labels_and_network_mode() {
    let Some(docker) = docker().await else { return };
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, "limits", true).await;
    let info = docker.inspect_container(&container.id, None).await.unwrap();
    let host = info.host_config.unwrap();
    assert_eq!(host.nano_cpus, Some(500_000_000));
    assert_eq!(host.memory, Some(256 * 1024 * 1024));
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    // The idle command is PID 1 itself: no init of the engine's.
    assert_eq!(host.init, Some(false));
    assert_eq!(info.config.unwrap().labels.unwrap()[TEST_LABEL], "limits");
    let out = container.exec("echo \"$GREETING from $(pwd)\"; exit 3", &ExecOptions::default()).await.unwrap();
    assert_eq!(out.output, "hi there from /tmp\n");
    assert_eq!(out.exit_code, Some(3));
    // The container's own command made the directory, writable by anyone, and then idles.
    let made = container.exec("stat -c %a '/made/by the command'", &ExecOptions::default()).await.unwrap();
    assert_eq!(made.output, "777\n");
    assert_eq!(
        engine.image_facts("terminus-base:bookworm").await,
        Some(terminus_sandbox::ImageFacts { root: true, entrypoint: false })
    );
    // Orphans are reaped by PID 1, and a root `kill -9 -1` ends every process but PID 1 (and
    // the caller): the container itself goes on.
    let orphans = "for i in 1 2 3; do (sleep 0.1 &); done; sleep 1;                    grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l";
    let zombies = container.exec(orphans, &ExecOptions::default()).await.unwrap();
    assert_eq!(zombies.output.trim(), "0", "orphans reaped");
    container.exec("sleep 300 & kill -9 -1; true", &ExecOptions::default()).await.unwrap();
    assert!(container.is_running().await, "a root `kill -9 -1` does not end the container");
    // The `sleep 300` it started went with everything else.
    let sleeping = container.exec("grep -lx sleep /proc/[0-9]*/comm | wc -l", &ExecOptions::default()).await.unwrap();
    assert_eq!(sleeping.output.trim(), "0");
    let timed = container
        .exec("sleep 5", &ExecOptions { timeout: Some(Duration::from_millis(300)), ..Default::default() })
        .await;
    assert!(matches!(timed, Err(terminus_sandbox::SandboxError::Timeout { .. })), "{timed:?}");
    container.remove().await.unwrap();
    assert!(!container.is_running().await);
    assert_eq!(engine.containers_with_label(TEST_LABEL, Some("limits")).await.unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shell_channel_frames_output_and_exit_codes() {
    let Some(_docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, "channel", true).await;
    let mut channel = container.open_shell(None).await.unwrap();
    let out = channel.run("printf 'no newline'", Duration::from_secs(10)).await.unwrap();
    assert_eq!((out.exit_code, out.stdout.as_str()), (0, "no newline"));
    let out = channel.run("echo oops >&2; false", Duration::from_secs(10)).await.unwrap();
    assert_eq!((out.exit_code, out.stdout.as_str()), (1, "oops\n"));
    // Multibyte output split across frames decodes intact; large output is framed correctly.
    let out = channel.run("python3 -c \"print('é' * 100000)\"", Duration::from_secs(10)).await.unwrap();
    assert_eq!(out.stdout, format!("{}\n", "é".repeat(100_000)));
    // State persists between commands, as in one shell.
    channel.run("cd /etc && export X=42", Duration::from_secs(10)).await.unwrap();
    let out = channel.run("echo $X $(pwd)", Duration::from_secs(10)).await.unwrap();
    assert_eq!(out.stdout, "42 /etc\n");
    // Output beyond the channel's cap keeps its head and says what was dropped; the channel
    // stays in step for the next command.
    let out = channel.run("seq 1 8000000", Duration::from_secs(60)).await.unwrap();
    assert!(out.stdout.starts_with("1\n2\n3\n"));
    assert!(out.stdout.contains("bytes of output dropped"), "{}", &out.stdout[out.stdout.len() - 200..]);
    assert!(out.stdout.len() < 40 * 1024 * 1024);
    let out = channel.run("echo still in step", Duration::from_secs(10)).await.unwrap();
    assert_eq!(out.stdout, "still in step\n");
    // A command cannot swallow later input.
    let out = channel.run("cat; echo after", Duration::from_secs(10)).await.unwrap();
    assert_eq!(out.stdout, "after\n");
    container.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn tmux_types_exactly_what_it_is_given() {
    let Some(_docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, "tmux", true).await;
    container.exec("mkdir -p /logs/agent", &ExecOptions::default()).await.unwrap();
    let args = TmuxSessionArgs {
        container: container.clone(),
        user: None,
        size: PaneSize::new(120, 30).unwrap(),
        extra_env: BTreeMap::from([("TASK_VAR".to_string(), "from env".to_string())]),
        record: None,
        reference: false,
        command_timeout: Duration::from_secs(30),
    };
    let (actor, _) = Actor::spawn(None, TmuxSessionActor, args).await.unwrap();
    let tmux = TmuxHandle::new(actor, Duration::from_secs(30));
    // Requests sent during the set-up wait for it.
    let first = tmux.incremental_output().await.unwrap();
    tmux.ready().await.unwrap();
    assert!(first.starts_with("Current Terminal Screen:\n"), "{first}");
    assert!(tmux.is_alive().await);
    // Its commands go through one control client (the session's only client).
    let clients = container
        .exec("tmux list-clients -t terminus-2 -F '#{client_control_mode}'", &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(clients.output, "1\n");

    // A 20,000-character line is split into several send-keys commands and arrives whole.
    let long = "x".repeat(20_000);
    let keys = vec![format!("printf '%s' '{long}' > /tmp/long.txt; echo $TASK_VAR; echo done-long;\n")];
    tmux.send_keys(keys).await.unwrap();
    let seen = pane_showing(&tmux, true, "\ndone-long", Duration::from_secs(10)).await;
    assert!(seen.contains("\nfrom env\n"), "extra env reaches the session: {seen}");
    let size = container.exec("wc -c < /tmp/long.txt", &ExecOptions::default()).await.unwrap();
    assert_eq!(size.output.trim(), "20000");

    // The incremental observation shows only what is new since the last one.
    let _ = tmux.incremental_output().await.unwrap();
    let keys = vec!["echo fresh-$((6*7))".to_string(), "Enter".to_string()];
    tmux.send_keys(keys).await.unwrap();
    // The command's output (the typed line holds `$((6*7))`, not its value) is on the pane.
    pane_showing(&tmux, false, "\nfresh-42", Duration::from_secs(10)).await;
    let new = tmux.incremental_output().await.unwrap();
    assert!(new.starts_with("New Terminal Output:\n"), "{new}");
    assert!(new.contains("fresh-42"), "{new}");
    assert!(!new.contains("done-long"), "{new}");

    // The history limit applies to the session's pane.
    let limit =
        container.exec("tmux display -p -t terminus-2 '#{history_limit}'", &ExecOptions::default()).await.unwrap();
    assert_eq!(limit.output.trim(), terminus_sandbox::tmux::HISTORY_LIMIT.to_string());
    let pane = container
        .exec("tmux display -p -t terminus-2 '#{pane_width}x#{pane_height}'", &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(pane.output.trim(), "120x30");
    let log = container.exec("cat /logs/agent/terminus_2.pane", &ExecOptions::default()).await.unwrap();
    assert!(log.output.contains("fresh-42"), "the pane is piped to its log");

    // When the session ends, the actor says so.
    container.exec("tmux kill-server", &ExecOptions::default()).await.unwrap();
    assert!(!tmux.is_alive().await);
    tmux.stop();
    container.remove().await.unwrap();
}

/// Trial containers are confined by default: a process limit a fork bomb hits, no new
/// privileges, fewer capabilities, no engine-side logs; on the job's own network, trials
/// cannot reach each other (on the engine's default bridge they could).
#[tokio::test(flavor = "multi_thread")]
async fn containers_are_confined_and_trials_cannot_reach_each_other() {
    let Some(docker) = docker().await else { return };
    let engine = Engine::connect().await.unwrap();
    let network = format!("terminus-test-net-{}", std::process::id());
    engine.ensure_network(&network, HashMap::from([(TEST_LABEL.to_string(), "net".to_string())])).await.unwrap();
    let spec = |name: &str, network: Option<String>, pids: i64| ContainerSpec {
        gpus: 0,
        aliases: Vec::new(),
        binds: Vec::new(),
        image: "terminus-base:bookworm".into(),
        name: format!("terminus-test-{name}-{}", std::process::id()),
        labels: HashMap::from([(TEST_LABEL.to_string(), name.to_string())]),
        network,
        confinement: terminus_sandbox::Confinement { pids_limit: Some(pids), ..Default::default() },
        ..ContainerSpec::default()
    };
    for name in ["server", "client", "open-server", "open-client"] {
        engine.remove_with_label(TEST_LABEL, Some(name)).await.unwrap();
    }
    let server = engine.start_container(&spec("server", Some(network.clone()), 64)).await.unwrap();
    let client = engine.start_container(&spec("client", Some(network.clone()), 64)).await.unwrap();

    let host = docker.inspect_container(&server.id, None).await.unwrap().host_config.unwrap();
    assert_eq!(host.pids_limit, Some(64));
    assert_eq!(host.security_opt, Some(vec!["no-new-privileges:true".to_string()]));
    assert!(host.cap_drop.unwrap().contains(&"NET_RAW".to_string()));
    assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
    let status = server.exec("grep NoNewPrivs /proc/self/status", &ExecOptions::default()).await.unwrap();
    assert!(status.output.contains('1'), "{}", status.output);
    // A fork bomb stops at the limit instead of reaching the host's.
    let bomb = r#"python3 -c '
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(1); os.close(2); time.sleep(2); os._exit(0)
    n += 1
print(n)'"#;
    let out =
        server.exec(bomb, &ExecOptions { timeout: Some(Duration::from_secs(30)), ..Default::default() }).await.unwrap();
    let forked: u32 = out.output.trim().parse().unwrap_or(999);
    assert!(forked < 64, "{forked} forks: {}", out.output);
    // The bomb's children end by themselves (at the limit, nothing else could start meanwhile):
    // waited for, with a deadline.
    let drained =
        "for i in $(seq 100); do [ $(ls -d /proc/[0-9]* | wc -l) -lt 10 ] && echo drained && exit; sleep 0.1; done";
    // (While the limit holds, the shell's own forks are retried and say so; the runtime may not
    // even start the exec — "read init-p: connection reset" — so that is tried again too, for a
    // bounded time.)
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = server.exec(drained, &ExecOptions::default()).await.unwrap();
        if out.output.trim().ends_with("drained") || std::time::Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(out.output.trim().ends_with("drained"), "the bomb's children ended: {}", out.output);

    let reach = |client: Container, server: Container| async move {
        let ip = docker_ip(&server).await;
        server.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &", &ExecOptions::default()).await.unwrap();
        // First shown from inside: the server answers (a "blocked" below is then the network's).
        let up = "for i in $(seq 100); do (</dev/tcp/127.0.0.1/8000) 2>/dev/null && echo up && exit; sleep 0.1; done";
        let answered = server.exec(up, &ExecOptions::default()).await.unwrap().output;
        assert_eq!(answered.trim(), "up", "the server answers from inside its container");
        let probe = format!("timeout 3 bash -c '</dev/tcp/{ip}/8000' && echo reached || echo blocked");
        client.exec(&probe, &ExecOptions::default()).await.unwrap().output
    };
    async fn docker_ip(container: &Container) -> String {
        let out = container.exec("hostname -I", &ExecOptions::default()).await.unwrap();
        out.output.split_whitespace().next().unwrap().to_string()
    }
    assert_eq!(reach(client.clone(), server.clone()).await.trim(), "blocked", "no traffic between trials");
    // The control: on the engine's default bridge the same probe gets through.
    let open_server = engine.start_container(&spec("open-server", None, 64)).await.unwrap();
    let open_client = engine.start_container(&spec("open-client", None, 64)).await.unwrap();
    assert_eq!(reach(open_client.clone(), open_server.clone()).await.trim(), "reached");
    for container in [server, client, open_server, open_client] {
        container.remove().await.unwrap();
    }
    engine.remove_network(&network).await.unwrap();
}

/// Every line the pane printed reaches the agent: a program prints numbered lines in bursts at
/// random pauses while observations are taken at random moments, in several sessions at once
/// (so the engine is loaded), each recorded (the recording's `clear` happens at set-up). Joined,
/// each session's observations hold every numbered line of its pane log, in order; so does
/// the recording the host wrote (a playable cast, its times never going back).
#[tokio::test(flavor = "multi_thread")]
async fn observations_lose_no_line_of_the_pane_log() {
    let Some(_docker) = docker().await else {
        return;
    };
    let _heavy = crate::support::heavy_lock().await;
    numbered_lines_in_sessions(6, Client::Kept).await;
}

/// The same through the per-process observation (the path every look takes once the terminal's
/// control client is gone, as an agent's own `tmux detach-client` makes it): the client is
/// detached before the program runs, and no client comes back.
#[tokio::test(flavor = "multi_thread")]
async fn observations_without_the_control_client_lose_no_line_of_the_pane_log() {
    let Some(_docker) = docker().await else {
        return;
    };
    let _heavy = crate::support::heavy_lock().await;
    numbered_lines_in_sessions(3, Client::Detached).await;
}

/// Whether the terminal keeps its control client during [`numbered_lines_in_sessions`].
#[derive(Clone, Copy, PartialEq)]
enum Client {
    Kept,
    Detached,
}

/// The numbered-lines check of [`observations_lose_no_line_of_the_pane_log`], in `sessions`
/// sessions at once.
async fn numbered_lines_in_sessions(sessions: usize, client: Client) {
    let engine = Engine::connect().await.unwrap();
    let casts = tempfile::tempdir().unwrap();
    const LINES: u32 = 4_000;
    let mut runs = Vec::new();
    for n in 0..sessions {
        let engine = engine.clone();
        let cast = casts.path().join(format!("session-{n}.cast"));
        runs.push(tokio::spawn(async move {
            let container = start(&engine, &format!("lines{n}"), true).await;
            container.exec("mkdir -p /logs/agent", &ExecOptions::default()).await.unwrap();
            let args = TmuxSessionArgs {
                container: container.clone(),
                user: None,
                size: PaneSize::new(100, 20 + n as i64 * 7).unwrap(),
                extra_env: BTreeMap::new(),
                record: Some(RecordTo { path: cast.clone(), max_bytes: 64 << 20 }),
                reference: false,
                command_timeout: Duration::from_secs(30),
            };
            let (actor, _) = Actor::spawn(None, TmuxSessionActor, args).await.unwrap();
            let tmux = TmuxHandle::new(actor, Duration::from_secs(30));
            tmux.ready().await.unwrap();
            let clients = async || {
                let listed = "tmux list-clients -t terminus-2 -F '#{client_control_mode}'";
                container.exec(listed, &ExecOptions::default()).await.unwrap().output
            };
            if client == Client::Detached {
                assert_eq!(clients().await, "1\n", "the terminal has its control client");
                let detached = container.exec("tmux detach-client -s terminus-2", &ExecOptions::default()).await;
                assert_eq!(detached.unwrap().exit_code, Some(0));
                assert_eq!(clients().await, "", "the control client is gone");
            }
            let mut observed = tmux.incremental_output().await.unwrap();
            let program = format!(
                "for i in $(seq 1 {LINES}); do echo L$i; [ $((RANDOM % 40)) = 0 ] && sleep 0.0$((RANDOM % 9 + 1)); done; echo ALL-DONE"
            );
            tmux.send_keys(vec![program, "Enter".into()]).await.unwrap();
            let mut looks = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(240);
            loop {
                tokio::time::sleep(Duration::from_millis(u64::from(rand_below(40)))).await;
                let out = tmux.incremental_output().await.unwrap();
                looks += 1;
                observed.push_str(&out);
                if out.lines().any(|l| l == "ALL-DONE") || std::time::Instant::now() > deadline {
                    break;
                }
            }
            if client == Client::Detached {
                assert_eq!(clients().await, "", "no control client came back: the looks were per process");
            }
            // The pane log has caught up with the pane: its last line is there too.
            let logged = async || {
                let log = container.exec("cat /logs/agent/terminus_2.pane", &ExecOptions::default()).await.unwrap();
                let done = log.output.lines().any(|l| l.trim() == "ALL-DONE");
                if done { Ok(log) } else { Err(tail(&log.output)) }
            };
            let log = poll("ALL-DONE in the pane log", Duration::from_secs(30), Duration::from_millis(100), logged).await;
            tmux.finish_recording().await;
            tmux.stop();
            container.remove().await.unwrap();
            (observed, log.output, looks, std::fs::read_to_string(&cast).unwrap())
        }));
    }
    let numbered = |text: &str| -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for line in text.split(['\n', '\r']) {
            if let Some(n) = line.trim().strip_prefix('L').and_then(|n| n.parse().ok())
                && out.last() != Some(&n)
            {
                out.push(n);
            }
        }
        out
    };
    let mut total_looks = 0;
    for run in runs {
        let (observed, log, looks, cast) = run.await.unwrap();
        total_looks += looks;
        let in_log = numbered(&log);
        assert_eq!(in_log, (1..=LINES).collect::<Vec<_>>(), "the pane log holds every line");
        let seen = numbered(&observed);
        let missing: Vec<u32> = in_log.iter().copied().filter(|n| !seen.contains(n)).collect();
        assert!(
            missing.is_empty(),
            "{} lines never observed (first {:?}) in {looks} looks",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        assert_eq!(seen, in_log, "observed in order, each once");
        let events = terminus_agent::recording::is_valid_cast(&cast).unwrap_or_else(|e| panic!("{e}"));
        let played: String = cast
            .lines()
            .skip(1)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e[1] == "o")
            .map(|e| e[2].as_str().unwrap_or_default().to_string())
            .collect();
        let tail = &cast[cast.len().saturating_sub(300)..];
        assert_eq!(numbered(&played), in_log, "the recording holds every line, in order ({events} events): …{tail}");
        assert!(events > 20, "the output was recorded as it came, not at the end ({events} events)");
        assert!(played.contains("ALL-DONE"), "the recording's drain took the last output");
    }
    assert!(total_looks >= sessions * 20, "the observations interleaved with the output ({total_looks} looks)");
}

/// A container and a recorded terminal in it (the cast: `session.cast` in the returned directory).
async fn recorded_session(name: &str, max_bytes: u64) -> (Container, TmuxHandle, tempfile::TempDir) {
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, name, true).await;
    container.exec("mkdir -p /logs/agent", &ExecOptions::default()).await.unwrap();
    let casts = tempfile::tempdir().unwrap();
    let args = TmuxSessionArgs {
        container: container.clone(),
        user: None,
        size: PaneSize::new(100, 30).unwrap(),
        extra_env: BTreeMap::new(),
        record: Some(RecordTo { path: casts.path().join("session.cast"), max_bytes }),
        reference: false,
        command_timeout: Duration::from_secs(30),
    };
    let (actor, _) = Actor::spawn(None, TmuxSessionActor, args).await.unwrap();
    let tmux = TmuxHandle::new(actor, Duration::from_secs(30));
    tmux.ready().await.unwrap();
    (container, tmux, casts)
}

/// What a cast plays: its events' texts joined (a line may be split across events).
fn played(cast: &str) -> String {
    cast.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| e[2].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The recording's follower runs in the command channel's background. When that channel dies
/// (its shell killed from outside), the next request opens a new one and the follower goes on
/// from where the recording was: every line once, in order.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_goes_on_when_the_channel_is_opened_again() {
    let Some(_docker) = docker().await else {
        return;
    };
    let (container, tmux, casts) = recorded_session("reopen", 64 << 20).await;
    let cast = casts.path().join("session.cast");
    tmux.send_keys(vec!["seq -f 'A%g' 1 300".into(), "Enter".into()]).await.unwrap();
    pane_showing(&tmux, true, "A300", Duration::from_secs(20)).await;
    // The recording has A300 before the follower's shell goes, so the new follower starts at a
    // non-zero offset (what the old one had not read would come again from the new one anyway).
    let recorded = async || {
        let played = played(&std::fs::read_to_string(&cast).unwrap_or_default());
        if played.contains("A300") { Ok(()) } else { Err(format!("{} bytes played", played.len())) }
    };
    poll("the recording to hold A300", Duration::from_secs(20), Duration::from_millis(100), recorded).await;
    // The channel's shell is the exec session (parent 0) whose child is the follower.
    let kill = r#"for d in /proc/[0-9]*; do p=${d#/proc/}; read -r s < $d/stat || continue; r=${s##*) }; set -- $r
      [ "$2" = 0 ] || continue
      for c in /proc/[0-9]*; do read -r cs < $c/stat 2>/dev/null || continue; case "$cs" in *"(tail) "*) cr=${cs##*) }; set -- $cr; [ "$2" = "$p" ] && { kill -KILL "$p"; echo killed $p; }; esac; done
    done"#;
    let killed = container.exec(kill, &ExecOptions::default()).await.unwrap();
    assert!(killed.output.contains("killed"), "the channel's shell was found: {}", killed.output);
    // The request in flight when the shell died may fail; the ones after it open a new channel.
    let typed = async || match tmux.send_keys(vec!["seq -f 'B%g' 1 300".into(), "Enter".into()]).await {
        Ok(()) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    poll("a request through a new channel", Duration::from_secs(20), Duration::from_millis(200), typed).await;
    pane_showing(&tmux, true, "B300", Duration::from_secs(20)).await;
    tmux.finish_recording().await;
    tmux.stop();
    container.remove().await.unwrap();
    let played = played(&std::fs::read_to_string(&cast).unwrap());
    for prefix in ['A', 'B'] {
        let numbers: Vec<u32> = played
            .split(['\n', '\r'])
            .filter_map(|l| l.trim().strip_prefix(prefix).and_then(|n| n.parse().ok()))
            .collect();
        assert_eq!(numbers, (1..=300).collect::<Vec<_>>(), "{prefix} lines once each, in order");
    }
}

/// A recording that reached its size limit ends, and so does its follower: a terminal that
/// floods is not read on for nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_at_its_limit_stops_its_follower() {
    let Some(_docker) = docker().await else {
        return;
    };
    let (container, tmux, casts) = recorded_session("flood", 4096).await;
    let cast = casts.path().join("session.cast");
    let followers = "grep -l TERMINUS_FOLLOWER= /proc/[0-9]*/environ 2>/dev/null | wc -l";
    let running = container.exec(followers, &ExecOptions::default()).await.unwrap();
    assert_eq!(running.output.trim(), "1", "one follower while recording");
    tmux.send_keys(vec!["seq 1 20000".into(), "Enter".into()]).await.unwrap();
    pane_showing(&tmux, false, "20000", Duration::from_secs(20)).await;
    // Each request may be the one that finds the recording ended and kills the follower.
    let gone = async || {
        tmux.capture_pane(false).await.unwrap();
        let left = container.exec(followers, &ExecOptions::default()).await.unwrap();
        if left.output.trim() == "0" { Ok(()) } else { Err(format!("{} followers", left.output.trim())) }
    };
    poll("the follower to be killed", Duration::from_secs(20), Duration::from_millis(200), gone).await;
    tmux.finish_recording().await;
    tmux.stop();
    container.remove().await.unwrap();
    let size = std::fs::metadata(&cast).unwrap().len();
    assert!(size <= 4096, "the recording stopped at its limit ({size} bytes)");
}

fn rand_below(n: u32) -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos();
    nanos % n
}

/// `model_view: reference`'s terminal is the reference's: the pane keeps tmux's default history
/// limit (raised only after it exists), observations run to the pane's last row (blank rows
/// included) from the reference's offset, and a key ending in `;` is passed as it is (tmux
/// takes the `;` for a command separator: it is not typed).
#[tokio::test(flavor = "multi_thread")]
async fn the_reference_terminal_is_the_references() {
    let Some(_docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, "reference", true).await;
    container.exec("mkdir -p /logs/agent", &ExecOptions::default()).await.unwrap();
    let args = TmuxSessionArgs {
        container: container.clone(),
        user: None,
        size: PaneSize::new(160, 40).unwrap(),
        extra_env: BTreeMap::new(),
        record: None,
        reference: true,
        command_timeout: Duration::from_secs(30),
    };
    let (actor, _) = Actor::spawn(None, TmuxSessionActor, args).await.unwrap();
    let tmux = TmuxHandle::new(actor, Duration::from_secs(30));
    tmux.ready().await.unwrap();
    let limits = container
        .exec("tmux display -p -t terminus-2 '#{history_limit}'; tmux show -gv history-limit", &ExecOptions::default())
        .await
        .unwrap();
    assert_eq!(
        limits.output.split_whitespace().collect::<Vec<_>>(),
        ["2000", "10000000"],
        "the pane keeps tmux's default"
    );
    let first = tmux.incremental_output().await.unwrap();
    assert!(first.starts_with("Current Terminal Screen:\n"), "{first}");
    tmux.send_keys(vec!["echo semi-$((40+2));".into()]).await.unwrap();
    tmux.send_keys(vec!["Enter".into()]).await.unwrap();
    let seen = pane_showing(&tmux, false, "\nsemi-42", Duration::from_secs(5)).await;
    assert!(seen.contains("# echo semi-$((40+2))\n"), "the final `;` is not typed: {seen}");
    let new = tmux.incremental_output().await.unwrap();
    assert!(new.starts_with("New Terminal Output:\n") && new.contains("semi-42"), "{new}");
    assert!(new.ends_with("\n\n\n\n"), "the pane's blank rows are kept: {new:?}");
    tmux.stop();
    container.remove().await.unwrap();
}

/// The channel's control client (`tmux -C`) answers every terminal request exactly as the tmux
/// processes it replaces, forks nothing, types hostile keys exactly, and once it is gone the
/// same commands still answer (through those processes).
#[tokio::test(flavor = "multi_thread")]
async fn the_control_client_answers_as_tmux_processes_do_without_forking() {
    use terminus_sandbox::control::{self, Control};
    use terminus_sandbox::observe::Observer;
    use terminus_sandbox::tmux;
    let Some(_docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    let container = start(&engine, "control", true).await;
    let mut shell = container.open_shell(None).await.unwrap();
    let limit = Duration::from_secs(30);
    let run =
        async |shell: &mut terminus_sandbox::ShellChannel, command: &str| shell.run(command, limit).await.unwrap();
    let started = tmux::start_session_command(PaneSize::new(100, 20).unwrap(), &BTreeMap::new(), "/tmp/pane.log", true);
    assert_eq!(run(&mut shell, &started).await.exit_code, 0);
    let keys = |text: &str| tmux::send_keys_commands(&[text.to_string(), "Enter".to_string()]).join(" && ");
    run(&mut shell, &keys("seq 1 300; echo SEQ-DONE; cat > /tmp/typed")).await;
    let typed_wait = async |shell: &mut terminus_sandbox::ShellChannel, text: &str| {
        for _ in 0..100 {
            if run(shell, &tmux::capture_pane_command(true)).await.stdout.contains(text) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the pane never showed {text:?}");
    };
    typed_wait(&mut shell, "SEQ-DONE").await;

    let nonce = control::new_nonce();
    let report = run(&mut shell, &control::start_command(&nonce)).await;
    let control = Control::started(&report.stdout, &nonce).unwrap_or_else(|| panic!("{report:?}"));
    let clients = run(&mut shell, "tmux list-clients -t terminus-2 -F '#{client_control_mode}'").await;
    assert_eq!(clients.stdout, "1\n");

    // The same answers, on a pane that does not change in between: an observation without an
    // anchor and one with (after new lines), the screen, the history, the idle probe.
    let separator = "__SEP_test__";
    let mut observer = Observer::default();
    for round in 0..2 {
        let per_process = run(&mut shell, &observer.command(tmux::SESSION_NAME, separator)).await;
        let controlled = run(&mut shell, &observer.control_command(separator, &control)).await;
        assert_eq!(controlled, per_process, "observation {round}");
        observer.read(&controlled.stdout, separator).unwrap();
        run(&mut shell, &keys(&format!("round {round}"))).await;
        typed_wait(&mut shell, &format!("round {round}")).await;
    }
    for (ours, theirs) in [
        (control.capture_pane(false), tmux::capture_pane_command(false)),
        (control.capture_pane(true), tmux::capture_pane_command(true)),
        (control.idle_probe(), tmux::idle_probe_command()),
        (control.has_session(), tmux::has_session_command()),
    ] {
        assert_eq!(run(&mut shell, &ours).await, run(&mut shell, &theirs).await, "{theirs}");
    }

    // Twenty episodes' worth of requests start no process in the container.
    let last_pid = "read -r p < /proc/sys/kernel/ns_last_pid; echo $p";
    let before = run(&mut shell, last_pid).await.stdout;
    for i in 0..20 {
        assert_eq!(run(&mut shell, &control.has_session()).await.exit_code, 0);
        assert_eq!(run(&mut shell, &control.send_keys(&[format!("e{i}")], &[])).await.exit_code, 0);
        let look = run(&mut shell, &observer.control_command(separator, &control)).await;
        observer.read(&look.stdout, separator).unwrap();
    }
    assert_eq!(run(&mut shell, last_pid).await.stdout, before, "a process was started");

    // Keys tmux's parser would otherwise read (quotes, `$`, `~`, `;`, `#{}`, escapes, control
    // characters) are typed exactly (into `cat`, whose terminal is line-buffered: a long key
    // is typed into the shell by the actor's own test).
    let words: Vec<String> = [
        "",
        "a\"b",
        "$HOME x",
        "back\\n",
        "tab\there",
        "esc\u{1b}[1m",
        "~/x",
        "#{pane_id}",
        "semi;",
        "bs\\;",
        "b{r}",
        "it's",
        "é ü",
        "-la",
        "%if",
        "x \\\\ y",
        "nul\0here",
    ]
    .iter()
    .map(|w| w.to_string())
    .collect();
    run(&mut shell, &keys("")).await;
    for word in &words {
        let typed = control.send_keys(&[word.clone(), "Enter".into()], &[]);
        assert_eq!(run(&mut shell, &typed).await.exit_code, 0, "{word:?}");
    }
    run(&mut shell, &control.send_keys(&["C-d".into()], &[])).await;
    let mut expected: String = (0..20).map(|i| format!("e{i}")).collect();
    expected.push('\n');
    for word in &words {
        // The shell drops a NUL from a command it reads: a tmux process never types one.
        expected.push_str(&word.replace('\0', ""));
        expected.push('\n');
    }
    let mut file = String::new();
    for _ in 0..100 {
        file = run(&mut shell, "cat /tmp/typed").await.stdout;
        if file.ends_with(&expected) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(file, format!("round 0\nround 1\n{expected}"));

    // A foreground program whose name holds a line break (tmux 3.3 prints it as `_`; the
    // probe keeps every line tmux prints): the probe's answer is still the same.
    run(&mut shell, &keys("bash -c 'exec -a \"$(printf \"top\\nline\")\" sleep 60'")).await;
    for _ in 0..100 {
        if run(&mut shell, &tmux::idle_probe_command()).await.stdout.starts_with("top") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let probe = run(&mut shell, &tmux::idle_probe_command()).await;
    assert!(probe.stdout.starts_with("top"), "{probe:?}");
    assert_eq!(run(&mut shell, &control.idle_probe()).await, probe);

    // Without the client (detached, as an agent's tmux command could), the same commands
    // answer through tmux processes.
    run(&mut shell, "tmux detach-client -s terminus-2").await;
    assert_eq!(run(&mut shell, &control.has_session()).await.exit_code, 0);
    assert_eq!(
        run(&mut shell, &control.capture_pane(false)).await,
        run(&mut shell, &tmux::capture_pane_command(false)).await
    );
    // A client killed by a signal: nothing reports it into the next answers, which come from
    // tmux processes.
    let nonce = control::new_nonce();
    let report = run(&mut shell, &control::start_command(&nonce)).await;
    let control = Control::started(&report.stdout, &nonce).unwrap_or_else(|| panic!("{report:?}"));
    run(&mut shell, "kill -9 $(tmux list-clients -t terminus-2 -F '#{client_pid}')").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        run(&mut shell, &control.capture_pane(false)).await,
        run(&mut shell, &tmux::capture_pane_command(false)).await
    );
    run(&mut shell, "tmux kill-session -t terminus-2").await;
    assert_ne!(run(&mut shell, &control.has_session()).await.exit_code, 0);
    container.remove().await.unwrap();
}

/// Two networks of one name (a killed run's creation landing beside the next run's) leave the
/// name ambiguous to every container that names it: making the network leaves one of that
/// name, the oldest, which a container then joins by name.
#[tokio::test(flavor = "multi_thread")]
async fn a_network_made_twice_under_one_name_is_left_once() {
    let Some(docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    let name = format!("terminus-test-twice-{}", std::process::id());
    let labels = HashMap::from([(TEST_LABEL.to_string(), "twice".to_string())]);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let request = bollard::models::NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        ids.push(docker.create_network(request).await.unwrap().id);
    }
    let named = |docker: bollard::Docker, name: String| async move {
        let list = docker.list_networks(None::<bollard::query_parameters::ListNetworksOptions>).await.unwrap();
        list.into_iter().filter(|n| n.name.as_deref() == Some(&name)).filter_map(|n| n.id).collect::<Vec<_>>()
    };
    assert_eq!(named(docker.clone(), name.clone()).await.len(), 2, "the engine made both");
    engine.ensure_network(&name, labels).await.unwrap();
    assert_eq!(named(docker.clone(), name.clone()).await, [ids[0].clone()], "the oldest is kept");
    let spec = ContainerSpec {
        image: "terminus-base:bookworm".into(),
        name: format!("terminus-test-twice-{}", std::process::id()),
        labels: HashMap::from([(TEST_LABEL.to_string(), "twice".to_string())]),
        network: Some(name.clone()),
        ..Default::default()
    };
    let container = engine.start_container(&spec).await.unwrap();
    container.remove().await.unwrap();
    engine.remove_network(&name).await.unwrap();
}

/// Removals that race (a trial's teardown and a job's sweep) all succeed, and each returns only
/// once the container is gone: the engine answers all but the first with a conflict.
#[tokio::test(flavor = "multi_thread")]
async fn racing_removals_each_return_once_the_container_is_gone() {
    let Some(docker) = docker().await else {
        return;
    };
    let engine = Engine::connect().await.unwrap();
    for round in 0..3 {
        let spec = ContainerSpec {
            image: "terminus-base:bookworm".into(),
            name: format!("terminus-test-race-{}-{round}", std::process::id()),
            labels: HashMap::from([(TEST_LABEL.to_string(), "race".to_string())]),
            ..Default::default()
        };
        let container = engine.start_container(&spec).await.unwrap();
        let id = container.id.clone();
        let removals = (0..4).map(|_| {
            let (engine, docker, id) = (engine.clone(), docker.clone(), id.clone());
            async move {
                engine.remove_container(&id).await?;
                // Returned: the container must be gone now, whoever removed it.
                match docker.inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>).await {
                    Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
                    other => {
                        Err(terminus_sandbox::SandboxError::Api(format!("still there: {:?}", other.map(|c| c.state))))
                    }
                }
            }
        });
        for result in futures_util::future::join_all(removals).await {
            result.unwrap();
        }
    }
}
