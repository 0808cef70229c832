//! Every configuration and start-up error names its place, through the
//! real binary: a socket address that does not parse and a misspelt
//! service name are refused by `--check` with the file, line and field; an
//! address this host does not have is a `--check` warning naming the
//! listener; a listener that cannot bind stops the gate with an error
//! naming the listener, the transport and the address.
//!
//! Addresses: the gate's own on 127.0.47.x (one x per test), its sg instances on
//! 127.0.48.x; 203.0.113.77 (TEST-NET-3) stands for an address this host
//! does not have.

mod bins;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bins::GATE;

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
    Command::new(GATE)
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
    let mut child = Command::new(GATE)
        .arg("--config")
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gate kept running with a listener it cannot bind");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err)
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
