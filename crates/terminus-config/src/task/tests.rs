//! Unit tests of task loading: task directories written to temporary directories and read back.

use super::*;
use std::collections::BTreeMap;

fn write_task(dir: &Path, toml: &str) {
    std::fs::create_dir_all(dir.join("environment")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("instruction.md"), "# canary GUID 1234\nDo the thing.\n").unwrap();
    std::fs::write(dir.join("environment/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    std::fs::write(dir.join("tests/test.sh"), "#!/bin/bash\n").unwrap();
}

#[test]
fn loads_a_task_with_harbor_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-task");
    write_task(&dir, "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[environment]\nmemory = \"1G\"\n");
    assert!(Task::is_task_dir(&dir));
    let task = Task::load(&dir).unwrap();
    assert_eq!(task.name, "my-task");
    assert_eq!(task.instruction, "Do the thing.\n");
    assert_eq!(task.config.agent.timeout_sec, Some(120.0));
    assert_eq!(task.config.verifier.timeout_sec, 600.0);
    assert_eq!(task.config.environment.memory_mb().unwrap(), 1024);
    assert_eq!(task.network_plan().agent.mode, NetworkMode::Public);
    assert!(task.notices.is_empty() && task.unrunnable().is_none());
}

#[test]
fn a_prebuilt_image_needs_no_dockerfile() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("prebuilt");
    write_task(&dir, "version = \"1.0\"\n[environment]\ndocker_image = \"example/tool:1\"\n");
    std::fs::remove_dir_all(dir.join("environment")).unwrap();
    assert!(Task::is_task_dir(&dir));
    assert_eq!(Task::load(&dir).unwrap().config.environment.docker_image.as_deref(), Some("example/tool:1"));
    // Without an image, the recipe is required, and the error says both.
    let built = tmp.path().join("built");
    write_task(&built, "version = \"1.0\"\n");
    std::fs::remove_file(built.join("environment/Dockerfile")).unwrap();
    let err = Task::load(&built).unwrap_err().to_string();
    assert!(err.contains("environment/Dockerfile is missing") && err.contains("docker_image"), "{err}");
}

#[test]
fn paths_a_task_names_must_stay_inside_their_root() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "artifacts = [{ source = \"/app/x\", destination = \"/home/me/.ssh/authorized_keys\" }]\n",
            "artifacts[0].destination",
        ),
        (
            "artifacts = [\"/app/y\", { source = \"/app/x\", destination = \"../../../escape\" }]\n",
            "artifacts[1].destination",
        ),
        ("artifacts = [{ source = \"/app/x\", destination = \"a/../../b\" }]\n", "artifacts[0].destination"),
        ("artifacts = [{ source = \"/app/../etc\" }]\n", "artifacts[0].source"),
        ("[environment]\nskills_dir = \"skills\"\n", "environment.skills_dir"),
        ("[environment]\nskills_dir = \"/skills/../etc\"\n", "environment.skills_dir"),
    ];
    for (idx, (toml, key)) in cases.iter().enumerate() {
        let dir = tmp.path().join(format!("escape-{idx}"));
        write_task(&dir, &format!("version = \"1.0\"\n{toml}"));
        let err = Task::load(&dir).expect_err(toml).to_string();
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
    }
    let dir = tmp.path().join("inside");
    write_task(&dir, "version = \"1.0\"\nartifacts = [{ source = \"/app/x\", destination = \"out/x.txt\" }]\n");
    assert!(Task::load(&dir).is_ok());
    assert!(
        confined_relative("a/./b") && !confined_relative("") && !confined_relative(".") && !confined_relative("a\0b")
    );
}

#[test]
fn bad_task_toml_names_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("broken");
    write_task(&dir, "[agent\n");
    let err = Task::load(&dir).unwrap_err().to_string();
    assert!(err.contains("broken") && err.contains("task.toml line 1"), "{err}");
}

#[test]
fn bad_values_name_their_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (toml, key) in [
        ("[agent]\ntimeout_sec = \"soon\"\n", "agent.timeout_sec"),
        ("[agent]\ntimeout_sec = -5.0\n", "agent.timeout_sec"),
        ("[verifier]\ntimeout_sec = 0.0\n", "verifier.timeout_sec"),
        ("[environment]\ncpus = 0\n", "environment.cpus"),
        ("[environment]\nmemory_mb = 1024\nmemory = \"lots\"\n", "environment.memory"),
        ("[environment]\ngpus = \"two\"\n", "environment.gpus"),
    ] {
        let dir = tmp.path().join(key);
        write_task(&dir, toml);
        let err = Task::load(&dir).unwrap_err().to_string();
        assert!(err.contains(&format!("key `{key}`")), "{toml:?}: {err}");
    }
}

/// A task.toml with every section Harbor 0.26 knows loads; what is not acted on is named.
#[test]
fn every_harbor_key_loads_and_what_is_ignored_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("full");
    write_task(
        &dir,
        r#"schema_version = "1.4"
source = "cookbook"
artifacts = ["/app/out.txt", { source = "/app/logs", destination = "logs", exclude = ["*.tmp"] }]
surprise = 1

[task]
name = "org/full"
description = "d"
authors = [{ name = "A", email = "a@example.com" }]
keywords = ["k"]

[metadata]
difficulty = "easy"

[agent]
timeout_sec = 60.0
user = "agent"
network_mode = "no-network"

[verifier]
timeout_sec = 30.0
user = 1000
network_mode = "public"
env = { TOKEN = "${HOST_TOKEN:-none}" }

[[verifier.collect]]
command = "true"

[environment]
os = "Linux"
cpus = 2
memory = "1G"
storage = "2G"
gpus = 0
gpu_types = ["H100"]
skills_dir = "/skills"
workdir = "/app"
allow_internet = true
env = { A = "1" }
mcp_servers = [{ name = "files", transport = "stdio", command = "mcp-files", args = ["--root", "/app"] }]

[environment.healthcheck]
command = "test -f /ready"
retries = 5
typo = true

[solution]
env = { S = "1" }
"#,
    );
    let task = Task::load(&dir).unwrap();
    assert_eq!(task.name, "org/full");
    assert_eq!(task.config.environment.storage_mb(), Some(2048));
    assert_eq!(task.config.environment.healthcheck.as_ref().unwrap().retries, 5);
    assert_eq!(task.config.environment.mcp_servers[0].args, ["--root", "/app"]);
    let named: Vec<String> = task.notices.iter().map(|n| n.key.clone()).collect();
    for key in ["surprise", "environment.healthcheck.typo", "environment.gpu_types"] {
        assert!(named.iter().any(|n| n == key), "{key} not named in {named:?}");
    }
    let plan = task.network_plan();
    let modes = [plan.setup.mode, plan.agent.mode, plan.verifier.mode];
    assert_eq!(modes, [NetworkMode::Public, NetworkMode::NoNetwork, NetworkMode::Public]);
    assert_eq!(plan.verifier_env, None);
    assert_eq!(task.unrunnable(), None);
    assert!(!named.iter().any(|n| n == "environment.skills_dir"), "Terminus 2 lists the skills");
    assert!(!named.iter().any(|n| n == "verifier.collect"), "the task's collect hooks run");
}

/// Harbor's `merge_extra_allowlists` per phase: the environment's hosts join the baseline
/// (and the phases that follow it), the agent's its phase, the verifier's the tests'; a
/// public phase ignores them (named), `no-network` becomes an allowlist of them, a phase's
/// own policy takes only its phase's extras, and a separate verifier takes none.
#[test]
fn job_extra_hosts_merge_as_harbor_merges_them() {
    let tmp = tempfile::tempdir().unwrap();
    let load = |name: &str, toml: &str| {
        let dir = tmp.path().join(name);
        write_task(&dir, toml);
        let mut task = Task::load(&dir).unwrap();
        task.extra_hosts = ExtraHosts {
            environment: vec!["env.example".into()],
            agent: vec!["agent.example".into()],
            verifier: vec!["tests.example".into()],
        };
        task
    };
    fn hosts(p: &NetworkPolicy) -> (NetworkMode, Vec<&str>) {
        (p.mode, p.allowed_hosts.iter().map(String::as_str).collect())
    }
    let public = load("public", "");
    let plan = public.network_plan();
    assert_eq!(hosts(&plan.agent), (NetworkMode::Public, vec![]));
    assert_eq!(public.extra_host_notices().len(), 3, "{:?}", public.extra_host_notices());

    let offline =
        load("offline", "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"public\"\n");
    let plan = offline.network_plan();
    assert_eq!(hosts(&plan.setup), (NetworkMode::Allowlist, vec!["env.example"]));
    assert_eq!(hosts(&plan.agent), (NetworkMode::Allowlist, vec!["env.example", "agent.example"]));
    assert_eq!(hosts(&plan.verifier), (NetworkMode::Public, vec![]), "its own public policy");
    assert_eq!(
        offline.extra_host_notices(),
        ["verifier.extra_allowed_hosts [\"tests.example\"]: ignored, the phase's network is public"]
    );

    let allow = load(
        "allow",
        "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n\
             [agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.org\"]\n",
    );
    let plan = allow.network_plan();
    assert_eq!(hosts(&plan.agent), (NetworkMode::Allowlist, vec!["a.org", "agent.example"]), "not the environment's");
    assert_eq!(hosts(&plan.verifier), (NetworkMode::Allowlist, vec!["pypi.org", "env.example", "tests.example"]));

    let separate =
        load("separate", "[environment]\nnetwork_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n");
    let plan = separate.network_plan();
    assert_eq!(plan.verifier_env.as_ref().map(|p| p.mode), Some(NetworkMode::NoNetwork));
    assert_eq!(hosts(&plan.verifier), (NetworkMode::NoNetwork, vec![]));
    assert!(separate.extra_host_notices()[0].contains("separate verifier"), "{:?}", separate.extra_host_notices());
}

#[test]
fn network_modes_resolve_per_phase_with_the_legacy_key() {
    let tmp = tempfile::tempdir().unwrap();
    let load = |name: &str, toml: &str| {
        let dir = tmp.path().join(name);
        write_task(&dir, toml);
        Task::load(&dir)
    };
    let offline = load("offline", "[environment]\nallow_internet = false\n").unwrap();
    assert!(!offline.network_plan().ever_online());
    // `network_mode` wins over the deprecated key.
    let explicit = load("explicit", "[environment]\nallow_internet = false\nnetwork_mode = \"public\"\n").unwrap();
    assert_eq!(explicit.network_plan().agent.mode, NetworkMode::Public);
    let allow = load(
            "allow",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\", \"*.debian.org\", \"10.0.0.0/8\"]\n",
        )
        .unwrap();
    // Allowlists run: each phase has its own hosts, normalized, or the environment's.
    assert_eq!(allow.unrunnable(), None);
    let plan = allow.network_plan();
    let hosts = vec!["pypi.org".to_string(), "*.debian.org".into(), "10.0.0.0/8".into()];
    assert_eq!(plan.agent, NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: hosts.clone() });
    assert_eq!((&plan.setup, &plan.verifier), (&plan.agent, &plan.agent));
    assert!(plan.any_allowlist() && plan.ever_online());
    let phases = load(
        "phases",
        "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"A.example.\", \"2001:DB8:0::1\", \"a.example.\"]\n\
             [verifier]\nnetwork_mode = \"no-network\"\n",
    )
    .unwrap();
    let plan = phases.network_plan();
    assert_eq!(plan.setup, NetworkPolicy::new(NetworkMode::Public));
    assert_eq!(plan.agent.allowed_hosts, ["a.example", "2001:db8::1"]);
    assert_eq!(plan.verifier, NetworkPolicy::new(NetworkMode::NoNetwork));
    // A phase's own allowlist does not inherit the environment's hosts (Harbor's rule).
    let own = load(
            "own",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n[agent]\nnetwork_mode = \"allowlist\"\n",
        )
        .unwrap();
    assert_eq!(own.network_plan().agent, NetworkPolicy::new(NetworkMode::Allowlist));
    assert_eq!(own.network_plan().setup.allowed_hosts, ["a.com"]);
    for (name, toml, key) in [
        ("hosts-without-mode", "[agent]\nallowed_hosts = [\"a.com\"]\n", "agent.allowed_hosts"),
        (
            "url-host",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"https://a.com\"]\n",
            "environment.allowed_hosts",
        ),
        (
            "port-host",
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com:443\"]\n",
            "environment.allowed_hosts",
        ),
        ("bad-mode", "[environment]\nnetwork_mode = \"sometimes\"\n", "environment.network_mode"),
    ] {
        let err = load(name, toml).unwrap_err().to_string();
        assert!(err.contains(key), "{name}: {err}");
    }
}

/// A step's own `network_mode` brings its own hosts only; else the task's phase policy.
#[test]
fn step_network_policies_override_the_tasks_per_phase() {
    let (config, _) = parse_task_toml(
            "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"env.example\"]\n\
             [verifier]\nnetwork_mode = \"no-network\"\n\
             [[steps]]\nname = \"one\"\n[steps.agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"One.Example.\"]\n\
             [steps.verifier]\nnetwork_mode = \"public\"\n\
             [[steps]]\nname = \"two\"\n[steps.agent]\nnetwork_mode = \"allowlist\"\n\
             [[steps]]\nname = \"three\"\n",
        )
        .unwrap();
    config.validate().unwrap();
    let task = Task {
        dir: PathBuf::from("/nonexistent"),
        name: "steps".into(),
        instruction: String::new(),
        step_instructions: Vec::new(),
        config,
        notices: Vec::new(),
        extra_hosts: ExtraHosts::default(),
    };
    let [one, two, three] = task.steps() else { panic!("three steps") };
    let env = NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: vec!["env.example".into()] };
    let one = task.step_network_plan(one);
    assert_eq!(one.agent, NetworkPolicy { mode: NetworkMode::Allowlist, allowed_hosts: vec!["one.example".into()] });
    assert_eq!((&one.setup, &one.verifier), (&env, &NetworkPolicy::new(NetworkMode::Public)));
    // Its own mode without hosts: an allowlist of none, not the environment's.
    let two = task.step_network_plan(two);
    assert_eq!(two.agent, NetworkPolicy::new(NetworkMode::Allowlist));
    assert_eq!(two.verifier, NetworkPolicy::new(NetworkMode::NoNetwork));
    let three = task.step_network_plan(three);
    assert_eq!((&three.agent, &three.verifier), (&env, &NetworkPolicy::new(NetworkMode::NoNetwork)));
    assert!(three.any_allowlist());
    // A step's hosts need the step's own allowlist.
    let (bad, _) =
        parse_task_toml("[[steps]]\nname = \"one\"\n[steps.verifier]\nallowed_hosts = [\"a.com\"]\n").unwrap();
    assert!(bad.validate().unwrap_err().contains("steps.one.verifier.allowed_hosts"));
}

#[test]
fn allowed_hosts_normalize_as_harbor_normalizes_them() {
    for (entry, normal) in [
        ("Example.COM.", Some("example.com")),
        ("  *.Debian.org ", Some("*.debian.org")),
        ("xn--bcher-kva.example", Some("xn--bcher-kva.example")),
        ("192.0.2.1", Some("192.0.2.1")),
        ("10.0.0.0/8", Some("10.0.0.0/8")),
        ("2001:0DB8:0000::0001", Some("2001:db8::1")),
        ("2001:db8::/32", Some("2001:db8::/32")),
        ("0.0.0.0/0", Some("0.0.0.0/0")),
        // Host bits past the prefix (Harbor's strict `ip_network`).
        ("10.0.0.1/8", None),
        ("https://a.com", None),
        ("a.com:443", None),
        ("a.com/path", None),
        ("[2001:db8::1]", None),
        ("fe80::1%eth0", None),
        ("*.1.2.3.4", None),
        ("a.*.com", None),
        ("*", None),
        ("*.", None),
        ("-a.com", None),
        ("a_b.com", None),
        ("", None),
        ("10.0.0.0/33", None),
        (&format!("{}.com", "a".repeat(64)), None),
    ] {
        assert_eq!(normalize_allowed_host(entry).as_deref(), normal, "{entry:?}");
    }
}

#[test]
fn tasks_harbor_accepts_load_and_say_at_run_time_what_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    // Multi-step: no top-level instruction; each step has its own.
    let steps = tmp.path().join("steps");
    write_task(&steps, "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\nmin_reward = 1.0\n");
    std::fs::remove_file(steps.join("instruction.md")).unwrap();
    assert!(Task::missing_parts(&steps).contains(&"steps/one/instruction.md".to_string()));
    for step in ["one", "two"] {
        std::fs::create_dir_all(steps.join("steps").join(step)).unwrap();
        std::fs::write(steps.join("steps").join(step).join("instruction.md"), "Do it.\n").unwrap();
    }
    assert!(Task::is_task_dir(&steps), "{:?}", Task::missing_parts(&steps));
    let task = Task::load(&steps).unwrap();
    assert_eq!(task.instruction, "");
    assert_eq!(task.step_instructions, ["Do it.\n", "Do it.\n"]);
    assert_eq!(task.steps().len(), 2);
    assert_eq!(task.unrunnable(), None, "multi-step tasks run");
    // A separate verifier runs; Windows (the agent's or the verifier's) and GPUs load.
    let separate = tmp.path().join("separate");
    write_task(&separate, "[verifier]\nenvironment_mode = \"separate\"\n");
    assert_eq!(Task::load(&separate).unwrap().unrunnable(), None);
    let windows_verifier = tmp.path().join("windows-verifier");
    write_task(&windows_verifier, "[verifier.environment]\nos = \"windows\"\n");
    assert_eq!(Task::load(&windows_verifier).unwrap().unrunnable(), Some(Unrunnable::Windows));
    let windows = tmp.path().join("windows");
    write_task(&windows, "[environment]\nos = \"windows\"\n");
    assert_eq!(Task::load(&windows).unwrap().unrunnable(), Some(Unrunnable::Windows));
    let gpus = tmp.path().join("gpus");
    write_task(&gpus, "[environment]\ngpus = 2\n");
    assert_eq!(Task::load(&gpus).unwrap().config.environment.gpus, 2);
    let shared_with_env = tmp.path().join("conflict");
    write_task(&shared_with_env, "[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 1\n");
    assert!(Task::load(&shared_with_env).unwrap_err().to_string().contains("environment_mode"));
}

/// Harbor 0.26's `resolve_verifier_environment_definition`: the mode, the settings, the
/// image's source, whether the tests come with it, and the network of each phase.
#[test]
fn separate_verifier_environments_resolve_as_harbor_resolves_them() {
    let tmp = tempfile::tempdir().unwrap();
    let load = |name: &str, toml: &str, tests_dockerfile: bool| {
        let dir = tmp.path().join(name);
        write_task(&dir, toml);
        if tests_dockerfile {
            std::fs::write(dir.join("tests/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
        }
        Task::load(&dir).unwrap()
    };
    // Shared unless asked, even with a tests/Dockerfile.
    let shared = load("shared", "", true);
    assert_eq!(shared.config.verifier_mode(None), VerifierMode::Shared);
    assert!(shared.verifier_environment().is_none());
    assert_eq!(shared.network_plan().verifier_env, None);

    // `separate` alone: the agent's environment again, in a container of its own; the tests
    // are uploaded, as is the agent's network baseline.
    let again = load(
        "again",
        "[environment]\ncpus = 2\nnetwork_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n",
        false,
    );
    let env = again.verifier_environment().unwrap();
    assert_eq!((env.dir, env.bundled_tests), (again.dir.join("environment"), false));
    assert_eq!((env.config.cpus, env.config.docker_image), (2.0, None));
    let plan = again.network_plan();
    let offline = NetworkPolicy::new(NetworkMode::NoNetwork);
    assert_eq!((&plan.verifier, plan.verifier_env.as_ref()), (&offline, Some(&offline)));
    assert!(!plan.ever_online() && !plan.verifier_env_ever_online());

    // A tests/Dockerfile makes the image, which brings the tests.
    let built = load("built", "[verifier]\nenvironment_mode = \"separate\"\n", true);
    let env = built.verifier_environment().unwrap();
    assert_eq!((env.dir, env.bundled_tests, env.config.docker_image), (built.dir.join("tests"), true, None));

    // A `[verifier.environment]` implies `separate`; its settings are the verifier's (not
    // the agent's); its network is the verifier's baseline, a `verifier.network_mode` the
    // phase's; the agent's container no longer needs the verifier's network.
    let own = load(
        "own",
        "[environment]\ndocker_image = \"agent:1\"\nnetwork_mode = \"no-network\"\n\
             [verifier]\nnetwork_mode = \"public\"\n[verifier.environment]\nmemory_mb = 512\nnetwork_mode = \"no-network\"\n",
        false,
    );
    assert_eq!(own.config.verifier_mode(None), VerifierMode::Separate);
    let env = own.verifier_environment().unwrap();
    assert_eq!((env.config.memory_mb, env.config.cpus), (Some(512), 1.0));
    // Neither its own image nor a tests recipe: the task's image, tests uploaded.
    assert_eq!((env.config.docker_image.as_deref(), env.bundled_tests), (Some("agent:1"), false));
    let plan = own.network_plan();
    assert_eq!(
        (plan.setup.mode, plan.verifier.mode, plan.verifier_env.as_ref().map(|p| p.mode)),
        (NetworkMode::NoNetwork, NetworkMode::Public, Some(NetworkMode::NoNetwork))
    );
    assert!(!plan.ever_online() && plan.verifier_env_ever_online());

    // Its own `docker_image` wins over a tests/Dockerfile, and brings the tests.
    let image = load("image", "[verifier.environment]\ndocker_image = \"grader:2\"\n", true);
    let env = image.verifier_environment().unwrap();
    assert_eq!((env.config.docker_image.as_deref(), env.bundled_tests), (Some("grader:2"), true));
    assert_eq!(env.dir, image.dir.join("tests"));

    // Steps: the step's own settings and tests directory first, then the task's; an
    // explicit `shared` of the step wins over the task's `separate`.
    let steps_dir = tmp.path().join("steps");
    let (config, _) = parse_task_toml(
        "[verifier]\nenvironment_mode = \"separate\"\n\
             [[steps]]\nname = \"one\"\n[steps.verifier.environment]\ncpus = 3\n\
             [[steps]]\nname = \"two\"\n[steps.verifier]\nenvironment_mode = \"shared\"\n\
             [[steps]]\nname = \"three\"\n",
    )
    .unwrap();
    let steps = Task {
        dir: steps_dir.clone(),
        name: "steps".into(),
        instruction: String::new(),
        step_instructions: Vec::new(),
        config,
        notices: Vec::new(),
        extra_hosts: ExtraHosts::default(),
    };
    let step_tests = steps.dir.join("steps/one/tests");
    std::fs::create_dir_all(&step_tests).unwrap();
    std::fs::write(step_tests.join("Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    let [one, two, three] = &steps.config.steps.as_ref().unwrap()[..] else { panic!("three steps") };
    let env = steps.config.verifier_environment(&steps.dir, Some(one)).unwrap();
    assert_eq!((env.dir, env.bundled_tests, env.config.cpus), (step_tests, true, 3.0));
    assert_eq!(steps.config.verifier_mode(Some(two)), VerifierMode::Shared);
    assert!(steps.config.verifier_environment(&steps.dir, Some(two)).is_none());
    let env = steps.config.verifier_environment(&steps.dir, Some(three)).unwrap();
    assert_eq!((env.dir, env.bundled_tests), (steps.dir.join("environment"), false));

    // Tests are required unless the verifier's image brings them.
    let bare = tmp.path().join("bare");
    write_task(&bare, "[verifier]\nenvironment_mode = \"separate\"\n");
    std::fs::remove_file(bare.join("tests/test.sh")).unwrap();
    assert_eq!(Task::missing_parts(&bare), ["tests/test.sh"]);
    std::fs::write(bare.join("tests/Dockerfile"), "FROM terminus-base:bookworm\n").unwrap();
    assert!(Task::missing_parts(&bare).is_empty());

    // What cannot run names its key.
    let allow =
        load("allow", "[verifier.environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n", false);
    assert_eq!(
        allow.unrunnable(),
        Some(Unrunnable::SeparateVerifierAllowlist { key: "verifier.environment.network_mode" })
    );
    let phase = load(
        "allow-phase",
        "[verifier]\nenvironment_mode = \"separate\"\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.com\"]\n",
        false,
    );
    assert_eq!(phase.unrunnable(), Some(Unrunnable::SeparateVerifierAllowlist { key: "verifier.network_mode" }));
    let dir = tmp.path().join("bad-cpus");
    write_task(&dir, "[verifier.environment]\ncpus = 0\n");
    assert!(Task::load(&dir).unwrap_err().to_string().contains("verifier.environment.cpus"));
}

#[test]
fn env_templates_follow_harbors_rules() {
    let env: BTreeMap<String, String> = [
        ("PLAIN", "x${NOT}y"),
        ("SET", "${HOST_A}"),
        ("DEFAULTED", "${HOST_B:-fallback}"),
        ("EMPTY_DEFAULT", "${HOST_B:-}"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let host = |v: &str| (v == "HOST_A").then(|| "from-host".to_string());
    let resolved = resolve_env("environment.env", &env, host).unwrap();
    assert_eq!(resolved["PLAIN"], "x${NOT}y");
    assert_eq!(resolved["SET"], "from-host");
    assert_eq!(resolved["DEFAULTED"], "fallback");
    assert_eq!(resolved["EMPTY_DEFAULT"], "");
    let missing: BTreeMap<String, String> = [("KEY".to_string(), "${NOPE}".to_string())].into();
    let err = resolve_env("verifier.env", &missing, host).unwrap_err();
    assert_eq!(err, MissingVariable { key: "verifier.env.KEY".into(), var: "NOPE".into() });
    assert!(err.to_string().contains("`verifier.env.KEY`") && err.to_string().contains("${NOPE:-value}"));
}

#[test]
fn dir_hash_changes_with_content() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("a"), "1").unwrap();
    let before = dir_hash(tmp.path()).unwrap();
    std::fs::write(tmp.path().join("a"), "2").unwrap();
    assert_ne!(before, dir_hash(tmp.path()).unwrap());
}

#[test]
fn sizes_parse() {
    assert_eq!(parse_size_mb("2G"), Some(2048));
    assert_eq!(parse_size_mb("512M"), Some(512));
    assert_eq!(parse_size_mb("lots"), None);
}
