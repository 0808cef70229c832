//! What the operator reads is true, through the `ringsync` binary: an
//! instance nobody can report on reads `unknown` and a `status` that names it
//! exits 3 (R-ST-4); every write to the store leaves its audit record, the
//! one `migrate` makes included (R-PR-4); profile names are what the API
//! says, and a change that changes nothing says so and keeps the revision.

use std::process::{Command, Output};

use crate::common::served::{instance, row};
use crate::common::TestSite;
use ringsync::view::Health;
use ringsync::work::{NodeKind, WorkCounts};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ringsync");

/// `ringsync --config SITE ARGS...`, run off the async runtime (stand-in
/// nodes live on it).
async fn ringsync_async(site: &TestSite, args: &[&str]) -> Output {
    let path = site.site_path();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::common::served::at(&path, &args)
    })
    .await
    .unwrap()
}

fn ok(o: &Output) -> String {
    crate::common::served::ok(o)
}

fn idle() -> WorkCounts {
    WorkCounts::default()
}

/// R-ST-4 through the binary: with the gate and media-ctl not answering,
/// no instance reads `up`: each is `unknown`, in the JSON, the table and
/// `serve`'s metrics. Named, an unknown instance makes `status` exit 3 (the
/// output printed all the same); a known one exits 0; the whole site, asked
/// without names, exits 0 and shows the states.
#[tokio::test]
async fn r_st_4_unknown_health_is_unknown_not_up_and_status_naming_it_exits_3() {
    let site = TestSite::new();
    let closed = crate::common::closed_port().to_string();
    let media = crate::common::closed_port().to_string();
    let base = [
        "status",
        "--gate",
        closed.as_str(),
        "--media",
        media.as_str(),
    ];
    let o = ringsync_async(&site, &[&["--json"], &base[..]].concat()).await;
    let v: Value = serde_json::from_str(&ok(&o)).unwrap();
    for id in ["sg-a", "sg-b", "sg-c", "bgmg-a", "mg-a"] {
        let i = instance(&v, id);
        assert_eq!(
            (i["health"].as_str(), i["state"].as_str()),
            (Some("unknown"), Some("unknown")),
            "R-ST-4: {v}"
        );
    }
    let o = ringsync_async(&site, &[&base[..], &["sg-b", "mg-a"]].concat()).await;
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let table = String::from_utf8(o.stdout).unwrap();
    assert_eq!(row(&table, "sg-b")[4], "unknown", "{table}");
    assert!(
        !table.contains("sg-a "),
        "only the instances named: {table}"
    );
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("state unknown") && err.contains("sg-b, mg-a"),
        "{err}"
    );

    // The gate answers for the sgs (sg-b probed up): named, sg-b exits 0.
    let (gate, _) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[("sg-b", crate::common::holds(Health::Up, idle()))],
    ))
    .await;
    let g = gate.to_string();
    let args = ["--json", "status", "--gate", &g, "--media", &media, "sg-b"];
    let v: Value = serde_json::from_str(&ok(&ringsync_async(&site, &args).await)).unwrap();
    assert_eq!(instance(&v, "sg-b")["state"], "up", "{v}");
    assert_eq!(v["instances"].as_array().unwrap().len(), 1, "{v}");
    let o = ringsync_async(&site, &["status", "--gate", &g, "nope"]).await;
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no instance `nope` in site `t1`"));

    // serve's metrics: the state gauge has an `unknown` label.
    let served = tokio::task::spawn_blocking(move || {
        let s =
            crate::common::served::Served::start(&site, &["--gate", &closed, "--media", &media]);
        let metrics = crate::common::served::call(s.addr, "GET", "/metrics", None, "").1;
        (s, site, metrics)
    })
    .await
    .unwrap();
    let metrics = served.2;
    assert!(
        metrics.contains(
            "ringsync_instance_state{instance=\"sg-a\",service=\"sg\",server=\"srv-a\",state=\"unknown\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "ringsync_instance_state{instance=\"sg-a\",service=\"sg\",server=\"srv-a\",state=\"up\"} 0"
        ),
        "{metrics}"
    );
}

/// The audit records of the site, oldest first, as `ringsync --json audit`
/// prints them.
async fn audit(site: &TestSite) -> Vec<Value> {
    let v: Value =
        serde_json::from_str(&ok(&ringsync_async(site, &["--json", "audit"]).await)).unwrap();
    v["records"].as_array().unwrap().clone()
}

/// R-PR-4: the audit's "who" of a change made on the store itself is the OS
/// user the process runs as, whatever `$USER` and `$LOGNAME` say.
#[tokio::test]
async fn r_pr_4_the_local_audit_identity_is_the_os_user_not_the_environment() {
    let site = TestSite::new();
    let path = site.site_path();
    let o = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .arg("--config")
            .arg(path)
            .args(["profile", "create", "--name", "m", "--server", "srv-a"])
            .env("USER", "mallory")
            .env("LOGNAME", "mallory")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    ok(&o);
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .unwrap()
        .map_or(format!("uid{uid}"), |u| u.name);
    let records = audit(&site).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["who"], format!("local:{name}"), "{records:?}");
    assert_eq!(records[0]["from"], "local");
}
