//! `flood-bench` end to end through the real binaries (the real `sip-gate`,
//! SIPp callers and servers), briefly and at low rates so the benchmark
//! cannot rot: both phases run, the flood is refused by the limits it was
//! sized to exceed (R-OV-1, R-OV-2), no established call fails, and the
//! table and CSV carry every figure. It asserts structure and outcomes,
//! not speed.
//!
//! Run through `netns-run`, after `cargo build --bins` (the workspace's
//! `cargo test` builds `sip-gate` next to `flood-bench`).

use crate::common::{num, rows, run_bench, BenchRun};

const BIN: &str = env!("CARGO_BIN_EXE_flood-bench");

#[test]
fn r_ov_1_a_short_flood_bench_measures_both_phases_with_no_established_call_failed() {
    let out = tempfile::tempdir().unwrap();
    let BenchRun { stderr, table, csv } = run_bench(
        BIN,
        &[
            "--rounds",
            "1",
            "--seconds",
            "3",
            "--rate",
            "20",
            "--normal-sources",
            "2",
            "--hold-ms",
            "200",
            "--flood-rate",
            "200",
            "--flood-sources",
            "2",
            "--capacity",
            "60",
            "--per-source",
            "30",
            // At the callers' priority: this test checks outcomes, and a
            // niced generator beside other tests could be starved of CPU.
            "--flood-nice",
            "0",
        ],
        out.path(),
    );
    for needle in [
        "| phase | runs | established calls (of them flood) | failed established (of them flood) |",
        "| unloaded | 1 | 60 (0) | 0 (0) |",
        "| flood | 1 |",
        "Under flood / unloaded (medians; issue 12's target: at most 2x): CPU per established call ",
    ] {
        assert!(table.contains(needle), "{needle:?} missing in\n{table}\n{stderr}");
    }

    for phase in ["unloaded", "flood"] {
        let prom = std::fs::read_to_string(out.path().join(format!("metrics-1-{phase}.prom")))
            .unwrap_or_else(|e| panic!("{phase}'s gate metrics: {e}"));
        assert!(prom.contains("sipgate_udp_intake_wait_total{"), "{prom}");
    }

    let rows = rows(&csv);
    assert_eq!(rows.len(), 2, "{csv}");
    for r in &rows {
        // No established call failed: each got its re-INVITE and BYE answered.
        assert_eq!(r["normal_up"], r["normal_ended"], "{csv}\n{stderr}");
        assert_eq!(r["flood_up"], r["flood_ended"], "{csv}\n{stderr}");
        assert_eq!(num(r, "sipp_failed"), 0.0, "{csv}\n{stderr}");
        // Two in-dialog samples (re-INVITE, BYE) per normal call.
        assert_eq!(
            num(r, "in_dialog_samples"),
            2.0 * num(r, "normal_up"),
            "{csv}"
        );
        assert!(
            num(r, "cpu_us") > 0.0 && num(r, "peak_rss_kb") > 0.0,
            "{csv}"
        );
        assert!(
            num(r, "in_dialog_p99_us") >= num(r, "in_dialog_p50_us"),
            "{csv}"
        );
        // The gate counted its in-dialog requests' wait in its queues.
        assert!(num(r, "queue_wait_p99_ms") > 0.0, "{csv}");
    }
    let phase = |p: &str| rows.iter().find(|r| r["phase"] == p).unwrap();
    // Unloaded: the normal load is within every limit, nothing is refused.
    let u = phase("unloaded");
    assert_eq!(
        (
            num(u, "normal_up"),
            num(u, "normal_refused"),
            num(u, "flood_up")
        ),
        (60.0, 0.0, 0.0),
        "{csv}"
    );
    assert_eq!(u["refused_by_limit"], "none", "{csv}");
    // Flood: 600 new calls from two sources at 100/s each, over the
    // per-source limit of 30/s: most refused with 503 (the scenario fails
    // a 503 without Retry-After), the per-source limit counted.
    let f = phase("flood");
    let flood_calls = num(f, "flood_up") + num(f, "flood_refused");
    assert_eq!(flood_calls, 600.0, "{csv}");
    assert!(num(f, "flood_refused") >= 300.0, "{csv}");
    assert!(f["refused_by_limit"].contains("source "), "{csv}");
    assert!(num(f, "normal_up") > 0.0, "{csv}");
    // The flood's rate at the gate: 600 calls over 3 s and the time SIPp
    // takes to end (slower when the machine is busy, never faster).
    let reached = num(f, "flood_per_s");
    assert!((50.0..=220.0).contains(&reached), "{csv}");
    assert_eq!(num(u, "flood_per_s"), 0.0, "{csv}");
    assert!(table.contains("The flood reached the gate at "), "{table}");
}
