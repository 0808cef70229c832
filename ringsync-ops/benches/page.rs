//! The status page's figures (issue 28), through the real `ringsync serve`
//! on a site of 50 instances (25 servers, an sg and an esg on each):
//!
//! 1. page weight: the bytes of a first load (the page, its script and
//!    style, the first `/v1/page` and the whole history) and of one update
//!    (`/v1/page` and the history's new samples), as served (no compression);
//! 2. `ringsync serve`'s CPU while idle, then while 10 pages poll it as
//!    the page's script does (both endpoints once a second each), from
//!    `/proc` (utime + stime over wall time);
//! 3. update latency: a profile change sent to the API → a real page in
//!    headless Chromium showing it (a MutationObserver in the page notes
//!    when its summary names the new drain zone; the clock is the same
//!    machine's).
//!
//! ```sh
//! cargo build --release -p ringsync-ops --bin ringsync
//! TESTBED_BIN_DIR=target/release cargo bench --profile dev -p ringsync-ops --bench page -- 20 30
//! ```
//! (changes, seconds per CPU phase). The pages of phase 2 are HTTP clients
//! that poll as the script does, not 10 Chromiums: ten browsers would take
//! the two cores from the server being measured.
//!
//! Addresses: `ringsync serve` on 127.47.29.1:8080; a stand-in gate on
//! 127.47.29.2:9091 serving a work report of the 50 instances (3 calls
//! each) and `/metrics` whose new-work counters grow by 5 a second each,
//! so the history holds 50 series as on a busy site.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use testbed::bins::Node;
use testbed::http::{self, Request};
use testbed::stats::percentile;
use testbed::webdriver::Browser;
use testbed::ProcStats;

fn site() -> String {
    let mut s = String::from(
        "[site]\nname = \"bench\"\n[store]\nkind = \"embedded\"\npath = \"profiles.json\"\n\
         [admin]\nbind = \"127.47.29.1:8080\"\ngate_bind = \"127.47.29.2:9091\"\n\
         media_bind = \"127.47.29.1:7\"\n",
    );
    for n in 0..25 {
        s += &format!("[[server]]\nname = \"srv-{n:02}\"\n");
    }
    for n in 0..25 {
        for (k, svc) in ["sg", "esg"].iter().enumerate() {
            s += &format!(
                "[[instance]]\nid = \"{svc}-{n:02}\"\nservice = \"{svc}\"\nserver = \"srv-{n:02}\"\n\
                 sip = \"127.47.30.{}:5060\"\n",
                2 * n + k + 1
            );
        }
    }
    s
}

/// The stand-in gate: `/v1/work` and `/metrics` for `ids`, one answer a
/// connection, until the process ends.
fn stand_in_gate(ids: Vec<String>) {
    use ringsync::work::{InstanceWork, NodeKind, WorkCounts, WorkReport};
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.47.29.2:9091").unwrap();
    let started = now_ms();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 2048];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let body = if req.starts_with("GET /v1/work") {
                let work = InstanceWork {
                    counts: WorkCounts {
                        dialogs: 3,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let report = WorkReport {
                    site_hash: String::new(),
                    site: "bench".into(),
                    node: "gate-1".into(),
                    kind: NodeKind::Gate,
                    scope: "stand-in".into(),
                    started_ms: started - 600_000,
                    generated_ms: now_ms(),
                    revision: 0,
                    generation: 0,
                    instances: ids.iter().map(|i| (i.clone(), work.clone())).collect(),
                    backups: Vec::new(),
                    run: None,
                };
                serde_json::to_string(&report).unwrap()
            } else {
                let grown = (now_ms() - started) / 200;
                ids.iter()
                    .map(|i| format!("sipgate_new_work_total{{instance=\"{i}\"}} {grown}\n"))
                    .collect()
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The body length of `GET path`, and the body.
fn get(addr: SocketAddr, path: &str) -> (usize, String) {
    let r = http::get(addr, path).unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    (r.head.len() + 4 + r.body.len(), r.body)
}

fn last_t(history: &str) -> u64 {
    let v: Value = serde_json::from_str(history).unwrap();
    v["samples"]
        .as_array()
        .and_then(|s| s.last())
        .and_then(|s| s["t_ms"].as_u64())
        .unwrap_or(0)
}

fn weight(addr: SocketAddr) {
    let mut first = 0;
    for p in ["/", "/page/app.js", "/page/style.css", "/v1/page"] {
        let (n, _) = get(addr, p);
        println!("  {p}: {n} bytes");
        first += n;
    }
    let (n, h) = get(addr, "/v1/page/history");
    println!("  /v1/page/history: {n} bytes");
    first += n;
    std::thread::sleep(Duration::from_secs(1));
    let (a, _) = get(addr, "/v1/page");
    let (b, _) = get(addr, &format!("/v1/page/history?after={}", last_t(&h)));
    println!(
        "first load: {first} bytes; one update: {} bytes (/v1/page {a}, history {b})",
        a + b
    );
}

/// `ringsync serve`'s CPU share over `secs` while `pages` pages poll.
fn cpu(serve: &Node, addr: SocketAddr, pages: usize, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..pages)
        .map(|_| {
            let (stop, bytes) = (stop.clone(), bytes.clone());
            std::thread::spawn(move || {
                let mut after = 0;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let (a, _) = get(addr, "/v1/page");
                    let (b, h) = get(addr, &format!("/v1/page/history?after={after}"));
                    after = last_t(&h).max(after);
                    bytes.fetch_add((a + b) as u64, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
                }
            })
        })
        .collect();
    let pid = serve.pid().unwrap();
    let (p0, t0) = (ProcStats::sample(pid).unwrap(), Instant::now());
    std::thread::sleep(Duration::from_secs(secs));
    let (p1, t1) = (ProcStats::sample(pid).unwrap(), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let share = p1.cpu_since(&p0).as_secs_f64() / (t1 - t0).as_secs_f64();
    println!(
        "{pages} pages: serve CPU {:.1}% of one core over {secs} s ({:.0} bytes/s served to the pages)",
        100.0 * share,
        bytes.load(Ordering::Relaxed) as f64 / secs as f64
    );
    share
}

/// Profile change → the page showing it, `n` times.
fn latency(addr: SocketAddr, url: &str, n: usize) -> Vec<f64> {
    let b = Browser::start(1100, 900).unwrap();
    b.goto(url).unwrap();
    b.wait_until(
        "the page",
        Duration::from_secs(20),
        "return document.querySelector('#tile-sg-00') ? true : null;",
    )
    .unwrap();
    // Notes when the summary line names the drain zone it waits for.
    b.exec(
        "window.__seen = {}; new MutationObserver(() => { \
           const t = document.getElementById('summary').textContent; \
           const z = t.includes('drain zone: srv-00') ? 'on' : 'off'; \
           if (!(z in window.__seen)) window.__seen[z] = Date.now(); \
         }).observe(document.getElementById('summary'), {childList: true, characterData: true, subtree: true});",
        json!([]),
    )
    .unwrap();
    let mut out = Vec::new();
    for k in 0..n {
        let (what, want) = if k % 2 == 0 {
            ("activate", "on")
        } else {
            ("deactivate", "off")
        };
        b.exec("window.__seen = {};", json!([])).unwrap();
        // Spread the changes over the page's polling period.
        std::thread::sleep(Duration::from_millis(300 + (k as u64 * 137) % 1000));
        let t0 = now_ms();
        let r = Request::new("POST", addr, &format!("/v1/profiles/maint-00/{what}"))
            .send()
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let seen = b
            .wait_until(
                what,
                Duration::from_secs(10),
                &format!("return window.__seen['{want}'] || null;"),
            )
            .unwrap();
        out.push(seen.as_u64().unwrap().saturating_sub(t0) as f64);
    }
    out
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let changes = args.first().copied().unwrap_or(20) as usize;
    let secs = args.get(1).copied().unwrap_or(30);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.toml");
    std::fs::write(&path, site()).unwrap();
    let ids = (0..25)
        .flat_map(|n| [format!("sg-{n:02}"), format!("esg-{n:02}")])
        .collect();
    stand_in_gate(ids);
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 47, 29, 1)), 8080);
    let mut serve = Node::serve(&path).admin(addr).start().unwrap();
    serve.wait_ready().unwrap();
    let r = Request::new("POST", addr, "/v1/profiles")
        .body(r#"{"name": "maint-00", "servers": ["srv-00"]}"#)
        .send()
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    // A few samples in the history, as on a page opened after a while.
    std::thread::sleep(Duration::from_secs(5));

    weight(addr);
    cpu(&serve, addr, 0, secs);
    cpu(&serve, addr, 10, secs);
    let mut l = latency(addr, &serve.url(), changes);
    l.sort_by(f64::total_cmp);
    println!(
        "profile change -> page shows it: n={} p50 {:.0} ms p99 {:.0} ms max {:.0} ms",
        l.len(),
        percentile(&l, 0.5).unwrap(),
        percentile(&l, 0.99).unwrap(),
        l.last().unwrap()
    );
    serve.stop(Duration::from_secs(10));
}
