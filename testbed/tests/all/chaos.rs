//! `testbed chaos` through the real binary: a 60 s smoke run on
//! `127.95.3.0/24` in a network namespace of its own (`unshare -n`), seed
//! 1903: 30% of the gate-to-instance packets dropped for 2.3 s, the
//! callers' packets to gate-1 delayed 120 ms each way for 4.6 s (by the
//! relays in front of the gates), an Active-Passive agent killed and
//! started again, a gate upgraded, while calls, registrations,
//! subscriptions, three operators and a maintenance drain run. Every
//! invariant must pass against the far ends' logs, the report must list
//! the faults the seed drew (the loss injected, not skipped), and the same
//! seed must draw the same timeline again.
//!
//! After `cargo build --bins`; as root (`unshare -n`).

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_testbed");
const SEED: &str = "1903";

#[test]
fn a_minute_of_faults_keeps_every_promise_checked_from_the_far_ends() {
    let dir = tempfile::tempdir().unwrap();
    // Its own network namespace with only loopback up: the loss's
    // iptables rules go there, never into the host's.
    let o = Command::new("unshare")
        .args([
            "-n",
            "sh",
            "-c",
            "ip link set lo up && exec \"$0\" \"$@\"",
            BIN,
        ])
        .args([
            "chaos",
            "--seed",
            SEED,
            "--minutes",
            "1",
            "--net",
            "127.95.3",
        ])
        .args(["--quiet", "--json", "--out"])
        .arg(dir.path())
        .output()
        .expect("testbed runs");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("--json prints the report ({e}): {stderr}"));
    let invariants = report["invariants"].as_array().unwrap();
    assert_eq!(invariants.len(), 7, "{}", report["invariants"]);
    if let Some(v) = invariants.iter().find(|v| v["pass"] != true) {
        // The site's logs stay for whoever reads the counter-example.
        let kept = dir.keep();
        panic!("{v}\nthe run's logs: {}\n{stderr}", kept.display());
    }
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert_eq!(report["seed"], 1903);
    // The timeline was printed first, and every fault was injected.
    let plan = Command::new(BIN)
        .args(["chaos", "--seed", SEED, "--minutes", "1", "--plan"])
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&plan.stdout).into_owned();
    assert!(stderr.starts_with(&plan), "{plan}\n{stderr}");
    let faults = report["faults"].as_array().unwrap();
    assert_eq!(faults.len(), report["timeline"].as_array().unwrap().len());
    assert!(faults.len() >= 3, "{faults:?}");
    let kinds: Vec<&str> = faults
        .iter()
        .map(|f| f["fault"].as_str().unwrap())
        .collect();
    for k in ["lose_packets", "delay_gate", "kill_agent", "upgrade_gate"] {
        assert!(kinds.contains(&k), "{k} not injected: {kinds:?}");
    }
    assert!(
        faults
            .iter()
            .all(|f| f["error"].is_null() && f["skipped"].is_null()),
        "{faults:?}"
    );
    // The waits for the drains ran, and the agents' own logs were read.
    assert!(
        !report["waits"].as_array().unwrap().is_empty(),
        "{}",
        report["waits"]
    );
    assert!(
        !report["ap"].as_array().unwrap().is_empty(),
        "{}",
        report["ap"]
    );
    // The callers went through the relays in front of the gates.
    assert!(
        report["relayed"].as_u64().unwrap() > 1000,
        "{}",
        report["relayed"]
    );
    // The load ran and the far ends recorded it.
    let calls = &report["calls"];
    assert!(calls["established"].as_u64().unwrap() >= 300, "{calls}");
    assert!(
        report["held"].as_u64().unwrap() >= 400,
        "{}",
        report["held"]
    );
    // Registrations and subscriptions ran too (a scenario SIPp refuses to
    // load runs none).
    assert!(
        report["registrations"]["registered"].as_u64().unwrap() >= 50,
        "{}",
        report["registrations"]
    );
    assert!(
        report["subscriptions"]["ok"].as_u64().unwrap() >= 50,
        "{}",
        report["subscriptions"]
    );
    assert!(
        report["operator_changes"].as_array().unwrap().len() >= 20,
        "{}",
        report["operator_changes"]
    );
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("Replay: `testbed chaos --seed 1903"), "{md}");
}
