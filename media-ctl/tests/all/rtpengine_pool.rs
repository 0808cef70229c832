//! The real media-ctl binary in front of real rtpengine processes. The SDP
//! that comes back carries the address of the rtpengine that took the call
//! (`c=`), which proves where each call went. Run through `netns-run`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::real::*;
use media_ctl::Assign;
use ringsync::view::{Health, InstanceState};
use ringsync::work::NodeKind;
use testbed::http::Request;

/// The site-wide state of `id` as `ringsync status` sums media-ctl's work
/// report (R-ST-3).
fn summed(site: &Site, id: &str) -> ringsync_ops::sum::InstanceStatus {
    site.ringsync_status()
        .instances
        .into_iter()
        .find(|s| s.id == id)
        .unwrap()
}

#[test]
fn calls_spread_over_three_rtpengines_and_every_command_follows_its_call() {
    let site = Site::start(Spec::new((80, 1)));
    let mut c = site.client(9);
    let mut placed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..9 {
        let call = format!("spread-{i}@test");
        let media = c.setup(&call);
        placed.entry(site.mg_at(&media)).or_default().push(call);
    }
    // Least loaded: 3 each, and the work report agrees.
    let counts: Vec<usize> = placed.values().map(Vec::len).collect();
    assert_eq!(counts, vec![3, 3, 3], "{placed:?}");
    let w = site.work();
    assert_eq!(w.kind, NodeKind::MediaCtl);
    for id in ["mg-a", "mg-b", "mg-c"] {
        assert_eq!(w.instances[id].counts.calls, 3, "{id}");
        assert_eq!(w.instances[id].health, Health::Up);
        assert!(
            w.instances[id].unknown.is_none(),
            "{:?}",
            w.instances[id].unknown
        );
    }
    // A query goes to the call's mg (R-MG-2): its answer names the call's tags.
    for calls in placed.values() {
        let q = c.cmd(&[("command", "query"), ("call-id", &calls[0])]);
        assert_eq!(q.result, "ok", "{q:?}");
    }
    // ping is media-ctl's own; list covers the pool.
    let p = c.cmd(&[("command", "ping")]);
    assert_eq!(p.result, "pong");
    let l = c.cmd(&[("command", "list"), ("limit", "100")]);
    assert_eq!(l.result, "ok");
    let listed = String::from_utf8_lossy(&l.raw).matches("spread-").count();
    assert_eq!(listed, 9);
    // A retransmission gets the same bytes back.
    let d = media_ctl::NgMessage {
        cookie: b"rt-1".to_vec(),
        dict: [
            (b"command".to_vec(), media_ctl::Value::str("query")),
            (b"call-id".to_vec(), media_ctl::Value::str("spread-0@test")),
        ]
        .into_iter()
        .collect(),
    }
    .to_bytes();
    let first = c.raw(&d, "rt-1").unwrap();
    let again = c.raw(&d, "rt-1").unwrap();
    assert_eq!(first.raw, again.raw);

    for calls in placed.values() {
        for call in calls {
            assert_eq!(c.delete(call).result, "ok");
        }
    }
    let w = site.work();
    assert!(w.instances.values().all(|i| i.counts.calls == 0), "{w:?}");
    // `media-ctl status` prints the same.
    let out = testbed::bins::command("media-ctl")
        .unwrap()
        .arg("--config")
        .arg(&site.path)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in ["mg-a", "mg-b", "mg-c", "bgmg-a"] {
        assert!(text.contains(id), "{text}");
    }
    assert!(text.contains("normal") && text.contains("pinned"), "{text}");
}

#[test]
fn r_mg_1_r_mg_4_a_drain_under_a_steady_stream_of_new_calls() {
    // Window 4 s; 20 new calls a second for 6 s, kept open.
    let mut spec = Spec::new((80, 2));
    spec.window_s = 4;
    let mut site = Site::start(spec);
    let mut c = site.client(9);
    let mut on_a = Vec::new();
    for i in 0..9 {
        let call = format!("before-{i}");
        if site.mg_at(&c.setup(&call)) == "mg-a" {
            on_a.push(call);
        }
    }
    assert_eq!(on_a.len(), 3);

    site.drain(&["srv-a"]);
    site.wait_drain_zone(&["srv-a"]);
    let start = Instant::now();
    let mut per_second: Vec<(u32, u32)> = vec![(0, 0); 6];
    let mut all = Vec::new();
    let mut i = 0;
    while start.elapsed() < Duration::from_secs(6) {
        let slot = start.elapsed().as_secs() as usize;
        let call = format!("during-{i}");
        i += 1;
        let mg = site.mg_at(&c.setup(&call));
        if let Some(s) = per_second.get_mut(slot) {
            s.1 += 1;
            if mg == "mg-a" {
                s.0 += 1;
            }
        }
        all.push(call);
        // Existing calls on the draining mg keep answering (R-MG-2).
        if i % 10 == 0 {
            for call in &on_a {
                let q = c.cmd(&[("command", "query"), ("call-id", call)]);
                assert_eq!(q.result, "ok", "{call}: {q:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let shares: Vec<f64> = per_second
        .iter()
        .map(|(a, n)| f64::from(*a) / f64::from((*n).max(1)))
        .collect();
    eprintln!("mg-a share of new calls per second: {shares:?} ({per_second:?})");
    // Gradual: a real share in the first second, less by the third, none
    // once the window has passed; never a cliff at the start.
    assert!(shares[0] > 0.1, "{shares:?}");
    assert!(shares[2] < shares[0], "{shares:?}");
    assert_eq!(per_second[5].0, 0, "{shares:?}");
    assert_eq!(per_second[4].0, 0, "{shares:?}");

    // Draining while it holds calls; drained once they are deleted, on
    // media-ctl's vouched word (R-ST-1, R-ST-3).
    let s = summed(&site, "mg-a");
    assert_eq!(s.state, InstanceState::Draining);
    assert!(s.counts.calls >= 3, "{s:?}");
    // The ramp's end reaches the site's status (and the status page)
    // through media-ctl's work report: mg-a at 0, mg-b at full weight, no
    // weight for the bgmg, which is pinned, not weighed (R-MG-4, R-BG-1).
    assert_eq!(s.weight, Some(0.0), "{s:?}");
    assert_eq!(summed(&site, "mg-b").weight, Some(1.0));
    assert_eq!(summed(&site, "bgmg-a").weight, None);
    let st = site.status().unwrap();
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    assert_eq!((a.assign, a.weight), (Assign::Out, 0.0));
    for call in on_a.iter().chain(all.iter()) {
        assert_eq!(c.delete(call).result, "ok");
    }
    let s = summed(&site, "mg-a");
    assert_eq!((s.state, s.work), (InstanceState::Drained, Some(0)));

    // Lifted: back, by a ramp.
    site.drain(&[]);
    site.wait_drain_zone(&[]);
    let st = site.status().unwrap();
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    assert_eq!(a.assign, Assign::RampingUp, "{a:?}");
    site.wait_until("mg-a back at full weight", |s| {
        s.status().is_some_and(|st| {
            st.instances
                .iter()
                .any(|i| i.id == "mg-a" && i.assign == Assign::Normal)
        })
    });
}

#[test]
fn r_mg_3_the_last_mg_up_takes_calls_while_queued_for_drain() {
    // mg-b is configured but never started: down.
    let mut spec = Spec::new((80, 3));
    spec.mgs = 2;
    spec.running = vec![0];
    spec.bgmg = false;
    let mut site = Site::start(spec);
    site.drain(&["srv-a"]);
    site.wait_drain_zone(&["srv-a"]);
    std::thread::sleep(Duration::from_secs(5)); // past the 4 s window
    let mut c = site.client(9);
    let media = c.setup("last-1");
    assert_eq!(site.mg_at(&media), "mg-a");
    let st = site.status().unwrap();
    let a = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    let b = st.instances.iter().find(|i| i.id == "mg-b").unwrap();
    assert_eq!(a.assign, Assign::QueuedForDrain);
    assert_eq!(a.state, InstanceState::Draining);
    assert_eq!(b.state, InstanceState::Down);
    let text = String::from_utf8_lossy(
        &testbed::bins::command("media-ctl")
            .unwrap()
            .arg("--config")
            .arg(&site.path)
            .arg("status")
            .output()
            .unwrap()
            .stdout,
    )
    .to_string();
    assert!(text.contains("queued_for_drain"), "{text}");
    assert_eq!(c.delete("last-1").result, "ok");
}

#[test]
fn r_bg_1_2_3_the_bgmg_follows_its_local_sg() {
    let mut site = Site::start(Spec::new((80, 4)));
    let mut sg_a = site.client(11); // sg-a's address: srv-a
    let mut sg_b = site.client(12);
    let bgmg_ip = site.mgs["bgmg-a"].ip().to_string();
    // R-BG-1: sg-a's calls on the bgmg of srv-a; sg-b's on the mg pool.
    assert_eq!(sg_a.setup("bg-1"), bgmg_ip);
    assert_ne!(sg_b.setup("pool-1"), bgmg_ip);
    let stoppable = |s: &Site| s.work().instances["bgmg-a"].stoppable;
    // R-BG-2: local sg active: not stoppable.
    assert_eq!(stoppable(&site), Some(false));

    // srv-a drains: sg-a's remaining new calls (exceptions, single-instance
    // accounts) go to a normal-zone mg, not the bgmg (R-BG-3).
    site.drain(&["srv-a"]);
    site.wait_drain_zone(&["srv-a"]);
    std::thread::sleep(Duration::from_secs(5)); // mg-a, on srv-a, ramps out too
    for i in 0..4 {
        let m = site.mg_at(&sg_a.setup(&format!("exc-{i}")));
        assert!(m == "mg-b" || m == "mg-c", "{m}");
    }
    assert_eq!(stoppable(&site), Some(false), "still carries bg-1");
    let st = site.status().unwrap();
    let bg = st.instances.iter().find(|i| i.id == "bgmg-a").unwrap();
    assert_eq!((bg.assign, bg.state), (Assign::Closed, InstanceState::Up));
    // Its call goes on there until it ends.
    assert_eq!(
        sg_a.cmd(&[("command", "query"), ("call-id", "bg-1")])
            .result,
        "ok"
    );
    assert_eq!(sg_a.delete("bg-1").result, "ok");
    assert_eq!(stoppable(&site), Some(true));
    for i in 0..4 {
        sg_a.delete(&format!("exc-{i}"));
    }
    sg_b.delete("pool-1");
    // Lifted: pinned again.
    site.drain(&[]);
    site.wait_drain_zone(&[]);
    assert_eq!(sg_a.setup("bg-2"), bgmg_ip);
    assert_eq!(stoppable(&site), Some(false));
}

#[test]
fn r_mg_5_an_mg_killed_mid_call_errors_its_calls_and_moves_none() {
    let mut site = Site::start(Spec::new((80, 5)));
    let mut c = site.client(9);
    let mut calls = BTreeMap::new();
    for i in 0..3 {
        let call = format!("k-{i}");
        calls.insert(site.mg_at(&c.setup(&call)), call);
    }
    let victim = "mg-b".to_string();
    let call = calls[&victim].clone();
    site.mgs.remove(&victim).unwrap().kill();
    site.wait_until("mg-b down", |s| {
        s.status().is_some_and(|st| {
            st.instances
                .iter()
                .any(|i| i.id == "mg-b" && i.state == InstanceState::Down)
        })
    });
    let a = c.cmd(&[
        ("command", "answer"),
        ("call-id", &call),
        ("from-tag", "ft"),
        ("to-tag", "tt2"),
        ("sdp", &sdp("10.2.2.2", 5002)),
    ]);
    assert_eq!(a.result, "error");
    let e = a.error.unwrap();
    assert!(e.contains("mg-b") && e.contains("down"), "{e}");
    // Nobody else picked it up.
    for (id, mg) in &site.mgs {
        let mut probe = site.client(9);
        probe.to = mg.ng();
        let q = probe.cmd(&[("command", "query"), ("call-id", &call)]);
        assert_eq!(q.result, "error", "{id} knows {call}");
    }
    // The other calls and new ones carry on, away from mg-b.
    for (id, other) in calls.iter().filter(|(id, _)| **id != victim) {
        assert_eq!(
            c.cmd(&[("command", "query"), ("call-id", other)]).result,
            "ok",
            "{id}"
        );
    }
    for i in 0..4 {
        assert_ne!(site.mg_at(&c.setup(&format!("after-{i}"))), victim);
    }
    let w = site.work();
    assert_eq!(w.instances["mg-b"].health, Health::Down);
}

#[test]
fn bad_input_is_answered_or_counted_and_service_goes_on() {
    let mut site = Site::start(Spec::new((80, 6)));
    let mut c = site.client(9);
    for (d, cookie, reason) in [
        (
            &b"b1 d7:commanxe"[..],
            "b1",
            "Could not decode bencode dictionary",
        ),
        (b"b2 d7:command5:bogose", "b2", "Unrecognized command"),
        (b"b3 le", "b3", "Could not decode bencode dictionary"),
    ] {
        let a = c.raw(d, cookie).unwrap();
        assert_eq!(
            (a.result.as_str(), a.error.as_deref()),
            ("error", Some(reason))
        );
    }
    // No cookie: nothing to answer, dropped and counted.
    c.sock
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(c.raw(b"garbage-without-space", "x").is_none());
    c.sock
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let big = [
        b"b4 d3:sdp60000:".to_vec(),
        vec![b'x'; 60_000],
        b"e".to_vec(),
    ]
    .concat();
    let a = c.raw(&big, "b4").unwrap();
    assert_eq!(a.error.as_deref(), Some("oversized datagram"));
    // Still serving.
    c.setup("fine");
    let st = site.status().unwrap();
    assert_eq!(st.counters.get("dropped.no_cookie"), Some(&1));
    let reply = site.node.get("/metrics").unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    let metrics = reply.body;
    assert!(
        metrics.contains("mediactl_dropped_total{reason=\"no_cookie\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("mediactl_new_calls_total"), "{metrics}");
    let reply = site.node.get("/readyz").unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    // The admin port is read-only (R-PR-1): no method that could change
    // state is routed, so it needs no tokens.
    for path in ["/v1/status", "/v1/work", "/metrics", "/readyz", "/healthz"] {
        for method in ["POST", "PUT", "PATCH", "DELETE"] {
            let reply = Request::new(method, site.admin, path).send().unwrap();
            assert_eq!(reply.status, 405, "{method} {path}: {reply:?}");
        }
    }
    assert!(site.stop(), "clean exit on SIGTERM");
}

#[test]
fn r_mg_2_r_st_3_calls_survive_a_media_ctl_restart() {
    // rtpengine keeps a deleted call (and counts its session) for 30 s by
    // default; without that delay the end of the test need not wait.
    let mut spec = Spec::new((80, 7));
    spec.rtpengine_args = vec!["--delete-delay=0".into()];
    let mut site = Site::start(spec);
    let mut c = site.client(9);
    let mut placed = BTreeMap::new();
    for i in 0..3 {
        let call = format!("r-{i}");
        placed.insert(call.clone(), c.setup(&call));
    }
    site.restart();
    // The new process never saw these calls: it cannot vouch for the mgs'
    // counts until each mg reports no session it does not know (R-ST-3).
    let w = site.work();
    let unknown: Vec<_> = w
        .instances
        .iter()
        .filter(|(_, i)| i.unknown.is_some())
        .map(|(id, _)| id.clone())
        .collect();
    assert!(unknown.len() >= 3, "{w:?}");
    // Every command of the old calls still reaches their own rtpengine,
    // found by asking the pool (R-MG-2): the SDP says where.
    for (call, media) in &placed {
        let a = c.cmd(&[
            ("command", "answer"),
            ("call-id", call),
            ("from-tag", "ft"),
            ("to-tag", "tt"),
            ("sdp", &sdp("10.2.2.3", 5004)),
        ]);
        assert_eq!(a.result, "ok", "{call}: {a:?}");
        assert_eq!(a.media.as_ref(), Some(media), "{call}");
    }
    let w = site.work();
    let total: u64 = w.instances.values().map(|i| i.counts.calls).sum();
    assert_eq!(total, 3, "found calls are tracked again");
    for call in placed.keys() {
        assert_eq!(c.delete(call).result, "ok");
    }
    // Once the mgs hold no session media-ctl does not know: vouched again.
    site.wait_until("counts vouched again", |s| {
        s.work().instances.values().all(|i| i.unknown.is_none())
    });
}

#[test]
fn r_st_3_on_etcd_media_ctl_publishes_its_work_in_the_registry() {
    let etcd = testbed::Etcd::single(ip((80, 8), 51)).unwrap();
    let mut spec = Spec::new((80, 8));
    spec.etcd = Some(etcd.endpoints());
    let mut site = Site::start(spec);
    let mut c = site.client(9);
    let mut on_a = Vec::new();
    for i in 0..3 {
        let call = format!("e-{i}");
        if site.mg_at(&c.setup(&call)) == "mg-a" {
            on_a.push(call);
        }
    }
    assert_eq!(on_a.len(), 1);
    site.drain(&["srv-a"]);
    site.wait_drain_zone(&["srv-a"]);
    let mg_a = |s: &Site| {
        s.registry_status()
            .instances
            .into_iter()
            .find(|i| i.id == "mg-a")
            .unwrap()
    };
    // The publisher writes within half a second of a change.
    site.wait_until("mg-a draining with its call, from the registry", |s| {
        let a = mg_a(s);
        a.state == InstanceState::Draining && a.work == Some(1)
    });
    for call in &on_a {
        assert_eq!(c.delete(call).result, "ok");
    }
    site.wait_until("mg-a drained, from the registry", |s| {
        mg_a(s).state == InstanceState::Drained
    });
    let a = mg_a(&site);
    assert_eq!(a.nodes.len(), 1, "{a:?}");
    // Stopped: it withdraws, and the registry names it rather than letting
    // its last zero stand for a node that is gone. With no node left to
    // report its health or work, mg-a is unknown, not drained (R-ST-4).
    assert!(site.stop());
    let a = mg_a(&site);
    assert_eq!(a.state, InstanceState::Unknown, "{a:?}");
    assert!(!a.unknown.is_empty(), "{a:?}");
}
