//! How many trials may run at once, from the host's measured health: pure decisions, unit
//! tested without a host.
//!
//! Every [`TICK`] the Supervisor samples the host ([`HostSample`]: CPU and memory from /proc,
//! the engine's latencies as the trials measured them) and asks [`judge`] for a verdict:
//! - saturated: the terminal's round trip (median over the window) is past [`RTT_SATURATED`],
//!   the engine's part of an exec past [`EXEC_SATURATED`], or memory nearly gone — trials are
//!   slowed by their own host and may run out of time;
//! - busy: the CPU is all in use or the round trip is rising — no room to add load;
//! - healthy otherwise.
//!
//! With adaptive admission, [`Admission::observe`] turns verdicts into the limit: it grows by
//! half while the host is healthy and the limit is what holds trials back, holds while busy,
//! and when saturated drops to nine tenths of what runs (then waits [`COOLDOWN_TICKS`] before
//! moving again, so the running trials' load shows first). A lower limit stops no running
//! trial: it only holds new ones back until enough have finished — a deep cut would leave the
//! slots of a whole wave of finishing trials empty, so the cut is shallow.

use std::time::Duration;

use terminus_sandbox::meter::LatencyWindow;

/// How often the host is sampled.
pub const TICK: Duration = Duration::from_secs(2);
/// Where adaptive admission starts.
pub const START: usize = 8;
/// A median terminal round trip past this: the host is saturated (an episode makes three to
/// five round trips: past this, the terminal alone adds seconds to each).
pub const RTT_SATURATED: f64 = 400.0;
/// A median terminal round trip past this: the host is busy (no growth).
pub const RTT_BUSY: f64 = 200.0;
/// A median engine part of an exec past this: saturated.
pub const EXEC_SATURATED: f64 = 2000.0;
/// CPU busier than this: busy.
pub const CPU_BUSY: f64 = 0.97;
/// Less memory available than this share: saturated.
pub const MEMORY_LOW: f64 = 0.05;
/// Fewer samples than this in a window say nothing about a latency.
const MIN_SAMPLES: usize = 5;
/// Ticks after a decrease before the limit may grow again.
pub const COOLDOWN_TICKS: u32 = 3;

/// What the host looked like over one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostSample {
    /// Share of CPU time busy over the window (all cores), None when unknown.
    pub cpu_busy: Option<f64>,
    /// Share of memory available (MemAvailable / MemTotal), None when unknown.
    pub memory_available: Option<f64>,
    pub latency: LatencyWindow,
}

/// The host's state, with the measurement that decided it.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Healthy,
    Busy(String),
    Saturated(String),
}

/// Judges one sample.
pub fn judge(sample: &HostSample) -> Verdict {
    let median = |p: &terminus_sandbox::meter::Percentiles| p.p50_ms.filter(|_| p.n >= MIN_SAMPLES);
    let rtt = median(&sample.latency.channel);
    if let Some(rtt) = rtt.filter(|ms| *ms > RTT_SATURATED) {
        return Verdict::Saturated(format!("terminal round trip {rtt:.0} ms (median)"));
    }
    if let Some(exec) = median(&sample.latency.exec).filter(|ms| *ms > EXEC_SATURATED) {
        return Verdict::Saturated(format!("engine exec {:.1} s (median)", exec / 1000.0));
    }
    if let Some(free) = sample.memory_available.filter(|share| *share < MEMORY_LOW) {
        return Verdict::Saturated(format!("{:.0} % of memory available", free * 100.0));
    }
    if let Some(rtt) = rtt.filter(|ms| *ms > RTT_BUSY) {
        return Verdict::Busy(format!("terminal round trip {rtt:.0} ms (median)"));
    }
    if let Some(busy) = sample.cpu_busy.filter(|share| *share > CPU_BUSY) {
        return Verdict::Busy(format!("CPU {:.0} % busy", busy * 100.0));
    }
    Verdict::Healthy
}

/// A change of the limit, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub from: usize,
    pub to: usize,
    pub why: String,
}

/// The adaptive limit.
#[derive(Clone, Debug)]
pub struct Admission {
    limit: usize,
    max: usize,
    cooldown: u32,
}

impl Admission {
    /// Starts at [`START`] (or `max`, if lower).
    pub fn new(max: usize) -> Admission {
        let max = max.max(1);
        Admission { limit: START.min(max), max, cooldown: 0 }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A new ceiling (a live control): the limit becomes it at once, and moves below it as the
    /// host allows.
    pub fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
        self.limit = self.max;
        self.cooldown = 0;
    }

    /// Takes one tick's verdict; `running` trials run and `waiting` more could start now.
    /// Returns the change of the limit, if any.
    pub fn observe(&mut self, verdict: &Verdict, running: usize, waiting: usize) -> Option<Change> {
        let from = self.limit;
        match verdict {
            Verdict::Saturated(why) => {
                if self.cooldown > 0 {
                    self.cooldown -= 1;
                    return None;
                }
                // From what actually runs: a limit far above it would not hold anything back.
                let base = running.min(self.limit).max(1);
                self.limit = (base * 9 / 10).max(1);
                self.cooldown = COOLDOWN_TICKS;
                (self.limit != from).then(|| Change { from, to: self.limit, why: format!("saturated: {why}") })
            }
            Verdict::Busy(_) => {
                self.cooldown = self.cooldown.saturating_sub(1);
                None
            }
            Verdict::Healthy => {
                if self.cooldown > 0 {
                    self.cooldown -= 1;
                    return None;
                }
                // Grow only when the limit is what holds trials back.
                if waiting == 0 || running < self.limit {
                    return None;
                }
                self.limit = (self.limit + (self.limit / 2).max(1)).min(self.max);
                (self.limit != from).then(|| Change { from, to: self.limit, why: "the host keeps up".to_string() })
            }
        }
    }
}

/// The share of CPU time busy between two readings of /proc/stat's `cpu` line.
pub fn cpu_busy(before: &CpuTimes, after: &CpuTimes) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    let idle = after.idle.checked_sub(before.idle)?;
    (total > 0).then(|| 1.0 - idle as f64 / total as f64)
}

/// /proc/stat's aggregate `cpu` line: all time, and idle time (idle + iowait), in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    pub total: u64,
    pub idle: u64,
}

/// Reads the `cpu` line of a /proc/stat text.
pub fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    if fields.len() < 5 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total = fields.iter().take(8).sum();
    Some(CpuTimes { total, idle: fields[3] + fields[4] })
}

/// MemAvailable / MemTotal of a /proc/meminfo text.
pub fn parse_memory_available(meminfo: &str) -> Option<f64> {
    let value = |key: &str| -> Option<f64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let (available, total) = (value("MemAvailable:")?, value("MemTotal:")?);
    (total > 0.0).then(|| available / total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_sandbox::meter::Percentiles;

    fn sample(rtt: Option<f64>, cpu: Option<f64>, memory: Option<f64>) -> HostSample {
        let channel = Percentiles { n: rtt.map_or(0, |_| 50), p50_ms: rtt, p90_ms: rtt };
        HostSample { cpu_busy: cpu, memory_available: memory, latency: LatencyWindow { channel, ..Default::default() } }
    }

    #[test]
    fn verdicts_name_the_measurement_that_decided_them() {
        assert_eq!(judge(&sample(Some(20.0), Some(0.5), Some(0.6))), Verdict::Healthy);
        assert_eq!(judge(&HostSample::default()), Verdict::Healthy, "nothing measured yet");
        assert_eq!(
            judge(&sample(Some(450.0), Some(0.5), Some(0.6))),
            Verdict::Saturated("terminal round trip 450 ms (median)".into())
        );
        assert_eq!(
            judge(&sample(Some(250.0), None, None)),
            Verdict::Busy("terminal round trip 250 ms (median)".into())
        );
        assert_eq!(judge(&sample(Some(20.0), Some(0.99), None)), Verdict::Busy("CPU 99 % busy".into()));
        assert_eq!(judge(&sample(None, None, Some(0.02))), Verdict::Saturated("2 % of memory available".into()));
        // Too few round trips say nothing.
        let mut few = sample(Some(900.0), None, None);
        few.latency.channel.n = 2;
        assert_eq!(judge(&few), Verdict::Healthy);
        let mut exec = HostSample::default();
        exec.latency.exec = Percentiles { n: 10, p50_ms: Some(3500.0), p90_ms: Some(5000.0) };
        assert_eq!(judge(&exec), Verdict::Saturated("engine exec 3.5 s (median)".into()));
    }

    #[test]
    fn the_limit_grows_while_healthy_and_binding_holds_while_busy_and_shrinks_when_saturated() {
        let mut admission = Admission::new(200);
        assert_eq!(admission.limit(), START);
        // Not binding (fewer running than the limit, or nothing waiting): no growth.
        assert_eq!(admission.observe(&Verdict::Healthy, 3, 100), None);
        assert_eq!(admission.observe(&Verdict::Healthy, 8, 0), None);
        let grown = admission.observe(&Verdict::Healthy, 8, 100).unwrap();
        assert_eq!((grown.from, grown.to), (8, 12));
        assert_eq!(admission.observe(&Verdict::Busy("CPU 99 % busy".into()), 12, 100), None);
        assert_eq!(admission.observe(&Verdict::Healthy, 12, 100).unwrap().to, 18);
        let shrunk = admission.observe(&Verdict::Saturated("terminal round trip 450 ms (median)".into()), 18, 100);
        let shrunk = shrunk.unwrap();
        assert_eq!((shrunk.from, shrunk.to), (18, 16));
        assert!(shrunk.why.contains("450 ms"), "{}", shrunk.why);
        // The cooldown: neither growth nor another cut for a few ticks, whatever they say.
        for _ in 0..COOLDOWN_TICKS {
            assert_eq!(admission.observe(&Verdict::Healthy, 16, 100), None);
        }
        assert_eq!(admission.observe(&Verdict::Healthy, 16, 100).unwrap().to, 24);
    }

    #[test]
    fn the_limit_stays_within_one_and_the_bound() {
        let mut admission = Admission::new(10);
        assert_eq!(admission.limit(), 8);
        assert_eq!(admission.observe(&Verdict::Healthy, 8, 5).unwrap().to, 10);
        assert_eq!(admission.observe(&Verdict::Healthy, 10, 5), None, "at the bound");
        let mut small = Admission::new(1);
        let saturated = Verdict::Saturated("x".into());
        assert_eq!(small.observe(&saturated, 1, 5), None, "never below one");
        assert_eq!(small.limit(), 1);
        // A cut starts from what runs, not from a limit far above it.
        let mut admission = Admission::new(200);
        for _ in 0..6 {
            let limit = admission.limit();
            admission.observe(&Verdict::Healthy, limit, 500);
        }
        assert!(admission.limit() > 60, "{}", admission.limit());
        assert_eq!(admission.observe(&saturated, 40, 500).unwrap().to, 36);
    }

    #[test]
    fn proc_texts_are_read() {
        let before = parse_cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        let after = parse_cpu_times("cpu  300 0 200 750 150 0 0 0 0 0\n").unwrap();
        assert_eq!(before, CpuTimes { total: 1000, idle: 800 });
        assert_eq!(cpu_busy(&before, &after), Some(0.75));
        assert_eq!(cpu_busy(&after, &before), None, "a counter that went back says nothing");
        assert_eq!(parse_cpu_times("intr 1 2\n"), None);
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   6000000 kB\n";
        assert_eq!(parse_memory_available(meminfo), Some(0.25));
        assert_eq!(parse_memory_available("MemTotal: 1 kB\n"), None);
    }
}
