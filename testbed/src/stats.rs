//! The statistics every benchmark's table uses, one definition each, so
//! that two tables compare (docs/benchmarks.md says the same):
//!
//! - [`median`]: the middle value of the finite samples, the mean of the
//!   two middle ones for an even count (the medians over rounds).
//! - [`percentile`]: nearest rank. The `q`-quantile (`q` in `0..=1`, so
//!   p99 is `0.99`) of `n` sorted samples is the one at rank
//!   `ceil(q × n)`, counted from 1 and kept within `1..=n`: the smallest
//!   sample with at least a fraction `q` of all samples at or below it. It
//!   is always a value that was measured, never an interpolation; p50 is
//!   the lower middle for an even count, and p100 the maximum.

/// The median of the finite values (the mean of the middle two for an even
/// count); NaN when there is none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `q`-quantile of `sorted` (ascending; `q` in `0..=1`,
/// outside it is clamped); `None` when there is no sample.
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
    // ceil(q × n) in f64 is exact for the sample counts measured here.
    let rank = (q * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_non_finite_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![f64::NAN, 5.0, f64::INFINITY]), 5.0);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!(percentile(&v, 0.50), Some(100));
        assert_eq!(percentile(&v, 0.99), Some(198));
        assert_eq!(percentile(&v, 1.0), Some(200));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7u32], 0.99), Some(7));
        assert_eq!(percentile::<u64>(&[], 0.5), None);
        // Ten samples: p99 and p91 are the maximum, p90 the ninth.
        let ten: Vec<u32> = (1..=10).collect();
        assert_eq!(percentile(&ten, 0.99), Some(10));
        assert_eq!(percentile(&ten, 0.91), Some(10));
        assert_eq!(percentile(&ten, 0.90), Some(9));
        assert_eq!(percentile(&ten, 0.50), Some(5));
    }
}
