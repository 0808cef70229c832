//! The testbed binaries' command lines: `--help` explains every flag, and
//! bad values are refused (exit 2) with the reason, before anything starts.

use std::process::{Command, Output};

const BENCH: &str = env!("CARGO_BIN_EXE_sip-bench");
const RELAY: &str = env!("CARGO_BIN_EXE_blind-relay");
const MG_BENCH: &str = env!("CARGO_BIN_EXE_mg-bench");

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().unwrap()
}

/// The help text, with every flag in `flags` followed by its explanation.
fn help(bin: &str, flags: &[(&str, &str)]) -> String {
    let out = run(bin, &["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for (flag, explained) in flags {
        let at = text
            .find(&format!("{flag} "))
            .unwrap_or_else(|| panic!("{flag} missing in\n{text}"));
        let after = &text[at..];
        let next_flag = after[2..].find("\n  -").map_or(after.len(), |i| i + 2);
        assert!(
            after[..next_flag].contains(explained),
            "{flag} is not explained with `{explained}` in\n{text}"
        );
    }
    text
}

fn refused(bin: &str, args: &[&str], why: &str) {
    let out = run(bin, args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "{args:?}: {err}");
}

#[test]
fn blind_relay_help_and_bad_arguments() {
    help(
        RELAY,
        &[
            ("--listen", "receive the clients' datagrams"),
            ("--upstream", "each call (by its"),
            ("--seconds", "print the datagram counters"),
        ],
    );
    refused(RELAY, &["--upstream", "127.0.0.1:5060"], "--listen");
    refused(RELAY, &["--listen", "127.0.0.1:5060"], "--upstream");
    refused(
        RELAY,
        &["--listen", "127.0.0.1", "--upstream", "127.0.0.1:5060"],
        "invalid value '127.0.0.1' for '--listen",
    );
}

#[test]
fn sip_bench_help_and_bounds() {
    let text = help(
        BENCH,
        &[
            ("--rates", "calls per second"),
            ("--seconds", "Seconds of load per run"),
            ("--rounds", "systems interleaved"),
            ("--systems", "sip-gate+drain"),
            ("--gate", "sip-gate binary"),
            ("--relay", "blind-relay binary"),
            ("--out", "runs.csv"),
        ],
    );
    assert!(text.contains("[default: 1000,2000]"), "{text}");
    assert!(text.contains("sip-gate-per-core"), "{text}");
    // Every load is bounded: the machine is shared.
    refused(BENCH, &["--rates", "1000,9000"], "9000 is not in 1..=5000");
    refused(BENCH, &["--seconds", "61"], "61 is not in 1..=60");
    refused(BENCH, &["--rounds", "0"], "0 is not in 1..");
    refused(
        BENCH,
        &["--systems", "relay,nginx"],
        "possible values: relay, kamailio",
    );
}

#[test]
fn mg_bench_help_and_bounds() {
    let text = help(
        MG_BENCH,
        &[
            ("--rate", "cycles per second"),
            ("--seconds", "Seconds of load per run"),
            ("--rounds", "paths interleaved"),
            ("--workers", "one command at a time"),
            ("--held", "resident memory"),
            ("--media-ctl", "media-ctl binary"),
            // The same-run before/after that measured (and retired)
            // media-ctl's batched I/O (issue 29).
            ("--before", "fourth path in every round"),
        ],
    );
    assert!(text.contains("[default: 2000]"), "{text}");
    assert!(!text.contains("--floor"), "internal flag shown: {text}");
    // Every load is bounded: the machine is shared.
    refused(MG_BENCH, &["--rate", "9000"], "9000 is not in 1..=5000");
    refused(MG_BENCH, &["--seconds", "0"], "0 is not in 1..=60");
    refused(
        MG_BENCH,
        &["--held", "2000000"],
        "2000000 is not in 0..=1000000",
    );
}

/// `testbed check` on a scenario naming an operator's site file prints the
/// mapping onto loopback; a site file ringsync refuses, or one that cannot
/// run on loopback, is refused (exit 2) naming the file and the field.
#[test]
fn check_prints_the_mapping_of_an_operators_site_and_refuses_what_cannot_run() {
    const TESTBED: &str = env!("CARGO_BIN_EXE_testbed");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/examples/rehearsal");
    let out = run(TESTBED, &["check", &format!("{examples}/own-site.toml")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("activate maint-srv2 (nyc-srv2)"), "{text}");
    assert!(
        text.contains("| instance sg-nyc-2 sip          | 10.20.1.12:5060  |"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let site = std::fs::read_to_string(format!("{examples}/sites/nyc-1.toml")).unwrap();
    let scenario = dir.path().join("s.toml");
    let refused = |site_text: &str, steps: &str, wanted: &[&str]| {
        std::fs::write(
            &scenario,
            format!("name = \"t\"\nsite = \"site.toml\"\n{steps}"),
        )
        .unwrap();
        std::fs::write(dir.path().join("site.toml"), site_text).unwrap();
        let out = run(TESTBED, &["check", scenario.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        for w in wanted {
            assert!(err.contains(w), "{w} in {err}");
        }
    };
    refused(
        &site.replace("server = \"nyc-srv3\"", "server = \"nyc-srv9\""),
        "",
        &["site.toml", "nyc-srv9"],
    );
    refused(
        &site.replace(
            "transports = [\"udp\"]\nmode = \"balance\"\npool = \"esg\"\nleg = \"inside\"",
            "transports = [\"tcp\"]\nmode = \"balance\"\npool = \"esg\"\nleg = \"inside\"",
        ),
        "[[step]]\nat_s = 0\ndo = \"load\"\nlistener = \"core\"\nrate = 1\nduration_s = 1\nhold_s = 1\n",
        &["listener `core` serves no udp"],
    );
}

#[test]
fn flood_bench_help_and_bounds() {
    const FLOOD: &str = env!("CARGO_BIN_EXE_flood-bench");
    let text = help(
        FLOOD,
        &[
            ("--rate", "normal load"),
            ("--normal-sources", "own address"),
            ("--hold-ms", "re-INVITE and BYE"),
            ("--flood-rate", "new calls per second"),
            ("--capacity", "new_dialogs_per_s"),
            ("--per-source", "per_source_rate"),
            ("--rounds", "interleaved"),
            ("--out", "runs.csv"),
        ],
    );
    assert!(text.contains("[default: 3000]"), "{text}");
    // Every load is bounded: the machine is shared.
    refused(FLOOD, &["--flood-rate", "9000"], "9000 is not in 1..=5000");
    refused(FLOOD, &["--seconds", "61"], "61 is not in 1..=60");
    // A load that would not measure what it claims is refused up front.
    refused(
        FLOOD,
        &["--flood-rate", "500"],
        "not a flood: each flood source must send more than --per-source 150",
    );
    refused(
        FLOOD,
        &["--rate", "600"],
        "each normal source sends 200/s, not under --per-source 150",
    );
}
