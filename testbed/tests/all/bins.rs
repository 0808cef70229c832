//! The launcher of the project's own binaries ([`testbed::bins::Node`])
//! through the real `sip-gate`, `media-ctl` and `ringsync serve`: started
//! from testbed's tests, whose package builds none of them, so this also
//! proves `BinDir` builds another package's binary first. On 127.0.81.x.

use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::bins::Node;
use testbed::fixture::SiteFile;

/// sg-a and mg-a on srv-a, `ringsync serve` on any port of 127.0.81.1.
fn site_text() -> String {
    SiteFile::daemons("bins", [127, 0, 81], 0).text().to_owned()
}

fn site(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("site.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_gate_starts_serves_its_admin_endpoint_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), &site_text());
    let mut gate = Node::gate(&site)
        .admin("127.0.81.1:9091".parse().unwrap())
        .args(["--node", "g1", "--drain-deadline-s", "5"])
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    let m = gate.metrics().unwrap();
    assert_eq!(
        m.value("sipgate_phase{phase=\"serving\"}"),
        Some(1.0),
        "{}",
        m.text()
    );
    let work = gate.work().expect("a work report");
    assert_eq!(work.node, "g1");
    assert!(work.instances.contains_key("sg-a"), "{work:?}");
    assert_eq!(gate.get("/no-such-path").unwrap().status, 404);
    let status = gate.stop(Duration::from_secs(10)).expect("it ran");
    assert!(status.success(), "{status:?}\n{}", gate.log());
    assert!(!gate.running());
}

#[test]
fn serve_says_where_it_listens_and_media_ctl_answers_until_killed() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), &site_text());
    let mut serve = Node::serve(&site).start().unwrap();
    assert_ne!(serve.admin().port(), 0, "the port it was given, not 0");
    assert_eq!(serve.url(), format!("http://{}", serve.admin()));
    serve.wait_ready().unwrap();
    let mut media = Node::media_ctl(&site)
        .admin("127.0.81.1:9092".parse().unwrap())
        .start()
        .unwrap();
    media.wait_up().unwrap();
    let st: media_ctl::Status = media.get_json("/v1/status").expect("a status");
    assert_eq!(st.instances.len(), 1, "{st:?}");
    assert!(media.kill().is_some());
    assert!(media.get("/healthz").is_err(), "killed, nothing answers");
    media.restart().unwrap();
    media.wait_up().unwrap();
    assert!(dir.path().join("media-ctl.run1.stderr").is_file());
}

#[test]
fn a_binary_that_exits_at_start_is_an_error_with_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path(), &site_text().replace("[health]", "[healthh]"));
    let mut gate = Node::gate(&site)
        .admin("127.0.81.2:9091".parse().unwrap())
        .start()
        .unwrap();
    let e = gate.wait_ready().unwrap_err().to_string();
    assert!(e.contains("sip-gate exited early"), "{e}");
    assert!(e.contains("healthh"), "{e}");
}
