//! Active-Active balance: the ring steers new work away from draining members
//! (R-AA-*), single-instance accounts stay home (R-ESG-5).

use super::prelude::*;

fn sg_spread(g: &Gate, prefix: &str, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| {
            let input = Req::ua("INVITE", &format!("{prefix}-{i}@ua"), &fresh_branch()).bytes();
            dest(g.udp(L_SG_BAL, UA, &input), L_SG_BAL)
        })
        .collect()
}

#[test]
fn r_aa_1_balance_never_picks_a_draining_member() {
    let g = Gate::std();
    g.drain_servers(&["srv-b"]);
    let got = sg_spread(&g, "aa1", 300);
    assert!(!got.contains(&SG_B), "no new dialog on the draining sg-b");
    assert!(
        got.contains(&SG_A) && got.contains(&SG_C),
        "both others serve"
    );
    // REGISTER / SUBSCRIBE go by AOR; none to sg-b either.
    for i in 0..100 {
        for method in ["REGISTER", "SUBSCRIBE"] {
            let input = Req::ua(method, &format!("aa1r-{i}@ua"), &fresh_branch())
                .to(&format!("sip:user{i}@example.com"))
                .bytes();
            assert_ne!(dest(g.udp(L_SG_BAL, UA, &input), L_SG_BAL), SG_B);
        }
    }
    // A down member is out too.
    g.health(SG_C, Health::Down);
    let got = sg_spread(&g, "aa1d", 100);
    assert!(got.iter().all(|&i| i == SG_A), "{got:?}");
}

#[test]
fn r_aa_3_lifting_the_drain_brings_the_keys_back() {
    let g = Gate::std();
    let before = sg_spread(&g, "aa3", 300);
    assert!(before.contains(&SG_B));
    g.drain_servers(&["srv-b"]);
    let during = sg_spread(&g, "aa3", 300);
    for (b, d) in before.iter().zip(&during) {
        // R-AA-2: only sg-b's keys moved.
        if *b != SG_B {
            assert_eq!(b, d);
        } else {
            assert_ne!(*d, SG_B);
        }
    }
    g.drain_servers(&[]);
    let after = sg_spread(&g, "aa3", 300);
    assert_eq!(before, after, "every key back where it was");
}

#[test]
fn r_aa_4_all_draining_still_served_no_503() {
    let g = Gate::std();
    g.drain_servers(&["srv-a", "srv-b", "srv-c"]);
    let got = sg_spread(&g, "aa4", 60);
    assert!(got.iter().all(|&i| i <= SG_C));
    assert!(got.contains(&SG_A) && got.contains(&SG_B) && got.contains(&SG_C));
    // Also when some of the draining ones are down: the others serve.
    g.health(SG_A, Health::Down);
    let got = sg_spread(&g, "aa4d", 60);
    assert!(!got.contains(&SG_A));
    // And esg on the balance listener.
    for i in 0..20 {
        let input = Req::ua("INVITE", &format!("aa4e-{i}@x"), &fresh_branch()).bytes();
        let d = dest(g.udp(L_ESG_BAL, CARRIER_X, &input), L_ESG_BAL);
        assert!(d == ESG_A || d == ESG_B);
    }
}

#[test]
fn r_esg_5_single_instance_account_stays_on_home_drain_or_not() {
    let g = Gate::std();
    let esg_spread = |g: &Gate, src: &str, prefix: &str| -> Vec<usize> {
        (0..100)
            .map(|i| {
                let input = Req::ua("INVITE", &format!("{prefix}-{i}@p"), &fresh_branch()).bytes();
                dest(g.udp(L_ESG_BAL, src, &input), L_ESG_BAL)
            })
            .collect()
    };
    let y = esg_spread(&g, CARRIER_Y, "e5y");
    assert!(
        y.iter().all(|&i| i == ESG_A),
        "carrier-y always on its home esg-a"
    );
    let x = esg_spread(&g, CARRIER_X, "e5x");
    assert!(
        x.contains(&ESG_A) && x.contains(&ESG_B),
        "carrier-x is balanced"
    );

    g.drain_servers(&["srv-a"]);
    let y = esg_spread(&g, CARRIER_Y, "e5y2");
    assert!(y.iter().all(|&i| i == ESG_A), "home, drain or not");
    let x = esg_spread(&g, CARRIER_X, "e5x2");
    assert!(x.iter().all(|&i| i == ESG_B), "multi-instance moves away");
}

/// R-AA-1, R-ESG-5, R-AA-4, R-SG-3: new work the rules send to a draining
/// instance on purpose is counted by reason
/// (`sipgate_new_work_draining_total`), so a drain's verdict can leave it
/// out; what goes to an instance in the normal zone is not counted there.
#[test]
fn r_aa_1_new_work_to_a_draining_instance_is_counted_by_reason() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let counted = recorder.handle();
    let line = |instance: &str, reason: &str| {
        let want = format!(
            "sipgate_new_work_draining_total{{instance=\"{instance}\",reason=\"{reason}\"}} "
        );
        counted
            .render()
            .lines()
            .find_map(|l| l.strip_prefix(want.as_str()).map(str::to_owned))
    };
    metrics::with_local_recorder(&recorder, || {
        let g = Gate::std();
        let invite = |listener, src: &str, call: String| {
            let input = Req::ua("INVITE", &call, &fresh_branch()).bytes();
            dest(g.udp(listener, src, &input), listener)
        };
        // Nothing drains: nothing counted, the home included.
        for i in 0..5 {
            assert_eq!(invite(L_ESG_BAL, CARRIER_Y, format!("cnt0-{i}@p")), ESG_A);
        }
        assert_eq!(line("esg-a", "single_instance_account"), None);
        // R-ESG-5: the single-instance account's home drains and keeps it.
        g.drain_servers(&["srv-a"]);
        for i in 0..7 {
            assert_eq!(invite(L_ESG_BAL, CARRIER_Y, format!("cnt1-{i}@p")), ESG_A);
        }
        // The multi-instance account moves away: nothing counted for it.
        for i in 0..5 {
            assert_eq!(invite(L_ESG_BAL, CARRIER_X, format!("cnt2-{i}@p")), ESG_B);
        }
        // R-AA-4: every sg drains, the ring of draining members serves.
        g.drain_servers(&["srv-a", "srv-b", "srv-c"]);
        let n_sg = (0..30)
            .filter(|i| invite(L_SG_BAL, UA, format!("cnt3-{i}@ua")) == SG_A)
            .count();
        assert!(n_sg > 0, "sg-a takes a share of 30 calls");
        assert_eq!(
            line("esg-a", "single_instance_account").as_deref(),
            Some("7")
        );
        assert_eq!(line("esg-b", "single_instance_account"), None);
        assert_eq!(line("sg-a", "all_draining"), Some(n_sg.to_string()));
    });
}

/// R-SG-3: an exception lets new work through a draining guarded sg, and
/// it is counted as such; a refused request is not counted at all.
#[test]
fn r_sg_3_new_work_through_a_draining_guard_by_exception_is_counted() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let counted = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let g = Gate::new(&SiteOpts {
            sg_a_exceptions: r#"[{ user = "vip" }]"#,
            ..SiteOpts::default()
        });
        g.drain_servers(&["srv-a"]);
        let inv = |n: &str| Req::ua("INVITE", &format!("cnt-{n}@ua"), &fresh_branch());
        let vip = inv("vip").from("sip:vip@example.com").bytes();
        forwarded(g.udp(L_SG_GUARD, UA, &vip), L_SG_GUARD, inst(SG_A));
        let other = inv("other").from("sip:bob@example.com").bytes();
        replied(g.udp(L_SG_GUARD, UA, &other), L_SG_GUARD, UA, 503);
    });
    let text = counted.render();
    assert!(
        text.contains(
            "sipgate_new_work_draining_total{instance=\"sg-a\",reason=\"exception\"} 1\n"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("sipgate_new_work_draining_total{").count(),
        1,
        "{text}"
    );
}
