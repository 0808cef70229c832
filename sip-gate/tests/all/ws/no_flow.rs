//! A request an sg sends toward a WebSocket client without its flow is
//! answered, not dropped: the gate never opens a WebSocket connection, so
//! the client cannot be reached, and the sg hears it at once (480) instead
//! of waiting out its transaction timer.

use std::net::SocketAddr;
use std::time::Duration;

use testbed::{Scenario, Sipp};

use super::{assert_all_ok, ip, metric, run, Site};

/// R-WS-2 (RFC 7118 5, RFC 3261 16.9) through the `sip-gate` binary, SIPp
/// as the sg: a MESSAGE toward a client's address with `transport=ws`
/// (no flow token, no connection) gets `480 WebSocket Client Not
/// Connected`, and so does one whose target would take the WebSocket
/// listener's stream (`transport=tcp`) with no connection named; both are
/// counted in `sipgate_flow_failures_total{reason="ws_not_connected"}`.
/// Before: the first went out as a UDP datagram to the browser's address,
/// the second was dropped (`ws_closed`), and the sg heard nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r_ws_2_a_request_toward_a_ws_client_without_its_flow_gets_480() {
    let net = (43, 11);
    let site = Site::new(net, false);
    let gate = site.gate();
    for params in [";transport=ws", ";transport=tcp"] {
        let uac = Sipp::new(Scenario::repo("uac_message_expect_480"))
            .local(ip(net, 11), 5060)
            .remote(SocketAddr::new(ip(net, 77), 40000))
            .service("carol")
            .calls(1)
            .timeout(Duration::from_secs(20))
            .arg("-rsa")
            .arg(site.sip().to_string())
            .arg("-key")
            .arg("uri_params")
            .arg(params);
        let r = run(uac).await;
        assert_all_ok(&format!("MESSAGE to a client{params}"), &r, 1);
    }
    let failures = r#"sipgate_flow_failures_total{reason="ws_not_connected"}"#;
    assert_eq!(metric(&gate, failures), 2.0);
}
