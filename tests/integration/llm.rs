//! The LLM layer end to end: jobs against the mock server through faults, and through the
//! Anthropic protocol, with exact token totals and no key in any file.

use serde_json::json;
use terminus_mock_llm::{Conversation, Faults, MockServer, Protocol, Script, Turn, UsageSpec};

use crate::support::{
    all_files, cmd, containers_of_job, docker, example, heavy_lock, job_yaml, read_json, reply, run_terminus, temp_dir,
    trial_dirs, wait_until,
};

/// The hello-world script: each reply reports `prompt_tokens`, 7 of them cached.
fn hello_script(prompt_tokens: u64) -> Script {
    let reply = |commands: serde_json::Value, complete: bool, completion: u64| Turn {
        usage: Some(UsageSpec { prompt_tokens, completion_tokens: completion, cached_tokens: 7 }),
        ..reply(commands, complete)
    };
    Script {
        conversations: vec![Conversation {
            when: "hello.txt".into(),
            turns: vec![
                reply(cmd("printf 'Hello, world!\\n' > hello.txt\n", 0.1), false, 30),
                reply(json!([]), true, 20),
                reply(json!([]), true, 10),
            ],
        }],
        ..Script::default()
    }
}

/// 50 trials against a server that answers 20 % of requests with 429, 10 % with 500 and drops
/// 5 % of connections: every trial completes, and the token totals are exactly the usage of the
/// replies the server sent.
#[tokio::test(flavor = "multi_thread")]
async fn fault_mix_job_completes_with_exact_totals() {
    let Some(docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let mut script = hello_script(100);
    script.faults = Some(Faults {
        seed: 11,
        rate_limited: 0.2,
        retry_after_sec: Some(0.05),
        server_error: 0.1,
        dropped: 0.05,
        malformed: 0.0,
    });
    let server = MockServer::start(script, 0).await.unwrap();
    let dir = temp_dir("faults");
    let extra = "n_attempts: 50\nn_concurrent_trials: 8\nllm:\n  max_attempts: 12\n  base_delay_sec: 0.05\n  max_delay_sec: 0.5\n";
    let path = job_yaml(dir.path(), "faults", &server.api_base(), extra, &[example("hello-world")]);
    let out = tokio::task::spawn_blocking(move || run_terminus(&path, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let job_dir = dir.path().join("faults");
    let trials = trial_dirs(&job_dir);
    assert_eq!(trials.len(), 50, "no trial lost");
    let (mut input, mut output, mut cache, mut retries) = (0u64, 0u64, 0u64, 0u64);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        assert!(result["exception_info"].is_null(), "{}", result["exception_info"]);
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
        let agent = &result["agent_result"];
        input += agent["n_input_tokens"].as_u64().unwrap();
        output += agent["n_output_tokens"].as_u64().unwrap();
        cache += agent["n_cache_tokens"].as_u64().unwrap();
        retries += agent["metadata"]["llm_retries"].as_u64().unwrap();
    }
    let requests = server.requests();
    let faulted = requests.iter().filter(|r| r.fault.is_some()).count() as u64;
    assert!(faulted >= 20, "the faults really happened: {faulted} of {}", requests.len());
    assert_eq!(retries, faulted, "every injected fault cost exactly one retry, and each was counted");
    let served = server.served_usage();
    assert_eq!((input, output, cache), (served.prompt_tokens, served.completion_tokens, served.cached_tokens));
    assert_eq!(served.prompt_tokens, 50 * 3 * 100, "three replies per trial reached the agent");
    let job = read_json(&job_dir.join("result.json"));
    assert_eq!(job["stats"]["n_input_tokens"].as_u64(), Some(served.prompt_tokens));
    assert_eq!(job["stats"]["n_output_tokens"].as_u64(), Some(served.completion_tokens));
    let cost = job["stats"]["cost_usd"].as_f64().unwrap();
    let expected = 50.0 * 3.0 * (93.0 * 2.5e-6 + 7.0 * 1.25e-6) + 50.0 * (30.0 + 20.0 + 10.0) * 1e-5;
    assert!((cost - expected).abs() < 1e-9, "cost {cost} vs {expected}");
    assert_eq!(containers_of_job(&docker, job["id"].as_str().unwrap()).await, 0);
    server.shutdown();
}

/// A job through the native Anthropic protocol: the key travels as `x-api-key`, the system
/// prompt and cache marks are sent as Anthropic expects, usage with cache reads adds up, and
/// the key is in no file.
#[tokio::test(flavor = "multi_thread")]
async fn anthropic_protocol_job() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    const KEY: &str = "sk-ant-test-0123456789abcdefghij";
    let server = MockServer::start(hello_script(1000), 0).await.unwrap();
    let dir = temp_dir("anthropic");
    let yaml = format!(
        "jobs_dir: {}\njob_name: anthropic\nagents:\n  - name: terminus-2\n    model_name: anthropic/claude-sonnet-4-20250514\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n      max_thinking_tokens: 2048\ntasks:\n  - path: {}\n",
        dir.path().display(),
        server.anthropic_base(),
        example("hello-world").display()
    );
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&path, &[("ANTHROPIC_API_KEY", KEY)])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.protocol, Protocol::Anthropic);
        assert_eq!(request.authorization.as_deref(), Some(KEY));
        assert_eq!(request.body["model"], "claude-sonnet-4-20250514");
        assert_eq!(request.body["thinking"]["budget_tokens"], 2048);
        let last = request.body["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["content"][0]["cache_control"]["type"], "ephemeral");
    }
    let job_dir = dir.path().join("anthropic");
    let trial = &trial_dirs(&job_dir)[0];
    let result = read_json(&trial.join("result.json"));
    assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(result["agent_result"]["n_input_tokens"], 3000, "input plus cache reads");
    assert_eq!(result["agent_result"]["n_cache_tokens"], 21);
    for file in all_files(&job_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(!text.contains(KEY), "the key leaked into {}", file.display());
    }
    server.shutdown();
}

/// A model call whose trial stopped waiting (cancelled, or past its deadline) is abandoned: the
/// request is dropped and no retry is sent, so nothing more is spent for a trial that is gone.
#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_model_call_is_not_retried() {
    use std::time::Duration;

    use ractor::Actor;
    use terminus_actors::llm::{LlmActor, LlmArgs, LlmHandle};
    use terminus_llm::limiter::LimitSettings;
    use terminus_llm::retry::RetryPolicy;
    use terminus_llm::{LlmRequest, Provider, ProviderSettings};

    // Every answer is a server error, after a second: a call would be retried four times.
    let failing = Turn { status: Some(500), delay_ms: Some(1000), ..Turn::default() };
    let server = MockServer::start(Script { default: Some(failing), ..Script::default() }, 0).await.unwrap();
    let settings = ProviderSettings { api_base: Some(server.api_base()), ..ProviderSettings::new("openai/gpt-4o") };
    let args = LlmArgs {
        provider: Provider::new(settings).unwrap(),
        limits: LimitSettings {
            max_concurrent: 1,
            adaptive: false,
            requests_per_minute: None,
            tokens_per_minute: None,
        },
        retry: RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(50),
        },
        retries_to: None,
    };
    let (actor, _) = Actor::spawn(None, LlmActor, args).await.unwrap();
    let llm = LlmHandle::new(actor.clone(), Duration::from_secs(60));
    let request = LlmRequest { messages: vec![terminus_llm::ChatMessage::user("hello")], ..LlmRequest::default() };
    let waiting = tokio::spawn({
        let llm = llm.clone();
        let request = request.clone();
        async move { llm.complete(request, None).await }
    });
    wait_until("the first model call", Duration::from_secs(30), || !server.requests().is_empty()).await;
    waiting.abort();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(server.requests().len(), 1, "no retry after the caller left");
    // The limiter's only slot was freed: a new call gets through at once and is retried as usual.
    let before = server.requests().len();
    let done = tokio::time::timeout(Duration::from_secs(20), llm.complete(request, None)).await.unwrap();
    assert!(done.result.is_err());
    assert_eq!(done.retries, 4);
    assert_eq!(server.requests().len() - before, 5);
    actor.stop(None);
}

/// A reasoning model that refuses `temperature` as OpenAI's do (400, `unsupported_value`): the
/// refused request is sent again without it, the shared client never sends it again (one
/// refusal for the whole job), every trial runs to its reward, and each trial's warnings name
/// the parameter.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_refuses_temperature_runs_to_the_end() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let mut script = hello_script(100);
    let refusal = r#"{"error": {"message": "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.", "type": "invalid_request_error", "param": "temperature", "code": "unsupported_value"}}"#;
    script.rules.push(terminus_mock_llm::Rule {
        when_body: Some("\"temperature\"".into()),
        reply: Turn { status: Some(400), body: Some(refusal.into()), ..Turn::default() },
        ..Default::default()
    });
    let server = MockServer::start(script, 0).await.unwrap();
    let dir = temp_dir("reasoning");
    let yaml = format!(
        "jobs_dir: {}\njob_name: reasoning\nn_attempts: 3\nn_concurrent_trials: 1\nagents:\n  - name: terminus-2\n    model_name: openai/my-reasoner\n    kwargs:\n      api_base: {}\n      record_terminal_session: false\n      temperature: 0.7\ntasks:\n  - path: {}\n",
        dir.path().display(),
        server.api_base(),
        example("hello-world").display()
    );
    let path = dir.path().join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = tokio::task::spawn_blocking(move || run_terminus(&path, &[])).await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let requests = server.requests();
    let refused = requests.iter().filter(|r| r.rule.is_some()).count();
    assert_eq!(refused, 1, "one refusal, then the client no longer sends it");
    assert_eq!(requests.len(), 1 + 3 * 3, "three replies per trial, plus the one refused request");
    assert!(requests.iter().filter(|r| r.rule.is_none()).all(|r| r.body.get("temperature").is_none()));
    let trials = trial_dirs(&dir.path().join("reasoning"));
    assert_eq!(trials.len(), 3);
    for trial in &trials {
        let result = read_json(&trial.join("result.json"));
        assert_eq!(result["verifier_result"]["rewards"]["reward"], 1.0, "{result}");
        let warnings = result["warnings"].to_string();
        assert!(warnings.contains("`temperature`"), "{warnings}");
    }
    server.shutdown();
}

/// Providers as LiteLLM users name them: each protocol family reaches the mock with the
/// provider's own key variable and the model name it expects — a prefix of the OpenAI family
/// (`groq/`, its endpoint and key from `GROQ_API_BASE` and `GROQ_API_KEY`), an Azure OpenAI
/// deployment (its URL, `api-version` and `api-key` header) — and a provider with a protocol of
/// its own is refused when the job loads, naming the model and the way out.
#[tokio::test(flavor = "multi_thread")]
async fn providers_are_reached_as_litellm_users_name_them() {
    let Some(_docker) = docker().await else { return };
    let _guard = heavy_lock().await;
    let server = MockServer::start(hello_script(100), 0).await.unwrap();
    let dir = temp_dir("providers");
    let task = example("hello-world");
    let job = |name: &str, model: &str| {
        let yaml = format!(
            "jobs_dir: {}\njob_name: {name}\nagents:\n  - name: terminus-2\n    model_name: {model}\n    kwargs:\n      record_terminal_session: false\ntasks:\n  - path: {}\n",
            dir.path().display(),
            task.display()
        );
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        path
    };
    let mock = server.api_base();
    let root = mock.trim_end_matches("/v1").to_string();
    // (job, model, environment, key as received, model on the wire, path)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, String)>, &'a str, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            "groq",
            "groq/llama-3.3-70b-versatile",
            vec![("GROQ_API_BASE", mock.clone()), ("GROQ_API_KEY", "gsk-test-groq-key".into())],
            "Bearer gsk-test-groq-key",
            "llama-3.3-70b-versatile",
            "/v1/chat/completions",
        ),
        (
            "azure",
            "azure/my-deployment",
            vec![("AZURE_API_BASE", root.clone()), ("AZURE_API_KEY", "azure-test-key".into())],
            "azure-test-key",
            "my-deployment",
            "/openai/deployments/my-deployment/chat/completions?api-version=2025-02-01-preview",
        ),
    ];
    let mut seen = 0;
    for (name, model, env, auth, wire, path) in cases {
        let config = job(name, model);
        let env: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let out = tokio::task::spawn_blocking(move || {
            let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            run_terminus(&config, &pairs)
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let requests = server.requests();
        let new = &requests[seen..];
        seen = requests.len();
        assert_eq!(new.len(), 3, "{name}");
        for request in new {
            assert_eq!(request.authorization.as_deref(), Some(auth), "{name}");
            assert_eq!(request.body["model"], wire, "{name}");
            assert_eq!(request.path, path, "{name}");
        }
        let trial = &trial_dirs(&dir.path().join(name))[0];
        assert_eq!(read_json(&trial.join("result.json"))["verifier_result"]["rewards"]["reward"], 1.0, "{name}");
    }
    for (model, names) in [("bedrock/anthropic.claude-3-5-sonnet", "`bedrock`"), ("opeani/gpt-4o", "`opeani`")] {
        let config = job("refused", model);
        let out = tokio::task::spawn_blocking(move || run_terminus(&config, &[])).await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(model) && stderr.contains(names) && stderr.contains("openai/<model>"), "{stderr}");
        assert!(!dir.path().join("refused").exists(), "nothing was started");
    }
    server.shutdown();
}
