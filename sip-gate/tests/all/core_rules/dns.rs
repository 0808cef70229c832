//! Requests instances send to host names (RFC 3263) through the core: it
//! asks the transport to resolve ([`Action::Resolve`]), parks the message,
//! and routes it once when the answer comes ([`Core::resolved`]); answers
//! and failures are cached; a target that cannot be reached gives way to
//! the next ([`Core::undeliverable`]). The DNS side itself is tested against
//! a real server in `tests/all/dns.rs`.

use std::net::SocketAddr;
use std::time::Duration;

use sip_gate::{DnsAnswer, DnsFailure, DnsQuery, SrvTarget};

use super::prelude::*;

fn invite_to(uri: &str, call_id: &str, branch: &str) -> Bytes {
    Req::new(
        "INVITE",
        uri,
        call_id,
        &format!("SIP/2.0/UDP 127.0.1.1:5060;branch={branch}"),
    )
    .bytes()
}

fn from_sg_a(g: &Gate, msg: &Bytes) -> Action {
    g.udp(L_SG_BAL, INSTANCE_ADDR[SG_A], msg)
}

fn resolve_of(a: Action) -> DnsQuery {
    match a {
        Action::Resolve(q) => q,
        other => panic!("expected a lookup, got {other:?}"),
    }
}

/// Two SRV targets over TCP: priority 10 first, then 20.
fn two_targets(ttl: Duration) -> DnsAnswer {
    DnsAnswer {
        tcp: true,
        targets: vec![
            SrvTarget {
                priority: 20,
                weight: 0,
                addrs: vec![addr("192.0.2.22:5080")],
            },
            SrvTarget {
                priority: 10,
                weight: 0,
                addrs: vec![addr("192.0.2.21:5070")],
            },
        ],
        ttl,
    }
}

fn tcp_to(a: &Action) -> SocketAddr {
    match a {
        Action::Send(Out::Tcp { to, .. }, _) => *to,
        other => panic!("expected TCP out, got {other:?}"),
    }
}

#[test]
fn rfc3263_a_host_name_is_resolved_once_routed_once_then_cached() {
    let g = Gate::std();
    let invite = invite_to("sip:bob@carrier.example", "dns-1@sg", "z9hG4bKdns1");
    let q = resolve_of(from_sg_a(&g, &invite));
    assert_eq!(q.to_string(), "carrier.example");
    // The retransmission waits with it: no second lookup, nothing routed.
    assert_eq!(from_sg_a(&g, &invite), Action::None);
    assert_eq!(g.core.transactions(), 0);

    let actions = g
        .core
        .resolved(q, Ok(two_targets(Duration::from_secs(60))), Instant::now());
    assert_eq!(actions.len(), 2);
    // Priority 10 first, over the transport the answer chose.
    assert_eq!(tcp_to(&actions[0]), addr("192.0.2.21:5070"));
    let (_, m) = sent(actions[0].clone());
    assert_eq!(text(m.top_via().unwrap().transport), "TCP");
    assert_eq!(rr_uris(&m).len(), 2, "UDP from sg-a, TCP out: RFC 5658");
    // The copy that waited is a retransmission of the same transaction.
    assert_eq!(actions[1], actions[0]);
    assert_eq!(g.core.transactions(), 1);

    // Cached: the next request to the name goes at once.
    let next = invite_to("sip:carol@carrier.example", "dns-2@sg", "z9hG4bKdns2");
    assert_eq!(tcp_to(&from_sg_a(&g, &next)), addr("192.0.2.21:5070"));
}

#[test]
fn rfc3263_an_expired_answer_is_asked_again() {
    let g = Gate::std();
    let invite = invite_to("sip:bob@short.example", "dns-ttl@sg", "z9hG4bKdnsttl");
    let q = resolve_of(from_sg_a(&g, &invite));
    // A TTL of 0: the waiting message still routes on it...
    let actions = g
        .core
        .resolved(q, Ok(two_targets(Duration::ZERO)), Instant::now());
    assert_eq!(tcp_to(&actions[0]), addr("192.0.2.21:5070"));
    // ...but the next request asks again.
    let next = invite_to("sip:bob@short.example", "dns-ttl2@sg", "z9hG4bKdnsttl2");
    resolve_of(from_sg_a(&g, &next));
}

#[test]
fn rfc3263_names_that_do_not_resolve_get_404_or_503_with_a_reason_and_are_cached() {
    let g = Gate::std();
    for (host, failure, code, reason) in [
        (
            "nx.example",
            DnsFailure::NotFound {
                ttl: Duration::from_secs(30),
            },
            404,
            "Host Not Found",
        ),
        (
            "dead.example",
            DnsFailure::Unavailable,
            503,
            "DNS Lookup Failed",
        ),
    ] {
        let invite = invite_to(
            &format!("sip:bob@{host}"),
            &format!("{host}@sg"),
            "z9hG4bKnx",
        );
        let q = resolve_of(from_sg_a(&g, &invite));
        let actions = g.core.resolved(q, Err(failure), Instant::now());
        let r = replied(actions[0].clone(), L_SG_BAL, INSTANCE_ADDR[SG_A], code);
        assert!(
            text(r.raw()).starts_with(&format!("SIP/2.0 {code} {reason}\r\n")),
            "{}",
            text(r.raw())
        );
        // Remembered: the next request is answered without a lookup.
        let again = invite_to(
            &format!("sip:x@{host}"),
            &format!("{host}-2@sg"),
            "z9hG4bKnx2",
        );
        replied(from_sg_a(&g, &again), L_SG_BAL, INSTANCE_ADDR[SG_A], code);
    }
    assert_eq!(g.core.transactions(), 0);
}

#[test]
fn rfc3263_a_port_or_transport_in_the_uri_is_part_of_the_question() {
    let g = Gate::std();
    let q = resolve_of(from_sg_a(
        &g,
        &invite_to(
            "sip:bob@Carrier.Example.:5070;transport=tcp",
            "dns-p@sg",
            "z9hG4bKdnsp",
        ),
    ));
    assert_eq!(q.to_string(), "carrier.example:5070;transport=tcp");
    // A numeric host is never looked up.
    let a = from_sg_a(
        &g,
        &invite_to("sip:bob@192.0.2.9:5070", "dns-n@sg", "z9hG4bKdnsn"),
    );
    assert!(matches!(a, Action::Send(Out::Udp { .. }, _)), "{a:?}");
}

#[test]
fn rfc3263_an_unreachable_target_gives_way_to_the_next_and_the_transaction_follows() {
    let g = Gate::std();
    let invite = invite_to("sip:bob@failover.example", "dns-fo@sg", "z9hG4bKdnsfo");
    let q = resolve_of(from_sg_a(&g, &invite));
    let first = g
        .core
        .resolved(q, Ok(two_targets(Duration::from_secs(60))), Instant::now())
        .remove(0);
    let Action::Send(_, bytes) = &first else {
        panic!()
    };
    assert_eq!(tcp_to(&first), addr("192.0.2.21:5070"));
    // The transport could not connect: the same bytes to the next target.
    let next = g
        .core
        .undeliverable(addr("192.0.2.21:5070"), bytes.clone(), Instant::now());
    assert_eq!(tcp_to(&next), addr("192.0.2.22:5080"));
    let Action::Send(_, moved) = &next else {
        panic!()
    };
    assert_eq!(moved, bytes, "forwarded as it was");
    // The CANCEL follows the transaction to the new target.
    let cancel = Req::new(
        "CANCEL",
        "sip:bob@failover.example",
        "dns-fo@sg",
        "SIP/2.0/UDP 127.0.1.1:5060;branch=z9hG4bKdnsfo",
    )
    .without("Contact")
    .bytes();
    assert_eq!(tcp_to(&from_sg_a(&g, &cancel)), addr("192.0.2.22:5080"));
    // A new call skips the failed target while it is held.
    let other = invite_to("sip:carol@failover.example", "dns-fo2@sg", "z9hG4bKdnsfo2");
    assert_eq!(tcp_to(&from_sg_a(&g, &other)), addr("192.0.2.22:5080"));
    // The last target fails too: the instance gets 503 at once.
    let r = g
        .core
        .undeliverable(addr("192.0.2.22:5080"), moved.clone(), Instant::now());
    let r = replied(r, L_SG_BAL, INSTANCE_ADDR[SG_A], 503);
    assert_eq!(r.vias().count(), 1, "the instance's Via only");
}

#[test]
fn rfc3263_a_udp_target_reported_unreachable_gives_way_on_the_next_retransmission() {
    let g = Gate::std();
    let invite = invite_to("sip:bob@udp-fo.example", "dns-icmp@sg", "z9hG4bKdnsicmp");
    let q = resolve_of(from_sg_a(&g, &invite));
    let answer = DnsAnswer {
        tcp: false,
        ..two_targets(Duration::from_secs(60))
    };
    let first = g.core.resolved(q, Ok(answer), Instant::now()).remove(0);
    assert_eq!(first, sent_udp(&first, "192.0.2.21:5070"));
    // Until the transport reports the target unreachable, a copy follows it.
    let again = from_sg_a(&g, &invite);
    assert_eq!(again, sent_udp(&again, "192.0.2.21:5070"));
    // An ICMP error came back for it: the next copy goes to the next target.
    g.core.unreachable(addr("192.0.2.21:5070"), Instant::now());
    let moved = from_sg_a(&g, &invite);
    assert_eq!(moved, sent_udp(&moved, "192.0.2.22:5080"));
    let Action::Send(_, a) = &again else { panic!() };
    let Action::Send(_, b) = &moved else { panic!() };
    assert_eq!(a, b, "the same bytes, the same branch");
}

/// `a` itself when it sends over UDP to `to` (panics otherwise).
fn sent_udp(a: &Action, to: &str) -> Action {
    match a {
        Action::Send(Out::Udp { to: t, .. }, _) if *t == addr(to) => a.clone(),
        other => panic!("expected UDP to {to}, got {other:?}"),
    }
}
