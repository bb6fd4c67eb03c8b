//! Interval estimates for rewards: the 95 % interval of a mean reward, and the paired bootstrap
//! interval of the difference between two runs over the same tasks.
//!
//! Plain numbers in, plain numbers out: the callers pick the values (a job's rewards, two jobs'
//! per-task means), so every screen that shows an interval — the viewer, the summary tables —
//! shows the same one. Pure and deterministic: the bootstrap draws
//! from a seeded generator, so the same two jobs always give the same interval.

use serde::Serialize;

/// An estimate with its 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
    /// How many values (trials, or tasks for a paired interval) it rests on.
    pub n: usize,
    pub method: IntervalMethod,
}

/// How an interval was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMethod {
    /// Every value is 0 or 1: the Wilson score interval (sound at small n and at 0 % or 100 %,
    /// where a normal interval collapses to a point).
    Wilson,
    /// Student's t interval of the mean.
    StudentT,
    /// Percentile interval of the mean of per-task differences, resampling tasks.
    PairedBootstrap,
    /// A single value: no spread to estimate.
    Single,
}

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The mean of `values` with its 95 % interval; `None` for no values.
pub fn mean_interval(values: &[f64]) -> Option<Interval> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return Some(Interval { estimate: mean, low: mean, high: mean, n, method: IntervalMethod::Single });
    }
    if values.iter().all(|v| *v == 0.0 || *v == 1.0) {
        let (low, high) = wilson(mean, n as f64);
        return Some(Interval { estimate: mean, low, high, n, method: IntervalMethod::Wilson });
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t95(n - 1) * (variance / n as f64).sqrt();
    Some(Interval { estimate: mean, low: mean - half, high: mean + half, n, method: IntervalMethod::StudentT })
}

/// The Wilson score interval of a proportion `p` out of `n`.
fn wilson(p: f64, n: f64) -> (f64, f64) {
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The 97.5 % quantile of Student's t with `df` degrees of freedom: exact to three decimals from
/// a table up to 30, then the Cornish–Fisher expansion around the normal quantile.
fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    if (1..=30).contains(&df) {
        return TABLE[df - 1];
    }
    let (z, v) = (Z95, df.max(1) as f64);
    z + (z.powi(3) + z) / (4.0 * v) + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * v * v)
}

/// The difference of means `b − a` over paired values (one pair per task, each the task's mean
/// reward in one run), with a percentile bootstrap interval from `resamples` resamplings of the
/// pairs. Deterministic for a given `seed`. `None` for no pairs.
pub fn paired_bootstrap(pairs: &[(f64, f64)], resamples: usize, seed: u64) -> Option<Interval> {
    let n = pairs.len();
    if n == 0 {
        return None;
    }
    let diffs: Vec<f64> = pairs.iter().map(|(a, b)| b - a).collect();
    let estimate = diffs.iter().sum::<f64>() / n as f64;
    if n == 1 || resamples == 0 {
        return Some(Interval { estimate, low: estimate, high: estimate, n, method: IntervalMethod::Single });
    }
    let mut rng = SplitMix64(seed);
    let mut means: Vec<f64> =
        (0..resamples).map(|_| (0..n).map(|_| diffs[rng.below(n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some(Interval { estimate, low: at(0.025), high: at(0.975), n, method: IntervalMethod::PairedBootstrap })
}

/// A small, fast, seedable generator (Vigna's SplitMix64): statistics need repeatability here,
/// not cryptographic strength.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-32 for any n here).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-4
    }

    #[test]
    fn binary_rewards_get_a_wilson_interval() {
        // 7 of 10: Wilson's 95 % interval is [0.3968, 0.8922].
        let values: Vec<f64> = (0..10).map(|i| if i < 7 { 1.0 } else { 0.0 }).collect();
        let i = mean_interval(&values).unwrap();
        assert_eq!(i.method, IntervalMethod::Wilson);
        assert!(close(i.estimate, 0.7) && close(i.low, 0.3968) && close(i.high, 0.8922), "{i:?}");
        // All passed: the interval still has width, below 1.
        let all = mean_interval(&[1.0; 5]).unwrap();
        assert!(all.low < 0.6 && all.high == 1.0, "{all:?}");
    }

    #[test]
    fn fractional_rewards_get_a_t_interval() {
        // mean 0.5, sd 0.2582 (n = 4): half-width 3.182 × 0.1291 = 0.4108.
        let i = mean_interval(&[0.2, 0.4, 0.6, 0.8]).unwrap();
        assert_eq!(i.method, IntervalMethod::StudentT);
        assert!(close(i.low, 0.0892) && close(i.high, 0.9108), "{i:?}");
        assert!(close(t95(60), 2.000) && close(t95(120), 1.980), "{} {}", t95(60), t95(120));
        assert_eq!(mean_interval(&[]), None);
        assert_eq!(mean_interval(&[0.3]).unwrap().method, IntervalMethod::Single);
    }

    #[test]
    fn the_paired_bootstrap_is_repeatable_and_brackets_the_difference() {
        let pairs: Vec<(f64, f64)> = (0..40).map(|i| (if i % 2 == 0 { 1.0 } else { 0.0 }, 1.0)).collect();
        let a = paired_bootstrap(&pairs, 2000, 7).unwrap();
        let b = paired_bootstrap(&pairs, 2000, 7).unwrap();
        assert_eq!(a, b);
        assert!(close(a.estimate, 0.5));
        // Half the tasks flip: the difference's standard error is 0.5/√40 ≈ 0.079.
        assert!(a.low > 0.3 && a.low < 0.4 && a.high > 0.6 && a.high < 0.7, "{a:?}");
        // No difference anywhere: a point at zero.
        let same = paired_bootstrap(&[(1.0, 1.0), (0.0, 0.0), (0.5, 0.5)], 500, 1).unwrap();
        assert_eq!((same.low, same.high), (0.0, 0.0));
    }
}
