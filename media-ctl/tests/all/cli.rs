//! The binary's edges: `--check` names the file, line and field of a bad
//! `[media]` setting; `status` without a running media-ctl says so.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_media-ctl");

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml")
}

#[test]
fn check_accepts_the_example_site() {
    let out = testbed::bins::check("media-ctl", &example());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 mg/bgmg instances"));
}

/// The site file defaults as the gate's does (issue 38): `SIP_GATE_CONFIG`,
/// else /etc/sip-gate/site.toml; `--config` wins; `--help` lists the signals.
#[test]
fn config_defaults_to_the_packaged_site_and_sip_gate_config() {
    let out = Command::new(BIN)
        .env("SIP_GATE_CONFIG", example())
        .arg("--check")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = Command::new(BIN)
        .env("SIP_GATE_CONFIG", example())
        .args(["--config", "/nonexistent/flag.toml", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/flag.toml"));
    if !std::path::Path::new("/etc/sip-gate/site.toml").exists() {
        let out = Command::new(BIN)
            .env_remove("SIP_GATE_CONFIG")
            .arg("--check")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("/etc/sip-gate/site.toml"),
            "{out:?}"
        );
    }
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Signals:") && help.contains("SIGTERM"),
        "{help}"
    );
}

#[test]
fn check_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(example())
        .unwrap()
        .replace("ping_failures = 3", "ping_failures = 0");
    std::fs::write(&path, &text).unwrap();
    let out = testbed::bins::check("media-ctl", &path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = text
        .lines()
        .position(|l| l.starts_with("ping_failures = 0"))
        .unwrap()
        + 1;
    assert!(err.contains(&format!("bad.toml:{line}:")), "{err}");
    assert!(err.contains("media.ping_failures"), "{err}");

    let text = std::fs::read_to_string(example()).unwrap().replace(
        "sip = \"127.0.1.2:5060\"",
        "sip = \"127.0.1.2:5060\"\nng_source = \"127.0.1.1\"",
    );
    std::fs::write(&path, &text).unwrap();
    let out = testbed::bins::check("media-ctl", &path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("instance[1].ng_source") && err.contains("srv-a"),
        "{err}"
    );
}

#[test]
fn status_without_a_running_media_ctl_is_a_clear_error() {
    let out = Command::new(BIN)
        .arg("--config")
        .arg(example())
        .args(["--admin", "127.0.0.1:9", "status"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is media-ctl running?") && err.contains("127.0.0.1:9"),
        "{err}"
    );
}
