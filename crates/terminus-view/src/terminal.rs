//! A running trial's terminal, live: its pane log (`/logs/agent/terminus_2.pane`, the raw output
//! tmux pipes from the agent's pane) read through the engine's archive endpoint (no program of
//! the container runs for it), until the tests' directory appears (verification started), and sent as server-sent events in
//! the form asciinema-player's `eventsource` driver plays: a reset with the pane's size, then
//! `[seconds, "o", text]` output events, then `done`.

use std::time::Instant;

use terminus_core::layout::container;
use terminus_core::utf8::decode_utf8;
use terminus_sandbox::Engine;
use tokio::sync::mpsc;

use crate::live::LiveMessage;
use crate::trial::PaneSize;

/// How much of the pane log is replayed first: enough to redraw the screen and some scrollback.
const REPLAY_BYTES: u64 = 256 * 1024;

fn message(data: serde_json::Value) -> LiveMessage {
    LiveMessage { event: "message", data: data.to_string() }
}

fn done() -> LiveMessage {
    LiveMessage { event: "done", data: "\"\"".into() }
}

/// Streams trial `trial`'s terminal. With no engine, or no running container, it says the
/// stream is offline and ends.
pub fn stream(engine: Option<Engine>, trial: String, pane: PaneSize) -> mpsc::Receiver<LiveMessage> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let offline = |why: &str| message(serde_json::json!({"state": "offline", "reason": why}));
        let Some(engine) = engine else {
            let _ = tx.send(offline("the Docker engine is not reachable")).await;
            let _ = tx.send(done()).await;
            return;
        };
        let id = match engine.running_trial_container(&trial).await {
            Ok(Some(id)) => id,
            Ok(None) => {
                let _ = tx.send(offline("the trial has no running container")).await;
                let _ = tx.send(done()).await;
                return;
            }
            Err(e) => {
                let _ = tx.send(offline(&e.to_string())).await;
                let _ = tx.send(done()).await;
                return;
            }
        };
        let mut followed =
            match engine.follow_file(&id, container::PANE_LOG, REPLAY_BYTES, Some(container::TESTS)).await {
                Ok(followed) => followed,
                Err(e) => {
                    let _ = tx.send(offline(&e.to_string())).await;
                    let _ = tx.send(done()).await;
                    return;
                }
            };
        if tx.send(message(serde_json::json!({"cols": pane.cols, "rows": pane.rows, "time": 0.0}))).await.is_err() {
            return;
        }
        let started = Instant::now();
        let mut carry = Vec::new();
        loop {
            tokio::select! {
                chunk = followed.chunks.recv() => match chunk {
                    Some(Ok(bytes)) => {
                        let text = decode_utf8(&mut carry, &bytes);
                        if text.is_empty() {
                            continue;
                        }
                        let event = serde_json::json!([started.elapsed().as_secs_f64(), "o", text]);
                        if tx.send(message(event)).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        let _ = tx.send(offline(&e.to_string())).await;
                        break;
                    }
                    None => break,
                },
                _ = tx.closed() => return,
            }
        }
        let _ = tx.send(done()).await;
    });
    rx
}
