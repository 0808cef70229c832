//! The site file's errors and defaults, as an operator meets them.

use super::*;
use std::path::{Path, PathBuf};

mod sections;
mod ws_pool;

pub(super) const GOOD: &str = r#"
[site]
name = "t1"

[[server]]
name = "srv-a"
[[server]]
name = "srv-b"

[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.0.1:5080"
exceptions = [{ source = "10.0.0.0/8" }, { aor = "sip:112@example.com" }]

[[instance]]
id = "sg-b"
service = "sg"
server = "srv-b"
sip = "127.0.0.2:5080"

[[instance]]
id = "esg-a"
service = "esg"
server = "srv-a"
sip = "127.0.0.3:5080"

[[instance]]
id = "bill-a"
service = "billing"
server = "srv-a"
[[instance]]
id = "bill-b"
service = "billing"
server = "srv-b"

[[account]]
name = "carrier-x"
multi_instance = true
match = { source = ["192.0.2.0/24"], domain = ["carrier-x.example"] }

[[account]]
name = "carrier-y"
home = "esg-a"
match = { domain = ["y.example"] }

[[ap_group]]
name = "billing"
members = ["bill-a", "bill-b"]
home = "bill-a"

[[listener]]
name = "subscribers"
bind = "127.0.0.1:5060"
mode = "balance"
pool = "sg"
leg = "subscriber"

[[listener]]
name = "sg-a-guard"
bind = "127.0.0.1:5061"
transports = ["udp"]
mode = "guard"
instance = "sg-a"
leg = "subscriber"
"#;

pub(super) fn load(text: &str) -> Result<SiteConfig, ConfigError> {
    SiteConfig::from_str_at(text, Path::new("/etc/site/t1.toml"))
}

#[test]
fn good_site_loads_with_defaults() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.site.name, "t1");
    assert_eq!(c.instances.len(), 5);
    assert_eq!(c.instances[3].service, Service::Other("billing".into()));
    assert_eq!(c.timers, Timers::default());
    assert_eq!(
        c.store,
        StoreConfig::Embedded {
            path: PathBuf::from("/etc/site/t1.profiles.json")
        }
    );
    assert_eq!(
        c.listeners[0].transports,
        vec![Transport::Udp, Transport::Tcp]
    );
    assert_eq!(
        c.listeners[0].mode,
        ListenerMode::Balance { pool: Service::Sg }
    );
    assert_eq!(
        c.listeners[1].mode,
        ListenerMode::Guard {
            instance: "sg-a".into()
        }
    );
    assert_eq!(c.listeners[1].advertise, c.listeners[1].bind);
    assert_eq!(c.instances[0].exceptions.len(), 2);
    assert_eq!(c.instance("sg-b").unwrap().server, "srv-b");
    assert_eq!(c.instances_of(&Service::Sg).count(), 2);
    assert!(!c.accounts[1].multi_instance);
}

#[test]
fn unknown_server_names_file_line_and_field() {
    // R-PR-1's sibling for config: a reference to an unknown server is refused.
    let bad = GOOD.replace(
        "server = \"srv-b\"\nsip = \"127.0.0.2:5080\"",
        "server = \"srv-z\"\nsip = \"127.0.0.2:5080\"",
    );
    let e = load(&bad).unwrap_err();
    assert_eq!(e.field, "instance[1].server");
    assert!(e.message.contains("srv-z"), "{e}");
    let expected = bad.lines().position(|l| l == "server = \"srv-z\"").unwrap() + 1;
    assert_eq!(e.line, Some(expected));
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("/etc/site/t1.toml:{expected}:")),
        "{shown}"
    );
    assert!(shown.contains("instance[1].server"), "{shown}");
}

#[test]
fn syntax_error_has_a_line() {
    let e = load("[site]\nname = \"x\"\n[[server]]\nname = 3\n").unwrap_err();
    assert_eq!(e.line, Some(4));
    let e = load("[site]\nname = \"x\"\nbogus = 1\n").unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("bogus"), "{e}");
}

#[test]
fn semantic_errors() {
    let cases = [
        (
            GOOD.replace("pool = \"sg\"", "pool = \"mg\""),
            "listener[0].pool",
        ),
        (
            GOOD.replace("instance = \"sg-a\"", "instance = \"nope\""),
            "listener[1].instance",
        ),
        (
            GOOD.replace("home = \"esg-a\"", "home = \"sg-a\""),
            "account[1].home",
        ),
        (
            GOOD.replace("home = \"bill-a\"", "home = \"sg-a\""),
            "ap_group[0].home",
        ),
        (
            GOOD.replace("mode = \"guard\"", "mode = \"gaurd\""),
            "listener[1].mode",
        ),
        (
            GOOD.replace("id = \"sg-b\"", "id = \"sg-a\""),
            "instance[1].id",
        ),
        (
            GOOD.replace("id = \"sg-b\"", "id = \"sg b\""),
            "instance[1].id",
        ),
        (
            GOOD.replace("bind = \"127.0.0.1:5061\"", "bind = \"127.0.0.1:5060\""),
            "listener[1].bind",
        ),
        (
            GOOD.replace("{ aor = \"sip:112@example.com\" }", "{ }"),
            "instance[0].exceptions[1]",
        ),
        (
            GOOD.replace("name = \"t1\"", "name = \"t1\"\nsecret = \"short\""),
            "site.secret",
        ),
        (
            GOOD.replace(
                "name = \"t1\"",
                "name = \"t1\"\nserver_header = \"x\\r\\nVia: 1\"",
            ),
            "site.server_header",
        ),
    ];
    for (text, field) in cases {
        let e = load(&text).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}

#[test]
fn site_server_header_default_value_and_empty() {
    assert_eq!(load(GOOD).unwrap().site.server_header, None);
    let set = GOOD.replace("name = \"t1\"", "name = \"t1\"\nserver_header = \" edge \"");
    assert_eq!(
        load(&set).unwrap().site.server_header.as_deref(),
        Some("edge")
    );
    let empty = GOOD.replace("name = \"t1\"", "name = \"t1\"\nserver_header = \"\"");
    assert_eq!(
        load(&empty).unwrap().site.server_header.as_deref(),
        Some("")
    );
}

#[test]
fn instance_sources_r_sec_1() {
    let with = |a: &str, b: &str| {
        GOOD.replace(
            "sip = \"127.0.0.1:5080\"\n",
            &format!("sip = \"127.0.0.1:5080\"\nsources = {a}\n"),
        )
        .replace(
            "sip = \"127.0.0.2:5080\"\n",
            &format!("sip = \"127.0.0.2:5080\"\nsources = {b}\n"),
        )
    };
    let c = load(&with(
        r#"["10.0.0.5/32", "fd00::/64"]"#,
        r#"["10.0.0.6/32"]"#,
    ))
    .unwrap();
    assert_eq!(c.instances[0].sources.len(), 2);
    assert_eq!(
        c.instances[1].sources,
        ["10.0.0.6/32".parse::<IpNet>().unwrap()]
    );
    assert!(c.instances[2].sources.is_empty(), "default: none");
    for (text, field, says) in [
        // One network in two instances: a sender would be two instances.
        (
            with(r#"["10.0.0.0/24"]"#, r#"["10.0.0.6/32"]"#),
            "instance[1].sources[0]",
            "overlaps",
        ),
        (
            with(r#"["10.0.0.5/32"]"#, r#"["10.0.0.0/8"]"#),
            "instance[1].sources[0]",
            "overlaps",
        ),
        (with(r#"["not-a-net"]"#, "[]"), "", "invalid IP address"),
        (
            GOOD.replace(
                "service = \"billing\"\nserver = \"srv-a\"",
                "service = \"billing\"\nserver = \"srv-a\"\nsources = [\"10.1.0.0/16\"]",
            ),
            "instance[3].sources[0]",
            "sip",
        ),
    ] {
        let e = load(&text).unwrap_err();
        assert!(e.field.starts_with(field), "{e}");
        assert!(e.line.is_some(), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_store() {
    let text =
        format!("{GOOD}\n[store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n");
    let c = load(&text).unwrap();
    assert_eq!(
        c.store,
        StoreConfig::Etcd {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            prefix: "/drain/t1".into(),
            cache: c.path.parent().unwrap().join("t1.view-cache.json"),
        }
    );
    let c = load(&format!("{text}cache = \"/var/cache/drain/t1.json\"\n")).unwrap();
    assert!(
        matches!(c.store, StoreConfig::Etcd { cache, .. } if cache == Path::new("/var/cache/drain/t1.json"))
    );
    let e = load(&format!("{GOOD}\n[store]\ncache = \"x.json\"\n")).unwrap_err();
    assert_eq!(e.field, "store.cache");
}

/// Without ringsync's `etcd` feature (a data-plane build such as
/// `sip-gate --no-default-features`), a site on etcd is refused when it
/// is loaded, at `store.kind`, naming the feature; the rest of its
/// `[store]` is still checked first.
#[cfg(not(feature = "etcd"))]
#[test]
fn an_etcd_store_without_the_etcd_feature_is_a_config_error() {
    let text =
        format!("{GOOD}\n[store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n");
    let e = load(&text).unwrap_err();
    assert_eq!(e.field, "store.kind", "{e}");
    assert!(e.line.is_some(), "{e}");
    assert!(e.to_string().contains("`etcd` feature"), "{e}");
    let e = load(&format!("{GOOD}\n[store]\nkind = \"etcd\"\n")).unwrap_err();
    assert_eq!(e.field, "store.endpoints", "{e}");
}

#[test]
fn example_site_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/site.toml");
    let c = SiteConfig::load(&path).unwrap();
    assert!(!c.listeners.is_empty());
}

#[test]
fn r_ap_2_pace_below_a_minute_needs_the_test_switch() {
    let c = load(GOOD).unwrap();
    assert_eq!(c.timers.ap_pace_s, 60);
    assert_eq!(c.ap_groups[0].priority, DEFAULT_PRIORITY);

    let short = GOOD.replacen("[[server]]", "[timers]\nap_pace_s = 5\n\n[[server]]", 1);
    let e = load(&short).unwrap_err();
    assert_eq!(e.field, "timers.ap_pace_s");
    assert!(e.line.is_some(), "{e}");
    assert!(
        e.message.contains("below the minimum of 60 s")
            && e.message.contains("ap_test_pace_allowed"),
        "{e}"
    );

    let allowed = GOOD.replacen(
        "[[server]]",
        "[timers]\nap_pace_s = 5\nap_test_pace_allowed = true\n\n[[server]]",
        1,
    );
    assert_eq!(load(&allowed).unwrap().timers.ap_pace_s, 5);
    let zero = GOOD.replacen(
        "[[server]]",
        "[timers]\nap_pace_s = 0\nap_test_pace_allowed = true\n\n[[server]]",
        1,
    );
    assert_eq!(load(&zero).unwrap_err().message, "must be at least 1");

    let prio = GOOD.replace("home = \"bill-a\"", "home = \"bill-a\"\npriority = 7");
    assert_eq!(load(&prio).unwrap().ap_groups[0].priority, 7);
}

/// A socket address that does not parse (serde's own error, which names no
/// field) is placed at its line and named by its dotted field, wherever it
/// is: a listener's `bind`, an instance's `sip`/`ng`, `[admin]`, `[media]`,
/// `[dns]`.
#[test]
fn bad_addresses_name_their_field_and_line() {
    let cases = [
        (
            "bind = \"127.0.0.1:5061\"",
            "bind = \"localhost:5061\"",
            "listener[1].bind",
        ),
        (
            "sip = \"127.0.0.2:5080\"",
            "sip = \"sg-b.example:5080\"",
            "instance[1].sip",
        ),
        (
            "name = \"t1\"\n",
            "name = \"t1\"\n[admin]\ngate_bind = \"9091\"\n",
            "admin.gate_bind",
        ),
        (
            "name = \"t1\"\n",
            "name = \"t1\"\n[dns]\nnameservers = [\"1.1.1.1:53\", \"dns\"]\n",
            "dns.nameservers[1]",
        ),
        (
            "{ source = \"10.0.0.0/8\" }",
            "{ source = \"ten\" }",
            "instance[0].exceptions[0].source",
        ),
    ];
    for (from, to, field) in cases {
        let bad = GOOD.replacen(from, to, 1);
        assert_ne!(bad, GOOD, "{from}");
        let e = load(&bad).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        let bad_line = to.lines().last().unwrap();
        let expected = bad.lines().position(|l| l.contains(bad_line)).unwrap() + 1;
        assert_eq!(e.line, Some(expected), "{e}");
        assert!(e.to_string().contains(&format!("field `{field}`")), "{e}");
    }
    let e = load(&GOOD.replacen("bind = \"127.0.0.1:5061\"", "bind = \"localhost:5061\"", 1))
        .unwrap_err();
    assert!(e.message.contains("host names are not resolved"), "{e}");
}

/// A service that is not built in must be declared by an `[[ap_group]]`
/// listing one of its instances: a typo is refused with the nearest name,
/// a name no group uses is refused with what the names may be.
#[test]
fn an_undeclared_service_is_refused_with_the_nearest_name() {
    let bad = GOOD.replacen(
        "service = \"sg\"\nserver = \"srv-b\"",
        "service = \"sgg\"\nserver = \"srv-b\"",
        1,
    );
    let e = load(&bad).unwrap_err();
    assert_eq!(e.field, "instance[1].service");
    assert_eq!(e.message, "unknown service \"sgg\" (did you mean \"sg\"?)");
    let expected = bad.lines().position(|l| l == "service = \"sgg\"").unwrap() + 1;
    assert_eq!(e.line, Some(expected));

    let typo = GOOD.replacen(
        "service = \"billing\"\nserver = \"srv-b\"",
        "service = \"biling\"\nserver = \"srv-b\"",
        1,
    );
    let e = load(&typo).unwrap_err();
    assert_eq!(e.field, "instance[4].service", "{e}");
    assert!(e.message.contains("did you mean \"billing\""), "{e}");

    let no_group = GOOD.replace(
        "[[ap_group]]\nname = \"billing\"\nmembers = [\"bill-a\", \"bill-b\"]\nhome = \"bill-a\"\n",
        "",
    );
    assert_ne!(no_group, GOOD);
    let e = load(&no_group).unwrap_err();
    assert_eq!(e.field, "instance[3].service", "{e}");
    assert!(e.message.contains("declared by an [[ap_group]]"), "{e}");

    // An instance outside the groups is fine once a group declares its service.
    let idle = format!(
        "{GOOD}\n[[instance]]\nid = \"bill-idle\"\nservice = \"billing\"\nserver = \"srv-a\"\n"
    );
    assert!(load(&idle).is_ok());
}

#[test]
fn listener_access_and_auth_ban_defaults_values_and_errors_r_sec_3() {
    let c = load(GOOD).unwrap();
    assert!(c.listeners[1].access.is_open());
    assert!(!c.listeners[1].auth_ban.enabled());
    let with = |section: &str| format!("{GOOD}{section}");
    let c = load(&with(
        "[listener.access]\nallow = [\"10.0.0.0/8\"]\naction = \"drop\"\n\
         [listener.auth_ban]\nlimit = 5\nexempt = [\"192.0.2.0/24\"]\n",
    ))
    .unwrap();
    let l = &c.listeners[1];
    assert_eq!(l.access.action, crate::config::AccessAction::Drop);
    assert!(!l.access.admits("192.0.2.1".parse().unwrap()));
    assert_eq!(
        (l.auth_ban.limit, l.auth_ban.window_s, l.auth_ban.ban_s),
        (5, 60, 600)
    );
    let e = load(&with("[listener.auth_ban]\nlimit = 5\nban_s = 0\n")).unwrap_err();
    assert_eq!(e.field, "listener[1].auth_ban.ban_s", "{e}");
    assert!(e.line.is_some(), "{e}");
    let e = load(&with("[listener.access]\nallow = [\"not-a-net\"]\n")).unwrap_err();
    assert!(e.line.is_some(), "{e}");
}

/// R-WS-2: a `ws`/`wss` listener serves UDP beside it and no other stream
/// transport, `wss` needs `[tls]`, `ws_` fields only on such a listener;
/// its options default to path `/` and any origin.
#[test]
fn r_ws_2_ws_listener_rules() {
    let web = |transports: &str, extra: &str| {
        format!(
            "{GOOD}\n[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:8080\"\ntransports = {transports}\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n{extra}"
        )
    };
    let c = load(&web(r#"["udp", "ws"]"#, "")).unwrap();
    let l = c.listener("web").unwrap();
    let ws = l.ws.as_ref().expect("ws options");
    assert_eq!((ws.path.as_str(), ws.origins.len()), ("/", 0));
    assert!(ws.origin_allowed(None) && ws.origin_allowed(Some("https://x")));
    assert!(c.listener("subscribers").unwrap().ws.is_none());

    let c = load(&web(
        r#"["udp", "ws"]"#,
        "ws_path = \"/sip\"\nws_origins = [\"https://a.example\"]\n",
    ))
    .unwrap();
    let ws = c.listener("web").unwrap().ws.clone().unwrap();
    assert_eq!(ws.path, "/sip");
    assert!(ws.origin_allowed(Some("HTTPS://A.example")));
    assert!(!ws.origin_allowed(Some("https://b.example")));
    assert!(!ws.origin_allowed(None));

    for (transports, extra, field, says) in [
        (r#"["ws"]"#, "", "listener[2].transports", "needs \"udp\""),
        (
            r#"["udp", "tcp", "ws"]"#,
            "",
            "listener[2].transports",
            "another stream transport",
        ),
        (
            r#"["udp", "ws", "wss"]"#,
            "",
            "listener[2].transports",
            "another stream transport",
        ),
        (r#"["udp", "wss"]"#, "", "tls", "\"wss\""),
        (
            r#"["udp", "ws"]"#,
            "ws_path = \"sip\"\n",
            "listener[2].ws_path",
            "start with",
        ),
        (
            r#"["udp", "tcp"]"#,
            "ws_path = \"/sip\"\n",
            "listener[2].ws_path",
            "only a listener",
        ),
        (
            r#"["udp"]"#,
            "ws_origins = []\n",
            "listener[2].ws_origins",
            "only a listener",
        ),
    ] {
        let e = load(&web(transports, extra)).unwrap_err();
        assert_eq!(e.field, field, "{transports} {extra}: {e}");
        assert!(e.message.contains(says), "{transports} {extra}: {e}");
    }
}

/// A listener names what it fronts by one field, `pool` (balance,
/// ws_pool) or `instance` (guard), never both: each refusal names the
/// mode and the field (`Validator::target`).
#[test]
fn a_listener_names_its_pool_or_its_instance_and_not_both() {
    let with = |lines: &str| {
        format!(
            "{GOOD}\n[[listener]]\nname = \"x\"\nbind = \"127.0.0.1:5099\"\nleg = \"subscriber\"\n{lines}\n"
        )
    };
    for (lines, field, says) in [
        (
            "mode = \"balance\"",
            "listener[2].pool",
            "a balance listener needs `pool = \"<service>\"`",
        ),
        (
            "mode = \"balance\"\npool = \"sg\"\ninstance = \"sg-a\"",
            "listener[2].instance",
            "a balance listener takes `pool`, not `instance`",
        ),
        (
            "mode = \"guard\"",
            "listener[2].instance",
            "a guard listener needs `instance = \"<id>\"`",
        ),
        (
            "mode = \"guard\"\ninstance = \"sg-a\"\npool = \"sg\"",
            "listener[2].pool",
            "a guard listener takes `instance`, not `pool`",
        ),
        (
            "mode = \"ws_pool\"\npool = \"ws\"\ninstance = \"sg-a\"",
            "listener[2].instance",
            "a ws_pool listener takes `pool`, not `instance`",
        ),
    ] {
        let e = load(&with(lines)).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            (field, says),
            "{lines}"
        );
    }
    assert!(load(&with("mode = \"guard\"\ninstance = \"sg-b\"")).is_ok());
}
