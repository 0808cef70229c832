//! The `ringsync` binary on a site stored in a real etcd: `migrate` from the
//! embedded file (idempotent, refuses to overwrite other profiles unless
//! told), profile commands, a conflict's exit, `node list`/`forget`, and
//! `status` listing the registered nodes; every import audited (R-PR-4),
//! and a node that met a corrupt document fresh again after a good one
//! (R-MN-2).

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::etcd::{etcd_site_text, ip};
use crate::common::served::{at as run, ok};
use crate::common::TestSite;
use testbed::bins::Node;
use testbed::{Etcd, TcpPartition};

fn fails(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn migrate_then_run_the_site_on_etcd() {
    let etcd = Etcd::single(ip(67, 11)).expect("etcd");
    let ep = etcd.endpoints()[0].clone();
    let embedded = TestSite::new();
    let e = embedded.site_path();
    ok(&run(
        &e,
        &["profile", "create", "--name", "a", "--server", "srv-a"],
    ));
    ok(&run(
        &e,
        &["profile", "create", "--name", "b", "--server", "srv-b"],
    ));
    ok(&run(&e, &["profile", "activate", "a"]));

    // Copy, then again: the second run writes nothing.
    let args = crate::common::served::migrate_to_etcd(&ep);
    let out = ok(&run(&e, &args));
    assert!(
        out.starts_with("copied 2 profile(s) at revision 3"),
        "{out}"
    );
    let out = ok(&run(&e, &args));
    assert!(out.contains("already holds these 2 profile(s)"), "{out}");

    // The same site, now on etcd (default prefix /drain/t1).
    let etcd_site = embedded.dir.path().join("etcd-site.toml");
    std::fs::write(
        &etcd_site,
        etcd_site_text(std::slice::from_ref(&ep), "/drain/t1"),
    )
    .unwrap();
    let list = ok(&run(&etcd_site, &["--json", "profile", "list"]));
    let set: ringsync::ProfileSet = serde_json::from_str(&list).unwrap();
    let on_file: ringsync::ProfileSet =
        serde_json::from_slice(&std::fs::read(embedded.store_path()).unwrap()).unwrap();
    assert_eq!(set, on_file, "ids, states and revision kept");

    // The target now differs: refused without --overwrite, nothing changed.
    ok(&run(
        &etcd_site,
        &["profile", "create", "--name", "c", "--server", "srv-c"],
    ));
    let err = fails(&run(&e, &args));
    assert!(
        err.contains("refusing to overwrite") && err.contains("--overwrite"),
        "{err}"
    );
    let mut over = args.to_vec();
    over.push("--overwrite");
    let out = ok(&run(&e, &over));
    assert!(out.starts_with("copied 2 profile(s)"), "{out}");
    let list = ok(&run(&etcd_site, &["--json", "profile", "list"]));
    let after: ringsync::ProfileSet = serde_json::from_str(&list).unwrap();
    assert_eq!(after.profiles, on_file.profiles);
    assert_eq!(after.revision, 5, "revision moves on, never back");

    // R-PR-1 through the CLI on etcd, with its exit code and message.
    let err = fails(&run(
        &etcd_site,
        &["profile", "create", "--name", "x", "--server", "srv-nope"],
    ));
    assert!(err.contains("unknown server `srv-nope`"), "{err}");

    // A `ringsync serve` registers itself; `node list` and `status` show it.
    let mut serve = Node::serve(&etcd_site)
        .admin((ip(67, 21), 0).into())
        .start()
        .expect("ringsync serve");
    let t0 = Instant::now();
    let listed = loop {
        let out = ok(&run(&etcd_site, &["node", "list"]));
        if out.contains("ringsync") && out.contains("live, view revision 5") {
            break out;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "serve never registered"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(listed.contains("live, view revision 5"), "{listed}");
    let status = ok(&run(&etcd_site, &["status"]));
    assert!(
        status.contains("site t1, profile revision 5, drain zone: srv-a"),
        "{status}"
    );
    assert!(status.contains("store: fresh"), "{status}");
    // No gate is registered: nobody can vouch for sg-a's work or say how it
    // is, so it is unknown, never drained (R-ST-3, R-ST-4).
    let sg_a = status.lines().find(|l| l.starts_with("sg-a")).unwrap();
    assert!(sg_a.contains("unknown"), "{sg_a}");

    // Killed without a word: its lease expires and it is named, then forgotten.
    assert!(serve.kill().is_some(), "ringsync serve was not running");
    let node = listed
        .lines()
        .find(|l| l.contains("ringsync"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let t0 = Instant::now();
    loop {
        let out = ok(&run(&etcd_site, &["node", "list"]));
        if out.contains("LEASE EXPIRED") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "lease never expired: {out}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let out = ok(&run(&etcd_site, &["node", "forget", &node]));
    assert!(out.contains("forgot node"), "{out}");
    let err = fails(&run(&etcd_site, &["node", "forget", &node]));
    assert!(err.contains("no node named"), "{err}");
    let err = fails(&run(&e, &["node", "list"]));
    assert!(err.contains("keeps no node registry"), "{err}");
}

/// The audit records `ringsync --json audit` prints for `site`, oldest first.
fn audit_records(site: &std::path::Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&ok(&run(site, &["--json", "audit"]))).unwrap();
    v["records"].as_array().unwrap().clone()
}

/// The `import` records among `records`: (profile, status, before's id,
/// after's id).
/// The import records among `records`, sorted by profile name: one
/// migration writes its records in the store's order of profiles (by id,
/// which is random), not in the order the test created them.
fn imports(records: &[serde_json::Value]) -> Vec<(String, u64, String, String)> {
    let id = |v: &serde_json::Value| v["id"].as_str().unwrap_or("-").to_owned();
    let mut found: Vec<_> = records
        .iter()
        .filter(|r| r["action"] == "import")
        .map(|r| {
            (
                r["target"].as_str().unwrap_or("-").to_owned(),
                r["status"].as_u64().unwrap_or(0),
                id(&r["before"]),
                id(&r["after"]),
            )
        })
        .collect();
    found.sort();
    found
}

/// R-PR-4: `ringsync migrate` is audited like every other change: one
/// `import` record per profile it writes, by the local OS user, in the
/// target's log (etcd, then back to a new embedded file); a run that
/// writes nothing records nothing; `--overwrite` records what it replaced
/// and what it removed.
#[test]
fn r_pr_4_migrate_writes_one_audit_record_per_profile_in_the_target() {
    let etcd = Etcd::single(ip(70, 11)).expect("etcd");
    let ep = etcd.endpoints()[0].clone();
    let embedded = TestSite::new();
    let e = embedded.site_path();
    for (name, server) in [("a", "srv-a"), ("b", "srv-b")] {
        ok(&run(
            &e,
            &["profile", "create", "--name", name, "--server", server],
        ));
    }
    let src: ringsync::ProfileSet =
        serde_json::from_slice(&std::fs::read(embedded.store_path()).unwrap()).unwrap();
    let id_of = |set: &ringsync::ProfileSet, name: &str| {
        set.profiles
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .id
            .clone()
    };
    let (a, b) = (id_of(&src, "a"), id_of(&src, "b"));
    let uid = nix::unistd::getuid();
    let who = nix::unistd::User::from_uid(uid)
        .unwrap()
        .map_or(format!("local:uid{uid}"), |u| format!("local:{}", u.name));

    let to_etcd = crate::common::served::migrate_to_etcd(&ep);
    ok(&run(&e, &to_etcd));
    ok(&run(&e, &to_etcd)); // already there: writes, and records, nothing
    let etcd_site = embedded.dir.path().join("etcd-site.toml");
    std::fs::write(
        &etcd_site,
        etcd_site_text(std::slice::from_ref(&ep), "/drain/t1"),
    )
    .unwrap();
    let records = audit_records(&etcd_site);
    let dash = || "-".to_owned();
    assert_eq!(
        imports(&records),
        vec![
            ("a".into(), 201, dash(), a.clone()),
            ("b".into(), 201, dash(), b.clone()),
        ],
        "{records:#?}"
    );
    for r in &records {
        assert_eq!(r["who"], who.as_str(), "{r}");
        assert_eq!(r["from"], "local", "{r}");
        assert_eq!(r["revision"], src.revision, "{r}");
    }
    let text = ok(&run(&etcd_site, &["audit"]));
    assert!(
        text.lines()
            .filter(|l| l.contains(" import ") && l.contains(&who))
            .count()
            == 2,
        "{text}"
    );

    // The etcd side moves on (one record of its own), then --overwrite
    // brings the file's set back: `c` removed, `a` replaced, `b` as it was.
    ok(&run(
        &etcd_site,
        &["profile", "create", "--name", "c", "--server", "srv-c"],
    ));
    ok(&run(&etcd_site, &["profile", "activate", "a"]));
    let on_etcd: ringsync::ProfileSet =
        serde_json::from_str(&ok(&run(&etcd_site, &["--json", "profile", "list"]))).unwrap();
    let c = id_of(&on_etcd, "c");
    let mut over = to_etcd.to_vec();
    over.push("--overwrite");
    ok(&run(&e, &over));
    let records = audit_records(&etcd_site);
    assert_eq!(records.len(), 2 + 2 + 2, "{records:#?}");
    assert_eq!(
        imports(&records[4..]),
        vec![
            ("a".into(), 200, a.clone(), a.clone()),
            ("c".into(), 200, c.clone(), dash()),
        ],
        "{records:#?}"
    );

    // And back, into a new embedded file: its own log holds the copy.
    let back = embedded.dir.path().join("back.profiles.json");
    let back_str = back.to_str().unwrap();
    ok(&run(
        &etcd_site,
        &[
            "migrate", "--from", "etcd", "--to", "embedded", "--path", back_str,
        ],
    ));
    let back_site = embedded.dir.path().join("back-site.toml");
    let text = std::fs::read_to_string(&e)
        .unwrap()
        .replace("\"t1.profiles.json\"", "\"back.profiles.json\"");
    assert!(text.contains("back.profiles.json"), "{text}");
    std::fs::write(&back_site, text).unwrap();
    let records = audit_records(&back_site);
    assert_eq!(
        imports(&records),
        vec![
            ("a".into(), 201, dash(), a.clone()),
            ("b".into(), 201, dash(), b.clone()),
        ],
        "{records:#?}"
    );
    assert!(
        records.iter().all(|r| r["who"] == who.as_str()),
        "{records:#?}"
    );
}

/// Polls `serve`'s `/readyz` until its body says `needle`, for up to
/// `timeout`: that body.
fn readyz_until(serve: &Node, needle: &str, timeout: Duration) -> String {
    serve
        .wait_for(&format!("/readyz to say {needle:?}"), timeout, |n| {
            let body = n.get("/readyz").map(|r| r.body).unwrap_or_default();
            body.contains(needle).then_some(body)
        })
        .unwrap()
}

/// R-MN-2: a `ringsync serve` cut off from etcd (a partition) while the
/// profile document is overwritten with something that does not parse
/// finds it corrupt as its watch is set up again, and says it is stale and
/// why; a good document written after it makes the node fresh, with the
/// good version's revision. (The watch used to wait for a version "newer
/// than corrupt" that could never come: the node stayed stale.)
#[test]
fn r_mn_2_a_good_document_after_a_corrupt_one_seen_at_reconnect_makes_the_node_fresh() {
    let etcd = Etcd::single(ip(71, 11)).expect("etcd");
    let relay = TcpPartition::start((ip(71, 21), 0).into(), etcd.client_addr(0)).unwrap();
    let via = format!("http://{}", relay.addr());
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.toml");
    std::fs::write(&site, etcd_site_text(&[via], "/drain/t1")).unwrap();
    ok(&run(
        &site,
        &["profile", "create", "--name", "a", "--server", "srv-a"],
    ));
    let mut serve = Node::serve(&site)
        .admin((ip(71, 31), 0).into())
        .start()
        .expect("ringsync serve");
    serve.wait_ready().unwrap();
    let readyz = |n: &Node| n.get("/readyz").map(|r| r.body).unwrap_or_default();
    assert!(
        readyz(&serve).contains("store: fresh"),
        "{}",
        readyz(&serve)
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut client = rt
        .block_on(etcd_client::Client::connect(etcd.endpoints(), None))
        .unwrap();
    let key = "/drain/t1/profiles";
    let good = rt.block_on(client.get(key, None)).unwrap().kvs()[0]
        .value()
        .to_vec();

    relay.cut();
    serve
        .wait_for("stale while cut off", Duration::from_secs(10), |n| {
            readyz(n).contains("store: stale").then_some(())
        })
        .unwrap();
    rt.block_on(client.put(key, "{ not a profile set", None))
        .unwrap();
    relay.restore();
    // Back in touch: the watch is set up again on the corrupt version.
    let said = readyz_until(&serve, "is corrupt", Duration::from_secs(10));
    assert!(said.contains("store: stale"), "{said}");

    let put = rt.block_on(client.put(key, good, None)).unwrap();
    let revision = put.header().unwrap().revision();
    let said = readyz_until(&serve, "store: fresh", Duration::from_secs(5));
    assert!(said.contains(&format!("(revision {revision})")), "{said}");
}
