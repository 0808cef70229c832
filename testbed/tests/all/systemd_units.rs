//! The systemd units of `deploy/systemd/` checked by systemd itself:
//! `systemd-analyze verify` on a copy whose `/usr/bin/` points at the
//! debug binaries (verify checks that ExecStart exists and is executable),
//! `systemd-analyze security --offline=yes` with its exposure score, and
//! what the units promise: `Type=notify`, a stop timeout above the gate's
//! drain deadline, the flags of ExecStart accepted by the binaries
//! (`--check` with the same arguments). The packages install these files
//! as they are (`scripts/package.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use testbed::bins::BinDir;

const UNITS: [&str; 4] = [
    "sip-gate.service",
    "media-ctl.service",
    "ringsync-serve.service",
    "ringsync-agent@.service",
];

/// The highest exposure a unit may have (0 best, 10 worst; systemd calls
/// up to 2.0 "OK"). Measured 1.5 for each when this test was written.
const MAX_EXPOSURE: f64 = 2.0;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/systemd")
}

/// Each unit, copied into `dir` with `/usr/bin/` replaced by `bins`'s
/// directory; the template also as the instance `ringsync-agent@bill-a`.
fn copies(dir: &Path, bins: &BinDir) -> Vec<PathBuf> {
    let bin_dir = format!("{}/", bins.dir().display());
    let mut out = Vec::new();
    for unit in UNITS {
        let text = std::fs::read_to_string(deploy().join(unit)).unwrap();
        let text = text.replace("/usr/bin/", &bin_dir);
        let p = dir.join(unit);
        std::fs::write(&p, &text).unwrap();
        out.push(p);
        if unit.ends_with("@.service") {
            let p = dir.join(unit.replace('@', "@bill-a"));
            std::fs::write(&p, &text).unwrap();
            out.push(p);
        }
    }
    out
}

fn analyze(args: &[&str], unit: &Path) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .arg(unit)
        .output()
        .expect("systemd-analyze (Debian `systemd`) runs")
}

/// The value of `key=` in a unit's text (the first).
fn directive<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn systemd_analyze_verify_passes_on_every_unit() {
    let dir = tempfile::tempdir().unwrap();
    let bins = BinDir::locate();
    for b in ["sip-gate", "media-ctl", "ringsync"] {
        bins.program(b).unwrap();
    }
    for unit in copies(dir.path(), &bins) {
        // The man pages come with the packages, not with a debug build.
        let out = analyze(&["verify", "--man=no"], &unit);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "{}: {stderr}",
            unit.display()
        );
    }
}

#[test]
fn a_unit_that_names_a_missing_binary_fails_verify() {
    // The check above can fail: verify looks for ExecStart.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("sip-gate.service");
    std::fs::copy(deploy().join("sip-gate.service"), &unit).unwrap();
    let text = std::fs::read_to_string(&unit).unwrap();
    std::fs::write(&unit, text.replace("/usr/bin/", "/nonexistent/")).unwrap();
    let out = analyze(&["verify", "--man=no"], &unit);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/sip-gate"));
}

#[test]
fn every_unit_is_hardened_to_an_ok_exposure_score() {
    let mut scores = Vec::new();
    for unit in UNITS {
        let out = analyze(&["security", "--offline=yes"], &deploy().join(unit));
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("Overall exposure level"))
            .unwrap_or_else(|| panic!("{unit}: no score in {text}"));
        let score: f64 = line
            .split(':')
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{unit}: {line}"));
        scores.push(format!("{unit} {score}"));
        assert!(score <= MAX_EXPOSURE, "{unit}: {line}");
    }
    println!(
        "systemd-analyze security --offline=yes: {}",
        scores.join(", ")
    );
}

#[test]
fn units_notify_and_wait_longer_than_the_drain_deadline() {
    for unit in UNITS {
        let text = std::fs::read_to_string(deploy().join(unit)).unwrap();
        assert_eq!(directive(&text, "Type"), Some("notify"), "{unit}");
        assert_eq!(directive(&text, "Restart"), Some("on-failure"), "{unit}");
        assert_eq!(directive(&text, "NoNewPrivileges"), Some("yes"), "{unit}");
        assert_eq!(directive(&text, "ProtectSystem"), Some("strict"), "{unit}");
        let stop: u64 = directive(&text, "TimeoutStopSec")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{unit}: TimeoutStopSec in seconds"));
        let exec = exec_start(&text);
        if let Some(i) = exec.iter().position(|a| a == "--drain-deadline-s") {
            let deadline: u64 = exec[i + 1].parse().unwrap();
            // R-GW-1: the supervisor must not kill a gate mid-drain.
            assert!(
                stop >= deadline + 10,
                "{unit}: TimeoutStopSec={stop} too close to --drain-deadline-s {deadline}"
            );
        }
    }
}

/// ExecStart's words, continuation lines joined.
fn exec_start(text: &str) -> Vec<String> {
    let joined = text.replace("\\\n", " ");
    let line = joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_data_plane_binaries_accept_their_units_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml");
    std::fs::copy(example, &site).unwrap();
    let bins = BinDir::locate();
    for unit in ["sip-gate.service", "media-ctl.service"] {
        let text = std::fs::read_to_string(deploy().join(unit)).unwrap();
        let exec = exec_start(&text);
        let program = bins
            .program(Path::new(&exec[0]).file_name().unwrap().to_str().unwrap())
            .unwrap();
        let args: Vec<String> = exec[1..]
            .iter()
            .map(|a| {
                a.replace("/etc/sip-gate/site.toml", site.to_str().unwrap())
                    .replace("%H", "host")
            })
            .collect();
        let out = Command::new(program)
            .args(&args)
            .arg("--check")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{unit}: {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
