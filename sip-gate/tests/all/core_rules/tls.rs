//! SIP over TLS in the core (RFC 3261 26, RFC 5630): what a TLS listener
//! writes into Via and Record-Route, which transport the instance leg takes,
//! and TLS asked for where the listener has none. The sockets are proved
//! through the binary in `tests/all/tls.rs`.

use std::sync::Arc;

use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use sip_gate::Core;
use testbed::fixture::SiteFile;

use super::prelude::*;

/// Listener 0: UDP and TLS; 1: TLS only; 2: UDP and TCP. One sg instance.
fn tls_core(dir: &std::path::Path) -> Core {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("c.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("k.pem"), key.serialize_pem()).unwrap();
    let local = |port: u16| addr(&format!("127.0.0.1:{port}"));
    let text = SiteFile::new("tls-core")
        .tls("c.pem", "k.pem")
        .sgs(&[("a", addr("127.0.1.1:5060"))])
        .subscribers("udp-tls", local(5061), &["udp", "tls"])
        .subscribers("tls-only", local(5071), &["tls"])
        .subscribers("plain", local(5060), &[])
        .text()
        .to_owned();
    let config = Arc::new(SiteConfig::from_str_at(&text, &dir.join("site.toml")).unwrap());
    let drain = DrainState::new(config.clone());
    Core::new(config, drain).unwrap()
}

fn over_tls(core: &Core, listener: usize, msg: &Bytes) -> Action {
    core.handle(
        Inbound::Tcp {
            listener,
            conn: 7,
            peer: addr("203.0.113.10:40000"),
        },
        msg.clone(),
        Instant::now(),
    )
}

fn invite(uri: &str, call_id: &str) -> Bytes {
    Req::new(
        "INVITE",
        uri,
        call_id,
        "SIP/2.0/TLS 203.0.113.10:40000;branch=z9hG4bKtls-1;rport",
    )
    .bytes()
}

#[test]
fn tls_invite_ends_tls_at_the_gate_and_records_both_legs() {
    let dir = tempfile::tempdir().unwrap();
    let core = tls_core(dir.path());
    let m = forwarded(
        over_tls(&core, 0, &invite("sip:bob@example.com", "tls-1@ua")),
        0,
        addr("127.0.1.1:5060"),
    );
    assert!(
        via_values(&m)[0].starts_with("SIP/2.0/UDP 127.0.0.1:5061;"),
        "{:?}",
        via_values(&m)
    );
    let rr = rr_uris(&m);
    assert_eq!(rr.len(), 2, "{rr:?}");
    // RFC 5658: the instance's leg (top, UDP) and the client's (TLS).
    assert!(
        rr[0].starts_with("sip:") && !rr[0].contains("transport"),
        "{rr:?}"
    );
    assert!(
        rr[1].starts_with("sip:") && rr[1].contains(";transport=tls"),
        "{rr:?}"
    );
    // A sips: Request-URI: the TLS leg's Record-Route is sips: (16.6 step 4).
    let m = sent(over_tls(
        &core,
        0,
        &invite("sips:bob@example.com", "tls-2@ua"),
    ))
    .1;
    let rr = rr_uris(&m);
    assert!(
        rr[1].starts_with("sips:") && !rr[1].contains("transport"),
        "{rr:?}"
    );
}

#[test]
fn tls_only_listener_reaches_the_instance_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let core = tls_core(dir.path());
    let (out, m) = sent(over_tls(
        &core,
        1,
        &invite("sip:bob@example.com", "tls-3@ua"),
    ));
    assert_eq!(
        out,
        Out::Tcp {
            listener: 1,
            conn: None,
            to: addr("127.0.1.1:5060")
        }
    );
    assert!(
        via_values(&m)[0].starts_with("SIP/2.0/TLS 127.0.0.1:5071;"),
        "{:?}",
        via_values(&m)
    );
    let rr = rr_uris(&m);
    assert_eq!(rr.len(), 1, "{rr:?}");
    assert!(rr[0].contains(";transport=tls"), "{rr:?}");
}

#[test]
fn tls_asked_where_the_listener_has_none_gets_416() {
    let dir = tempfile::tempdir().unwrap();
    let core = tls_core(dir.path());
    for (i, uri) in [
        "sips:carol@198.51.100.7",
        "sip:carol@198.51.100.7;transport=tls",
    ]
    .into_iter()
    .enumerate()
    {
        let input = |n: usize| {
            Req::new(
                "OPTIONS",
                uri,
                &format!("tls-4-{i}-{n}@sg"),
                &format!("SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKsg-tls4-{i}-{n}"),
            )
            .bytes()
        };
        replied(
            handle(&core, 2, "127.0.1.1:5060", &input(0)),
            2,
            "127.0.1.1:5060",
            416,
        );
        // On the TLS listener the same request goes out over TLS.
        let (out, m) = sent(handle(&core, 0, "127.0.1.1:5060", &input(1)));
        assert_eq!(
            out,
            Out::Tcp {
                listener: 0,
                conn: None,
                to: addr(&format!(
                    "198.51.100.7:{}",
                    if uri.starts_with("sips") { 5061 } else { 5060 }
                ))
            },
            "{uri}"
        );
        assert!(via_values(&m)[0].starts_with("SIP/2.0/TLS "), "{uri}");
    }
}
