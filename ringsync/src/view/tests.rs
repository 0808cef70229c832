//! Tests of the drain view: states, the zones of bgmg and ws, the rings
//! (R-ST-1, R-BG-1, R-WS-1, R-WS-3, R-SG-2, R-AA-1, R-AA-3, R-AA-4).

use super::*;
use crate::profile::{Profile, ProfileState};
use std::path::Path;
use testbed::fixture::SiteFile;

/// Three sg, a bgmg, a ws and an esg; srv-a holds one of each.
fn site() -> String {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    SiteFile::new("t")
        .sgs(&[("a", local(5001)), ("b", local(5002)), ("c", local(5003))])
        .pool("bgmg", "ng", &[("a", local(6001))])
        .instance_with("ws-a", "ws", "srv-a", "")
        .pool("esg", "sip", &[("a", local(5011))])
        .text()
        .to_owned()
}

fn config() -> Arc<SiteConfig> {
    Arc::new(SiteConfig::from_str_at(&site(), Path::new("/t/site.toml")).unwrap())
}

fn drain(servers: &[&str]) -> ProfileSet {
    ProfileSet {
        revision: 1,
        profiles: vec![Profile {
            id: "p-1".into(),
            name: "d".into(),
            description: String::new(),
            revision: 0,
            servers: servers.iter().map(|s| s.to_string()).collect(),
            state: ProfileState::Active,
        }],
    }
}

fn keys() -> impl Iterator<Item = String> {
    (0..5000).map(|i| format!("call-{i}@host"))
}

#[test]
fn r_st_1_states() {
    let c = config();
    let h = [
        Health::Up,
        Health::Down,
        Health::Down,
        Health::Up,
        Health::Up,
        Health::Unknown,
    ];
    let w = [Some(5), None, None, None, None, Some(0)];
    let v = DrainView::build(c.clone(), &drain(&["srv-a", "srv-b"]), &h, &w);
    let states: Vec<_> = v.instances().iter().map(|i| i.state).collect();
    use InstanceState::*;
    // sg-a draining with work, sg-b drain+down, sg-c normal+down,
    // bgmg/ws never drained (R-BG-1, R-WS-1), esg-a drained (work 0).
    assert_eq!(states, [Draining, DrainingDown, Down, Up, Up, Drained]);
    let w2 = [None; 6];
    let v = DrainView::build(c, &drain(&["srv-a"]), &[], &w2);
    assert_eq!(
        v.instances()[0].state,
        Draining,
        "unknown work: still draining"
    );
    assert_eq!(
        serde_json::to_string(&InstanceState::DrainingDown).unwrap(),
        "\"draining_down\""
    );
}

#[test]
fn r_bg_1_r_ws_1_never_draining() {
    let v = DrainView::build(config(), &drain(&["srv-a"]), &[], &[]);
    assert!(v.is_draining(0));
    assert!(!v.is_draining(v.index_of("bgmg-a").unwrap()));
    assert!(!v.is_draining(v.index_of("ws-a").unwrap()));
    assert!(!v.is_draining(99));
    assert_eq!(v.drain_zone().len(), 1);
}

/// R-WS-3 beside R-WS-1: with a ws pool in front of them, a ws goes
/// with its server (no new connections, `draining` until its open ones
/// close) and the pool picks from the normal-zone ones by a ring.
#[test]
fn r_ws_3_a_pooled_ws_goes_with_its_server() {
    let pooled = site().replace(
        "service = \"ws\"\nserver = \"srv-a\"\n",
        "service = \"ws\"\nserver = \"srv-a\"\nws = \"127.0.0.1:8001\"\n\
         [[instance]]\nid = \"ws-b\"\nservice = \"ws\"\nserver = \"srv-b\"\nws = \"127.0.0.1:8002\"\n",
    ) + "[[listener]]\nname = \"web\"\nbind = \"127.0.0.1:8443\"\ntransports = [\"ws\"]\n\
         mode = \"ws_pool\"\npool = \"ws\"\nleg = \"subscriber\"\n";
    let c = Arc::new(SiteConfig::from_str_at(&pooled, Path::new("/t/site.toml")).unwrap());
    let v = DrainView::build(c.clone(), &drain(&["srv-a"]), &[], &[]);
    let (a, b) = (v.index_of("ws-a").unwrap(), v.index_of("ws-b").unwrap());
    assert!(v.is_draining(a));
    assert!(!v.is_draining(v.index_of("bgmg-a").unwrap()), "R-BG-1");
    assert_eq!(v.ring(&Service::Ws).unwrap().members(), [b]);
    assert_eq!(v.instances()[a].state, InstanceState::Draining);
    let mut w = vec![None; c.instances.len()];
    w[a] = Some(0);
    let v = DrainView::build(c.clone(), &drain(&["srv-a"]), &[], &w);
    assert_eq!(v.instances()[a].state, InstanceState::Drained);
    let v = DrainView::build(c, &drain(&[]), &[], &[]);
    assert_eq!(v.ring(&Service::Ws).unwrap().members(), [a, b]);
}

#[test]
fn r_sg_2_other_normal_up() {
    let c = config();
    let v = DrainView::build(c.clone(), &drain(&["srv-a"]), &[], &[]);
    assert!(
        v.other_normal_up(0),
        "sg-b, sg-c are normal, unknown health counts as up"
    );
    let down = [Health::Unknown, Health::Down, Health::Down];
    let v = DrainView::build(c.clone(), &drain(&["srv-a"]), &down, &[]);
    assert!(!v.other_normal_up(0), "the others are down");
    let v = DrainView::build(c, &drain(&["srv-a"]), &[], &[]);
    assert!(!v.other_normal_up(5), "esg-a is the only esg");
    assert!(!v.other_normal_up(99));
}

#[test]
fn r_aa_1_draining_member_leaves_the_ring() {
    let c = config();
    let v = DrainView::build(c.clone(), &drain(&["srv-a"]), &[], &[]);
    assert_eq!(v.ring(&Service::Sg).unwrap().members(), [1, 2]);
    for k in keys() {
        assert_ne!(v.pick(&Service::Sg, k.as_bytes()), Some(0));
    }
    // Down members leave it too.
    let v = DrainView::build(c, &drain(&["srv-a"]), &[Health::Up, Health::Down], &[]);
    assert_eq!(v.ring(&Service::Sg).unwrap().members(), [2]);
    assert_eq!(
        v.pick(&Service::Ws, b"k"),
        None,
        "ws has no ring without a ws pool"
    );
    assert_eq!(v.pick(&Service::Mg, b"k"), None, "no mg configured");
}

#[test]
fn r_aa_4_all_draining_still_served() {
    let c = config();
    let v = DrainView::build(c.clone(), &drain(&["srv-a", "srv-b", "srv-c"]), &[], &[]);
    assert_eq!(v.ring(&Service::Sg).unwrap().members(), [0, 1, 2]);
    assert!(v.pick(&Service::Sg, b"k").is_some());
    // Draining and one down: the non-down draining ones serve.
    let h = [Health::Down];
    let v = DrainView::build(c.clone(), &drain(&["srv-a", "srv-b", "srv-c"]), &h, &[]);
    assert_eq!(v.ring(&Service::Sg).unwrap().members(), [1, 2]);
    // Everything down: all members rather than nothing.
    let h = [Health::Down; 3];
    let v = DrainView::build(c, &ProfileSet::default(), &h, &[]);
    assert_eq!(v.ring(&Service::Sg).unwrap().members(), [0, 1, 2]);
    // The single esg, draining, still takes new work.
    let v = DrainView::build(config(), &drain(&["srv-a"]), &[], &[]);
    assert_eq!(v.pick(&Service::Esg, b"k"), Some(5));
}

#[test]
fn r_aa_3_lifting_the_drain_brings_the_old_keys_back() {
    let c = config();
    let before = DrainView::build(c.clone(), &ProfileSet::default(), &[], &[]);
    let during = DrainView::build(c.clone(), &drain(&["srv-b"]), &[], &[]);
    let after = DrainView::build(c, &ProfileSet::default(), &[], &[]);
    let mut owned_by_b = 0;
    for k in keys() {
        let k = k.as_bytes();
        let b = before.pick(&Service::Sg, k);
        let d = during.pick(&Service::Sg, k);
        if b == Some(1) {
            owned_by_b += 1;
            assert_ne!(d, Some(1));
        } else {
            assert_eq!(b, d, "R-AA-2: keys of other members stay");
        }
        assert_eq!(
            after.pick(&Service::Sg, k),
            b,
            "R-AA-3: exactly the old keys"
        );
    }
    assert!(owned_by_b > 1000);
}
