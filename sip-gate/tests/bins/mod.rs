//! The real binaries of this build, for the tests that drive them: the gate,
//! the `ringsync` CLI, and the gate's admin endpoint.
#![allow(dead_code)] // not every test file uses every helper

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use ringsync::work::WorkReport;

/// The `sip-gate` binary.
pub const GATE: &str = env!("CARGO_BIN_EXE_sip-gate");

/// The body-and-head text of `GET path` on `addr` (HTTP/1.0), `None` when
/// nothing answers.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    http_send(addr, "GET", path)
}

/// `method path` with an empty body: the whole answer.
pub fn http_send(addr: &str, method: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let head = format!("{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    Some(b)
}

/// The gate's work report, as it serves it at `/v1/work`.
pub fn work_report(admin: &str) -> Option<WorkReport> {
    let body = http_get(admin, "/v1/work")?;
    serde_json::from_str(body.split("\r\n\r\n").nth(1)?).ok()
}

/// The `ringsync` binary of this build. Cargo builds a package's binaries
/// only for that package's own tests, so this builds it (a no-op when it
/// is fresh) into the target directory this test runs from.
pub fn ringsync_bin() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/<test>-<hash>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
        let mut build = Command::new(env!("CARGO"));
        build.args([
            "build",
            "--quiet",
            "--offline",
            "-p",
            "ringsync-ops",
            "--bin",
            "ringsync",
        ]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build
            .env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
            .status()
            .unwrap();
        assert!(status.success(), "building ringsync: {status:?}");
        profile_dir.join("ringsync")
    })
    .clone()
}
