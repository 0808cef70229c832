//! Every scenario shipped in docs/examples/rehearsal/, run as it ships
//! through the real `testbed` binary (real sip-gate, media-ctl, ringsync,
//! rtpengines, SIPp, etcd): each must pass every verdict it names, and the
//! figures behind the verdicts are checked here too. Each plays ≤ 30 s,
//! but sg-drain.toml, the one docs/rehearsal.md charts, plays a minute.
//!
//! Run through `netns-run`, after `cargo build --bins`.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_testbed");

fn example(name: &str) -> String {
    format!(
        "{}/../docs/examples/rehearsal/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs a shipped scenario; its JSON report, after checking that it
/// passed (exit 0, every step ran, every verdict passed).
fn run(name: &str) -> Value {
    run_seen(name, true).0
}

/// [`run`], also returning what it wrote on stderr (with `quiet` off, the
/// progress line, one line a second) and its SVG chart.
fn run_seen(name: &str, quiet: bool) -> (Value, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args(["run", &example(name), "--json", "--out"])
        .arg(dir.path())
        .args(quiet.then_some("--quiet"))
        .output()
        .expect("testbed runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{name}: no JSON report ({e}): {stderr}"));
    let verdicts = &report["verdicts"];
    assert_eq!(
        o.status.code(),
        Some(0),
        "{name}: {verdicts:#}\n{}\n{}\n{stderr}",
        report["calls"],
        report["steps"]
    );
    for v in verdicts.as_array().unwrap() {
        assert_eq!(v["pass"], true, "{name}: {v}");
    }
    assert!(!verdicts.as_array().unwrap().is_empty());
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap_or_default();
    (report, stderr.into_owned(), svg)
}

fn detail<'a>(report: &'a Value, rule: &str) -> &'a str {
    report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["rule"] == rule)
        .and_then(|v| v["detail"].as_str())
        .unwrap_or_else(|| panic!("no verdict for {rule}"))
}

fn no_call_failed(report: &Value) {
    let c = &report["calls"];
    assert!(c["established"].as_u64().unwrap() > 100, "{c}");
    assert_eq!(c["established"], c["finished"], "{c}");
    assert_eq!(c["established_failed"], 0, "{c}");
    let m = &c["media"];
    assert_eq!(
        m["answered"], c["established"],
        "one ng call per SIP call: {m}"
    );
    assert_eq!(m["failed"], 0, "{m}");
}

#[test]
fn r_sg_4_sg_drain_under_load_and_return_as_shipped() {
    let r = run("sg-drain");
    no_call_failed(&r);
    let drained = detail(&r, "R-AA-1");
    assert!(drained.contains("sg-a took 0 new calls"), "{drained}");
    // Back in the pool after the lift: it takes new calls again.
    let back = detail(&r, "R-AA-3");
    let n: u64 = back
        .rsplit("sg-a ")
        .next()
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{back}"));
    assert!(n > 0, "{back}");
}

#[test]
fn r_esg_1_3_5_esg_provider_leg_drain_with_multi_and_single_instance_accounts() {
    let r = run("esg-drain");
    no_call_failed(&r);
    assert!(
        detail(&r, "R-ESG-1").contains("esg-a took 0 new calls"),
        "{}",
        detail(&r, "R-ESG-1")
    );
    // Every single-instance call on its home, some of them in the drain.
    let d = detail(&r, "R-ESG-5");
    let (home, total) = d.split_once(" of ").unwrap();
    assert!(total.starts_with(&format!("{home} calls")), "{d}");
    assert!(
        d.contains(" of them in the ") && !d.contains(", 0 of them"),
        "{d}"
    );
    assert!(detail(&r, "R-ESG-3").contains(" 0 refused"));
}

/// R-AA-1 on a drain whose esg keeps a single-instance account's new
/// calls (R-ESG-5 sends them home on purpose): the gate counts those by
/// reason (`sipgate_new_work_draining_total`), the verdict leaves them out
/// and says how many, and nothing else reached the draining esg.
#[test]
fn r_aa_1_leaves_out_the_single_instance_accounts_calls_r_esg_5_keeps_home() {
    let r = run("esg-drain");
    let d = detail(&r, "R-AA-1");
    assert!(d.starts_with("esg-a took 0 new calls in "), "{d}");
    let left: u64 = d
        .split_once("leaving out ")
        .and_then(|(_, t)| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{d}"));
    assert!(left > 0, "{d}");
    assert!(
        d.contains(&format!("(single-instance account, R-ESG-5 {left})")),
        "{d}"
    );
    // The samples carry the gate's count, by instance and reason.
    let last = r["samples"].as_array().unwrap().last().unwrap();
    let kept = last["on_purpose"]["esg-a"]["single_instance_account"]
        .as_u64()
        .unwrap_or(0);
    assert!(kept >= left, "{last}");
}

#[test]
fn r_mg_1_3_4_mg_drain_window_and_the_last_mg() {
    let r = run("mg-drain");
    no_call_failed(&r);
    // mg-a ramps out in its window (not kept as the last mg); later both
    // drain and media-ctl keeps placing calls.
    let d = detail(&r, "R-MG-1");
    assert!(d.contains("mg-a weight 0 after"), "{d}");
    assert!(d.contains("mg-b kept as the last mg up"), "{d}");
    assert!(detail(&r, "R-MG-4").contains("mg-a: "));
    assert!(detail(&r, "R-MG-3").contains("queued for drain"));
}

#[test]
fn r_bg_1_3_bgmg_with_its_local_sg_draining() {
    let r = run("bgmg-drain");
    no_call_failed(&r);
    // Every call's media went to a bgmg: the calls came from the sg's own
    // address (R-BG-1), so the mg took none.
    let phases = r["phases"].as_array().unwrap();
    let first = &phases[0]["mg_share"];
    let bg: f64 = ["bgmg-a", "bgmg-b"]
        .iter()
        .map(|k| first[k].as_f64().unwrap_or(0.0))
        .sum();
    assert!((bg - 1.0).abs() < 1e-6, "{first}");
    let d = detail(&r, "R-BG-3");
    assert!(
        d.contains("0 new calls in") && d.contains("reported stoppable"),
        "{d}"
    );
}

#[test]
fn r_aa_4_every_instance_draining_still_serves_new_calls() {
    let r = run("all-draining");
    no_call_failed(&r);
    assert_eq!(r["calls"]["refused"], 0);
    let d = detail(&r, "R-AA-4");
    assert!(d.contains("every sg draining"), "{d}");
}

#[test]
fn r_gw_2_rolling_restart_of_three_gates_under_load_with_failover_callers() {
    let (r, progress, svg) = run_seen("gate-rolling-restart", false);
    no_call_failed(&r);
    // Each of the three gates stopped, exited by itself and came back;
    // the calls they refused meanwhile went to another gate.
    let stops = r["gate_stops"].as_array().unwrap();
    assert_eq!(stops.len(), 3, "{stops:?}");
    for (k, s) in stops.iter().enumerate() {
        assert_eq!(s["gate"], k, "{s}");
        assert!(s["exited"].as_f64().unwrap() < 7.0, "{s}");
        assert!(s["back"].as_f64().is_some(), "{s}");
    }
    let c = &r["calls"];
    assert!(c["retried"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["refused"], 0, "{c}");
    // The failovers counted live (every INVITE sent to another gate) are
    // on the progress line and a series of the chart.
    let live = r["samples"].as_array().unwrap().last().unwrap()["failovers"]
        .as_u64()
        .unwrap();
    assert!(live >= c["retried"].as_u64().unwrap(), "{live} {c}");
    assert!(
        progress
            .lines()
            .any(|l| l.contains(&format!("| failover {live} |"))),
        "{progress}"
    );
    assert!(svg.contains("calls failed over to another gate"));
}

#[test]
fn r_mn_2_etcd_outage_under_load_is_fail_static() {
    let r = run("etcd-outage");
    no_call_failed(&r);
    let steps = r["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["label"] == "stop etcd 8 s"),
        "{steps:?}"
    );
    // The gates said stale during the outage, and fresh before and after.
    let samples = r["samples"].as_array().unwrap();
    let stale = |lo: f64, hi: f64| {
        samples
            .iter()
            .filter(|s| (lo..hi).contains(&s["t"].as_f64().unwrap()))
            .map(|s| s["gates_stale"].as_u64().unwrap())
            .max()
            .unwrap()
    };
    assert_eq!(stale(0.0, 4.5), 0);
    assert_eq!(stale(6.0, 12.5), 1);
    assert!(detail(&r, "R-MN-2").contains("every gate said stale: yes"));
}

#[test]
fn r_ap_2_active_passive_groups_hand_over_one_per_pace_and_go_home() {
    let (r, progress, svg) = run_seen("ap-pacing", false);
    no_call_failed(&r);
    // Three groups away from srv-a and back home: six leader changes the
    // agents confirmed, every group led from home at the end (R-AP-3).
    assert_eq!(r["handovers"], 6, "{}", detail(&r, "R-AP-2"));
    let last = r["samples"].as_array().unwrap().last().unwrap();
    // Counted live too: on the progress line and as the chart's triangles.
    assert_eq!(last["ap_handovers"], 6, "{last}");
    assert!(progress.contains("| AP handovers 6"), "{progress}");
    assert!(svg.contains("Active-Passive handover"));
    for g in 1..=3 {
        assert_eq!(
            last["ap_leader"][format!("ap-{g}")],
            format!("ap{g}-a"),
            "{last}"
        );
    }
    assert!(detail(&r, "R-AP-2").contains("(pace 3 s)"));
    // Away from srv-a, blocked while both servers drained, home after.
    assert!(detail(&r, "R-AP-1").contains("3 of 3 groups"));
    let d = detail(&r, "R-AP-4");
    assert!(d.contains("ap-1: kept ap1-b, reported blocked"), "{d}");
    let d = detail(&r, "R-AP-3");
    assert!(d.contains("ap-3: ap3-b → ap3-a after"), "{d}");
}

/// An operator's own site file (docs/examples/rehearsal/sites/nyc-1.toml,
/// production addresses): its names, listeners, accounts and store profile
/// drive the run; every address is mapped onto the run's loopback and the
/// mapping is in the report.
#[test]
fn own_site_file_drains_its_own_profile_under_its_own_names() {
    let r = run("own-site");
    no_call_failed(&r);
    let d = detail(&r, "R-AA-1");
    assert!(d.contains("sg-nyc-2, esg-nyc-2 took 0 new calls"), "{d}");
    assert!(detail(&r, "R-AA-3").contains("sg-nyc-2 "), "{r:#}");
    assert!(detail(&r, "R-ESG-1").contains("esg-nyc-2 took 0 new calls"));
    // Its home is on nyc-srv1, which does not drain: the detail says so.
    let d = detail(&r, "R-ESG-5");
    assert!(
        d.contains("went to its home esg-nyc-1, which did not drain in the run"),
        "{d}"
    );
    assert!(detail(&r, "R-MG-1").contains("mg-nyc-2 weight 0 after"));
    // The store's own profile, with its servers.
    assert_eq!(r["steps"][3]["label"], "activate maint-srv2 (nyc-srv2)");
    let map = &r["site_map"];
    assert!(map["file"].as_str().unwrap().ends_with("sites/nyc-1.toml"));
    let net = map["net"].as_str().unwrap().trim_end_matches("0/24");
    let row = |what: &str| {
        map["mapping"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["what"] == what)
            .unwrap_or_else(|| panic!("no {what} in {map:#}"))
            .clone()
    };
    let sg2 = row("instance sg-nyc-2 sip");
    assert_eq!(sg2["site"], "10.20.1.12:5060");
    assert_eq!(sg2["rehearsal"], format!("{net}21:5060"));
    assert_eq!(
        row("instance mg-nyc-3 ng")["rehearsal"],
        format!("{net}62:22222")
    );
    // Two listeners shared port 5060 on other addresses: moved to 5100.
    assert_eq!(row("listener carriers")["rehearsal"], "gate address:5100");
    assert_eq!(
        row("account carrier-y match.source")["rehearsal"],
        format!("{net}101/32")
    );
    // Every new call went to one of the operator's instances.
    let phases = r["phases"].as_array().unwrap();
    for p in phases {
        for k in p["new_work"].as_object().unwrap().keys() {
            assert!(k.contains("-nyc-"), "{k}");
        }
    }
}
