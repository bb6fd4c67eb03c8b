//! Who stopped a container: the engine's event stream names every stop asked from outside (a
//! `kill` or `stop` through the API, the OOM killer), but not a container whose own processes
//! ended it (an agent's `kill -9 -1` under an image's `ENTRYPOINT`, where the engine's init
//! exits once its child is gone). One long-lived stream per engine, filtered to those three
//! actions, records the containers they hit; a container that stopped with none recorded while
//! the stream was up throughout ended from inside.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;

/// What the stream has seen, shared by every clone of the engine that holds it.
#[derive(Debug, Default)]
pub(crate) struct StopWatch {
    stopped: Mutex<HashSet<String>>,
    /// Since when the stream has been up without a gap (None: it is down).
    up_since: Mutex<Option<Instant>>,
    started: OnceLock<()>,
}

/// The most container ids kept; past it the set starts again, as after a gap.
const MAX_IDS: usize = 100_000;

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl StopWatch {
    /// Starts the stream on `docker` (once per watch, whatever the number of calls).
    pub(crate) fn start(self: &Arc<StopWatch>, docker: bollard::Docker) {
        if self.started.set(()).is_err() {
            return;
        }
        let watch = self.clone();
        tokio::spawn(async move {
            // After a gap, the engine replays what it still holds from this second on.
            let mut since = unix_now();
            loop {
                let filters = std::collections::HashMap::from([
                    ("type".to_string(), vec!["container".to_string()]),
                    ("event".to_string(), vec!["kill".to_string(), "stop".to_string(), "oom".to_string()]),
                ]);
                let options = bollard::query_parameters::EventsOptionsBuilder::default()
                    .since(&since.to_string())
                    .filters(&filters)
                    .build();
                let mut stream = docker.events(Some(options));
                watch.set_up(Some(Instant::now()));
                while let Some(Ok(event)) = stream.next().await {
                    if let Some(id) = event.actor.and_then(|a| a.id) {
                        watch.record_stop(id);
                    }
                }
                watch.set_up(None);
                since = unix_now().saturating_sub(1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    fn set_up(&self, at: Option<Instant>) {
        *self.up_since.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    fn record_stop(&self, id: String) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        if stopped.len() >= MAX_IDS {
            stopped.clear();
            drop(stopped);
            self.set_up(Some(Instant::now()));
            return;
        }
        stopped.insert(id);
    }

    /// Whether something outside stopped container `id` (started at `since`): None when the
    /// watch was not up throughout, and nobody can tell.
    pub(crate) fn stopped_from_outside(&self, id: &str, since: Instant) -> Option<bool> {
        let up_since = (*self.up_since.lock().unwrap_or_else(|p| p.into_inner()))?;
        if up_since > since {
            return None;
        }
        Some(self.stopped.lock().unwrap_or_else(|p| p.into_inner()).contains(id))
    }
}
