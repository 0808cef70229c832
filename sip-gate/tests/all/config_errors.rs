//! Every configuration and start-up error names its place, through the
//! real binary: a socket address that does not parse and a misspelt
//! service name are refused by `--check` with the file, line and field; an
//! address this host does not have is a `--check` warning naming the
//! listener; a listener that cannot bind stops the gate with an error
//! naming the listener, the transport and the address. The `ringsync` CLI
//! loads the same file and refuses it the same way.
//!
//! Addresses: the gate's own on 127.0.47.x (one x per test), its sg instances on
//! 127.0.48.x; 203.0.113.77 (TEST-NET-3) stands for an address this host
//! does not have.

use std::process::{Command, Output};
use std::time::Duration;

use testbed::bins::Node;

/// A run of the `sip-gate` binary.
fn gate_cmd() -> Command {
    testbed::bins::command("sip-gate").unwrap()
}

/// An address no interface of the test host has (checked by the tests that
/// rely on it, so a host that has it fails loudly instead of passing).
const FOREIGN: &str = "203.0.113.77";

/// The example site moved to the test's addresses (the gate's on
/// `127.0.47.{gate}`, so tests that start it run side by side), with `edit`
/// applied to its text; `edit` must change it.
fn site(
    dir: &tempfile::TempDir,
    gate: u8,
    edit: impl Fn(&str) -> String,
) -> (std::path::PathBuf, String) {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml");
    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("127.0.0.1:", &format!("127.0.47.{gate}:"))
        .replace("127.0.1.", "127.0.48.");
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed nothing");
    let path = dir.path().join("site.toml");
    std::fs::write(&path, &edited).unwrap();
    (path, edited)
}

fn check(path: &std::path::Path) -> Output {
    gate_cmd()
        .arg("--config")
        .arg(path)
        .arg("--check")
        .output()
        .unwrap()
}

/// The 1-based line of `text` that is `line`.
fn line_of(text: &str, line: &str) -> usize {
    text.lines()
        .position(|l| l == line)
        .expect("the line is in the file")
        + 1
}

#[test]
fn check_names_the_field_of_a_socket_address_that_does_not_parse() {
    let dir = tempfile::tempdir().unwrap();
    let (path, text) = site(&dir, 1, |t| {
        t.replace("bind = \"127.0.47.1:5070\"", "bind = \"localhost:5070\"")
    });
    let out = check(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = line_of(&text, "bind = \"localhost:5070\"");
    assert!(err.contains(&format!("site.toml:{line}:")), "{err}");
    assert!(err.contains("field `listener[1].bind`"), "{err}");
    assert!(err.contains("invalid socket address"), "{err}");
    assert!(err.contains("host names are not resolved"), "{err}");
}

#[test]
fn check_refuses_an_undeclared_service_with_the_nearest_name() {
    let dir = tempfile::tempdir().unwrap();
    // sg-c (the third instance) misspelt: nothing else refers to it.
    let (path, text) = site(&dir, 2, |t| {
        t.replacen(
            "service = \"sg\"\nserver = \"srv-c\"",
            "service = \"sgg\"\nserver = \"srv-c\"",
            1,
        )
    });
    let out = check(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = line_of(&text, "service = \"sgg\"");
    assert!(err.contains(&format!("site.toml:{line}:")), "{err}");
    assert!(err.contains("field `instance[2].service`"), "{err}");
    assert!(
        err.contains("unknown service \"sgg\" (did you mean \"sg\"?)"),
        "{err}"
    );
}

#[test]
fn check_warns_for_a_listener_address_this_host_does_not_have() {
    let host = ringsync::config::host_addresses().unwrap();
    assert!(
        !host.contains(&FOREIGN.parse().unwrap()),
        "this host has {FOREIGN}: pick another address for the test"
    );
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = site(&dir, 3, |t| {
        t.replace(
            "bind = \"127.0.47.3:5070\"",
            &format!("bind = \"{FOREIGN}:5070\""),
        )
    });
    let out = check(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning:"), "{err}");
    assert!(err.contains("field `listener[1].bind`"), "{err}");
    assert!(err.contains("listener \"providers\""), "{err}");
    assert!(err.contains(&format!("{FOREIGN}:5070")), "{err}");
    // One warning: the loopback addresses of the other listeners are local.
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 warning"), "{stdout}");
}

/// Starts the gate on `path`; it must exit within a few seconds, as a gate
/// that cannot bind does. Its stderr.
fn start_expecting_exit(path: &std::path::Path) -> (std::process::ExitStatus, String) {
    let mut gate = Node::gate(path).start().unwrap();
    let status = gate
        .wait_exit(Duration::from_secs(20))
        .expect("the gate kept running with a listener it cannot bind");
    (status, gate.log())
}

#[test]
fn a_listener_on_an_address_in_use_names_the_listener_and_the_address() {
    // Held without SO_REUSEPORT, so the gate's UDP bind is refused.
    let taken = std::net::UdpSocket::bind("127.0.47.14:5070").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = site(&dir, 4, |t| {
        t.replace("bind = \"127.0.47.4:5070\"", "bind = \"127.0.47.14:5070\"")
    });
    let (status, err) = start_expecting_exit(&path);
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("listener \"providers\": cannot bind udp 127.0.47.14:5070:"),
        "{err}"
    );
    assert!(
        err.to_lowercase().contains("address already in use"),
        "{err}"
    );
    drop(taken);
}

#[test]
fn a_listener_on_an_address_this_host_does_not_have_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = site(&dir, 5, |t| {
        t.replace(
            "bind = \"127.0.47.5:5070\"",
            &format!("bind = \"{FOREIGN}:5070\""),
        )
    });
    let (status, err) = start_expecting_exit(&path);
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "listener \"providers\": cannot bind udp {FOREIGN}:5070:"
        )),
        "{err}"
    );
    assert!(err.contains("Cannot assign requested address"), "{err}");
}

/// The operator CLI loads the site file the same way: a misspelt service
/// and an address that does not parse fail with the file, line and field,
/// and nothing is done.
#[test]
fn ringsync_refuses_a_bad_site_file_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // (what the file says, what it says instead, what the error must say)
    let cases = [
        (
            "service = \"sg\"\nserver = \"srv-c\"",
            "service = \"sgg\"\nserver = \"srv-c\"",
            "field `instance[2].service`: unknown service \"sgg\" (did you mean \"sg\"?)",
        ),
        (
            "sip = \"127.0.48.2:5060\"",
            "sip = \"sg-b:5060\"",
            "field `instance[1].sip`: invalid socket address syntax",
        ),
    ];
    for (from, to, says) in cases {
        let (path, text) = site(&dir, 6, |t| t.replacen(from, to, 1));
        let bad_line = to.lines().next().unwrap();
        let out = testbed::bins::command("ringsync")
            .unwrap()
            .arg("--config")
            .arg(&path)
            .args(["profile", "list"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        let line = line_of(&text, bad_line);
        assert!(err.contains(&format!("site.toml:{line}:")), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!dir.path().join("msk-1.profiles.json").exists());
    }
}

/// R-HT-1: a pool whose backups lead back to it is refused by `--check`
/// and by the `ringsync` CLI, with the line, the field and the cycle.
#[test]
fn check_refuses_a_backup_cycle_naming_the_pools() {
    let dir = tempfile::tempdir().unwrap();
    // sg-c in a pool of its own; each pool the other's backup.
    let (path, text) = site(&dir, 7, |t| {
        let t = t.replacen(
            "service = \"sg\"\nserver = \"srv-c\"",
            "service = \"sg\"\nserver = \"srv-c\"\npool = \"sg-dr\"",
            1,
        );
        format!(
            "{t}\n[[pool]]\nname = \"sg\"\nthreshold = 1\nbackup = \"sg-dr\"\n\n\
             [[pool]]\nname = \"sg-dr\"\nthreshold = 1\nbackup = \"sg\"\n"
        )
    });
    let out = check(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = line_of(&text, "backup = \"sg-dr\"");
    assert!(err.contains(&format!("site.toml:{line}:")), "{err}");
    assert!(err.contains("field `pool[0].backup`"), "{err}");
    assert!(err.contains("backup cycle: sg -> sg-dr -> sg"), "{err}");
    let out = testbed::bins::command("ringsync")
        .unwrap()
        .arg("--config")
        .arg(&path)
        .arg("status")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("backup cycle: sg -> sg-dr -> sg"), "{err}");
}
