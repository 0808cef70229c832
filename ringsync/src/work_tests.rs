//! Tests of the work report's times (R-ST-2). How reports add up
//! (R-ST-3) is tested with the sum, in `ringsync_ops::sum`.

use super::*;

#[test]
fn utc_times() {
    assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
    assert_eq!(utc_text(951_782_400_000), "2000-02-29T00:00:00Z");
    assert_eq!(utc_text(1_796_057_741_135), "2026-11-30T16:55:41Z");
    assert_eq!(utc_text(4_102_444_799_000), "2099-12-31T23:59:59Z");
}

#[test]
fn times_in_words() {
    assert_eq!(in_words(1_000, 2_000), "now");
    assert_eq!(in_words(46_000, 1_000), "in 45s");
    assert_eq!(in_words(251_000, 1_000), "in 4m 10s");
    assert_eq!(in_words(7_201_000, 1_000), "in 2h 0m");
}
