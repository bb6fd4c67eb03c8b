//! How fast the engine answers its users right now: the round trip of each command on a
//! trial's shell channel (the terminal's round trip: a tmux command, written and answered) and
//! the engine's own part of each exec (create and attach, not the script's run time). Shared by
//! every clone of an [`Engine`](crate::Engine); read (and emptied) by whoever paces the job.

use std::sync::Mutex;
use std::time::Duration;

/// The most samples kept of each kind between two reads (later ones are dropped: a window
/// that full says enough).
const MAX_SAMPLES: usize = 8192;

#[derive(Debug, Default)]
pub struct LatencyMeter {
    samples: Mutex<Samples>,
}

#[derive(Debug, Default)]
struct Samples {
    channel: Vec<f64>,
    exec: Vec<f64>,
}

/// The latencies measured since the previous read: medians and 90th percentiles in
/// milliseconds (None: nothing measured), and how many samples each holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencyWindow {
    pub channel: Percentiles,
    pub exec: Percentiles,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub n: usize,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
}

impl Percentiles {
    fn of(mut samples: Vec<f64>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Percentiles { n: samples.len(), p50_ms: Some(at(0.5)), p90_ms: Some(at(0.9)) }
    }
}

impl LatencyMeter {
    /// One command's round trip on a shell channel.
    pub fn channel(&self, took: Duration) {
        self.push(|s| &mut s.channel, took);
    }

    /// The engine's part of one exec.
    pub fn exec(&self, took: Duration) {
        self.push(|s| &mut s.exec, took);
    }

    fn push(&self, kind: impl FnOnce(&mut Samples) -> &mut Vec<f64>, took: Duration) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let list = kind(&mut samples);
        if list.len() < MAX_SAMPLES {
            list.push(took.as_secs_f64() * 1000.0);
        }
    }

    /// What was measured since the previous call, which starts a new window.
    pub fn take(&self) -> LatencyWindow {
        let samples = std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()));
        LatencyWindow { channel: Percentiles::of(samples.channel), exec: Percentiles::of(samples.exec) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_holds_what_was_measured_since_the_last_read() {
        let meter = LatencyMeter::default();
        assert_eq!(meter.take(), LatencyWindow::default());
        for ms in [5, 1, 3, 2, 4, 100, 6, 7, 8, 9] {
            meter.channel(Duration::from_millis(ms));
        }
        meter.exec(Duration::from_millis(40));
        let window = meter.take();
        assert_eq!(window.channel.n, 10);
        assert_eq!(window.channel.p50_ms, Some(6.0));
        assert_eq!(window.channel.p90_ms, Some(9.0));
        assert_eq!((window.exec.n, window.exec.p50_ms), (1, Some(40.0)));
        assert_eq!(meter.take().channel.n, 0, "a read empties the window");
    }
}
