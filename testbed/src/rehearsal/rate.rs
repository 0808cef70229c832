//! Per-second rates from the samples' cumulative counters, for every place
//! that shows one (the progress line, the chart): a count divided by the
//! real time between the two samples it is the difference of, never by a
//! nominal second. Samples are not evenly spaced: the play loop takes one
//! at each step (a few ms from the sampler's own), and a stalled sampler
//! reads late. An interval shorter than [`MIN_INTERVAL_S`] gives no rate of
//! its own: its count goes into the next interval, so a sample right after
//! a step shows no fake 0 (nor a spike of one call over 20 ms).

use super::sampled::Sample;

/// The shortest span a rate is computed over.
pub const MIN_INTERVAL_S: f64 = 0.5;

/// The sample a rate ending at `samples[i]` starts from: the newest one at
/// least [`MIN_INTERVAL_S`] before it.
pub fn base(samples: &[Sample], i: usize) -> Option<&Sample> {
    let end = samples.get(i)?;
    samples[..i]
        .iter()
        .rev()
        .find(|s| end.t - s.t >= MIN_INTERVAL_S)
}

/// `(t, per second)` of the counter `count` reads from each sample (0
/// where a sample has none yet), one point per interval of at least
/// [`MIN_INTERVAL_S`], chained so every count is in exactly one interval.
pub fn series(samples: &[Sample], count: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let Some(mut from) = samples.first() else {
        return out;
    };
    for s in &samples[1..] {
        let dt = s.t - from.t;
        if dt < MIN_INTERVAL_S {
            continue;
        }
        out.push((s.t, per_second(count(from), count(s), dt)));
        from = s;
    }
    out
}

/// `after - before` over `dt` seconds; a counter that went down (a node
/// restarted before the recorder kept it cumulative) counts nothing.
pub fn per_second(before: u64, after: u64, dt: f64) -> f64 {
    if dt <= 0.0 {
        return 0.0;
    }
    after.saturating_sub(before) as f64 / dt
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of one counter: `(t, count)`.
    fn samples(points: &[(f64, u64)]) -> Vec<Sample> {
        points
            .iter()
            .map(|(t, n)| {
                let mut s = Sample {
                    t: *t,
                    ..Sample::default()
                };
                s.new_work.insert("sg-a".into(), *n);
                s
            })
            .collect()
    }

    fn count(s: &Sample) -> u64 {
        s.new_work.get("sg-a").copied().unwrap_or(0)
    }

    #[test]
    fn a_sample_right_after_a_step_shows_no_fake_zero() {
        // 10 calls/s; the step's own sample 20 ms after the sampler's.
        let s = samples(&[
            (0.0, 0),
            (1.0, 10),
            (2.0, 20),
            (2.02, 20),
            (3.0, 30),
            (4.0, 40),
        ]);
        let r = series(&s, count);
        let ts: Vec<f64> = r.iter().map(|p| p.0).collect();
        assert_eq!(ts, [1.0, 2.0, 3.0, 4.0], "no point at 2.02 s");
        for (t, v) in &r {
            assert!((v - 10.0).abs() < 1e-9, "{v} at {t}");
        }
        // The progress line at 3.0 s starts from 2.02 s (0.98 s before),
        // at 2.02 s from 1.0 s: never from a sample 20 ms away.
        assert_eq!(base(&s, 4).map(|b| b.t), Some(2.02));
        assert_eq!(base(&s, 3).map(|b| b.t), Some(1.0));
    }

    #[test]
    fn a_stalled_sampler_shows_no_spike() {
        // 10 calls/s; the sampler stalls from 2 s to 4.1 s, then catches
        // up with a sample 30 ms later.
        let s = samples(&[
            (0.0, 0),
            (1.0, 10),
            (2.0, 20),
            (4.1, 41),
            (4.13, 41),
            (5.0, 50),
        ]);
        let r = series(&s, count);
        assert_eq!(r.len(), 4, "{r:?}");
        for (t, v) in &r {
            assert!((v - 10.0).abs() < 0.5, "{v} at {t}: {r:?}");
        }
        // A counter that went down counts nothing, not a wrap.
        assert_eq!(per_second(10, 3, 1.0), 0.0);
        assert_eq!(per_second(0, 3, 0.0), 0.0);
    }
}
