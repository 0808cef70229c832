//! Active-Passive handovers as `ringsync handover status` showed them once
//! a second: the moves the groups' services confirmed, and the pace of the
//! planner's moves (R-AP-2).

use super::play::Played;
use crate::site::Layout;

/// Leader changes the groups' services confirmed, over the run: each is a
/// handover (or a takeover home) done.
pub(super) fn handovers_done(p: &Played) -> u64 {
    // Against the last leader seen per group, so a sample in which the
    // status could not be read hides no change.
    let mut last: std::collections::BTreeMap<&str, &str> = Default::default();
    let mut n = 0;
    for s in &p.samples {
        for (g, leader) in &s.ap_leader {
            if last
                .insert(g, leader)
                .is_some_and(|before| before != leader)
            {
                n += 1;
            }
        }
    }
    n
}

/// R-AP-2: moves are published no faster than one per `ap_pace_s`: the
/// planner's "last move" times seen over the run are at least a pace
/// apart.
pub(super) fn paced(l: &Layout, p: &Played) -> (bool, String) {
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
    let pace = f64::from(l.ap_pace_s());
    (
        min >= pace,
        format!(
            "{} moves published {min:.1}–{max:.1} s apart (pace {pace:.0} s), {done} leader changes confirmed by the groups' services",
            moves.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rehearsal::sample::Sample;

    fn at(leaders: &[(&str, &str)]) -> Sample {
        let mut s = Sample::default();
        for (g, l) in leaders {
            s.ap_leader.insert((*g).into(), (*l).into());
        }
        s
    }

    #[test]
    fn leader_changes_are_counted_across_a_sample_without_status() {
        let p = Played {
            marks: Vec::new(),
            samples: vec![
                at(&[("ap-1", "ap1-a"), ("ap-2", "ap2-a")]),
                at(&[]),
                at(&[("ap-1", "ap1-b"), ("ap-2", "ap2-a")]),
                at(&[("ap-1", "ap1-b"), ("ap-2", "ap2-b")]),
                at(&[("ap-1", "ap1-a"), ("ap-2", "ap2-b")]),
            ],
            loads: Vec::new(),
            gate_stops: Vec::new(),
        };
        assert_eq!(handovers_done(&p), 3);
    }
}
