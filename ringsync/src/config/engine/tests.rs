//! `[[engine]]` parsing and its errors (R-EX-1).

use super::{EngineKind, RuntimeAddress};
use crate::config::{ConfigError, Service, SiteConfig};
use std::path::Path;

/// Two sg and an mg, where the engines below point.
fn site() -> String {
    let at = |s: &str| s.parse().unwrap();
    testbed::fixture::SiteFile::new("e")
        .servers(&["srv-a", "srv-b"])
        .pool(
            "sg",
            "sip",
            &[("a", at("127.0.1.1:5060")), ("b", at("127.0.1.2:5060"))],
        )
        .pool("mg", "ng", &[("a", at("127.0.3.1:22222"))])
        .text()
        .to_owned()
}

const KAM: &str = r#"
[[engine]]
name = "kam"
kind = "kamailio-dispatcher"
url = "http://127.0.0.1:5071/RPC"
sets = { sg = 1 }
destinations = { sg-b = "sip:127.0.1.2:5060;transport=tcp" }
"#;

const HAP: &str = r#"
[[engine]]
name = "hap"
kind = "haproxy"
address = "127.0.0.1:9999"
backends = { sg = "be_sg" }
servers = { sg-a = "s1" }
resync_ms = 500
"#;

fn load(text: &str) -> Result<SiteConfig, ConfigError> {
    SiteConfig::from_str_at(text, Path::new("/e.toml"))
}

#[test]
fn r_ex_1_engines_parse_with_their_defaults() {
    let site = site();
    let c = load(&format!("{site}{KAM}{HAP}")).unwrap();
    assert_eq!(c.engines.len(), 2);
    let EngineKind::KamailioDispatcher {
        addr,
        path,
        sets,
        destinations,
    } = &c.engines[0].kind
    else {
        panic!("{:?}", c.engines[0]);
    };
    assert_eq!(addr.to_string(), "127.0.0.1:5071");
    assert_eq!(path, "/RPC");
    assert_eq!(sets.get(&Service::Sg), Some(&1));
    // The default is the instance's sip address; the named one wins.
    assert_eq!(destinations["sg-a"], "sip:127.0.1.1:5060");
    assert_eq!(destinations["sg-b"], "sip:127.0.1.2:5060;transport=tcp");
    assert_eq!(c.engines[0].resync_ms, super::DEFAULT_RESYNC_MS);
    let EngineKind::Haproxy {
        address,
        backends,
        servers,
    } = &c.engines[1].kind
    else {
        panic!("{:?}", c.engines[1]);
    };
    assert_eq!(
        *address,
        RuntimeAddress::Tcp("127.0.0.1:9999".parse().unwrap())
    );
    assert_eq!(backends[&Service::Sg], "be_sg");
    assert_eq!(servers["sg-a"], "s1");
    assert_eq!(servers["sg-b"], "sg-b");
    assert_eq!(c.engines[1].resync_ms, 500);
    let unix = HAP.replace("127.0.0.1:9999", "/run/haproxy/admin.sock");
    let c = load(&format!("{site}{unix}")).unwrap();
    let EngineKind::Haproxy { address, .. } = &c.engines[0].kind else {
        panic!()
    };
    assert_eq!(
        *address,
        RuntimeAddress::Unix("/run/haproxy/admin.sock".into())
    );
}

#[test]
fn r_ex_1_bad_engines_name_the_field_and_line() {
    let site = site();
    let cases = [
        (
            KAM.replace("kamailio-dispatcher", "opensips"),
            "engine[0].kind",
            "kind =",
        ),
        (
            KAM.replace("http://127.0.0.1:5071/RPC", "https://x/RPC"),
            "engine[0].url",
            "url =",
        ),
        (
            KAM.replace("127.0.0.1:5071", "kamailio:5071"),
            "engine[0].url",
            "url =",
        ),
        (
            KAM.replace("sg = 1", "zz = 1"),
            "engine[0].sets.zz",
            "sets =",
        ),
        (
            KAM.replace("sg = 1", "sg = 0"),
            "engine[0].sets.sg",
            "sets =",
        ),
        (
            HAP.replace("sg = \"be_sg\"", "bgmg = \"b\""),
            "engine[0].backends.bgmg",
            "backends =",
        ),
        (
            KAM.replace("sg-b =", "mg-a ="),
            "engine[0].destinations.mg-a",
            "destinations =",
        ),
        (
            KAM.replace("sg-b =", "nope ="),
            "engine[0].destinations.nope",
            "destinations =",
        ),
        (
            format!("{KAM}backends = {{ sg = \"b\" }}\n"),
            "engine[0].backends",
            "backends =",
        ),
        (
            HAP.replace("127.0.0.1:9999", "admin.sock"),
            "engine[0].address",
            "address =",
        ),
        (
            HAP.replace("be_sg", "be sg"),
            "engine[0].backends.sg",
            "backends =",
        ),
        (
            HAP.replace("resync_ms = 500", "resync_ms = 0"),
            "engine[0].resync_ms",
            "resync_ms =",
        ),
        (
            HAP.replace("name = \"hap\"", "name = \"kam\"") + KAM,
            "engine[1].name",
            "name = \"kam\"",
        ),
    ];
    for (engines, field, line_starts) in cases {
        let text = format!("{site}{engines}");
        let e = load(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.to_string().starts_with("/e.toml:"), "{e}");
        let want: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with(line_starts))
            .map(|(i, _)| i + 1)
            .collect();
        assert!(want.contains(&e.line.unwrap()), "{e} (lines {want:?})");
    }
    // A required field missing names the field, placed at its table.
    let e = load(&format!(
        "{site}{}",
        KAM.replace("url = \"http://127.0.0.1:5071/RPC\"\n", "")
    ))
    .unwrap_err();
    assert_eq!(e.field, "engine[0].url", "{e}");
    // An instance with no sip address has no default destination.
    let e = load(&format!(
        "{site}{}",
        KAM.replace("sg = 1", "mg = 1").replace(
            "destinations = { sg-b = \"sip:127.0.1.2:5060;transport=tcp\" }\n",
            ""
        )
    ))
    .unwrap_err();
    assert_eq!(e.field, "engine[0].destinations.mg-a", "{e}");
    let e = load(&format!("{site}{KAM}bogus = 1\n")).unwrap_err();
    assert!(e.message.contains("bogus"), "{e}");
}
