//! `Site::builder()` through the real binaries: a gate, media-ctl in front
//! of two rtpengines, two sg SIPp UAS, the embedded store; a drain through
//! the ringsync CLI reaches the gate and media-ctl (R-PR-2). Run through
//! `netns-run`; needs the workspace's binaries built (`cargo build --bins`).

use std::time::{Duration, Instant};

use testbed::site::{http, Site};

fn wait(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(15), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_site_starts_and_a_drain_reaches_the_gate_and_media_ctl() {
    let site = Site::builder()
        .sg(2)
        .mg(2)
        .net([127, 93, 1])
        .run()
        .expect("site starts");
    let gate = site.gates()[0].admin;
    let media = site.media_admin();
    wait("both mg up", || {
        http::get_json::<media_ctl::Status>(media, "/v1/status")
            .is_some_and(|s| s.instances.iter().all(|i| i.weight == 1.0))
    });
    site.activate("maint-a", &["srv-a"]).expect("activate");
    wait("gate sees sg-a draining", || {
        http::get(gate, "/metrics").is_some_and(|(_, m)| {
            m.lines().any(|l| {
                l.starts_with("sipgate_instance_state{")
                    && l.contains("instance=\"sg-a\"")
                    && l.contains("state=\"drain")
                    && l.ends_with(" 1")
            })
        })
    });
    wait("media-ctl sees srv-a drain", || {
        http::get_json::<media_ctl::Status>(media, "/v1/status")
            .is_some_and(|s| s.drain_zone == ["srv-a"])
    });
}

/// `Site::builder().site_file(...)`: an operator's site file (production
/// addresses) runs on loopback under its own names; the profile of its
/// store is there to activate by name.
#[test]
fn an_operators_site_file_runs_under_its_own_names() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/rehearsal/sites/nyc-1.toml"
    );
    let site = Site::builder()
        .site_file(file)
        .mg_drain_window_s(4)
        .net([127, 93, 2])
        .run()
        .expect("site starts");
    let l = site.layout();
    assert_eq!(
        l.gate_listener(0, "public"),
        Some("127.93.2.1:5060".parse().unwrap())
    );
    let written = std::fs::read_to_string(site.site_file()).unwrap();
    assert!(written.contains("sg-nyc-2") && !written.contains("10.20."));
    let gate = site.gates()[0].admin;
    site.activate("maint-srv2", &[])
        .expect("activate the store's profile");
    wait("gate sees sg-nyc-2 draining", || {
        http::get(gate, "/metrics").is_some_and(|(_, m)| {
            m.lines().any(|l| {
                l.contains("instance=\"sg-nyc-2\"")
                    && l.contains("state=\"drain")
                    && l.ends_with(" 1")
            })
        })
    });
}
