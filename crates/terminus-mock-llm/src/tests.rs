//! The mock server's unit tests.
use super::*;

async fn post(addr: SocketAddr, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let request =
        format!("POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn script() -> Script {
    Script::from_yaml(
        "conversations:\n  - when: marker\n    turns:\n      - content: first\n        usage: {prompt_tokens: 10, completion_tokens: 2}\n      - status: 429\n        retry_after_sec: 2\n      - drop: true\n",
    )
    .unwrap()
}

#[tokio::test]
async fn turns_errors_and_drops_follow_the_script() {
    let server = MockServer::start(script(), 0).await.unwrap();
    let first = r#"{"model": "m", "messages": [{"role": "user", "content": "a marker"}]}"#;
    let (status, body) = post(server.addr, "/v1/chat/completions", first).await.unwrap();
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "first");
    let second = r#"{"messages": [{"role": "user", "content": "a marker"}, {"role": "assistant", "content": "x"}]}"#;
    let (status, _) = post(server.addr, "/v1/chat/completions", second).await.unwrap();
    assert_eq!(status, 429);
    let third = r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a marker"}]}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}, {"role": "assistant", "content": "z"}]}"#;
    let dropped = post(server.addr, "/v1/messages", third).await;
    assert!(dropped.is_err() || dropped.unwrap().0 == 0, "the connection is closed without a response");
    assert_eq!(server.served_usage(), UsageSpec { prompt_tokens: 10, completion_tokens: 2, cached_tokens: 0 });
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.requests()[2].protocol, Protocol::Anthropic);
}

#[tokio::test]
async fn sequential_turns_follow_arrival_not_the_chat() {
    let yaml = "sequential:\n  - when: marker\n    turns:\n      - content: one\n      - content: two\n";
    let server = MockServer::start(Script::from_yaml(yaml).unwrap(), 0).await.unwrap();
    let fresh = r#"{"messages": [{"role": "user", "content": "a marker"}]}"#;
    let mut replies = Vec::new();
    for _ in 0..3 {
        let (_, body) = post(server.addr, "/v1/chat/completions", fresh).await.unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        replies.push(body["choices"][0]["message"]["content"].as_str().unwrap().to_string());
    }
    assert_eq!(replies, ["one", "two", "two"], "each turn once, the last repeated");
    assert_eq!(server.requests()[0].conversation, Some(0));
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

#[tokio::test]
async fn server_info_is_served_only_when_scripted() {
    let bare = MockServer::start(Script::default(), 0).await.unwrap();
    assert_eq!(get(bare.addr, "/v1/models").await.0, 404);
    assert_eq!(get(bare.addr, "/props").await.0, 404);
    assert_eq!(bare.probes(), ["GET /v1/models", "GET /props"]);
    assert!(bare.requests().is_empty(), "no model call was made");
    let yaml = "models:\n  - id: small\n    max_model_len: 4000\nprops_n_ctx: 2048\n";
    let scripted = MockServer::start(Script::from_yaml(yaml).unwrap(), 0).await.unwrap();
    let (status, body) = get(scripted.addr, "/v1/models").await;
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["data"][0]["id"], "small");
    assert_eq!(body["data"][0]["max_model_len"], 4000);
    let body: Value = serde_json::from_str(&get(scripted.addr, "/props").await.1).unwrap();
    assert_eq!(body["default_generation_settings"]["n_ctx"], 2048);
}

#[tokio::test]
async fn anthropic_replies_have_the_messages_shape() {
    let script = Script::from_yaml("default:\n  content: hi\n  reasoning_content: hmm\n  usage: {prompt_tokens: 100, completion_tokens: 5, cached_tokens: 40}\n").unwrap();
    let server = MockServer::start(script, 0).await.unwrap();
    let (status, body) =
        post(server.addr, "/v1/messages", r#"{"model": "claude", "messages": [{"role": "user", "content": "q"}]}"#)
            .await
            .unwrap();
    assert_eq!(status, 200);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["content"][0]["type"], "thinking");
    assert_eq!(body["content"][1]["text"], "hi");
    assert_eq!(body["usage"]["input_tokens"], 60);
    assert_eq!(body["usage"]["cache_read_input_tokens"], 40);
}

#[tokio::test]
async fn random_faults_are_reproducible() {
    let yaml = "default:\n  content: ok\nfaults:\n  seed: 3\n  rate_limited: 0.5\n";
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let server = MockServer::start(Script::from_yaml(yaml).unwrap(), 0).await.unwrap();
        let mut statuses = Vec::new();
        for _ in 0..20 {
            statuses.push(post(server.addr, "/v1/chat/completions", r#"{"messages": []}"#).await.unwrap().0);
        }
        assert!(statuses.contains(&429) && statuses.contains(&200));
        outcomes.push(statuses);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}
