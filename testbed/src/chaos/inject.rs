//! Injects a planned fault into the running site and records when its
//! effect was over.

use std::time::{Duration, Instant};

use super::plan::{Done, Fault, Planned};
use crate::site::Site;
use crate::{Error, Result};

/// Injects `p` now; returns once the node it hit serves again (or the
/// SIGCONT went). Times are seconds after `start`.
pub fn inject(site: &mut Site, p: &Planned, start: Instant) -> Done {
    let t = start.elapsed().as_secs_f64();
    let error = run(site, &p.fault).err().map(|e| e.to_string());
    Done {
        t,
        until: start.elapsed().as_secs_f64(),
        fault: p.fault.clone(),
        error,
    }
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
    }
}

fn etcd<'a>(site: &'a mut Site, f: &Fault) -> Result<&'a mut crate::Etcd> {
    site.etcd_mut().ok_or(Error::Command {
        command: f.label(),
        message: "the site has no etcd cluster".into(),
    })
}
