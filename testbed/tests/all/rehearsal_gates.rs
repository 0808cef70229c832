//! `testbed run` through the real binary with the gate-lifecycle and crash
//! steps: a gate restarted mid-call on a two-gate site loses no
//! established call (R-GW-2) and stops as R-GW-1 says (`/readyz` fails
//! first, then it exits by itself); a gate sent SIGTERM does the same; an
//! sg killed under load stops taking calls and the others take them; a
//! REGISTER load registers, refreshes and removes its bindings.
//!
//! Run through `netns-run`, after `cargo build --bins`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_testbed");

fn run(dir: &Path, text: &str) -> (Option<i32>, Value, String) {
    let file = dir.join("scenario.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("out");
    let o = Command::new(BIN)
        .args(["run", file.to_str().unwrap(), "--quiet", "--json", "--out"])
        .arg(&out)
        .output()
        .expect("testbed runs");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let report = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("--json prints the report ({e}): {stderr}"));
    (o.status.code(), report, stderr)
}

fn verdict<'a>(report: &'a Value, rule: &str) -> &'a Value {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["rule"] == rule)
        .unwrap_or_else(|| panic!("no verdict for {rule}: {}", report["verdicts"]))
}

#[test]
fn r_gw_2_a_gate_restarted_mid_call_loses_no_established_call() {
    let dir = tempfile::tempdir().unwrap();
    let (code, report, stderr) = run(
        dir.path(),
        r#"
name = "gate-restart"
rules = ["R-GW-1", "R-GW-2"]
[site]
sg = 2
mg = 1
gates = 2
net = "127.94.4"
# Calls through gate-1 until 5 s, held 6 s: up through it when it
# restarts; meanwhile and after, calls through gate-0.
[[step]]
at_s = 0
do = "load"
rate = 10
duration_s = 5
hold_s = 6
gate = 1
[[step]]
at_s = 0
do = "load"
rate = 10
duration_s = 14
hold_s = 2
gate = 0
[[step]]
at_s = 6
do = "restart_gate"
gate = 1
"#,
    );
    let (gw1, gw2) = (verdict(&report, "R-GW-1"), verdict(&report, "R-GW-2"));
    assert_eq!(code, Some(0), "{gw1}\n{gw2}\n{}\n{stderr}", report["calls"]);
    assert_eq!(gw2["pass"], true, "{gw2}");
    assert_eq!(gw1["pass"], true, "{gw1}");
    // 50 calls through gate-1, 140 through gate-0, none refused: gate-1
    // took no new call once stopping and none came.
    let calls = &report["calls"];
    assert_eq!(calls["established"], 190, "{calls}");
    assert_eq!(calls["established_failed"], 0, "{calls}");
    let stop = &report["gate_stops"][0];
    assert_eq!(stop["gate"], 1, "{stop}");
    assert_eq!(stop["restart"], true, "{stop}");
    // It lived while its calls' re-INVITEs and BYEs went through it, so
    // its /readyz was seen failing before it exited.
    let (nr, ex, back) = (
        stop["not_ready"].as_f64().unwrap(),
        stop["exited"].as_f64().unwrap(),
        stop["back"].as_f64().unwrap(),
    );
    assert!(nr <= ex && ex < back, "{stop}");
    // Calls were up at the restart: the dialogs the gates counted.
    let samples = report["samples"].as_array().unwrap();
    let up_at_restart = samples
        .iter()
        .filter(|s| (5.0..6.5).contains(&s["t"].as_f64().unwrap()))
        .map(|s| s["calls_up"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        up_at_restart > 20,
        "calls up at the restart: {up_at_restart}"
    );
}

#[test]
fn r_gw_1_a_gate_sent_sigterm_fails_readyz_then_exits_and_a_killed_sg_is_routed_around() {
    let dir = tempfile::tempdir().unwrap();
    let (code, report, stderr) = run(
        dir.path(),
        r#"
name = "sigterm-and-kill"
rules = ["R-GW-1"]
[site]
sg = 2
mg = 1
gates = 2
net = "127.94.5"
[[step]]
at_s = 0
do = "load"
rate = 20
duration_s = 10
hold_s = 1
gate = 0
[[step]]
at_s = 0
do = "load"
rate = 5
duration_s = 4
hold_s = 3
gate = 1
[[step]]
at_s = 2
do = "sigterm_gate"
gate = 1
[[step]]
at_s = 4
do = "kill_instance"
instance = "sg-b"
"#,
    );
    let gw1 = verdict(&report, "R-GW-1");
    assert_eq!(code, Some(0), "{gw1}\n{stderr}");
    assert_eq!(gw1["pass"], true, "{gw1}");
    let stop = &report["gate_stops"][0];
    assert_eq!(stop["restart"], false, "{stop}");
    assert!(stop["exited"].as_f64().unwrap() < 23.0, "{stop}");
    // Its calls kept it alive past the SIGTERM: /readyz seen failing, and
    // the new calls sent to it between 2 s and 4 s refused with 503.
    assert!(stop["not_ready"].as_f64().is_some(), "{stop}");
    assert!(
        report["calls"]["refused"].as_u64().unwrap() >= 5,
        "{}",
        report["calls"]
    );
    // The steps ran; gate-1 is gone for good, gate-0 carries on.
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s.get("error").is_none()), "{steps:?}");
    let last = report["samples"].as_array().unwrap().last().unwrap();
    assert_eq!(last["gates_up"], 1, "{last}");
    // After the kill the gate's health probes mark sg-b down (two missed
    // probes, 500 ms apart) and sg-a takes the new calls.
    let phases = report["phases"].as_array().unwrap();
    let after = phases.last().unwrap();
    assert!(after["label"].as_str().unwrap().contains("sg-b"), "{after}");
    let (a, b) = (
        after["new_work"]["sg-a"].as_u64().unwrap(),
        after["new_work"]["sg-b"].as_u64().unwrap_or(0),
    );
    assert!(a > 60 && b < a / 2, "sg-a {a}, sg-b {b}: {after}");
    // The calls sg-b held when it died did not end normally: a crash is
    // counted, not hidden.
    assert!(
        report["calls"]["established_failed"].as_u64().unwrap() > 0,
        "{}",
        report["calls"]
    );
}

#[test]
fn a_register_load_registers_refreshes_and_removes_every_binding_through_a_drain() {
    let dir = tempfile::tempdir().unwrap();
    let (code, report, stderr) = run(
        dir.path(),
        r#"
name = "register-drain"
rules = ["R-AA-1"]
[site]
sg = 2
mg = 1
net = "127.94.6"
[[step]]
at_s = 0
do = "load"
kind = "register"
rate = 20
duration_s = 10
hold_s = 2
[[step]]
at_s = 3
do = "activate"
profile = "maint-a"
servers = ["srv-a"]
"#,
    );
    let r = &report["registrations"];
    assert_eq!(code, Some(0), "{r}\n{}\n{stderr}", report["verdicts"]);
    // 20/s for 10 s: every binding registered, refreshed and removed by
    // the same instance, through the drain of the other (R-AA-1: new
    // registrations go to sg-b once the gate shows sg-a draining).
    assert_eq!(r["attempted"], 200, "{r}");
    assert_eq!(r["registered"], 200, "{r}");
    assert_eq!(r["removed"], 200, "{r}");
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(report["calls"]["attempted"], 0, "{}", report["calls"]);
    assert_eq!(verdict(&report, "R-AA-1")["pass"], true);
}

#[test]
fn subscribe_and_options_loads_go_through_a_drain() {
    let dir = tempfile::tempdir().unwrap();
    let (code, report, stderr) = run(
        dir.path(),
        r#"
name = "subscribe-options-drain"
rules = ["R-AA-1"]
[site]
sg = 2
mg = 1
net = "127.94.7"
[[step]]
at_s = 0
do = "load"
kind = "subscribe"
rate = 10
duration_s = 10
hold_s = 2
[[step]]
at_s = 0
do = "load"
kind = "options"
rate = 10
duration_s = 10
hold_s = 0
[[step]]
at_s = 3
do = "activate"
profile = "maint-a"
servers = ["srv-a"]
"#,
    );
    let (s, o) = (&report["subscriptions"], &report["options"]);
    assert_eq!(code, Some(0), "{s}\n{o}\n{}\n{stderr}", report["verdicts"]);
    // Every subscription set up (200 and NOTIFY), refreshed and removed
    // by the same instance through the drain of the other; new ones go to
    // sg-b once the gate shows sg-a draining (R-AA-1).
    assert_eq!(s["attempted"], 100, "{s}");
    assert_eq!(s["ok"], 100, "{s}");
    assert_eq!(s["ended"], 100, "{s}");
    assert_eq!(s["failed"], 0, "{s}");
    // Every OPTIONS answered 200 by an sg behind the gate.
    assert_eq!(o["attempted"], 100, "{o}");
    assert_eq!(o["ok"], 100, "{o}");
    assert_eq!(o["refused"], 0, "{o}");
    assert_eq!(report["calls"]["attempted"], 0, "{}", report["calls"]);
    assert_eq!(verdict(&report, "R-AA-1")["pass"], true);
}

/// The failover caller knows every gate of a four-gate site: with gates 0,
/// 1 and 2 sent SIGTERM (503 while they stop, silence once they exited),
/// the calls that start on gate 0 reach gate 3, the fourth in their list;
/// none is refused by every gate.
#[test]
fn r_gw_1_the_failover_caller_reaches_the_fourth_gate() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        r#"
name = "four-gates"
rules = ["R-SG-4"]
[site]
sg = 2
mg = 1
gates = 4
gate_deadline_s = 2
net = "127.94.9"
[[step]]
at_s = 0
do = "load"
rate = 8
duration_s = 8
hold_s = 1
"#,
    );
    for g in 0..3 {
        text.push_str(&format!(
            "[[step]]\nat_s = 2\ndo = \"sigterm_gate\"\ngate = {g}\n"
        ));
    }
    let (code, report, stderr) = run(dir.path(), &text);
    let c = &report["calls"];
    assert_eq!(code, Some(0), "{c}\n{}\n{stderr}", report["verdicts"]);
    assert_eq!(c["refused"], 0, "{c}");
    assert_eq!(c["established_failed"], 0, "{c}");
    // After the SIGTERMs only gate-3 serves: every call started then
    // (6 s of them, a quarter of them first sent to each gate) was
    // established, many after failing over three times.
    assert!(c["established"].as_u64().unwrap() >= 60, "{c}");
    let failovers = report["samples"].as_array().unwrap().last().unwrap()["failovers"]
        .as_u64()
        .unwrap();
    assert!(failovers >= 3 * 10, "{failovers} {c}");
    let phases = report["phases"].as_array().unwrap();
    let after = phases.last().unwrap();
    assert!(after["established"].as_u64().unwrap() > 30, "{after}");
}
