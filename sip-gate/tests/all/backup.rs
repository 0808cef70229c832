//! R-HT-1 through the real binaries: the `sip-gate` binary in front of a
//! pool with a health threshold, the operator's `ringsync` CLI draining its
//! servers, SIPp as every sg and as the callers.
//!
//! A pool of three sg with threshold 2 and a backup pool of one: draining
//! two of the three sends every new call to the backup (none fails), the
//! calls up before keep their re-INVITE and BYE on the draining sg, and
//! `ringsync status` shows the pool in `backup` with the reason; lifting
//! the drain brings new calls back to the pool after `hold_s`. Then a
//! backup of SIP destinations (another site's gate, a SIPp UAS here),
//! probed like an instance.
//!
//! Addresses: `127.35.1.0/24` and `127.35.2.0/24`; the gate on `.1`, the
//! sg's SIPp on `.11`-`.14`, the other site's gate on `.31`, callers from
//! `.21`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::common::{calls_through, ip, ringsync};
use serde_json::Value;
use testbed::bins::Node;
use testbed::fixture::{Mode, SiteFile, UDP};
use testbed::wait_for;
use testbed::{Scenario, Sipp, SippHandle, SippReport};

/// The site of these tests: health probes every 200 ms (down after two
/// misses of 150 ms), the gate's admin on `.1:9091`, a UDP balance
/// listener `subs` over the sg pool on `.1:5060`, and for each `(n, pool)`
/// of `sgs` an sg `sg-n` on server `srv-n` at `.1n:5060`, in `pool` when
/// given (else the sg pool).
fn site(net: (u8, u8), sgs: &[(u8, Option<&str>)]) -> SiteFile {
    let gate = ip(net, 1);
    let mut site = SiteFile::gate(&format!("backup-{}-{}", net.0, net.1), gate, &[])
        .health("interval_ms = 200\ntimeout_ms = 150\nfailures = 2")
        .subscribers("subs", SocketAddr::new(gate, 5060), &["udp"]);
    for (n, pool) in sgs {
        let sip = format!("sip = \"{}\"", SocketAddr::new(ip(net, 10 + n), 5060));
        let extra = pool.map_or(sip.clone(), |p| format!("{sip}\npool = \"{p}\""));
        let server = format!("srv-{n}");
        site = site
            .servers(&[&server])
            .instance_with(&format!("sg-{n}"), "sg", &server, &extra);
    }
    site
}

/// A UAS that takes calls and answers the gate's OPTIONS probes (`-aa`).
fn uas(addr: SocketAddr) -> SippHandle {
    Sipp::new(Scenario::repo("uas_call"))
        .local(addr.ip(), addr.port())
        .arg("-aa")
        .timeout(Duration::from_secs(120))
        .spawn()
        .expect("uas starts")
}

/// `calls` calls through the gate, each held `hold`, to the end.
fn call(net: (u8, u8), calls: u64, hold: Duration) -> SippReport {
    call_at(net, 5060, calls, hold)
}

/// The same through the gate's listener on `port`.
fn call_at(net: (u8, u8), port: u16, calls: u64, hold: Duration) -> SippReport {
    let to = SocketAddr::new(ip(net, 1), port);
    calls_through("uac_call", ip(net, 21), to, calls, hold)
}

/// `ringsync status --json`'s `backups` (none: empty).
fn backups(site: &Path) -> Vec<Value> {
    ringsync(site, &["status"])["backups"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// New calls the gate sent to each instance (`sipgate_new_work_total`).
fn new_work(gate: &Node, ids: &[&str]) -> Vec<f64> {
    ids.iter()
        .map(|id| {
            gate.metric(&format!(r#"sipgate_new_work_total{{instance="{id}"}}"#))
                .unwrap_or(0.0)
        })
        .collect()
}

fn wait_all_up(site: &Path, ids: &[&str]) {
    wait_for("every instance up", Duration::from_secs(15), || {
        let st = ringsync(site, &["status"]);
        let up = st["instances"]
            .as_array()?
            .iter()
            .filter(|i| ids.iter().any(|id| i["id"] == *id) && i["state"] == "up")
            .count();
        (up == ids.len()).then_some(())
    })
    .unwrap();
}

/// R-HT-1: a pool of three sg, threshold 2, a backup pool of one sg.
#[test]
fn r_ht_1_two_of_three_drained_new_calls_go_to_the_backup_pool_and_come_back() {
    const NET: (u8, u8) = (35, 1);
    let dir = tempfile::tempdir().unwrap();
    let sgs = [(1, None), (2, None), (3, None), (4, Some("dr"))];
    // A guard listener in front of sg-1 on port 5070.
    let guard = SocketAddr::new(ip(NET, 1), 5070);
    let site = site(NET, &sgs)
        .listener("sg-1-guard", guard, Mode::Guard("sg-1"), "subscriber", UDP)
        .raw("[[pool]]\nname = \"sg\"\nthreshold = 2\nbackup = \"dr\"\nhold_s = 2\nguard_to_backup = true")
        .write(dir.path());
    let ids = ["sg-1", "sg-2", "sg-3", "sg-4"];
    let _uas: Vec<SippHandle> = (1..=4)
        .map(|n| uas(SocketAddr::new(ip(NET, 10 + n), 5060)))
        .collect();
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    wait_all_up(&site, &ids);
    assert!(backups(&site).is_empty());

    // Calls up on the pool before the drain, held 6 s: none goes to the
    // backup pool while the pool is whole.
    let before = std::thread::spawn(|| call(NET, 6, Duration::from_secs(6)));
    wait_for("6 calls up", Duration::from_secs(10), || {
        let w = gate.work()?;
        let d: u64 = ids[..3]
            .iter()
            .map(|id| w.instances.get(*id).map_or(0, |i| i.counts.dialogs))
            .sum();
        (d == 6).then_some(())
    })
    .unwrap();
    assert_eq!(new_work(&gate, &["sg-4"]), [0.0]);

    // The operator drains two of the three: the pool is under its threshold.
    ringsync(
        &site,
        &[
            "profile", "create", "--name", "two", "--server", "srv-1", "--server", "srv-2",
        ],
    );
    ringsync(&site, &["profile", "activate", "two"]);
    let b = wait_for("the pool in backup", Duration::from_secs(10), || {
        backups(&site).into_iter().next()
    })
    .unwrap();
    assert_eq!(b["pool"], "sg", "{b}");
    assert_eq!(b["backup"], "dr", "{b}");
    assert_eq!(
        b["reason"], "1 of 3 instances up in the normal zone, threshold 2",
        "{b}"
    );
    // The operator's text status says it too.
    let text = testbed::bins::command("ringsync")
        .unwrap()
        .arg("--config")
        .arg(&site)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("pool sg backup: new dialogs go to dr on ")
            && text.contains(": 1 of 3 instances up in the normal zone, threshold 2"),
        "{text}"
    );
    assert_eq!(
        gate.metric(r#"sipgate_pool_backup{pool="sg"}"#).unwrap(),
        1.0
    );
    assert_eq!(
        gate.metric(r#"sipgate_pool_backup_changes_total{pool="sg",to="backup"}"#)
            .unwrap(),
        1.0
    );
    assert!(
        gate.log().contains("pool under its threshold"),
        "{}",
        gate.log()
    );

    // Every new call goes to the backup pool, and none fails; sg-3, still
    // up in the normal zone, gets none of them.
    let pool_before = new_work(&gate, &ids);
    let moved = call(NET, 10, Duration::ZERO);
    assert!(moved.all_ok() && moved.successful == 10, "{moved:?}");
    let pool_after = new_work(&gate, &ids);
    assert_eq!(pool_after[3] - pool_before[3], 10.0, "{pool_after:?}");
    assert_eq!(pool_after[2], pool_before[2], "{pool_after:?}");
    assert_eq!(
        gate.metric(r#"sipgate_pool_backup_dialogs_total{pool="sg"}"#)
            .unwrap(),
        10.0
    );

    // The guard of sg-1 (draining, another sg up: R-SG-1 would refuse with
    // 503) sends its new calls to the backup too (`guard_to_backup`).
    let guarded = call_at(NET, 5070, 3, Duration::ZERO);
    assert!(guarded.all_ok() && guarded.successful == 3, "{guarded:?}");
    let after_guard = new_work(&gate, &ids);
    assert_eq!(after_guard[3] - pool_after[3], 3.0, "{after_guard:?}");
    assert_eq!(after_guard[0], pool_after[0], "{after_guard:?}");
    let pool_after = after_guard;

    // The calls up before kept their re-INVITE and BYE (in-dialog
    // traffic unchanged).
    let before = before.join().unwrap();
    assert!(before.all_ok() && before.successful == 6, "{before:?}");

    // Lifted: after hold_s at the threshold, new calls come back to the pool.
    ringsync(&site, &["profile", "deactivate", "two"]);
    wait_for("the pool back", Duration::from_secs(10), || {
        backups(&site).is_empty().then_some(())
    })
    .unwrap();
    assert_eq!(
        gate.metric(r#"sipgate_pool_backup{pool="sg"}"#).unwrap(),
        0.0
    );
    let back = call(NET, 10, Duration::ZERO);
    assert!(back.all_ok() && back.successful == 10, "{back:?}");
    let end = new_work(&gate, &ids);
    assert_eq!(end[3], pool_after[3], "none to the backup: {end:?}");
    let to_pool: f64 = (0..3).map(|i| end[i] - pool_after[i]).sum();
    assert_eq!(to_pool, 10.0, "{end:?}");
    assert!(gate.log().contains("come back from the backup"));
    gate.stop(Duration::from_secs(10));
}

/// R-HT-1: the backup is another site's gate (`backup_sip`), probed like
/// an instance: while it does not answer, the pool keeps its calls; once it
/// answers, the calls of a pool under its threshold go there.
#[test]
fn r_ht_1_a_backup_of_sip_destinations_takes_the_new_calls() {
    const NET: (u8, u8) = (35, 2);
    let dir = tempfile::tempdir().unwrap();
    let other_site = SocketAddr::new(ip(NET, 31), 5060);
    let site = site(NET, &[(1, None), (2, None)])
        .raw(&format!(
            "[[pool]]\nname = \"sg\"\nthreshold = 2\nbackup_sip = [\"{other_site}\"]"
        ))
        .write(dir.path());
    let _uas: Vec<SippHandle> = (1..=2)
        .map(|n| uas(SocketAddr::new(ip(NET, 10 + n), 5060)))
        .collect();
    let mut gate = Node::gate(&site)
        .admin(SocketAddr::new(ip(NET, 1), 9091))
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let ids = ["sg-1", "sg-2", "sg-backup-1"];
    wait_all_up(&site, &ids[..2]);
    // The other site's gate is not there yet: its probes mark it down.
    wait_for("the destination down", Duration::from_secs(10), || {
        let w = gate.work()?;
        (w.instances.get("sg-backup-1")?.health == ringsync::view::Health::Down).then_some(())
    })
    .unwrap();

    ringsync(
        &site,
        &["profile", "create", "--name", "one", "--server", "srv-1"],
    );
    ringsync(&site, &["profile", "activate", "one"]);
    let b = wait_for("the pool in backup", Duration::from_secs(10), || {
        backups(&site).into_iter().next()
    })
    .unwrap();
    assert_eq!(b["backup"], "sg-backup", "{b}");
    // A backup with nothing up takes nothing: sg-2 serves.
    let kept = call(NET, 3, Duration::ZERO);
    assert!(kept.all_ok() && kept.successful == 3, "{kept:?}");
    assert_eq!(new_work(&gate, &ids), [0.0, 3.0, 0.0]);

    // The other site's gate comes up and answers the probes.
    let _other = uas(other_site);
    wait_all_up(&site, &["sg-2", "sg-backup-1"]);
    let moved = call(NET, 5, Duration::from_secs(1));
    assert!(moved.all_ok() && moved.successful == 5, "{moved:?}");
    assert_eq!(new_work(&gate, &ids), [0.0, 3.0, 5.0]);
    gate.stop(Duration::from_secs(10));
}
