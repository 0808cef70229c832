//! Tests of the work report's times (R-ST-2). How reports add up
//! (R-ST-3) is tested with the sum, in `ringsync_ops::sum`.

use super::*;

#[test]
fn times_in_words() {
    assert_eq!(in_words(1_000, 2_000), "now");
    assert_eq!(in_words(46_000, 1_000), "in 45s");
    assert_eq!(in_words(251_000, 1_000), "in 4m 10s");
    assert_eq!(in_words(7_201_000, 1_000), "in 2h 0m");
}
