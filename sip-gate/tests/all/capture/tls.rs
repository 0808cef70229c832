//! A TLS collector (`tls:IP:PORT`): `openssl s_server` with a certificate
//! for its IP address, trusted through `[capture] ca`, gets every copy,
//! decrypted HEP packets back to back; a CA that does not sign the
//! collector's certificate gets it nothing (the copies are dropped and
//! counted), applied on reload.

use std::net::SocketAddr;
use std::time::Duration;

use super::{collector, gate, refused_invite, site};
use crate::common::ip;
use testbed::hep::{chunks, TlsCollector};
use testbed::wait_for;

/// Whether `packet` holds `bytes`.
fn has(packet: &[u8], bytes: &[u8]) -> bool {
    packet.windows(bytes.len()).any(|w| w == bytes)
}

/// The chunk of type `kind` in `packet`.
fn chunk(packet: &[u8], kind: u16) -> Vec<u8> {
    let all = chunks(packet).expect("whole chunks");
    all.into_iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, d)| d)
        .unwrap_or_else(|| panic!("no chunk {kind:#06x}"))
}

#[test]
fn r_cap_1_a_tls_collector_gets_every_copy_and_an_untrusted_one_none() {
    let net = (63, 8);
    let (dir, site) = site(net);
    let at = SocketAddr::new(ip(net, 50), 9061);
    let homer = TlsCollector::start(at).unwrap();
    std::fs::copy(homer.ca(), dir.path().join("homer-ca.pem")).unwrap();
    let text = std::fs::read_to_string(&site).unwrap();
    let udp = format!("collectors = [\"udp:{}\"]", collector(net));
    assert!(text.contains(&udp));
    let tls = text.replace(
        &udp,
        &format!("collectors = [\"tls:{at}\"]\nca = \"homer-ca.pem\""),
    );
    std::fs::write(&site, &tls).unwrap();
    let ua = std::net::UdpSocket::bind(SocketAddr::new(ip(net, 100), 0)).unwrap();
    ua.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let to = SocketAddr::new(ip(net, 1), 5060);
    let gate = gate(&site, net);

    // Copies before the connection is up are dropped: wait for one (any
    // of the answers so far: the newest may still be on its way).
    let mut answers = Vec::new();
    wait_for(
        "the TLS collector's first copy",
        Duration::from_secs(15),
        || {
            let n = answers.len();
            answers.push(refused_invite(&format!("warm-{n}"), &ua, to).1);
            let got = homer.packets().unwrap();
            got.iter()
                .any(|p| answers.iter().any(|a| has(p, a.as_bytes())))
                .then_some(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {}", gate.log()));
    let sent: Vec<(String, String)> = (0..20)
        .map(|i| refused_invite(&format!("tls-{i}"), &ua, to))
        .collect();
    // The copies of these exchanges, by their correlation id.
    let ours = || -> Vec<Vec<u8>> {
        let all = homer.packets().unwrap();
        all.into_iter()
            .filter(|p| chunk(p, 0x0011).starts_with(b"tls-"))
            .collect()
    };
    wait_for("every copy", Duration::from_secs(10), || {
        (ours().len() >= 2 * sent.len()).then_some(())
    })
    .unwrap();
    let got = ours();
    assert_eq!(got.len(), 2 * sent.len(), "every copy, once");
    for (i, ((req, answer), pair)) in sent.iter().zip(got.chunks(2)).enumerate() {
        assert_eq!(chunk(&pair[0], 0x000f), req.as_bytes(), "request {i}");
        assert_eq!(chunk(&pair[1], 0x000f), answer.as_bytes(), "answer {i}");
        for p in pair {
            // The Call-ID as the correlation id, the node's agent id, the
            // UDP leg's protocol and the UA's port.
            assert_eq!(chunk(p, 0x0011), format!("tls-{i}").as_bytes());
            assert_eq!(chunk(p, 0x000c), 2002u32.to_be_bytes());
            assert_eq!(chunk(p, 0x0002), [17]);
        }
        let ua_port = ua.local_addr().unwrap().port().to_be_bytes();
        assert_eq!(chunk(&pair[0], 0x0007), ua_port, "from the UA");
        assert_eq!(chunk(&pair[1], 0x0008), ua_port, "to the UA");
    }

    // A CA that did not sign the collector's certificate: the handshake
    // fails, nothing more reaches it, the copies are counted dropped.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    testbed::tls::self_signed(&other, &at.ip().to_string()).unwrap();
    std::fs::write(&site, tls.replace("homer-ca.pem", "other/cert.pem")).unwrap();
    crate::reload::sighup(&gate, "applied");
    let down = r#"sipgate_capture_dropped_total{reason="collector_down"}"#;
    let dropped = gate.metric(down).unwrap();
    let received = homer.packets().unwrap().len();
    let mut n = 0;
    wait_for("copies dropped", Duration::from_secs(10), || {
        n += 1;
        refused_invite(&format!("untrusted-{n}"), &ua, to);
        (gate.metric(down).ok()? >= dropped + 10.0).then_some(())
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        homer.packets().unwrap().len(),
        received,
        "nothing through an unverified TLS connection"
    );
    homer.stop();
}
