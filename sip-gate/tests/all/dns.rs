//! RFC 3263 through the real gate against a real DNS server (dnsmasq on
//! loopback, `[dns] nameservers`): an instance sends to a host name, the
//! gate resolves it (NAPTR -> SRV -> A), caches the answer per TTL, fails
//! over to the next SRV target when the first refuses TCP, and answers a
//! name that does not exist with 404.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use crate::common::*;
use sip_gate::SipMessage;
use testbed::{Dnsmasq, DnsmasqHandle};

const WAIT: Duration = Duration::from_secs(5);

/// A site with one sg instance whose `[dns]` asks `dns` only.
fn dns_site(net: (u8, u8), dns: SocketAddr) -> String {
    format!(
        "{}\n[dns]\nnameservers = [\"{dns}\"]\ntimeout_ms = 500\nattempts = 1\nnegative_ttl_s = 30\n",
        site(net, 1, &balance_sg(net))
    )
}

/// A gate on [`dns_site`] asking `dns`: the gate, the address of its
/// listener `subs` and sg-0's.
async fn gate_asking(
    net: (u8, u8),
    dns: &DnsmasqHandle,
) -> (sip_gate::Gate, SocketAddr, SocketAddr) {
    let (gate, _drain) = start_gate(config(&dns_site(net, dns.addr()))).await;
    let gw = listener_addr(&gate, "subs");
    (gate, gw, server_addr(net, 0))
}

fn dns_addr(net: (u8, u8)) -> SocketAddr {
    SocketAddr::new(ip(net, 53), 5353)
}

/// An INVITE from the instance to `uri`.
fn invite(instance: SocketAddr, uri: &str, n: u32) -> String {
    format!(
        "INVITE {uri} SIP/2.0\r\nVia: SIP/2.0/UDP {instance};branch=z9hG4bKdns{n}\r\n\
         Max-Forwards: 70\r\nFrom: <sip:sg@example.com>;tag=f{n}\r\nTo: <{uri}>\r\n\
         Call-ID: dns-{n}@sg\r\nCSeq: 1 INVITE\r\nContact: <sip:sg@{instance}>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

fn count(dns: &DnsmasqHandle, what: &str) -> usize {
    dns.queries().iter().filter(|q| q.starts_with(what)).count()
}

/// One message from a TCP listener, within [`WAIT`].
fn tcp_message(l: &TcpListener) -> String {
    l.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("nothing connected to {l:?}: {e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "closed early");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn udp_message(s: &UdpSocket) -> String {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 4096];
    let (n, _) = s.recv_from(&mut buf).expect("a datagram");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3263_naptr_picks_tcp_srv_priority_order_and_failover_on_a_refused_connect() {
    let net = (30, 1);
    let dns = Dnsmasq::new(dns_addr(net))
        .local_domain("test")
        .ttl(60)
        // NAPTR: TCP (order 10) before UDP (order 20).
        .naptr("carrier.test", 20, 10, "SIP+D2U", "_sip._udp.carrier.test")
        .naptr("carrier.test", 10, 10, "SIP+D2T", "_sip._tcp.carrier.test")
        .srv("_sip._udp.carrier.test", "u1.carrier.test", 5060, 10, 0)
        .srv("_sip._tcp.carrier.test", "p1.carrier.test", 5070, 10, 0)
        .srv("_sip._tcp.carrier.test", "p2.carrier.test", 5080, 20, 0)
        .host("u1.carrier.test", ip(net, 60))
        .host("p1.carrier.test", ip(net, 61))
        .host("p2.carrier.test", ip(net, 62))
        .start()
        .expect("dnsmasq starts");
    let (gate, gw, instance) = gate_asking(net, &dns).await;
    let second = SocketAddr::new(ip(net, 62), 5080);
    let got = tokio::task::spawn_blocking(move || {
        // Priority 10 (p1) refuses TCP: nothing listens there.
        let p2 = TcpListener::bind(second).unwrap();
        let sg = UdpSocket::bind(instance).unwrap();
        sg.send_to(invite(instance, "sip:bob@carrier.test", 1).as_bytes(), gw)
            .unwrap();
        tcp_message(&p2)
    })
    .await
    .unwrap();
    assert!(
        got.starts_with("INVITE sip:bob@carrier.test SIP/2.0\r\n"),
        "{got}"
    );
    let m = SipMessage::scan(got.into_bytes().into()).unwrap();
    assert_eq!(m.top_via().unwrap().transport, b"TCP");
    assert_eq!(count(&dns, "query[NAPTR] carrier.test"), 1);
    assert_eq!(count(&dns, "query[SRV] _sip._tcp.carrier.test"), 1);
    assert_eq!(count(&dns, "query[SRV] _sip._udp.carrier.test"), 0);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3263_answers_are_cached_for_their_ttl_then_asked_again() {
    let net = (30, 2);
    let dns = Dnsmasq::new(dns_addr(net))
        .local_domain("test")
        .ttl(2)
        .srv("_sip._udp.ttl.test", "t1.ttl.test", 5090, 10, 0)
        .host("t1.ttl.test", ip(net, 61))
        .start()
        .expect("dnsmasq starts");
    let (gate, gw, instance) = gate_asking(net, &dns).await;
    let target = SocketAddr::new(ip(net, 61), 5090);
    let srv_queries = |dns: &DnsmasqHandle| count(dns, "query[SRV] _sip._udp.ttl.test");
    let (sg, t1) = tokio::task::spawn_blocking(move || {
        (
            UdpSocket::bind(instance).unwrap(),
            UdpSocket::bind(target).unwrap(),
        )
    })
    .await
    .unwrap();
    let send = move |n: u32| {
        let (sg, t1) = (sg.try_clone().unwrap(), t1.try_clone().unwrap());
        tokio::task::spawn_blocking(move || {
            sg.send_to(invite(instance, "sip:bob@ttl.test", n).as_bytes(), gw)
                .unwrap();
            udp_message(&t1)
        })
    };
    assert!(send(1).await.unwrap().contains("Call-ID: dns-1@sg"));
    assert_eq!(srv_queries(&dns), 1);
    // Within the TTL: from the cache.
    assert!(send(2).await.unwrap().contains("Call-ID: dns-2@sg"));
    assert_eq!(srv_queries(&dns), 1);
    // After it: asked again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(send(3).await.unwrap().contains("Call-ID: dns-3@sg"));
    assert_eq!(srv_queries(&dns), 2);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3263_a_name_that_does_not_exist_gets_404_and_is_remembered() {
    let net = (30, 3);
    let dns = Dnsmasq::new(dns_addr(net))
        .local_domain("test")
        .start()
        .expect("dnsmasq starts");
    let (gate, gw, instance) = gate_asking(net, &dns).await;
    let replies = tokio::task::spawn_blocking(move || {
        let sg = UdpSocket::bind(instance).unwrap();
        (1..=2)
            .map(|n| {
                sg.send_to(invite(instance, "sip:bob@nowhere.test", n).as_bytes(), gw)
                    .unwrap();
                udp_message(&sg)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for r in &replies {
        assert!(r.starts_with("SIP/2.0 404 Host Not Found\r\n"), "{r}");
    }
    // The second request was answered from the negative cache.
    let asked = count(&dns, "query[NAPTR] nowhere.test");
    assert_eq!(asked, 1, "{:?}", dns.queries());
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc3263_udp_target_with_a_closed_port_gives_way_on_the_next_retransmission() {
    let net = (30, 4);
    let dns = Dnsmasq::new(dns_addr(net))
        .local_domain("test")
        .ttl(60)
        .srv("_sip._udp.icmp.test", "a1.icmp.test", 5070, 10, 0)
        .srv("_sip._udp.icmp.test", "a2.icmp.test", 5080, 20, 0)
        .host("a1.icmp.test", ip(net, 61))
        .host("a2.icmp.test", ip(net, 62))
        .start()
        .expect("dnsmasq starts");
    let (gate, gw, instance) = gate_asking(net, &dns).await;
    let second = SocketAddr::new(ip(net, 62), 5080);
    let (copies, got) = tokio::task::spawn_blocking(move || {
        // Priority 10 (a1) has no socket: the kernel answers ICMP port
        // unreachable, which the gate reads from its socket's error queue.
        let a2 = UdpSocket::bind(second).unwrap();
        a2.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let sg = UdpSocket::bind(instance).unwrap();
        let request = invite(instance, "sip:bob@icmp.test", 1);
        let mut buf = [0u8; 4096];
        // The instance retransmits as a UDP client does (RFC 3261 17.1.1.2).
        for copies in 1..=6 {
            sg.send_to(request.as_bytes(), gw).unwrap();
            if let Ok((n, _)) = a2.recv_from(&mut buf) {
                return (copies, String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        panic!("the second target never got the INVITE");
    })
    .await
    .unwrap();
    assert!(
        got.starts_with("INVITE sip:bob@icmp.test SIP/2.0\r\n"),
        "{got}"
    );
    assert!(got.contains("branch=z9hG4bKdns1"), "{got}");
    assert!(copies >= 2, "the first copy went to the first target");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}
