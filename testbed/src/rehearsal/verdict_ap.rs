//! Active-Passive handovers as `ringsync handover status` showed them once
//! a second: the moves the groups' services confirmed, and the pace of the
//! planner's moves (R-AP-2).

use super::play::Played;
use crate::site::Layout;

/// Leader changes the groups' services confirmed, over the run: each is a
/// handover (or a takeover home) done.
pub fn handovers_done(p: &Played) -> u64 {
    let mut n = 0;
    for w in p.samples.windows(2) {
        for (g, leader) in &w[1].ap_leader {
            if w[0].ap_leader.get(g).is_some_and(|before| before != leader) {
                n += 1;
            }
        }
    }
    n
}

/// R-AP-2: moves are published no faster than one per `ap_pace_s`: the
/// planner's "last move" times seen over the run are at least a pace
/// apart.
pub fn paced(l: &Layout, p: &Played) -> (bool, String) {
    let mut moves: Vec<u64> = p.samples.iter().filter_map(|s| s.ap_last_move_ms).collect();
    moves.sort_unstable();
    moves.dedup();
    let done = handovers_done(p);
    if moves.len() < 2 {
        return (
            false,
            format!(
                "{} move(s) published, {done} confirmed: fewer than two, no pace to judge",
                moves.len()
            ),
        );
    }
    let gaps: Vec<f64> = moves
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1000.0)
        .collect();
    let min = gaps.iter().copied().fold(f64::MAX, f64::min);
    let max = gaps.iter().copied().fold(0.0, f64::max);
    let pace = f64::from(l.ap_pace_s);
    (
        min >= pace,
        format!(
            "{} moves published {min:.1}–{max:.1} s apart (pace {pace:.0} s), {done} leader changes confirmed by the groups' services",
            moves.len()
        ),
    )
}
