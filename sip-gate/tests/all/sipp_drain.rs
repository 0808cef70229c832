//! The drain rules end to end with real SIPp on loopback: every simulated
//! server is its own `127.22.N.x` address, a profile drains servers while
//! calls, registrations and subscriptions flow through the gate.
//!
//! Each test names the rules it proves. Loads are small (<= 30 calls/s) and
//! every SIPp run ends by itself.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::*;
use ringsync::config::Service;
use ringsync::view::{Health, InstanceState};
use sip_gate::Gate;
use testbed::fixture::SiteFile;
use testbed::{Scenario, SippHandle, SippReport, Transport};

const UDP: Transport = Transport::Udp;
const TCP: Transport = Transport::Tcp;

// === helpers ===

/// A site whose instance `i` is `<service>-<i>` on server `srv-<i>` at
/// [`server_addr`], with the TOML `exceptions` given for it (may be empty),
/// plus `extra` (listeners, accounts, `[drain]`).
fn site_of(net: (u8, u8), instances: &[(&str, &str)], extra: &str) -> String {
    let (a, b) = net;
    let servers: Vec<String> = (0..instances.len()).map(|i| format!("srv-{i}")).collect();
    let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
    let mut site = SiteFile::new(&format!("d{a}-{b}"))
        .secret(&format!("drain-test-secret-{a}-{b}"))
        .section("timers", "retry_after_s = 30\nretry_after_jitter_s = 0")
        .servers(&servers);
    for (i, (service, exceptions)) in instances.iter().enumerate() {
        let mut lines = format!("sip = \"{}\"", server_addr(net, i as u8));
        if !exceptions.is_empty() {
            lines.push_str(&format!("\nexceptions = {exceptions}"));
        }
        site = site.instance_with(&format!("{service}-{i}"), service, servers[i], &lines);
    }
    site.raw(extra).text().to_owned()
}

/// A guard listener in front of `instance` on `127.a.b.host:0`.
fn guard(name: &str, net: (u8, u8), host: u8, instance: &str, leg: &str) -> String {
    format!(
        "[[listener]]\nname = \"{name}\"\nbind = \"{}:0\"\nmode = \"guard\"\ninstance = \"{instance}\"\nleg = \"{leg}\"\n",
        ip(net, host)
    )
}

/// A balance listener over `pool` on `127.a.b.host:0`.
fn balance(name: &str, net: (u8, u8), host: u8, pool: &str, leg: &str) -> String {
    format!(
        "[[listener]]\nname = \"{name}\"\nbind = \"{}:0\"\nmode = \"balance\"\npool = \"{pool}\"\nleg = \"{leg}\"\n",
        ip(net, host)
    )
}

/// A UAC run of `scenario` from `127.a.b.src` to `to`.
fn client(
    scenario: &str,
    net: (u8, u8),
    src: u8,
    to: SocketAddr,
    transport: Transport,
    calls: u64,
) -> testbed::Sipp {
    let rate = calls.clamp(1, 30) as u32;
    uac(
        Scenario::repo(scenario),
        ip(net, src),
        to,
        transport,
        calls,
        rate,
    )
}

/// Runs a UAC and asserts every call succeeded.
async fn run_ok(what: &str, sipp: testbed::Sipp, calls: u64) {
    let r = run(sipp).await;
    assert_all_ok(what, &r, calls);
}

/// Stops a UAS (SIGUSR1) off the runtime and returns its report.
async fn stop(h: SippHandle) -> SippReport {
    tokio::task::spawn_blocking(move || h.stop().expect("uas report"))
        .await
        .expect("stop task")
}

/// Polls `cond` every 10 ms until it holds; fails after `limit`.
async fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the gate holds no work for instance `i`, publishes the work
/// counts and checks the instance reads `drained` (R-ST-1).
async fn assert_drained(gate: &Gate, i: usize) {
    let book = gate.core().work().clone();
    wait_until("the instance's work to end", Duration::from_secs(5), || {
        book.get(i).total() == 0
    })
    .await;
    gate.core().publish_work(Instant::now());
    let view = gate.core().view();
    assert_eq!(
        view.instances()[i].state,
        InstanceState::Drained,
        "{:?}",
        view.instances()[i]
    );
}

/// A UAS report that answered exactly `n` calls, none failed.
fn assert_served(what: &str, r: &SippReport, n: u64) {
    assert_eq!(r.successful, n, "{what}: {r:?}");
    assert_eq!(r.failed, 0, "{what}: {r:?}");
}

// === 1. balance: three sg, one drained under load ===

/// R-AA-1, R-SG-4, R-AA-3, R-ST-1: three sg behind a balance listener; while
/// 24 calls are up on all three, srv-1 drains. New calls all go to sg-0 and
/// sg-2; the calls sg-1 already had finish their re-INVITE and BYE there;
/// sg-1 then reads `drained`. Lifting the drain gives sg-1 new calls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_drain_one_of_three_under_call_load() {
    let net = (22, 1);
    let cfg = config(&site(net, 3, &balance_sg(net)));
    let mut servers: Vec<_> = (0..3)
        .map(|i| Some(uas("uas_call", server_addr(net, i), UDP)))
        .collect();
    let (gate, state) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    let book = gate.core().work().clone();

    // 24 calls held 3 s each.
    let held = tokio::spawn(run(
        client("uac_call", net, 100, gw, UDP, 24).duration(Duration::from_secs(3))
    ));
    wait_until("24 calls up", Duration::from_secs(5), || {
        (0..3).map(|i| book.get(i).dialogs).sum::<u64>() == 24
    })
    .await;
    let up: Vec<u64> = (0..3).map(|i| book.get(i).dialogs).collect();
    assert!(up.iter().all(|&n| n > 0), "calls on every sg: {up:?}");

    drain(&state, 1, &["srv-1"]);
    assert!(state.view().is_draining(1));
    // R-AA-1: new calls while sg-1 drains.
    run_ok(
        "new calls during the drain",
        client("uac_call", net, 101, gw, UDP, 24).duration(Duration::from_millis(100)),
        24,
    )
    .await;
    // R-SG-4: the calls up before the drain end normally (re-INVITE, BYE).
    let r = held.await.expect("held calls");
    assert_all_ok("calls established before the drain", &r, 24);
    // R-ST-1: sg-1 has nothing left.
    assert_drained(&gate, 1).await;
    // sg-1 answered exactly the calls it had when the drain began.
    let sg1 = stop(servers[1].take().expect("sg-1")).await;
    assert_served("sg-1 during the drain", &sg1, up[1]);

    // R-AA-3: lift the drain, sg-1 takes new calls again.
    servers[1] = Some(uas("uas_call", server_addr(net, 1), UDP));
    drain(&state, 2, &[]);
    gate.core().publish_work(Instant::now());
    assert_eq!(state.view().instances()[1].state, InstanceState::Up);
    run_ok(
        "calls after the drain",
        client("uac_call", net, 102, gw, UDP, 24).duration(Duration::from_millis(100)),
        24,
    )
    .await;
    let sg1 = stop(servers[1].take().expect("sg-1")).await;
    assert!(sg1.successful > 0, "sg-1 is back in the ring: {sg1:?}");
    assert_eq!(sg1.failed, 0, "{sg1:?}");
    let mut total = up[1] + sg1.successful;
    for s in [servers[0].take(), servers[2].take()].into_iter().flatten() {
        let r = stop(s).await;
        assert_eq!(r.failed, 0, "{r:?}");
        total += r.successful;
    }
    assert_eq!(total, 72, "every call answered once");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// R-AA-1, R-AA-2, R-AA-3: REGISTER through a balance listener while srv-1
/// drains: every AoR lands where the drained ring says (never sg-1); after
/// the lift, where the full ring says, so sg-1 gets its own AoRs back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balance_registrations_avoid_the_draining_sg() {
    let net = (22, 2);
    let cfg = config(&site(net, 3, &balance_sg(net)));
    let (gate, state) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "subs");
    // The AoRs uac_register writes: sip:service<n>@<gateway ip>, n = 1..=30.
    let expected = |view: &ringsync::view::DrainView| {
        let mut per = [0u64; 3];
        for n in 1..=30 {
            let aor = format!("sip:service{n}@{}", gw.ip());
            per[view.pick(&Service::Sg, aor.as_bytes()).expect("ring")] += 1;
        }
        per
    };

    drain(&state, 1, &["srv-1"]);
    let during = expected(&state.view());
    assert_eq!(during[1], 0);
    let servers: Vec<_> = (0..3)
        .map(|i| uas("uas_register", server_addr(net, i), UDP))
        .collect();
    run_ok(
        "registrations during the drain",
        client("uac_register", net, 100, gw, UDP, 30),
        30,
    )
    .await;
    for (i, s) in servers.into_iter().enumerate() {
        assert_served(
            &format!("sg-{i} during the drain"),
            &stop(s).await,
            during[i],
        );
    }

    drain(&state, 2, &[]);
    let after = expected(&state.view());
    assert!(after[1] > 0, "sg-1 owns some AoRs: {after:?}");
    let servers: Vec<_> = (0..3)
        .map(|i| uas("uas_register", server_addr(net, i), UDP))
        .collect();
    run_ok(
        "registrations after the drain",
        client("uac_register", net, 100, gw, UDP, 30),
        30,
    )
    .await;
    for (i, s) in servers.into_iter().enumerate() {
        assert_served(&format!("sg-{i} after the drain"), &stop(s).await, after[i]);
    }
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 2. guard: one sg refuses while it drains ===

/// R-SG-1, R-SG-5, R-SG-4, R-SG-3, R-SG-2, R-ST-1: a guard listener in front
/// of sg-0. Calls up before srv-0 drains finish; during the drain new
/// INVITE, REGISTER and SUBSCRIBE get 503 with Retry-After (and never reach
/// sg-0); a source with an instance exception gets through; once sg-1 (the
/// only other sg) is down, the guard forwards instead of refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_refuses_new_work_while_the_instance_drains() {
    let net = (22, 3);
    let text = site_of(
        net,
        &[
            ("sg", &format!("[{{ source = \"{}/32\" }}]", ip(net, 102))),
            ("sg", ""),
        ],
        &guard("g0", net, 1, "sg-0", "subscriber"),
    );
    let sg0 = uas("uas_call", server_addr(net, 0), UDP);
    let (gate, state) = start_gate(config(&text)).await;
    let gw = listener_addr(&gate, "g0");
    let book = gate.core().work().clone();

    let held = tokio::spawn(run(
        client("uac_call", net, 100, gw, UDP, 5).duration(Duration::from_millis(2500))
    ));
    wait_until("5 calls up", Duration::from_secs(5), || {
        book.get(0).dialogs == 5
    })
    .await;
    drain(&state, 1, &["srv-0"]);

    // R-SG-1, R-SG-5: new work gets 503 with Retry-After.
    let (inv, reg, sub) = tokio::join!(
        run(client("uac_call_expect_503", net, 101, gw, UDP, 10)),
        run(client("uac_register_expect_503", net, 101, gw, UDP, 10)),
        run(client("uac_subscribe_expect_503", net, 101, gw, UDP, 10)),
    );
    assert_all_ok("INVITE refused", &inv, 10);
    assert_all_ok("REGISTER refused", &reg, 10);
    assert_all_ok("SUBSCRIBE refused", &sub, 10);
    // R-SG-3: the excepted source still places calls on sg-0.
    run_ok(
        "calls from an excepted source",
        client("uac_call", net, 102, gw, UDP, 3).duration(Duration::from_millis(100)),
        3,
    )
    .await;
    // R-SG-4: the calls up before the drain finish.
    let r = held.await.expect("held calls");
    assert_all_ok("calls established before the drain", &r, 5);

    // R-SG-2: with the other sg down nobody could take the work: forward.
    state.set_health(1, Health::Down);
    run_ok(
        "calls with no other sg up",
        client("uac_call", net, 101, gw, UDP, 3).duration(Duration::from_millis(100)),
        3,
    )
    .await;
    assert_drained(&gate, 0).await;
    let r = stop(sg0).await;
    assert_served("sg-0", &r, 5 + 3 + 3);
    assert_eq!(r.out_of_call, 0, "refused requests never reach sg-0: {r:?}");
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 3. esg: provider leg, inside leg, accounts ===

/// R-ESG-1, R-ESG-2, R-ESG-3, R-ESG-4, R-ESG-5: two esg; esg-0 drains.
/// Through the provider-leg guard of esg-0: the multi-instance account gets
/// 503 (its excepted source passes), the single-instance account passes, a
/// call up before the drain finishes. The inside-leg guard passes. A
/// provider-leg balance listener keeps the single-instance account on its
/// home esg-0 and moves the multi-instance account to esg-1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn esg_provider_leg_multi_instance_accounts_only() {
    let net = (22, 4);
    let extra = format!(
        "[[account]]\nname = \"multi\"\nmulti_instance = true\nmatch = {{ source = [\"{multi}/31\"] }}\nexceptions = [{{ source = \"{excepted}/32\" }}]\n\
         [[account]]\nname = \"single\"\nmulti_instance = false\nhome = \"esg-0\"\nmatch = {{ source = [\"{single}/32\"] }}\n{}{}{}",
        guard("prov-g0", net, 1, "esg-0", "provider"),
        guard("in-g0", net, 2, "esg-0", "inside"),
        balance("prov-bal", net, 3, "esg", "provider"),
        multi = ip(net, 100),
        excepted = ip(net, 101),
        single = ip(net, 102),
    );
    let text = site_of(net, &[("esg", ""), ("esg", "")], &extra);
    let servers: Vec<_> = (0..2)
        .map(|i| uas("uas_call", server_addr(net, i), UDP))
        .collect();
    let (gate, state) = start_gate(config(&text)).await;
    let prov = listener_addr(&gate, "prov-g0");
    let inside = listener_addr(&gate, "in-g0");
    let bal = listener_addr(&gate, "prov-bal");
    let book = gate.core().work().clone();
    let short = Duration::from_millis(100);

    // R-ESG-4 (R-SG-4): multi-instance calls up on esg-0 before the drain.
    let held = tokio::spawn(run(
        client("uac_call", net, 100, prov, UDP, 3).duration(Duration::from_millis(2500))
    ));
    wait_until("3 calls up", Duration::from_secs(5), || {
        book.get(0).dialogs == 3
    })
    .await;
    drain(&state, 1, &["srv-0"]);

    // Distinct call counts per run, so the per-esg totals tell them apart.
    let (refused, excepted, single, inside_leg, bal_single, bal_multi) = tokio::join!(
        // R-ESG-1, R-ESG-2, R-ESG-4 (R-SG-5): multi-instance on the provider leg.
        run(client("uac_call_expect_503", net, 100, prov, UDP, 5)),
        // R-ESG-3: the account's exception.
        run(client("uac_call", net, 101, prov, UDP, 3).duration(short)),
        // R-ESG-2, R-ESG-3: a single-instance account keeps its esg.
        run(client("uac_call", net, 102, prov, UDP, 2).duration(short)),
        // R-ESG-1, R-ESG-3: the inside leg keeps taking new work.
        run(client("uac_call", net, 100, inside, UDP, 4).duration(short)),
        // R-ESG-5: the single-instance account stays on its home esg-0.
        run(client("uac_call", net, 102, bal, UDP, 6).duration(short)),
        // R-ESG-5, R-AA-1: the multi-instance account moves to esg-1.
        run(client("uac_call", net, 100, bal, UDP, 7).duration(short)),
    );
    assert_all_ok("multi-instance account refused", &refused, 5);
    assert_all_ok("excepted source of the account", &excepted, 3);
    assert_all_ok("single-instance account", &single, 2);
    assert_all_ok("inside leg", &inside_leg, 4);
    assert_all_ok("single-instance account, balanced", &bal_single, 6);
    assert_all_ok("multi-instance account, balanced", &bal_multi, 7);
    let r = held.await.expect("held calls");
    assert_all_ok("calls established before the drain", &r, 3);

    let mut reports = Vec::new();
    for s in servers {
        reports.push(stop(s).await);
    }
    assert_served("esg-0", &reports[0], 3 + 3 + 2 + 4 + 6);
    assert_served("esg-1", &reports[1], 7);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 4. all draining ===

/// R-AA-4, R-SG-2: every server drains. The balance listener still serves
/// (on the draining sg) and the guard forwards instead of refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_draining_still_serves() {
    let net = (22, 5);
    let extra = format!(
        "{}{}",
        balance_sg(net),
        guard("g0", net, 2, "sg-0", "subscriber")
    );
    let cfg = config(&site(net, 2, &extra));
    let servers: Vec<_> = (0..2)
        .map(|i| uas("uas_call", server_addr(net, i), UDP))
        .collect();
    let (gate, state) = start_gate(cfg).await;
    drain(&state, 1, &["srv-0", "srv-1"]);
    let short = Duration::from_millis(100);
    let (bal, grd) = tokio::join!(
        run(client("uac_call", net, 100, listener_addr(&gate, "subs"), UDP, 10).duration(short)),
        run(client("uac_call", net, 101, listener_addr(&gate, "g0"), UDP, 4).duration(short)),
    );
    assert_all_ok("balance with every sg draining", &bal, 10);
    assert_all_ok("guard with every sg draining", &grd, 4);
    let mut total = 0;
    for s in servers {
        let r = stop(s).await;
        assert_eq!(r.failed, 0, "{r:?}");
        total += r.successful;
    }
    assert_eq!(total, 14);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 5. de-REGISTER and OPTIONS ===

/// R-SG-1: on a draining sg (another one up) removing a binding passes
/// while a new registration gets 503; OPTIONS passes by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deregister_and_options_pass_a_draining_guard() {
    let net = (22, 6);
    let extra = format!(
        "{}{}",
        guard("g0", net, 1, "sg-0", "subscriber"),
        guard("g1", net, 2, "sg-1", "subscriber")
    );
    let cfg = config(&site(net, 3, &extra));
    let registrar = uas("uas_register", server_addr(net, 0), UDP);
    let pinged = uas("uas_options", server_addr(net, 1), UDP);
    let (gate, state) = start_gate(cfg).await;
    let (g0, g1) = (listener_addr(&gate, "g0"), listener_addr(&gate, "g1"));
    drain(&state, 1, &["srv-0", "srv-1"]);
    let (unreg, reg, opt) = tokio::join!(
        run(client("uac_unregister", net, 100, g0, UDP, 5)),
        run(client("uac_register_expect_503", net, 101, g0, UDP, 5)),
        run(client("uac_options", net, 100, g1, UDP, 5)),
    );
    assert_all_ok("de-REGISTER passes", &unreg, 5);
    assert_all_ok("REGISTER refused", &reg, 5);
    assert_all_ok("OPTIONS passes", &opt, 5);
    assert_served("sg-0 registrar", &stop(registrar).await, 5);
    assert_served("sg-1 OPTIONS", &stop(pinged).await, 5);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

/// R-SG-5 with `[drain] options_503 = true`: OPTIONS to a draining sg gets
/// 503 with Retry-After (providers ping trunks); to a normal one it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_503_when_configured() {
    let net = (22, 7);
    let extra = format!(
        "[drain]\noptions_503 = true\n{}{}",
        guard("g0", net, 1, "sg-0", "subscriber"),
        guard("g1", net, 2, "sg-1", "subscriber")
    );
    let cfg = config(&site(net, 2, &extra));
    let servers: Vec<_> = (0..2)
        .map(|i| uas("uas_options", server_addr(net, i), UDP))
        .collect();
    let (gate, state) = start_gate(cfg).await;
    drain(&state, 1, &["srv-0"]);
    let (refused, passed) = tokio::join!(
        run(client(
            "uac_options_expect_503",
            net,
            100,
            listener_addr(&gate, "g0"),
            UDP,
            5
        )),
        run(client(
            "uac_options",
            net,
            100,
            listener_addr(&gate, "g1"),
            UDP,
            5
        )),
    );
    assert_all_ok("OPTIONS to the draining sg", &refused, 5);
    assert_all_ok("OPTIONS to the normal sg", &passed, 5);
    let mut servers = servers.into_iter();
    let sg0 = stop(servers.next().expect("sg-0")).await;
    assert_served("sg-0", &sg0, 0);
    assert_served("sg-1", &stop(servers.next().expect("sg-1")).await, 5);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 6. CANCEL racing the drain ===

/// R-SG-4, R-ST-1: INVITEs forwarded to sg-0 ring; srv-0 drains; their
/// CANCELs (and the ACKs of the 487s) still reach sg-0, then it is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_after_the_drain_reaches_the_instance() {
    let net = (22, 8);
    let cfg = config(&site(net, 2, &guard("g0", net, 1, "sg-0", "subscriber")));
    let sg0 = uas("uas_cancel", server_addr(net, 0), UDP);
    let (gate, state) = start_gate(cfg).await;
    let gw = listener_addr(&gate, "g0");
    let book = gate.core().work().clone();
    let calls = tokio::spawn(run(
        client("uac_cancel_hold", net, 100, gw, UDP, 5).duration(Duration::from_millis(1500))
    ));
    wait_until("5 INVITEs ringing", Duration::from_secs(5), || {
        book.get(0).transactions == 5
    })
    .await;
    drain(&state, 1, &["srv-0"]);
    gate.core().publish_work(Instant::now());
    assert_eq!(
        state.view().instances()[0].state,
        InstanceState::Draining,
        "open INVITEs keep sg-0 draining"
    );
    let r = calls.await.expect("cancel calls");
    assert_all_ok("CANCEL after the drain", &r, 5);
    assert_drained(&gate, 0).await;
    assert_served("sg-0", &stop(sg0).await, 5);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}

// === 7. TCP ===

/// R-AA-1, R-SG-1, R-SG-5 over TCP: the balance listener steers new calls
/// off the draining sg-0, its guard answers 503 with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_balance_steers_and_guard_refuses() {
    let net = (22, 9);
    let extra = format!(
        "{}{}",
        balance_sg(net),
        guard("g0", net, 2, "sg-0", "subscriber")
    );
    let cfg = config(&site(net, 3, &extra));
    let servers: Vec<_> = (0..3)
        .map(|i| uas("uas_call", server_addr(net, i), TCP))
        .collect();
    let (gate, state) = start_gate(cfg).await;
    drain(&state, 1, &["srv-0"]);
    let (bal, grd) = tokio::join!(
        run(
            client("uac_call", net, 100, listener_addr(&gate, "subs"), TCP, 12)
                .duration(Duration::from_millis(100))
        ),
        run(client(
            "uac_call_expect_503",
            net,
            101,
            listener_addr(&gate, "g0"),
            TCP,
            5
        )),
    );
    assert_all_ok("balance over TCP", &bal, 12);
    assert_all_ok("guard 503 over TCP", &grd, 5);
    let mut reports = Vec::new();
    for s in servers {
        reports.push(stop(s).await);
    }
    assert_served("sg-0", &reports[0], 0);
    assert_eq!(reports[0].out_of_call, 0, "{:?}", reports[0]);
    assert_eq!(reports[1].successful + reports[2].successful, 12);
    assert!(gate.shutdown(Duration::from_secs(5)).await);
}
