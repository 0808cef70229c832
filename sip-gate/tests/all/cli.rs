//! The binary's edges: `--check` validates a site file and names the file,
//! line and field of what is wrong; the example site starts and stops
//! cleanly on SIGTERM; a gate that says ready shows its drain view in its
//! metrics; `--log-format json` writes one JSON object a line,
//! with the transaction span's fields.

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use ringsync::work::NodeKind;
use serde_json::Value;
use testbed::bins::{BinDir, Node};
use testbed::http::Request;

/// A run of the `sip-gate` binary.
fn gate_cmd() -> Command {
    testbed::bins::command("sip-gate").unwrap()
}

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml")
}

#[test]
fn check_accepts_the_example_site() {
    let out = testbed::bins::check("sip-gate", &example());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(": ok ("), "{stdout}");
}

/// Without `--config` the gate reads `SIP_GATE_CONFIG`, and `--config`
/// overrides it (issue 38; the default is /etc/sip-gate/site.toml).
#[test]
fn sip_gate_config_names_the_site_without_the_flag_and_the_flag_wins() {
    let out = gate_cmd()
        .env("SIP_GATE_CONFIG", example())
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("site.toml: ok ("),
        "{out:?}"
    );
    let out = gate_cmd()
        .env("SIP_GATE_CONFIG", example())
        .args(["--config", "/nonexistent/flag.toml", "--check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/flag.toml"));
    // The man page's signals section is --help's (issue 38).
    let help = gate_cmd().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("SIGHUP") && help.contains("sip-gate.toml(5)"),
        "{help}"
    );
}

#[test]
fn check_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(example()).unwrap().replace(
        "server = \"srv-b\"\nsip = \"127.0.1.2:5060\"",
        "server = \"srv-x\"\nsip = \"127.0.1.2:5060\"",
    );
    let line = text
        .lines()
        .position(|l| l == "server = \"srv-x\"")
        .unwrap()
        + 1;
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = testbed::bins::check("sip-gate", &path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("bad.toml:{line}:")), "{err}");
    assert!(err.contains("instance[1].server"), "{err}");
    assert!(err.contains("srv-x"), "{err}");

    // A syntax error, and a file that is not there.
    std::fs::write(&path, "[site]\nname = \"x\"\n[[listener]]\nbind = 5\n").unwrap();
    let out = testbed::bins::check("sip-gate", &path);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad.toml:4:"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = gate_cmd()
        .arg("--config")
        .arg(dir.path().join("nope.toml"))
        .arg("--check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.toml"));
}

/// The main job: the gate on the example site (its own copy, on 127.0.9.x
/// so it does not collide with anything else) serves /metrics and stops on
/// SIGTERM within its deadline.
#[test]
fn example_site_runs_and_stops_on_sigterm() {
    let (_dir, _site, mut gate) = example_gate("127.0.9.1", "127.0.9.");
    let metrics = gate
        .wait_for("/metrics to answer 200", Duration::from_secs(10), |g| {
            g.get("/metrics").ok().filter(|r| r.status == 200)
        })
        .unwrap();
    // Health probes of the (absent) instances have run through the core by now or soon;
    // the endpoint answers in Prometheus text either way.
    let typ = metrics.header("content-type").unwrap_or_default();
    assert!(typ.contains("text/plain"), "{metrics:?}");
    // The admin port is read-only (R-PR-1): no method that could change
    // state is routed, so it needs no tokens.
    for path in ["/metrics", "/v1/work", "/healthz", "/readyz"] {
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            let answer = Request::new(method, gate.admin(), path).send().unwrap();
            assert_eq!(answer.status, 405, "{method} {path}: {answer:?}");
        }
    }
    gate.signal("TERM");
    let status = gate
        .wait_exit(Duration::from_secs(15))
        .expect("gate did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
    // Every listener of the example site was bound and announced.
    let log = gate.log();
    for name in ["subscribers", "providers", "inside", "sg-a-guard"] {
        assert!(
            log.contains(&format!("listener={name}")),
            "{name} missing in:\n{log}"
        );
    }
}

/// The example site, moved to its own addresses (`gate_ip` for the
/// listeners and admin, `sg_prefix` for the sg), started as the real binary.
fn example_gate(gate_ip: &str, sg_prefix: &str) -> (tempfile::TempDir, std::path::PathBuf, Node) {
    example_gate_with(gate_ip, sg_prefix, &[], None)
}

/// [`example_gate`] with extra arguments and a `RUST_LOG` filter.
fn example_gate_with(
    gate_ip: &str,
    sg_prefix: &str,
    args: &[&str],
    rust_log: Option<&str>,
) -> (tempfile::TempDir, std::path::PathBuf, Node) {
    let (dir, site) = example_site(gate_ip, sg_prefix);
    // The example's own admin address (`admin.gate_bind`), moved.
    let admin: SocketAddr = format!("{gate_ip}:9091").parse().unwrap();
    let mut gate = Node::gate(&site).admin(admin).args(args);
    if let Some(filter) = rust_log {
        gate = gate.env("RUST_LOG", filter);
    }
    let gate = gate.start().unwrap();
    (dir, site, gate)
}

/// The example site file, moved to its own addresses, in a new directory.
fn example_site(gate_ip: &str, sg_prefix: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(example())
        .unwrap()
        .replace("127.0.0.1:", &format!("{gate_ip}:"))
        .replace("127.0.1.", sg_prefix);
    let site = dir.path().join("site.toml");
    std::fs::write(&site, text).unwrap();
    (dir, site)
}

/// Creates the profile `maint-a` (draining srv-a) in the store of `site`,
/// described as `description`, and activates it, as `ringsync profile
/// activate` does: the runtime the store runs on, the store and the profile.
fn activate_maint_a(
    site: &std::path::Path,
    description: &str,
) -> (
    tokio::runtime::Runtime,
    std::sync::Arc<dyn ringsync::store::Store>,
    ringsync::profile::Profile,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = ringsync::SiteConfig::load(site).unwrap();
    let store = rt.block_on(ringsync::store::open(&config)).unwrap();
    let p = rt
        .block_on(store.create(ringsync::profile::NewProfile {
            name: "maint-a".into(),
            description: description.into(),
            servers: vec!["srv-a".into()],
            state: ringsync::profile::ProfileState::Inactive,
        }))
        .unwrap();
    rt.block_on(store.set_state(&p.id, ringsync::profile::ProfileState::Active))
        .unwrap();
    (rt, store, p)
}

/// R-MN-2, R-AA-1: a gate that starts with a profile already active says
/// ready on `/readyz` only once its `/metrics` show the drain: whoever
/// trusts its readiness (a rehearsal's verdicts, a dashboard) never reads
/// the instance states of the empty view it started with (every instance
/// `up`), which its sweeper used to publish up to a second after it said
/// ready.
#[test]
fn r_mn_2_a_gate_that_says_ready_shows_its_drain_view_in_its_metrics() {
    let (_dir, site) = example_site("127.0.9.5", "127.0.13.");
    let (_rt, store, _p) = activate_maint_a(&site, "active before the gate starts");
    drop(store);
    let admin: SocketAddr = "127.0.9.5:9091".parse().unwrap();
    let mut gate = Node::gate(&site).admin(admin).start().unwrap();
    let start = Instant::now();
    // Read as soon as it says ready: the moment the sweeper is furthest.
    while !testbed::http::get(admin, "/readyz").is_ok_and(|r| r.status == 200) {
        assert!(start.elapsed() < Duration::from_secs(10), "never ready");
        std::thread::sleep(Duration::from_millis(2));
    }
    let metrics = testbed::http::get_ok(admin, "/metrics").unwrap_or_default();
    gate.stop(Duration::from_secs(10));
    let on = |instance: &str| -> Vec<String> {
        let head = format!("sipgate_instance_state{{instance=\"{instance}\",state=\"");
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(head.as_str()))
            .filter_map(|l| l.strip_suffix("\"} 1"))
            .map(str::to_owned)
            .collect()
    };
    let a = on("sg-a");
    assert!(
        a.len() == 1 && a[0].starts_with("drain"),
        "sg-a: {a:?}\n{metrics}"
    );
    assert_eq!(on("sg-b"), ["up"], "{metrics}");
}

/// R-PR-2 through the real binary: a running gate applies a profile that an
/// operator activates in the store (as `ringsync profile activate` does),
/// within a second and without a restart, and lifts it the same way. The
/// gate's work report names the profile revision its drain view is built
/// from.
#[test]
fn r_pr_2_running_gate_applies_a_profile_change_within_a_second() {
    let (_dir, site, mut gate) = example_gate("127.0.9.2", "127.0.10.");
    let wait_for = |want: u64| -> Duration {
        let start = Instant::now();
        gate.wait_for(
            &format!("the gate to reach profile revision {want}"),
            Duration::from_secs(5),
            |g| g.work().filter(|r| r.revision == want),
        )
        .unwrap();
        start.elapsed()
    };
    wait_for(0);

    let (rt, store, p) = activate_maint_a(&site, "test");
    let revision = || rt.block_on(store.list()).unwrap().revision;
    let applied = wait_for(revision());
    rt.block_on(store.set_state(&p.id, ringsync::profile::ProfileState::Inactive))
        .unwrap();
    let lifted = wait_for(revision());
    eprintln!("drain applied after {applied:?}, lifted after {lifted:?}");
    // The store polls every 200 ms; one second is the rule.
    assert!(applied < Duration::from_secs(1), "{applied:?}");
    assert!(lifted < Duration::from_secs(1), "{lifted:?}");
    gate.stop(Duration::from_secs(10));
}

/// R-ST-1, R-ST-3 end to end: the real `ringsync status --json` asks the
/// real gate for its work report: the sg instances are there, nothing
/// counted, but the gate has just started, so their work is unknown, with
/// the reason and when it will be known (the example site's `[work]` lives
/// are a minute); the mg, which only media-ctl counts, stays unknown with
/// the reason (nothing listens at `admin.media_bind`).
#[test]
fn r_st_3_ringsync_status_reads_the_gates_work_report() {
    // Built first: the gate's one-minute window must not pass meanwhile.
    BinDir::locate().program("ringsync").unwrap();
    let (_dir, site, mut gate) = example_gate("127.0.9.3", "127.0.11.");
    let admin = "127.0.9.3:9091";
    let report = gate
        .wait_for("/v1/work", Duration::from_secs(10), Node::work)
        .unwrap();
    assert_eq!((report.kind, report.node.as_str()), (NodeKind::Gate, admin));
    assert_eq!(report.site, "msk-1");
    // A gate reports only the SIP instances it routes to.
    let ids: Vec<&str> = report.instances.keys().map(String::as_str).collect();
    assert_eq!(ids, ["esg-a", "esg-b", "sg-a", "sg-b", "sg-c"]);

    let v = crate::common::ringsync(&site, &["status"]);
    let inst = |id: &str| -> Value {
        v["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} missing in {v}"))
    };
    let started = report.started_ms;
    for id in ["sg-a", "sg-b", "sg-c"] {
        let sg = inst(id);
        assert!(sg["work"].is_null(), "{sg}");
        assert_eq!(sg["counts"]["dialogs"], 0, "{sg}");
        assert_eq!(sg["nodes"], serde_json::json!([admin]), "{sg}");
        let why = sg["unknown"][0].as_str().unwrap();
        assert!(
            why.starts_with(&format!("gate {admin}: gate started at ")),
            "{why}"
        );
        let known_at = sg["known_at_ms"].as_u64().unwrap();
        assert!(known_at.abs_diff(started + 60_000) < 2_000, "{sg}");
    }
    let mg = inst("mg-a");
    assert!(mg["work"].is_null(), "{mg}");
    let why = mg["unknown"][0].as_str().unwrap();
    assert!(
        why.starts_with("media_ctl 127.0.9.3:9092: cannot connect:"),
        "{why}"
    );
    assert_eq!(v["nodes"][0]["node"], admin);
    gate.stop(Duration::from_secs(10));
}

/// `--log-format json`: every log line is a JSON object; at debug level a
/// request's lines carry the `txn` span with its Call-ID, branch and the
/// instance it went to.
#[test]
fn json_logs_with_the_transaction_span() {
    let (_dir, _site, mut gate) = example_gate_with(
        "127.0.9.4",
        "127.0.12.",
        // The OPTIONS below stays a transaction for 32 s (to an sg that is
        // not there): the stop need not wait for it.
        &["--log-format", "json", "--drain-deadline-s", "1"],
        Some("sip_gate=debug"),
    );
    gate.wait_up().unwrap();
    let ua = std::net::UdpSocket::bind("127.0.9.51:0").unwrap();
    let port = ua.local_addr().unwrap().port();
    let options = format!(
        "OPTIONS sip:bob@example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP 127.0.9.51:{port};branch=z9hG4bKjsonlog\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:alice@example.com>;tag=a1\r\n\
         To: <sip:bob@example.com>\r\n\
         Call-ID: json-log-1@ua\r\n\
         CSeq: 1 OPTIONS\r\n\
         Content-Length: 0\r\n\r\n"
    );
    ua.send_to(options.as_bytes(), "127.0.9.4:5060").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    gate.stop(Duration::from_secs(10));
    let log = gate.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|v| v["fields"]["message"] == "listening"),
        "{log}"
    );
    let forwarded = lines
        .iter()
        .find(|v| v["fields"]["message"] == "forwarded")
        .unwrap_or_else(|| panic!("no forwarded line in:\n{log}"));
    let span = &forwarded["span"];
    assert_eq!(span["name"], "txn", "{forwarded}");
    assert_eq!(span["call_id"], "json-log-1@ua", "{forwarded}");
    assert_eq!(span["branch"], "z9hG4bKjsonlog", "{forwarded}");
    assert!(
        span["instance"]
            .as_str()
            .is_some_and(|i| i.starts_with("sg-")),
        "{forwarded}"
    );
}
