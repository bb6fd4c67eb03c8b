//! Harbor task features beyond a Dockerfile, each against the real engine.

use bollard::query_parameters::{BuildImageOptionsBuilder, RemoveImageOptionsBuilder};
use futures_util::StreamExt;
use serde_json::json;
use terminus_mock_llm::{Conversation, MockServer, Script};

use crate::support::BoundedCommand;
use crate::support::{
    cmd, containers_of_job, docker, heavy_lock, job_yaml, read_json, reply, run_terminus, temp_dir, trial_dirs,
    write_job,
};

/// A task whose `task.toml` names `image` and which has no `environment/` at all.
fn prebuilt_task(root: &std::path::Path, name: &str, image: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[environment]\ndocker_image = \"{image}\"\n"),
    )
    .unwrap();
    std::fs::write(dir.join("instruction.md"), format!("PREBUILT {name}: write 42 to /app/answer.txt\n")).unwrap();
    // The reward proves the image was the one named: only it has /prebuilt-marker.
    std::fs::write(
        dir.join("tests/test.sh"),
        "#!/bin/bash\n[ -f /prebuilt-marker ] && [ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    dir
}

/// `docker_image` without a Dockerfile: an image on the engine is used as it is; one that is
/// nowhere (no registry answers here) is that trial's EnvironmentBuildError, naming the image,
/// and its sibling is unaffected.
#[tokio::test(flavor = "multi_thread")]
async fn a_prebuilt_image_is_used_as_it_is_and_a_missing_one_is_named() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let image = "terminus-test-prebuilt:1";
    let dockerfile = "FROM terminus-base:bookworm\nRUN touch /prebuilt-marker && mkdir -p /app\nWORKDIR /app\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(dockerfile.len() as u64);
    header.set_mode(0o644);
    let mut context = tar::Builder::new(Vec::new());
    context.append_data(&mut header, "Dockerfile", dockerfile.as_bytes()).unwrap();
    let context = context.into_inner().unwrap();
    let options = BuildImageOptionsBuilder::default().dockerfile("Dockerfile").t(image).rm(true).build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(item) = build.next().await {
        let info = item.expect("the test image builds");
        assert!(info.error_detail.is_none(), "{:?}", info.error_detail);
    }

    let dir = temp_dir("prebuilt");
    let tasks = dir.path().join("tasks");
    let present = prebuilt_task(&tasks, "prebuilt-present", image);
    let missing_image = "registry.invalid/terminus/none-such:1";
    let missing = prebuilt_task(&tasks, "prebuilt-missing", missing_image);
    let script = Script {
        conversations: vec![Conversation {
            when: "PREBUILT".into(),
            turns: vec![
                reply(cmd("echo 42 > /app/answer.txt\n", 0.2), false),
                reply(json!([]), true),
                reply(json!([]), true),
            ],
        }],
        ..Script::default()
    };
    let server = MockServer::start(script, 0).await.unwrap();
    let config = job_yaml(dir.path(), "prebuilt", &server.api_base(), "", &[present, missing]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "one trial errs: {}", String::from_utf8_lossy(&out.stderr));

    let job_dir = dir.path().join("prebuilt");
    let results: Vec<serde_json::Value> =
        trial_dirs(&job_dir).iter().map(|t| read_json(&t.join("result.json"))).collect();
    assert_eq!(results.len(), 2);
    let by_task = |name: &str| results.iter().find(|r| r["task_name"] == name).unwrap().clone();
    let ok = by_task("prebuilt-present");
    assert!(ok["exception_info"].is_null(), "{}", ok["exception_info"]);
    assert_eq!(ok["verifier_result"]["rewards"]["reward"], 1.0, "the named image ran: {ok}");
    let failed = by_task("prebuilt-missing");
    // Harbor's name for a failed build (a RuntimeError), our kind beside it.
    assert_eq!(failed["exception_info"]["exception_type"], "RuntimeError", "{failed}");
    assert_eq!(failed["exception_info"]["kind"], "EnvironmentBuildError", "{failed}");
    let message = failed["exception_info"]["exception_message"].as_str().unwrap();
    assert!(message.contains(missing_image) && message.contains("prebuilt-missing"), "{message}");
    assert_eq!(containers_of_job(&docker, read_json(&job_dir.join("result.json"))["id"].as_str().unwrap()).await, 0);

    // `tasks check` accepts both: a prebuilt image needs no recipe.
    let check = std::process::Command::new(crate::support::terminus_bin())
        .args(["tasks", "check"])
        .arg(&tasks)
        .output_bounded()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stdout));
    let _ = docker.remove_image(image, Some(RemoveImageOptionsBuilder::default().force(true).build()), None).await;
    server.shutdown();
}

/// A task built `FROM terminus-base:bookworm` with `toml`, a solution and tests.
fn task(root: &std::path::Path, name: &str, toml: &str, solve: &str, test: &str) -> std::path::PathBuf {
    let test_sh = format!("if {test}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt");
    crate::support::base_task(root, name, toml, solve, &test_sh)
}

/// The network interfaces a process sees, as one line (`lo` alone: no network).
const INTERFACES: &str = "ls /sys/class/net | sort | tr '\\n' ' '";

/// task.toml keys acted on as Harbor acts on them, with the oracle agent (no model needed):
/// per-phase `network_mode` (the agent offline, the verifier online; a task offline
/// throughout), `healthcheck` (passing; failing → HealthcheckError), `${VAR}` templates in
/// `[environment].env` and `[solution].env`, compose sidecars (built from the task, healthy
/// before `main` starts, reached by name, a shared volume; all removed after); and what cannot
/// run here is that trial's UnsupportedTaskError naming the key (GPUs on an engine without),
/// while `tasks check` accepts every one of them, as Harbor does.
#[tokio::test(flavor = "multi_thread")]
async fn task_keys_are_acted_on_or_named() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("task-keys");
    let tasks = dir.path().join("tasks");
    let solve_net = format!("{INTERFACES} > /app/agent-net.txt");
    let tasks = vec![
        task(
            &tasks,
            "net-phases",
            "[agent]\nnetwork_mode = \"no-network\"\n",
            &solve_net,
            &format!("[ \"$(cat /app/agent-net.txt)\" = 'lo ' ] && [ \"$({INTERFACES})\" != 'lo ' ]"),
        ),
        task(
            &tasks,
            "net-none",
            "[environment]\nnetwork_mode = \"no-network\"\n",
            &solve_net,
            &format!("[ \"$(cat /app/agent-net.txt)\" = 'lo ' ] && [ \"$({INTERFACES})\" = 'lo ' ]"),
        ),
        task(
            &tasks,
            "health-and-env",
            "artifacts = [\"/app/env.txt\", { source = \"/app\", destination = \"whole-app\" }]\n\
             [environment]\nenv = { GREETING = \"${TERMINUS_TEST_UNSET_VAR:-hello}\", WHO = \"${TERMINUS_TEST_WHO}\" }\n\
             [environment.healthcheck]\ncommand = \"test -d /app\"\n[solution]\nenv = { MARK = \"${TERMINUS_TEST_WHO}!\" }\n",
            "echo \"$GREETING $WHO $MARK\" > /app/env.txt",
            // `MARK` is not a whole-value template, so it stays literal (Harbor's rule).
            "[ \"$(cat /app/env.txt)\" = 'hello there ${TERMINUS_TEST_WHO}!' ]",
        ),
        task(
            &tasks,
            "health-bad",
            "[environment.healthcheck]\ncommand = \"false\"\nretries = 2\ninterval_sec = 0.1\nstart_interval_sec = 0.1\n",
            "true",
            "true",
        ),
        // Artifacts with `exclude` patterns and from a sidecar, after the task's collect hooks
        // ran in `main` and in the sidecar.
        task(
            &tasks,
            "compose",
            "artifacts = [{ source = \"/app/out\", destination = \"out\", exclude = [\"*.tmp\", \"cache\"] },\
             { source = \"/state/dump.txt\", service = \"db\", destination = \"db-dump.txt\" }]\n\
             [environment]\nenv = { GREETING = \"${TERMINUS_TEST_WHO}\" }\n\
             [[verifier.collect]]\ncommand = \"echo hooked > /app/out/hook.txt\"\n\
             [[verifier.collect]]\nservice = \"db\"\ncommand = \"mkdir -p /state && echo dumped > /state/dump.txt\"\n",
            "exec 3<>/dev/tcp/db/7000 && cat <&3 > /app/reply.txt \
             && mkdir -p /app/out/cache && echo k > /app/out/keep.txt && echo t > /app/out/x.tmp && echo c > /app/out/cache/c.txt",
            "[ \"$(cat /app/reply.txt)\" = 'pong there' ] && [ \"$(cat /shared/by-db)\" = written ] && [ \"$DB_HOST\" = db ]",
        ),
        task(&tasks, "gpu", "[environment]\ngpus = 1\n", "true", "true"),
        // A compose file as Harbor's adapters write it (KUMO's): `main` restates Harbor's base
        // file (image name, idle command, log mounts, `${CPUS}`) and builds from its own recipe
        // with its own memory limit; a sidecar writes into `/logs/verifier`, where the tests
        // read it; a verdict planted there by the agent is still removed.
        task(
            &tasks,
            "compose-harbor",
            "",
            "echo 1 > /logs/verifier/reward.json",
            "[ \"$(cat /app/built-from)\" = custom ] && [ \"$(cat /logs/verifier/by-sidecar.txt)\" = from-sidecar ] \
             && [ ! -e /logs/verifier/reward.json ] \
             && [ \"$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\" = 1610612736 ]",
        ),
        // The oracle as a non-root `[agent].user`, with `solve.sh` checked in as 0644 (Harbor's
        // hello-user): made executable as root first, as Harbor does.
        task(
            &tasks,
            "oracle-user",
            "[agent]\nuser = \"agent\"\n",
            "whoami > /app/whoami.txt",
            "[ \"$(cat /app/whoami.txt)\" = agent ]",
        ),
        // An image whose ENTRYPOINT ignores the command it is given (Harbor's hello-healthcheck):
        // the log directories are made all the same.
        task(
            &tasks,
            "entrypoint",
            "",
            "echo ran > /app/ran.txt",
            "[ \"$(cat /app/ran.txt)\" = ran ] && [ -f /logs/agent/oracle.txt ]",
        ),
    ];
    std::fs::write(
        tasks[8].join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /app && printf '#!/bin/sh\\nexec sleep infinity\\n' > /entry.sh && chmod +x /entry.sh\n\
         WORKDIR /app\nENTRYPOINT [\"/entry.sh\"]\n",
    )
    .unwrap();
    std::fs::write(
        tasks[7].join("environment/Dockerfile"),
        "FROM terminus-base:bookworm\nRUN useradd --create-home agent && mkdir -p /app && chown agent /app\nWORKDIR /app\n",
    )
    .unwrap();
    // A sidecar built from the task, healthy only once it listens; `main` waits for it, reaches
    // it by name and shares a volume with it; `${GREETING}` comes from the task's env.
    let env = tasks[4].join("environment");
    std::fs::create_dir_all(env.join("db")).unwrap();
    std::fs::write(env.join("db/Dockerfile"), "FROM terminus-base:bookworm\nCOPY serve.pl /serve.pl\n").unwrap();
    std::fs::write(
        env.join("db/serve.pl"),
        "use IO::Socket::INET;\nmy $s = IO::Socket::INET->new(LocalPort => 7000, Listen => 5, ReuseAddr => 1) or die;\n\
         open(my $f, '>', '/shared/by-db'); print $f \"written\\n\"; close $f;\nopen(my $r, '>', '/ready'); close $r;\n\
         while (my $c = $s->accept) { print $c \"pong $ENV{GREETING}\\n\"; close $c; }\n",
    )
    .unwrap();
    std::fs::write(
        env.join("docker-compose.yaml"),
        "services:\n  main:\n    environment:\n      DB_HOST: db\n    volumes:\n      - shared:/shared\n    depends_on:\n      db:\n        condition: service_healthy\n\
         \x20 db:\n    build: ./db\n    command: [\"perl\", \"/serve.pl\"]\n    environment:\n      GREETING: ${GREETING}\n\
         \x20   volumes:\n      - shared:/shared\n    healthcheck:\n      test: [\"CMD\", \"test\", \"-f\", \"/ready\"]\n      interval: 1s\n      retries: 30\n\
         volumes:\n  shared:\n",
    )
    .unwrap();
    let env = tasks[6].join("environment");
    std::fs::write(
        env.join("Dockerfile.main"),
        "FROM terminus-base:bookworm\nRUN mkdir -p /app && echo custom > /app/built-from\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(
        env.join("docker-compose.yaml"),
        r#"services:
  recorder:
    image: terminus-base:bookworm
    command: ["sh", "-c", "mkdir -p /logs/verifier && echo from-sidecar > /logs/verifier/by-sidecar.txt && exec sleep infinity"]
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
    networks: [internal]
    healthcheck:
      test: ["CMD", "test", "-f", "/logs/verifier/by-sidecar.txt"]
      interval: 1s
      retries: 30
  main:
    build:
      context: ${CONTEXT_DIR}
      dockerfile: Dockerfile.main
    image: ${MAIN_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    volumes:
      - ${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}
      - ${HOST_AGENT_LOGS_PATH}:${ENV_AGENT_LOGS_PATH}
    depends_on:
      recorder:
        condition: service_healthy
    networks:
      - internal
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: 1536M
networks:
  internal:
    internal: false
"#,
    )
    .unwrap();
    // The tasks read `TERMINUS_TEST_WHO` from the host: the job passes it by name.
    let host_env = "environment:\n  host_env: [TERMINUS_TEST_WHO]\n";
    let config = write_job(dir.path(), "keys", host_env, "  - name: oracle\n", &tasks);
    let out =
        tokio::task::spawn_blocking(move || run_terminus(&config, &[("TERMINUS_TEST_WHO", "there")])).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "some trials err: {}", String::from_utf8_lossy(&out.stderr));

    let job_dir = dir.path().join("keys");
    let results: Vec<serde_json::Value> =
        trial_dirs(&job_dir).iter().map(|t| read_json(&t.join("result.json"))).collect();
    assert_eq!(results.len(), 9);
    let by_task = |name: &str| results.iter().find(|r| r["task_name"] == name).unwrap().clone();
    for name in ["net-phases", "net-none", "health-and-env", "compose", "compose-harbor", "oracle-user", "entrypoint"] {
        let result = by_task(name);
        assert!(result["exception_info"].is_null(), "{name}: {}", result["exception_info"]);
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{name}: {result}");
    }
    // The task's own artifacts, where Harbor 0.26 puts them.
    let artifacts_of = |name: &str| {
        let trial = trial_dirs(&job_dir).into_iter().find(|t| read_json(&t.join("result.json"))["task_name"] == name);
        trial.unwrap().join("artifacts")
    };
    let out = artifacts_of("compose");
    assert_eq!(std::fs::read_to_string(out.join("out/hook.txt")).unwrap(), "hooked\n", "main's hook ran first");
    assert!(out.join("out/keep.txt").is_file(), "{:?}", crate::support::all_files(&out));
    assert!(!out.join("out/x.tmp").exists() && !out.join("out/cache").exists(), "excluded");
    assert_eq!(
        std::fs::read_to_string(out.join("db-dump.txt")).unwrap(),
        "dumped\n",
        "from the sidecar, after its hook"
    );
    let sidecar_log = artifacts_of("compose-harbor").with_file_name("verifier").join("by-sidecar.txt");
    assert_eq!(std::fs::read_to_string(sidecar_log).unwrap(), "from-sidecar\n", "the sidecar's log is the trial's");
    let artifacts = artifacts_of("health-and-env");
    assert_eq!(std::fs::read_to_string(artifacts.join("app/env.txt")).unwrap(), "hello there ${TERMINUS_TEST_WHO}!\n");
    assert!(artifacts.join("whole-app/env.txt").is_file(), "{:?}", crate::support::all_files(&artifacts));
    let failed = |name: &str, kind: &str, names: &str| {
        let result = by_task(name);
        assert_eq!(result["exception_info"]["exception_type"], kind, "{name}: {result}");
        let message = result["exception_info"]["exception_message"].as_str().unwrap().to_string();
        assert!(message.contains(names) && message.contains(name), "{name}: {message}");
    };
    failed("health-bad", "HealthcheckError", "environment.healthcheck");
    let gpus = docker.info().await.unwrap().runtimes.is_some_and(|r| r.contains_key("nvidia"));
    if !gpus {
        failed("gpu", "UnsupportedTaskError", "environment.gpus");
    }
    // Every container (the sidecar too), the trial's network and its volume are gone.
    let job_id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    let left = crate::support::leftovers_of_job(&docker, &job_id).await;
    assert_eq!(left.containers, 0);
    assert!(left.networks.iter().all(|n| !n.ends_with("-net")), "{:?}", left.networks);
    assert_eq!(left.volumes, 0, "the trial's volume is removed");

    // Harbor loads every one of these tasks; so does `tasks check`, naming what will not run.
    let check = std::process::Command::new(crate::support::terminus_bin())
        .args(["tasks", "check"])
        .arg(dir.path().join("tasks"))
        .output_bounded()
        .unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{report}");
    assert!(report.contains("9 of 9 tasks valid"), "{report}");
}

/// Probes run inside `main` (sourced by solve.sh and test.sh): through the proxy named by
/// `https_proxy`, a `CONNECT` then a GET (`connect NAME` prints the proxy's status line and, when
/// admitted, the sidecar's reply), a plain absolute-URI GET (`plain NAME`), and a connection
/// that does not use the proxy (`direct NAME`).
const PROBES: &str = r#"
proxy_fd() { local p=${https_proxy#http://}; exec 3<>"/dev/tcp/${p%:*}/${p##*:}"; }
head_line() { local status line; IFS= read -r status <&3; while IFS= read -r line <&3 && [ -n "${line%$'\r'}" ]; do :; done; echo "${status%$'\r'}"; }
connect() {
  proxy_fd || { echo "no proxy"; return; }
  printf 'CONNECT %s:8080 HTTP/1.1\r\nHost: %s:8080\r\n\r\n' "$1" "$1" >&3
  local status; status=$(head_line)
  case "$status" in
    *" 200 "*) printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3; echo "$status | $(tail -n 1 <&3)" ;;
    *) echo "$status" ;;
  esac
  exec 3<&-
}
plain() {
  proxy_fd || { echo "no proxy"; return; }
  printf 'GET http://%s:8080/ HTTP/1.1\r\nHost: %s:8080\r\n\r\n' "$1" "$1" >&3
  local status; status=$(head_line)
  case "$status" in *" 200 "*) echo "$status | $(tail -n 1 <&3)" ;; *) echo "$status" ;; esac
  exec 3<&-
}
direct() { if timeout 5 bash -c "exec 3<>/dev/tcp/$1/8080" 2>/dev/null; then echo reached; else echo refused; fi; }
"#;

/// A sidecar answering every request with `hello from NAME` on port 8080.
const SERVE: &str = "use IO::Socket::INET;\nmy $name = shift;\n\
    my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 16, ReuseAddr => 1) or die;\n\
    open(my $r, '>', '/ready'); close $r;\n\
    while (my $c = $s->accept) { while (defined(my $l = <$c>)) { last if $l =~ /^\\r?\\n$/ }\n\
    print $c \"HTTP/1.0 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nhello from $name\\n\"; close $c; }\n";

/// An allowlist task: two web sidecars, `allowed` and `denied`, the probes, and `toml`.
fn allowlist_task(root: &std::path::Path, name: &str, toml: &str, solve: &str, test: &str) -> std::path::PathBuf {
    let dir = task(root, name, &format!("artifacts = [\"/app/results.txt\"]\n{toml}"), "", "");
    let env = dir.join("environment");
    std::fs::create_dir_all(env.join("web")).unwrap();
    std::fs::write(env.join("web/Dockerfile"), "FROM terminus-base:bookworm\nCOPY serve.pl /serve.pl\n").unwrap();
    std::fs::write(env.join("web/serve.pl"), SERVE).unwrap();
    let service = |name: &str| {
        format!(
            "  {name}:\n    build: ./web\n    command: [\"perl\", \"/serve.pl\", \"{name}\"]\n    healthcheck:\n      test: [\"CMD\", \"test\", \"-f\", \"/ready\"]\n      interval: 1s\n      retries: 30\n"
        )
    };
    std::fs::write(
        env.join("docker-compose.yaml"),
        format!(
            "services:\n  main:\n    depends_on:\n      allowed:\n        condition: service_healthy\n      denied:\n        condition: service_healthy\n{}{}",
            service("allowed"),
            service("denied")
        ),
    )
    .unwrap();
    std::fs::write(dir.join("solution/probes.sh"), PROBES).unwrap();
    std::fs::write(dir.join("tests/probes.sh"), PROBES).unwrap();
    std::fs::write(dir.join("solution/solve.sh"), format!("#!/bin/bash\nsource /solution/probes.sh\n{solve}\n"))
        .unwrap();
    std::fs::write(
        dir.join("tests/test.sh"),
        format!(
            "#!/bin/bash\nsource /tests/probes.sh\n{test}\ncat /app/results.txt\n\
             if [ \"$(cat /app/results.txt)\" = \"$(cat /app/expected.txt)\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
        ),
    )
    .unwrap();
    dir
}

/// A multi-step allowlist task: a public task whose first step allowlists its agent (public
/// verifier), and whose second allowlists its verifier to the other host (public agent).
fn allowlist_steps_task(root: &std::path::Path, name: &str, probes: &str, expected: &str) -> std::path::PathBuf {
    let toml = "[[steps]]\nname = \"fenced\"\n[steps.agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"allowed\"]\n\
                [[steps]]\nname = \"open\"\n[steps.verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"denied\"]\n";
    let dir = allowlist_task(root, name, toml, "", "");
    std::fs::remove_file(dir.join("instruction.md")).unwrap();
    let steps = [
        (
            "fenced",
            probes.to_string(),
            format!(
                "{{ echo \"verifier proxy=$https_proxy\"; echo \"direct denied: $(direct denied)\"; }} >> /app/results.txt\n\
                 printf '%s\\n' '{expected}' 'verifier proxy=' 'direct denied: reached' > /app/expected.txt"
            ),
        ),
        (
            "open",
            "{ echo \"agent proxy=$https_proxy\"; echo \"direct allowed: $(direct allowed)\"; } > /app/results.txt".to_string(),
            "{ echo \"verifier connect denied: $(connect denied)\"; echo \"verifier connect allowed: $(connect allowed)\"; } >> /app/results.txt\n\
             printf '%s\\n' 'agent proxy=' 'direct allowed: reached' \
               'verifier connect denied: HTTP/1.1 200 Connection established | hello from denied' \
               'verifier connect allowed: HTTP/1.1 403 Forbidden' > /app/expected.txt"
                .to_string(),
        ),
    ];
    for (step, solve, test) in steps {
        let step_dir = dir.join("steps").join(step);
        std::fs::create_dir_all(step_dir.join("solution")).unwrap();
        std::fs::create_dir_all(step_dir.join("tests")).unwrap();
        std::fs::write(step_dir.join("instruction.md"), format!("{step}\n")).unwrap();
        std::fs::write(step_dir.join("solution/probes.sh"), PROBES).unwrap();
        std::fs::write(
            step_dir.join("solution/solve.sh"),
            format!("#!/bin/bash\nsource /solution/probes.sh\n{solve}\n"),
        )
        .unwrap();
        std::fs::write(
            step_dir.join("tests/test.sh"),
            format!(
                "#!/bin/bash\nsource /tests/probes.sh\n{test}\ncat /app/results.txt\n\
                 if [ \"$(cat /app/results.txt)\" = \"$(cat /app/expected.txt)\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
            ),
        )
        .unwrap();
    }
    dir
}

/// `network_mode = "allowlist"` enforced, with the oracle agent (no model needed) and two web
/// sidecars of which only `allowed` is listed. In the allowlisted phase, `main` reaches the
/// allowed host through the proxy (CONNECT and plain HTTP) and is refused the other one (403),
/// and a connection that bypasses the proxy fails; the phases switch around it (public set-up,
/// allowlisted agent, public verifier that reaches both directly again; or an allowlist from
/// the start whose verifier phase allows the other host). Nothing is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn allowlisted_phases_reach_only_their_hosts() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let dir = temp_dir("allowlist");
    let tasks = dir.path().join("tasks");
    let agent_probes = "{ echo \"agent proxy=$https_proxy\"; echo \"connect allowed: $(connect allowed)\"; \
        echo \"connect denied: $(connect denied)\"; echo \"plain allowed: $(plain allowed)\"; \
        echo \"plain denied: $(plain denied)\"; echo \"direct allowed: $(direct allowed)\"; } > /app/results.txt";
    let agent_expected = "agent proxy=http://terminus-egress:3128\n\
        connect allowed: HTTP/1.1 200 Connection established | hello from allowed\n\
        connect denied: HTTP/1.1 403 Forbidden\n\
        plain allowed: HTTP/1.0 200 OK | hello from allowed\n\
        plain denied: HTTP/1.1 403 Forbidden\n\
        direct allowed: refused";
    let tasks = vec![
        allowlist_task(
            &tasks,
            "allow-agent",
            "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"Allowed.\"]\n",
            agent_probes,
            &format!(
                "{{ echo \"verifier proxy=$https_proxy\"; echo \"direct denied: $(direct denied)\"; }} >> /app/results.txt\n\
                 printf '%s\\n' '{agent_expected}' 'verifier proxy=' 'direct denied: reached' > /app/expected.txt"
            ),
        ),
        allowlist_task(
            &tasks,
            "allow-phases",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"allowed\"]\n\
             [verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"*.invalid\", \"denied\"]\n",
            agent_probes,
            &format!(
                "{{ echo \"verifier connect denied: $(connect denied)\"; echo \"verifier connect allowed: $(connect allowed)\"; \
                   echo \"verifier direct denied: $(direct denied)\"; }} >> /app/results.txt\n\
                 printf '%s\\n' '{agent_expected}' 'verifier connect denied: HTTP/1.1 200 Connection established | hello from denied' \
                   'verifier connect allowed: HTTP/1.1 403 Forbidden' 'verifier direct denied: refused' > /app/expected.txt"
            ),
        ),
        // An allowlisted agent with a separate verifier (public, as the environment it copies):
        // the proxy and the verifier's container (and its sidecars) coexist, and all go.
        allowlist_task(
            &tasks,
            "allow-separate",
            "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"allowed\"]\n\
             [verifier]\nenvironment_mode = \"separate\"\n",
            agent_probes,
            &format!(
                "{{ echo \"verifier proxy=$https_proxy\"; echo \"direct denied: $(direct denied)\"; }} >> /app/results.txt\n\
                 printf '%s\\n' '{agent_expected}' 'verifier proxy=' 'direct denied: reached' > /app/expected.txt"
            ),
        ),
        allowlist_steps_task(&tasks, "allow-steps", agent_probes, agent_expected),
    ];
    let config = write_job(dir.path(), "allow", "", "  - name: oracle\n", &tasks);
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();

    let job_dir = dir.path().join("allow");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 4, "{}", String::from_utf8_lossy(&out.stderr));
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        let results = std::fs::read_to_string(trial.join("artifacts/app/results.txt")).unwrap_or_default();
        let stdout = std::fs::read_to_string(trial.join("verifier/test-stdout.txt")).unwrap_or_default();
        assert!(result["exception_info"].is_null(), "{}: {}", result["task_name"], result["exception_info"]);
        assert_eq!(
            result["verifier_result"]["rewards"]["reward"], 1.0,
            "{}: results:\n{results}\ntest output:\n{stdout}\nsteps: {}",
            result["task_name"], result["step_results"]
        );
    }
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Every container (main, the sidecars, the proxies) and every network of the job are gone.
    let job_id = read_json(&job_dir.join("result.json"))["id"].as_str().unwrap().to_string();
    let left = crate::support::leftovers_of_job(&docker, &job_id).await;
    assert_eq!(left.containers, 0);
    assert!(left.networks.is_empty(), "{:?}", left.networks);

    // The job's own hosts (Harbor's `extra_allowed_hosts`): an offline agent phase becomes an
    // allowlist of the agent's; the public verifier ignores the verifier's (named).
    let extra = allowlist_task(
        &dir.path().join("tasks-extra"),
        "extra-hosts",
        "[agent]\nnetwork_mode = \"no-network\"\n",
        agent_probes,
        &format!(
            "{{ echo \"verifier proxy=$https_proxy\"; echo \"direct denied: $(direct denied)\"; }} >> /app/results.txt\n\
             printf '%s\\n' '{agent_expected}' 'verifier proxy=' 'direct denied: reached' > /app/expected.txt"
        ),
    );
    let config = write_job(
        dir.path(),
        "extra",
        "verifier:\n  extra_allowed_hosts: [denied]\n",
        "  - name: oracle\n    extra_allowed_hosts: [Allowed.]\n",
        &[extra],
    );
    let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trial = &trial_dirs(&dir.path().join("extra"))[0];
    let result = read_json(&trial.join("result.json"));
    let results = std::fs::read_to_string(trial.join("artifacts/app/results.txt")).unwrap_or_default();
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "results:\n{results}");
    let warnings = result["warnings"].to_string();
    assert!(warnings.contains("verifier.extra_allowed_hosts [\\\"denied\\\"]: ignored"), "{warnings}");
}
