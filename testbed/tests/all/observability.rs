//! What ships for Prometheus and Grafana (`deploy/`), checked against the
//! real binaries and a real Prometheus: the rules pass `promtool check`
//! and their unit tests (`deploy/prometheus/alerts_test.yml`);
//! every metric name the dashboard and the rules use is in the `/metrics`
//! of a real `sip-gate`, `media-ctl` or `ringsync serve`; and a Prometheus
//! on loopback scraping a gate fires `SipEdgeStoreStale` when the gate's
//! etcd goes away (the gate itself stays ready: R-MN-2) and takes every
//! query of the dashboard.
//!
//! Addresses: 127.92.1.x (the three binaries), 127.92.2.x (gate, etcd on
//! `.11`, Prometheus on `.2`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use testbed::bins::Node;
use testbed::fixture::SiteFile;
use testbed::{wait_for, Etcd, Prometheus};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn alerts_file() -> PathBuf {
    repo()
        .join("deploy/prometheus/alerts.yml")
        .canonicalize()
        .unwrap()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_alert_rules_and_the_example_config_pass_promtool_and_its_unit_tests() {
    for args in [
        vec!["check", "rules", "deploy/prometheus/alerts.yml"],
        vec!["check", "config", "deploy/prometheus/prometheus.yml"],
        // Each alert fires on synthetic series it is about, and only there.
        vec!["test", "rules", "deploy/prometheus/alerts_test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(&args)
            .current_dir(repo())
            .output()
            .expect("promtool runs (Debian `prometheus`)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {args:?}: {text}");
        assert!(text.contains("SUCCESS"), "{text}");
    }
    // One runbook per alert, in the operations doc.
    let rules = read("deploy/prometheus/alerts.yml");
    let ops = read("docs/operations.md");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 7, "{alerts:?}");
    for a in alerts {
        let anchor = format!("docs/operations.md#{}", a.to_lowercase());
        assert!(rules.contains(&anchor), "{a}: runbook annotation {anchor}");
        assert!(
            ops.contains(&format!("### {a}\n")),
            "{a}: no runbook section in docs/operations.md"
        );
    }
}

/// The metric names (`sipgate_*`, `mediactl_*`, `ringsync_*`) in a text.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    for prefix in ["sipgate_", "mediactl_", "ringsync_"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix).map(|i| i + from) {
            let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
            let end = b[at..]
                .iter()
                .position(|&c| !word(c))
                .map_or(b.len(), |e| at + e);
            if at == 0 || !word(b[at - 1]) {
                out.insert(text[at..end].to_owned());
            }
            from = end;
        }
    }
    out
}

/// The metric names in a Prometheus text exposition.
fn names_exported(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// [`SiteFile::daemons`] on `net` with `ringsync serve` on `.1:8080`, a
/// billing pair (an `ap_group`) and a srv-b. Nothing listens at the capture
/// collector: the copies are dropped and counted, and the capture metrics
/// the dashboard reads are exported.
fn site_text(net: [u8; 3]) -> String {
    let [a, b, c] = net;
    SiteFile::daemons("obs", net, 8080)
        .section("capture", &format!("collectors = [\"udp:{a}.{b}.{c}.50:9060\"]"))
        .servers(&["srv-b"])
        .instance_with("bill-a", "billing", "srv-a", "")
        .instance_with("bill-b", "billing", "srv-b", "")
        .raw("[[ap_group]]\nname = \"billing\"\nmembers = [\"bill-a\", \"bill-b\"]\nhome = \"bill-a\"\n")
        .text()
        .to_owned()
}

#[test]
fn every_metric_the_dashboard_and_the_rules_use_is_exported_by_the_real_binaries() {
    let dashboard = read("deploy/grafana/sip-edge.json");
    let rules = read("deploy/prometheus/alerts.yml");
    // The dashboard is JSON Grafana can import, and every panel queries.
    let d: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    let panels = d["panels"].as_array().expect("panels");
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().map_or(0, Vec::len);
        assert!(targets > 0, "panel {} has no query", p["title"]);
    }
    let used: BTreeSet<String> = names_used(&dashboard)
        .into_iter()
        .chain(names_used(&rules))
        .collect();
    assert!(used.len() > 20, "{used:?}");

    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, site_text([127, 92, 1])).unwrap();
    let mut gate = Node::gate(&site)
        .admin("127.92.1.1:9091".parse().unwrap())
        .start()
        .unwrap();
    let mut media = Node::media_ctl(&site)
        .admin("127.92.1.1:9092".parse().unwrap())
        .start()
        .unwrap();
    let mut serve = Node::serve(&site)
        .admin("127.92.1.1:8080".parse().unwrap())
        .start()
        .unwrap();
    gate.wait_ready().unwrap();
    media.wait_up().unwrap();
    serve.wait_ready().unwrap();
    let mut exported = BTreeSet::new();
    for node in [&gate, &media, &serve] {
        let text = node.get("/metrics").expect("/metrics").body;
        exported.extend(names_exported(&text));
    }
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "used in deploy/ but exported by none of the binaries: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn a_real_prometheus_fires_store_stale_when_the_gates_etcd_goes_away() {
    let mut etcd = Etcd::single("127.92.2.11".parse().unwrap()).expect("etcd starts");
    let eps: Vec<String> = etcd.endpoints().iter().map(|e| format!("{e:?}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    let text = site_text([127, 92, 2]).replace(
        "kind = \"embedded\"\npath = \"profiles.json\"",
        &format!(
            "kind = \"etcd\"\nendpoints = [{}]\nprefix = \"/obs\"",
            eps.join(", ")
        ),
    );
    std::fs::write(&site, text).unwrap();
    let admin = "127.92.2.1:9091".parse().unwrap();
    let mut gate = Node::gate(&site).admin(admin).start().unwrap();
    gate.wait_ready().unwrap();
    let prometheus = Prometheus::new("127.92.2.2:9090".parse().unwrap())
        .rules(alerts_file())
        .job("sip-gate", &[admin])
        .start()
        .expect("prometheus starts");
    let stale = |p: &testbed::PrometheusHandle| {
        p.query_one("ringsync_store_stale{job=\"sip-gate\"}")
            .ok()
            .flatten()
    };
    let scraped = wait_for("the gate scraped", Duration::from_secs(20), || {
        stale(&prometheus)
    });
    let scraped = scraped.unwrap_or_else(|e| panic!("{e}: {}", prometheus.log_tail(2000)));
    assert_eq!(scraped, 0.0, "a fresh store at first");
    let before = prometheus.alerts().unwrap();
    assert!(
        before.iter().all(|(n, ..)| n != "SipEdgeStoreStale"),
        "{before:?}"
    );

    etcd.stop();
    let gone = Instant::now();
    let seen_stale = wait_for(
        "the gate's store stale in Prometheus",
        Duration::from_secs(60),
        || (stale(&prometheus) == Some(1.0)).then(|| gone.elapsed()),
    )
    .expect("the gate reports its store stale");
    let fired = wait_for("SipEdgeStoreStale firing", Duration::from_secs(90), || {
        let alerts = prometheus.alerts().ok()?;
        alerts
            .into_iter()
            .find(|(n, s, _)| n == "SipEdgeStoreStale" && s == "firing")
            .map(|(_, _, a)| (a, gone.elapsed()))
    });
    let (alert, after) = fired.unwrap_or_else(|e| panic!("{e}: {}", prometheus.log_tail(2000)));
    assert_eq!(alert["labels"]["job"], "sip-gate", "{alert}");
    assert_eq!(alert["labels"]["instance"], admin.to_string(), "{alert}");
    assert_eq!(alert["labels"]["severity"], "page", "{alert}");
    let runbook = alert["annotations"]["runbook"].as_str().unwrap_or_default();
    assert_eq!(runbook, "docs/operations.md#sipedgestorestale", "{alert}");
    // R-MN-2: a stale gate stays ready with its last view, and the
    // not-ready alert stays quiet.
    assert_eq!(gate.readyz().map(|(code, _)| code), Some(200));
    let all = prometheus.alerts().unwrap();
    assert!(all.iter().all(|(n, ..)| n != "SipGateNotReady"), "{all:?}");
    // Every query of the dashboard is one this Prometheus takes.
    let d: serde_json::Value = serde_json::from_str(&read("deploy/grafana/sip-edge.json")).unwrap();
    let exprs: Vec<String> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .collect();
    assert!(exprs.len() > 20, "{exprs:?}");
    for e in &exprs {
        let v = prometheus.query(e).unwrap();
        assert_eq!(v["status"], "success", "dashboard query {e}: {v}");
    }
    eprintln!(
        "etcd stopped -> gate stale in Prometheus after {:.1} s -> SipEdgeStoreStale firing after {:.1} s (for: 30s)",
        seen_stale.as_secs_f64(),
        after.as_secs_f64()
    );
}
