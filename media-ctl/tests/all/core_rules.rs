//! The mg and bgmg rules through the controller core, with a simulated
//! pool and synthetic time: no sockets, so every rule is a fast test. The
//! same rules run against real rtpengine processes in `rtpengine_pool.rs`.

use std::time::Duration;

use crate::common::*;
use media_ctl::Assign;
use ringsync::view::{Health, InstanceState};
use ringsync::work::{NodeKind, NodeOutcome};

#[test]
fn r_mg_2_every_command_of_a_call_goes_to_the_mg_of_its_offer() {
    let mut h = Harness::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..3 {
        let call = format!("c{i}");
        let ip = h.new_call(client(), &call);
        seen.insert(ip.clone());
        for (n, cmd) in ["query", "block media", "unblock media", "delete"]
            .iter()
            .enumerate()
        {
            let before: Vec<u64> = [MG_A, MG_B, MG_C]
                .iter()
                .map(|&i| h.mgs[&h.c.pool().member(i).unwrap().ng].commands)
                .collect();
            let (r, _, e) = read(&h.call(client(), &format!("{call}-{n}"), cmd, &call));
            assert_eq!(r, "ok", "{cmd}: {e:?}");
            let after: Vec<u64> = [MG_A, MG_B, MG_C]
                .iter()
                .map(|&i| h.mgs[&h.c.pool().member(i).unwrap().ng].commands)
                .collect();
            let moved: Vec<usize> = (0..3).filter(|&k| after[k] != before[k]).collect();
            assert_eq!(moved.len(), 1, "{cmd} went to one mg");
            assert_eq!(
                ip_of([MG_A, MG_B, MG_C][moved[0]]),
                ip,
                "{cmd} on the call's mg"
            );
        }
    }
    assert_eq!(seen.len(), 3, "three calls, three idle mgs: one each");
    assert_eq!((0..6).map(|i| h.c.calls(i)).sum::<u64>(), 0, "all deleted");
}

#[test]
fn new_calls_go_to_the_least_loaded_mg() {
    let mut h = Harness::new();
    // mg-a already carries two calls.
    for c in ["x1", "x2"] {
        h.new_call(client(), c);
    }
    let first = h.c.call_mg(b"x1").unwrap();
    let second = h.c.call_mg(b"x2").unwrap();
    assert_ne!(first, second);
    for i in 0..7 {
        h.new_call(client(), &format!("n{i}"));
    }
    let loads: Vec<u64> = [MG_A, MG_B, MG_C].iter().map(|&i| h.c.calls(i)).collect();
    assert_eq!(loads, vec![3, 3, 3], "levelled");
}

/// Shares of mg-a among `n` new calls (kept open), in `buckets` slices of
/// the window.
fn shares(
    h: &mut Harness,
    tag: &str,
    buckets: usize,
    per_bucket: usize,
    step: Duration,
) -> Vec<f64> {
    let mut out = Vec::new();
    for b in 0..buckets {
        let mut on_a = 0;
        for k in 0..per_bucket {
            let ip = h.new_call(client(), &format!("{tag}-{b}-{k}"));
            if ip == ip_of(MG_A) {
                on_a += 1;
            }
        }
        out.push(on_a as f64 / per_bucket as f64);
        h.advance(step);
    }
    out
}

#[test]
fn r_mg_1_r_mg_4_a_drain_sheds_new_calls_gradually_over_the_window() {
    let mut h = Harness::new(); // window: 100 s
    for i in 0..30 {
        h.new_call(client(), &format!("old{i}"));
    }
    let on_a: Vec<String> = (0..30)
        .map(|i| format!("old{i}"))
        .filter(|c| h.c.call_mg(c.as_bytes()) == Some(MG_A))
        .collect();
    assert_eq!(on_a.len(), 10);

    h.drain_servers(1, &["srv-a"]);
    // 10 slices of 10 s, 30 new calls each.
    let s = shares(&mut h, "d", 10, 30, Duration::from_secs(10));
    // Starts near its normal third (no cliff at the first instant)...
    assert!(s[0] > 0.25, "{s:?}");
    // ... falls steadily ...
    for w in s.windows(2) {
        assert!(w[1] <= w[0] + 1e-9, "not monotone: {s:?}");
    }
    assert!(s[5] < s[1] && s[9] < s[5], "{s:?}");
    // ... and is zero once the window has passed.
    let after = shares(&mut h, "z", 1, 30, Duration::from_secs(1));
    assert_eq!(after, vec![0.0]);
    let st = h.c.status("t", h.t);
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    assert_eq!((a.assign, a.weight), (Assign::Out, 0.0));

    // R-MG-2: its existing calls still answer, on mg-a, until deleted.
    for c in &on_a {
        let (r, _, _) = read(&h.call(client(), &format!("q-{c}"), "query", c));
        assert_eq!(r, "ok");
        assert_eq!(h.c.call_mg(c.as_bytes()), Some(MG_A));
    }

    // Lifted: the weight rises the same way; no instant where mg-a takes
    // every new call although it is by far the least loaded.
    h.drain_servers(2, &[]);
    let s = shares(&mut h, "u", 10, 30, Duration::from_secs(10));
    assert!(s[0] < 0.1, "{s:?}");
    assert!(s[9] > s[0], "{s:?}");
    for w in s.windows(2) {
        assert!(w[1] + 1e-9 >= w[0], "not monotone: {s:?}");
    }
}

#[test]
fn r_mg_3_the_last_mg_up_stays_assignable_and_says_so() {
    let mut h = Harness::new();
    h.health(MG_B, Health::Down);
    h.health(MG_C, Health::Down);
    h.drain_servers(1, &["srv-a"]);
    h.advance(Duration::from_secs(500)); // far past the window
    assert_eq!(h.new_call(client(), "c1"), ip_of(MG_A));
    let st = h.c.status("t", h.t);
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    assert_eq!(a.assign, Assign::QueuedForDrain);
    assert_eq!(a.state, InstanceState::Draining);
    // Another mg comes back: the drained one gets no more new calls.
    h.health(MG_B, Health::Up);
    for i in 0..5 {
        assert_eq!(h.new_call(client(), &format!("c2-{i}")), ip_of(MG_B));
    }
    let st = h.c.status("t", h.t);
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    assert_eq!(a.assign, Assign::Out);
    // Every mg down: an ng error, not a guess.
    h.health(MG_A, Health::Down);
    h.health(MG_B, Health::Down);
    let (r, _, e) = read(&h.call(client(), "o", "offer", "c3"));
    assert_eq!(
        (r.as_str(), e.as_deref()),
        ("error", Some("no media gateway is up"))
    );
}

#[test]
fn r_bg_1_an_sgs_calls_go_to_the_bgmg_on_its_server() {
    let mut h = Harness::new();
    // Another server draining does not matter (the bgmg is never drained).
    h.drain_servers(1, &["srv-b"]);
    for i in 0..5 {
        assert_eq!(h.new_call(sg_a(), &format!("a{i}")), ip_of(BGMG_A));
    }
    // A client that is no sg, and sg-b (no bgmg on srv-b): the mg pool.
    let other = h.new_call(client(), "x");
    assert_ne!(other, ip_of(BGMG_A));
    let from_b = h.new_call("127.0.1.2:7000".parse().unwrap(), "y");
    assert_ne!(from_b, ip_of(BGMG_A));
    assert_eq!(h.c.calls(BGMG_A), 5);
}

#[test]
fn r_bg_2_r_bg_3_the_bgmg_closes_with_its_sg_and_is_stoppable_once_idle() {
    let mut h = Harness::new();
    h.health_round(1); // the census vouches for the (empty) mgs
    assert_eq!(h.new_call(sg_a(), "held"), ip_of(BGMG_A));
    let bg = |h: &Harness| {
        let st = h.c.status("t", h.t);
        st.instances.into_iter().find(|i| i.id == "bgmg-a").unwrap()
    };
    // R-BG-2: the local sg is active: not stoppable.
    assert_eq!(bg(&h).stoppable, Some(false));
    assert_eq!(bg(&h).assign, Assign::Pinned);

    // The local sg drains (srv-a): its remaining new calls (exceptions)
    // get a normal-zone mg, not the bgmg (R-BG-3).
    h.drain_servers(1, &["srv-a"]);
    h.advance(Duration::from_secs(200)); // mg-a, also on srv-a, is out by now
    for i in 0..4 {
        let ip = h.new_call(sg_a(), &format!("exc{i}"));
        assert!(ip == ip_of(MG_B) || ip == ip_of(MG_C), "{ip}");
    }
    assert_eq!(bg(&h).assign, Assign::Closed);
    assert_eq!(bg(&h).stoppable, Some(false), "still has a call");
    assert_eq!(bg(&h).state, InstanceState::Up, "never drained (R-BG-1)");
    // Its existing call still goes to it (R-MG-2).
    let (r, _, _) = read(&h.call(sg_a(), "q", "query", "held"));
    assert_eq!(r, "ok");
    h.call(sg_a(), "d", "delete", "held");
    assert_eq!(bg(&h).stoppable, Some(true));

    let report = h.c.work_report("t", h.t);
    assert_eq!(report.kind, NodeKind::MediaCtl);
    assert_eq!(report.instances["bgmg-a"].stoppable, Some(true));
    assert_eq!(report.instances["mg-b"].stoppable, None);
    // Lifted: pinned again.
    h.drain_servers(2, &[]);
    assert_eq!(h.new_call(sg_a(), "again"), ip_of(BGMG_A));
    assert_eq!(bg(&h).stoppable, Some(false));
}

#[test]
fn r_mg_5_a_call_whose_mg_is_down_gets_an_error_and_is_never_moved() {
    let mut h = Harness::new();
    h.new_call(client(), "c1");
    let mg = h.c.call_mg(b"c1").unwrap();
    let addr = h.c.pool().member(mg).unwrap().ng;
    h.mgs.get_mut(&addr).unwrap().alive = false;

    // Dead but not yet known down: the command times out into an ng error.
    assert_eq!(
        h.send(
            client(),
            &ng("k1", &[("command", "query"), ("call-id", "c1")])
        ),
        None
    );
    h.advance(Duration::from_millis(1000));
    let outs = h.c.tick(h.t);
    assert_eq!(outs.len(), 1);
    let media_ctl::Out::Client(to, reply) = &outs[0] else {
        panic!("{outs:?}")
    };
    assert_eq!(*to, client());
    let (r, _, e) = read(reply);
    assert_eq!(r, "error");
    assert!(e.unwrap().contains("did not answer within 1000 ms"));

    // Three missed pings: down.
    for seq in 1..=3 {
        h.health_round(seq);
    }
    let name = h.c.pool().member(mg).unwrap().id.clone();
    let (r, _, e) = read(&h.call(client(), "k2", "answer", "c1"));
    assert_eq!(r, "error");
    let e = e.unwrap();
    assert!(e.contains(&name) && e.contains("down"), "{e}");
    assert_eq!(h.c.call_mg(b"c1"), Some(mg), "not moved");
    let others: u64 = h
        .mgs
        .iter()
        .filter(|(a, _)| **a != addr)
        .map(|(_, m)| m.calls.len() as u64)
        .sum();
    assert_eq!(others, 0, "no other mg ever heard of the call");
    // New calls avoid it; the status says down.
    for i in 0..4 {
        assert_ne!(
            h.new_call(client(), &format!("n{i}")),
            addr.ip().to_string()
        );
    }
    let st = h.c.status("t", h.t);
    let s = st.instances.iter().find(|i| i.id == name).unwrap();
    assert_eq!((s.state, s.assign), (InstanceState::Down, Assign::Down));
}

#[test]
fn a_retransmission_gets_the_cached_answer_without_a_second_command() {
    let mut h = Harness::new();
    let offer = ng(
        "r1",
        &[
            ("command", "offer"),
            ("call-id", "c1"),
            ("from-tag", "f"),
            ("sdp", "v=0\r\n"),
        ],
    );
    let first = h.send(client(), &offer).unwrap();
    let total = |h: &Harness| h.mgs.values().map(|m| m.commands).sum::<u64>();
    let n = total(&h);
    let again = h.send(client(), &offer).unwrap();
    assert_eq!(again, first, "same bytes");
    assert_eq!(total(&h), n, "rtpengine saw it once");
    // The same cookie from another client is another command.
    h.send("127.0.9.8:1".parse().unwrap(), &offer).unwrap();
    assert_eq!(total(&h), n + 1);
    // While the first copy is still out, a retransmission re-sends it
    // under the same upstream cookie (rtpengine runs a cookie once).
    let q = ng("r2", &[("command", "query"), ("call-id", "c1")]);
    let media_ctl::Decision::Send(first) = h.c.handle(client(), &q, h.t) else {
        panic!()
    };
    let media_ctl::Decision::Send(second) = h.c.handle(client(), &q, h.t) else {
        panic!()
    };
    assert_eq!(first, second);
}

#[test]
fn ping_is_answered_locally_list_and_statistics_cover_the_pool() {
    let mut h = Harness::new();
    let r = h.send(client(), b"p1 d7:command4:pinge").unwrap();
    assert_eq!(r, b"p1 d6:result4:ponge");
    assert_eq!(h.mgs.values().map(|m| m.commands).sum::<u64>(), 0);
    for i in 0..6 {
        h.new_call(client(), &format!("c{i}"));
    }
    let r = h.send(client(), &ng("l1", &[("command", "list")])).unwrap();
    let (_, payload) = media_ctl::ng::split_cookie(&r).unwrap();
    let media_ctl::Value::Dict(d) = media_ctl::Value::decode(payload).unwrap() else {
        panic!()
    };
    let media_ctl::Value::List(calls) = &d[&b"calls"[..]] else {
        panic!()
    };
    assert_eq!(calls.len(), 6);
    let r = h
        .send(client(), &ng("s1", &[("command", "statistics")]))
        .unwrap();
    let text = String::from_utf8_lossy(&r);
    assert!(text.contains("13:sessionstotali6e"), "{text}");
    assert!(text.contains("3:mgsd6:bgmg-a"), "{text}");
}

#[test]
fn bad_input_gets_an_ng_error_or_is_dropped_and_counted() {
    let mut h = Harness::new();
    for (d, reason) in [
        (
            &b"c1 d7:commanxe"[..],
            "Could not decode bencode dictionary",
        ),
        (b"c2 d7:command5:bogose", "Unrecognized command"),
        (b"c3 d1:ai1ee", "No command given"),
        (b"c4 d7:command6:answere", "No call-id in message"),
    ] {
        let (r, _, e) = read(&h.send(client(), d).unwrap());
        assert_eq!((r.as_str(), e.as_deref()), ("error", Some(reason)));
    }
    assert_eq!(h.send(client(), b"no-cookie-here"), None);
    let big = [
        b"c5 d3:sdp60000:".to_vec(),
        vec![b'x'; 60_000],
        b"e".to_vec(),
    ]
    .concat();
    let (r, _, e) = read(&h.send(client(), &big).unwrap());
    assert_eq!(
        (r.as_str(), e.as_deref()),
        ("error", Some("oversized datagram"))
    );
    assert_eq!(h.mgs.values().map(|m| m.commands).sum::<u64>(), 0);
    let st = h.c.status("t", h.t);
    assert_eq!(st.counters["dropped.no_cookie"], 1);
    assert_eq!(st.counters["errors.unknown_command"], 1);
}

#[test]
fn r_mg_2_an_unknown_call_is_searched_in_the_pool_never_placed_anew() {
    let mut h = Harness::new();
    // A call mg-b carries from before media-ctl started.
    let b = h.c.pool().member(MG_B).unwrap().ng;
    h.mgs.get_mut(&b).unwrap().calls.insert(b"old".to_vec());
    let (r, c, _) = read(&h.call(client(), "a1", "answer", "old"));
    assert_eq!((r.as_str(), c.as_deref()), ("ok", Some(ip_of(MG_B))));
    assert_eq!(h.c.call_mg(b"old"), Some(MG_B));
    assert_eq!(h.c.calls(MG_B), 1);
    // Nowhere: rtpengine's own answers.
    let (r, _, e) = read(&h.call(client(), "a2", "answer", "nowhere"));
    assert_eq!(
        (r.as_str(), e.as_deref()),
        ("error", Some("Unknown call-id"))
    );
    let (r, _, _) = read(&h.call(client(), "a3", "delete", "nowhere"));
    assert_eq!(r, "ok");
    // An mg that does not answer may hold it: an error, not a new placement.
    let c_addr = h.c.pool().member(MG_C).unwrap().ng;
    h.mgs.get_mut(&c_addr).unwrap().alive = false;
    let d = ng(
        "a4",
        &[
            ("command", "offer"),
            ("call-id", "late"),
            ("from-tag", "f"),
            ("to-tag", "t"),
            ("sdp", "v=0\r\n"),
        ],
    );
    assert_eq!(h.send(client(), &d), None);
    h.advance(Duration::from_secs(1));
    let outs = h.c.tick(h.t);
    let reply = outs
        .iter()
        .find_map(|o| match o {
            media_ctl::Out::Client(_, r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    let (r, _, e) = read(&reply);
    assert_eq!(r, "error");
    assert!(e.unwrap().contains("mg-c did not answer"));
    assert_eq!(h.c.call_mg(b"late"), None);
}

#[test]
fn idle_calls_are_checked_and_forgotten_when_their_mg_forgot_them() {
    let mut h = Harness::new();
    h.new_call(client(), "kept");
    h.new_call(client(), "lost");
    let mg = h.c.call_mg(b"lost").unwrap();
    let addr = h.c.pool().member(mg).unwrap().ng;
    h.mgs.get_mut(&addr).unwrap().calls.remove(&b"lost"[..]); // rtpengine timed it out
    h.advance(Duration::from_secs(600));
    let outs = h.c.sweep(h.t);
    assert_eq!(outs.len(), 2, "one query per idle call");
    let sends = outs
        .into_iter()
        .map(|o| match o {
            media_ctl::Out::Mg(a, d) => (a, d),
            o => panic!("{o:?}"),
        })
        .collect();
    h.deliver(sends);
    assert_eq!(h.c.call_mg(b"lost"), None);
    assert!(h.c.call_mg(b"kept").is_some());
    assert_eq!(
        h.c.status("t", h.t).counters["idle_forgotten.unknown_to_mg"],
        1
    );
}

#[test]
fn r_st_1_r_st_3_draining_to_drained_only_with_vouched_counts() {
    let mut h = Harness::new();
    // A call mg-a holds that media-ctl does not know of.
    let a = h.c.pool().member(MG_A).unwrap().ng;
    h.mgs.get_mut(&a).unwrap().calls.insert(b"ghost".to_vec());
    h.drain_servers(1, &["srv-a"]);
    let sum = |h: &Harness| {
        let report = h.c.work_report("m1", h.t);
        let outcome = NodeOutcome {
            node: "m1".into(),
            kind: NodeKind::MediaCtl,
            report: Ok(report),
        };
        let view = h.drain.view();
        ringsync_ops::sum::sum(&view, &[outcome])
            .into_iter()
            .find(|s| s.id == "mg-a")
            .unwrap()
    };
    // Nothing asked yet: unknown, so draining with the reason.
    let s = sum(&h);
    assert_eq!(s.state, InstanceState::Draining);
    assert!(s.unknown[0].contains("not yet reported"), "{:?}", s.unknown);
    // The mg reports one session, media-ctl tracks none: still unknown.
    h.health_round(1);
    let s = sum(&h);
    assert_eq!(s.state, InstanceState::Draining);
    assert!(s.unknown[0].contains("holds 1 sessions"), "{:?}", s.unknown);
    // Once the mg has no session media-ctl does not know of: drained.
    h.mgs.get_mut(&a).unwrap().calls.clear();
    h.health_round(2);
    let s = sum(&h);
    assert_eq!((s.state, s.work), (InstanceState::Drained, Some(0)));
}
