//! The JSON form of the ng protocol through the real media-ctl binary in
//! front of real rtpengine processes: rtpengine's own client
//! (`rtpengine-ng-client --json`, Debian `rtpengine-utils`) gets what an
//! rtpengine would answer it, and a JSON client's errors read as an mg's.

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

use crate::real::*;
use serde_json::{json, Value as Json};

/// Runs `rtpengine-ng-client --json` against `to`; its stdout.
fn ng_client(to: SocketAddr, args: &[&str]) -> String {
    let out = Command::new("rtpengine-ng-client")
        .arg(format!("--proxy-address={}", to.ip()))
        .arg(format!("--proxy-port={}", to.port()))
        .arg("--json")
        .args(args)
        .output()
        .expect("rtpengine-ng-client (Debian rtpengine-utils) runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rtpengine-ng-client {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A raw JSON ng client on `127.a.b.host`.
struct JsonClient {
    sock: UdpSocket,
}

impl JsonClient {
    fn new(site: &Site, host: u8) -> JsonClient {
        let sock = UdpSocket::bind(SocketAddr::new(ip(site.net, host), 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        JsonClient { sock }
    }

    /// Sends `<cookie> <payload>` to `to`; the raw answer with that cookie.
    fn raw(&self, to: SocketAddr, cookie: &str, payload: &[u8]) -> Vec<u8> {
        let mut d = format!("{cookie} ").into_bytes();
        d.extend_from_slice(payload);
        self.sock.send_to(&d, to).unwrap();
        let mut buf = vec![0u8; 65_536];
        loop {
            let n = self.sock.recv(&mut buf).expect("an answer within 3 s");
            if buf[..n].starts_with(format!("{cookie} ").as_bytes()) {
                return buf[..n].to_vec();
            }
        }
    }

    /// The answer to `payload`, which must be JSON.
    fn ask(&self, to: SocketAddr, cookie: &str, payload: &Json) -> Json {
        let raw = self.raw(to, cookie, payload.to_string().as_bytes());
        let body = &raw[cookie.len() + 1..];
        serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "answer to {payload} is not JSON ({e}): {}",
                String::from_utf8_lossy(&raw)
            )
        })
    }
}

/// The `c=` address of the SDP that `rtpengine-ng-client` printed as "New SDP".
fn new_sdp_address(stdout: &str) -> Option<String> {
    let new = stdout.split("New SDP:").nth(1)?;
    new.lines()
        .find_map(|l| l.strip_prefix("c=IN IP4 ").map(|a| a.trim().to_owned()))
}

#[test]
fn rtpengines_own_json_client_speaks_through_media_ctl() {
    let site = Site::start(Spec::new((80, 20)));
    let pong = ng_client(site.ng, &["ping"]);
    assert!(pong.contains("result => 'pong'"), "{pong}");

    // An offer in JSON is placed on an mg (its SDP carries the mg's address),
    // and the whole call follows it (R-MG-2), each answer in JSON.
    let offer_sdp = sdp("10.1.1.1", 4000);
    let offer = ng_client(
        site.ng,
        &[
            "--call-id=json-1@test",
            "--from-tag=ft",
            &format!("--sdp={offer_sdp}"),
            "offer",
        ],
    );
    let at = new_sdp_address(&offer).unwrap_or_else(|| panic!("no new SDP: {offer}"));
    let mg = site.mg_at(&at);
    assert_eq!(site.work().instances[&mg].counts.calls, 1, "placed on {mg}");

    let c = JsonClient::new(&site, 11);
    let answer = c.ask(
        site.ng,
        "j-1",
        &json!({"command": "answer", "call-id": "json-1@test", "from-tag": "ft",
                "to-tag": "tt", "sdp": sdp("10.2.2.2", 5000)}),
    );
    assert_eq!(answer["result"], "ok", "{answer}");
    assert!(
        answer["sdp"]
            .as_str()
            .unwrap()
            .contains(&format!("c=IN IP4 {at}")),
        "R-MG-2: the answer on the offer's mg: {answer}"
    );
    let query = c.ask(
        site.ng,
        "j-2",
        &json!({"command": "query", "call-id": "json-1@test"}),
    );
    assert_eq!(query["result"], "ok", "{query}");
    assert!(query["tags"]["ft"].is_object(), "{query}");
    assert!(query["created"].is_i64(), "numbers stay numbers: {query}");

    // Fanned out over the pool, summed, and answered in JSON.
    let list = c.ask(site.ng, "j-3", &json!({"command": "list", "limit": 10}));
    assert_eq!(list["calls"], json!(["json-1@test"]), "{list}");
    let stats = c.ask(site.ng, "j-4", &json!({"command": "statistics"}));
    assert_eq!(stats["result"], "ok", "{stats}");

    // A retransmission gets the same bytes, from the cache.
    let q = json!({"command": "query", "call-id": "json-1@test"});
    let first = c.raw(site.ng, "j-5", q.to_string().as_bytes());
    let again = c.raw(site.ng, "j-5", q.to_string().as_bytes());
    assert_eq!(first, again);

    // rtpengine-ng-client exits non-zero on an error answer.
    ng_client(
        site.ng,
        &["--call-id=json-1@test", "--from-tag=ft", "delete"],
    );
    assert_eq!(
        site.work().instances[&mg].counts.calls,
        0,
        "the JSON delete ended the call"
    );
}

#[test]
fn json_errors_read_as_an_rtpengines_and_bencode_clients_are_unchanged() {
    let site = Site::start(Spec::new((80, 21)));
    let c = JsonClient::new(&site, 11);
    let mg = site.mgs.values().next().unwrap().ng();
    // The same bad input to media-ctl and straight to an rtpengine: the
    // same answer, in JSON, cookie kept.
    for (i, bad) in [
        &br#"{"command":"#[..],
        br#"{"command":"list","x":null}"#,
        br#"{"command":"ping","x":1.5}"#,
        br#"{"command":"bogus"}"#,
        br#"{"command":"query"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let cookie = format!("e-{i}");
        let ours = c.raw(site.ng, &cookie, bad);
        let theirs = c.raw(mg, &cookie, bad);
        let read = |raw: &[u8]| -> Json {
            serde_json::from_slice(&raw[cookie.len() + 1..])
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(raw)))
        };
        let (ours, theirs) = (read(&ours), read(&theirs));
        assert_eq!(ours["result"], "error", "{ours}");
        assert_eq!(
            ours["error-reason"],
            theirs["error-reason"],
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A call media-ctl does not know is searched in the pool, and the
    // outcome of that search comes back in JSON too.
    let unknown = c.ask(
        site.ng,
        "u-1",
        &json!({"command": "query", "call-id": "nowhere@test"}),
    );
    assert_eq!(unknown["result"], "error", "{unknown}");
    assert_eq!(unknown["error-reason"], "Unknown call-id", "{unknown}");

    // A bencode client next to JSON ones still gets bencode.
    let mut b = site.client(12);
    let p = b.cmd(&[("command", "ping")]);
    assert_eq!(p.result, "pong");
    assert!(p.raw.ends_with(b"d6:result4:ponge"), "{:?}", p.raw);
    let counted = site
        .node
        .metrics()
        .unwrap()
        .sum("mediactl_commands_total", &[r#"outcome="bad_json""#]);
    assert_eq!(counted, 1.0, "the JSON syntax error is counted");
}
