//! The stream transports' legs, captured as the endpoints saw them: TLS
//! decrypted, WebSocket (over TLS) decrypted and without its frames.

use std::net::SocketAddr;
use std::time::Duration;

use super::{collector, hex, messages};
use crate::common::ip;
use testbed::hep::{fields, hep_args, Sngrep, TsharkCapture};
use testbed::{Scenario, Sipp};

use super::{assert_not_malformed, COLLECTOR_PORT};

/// A call from a TLS client through the gate to a SIPp UAS over UDP: the
/// collector holds the TLS leg decrypted, each message byte for byte as
/// the client sent or received it, in that order, marked TCP (HEP IP
/// protocol 6), and the UDP leg to the instance beside it.
#[test]
fn r_cap_1_tls_leg_is_captured_decrypted_byte_for_byte() {
    use crate::tls::peer::{self, header, record_routes};
    use crate::tls::request;
    const T: Duration = Duration::from_secs(5);
    let net = (63, 3);
    let extra = format!("\n[capture]\ncollectors = [\"udp:{}\"]\n", collector(net));
    let site = crate::tls::Site::with(net, 1000, &extra);
    let sngrep = Sngrep::collect(collector(net)).unwrap();
    let hep_wire = TsharkCapture::start(
        "lo",
        &format!(
            "udp and dst host {} and dst port {COLLECTOR_PORT}",
            ip(net, 50)
        ),
    )
    .unwrap();
    let _gate = site.gate();
    let uas = Sipp::new(Scenario::repo("uas_call"))
        .local(ip(net, 11), 5060)
        .calls(1)
        .timeout(Duration::from_secs(30))
        .spawn()
        .unwrap();
    let mut c = peer::connect(site.sip(), &site.ca.pem);
    // What the client saw, in order: (sent by it, the bytes).
    let mut seen: Vec<(bool, String)> = Vec::new();
    let send = |c: &mut peer::Client, m: String, seen: &mut Vec<(bool, String)>| {
        c.send(&m);
        seen.push((true, m));
    };
    let until_final = |c: &mut peer::Client, seen: &mut Vec<(bool, String)>| loop {
        let m = c.recv(T).expect("a response");
        seen.push((false, m.clone()));
        if !m.starts_with("SIP/2.0 1") {
            return m;
        }
    };
    let ruri = format!("sips:bob@{}", site.sip());
    let to = "To: <sips:bob@example.com>\r\n";
    let m = request(&c, "INVITE", &ruri, "cap", 1, to);
    send(&mut c, m, &mut seen);
    let ok = until_final(&mut c, &mut seen);
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    let rr = record_routes(&ok);
    let route = format!("Route: <{}>, <{}>\r\n", rr[1], rr[0]);
    let target = header(&ok, "Contact")
        .unwrap()
        .trim_matches(|c| c == '<' || c == '>')
        .to_owned();
    let dialog = format!("{route}To: {}\r\n", header(&ok, "To").unwrap());
    let m = request(&c, "ACK", &target, "cap", 1, &dialog);
    send(&mut c, m, &mut seen);
    let m = request(&c, "INVITE", &target, "cap", 2, &dialog);
    send(&mut c, m, &mut seen);
    assert!(until_final(&mut c, &mut seen).starts_with("SIP/2.0 200"));
    let m = request(&c, "ACK", &target, "cap", 2, &dialog);
    send(&mut c, m, &mut seen);
    let m = request(&c, "BYE", &target, "cap", 3, &dialog);
    send(&mut c, m, &mut seen);
    assert!(until_final(&mut c, &mut seen).starts_with("SIP/2.0 200"));
    let report = uas.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((report.successful, report.failed), (1, 0), "{report:?}");
    std::thread::sleep(Duration::from_millis(500));
    let hep = sngrep.stop().unwrap();
    let hep_wire = hep_wire.stop().unwrap();

    let client = c.local().to_string();
    let captured = messages(hep.path());
    let tls_leg: Vec<(bool, String)> = captured
        .iter()
        .filter(|m| m.src == client || m.dst == client)
        .map(|m| (m.src == client, m.payload.clone()))
        .collect();
    let expected: Vec<(bool, String)> = seen.iter().map(|(s, m)| (*s, hex(m))).collect();
    assert_eq!(tls_leg, expected, "the TLS leg as the client saw it");
    let sg = SocketAddr::new(ip(net, 11), 5060).to_string();
    let udp_leg = captured
        .iter()
        .filter(|m| m.src == sg || m.dst == sg)
        .count();
    assert!(udp_leg >= 9, "the leg to the instance: {udp_leg} messages");

    let args = hep_args(COLLECTOR_PORT);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let port = c.local().port().to_string();
    let protos: Vec<String> = fields(
        hep_wire.path(),
        &args,
        &format!("hep3.src_port == {port} || hep3.dst_port == {port}"),
        &["hep3.ip_proto"],
    )
    .unwrap()
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    assert_eq!(protos.len(), expected.len());
    assert!(protos.iter().all(|p| p == "6"), "{protos:?}");
    assert_not_malformed(hep_wire.path());
}

/// A browser's REGISTER over WSS through the gate to a real registrar
/// (Kamailio): the collector holds the WebSocket leg decrypted and
/// without its frames, each message as the client sent or received it,
/// and the UDP leg to the registrar beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_cap_1_wss_leg_is_captured_decrypted_and_unframed() {
    use crate::ws::ua;
    let net = (63, 5);
    let sections = format!("\n[capture]\ncollectors = [\"udp:{}\"]\n", collector(net));
    let site = crate::ws::Site::with_sections(net, true, "", &sections);
    let sngrep = Sngrep::collect(collector(net)).unwrap();
    let _kamailio = site.kamailio();
    let _gate = site.gate();
    let mut ws = site.open().await;
    let reg = ua::register("alice", "cap5", 1, 600);
    ua::send(&mut ws, &reg).await;
    let ok = ua::recv(&mut ws, Duration::from_secs(5))
        .await
        .expect("a REGISTER response");
    assert!(ok.starts_with("SIP/2.0 200"), "{ok}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hep = tokio::task::spawn_blocking(move || sngrep.stop().unwrap())
        .await
        .unwrap();

    let captured = messages(hep.path());
    let gate = site.sip().to_string();
    let registrar = SocketAddr::new(ip(net, 11), 5060).to_string();
    let ws_leg: Vec<(bool, String)> = captured
        .iter()
        .filter(|m| m.src != registrar && m.dst != registrar)
        .filter(|m| m.src == gate || m.dst == gate)
        .map(|m| (m.dst == gate, m.payload.clone()))
        .collect();
    assert_eq!(ws_leg, [(true, hex(&reg)), (false, hex(&ok))]);
    let udp_leg = captured
        .iter()
        .filter(|m| m.src == registrar || m.dst == registrar)
        .count();
    assert_eq!(udp_leg, 2, "REGISTER and 200 to and from the registrar");
}
