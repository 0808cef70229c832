//! `reg-avalanche` end to end through the real binaries (the real
//! `sip-gate`, SIPp callers, the benchmark's stand-ins and generator), in
//! its smoke size so the benchmark cannot rot: the gate's REGISTER
//! capacity is set under the avalanche's rate, so part of it is refused
//! with 503 and Retry-After (R-OV-1 for REGISTER) and comes back after it;
//! every REGISTER ends answered (none lost silently), every subscriber
//! ends registered, no established call fails, and the tables and CSV
//! carry every figure. It asserts outcomes, not speed.
//!
//! Run after `cargo build --bins` (the workspace's `cargo test` builds
//! `sip-gate` next to `reg-avalanche`).

use crate::common::{num, rows, run_bench, BenchRun};

const BIN: &str = env!("CARGO_BIN_EXE_reg-avalanche");

#[test]
fn r_ov_1_a_smoke_avalanche_loses_no_register_and_fails_no_established_call() {
    let out = tempfile::tempdir().unwrap();
    let BenchRun { stderr, table, csv } = run_bench(
        BIN,
        &[
            "--subscribers",
            "1000",
            "--sources",
            "50",
            "--seconds",
            "3",
            "--rate",
            "20",
            "--normal-sources",
            "2",
            "--hold-ms",
            "200",
            // Under the avalanche's 333/s: a part is refused and retried.
            "--register-capacity",
            "250",
            "--txn-timeout-s",
            "8",
        ],
        out.path(),
    );
    for needle in [
        "| unloaded | 1 | ",
        "| avalanche | 1 | ",
        "| 1000 subscribers each run | 1 |",
        "In-dialog p99 avalanche / unloaded (medians; issue 29's target: at most 2x): ",
    ] {
        assert!(
            table.contains(needle),
            "{needle:?} missing in\n{table}\n{stderr}"
        );
    }
    let rows = rows(&csv);
    assert_eq!(rows.len(), 2, "{csv}");
    for r in &rows {
        // Every call placed was set up or refused 503 with Retry-After (on
        // a busy machine the intake deadline may refuse one), and every
        // call set up ended with its BYE answered.
        assert_eq!(num(r, "calls_up") + num(r, "calls_refused"), 60.0, "{csv}");
        assert_eq!(r["calls_up"], r["calls_ended"], "{csv}\n{stderr}");
        assert_eq!(num(r, "sipp_failed"), 0.0, "{csv}\n{stderr}");
        assert_eq!(
            num(r, "in_dialog_samples"),
            2.0 * num(r, "calls_up"),
            "{csv}"
        );
        assert!(
            num(r, "cpu_us") > 0.0 && num(r, "peak_rss_kb") > 0.0,
            "{csv}"
        );
    }
    let phase = |p: &str| rows.iter().find(|r| r["phase"] == p).unwrap();
    let u = phase("unloaded");
    assert_eq!(num(u, "reg_sent"), 0.0, "{csv}");
    assert_eq!(u["refused_by_limit"], "none", "{csv}");
    let a = phase("avalanche");
    // None lost silently: every transaction sent has its outcome.
    let (sent, ok, refused) = (num(a, "reg_sent"), num(a, "reg_ok"), num(a, "reg_503"));
    assert_eq!(
        sent,
        ok + refused + num(a, "reg_other") + num(a, "reg_lost"),
        "{csv}"
    );
    assert_eq!(num(a, "reg_lost"), 0.0, "{csv}\n{stderr}");
    assert_eq!(num(a, "reg_other"), 0.0, "{csv}");
    // Refused with Retry-After, retried after it: every subscriber ends
    // registered (one 200 each, each of which reached a registrar) or
    // refused after its last retry, and most are registered.
    assert!(
        refused > 0.0,
        "the capacity under the rate refused none\n{csv}"
    );
    assert_eq!(ok + num(a, "reg_gave_up"), 1000.0, "{csv}");
    assert!(ok >= 900.0, "{csv}");
    assert!(num(a, "reg_reached") >= ok, "{csv}");
    // The gate counted its refusals under the REGISTER capacity, not the
    // calls' capacity.
    assert!(a["refused_by_limit"].contains("registrations "), "{csv}");
    assert!(!a["refused_by_limit"].contains("capacity"), "{csv}");
}
