//! RFC 2782 target order: by priority, lowest first; within one priority,
//! weighted random (a target of weight 0 has a small chance, ahead of none).
//!
//! The randomness comes from a seed (the transaction key), so one
//! transaction always sees the same order (its failover walks one list)
//! while transactions spread over the targets by their weights.

use std::net::SocketAddr;

use super::SrvTarget;

/// The addresses of `targets` in the order to try them.
pub(crate) fn order(targets: &[SrvTarget], seed: u64) -> Vec<SocketAddr> {
    let mut rng = SplitMix(seed);
    let mut by_priority: Vec<&SrvTarget> = targets.iter().collect();
    by_priority.sort_by_key(|t| t.priority);
    let mut out = Vec::with_capacity(targets.iter().map(|t| t.addrs.len()).sum());
    for group in by_priority.chunk_by(|a, b| a.priority == b.priority) {
        let mut left: Vec<&SrvTarget> = group.to_vec();
        while !left.is_empty() {
            let pick = weighted_pick(&left, &mut rng);
            out.extend_from_slice(&left.remove(pick).addrs);
        }
    }
    out
}

/// RFC 2782: a running sum of weights, a random number in 0..=sum, the
/// first target whose running sum reaches it. Zero weights go first in the
/// list so they are picked only when the number is 0.
fn weighted_pick(left: &[&SrvTarget], rng: &mut SplitMix) -> usize {
    let total: u64 = left.iter().map(|t| u64::from(t.weight)).sum();
    let r = rng.next() % (total + 1);
    let mut zeros_first: Vec<usize> = (0..left.len()).collect();
    zeros_first.sort_by_key(|&i| left[i].weight != 0);
    let mut sum = 0u64;
    for i in zeros_first {
        sum += u64::from(left[i].weight);
        if sum >= r {
            return i;
        }
    }
    left.len() - 1
}

/// SplitMix64: a few instructions per number, good enough to spread load.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(priority: u16, weight: u16, last_octet: u8) -> SrvTarget {
        SrvTarget {
            priority,
            weight,
            addrs: vec![SocketAddr::from(([192, 0, 2, last_octet], 5060))],
        }
    }

    #[test]
    fn rfc2782_priority_first_then_weight_shares() {
        let targets = [t(20, 90, 2), t(10, 0, 1), t(20, 10, 3), t(30, 5, 4)];
        let mut second_is_2 = 0;
        for seed in 0..2000u64 {
            let o = order(&targets, seed);
            assert_eq!(o.len(), 4);
            // Priority 10 always first, 30 always last.
            assert_eq!(o[0].ip(), std::net::IpAddr::from([192, 0, 2, 1]));
            assert_eq!(o[3].ip(), std::net::IpAddr::from([192, 0, 2, 4]));
            if o[1].ip() == std::net::IpAddr::from([192, 0, 2, 2]) {
                second_is_2 += 1;
            }
        }
        // Weights 90:10 within priority 20: about 90% first.
        assert!((1700..=1900).contains(&second_is_2), "{second_is_2}");
        // The same seed, the same order.
        assert_eq!(order(&targets, 7), order(&targets, 7));
    }

    #[test]
    fn rfc2782_a_zero_weight_is_picked_first_only_sometimes() {
        // Weights 0 and 1: the zero goes first when the draw is 0 (1 in 2).
        let targets = [t(10, 1, 2), t(10, 0, 1)];
        let zero_first = (0..1000)
            .filter(|&s| order(&targets, s)[0].ip() == std::net::IpAddr::from([192, 0, 2, 1]))
            .count();
        assert!((400..=600).contains(&zero_first), "{zero_first}");
    }
}
