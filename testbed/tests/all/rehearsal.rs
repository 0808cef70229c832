//! `testbed run` end to end through the real binary: it builds a site of the
//! real `sip-gate`, `media-ctl`, `ringsync`, rtpengines and SIPp, plays a
//! short drain (R-AA-1, R-AA-3, R-SG-4, R-MG-1) and writes a report whose
//! verdicts and counts are read back here; a verdict that fails makes the
//! exit status non-zero; a missing binary is a clear error.
//!
//! Run through `netns-run`, after `cargo build --bins` (the workspace's
//! `cargo test` builds them).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_testbed");

fn testbed(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("testbed runs")
}

fn scenario(dir: &Path, text: &str) -> String {
    let p = dir.join("scenario.toml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn verdict<'a>(report: &'a Value, rule: &str) -> &'a Value {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["rule"] == rule)
        .unwrap_or_else(|| panic!("no verdict for {rule}: {report}"))
}

#[test]
fn a_short_sg_drain_passes_every_verdict_with_counts_that_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(
        dir.path(),
        r#"
name = "short-sg-drain"
rules = ["R-SG-4", "R-AA-1", "R-AA-3", "R-MG-1"]
[site]
sg = 2
mg = 2
mg_drain_window_s = 3
net = "127.94.1"
[[step]]
at_s = 0
do = "load"
rate = 20
duration_s = 20
hold_s = 2
[[step]]
at_s = 4
do = "activate"
profile = "maint-a"
servers = ["srv-a"]
[[step]]
at_s = 13
do = "deactivate"
profile = "maint-a"
"#,
    );
    let out = dir.path().join("out");
    let o = testbed(&[
        "run",
        &file,
        "--quiet",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}\n{stderr}", o.status);
    let report: Value = serde_json::from_slice(&o.stdout).expect("--json prints the report");

    for rule in ["R-SG-4", "R-AA-1", "R-AA-3", "R-MG-1"] {
        assert_eq!(
            verdict(&report, rule)["pass"],
            true,
            "{}",
            verdict(&report, rule)
        );
    }
    // 20 calls/s for 20 s, none refused, every one up and ended.
    let calls = &report["calls"];
    assert_eq!(calls["attempted"], 400, "{calls}");
    assert_eq!(calls["established"], 400, "{calls}");
    assert_eq!(calls["finished"], 400, "{calls}");
    assert_eq!(calls["established_failed"], 0, "{calls}");
    // Beside every call an offer/answer/delete to media-ctl's ng port.
    let media = &calls["media"];
    for k in ["offered", "answered", "deleted"] {
        assert_eq!(media[k], 400, "{media}");
    }
    assert_eq!(media["failed"], 0, "{media}");
    assert!(verdict(&report, "R-SG-4")["detail"]
        .as_str()
        .unwrap()
        .contains("0 of 400 established calls failed"));

    // Phases: start, drain, return. In the drain sg-b takes the calls; sg-a
    // only those of the moment the gate takes to apply the change (the
    // verdict above judges from the sample in which the gate showed sg-a
    // draining: none); the new calls of all phases add up to the calls.
    let phases = report["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3, "{phases:?}");
    let drain = &phases[1];
    let (a, b) = (
        drain["new_work"]["sg-a"].as_u64().unwrap(),
        drain["new_work"]["sg-b"].as_u64().unwrap(),
    );
    assert!(a < b, "{drain}");
    // mg shares are media-ctl's placements: all of them add up to 1 in
    // each phase; mg-a, drained over 3 s from the activation, takes less
    // than mg-b in the drain and some again after it.
    for p in phases {
        let sum: f64 = p["mg_share"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!((sum - 1.0).abs() < 1e-6, "{p}");
    }
    let share = |p: &Value, mg: &str| p["mg_share"][mg].as_f64().unwrap_or(0.0);
    assert!(share(drain, "mg-a") < share(drain, "mg-b"), "{drain}");
    assert!(share(&phases[2], "mg-a") > 0.0, "{}", phases[2]);
    // Every drain sample in which the gate showed sg-a draining.
    let samples = report["samples"].as_array().unwrap();
    assert!(
        samples
            .iter()
            .any(|s| s["gates_draining"]["sg-a"] == 1 && s["mg_drain_zone"][0] == "srv-a"),
        "the samples show the gate and media-ctl applying the drain"
    );
    let new_total: u64 = phases
        .iter()
        .flat_map(|p| p["new_work"].as_object().unwrap().values())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(new_total, 400, "{phases:?}");
    assert!(phases[2]["new_work"]["sg-a"].as_u64().unwrap() > 0);

    // The Markdown report and the chart it embeds.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**PASS** R-AA-1: sg-a took 0 new calls"),
        "{md}"
    );
    assert!(
        md.contains("![new calls per instance and mg weights](chart.svg)"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("chart.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("sg-a"),
        "chart has the series"
    );
    assert!(std::fs::metadata(out.join("chart.png")).unwrap().len() > 1000);
}

#[test]
fn a_failed_verdict_is_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    // No load: R-SG-4 has nothing to judge and must fail, not pass.
    let file = scenario(
        dir.path(),
        "name = \"no-load\"\nrules = [\"R-SG-4\"]\nend_s = 1\n[site]\nsg = 1\nmg = 1\nnet = \"127.94.2\"\n",
    );
    let out = dir.path().join("out");
    // What an earlier run into the same directory left (its embedded
    // store, here unreadable) is not this run's: it starts from nothing.
    std::fs::create_dir_all(out.join("site")).unwrap();
    std::fs::write(out.join("site/profiles.json"), "not json").unwrap();
    let o = testbed(&["run", &file, "--quiet", "--out", out.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("**FAIL** R-SG-4: no call was established"),
        "{md}"
    );
}

#[test]
fn a_missing_binary_and_a_bad_scenario_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(
        dir.path(),
        "name = \"x\"\n[site]\nsg = 1\nnet = \"127.94.3\"\n",
    );
    // Its own --out: the default (`rehearsal-x/` in the working directory)
    // would leave the site files it wrote before failing in the source tree.
    let out = dir.path().join("out");
    let o = testbed(&[
        "run",
        &file,
        "--quiet",
        "--bin-dir",
        "/nonexistent",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("sip-gate not found in /nonexistent")
            || err.contains("not found in /nonexistent"),
        "{err}"
    );

    let file = scenario(
        dir.path(),
        "name = \"x\"\n[[step]]\nat_s = 1\ndo = \"deactivate\"\n",
    );
    let o = testbed(&["check", &file]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("scenario.toml") && err.contains("profile"),
        "{err}"
    );
}

#[test]
fn every_shipped_example_scenario_checks() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/rehearsal");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let o = testbed(&["check", p.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "{}: {}",
            p.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        n += 1;
    }
    // sg, esg, mg, bgmg, every instance, gate rolling restart, etcd outage.
    assert!(n >= 7, "{n} examples");
    let o = testbed(&["check", &format!("{dir}/sg-drain.toml")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("activate maint-a (srv-a)") && out.contains("deactivate maint-a"),
        "{out}"
    );
}
