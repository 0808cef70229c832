//! The fault timeline of a chaos run, drawn from the seed before anything
//! starts: which fault, on what, at which instant. Same seed, same
//! duration, same site: same timeline.

use serde::Serialize;

use super::rng::Rng;

/// One fault the generator can choose.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL to a gate node and a start again at once: its calls'
    /// in-dialog requests meanwhile go nowhere (a process on their path
    /// was killed).
    KillGate {
        /// Gate number.
        gate: usize,
    },
    /// SIGSTOP to a gate node, SIGCONT `for_s` later: it is frozen, not
    /// killed, so its calls must survive (SIP retransmits). Shorter than
    /// the callers' 2 s failover: a final answer from the frozen gate to
    /// an INVITE its caller already took elsewhere aborts SIPp (an
    /// assertion on a late final response to an un-ACKed INVITE
    /// transaction), which would lose that caller's every call.
    PauseGate {
        /// Gate number.
        gate: usize,
        /// Seconds frozen.
        for_s: f64,
    },
    /// `sip-gate upgrade` of a gate node (R-GW-3): seamless, no call fails.
    UpgradeGate {
        /// Gate number.
        gate: usize,
    },
    /// SIGKILL to media-ctl and a start again.
    KillMedia,
    /// SIGKILL to `ringsync serve` (the Active-Passive planner) and a
    /// start again.
    KillServe,
    /// SIGKILL to one member of the three-member etcd cluster, started
    /// again `for_s` later.
    KillEtcdMember {
        /// Member number (0-2).
        member: usize,
        /// Seconds it is down.
        for_s: f64,
    },
    /// SIGKILL to the etcd member that leads at that moment, started
    /// again `for_s` later.
    KillEtcdLeader {
        /// Seconds it is down.
        for_s: f64,
    },
    /// The whole store stopped for `for_s` (R-MN-2: the gates keep their
    /// last view and say it is stale).
    StopStore {
        /// Seconds it is away.
        for_s: f64,
    },
    /// SIGKILL to an sg/esg instance (its SIPp UAS), started again
    /// `for_s` later: its calls had a process on their path killed.
    KillInstance {
        /// Instance id.
        instance: String,
        /// Seconds it is down.
        for_s: f64,
    },
    /// A random `share` of the loopback packets of one `leg` dropped for
    /// `for_s` (`iptables -m statistic`, only in the run's own network
    /// namespace; see [`super::loss`]).
    LosePackets {
        /// Which packets.
        leg: Leg,
        /// The share dropped (0.05 to 0.30).
        share: f64,
        /// Seconds it lasts.
        for_s: f64,
    },
    /// Everything between the callers and gate `gate` delayed by `ms`
    /// each way for `for_s`, by the testbed's relay in front of the gate
    /// (`tc netem` is not on these machines). Under the callers' 2 s
    /// failover, so no caller leaves a gate that still answers.
    DelayGate {
        /// Gate number.
        gate: usize,
        /// Milliseconds each way.
        ms: u32,
        /// Seconds it lasts.
        for_s: f64,
    },
    /// SIGKILL to an Active-Passive member's agent and a start again: its
    /// member stops leading at the kill (its process is gone).
    KillAgent {
        /// The member.
        member: String,
    },
}

/// The packets a loss drops: one direction, the one new requests take.
/// The other carries the final answers, and a 200 retransmitted late,
/// after the failover caller left that gate, would abort its SIPp (see
/// [`Fault::PauseGate`]); requests and ACKs lost this way are recovered by
/// their senders' retransmissions (the UAS's 200 until its ACK comes, a
/// re-INVITE, BYE, REGISTER or SUBSCRIBE at T1, 500 ms, doubling), and a
/// first INVITE lost sends its caller to the next gate after 2 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Leg {
    /// From the callers to the gates.
    CallerToGate,
    /// From the gates to the sg/esg instances.
    GateToInstance,
}

impl Leg {
    /// The leg in the report's words.
    pub fn label(self) -> &'static str {
        match self {
            Leg::CallerToGate => "caller->gate",
            Leg::GateToInstance => "gate->instance",
        }
    }
}

impl Fault {
    /// The fault in the report's words.
    pub fn label(&self) -> String {
        match self {
            Fault::KillGate { gate } => format!("kill -9 gate-{gate}, start it again"),
            Fault::PauseGate { gate, for_s } => {
                format!("SIGSTOP gate-{gate}, SIGCONT after {for_s:.1} s")
            }
            Fault::UpgradeGate { gate } => format!("sip-gate upgrade gate-{gate}"),
            Fault::KillMedia => "kill -9 media-ctl, start it again".into(),
            Fault::KillServe => "kill -9 ringsync serve, start it again".into(),
            Fault::KillEtcdMember { member, for_s } => {
                format!("kill -9 etcd member {member}, start it again after {for_s:.1} s")
            }
            Fault::KillEtcdLeader { for_s } => {
                format!("kill -9 the etcd leader, start it again after {for_s:.1} s")
            }
            Fault::StopStore { for_s } => format!("stop the whole etcd cluster for {for_s:.1} s"),
            Fault::KillInstance { instance, for_s } => {
                format!("kill -9 {instance}, start it again after {for_s:.1} s")
            }
            Fault::LosePackets { leg, share, for_s } => format!(
                "drop {:.0}% of the {} packets for {for_s:.1} s",
                share * 100.0,
                leg.label()
            ),
            Fault::DelayGate { gate, ms, for_s } => {
                format!("delay caller<->gate-{gate} by {ms} ms each way for {for_s:.1} s")
            }
            Fault::KillAgent { member } => {
                format!("kill -9 the agent of {member}, start it again")
            }
        }
    }

    /// The gate node a fault hits, if any.
    pub fn gate(&self) -> Option<usize> {
        match self {
            Fault::KillGate { gate }
            | Fault::PauseGate { gate, .. }
            | Fault::UpgradeGate { gate } => Some(*gate),
            _ => None,
        }
    }
}

/// A fault at its instant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    /// Seconds after the start.
    pub at_s: f64,
    /// What.
    #[serde(flatten)]
    pub fault: Fault,
}

/// A fault as it was injected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Done {
    /// Seconds after the start it began.
    pub t: f64,
    /// When its effect was over: the node served again, the SIGCONT went.
    pub until: f64,
    /// What.
    #[serde(flatten)]
    pub fault: Fault,
    /// Why it could not be injected, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it was left out on purpose (a packet loss outside a network
    /// namespace of the run's own): not a failure, and it had no effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Done {
    /// Whether it took effect (injected, not skipped).
    pub fn happened(&self) -> bool {
        self.error.is_none() && self.skipped.is_none()
    }
}

/// What the generator may choose from.
#[derive(Debug, Clone)]
pub struct Menu {
    /// Gate nodes of the site.
    pub gates: usize,
    /// Whether `ringsync serve` runs (a site with Active-Passive groups).
    pub serve: bool,
    /// Whether the store is a three-member etcd cluster.
    pub etcd: bool,
    /// The sg/esg instances that may be killed.
    pub instances: Vec<String>,
    /// The Active-Passive members whose agents may be killed.
    pub agents: Vec<String>,
    /// Whether relays stand in front of the gates (delays possible).
    pub delay: bool,
}

/// Seconds kept free of faults at the start (the load settles) and at the
/// end (the last calls end and are judged).
pub const QUIET_START_S: f64 = 6.0;
/// See [`QUIET_START_S`].
pub const QUIET_END_S: f64 = 12.0;
/// The longest pause of a gate: under the failover callers' 2 s.
pub const PAUSE_MAX_S: f64 = 1.8;
/// The least and the most share of packets a loss drops.
pub const LOSS_SHARE: (f64, f64) = (0.05, 0.30);
/// The least and the most delay each way, in ms: a round trip stays well
/// under the callers' 2 s failover.
pub const DELAY_MS: (f64, f64) = (50.0, 400.0);
/// Least seconds between two faults, so each one's effect is seen alone.
pub const MIN_GAP_S: f64 = 4.0;

/// The timeline of a run of `duration_s` with `seed`: about one fault
/// every ten seconds (at least three), each in a slot of its own at a
/// random instant, the kind and the target drawn from `menu`.
pub fn plan(seed: u64, duration_s: f64, menu: &Menu) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let span = (duration_s - QUIET_START_S - QUIET_END_S).max(0.0);
    let n = ((span / 10.0).round() as usize).max(3);
    let slot = span / n as f64;
    if slot < MIN_GAP_S {
        return Vec::new();
    }
    // Kill, pause and upgrade a gate weigh most: they are on every call's path.
    let etcd = u32::from(menu.etcd);
    let weights = [
        3,
        3,
        2,
        1,
        u32::from(menu.serve),
        etcd,
        etcd,
        etcd,
        u32::from(!menu.instances.is_empty()),
        2,
        2 * u32::from(menu.delay),
        u32::from(!menu.agents.is_empty()),
    ];
    (0..n)
        .map(|i| {
            let at_s = QUIET_START_S + i as f64 * slot + rng.range(0.0, slot - MIN_GAP_S + 1.0);
            let gate = rng.below(menu.gates);
            let fault = match rng.weighted(&weights) {
                0 => Fault::KillGate { gate },
                1 => Fault::PauseGate {
                    gate,
                    for_s: (rng.range(0.5, PAUSE_MAX_S) * 10.0).round() / 10.0,
                },
                2 => Fault::UpgradeGate { gate },
                3 => Fault::KillMedia,
                4 => Fault::KillServe,
                5 => Fault::KillEtcdMember {
                    member: rng.below(3),
                    for_s: tenths(rng.range(1.0, 5.0)),
                },
                6 => Fault::KillEtcdLeader {
                    for_s: tenths(rng.range(1.0, 5.0)),
                },
                7 => Fault::StopStore {
                    for_s: tenths(rng.range(1.0, 4.0)),
                },
                8 => Fault::KillInstance {
                    instance: menu.instances[rng.below(menu.instances.len())].clone(),
                    for_s: tenths(rng.range(1.0, 4.0)),
                },
                10 => Fault::DelayGate {
                    gate,
                    ms: (rng.range(DELAY_MS.0, DELAY_MS.1) / 10.0).round() as u32 * 10,
                    for_s: tenths(rng.range(2.0, 6.0)),
                },
                11 => Fault::KillAgent {
                    member: menu.agents[rng.below(menu.agents.len())].clone(),
                },
                _ => Fault::LosePackets {
                    leg: if rng.below(2) == 0 {
                        Leg::CallerToGate
                    } else {
                        Leg::GateToInstance
                    },
                    share: (rng.range(LOSS_SHARE.0, LOSS_SHARE.1) * 100.0).round() / 100.0,
                    for_s: tenths(rng.range(2.0, 5.0)),
                },
            };
            Planned {
                at_s: (at_s * 10.0).round() / 10.0,
                fault,
            }
        })
        .collect()
}

fn tenths(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The timeline as text, one fault a line.
pub fn timeline_text(seed: u64, faults: &[Planned]) -> String {
    let mut s = format!("chaos seed {seed}: {} faults\n", faults.len());
    for f in faults {
        s.push_str(&format!("  {:>7.1} s  {}\n", f.at_s, f.fault.label()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn menu() -> Menu {
        Menu {
            gates: 3,
            serve: true,
            etcd: true,
            instances: vec!["sg-a".into(), "sg-b".into()],
            agents: vec!["ap1-a".into(), "ap1-b".into()],
            delay: true,
        }
    }

    #[test]
    fn same_seed_same_timeline_and_faults_apart() {
        let a = plan(11, 60.0, &menu());
        assert_eq!(a, plan(11, 60.0, &menu()));
        assert_ne!(a, plan(12, 60.0, &menu()));
        assert!(a.len() >= 3, "{a:?}");
        for w in a.windows(2) {
            assert!(w[1].at_s - w[0].at_s >= MIN_GAP_S - 0.1, "{a:?}");
        }
        assert!(a[0].at_s >= QUIET_START_S);
        assert!(a.last().unwrap().at_s <= 60.0 - QUIET_END_S, "{a:?}");
        assert!(a.iter().all(|p| p.fault.gate().is_none_or(|g| g < 3)));
        // Delays stay within their bounds, in tens of ms.
        for p in plan(5, 3600.0, &menu()) {
            if let Fault::DelayGate { gate, ms, for_s } = p.fault {
                assert!(
                    gate < 3 && (50..=400).contains(&ms) && ms % 10 == 0,
                    "{p:?}"
                );
                assert!((2.0..=6.0).contains(&for_s), "{p:?}");
            }
        }
    }

    #[test]
    fn an_hour_draws_every_kind() {
        let a = plan(3, 3600.0, &menu());
        assert!(a.len() >= 300);
        for kind in [
            "kill -9 gate",
            "SIGSTOP",
            "upgrade",
            "media-ctl",
            "serve",
            "etcd member",
            "etcd leader",
            "whole etcd",
            "kill -9 sg-",
            "caller->gate packets",
            "gate->instance packets",
            "delay caller<->gate",
            "the agent of ap1-",
        ] {
            assert!(
                a.iter().any(|p| p.fault.label().contains(kind)),
                "{kind} never drawn"
            );
        }
        // A site without a planner, etcd, instances or agents to kill, or
        // relays to delay: gate faults, media-ctl and packet loss only.
        let bare = Menu {
            gates: 2,
            serve: false,
            etcd: false,
            instances: Vec::new(),
            agents: Vec::new(),
            delay: false,
        };
        assert!(plan(3, 600.0, &bare).iter().all(|p| matches!(
            p.fault,
            Fault::KillGate { .. }
                | Fault::PauseGate { .. }
                | Fault::UpgradeGate { .. }
                | Fault::KillMedia
                | Fault::LosePackets { .. }
        )));
    }
}
