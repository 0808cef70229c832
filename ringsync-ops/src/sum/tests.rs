//! Tests of the sum of work reports: counts, unknowns (R-ST-2, R-ST-3),
//! and the report's JSON as the operator plane reads it.

use super::*;
use ringsync::config::{SiteConfig, Transport};
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::work::{InstanceWork, NodeKind, Unknown, WorkReport};
use std::path::Path;
use std::sync::Arc;
use testbed::fixture::{Mode, SiteFile};

/// sg-a and sg-b, and mg-a beside sg-a.
fn site() -> String {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    SiteFile::new("t")
        .servers(&["srv-a", "srv-b"])
        .pool("sg", "sip", &[("a", local(5071)), ("b", local(5072))])
        .pool("mg", "ng", &[("a", local(22221))])
        .text()
        .to_owned()
}

fn view(drain_a: bool) -> DrainView {
    let config = SiteConfig::from_str_at(&site(), Path::new("/t.toml")).unwrap();
    let state = if drain_a {
        ProfileState::Active
    } else {
        ProfileState::Inactive
    };
    DrainView::build(Arc::new(config), &profile_a(state), &[], &[])
}

/// One profile `a`, draining srv-a when `state` is active.
fn profile_a(state: ProfileState) -> ProfileSet {
    ProfileSet {
        revision: 1,
        profiles: vec![Profile {
            id: "p-1".into(),
            name: "a".into(),
            description: String::new(),
            revision: 0,
            servers: vec!["srv-a".into()],
            state,
        }],
    }
}

fn report(node: &str, kind: NodeKind, work: &[(&str, InstanceWork)]) -> NodeOutcome {
    NodeOutcome {
        node: node.into(),
        kind,
        report: Ok(WorkReport {
            site_hash: String::new(),
            backups: Vec::new(),
            run: None,
            site: "t".into(),
            node: node.into(),
            kind,
            scope: "test".into(),
            started_ms: 1,
            generated_ms: 2,
            revision: 1,
            generation: 1,
            instances: work
                .iter()
                .map(|(id, w)| ((*id).to_owned(), w.clone()))
                .collect(),
        }),
    }
}

fn counts(dialogs: u64, registrations: u64) -> InstanceWork {
    InstanceWork {
        health: Health::Up,
        counts: WorkCounts {
            dialogs,
            registrations,
            ..WorkCounts::default()
        },
        ..InstanceWork::default()
    }
}

fn find<'a>(s: &'a [InstanceStatus], id: &str) -> &'a InstanceStatus {
    s.iter().find(|i| i.id == id).unwrap()
}

#[test]
fn r_st_3_drained_only_when_every_node_says_zero() {
    let v = view(true);
    let g1 = report("g1", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let g2 = report("g2", NodeKind::Gate, &[("sg-a", counts(1, 2))]);
    let s = sum(&v, &[g1.clone(), g2]);
    let a = find(&s, "sg-a");
    assert_eq!(a.work, Some(3));
    assert_eq!(a.counts.registrations, 2);
    assert_eq!(a.state, InstanceState::Draining);
    assert_eq!(a.nodes, ["g1", "g2"]);

    let g2 = report("g2", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let s = sum(&v, &[g1, g2]);
    assert_eq!(find(&s, "sg-a").state, InstanceState::Drained);
}

#[test]
fn r_st_3_a_node_routing_by_an_older_revision_cannot_say_drained() {
    // The view summed is at revision 1 (the drain of srv-a); g2 still
    // routes by revision 0, before the drain: its zero may be followed by
    // a new call it sends to sg-a, so sg-a stays draining with the reason
    // (the chaos run's counter-example at seed 2026).
    let v = view(true);
    let g1 = report("g1", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let mut g2 = report("g2", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    if let Ok(r) = &mut g2.report {
        r.revision = 0;
    }
    let s = sum(&v, &[g1.clone(), g2]);
    let a = find(&s, "sg-a");
    assert_eq!(a.state, InstanceState::Draining);
    assert_eq!(a.work, None);
    assert!(
        a.unknown
            .iter()
            .any(|u| u.contains("g2") && u.contains("revision 0, not yet 1")),
        "{:?}",
        a.unknown
    );
    // Once it routes by the drain's revision, its zero counts.
    let g2 = report("g2", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    assert_eq!(
        find(&sum(&v, &[g1, g2]), "sg-a").state,
        InstanceState::Drained
    );
}

#[test]
fn r_st_3_a_silent_or_unsure_node_keeps_it_draining_with_the_reason() {
    let v = view(true);
    let g1 = report("g1", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let gone = NodeOutcome {
        node: "g2".into(),
        kind: NodeKind::Gate,
        report: Err("lease expired at 12:00:03".into()),
    };
    let s = sum(&v, &[g1.clone(), gone]);
    let a = find(&s, "sg-a");
    assert_eq!(a.work, None);
    assert_eq!(a.state, InstanceState::Draining);
    assert!(a.unknown[0].contains("g2") && a.unknown[0].contains("lease expired"));

    let restarted = report(
        "g2",
        NodeKind::Gate,
        &[(
            "sg-a",
            InstanceWork {
                unknown: Some(Unknown {
                    reason: "restarted".into(),
                    until_ms: Some(99),
                }),
                ..counts(0, 0)
            },
        )],
    );
    let s = sum(&v, &[g1.clone(), restarted]);
    let a = find(&s, "sg-a");
    assert_eq!(
        (a.state, a.known_at_ms),
        (InstanceState::Draining, Some(99))
    );

    // A node that does not list the instance does not vouch for it.
    let silent = report("g2", NodeKind::Gate, &[]);
    let s = sum(&v, &[g1, silent]);
    assert_eq!(find(&s, "sg-a").state, InstanceState::Draining);
}

#[test]
fn r_st_3_nodes_count_only_their_services() {
    let v = view(true);
    let g = report("g1", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let s = sum(&v, std::slice::from_ref(&g));
    // No media controller reports: the mg is never drained on a gate's
    // word; nobody answers for it, so it is unknown (R-ST-4).
    let mg = find(&s, "mg-a");
    assert_eq!(mg.state, InstanceState::Unknown);
    assert!(mg.unknown[0].contains("no node"));
    let m = report(
        "m1",
        NodeKind::MediaCtl,
        &[(
            "mg-a",
            InstanceWork {
                counts: WorkCounts {
                    calls: 0,
                    ..WorkCounts::default()
                },
                ..InstanceWork::default()
            },
        )],
    );
    let s = sum(&v, &[g, m]);
    assert_eq!(find(&s, "mg-a").state, InstanceState::Drained);
    // Normal zone, and no node answers for it: unknown, not up (R-ST-4).
    assert_eq!(find(&s, "sg-b").state, InstanceState::Unknown);
}

#[test]
fn eta_and_health_merge() {
    let v = view(true);
    let w = |regs: u64, calls: u64, health| InstanceWork {
        health,
        eta: Eta {
            registrations_until_ms: Some(regs),
            calls_until_ms: Some(calls),
        },
        ..counts(1, 1)
    };
    let g1 = report("g1", NodeKind::Gate, &[("sg-a", w(10, 50, Health::Up))]);
    let g2 = report("g2", NodeKind::Gate, &[("sg-a", w(30, 20, Health::Down))]);
    let s = sum(&v, &[g1, g2]);
    let a = find(&s, "sg-a");
    assert_eq!(a.eta.registrations_until_ms, Some(30));
    assert_eq!(a.eta.calls_until_ms, Some(50));
    assert_eq!(a.eta.until_ms(), Some(50));
    assert_eq!(a.health, Health::Down);
    assert_eq!(a.state, InstanceState::DrainingDown);
}

#[test]
fn report_json_round_trips_and_tolerates_missing_fields() {
    let r = report("g1", NodeKind::Gate, &[("sg-a", counts(2, 3))]);
    let r = r.report.unwrap();
    let text = serde_json::to_string(&r).unwrap();
    let back: WorkReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
    let minimal = r#"{"site":"t","node":"n","kind":"media_ctl","scope":"","started_ms":0,
        "generated_ms":0,"revision":0,"generation":0,"instances":{"mg-a":{}}}"#;
    let m: WorkReport = serde_json::from_str(minimal).unwrap();
    assert_eq!(m.instances["mg-a"].counts.total(), 0);
}

/// An instance a gate cannot reach over TCP stays `up` (its health probe
/// goes over UDP) and carries the note, with the node that saw it; a report
/// without the field (an older gate) means none.
#[test]
fn unreachable_transports_are_kept_per_node_and_leave_the_state_alone() {
    let v = view(false);
    let down = Unreachable {
        transport: Transport::Tcp,
        reason: "connect to 127.0.0.1:5071: Connection refused".into(),
        since_ms: 10,
        until_ms: 30_010,
    };
    let w = InstanceWork {
        unreachable: vec![down.clone()],
        ..counts(0, 0)
    };
    let g1 = report("g1", NodeKind::Gate, &[("sg-a", w)]);
    let g2 = report("g2", NodeKind::Gate, &[("sg-a", counts(0, 0))]);
    let s = sum(&v, &[g1.clone(), g2]);
    let a = find(&s, "sg-a");
    assert_eq!(a.state, InstanceState::Up);
    assert_eq!(
        a.unreachable,
        [UnreachableFrom {
            node: "g1".into(),
            what: down
        }]
    );
    let json = serde_json::to_value(a).unwrap();
    assert_eq!(json["unreachable"][0]["node"], "g1");
    assert_eq!(json["unreachable"][0]["transport"], "tcp");
    assert_eq!(json["unreachable"][0]["until_ms"], 30_010);
    let b = serde_json::to_value(find(&s, "sg-b")).unwrap();
    assert!(b.get("unreachable").is_none(), "absent when none: {b}");
    let old = r#"{"health":"up","counts":{}}"#;
    let w: InstanceWork = serde_json::from_str(old).unwrap();
    assert!(w.unreachable.is_empty());
}

/// R-ST-4 with R-WS-3 (issue 37): a pooled `ws` has no probe; in the
/// normal zone one whose health no gate knows is `unknown`, not `up`, and
/// `up` once a gate says so; in the drain zone its work (always known)
/// says `drained`.
#[test]
fn r_st_4_a_pooled_ws_nobody_reached_is_unknown_not_up() {
    let local = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let site = SiteFile::new("t")
        .servers(&["srv-a", "srv-b"])
        .pool("ws", "ws", &[("a", local(8081)), ("b", local(8082))])
        .listener(
            "web",
            local(8443),
            Mode::WsPool("ws"),
            "subscriber",
            "transports = [\"ws\"]\nws_path = \"/sip\"",
        )
        .text()
        .to_owned();
    let config = SiteConfig::from_str_at(&site, Path::new("/t.toml")).unwrap();
    let v = DrainView::build(Arc::new(config), &profile_a(ProfileState::Active), &[], &[]);
    let unseen = InstanceWork::default();
    let g = report(
        "g1",
        NodeKind::Gate,
        &[("ws-a", unseen.clone()), ("ws-b", unseen)],
    );
    let s = sum(&v, std::slice::from_ref(&g));
    assert_eq!(find(&s, "ws-b").state, InstanceState::Unknown);
    assert_eq!(find(&s, "ws-a").state, InstanceState::Drained);
    let up = InstanceWork {
        health: Health::Up,
        ..InstanceWork::default()
    };
    let g = report("g1", NodeKind::Gate, &[("ws-a", up.clone()), ("ws-b", up)]);
    let s = sum(&v, &[g]);
    assert_eq!(find(&s, "ws-b").state, InstanceState::Up);
}
