//! The one poll of the tests: look again every 20 ms until a condition
//! gives a value, under a deadline, instead of sleeping a guessed time.

use std::time::{Duration, Instant};

use crate::{Error, Result};

/// How often [`wait_for`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `f` every 20 ms until it gives a value (at least once, even with
/// a zero `timeout`); after `timeout` the error names `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() >= until {
            return Err(Error::WaitedFor {
                what: what.to_owned(),
                after: timeout,
            });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_ends_the_wait_and_a_deadline_is_an_error_naming_what() {
        let mut n = 0;
        let v = wait_for("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(v.unwrap(), 3);
        let e = wait_for("never", Duration::from_millis(50), || None::<()>).unwrap_err();
        assert!(e.to_string().contains("waiting for never"), "{e}");
    }
}
