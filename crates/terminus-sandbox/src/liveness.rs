//! Whether a trial's environment still runs, is gone, ended from inside, or cannot be told
//! because its daemon does not answer: the liveness check every backend answers (on a swarm,
//! through the container's node and the manager).

use std::time::Duration;

use crate::environment::Environment;

impl Environment {
    /// Whether the trial's container still runs, is gone (killed, removed, lost by the engine), or
    /// cannot be told because the engine does not answer.
    ///
    /// A kill closes the exec streams a moment before the engine marks the container exited, so an
    /// error that may come from a dead container (`settle`) is given up to 1.5 s to show up as
    /// one; any other error is checked once.
    pub async fn check(&self, settle: bool) -> Liveness {
        let container = self;
        // The engine first: an error that came from a stopped engine must be judged while it is
        // still stopped (an inspect would wait for it to wake up, then find the container running),
        // or by what the heartbeat saw: an engine call gives up after two minutes, so the engine
        // may be back by the time its error arrives here.
        let engine = container.engine();
        // On a swarm, `engine` is the container's node: a node that does not answer while its
        // manager does is a lost node, and the trial runs again elsewhere.
        // A node's daemon that restarted meanwhile stopped its containers on the way: a node away
        // recently (its pings, the watcher's included, say so) counts as lost too.
        if let Some(manager) = container.swarm_manager()
            && (!engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW))
        {
            return if manager.ping().await { Liveness::Gone } else { Liveness::EngineDown };
        }
        if !engine.ping().await || engine.was_away_within(ENGINE_AWAY_WINDOW) {
            return Liveness::EngineDown;
        }
        let checks = if settle { 6 } else { 1 };
        for i in 0..checks {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            // A stopped engine accepts the connection and never answers: the inspect gets the
            // ping's deadline, and the ping tells a dead container from an absent engine.
            let running = tokio::time::timeout(INSPECT_TIMEOUT, container.is_running()).await;
            if running != Ok(true) {
                let answers = match container.swarm_manager() {
                    Some(manager) => manager.ping().await,
                    None => container.engine().ping().await,
                };
                if !answers {
                    return Liveness::EngineDown;
                }
                return if container.ended_from_inside().await { Liveness::EndedFromInside } else { Liveness::Gone };
            }
        }
        Liveness::Alive
    }
}

/// An engine outage this recent may have caused the error being checked (bollard's own request
/// timeout, two minutes, plus slack).
const ENGINE_AWAY_WINDOW: Duration = Duration::from_secs(150);

/// How long a container check waits for the engine to describe the container.
const INSPECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a liveness check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Running: the error is the trial's own.
    Alive,
    /// Gone while the engine answers: the trial lost its environment.
    Gone,
    /// Stopped by what ran inside it, nothing outside asking (the engine's init ended once an
    /// agent's `kill -9 -1` took its child): the trial's own doing, no loss.
    EndedFromInside,
    /// The engine does not answer: nobody can tell, and it is no fault of the trial.
    EngineDown,
}
