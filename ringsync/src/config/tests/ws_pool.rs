//! `mode = "ws_pool"` listeners (R-WS-3) and the `ws` address of `ws`
//! instances: what loads, and each refusal naming its field.

use super::super::*;
use super::{load, GOOD};

/// GOOD with two `ws` instances (`extra_a` added to ws-a) and a ws pool
/// listener (`listener` lines added).
fn pooled(extra_a: &str, listener: &str) -> String {
    format!(
        "{GOOD}\n[[instance]]\nid = \"ws-a\"\nservice = \"ws\"\nserver = \"srv-a\"\n{extra_a}\n\
         [[instance]]\nid = \"ws-b\"\nservice = \"ws\"\nserver = \"srv-b\"\nws = \"127.0.0.22:8080\"\n\
         [[listener]]\nname = \"web\"\nbind = \"127.0.0.1:8443\"\nmode = \"ws_pool\"\nleg = \"subscriber\"\n{listener}"
    )
}

const A: &str = "ws = \"127.0.0.21:8080\"";

/// R-WS-3: a ws pool loads with its upstream, its instances' addresses,
/// and the site says it is pooled; without one, `ws` instances need no
/// address and the site is not pooled (R-WS-1).
#[test]
fn r_ws_3_ws_pool_listener_rules() {
    let c = load(&pooled(
        A,
        "pool = \"ws\"\ntransports = [\"ws\"]\nws_path = \"/sip\"",
    ))
    .unwrap();
    let l = c.listener("web").unwrap();
    assert_eq!(
        l.mode,
        ListenerMode::WsPool {
            upstream_tls: false
        }
    );
    assert_eq!(l.ws.as_ref().unwrap().path, "/sip");
    assert_eq!(
        c.instance("ws-a").unwrap().ws,
        "127.0.0.21:8080".parse().ok()
    );
    assert!(c.ws_pooled());
    assert!(!load(GOOD).unwrap().ws_pooled());

    // `ws_upstream = "wss"` with [tls] ca: the files must load.
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    for (file, pem) in [("c.pem", cert.pem()), ("k.pem", key.serialize_pem())] {
        std::fs::write(dir.path().join(file), pem).unwrap();
    }
    let text = pooled(
        A,
        "pool = \"ws\"\ntransports = [\"wss\"]\nws_upstream = \"wss\"",
    ) + "\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"c.pem\"\n";
    let c = SiteConfig::from_str_at(&text, &dir.path().join("site.toml")).unwrap();
    let mode = &c.listener("web").unwrap().mode;
    assert_eq!(*mode, ListenerMode::WsPool { upstream_tls: true });

    for (text, field, says) in [
        (pooled(A, "transports = [\"ws\"]"), "listener[2].pool", "needs `pool = \"ws\"`"),
        (pooled(A, "pool = \"sg\"\ntransports = [\"ws\"]"), "listener[2].pool", "not `sg`"),
        (pooled(A, "pool = \"ws\"\ntransports = [\"udp\", \"ws\"]"), "listener[2].transports", "exactly one"),
        (pooled(A, "pool = \"ws\"\ntransports = [\"tcp\"]"), "listener[2].transports", "exactly one"),
        (pooled("", "pool = \"ws\"\ntransports = [\"ws\"]"), "listener[2].pool", "`ws-a` has no `ws` address"),
        (pooled(A, "pool = \"ws\"\ntransports = [\"ws\"]\nws_upstream = \"h2\""), "listener[2].ws_upstream", "expected"),
        (pooled(A, "pool = \"ws\"\ntransports = [\"ws\"]\nws_upstream = \"wss\""), "listener[2].ws_upstream", "[tls] ca"),
        (format!("{GOOD}\n[[listener]]\nname = \"w\"\nbind = \"127.0.0.1:8080\"\ntransports = [\"udp\", \"ws\"]\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\nws_upstream = \"ws\"\n"),
            "listener[2].ws_upstream", "only a `mode = \"ws_pool\"`"),
        (GOOD.replace("sip = \"127.0.0.2:5080\"", "sip = \"127.0.0.2:5080\"\nws = \"127.0.0.2:8080\""),
            "instance[1].ws", "only a `ws` instance"),
    ] {
        let e = load(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
}
