//! The descriptor limit against `[tcp] max_connections`.
//!
//! Every TCP, TLS or WebSocket connection is a descriptor, so the process's
//! `RLIMIT_NOFILE` must exceed `max_connections` by what the gate needs
//! besides (its UDP sockets, the admin listener, the store, DNS queries,
//! connections it opens to instances). Otherwise descriptors run out
//! first: `accept` fails with EMFILE (logged, the listener backs off and
//! retries), and so does every socket the gate needs itself, so a
//! connection to an instance fails and the instance is held unreachable
//! over that stream. The connection limit is meant to bite first (R-OV-1).
//!
//! At start the gate raises its soft limit up to the hard one when the soft
//! is short (the hard limit, systemd's `LimitNOFILE=`, is the operator's to
//! set), and warns when even that leaves less than [`RESERVE`] descriptors
//! above `max_connections`.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Descriptors kept for the gate's own use above `max_connections`.
pub(crate) const RESERVE: u64 = 1024;

/// What [`fit`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fit {
    /// The soft limit in force afterwards.
    pub(crate) soft: u64,
    /// The soft limit before.
    pub(crate) was: u64,
    /// Descriptors wanted: `max_connections` + [`RESERVE`].
    pub(crate) want: u64,
}

impl Fit {
    /// Whether the limit in force leaves the reserve.
    pub(crate) fn enough(&self) -> bool {
        self.soft >= self.want
    }
}

/// Raises the soft `RLIMIT_NOFILE` towards `max_connections` +
/// [`RESERVE`], as far as the hard limit allows, and logs the outcome: a
/// warning when it stays short. `None` when the limit cannot be read.
pub(crate) fn fit(max_connections: usize) -> Option<Fit> {
    let want = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(RESERVE);
    let (was, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE");
            return None;
        }
    };
    let mut soft = was;
    if soft < want {
        let to = want.min(hard);
        match setrlimit(Resource::RLIMIT_NOFILE, to, hard) {
            Ok(()) => soft = to,
            Err(e) => tracing::warn!(error = %e, to, "cannot raise RLIMIT_NOFILE"),
        }
    }
    let fit = Fit { soft, was, want };
    if fit.enough() {
        tracing::info!(
            nofile = soft,
            was,
            max_connections,
            "descriptor limit leaves room for [tcp] max_connections"
        );
    } else {
        tracing::warn!(
            nofile = soft,
            hard,
            max_connections,
            reserve = RESERVE,
            "descriptor limit below [tcp] max_connections + reserve: descriptors run out before the connection limit (accept fails with EMFILE, connections to instances fail); raise LimitNOFILE or lower max_connections"
        );
    }
    Some(fit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::resource::RLIM_INFINITY;

    #[test]
    fn the_soft_limit_is_raised_within_the_hard_one_and_a_short_one_is_said() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Asking for what the hard limit allows: the soft limit gets there.
        let small = usize::try_from(hard.saturating_sub(RESERVE).min(4096)).unwrap();
        let f = fit(small).unwrap();
        assert!(f.enough(), "{f:?}");
        assert!(f.soft >= f.want, "{f:?}");
        let (soft_now, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft_now, f.soft);
        // More than the hard limit: raised to the hard limit, and short
        // (an unlimited hard limit is never short).
        if let (Ok(over), false) = (usize::try_from(hard), hard == RLIM_INFINITY) {
            let f = fit(over).unwrap();
            assert!(!f.enough(), "{f:?}");
            assert_eq!(f.soft, hard);
        }
    }
}
