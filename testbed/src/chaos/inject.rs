//! Injects a planned fault into the running site and records when its
//! effect was over (or why it was skipped).

use std::time::{Duration, Instant};

use super::loss::Lost;
use super::plan::{Done, Fault, Planned};
use crate::site::Site;
use crate::{Error, Result};

/// Injects `p` now; returns once the node it hit serves again (or the
/// SIGCONT went, or the loss rule is gone: a loss's `t` and `until` are
/// when its rule was in place and when it was flushed). Times are seconds
/// after `start`.
pub fn inject(site: &mut Site, p: &Planned, start: Instant) -> Done {
    let t = start.elapsed().as_secs_f64();
    let mut done = Done {
        t,
        until: t,
        fault: p.fault.clone(),
        error: None,
        skipped: None,
    };
    if let Fault::LosePackets { leg, share, for_s } = &p.fault {
        match super::loss::lose(site.layout(), *leg, *share, *for_s, start) {
            Ok(Lost::Dropped { on, off }) => (done.t, done.until) = (on, off),
            Ok(Lost::Skipped(why)) => {
                eprintln!("testbed chaos: at {t:.1} s, {why}");
                done.skipped = Some(why);
            }
            Err(e) => done.error = Some(e.to_string()),
        }
        return done;
    }
    done.error = run(site, &p.fault).err().map(|e| e.to_string());
    done.until = start.elapsed().as_secs_f64();
    done
}

fn gate<'a>(site: &'a mut Site, f: &Fault, g: usize) -> Result<&'a mut crate::site::GateNode> {
    site.gate_mut(g).ok_or(Error::Command {
        command: f.label(),
        message: "no such gate".into(),
    })
}

fn run(site: &mut Site, f: &Fault) -> Result<()> {
    match f {
        Fault::KillGate { gate: g } => gate(site, f, *g)?.kill_and_start(),
        Fault::PauseGate { gate: g, for_s } => {
            let node = gate(site, f, *g)?;
            node.signal("STOP");
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            node.signal("CONT");
            Ok(())
        }
        Fault::UpgradeGate { gate: g } => gate(site, f, *g)?.upgrade().map(|_| ()),
        Fault::KillMedia => site.kill_and_start_media(),
        Fault::KillServe => site.kill_and_start_serve(),
        Fault::KillEtcdMember { member, for_s } => {
            let e = etcd(site, f)?;
            e.kill(*member);
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            e.start_member(*member)
        }
        Fault::KillEtcdLeader { for_s } => {
            let e = etcd(site, f)?;
            let leader = e.leader().ok_or(Error::Command {
                command: f.label(),
                message: "no etcd member says it leads".into(),
            })?;
            e.kill(leader);
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            e.start_member(leader)
        }
        Fault::StopStore { for_s } => {
            let e = etcd(site, f)?;
            e.stop();
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            e.start()
        }
        Fault::KillInstance { instance, for_s } => {
            site.kill_instance(instance)?;
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            site.start_instance(instance)
        }
        Fault::LosePackets { .. } => Ok(()),
        Fault::DelayGate { gate: g, ms, for_s } => {
            site.delay_gate(*g, Duration::from_millis(u64::from(*ms)))?;
            std::thread::sleep(Duration::from_secs_f64(*for_s));
            site.delay_gate(*g, Duration::ZERO)
        }
        Fault::KillAgent { member } => site.kill_and_start_agent(member),
    }
}

fn etcd<'a>(site: &'a mut Site, f: &Fault) -> Result<&'a mut crate::Etcd> {
    site.etcd_mut().ok_or(Error::Command {
        command: f.label(),
        message: "the site has no etcd cluster".into(),
    })
}
