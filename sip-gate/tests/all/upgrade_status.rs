//! Which run each gate is on (issue 39, R-GW-3), through the real binaries:
//! `sip-gate upgrade` makes a new run, and the real `ringsync status`
//! (JSON and text) shows the gate's new run id, version and since, and the
//! run it was upgraded from.
//!
//! Addresses: `127.139.11.0/24` (the gate's listener and admin on `.1`,
//! the sg on `.11`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use testbed::bins::BinDir;
use testbed::wait_for;

use crate::upgrade::{gate, site, upgrade};

/// The gate's run as `ringsync status --json` shows it (the site's one
/// gate node); `Null` when it shows none.
pub(crate) fn gate_run(site: &Path, admin: SocketAddr) -> Value {
    let bins = BinDir::locate();
    let st = testbed::bins::ringsync(&bins, site, &["status"]).unwrap();
    st["nodes"]
        .as_array()
        .and_then(|n| {
            n.iter()
                .find(|n| n["kind"] == "gate" && n["addr"] == admin.to_string())
        })
        .map_or(Value::Null, |n| n["run"].clone())
}

/// `ringsync status` in words.
fn status_text(site: &Path) -> String {
    let out = testbed::bins::command("ringsync")
        .unwrap()
        .arg("--config")
        .arg(site)
        .arg("status")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Issue 39: after `sip-gate upgrade`, status names the gate's new run (its
/// pid, since after the trigger) and the run it was upgraded from.
#[test]
fn r_gw_3_status_shows_the_gates_new_run_after_an_upgrade() {
    let net = (139, 11);
    let (_dir, site, _listener, admin) = site(net, false);
    // Status asks the gate where the site file says its admin endpoint is.
    let mut text = std::fs::read_to_string(&site).unwrap();
    text.push_str(&format!("\n[admin]\ngate_bind = \"{admin}\"\n"));
    std::fs::write(&site, text).unwrap();
    let old = gate(&site, admin, None);
    let first = gate_run(&site, admin);
    let old_id = first["id"].as_str().expect("a run id").to_owned();
    assert!(
        old_id.starts_with(&format!("{}-", old.pid().unwrap())),
        "{first}"
    );
    assert_eq!(first["version"], env!("CARGO_PKG_VERSION"), "{first}");
    assert!(first.get("upgraded_from").is_none(), "{first}");
    let before = ringsync::work::now_ms();
    let new = upgrade(&site, admin);
    let run = wait_for(
        "status to show the new run",
        Duration::from_secs(10),
        || {
            let run = gate_run(&site, admin);
            (run["id"].is_string() && run["id"] != old_id.as_str()).then_some(run)
        },
    )
    .unwrap();
    let id = run["id"].as_str().unwrap();
    assert!(id.starts_with(&format!("{}-", new.0)), "{run}");
    assert_eq!(run["version"], env!("CARGO_PKG_VERSION"), "{run}");
    assert!(run["since_ms"].as_u64().unwrap() >= before, "{run}");
    assert_eq!(run["upgraded_from"]["id"], old_id.as_str(), "{run}");
    let text = status_text(&site);
    assert!(
        text.contains(&format!("run {id} (version "))
            && text.contains(&format!("upgraded from run {old_id}")),
        "{text}"
    );
}
