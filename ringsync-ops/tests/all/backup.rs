//! `ringsync backup` / `ringsync restore` through the real binary (issue
//! 27): a site on the embedded file with profiles and an audit trail (a
//! refusal among its changes) is backed up and restored into a fresh real
//! etcd, after which `status`, `profile list` and `audit` show the same; a
//! restore of a changed or cut file, or of another site's backup, is
//! refused, writes no profile and is itself audited (R-PR-4); a second
//! restore adds nothing but its own record; a backup of etcd restores into
//! a fresh file store.
//!
//! Addresses: etcd on `127.0.72.11`.

use std::path::Path;
use std::process::Output;

use crate::common::etcd::{etcd_site_text, ip};
use crate::common::served::{at as run, ok};
use crate::common::{site, TestSite};
use ringsync::store::{AuditPage, AuditRecord};
use testbed::Etcd;

fn fails(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json(site: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(&run(site, &all))).unwrap()
}

fn audit(site: &Path) -> Vec<AuditRecord> {
    let page: AuditPage =
        serde_json::from_value(json(site, &["audit", "--limit", "1000"])).unwrap();
    page.records
}

/// A record without its place in the log, which each store assigns.
fn unplaced(r: &AuditRecord) -> AuditRecord {
    AuditRecord {
        seq: 0,
        ..r.clone()
    }
}

/// What status says of each instance, and the drain zone.
fn states(site: &Path) -> (serde_json::Value, Vec<(String, String, String)>) {
    let st = json(site, &["status"]);
    let inst = (st["instances"].as_array().unwrap().iter())
        .map(|i| {
            let f = |k: &str| i[k].as_str().unwrap().to_owned();
            (f("id"), f("zone"), f("state"))
        })
        .collect();
    (st["drain_zone"].clone(), inst)
}

#[test]
fn backup_of_a_file_store_restored_into_a_fresh_etcd_shows_the_same() {
    let file = TestSite::new();
    let src = file.config.path.clone();
    let backup = file.dir.path().join("site.backup");
    trail_and_backup(&src, &backup);

    let etcd = Etcd::single(ip(72, 11)).expect("etcd");
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("site.toml");
    std::fs::write(&dst, etcd_site_text(&etcd.endpoints(), "/drain/t1")).unwrap();
    let b = backup.to_str().unwrap();

    bad_files_are_refused(&dst, &backup, dir.path());
    restore_shows_the_same(&src, &dst, b);
    another_sites_backup_needs_force(&src, &dst);
    back_into_a_fresh_file_store(&dst, dir.path());
}

/// Profiles and an audit trail with a refusal in it, backed up to `backup`.
fn trail_and_backup(src: &Path, backup: &Path) {
    let src = src.to_path_buf();
    for args in [
        &[
            "profile", "create", "--name", "maint-a", "--server", "srv-a",
        ][..],
        &[
            "profile", "create", "--name", "maint-b", "--server", "srv-b",
        ],
        &["profile", "activate", "maint-a"],
        &["profile", "update", "maint-b", "--description", "kernel"],
    ] {
        ok(&run(&src, args));
    }
    // A refusal in the trail: a server the site does not define (R-PR-1).
    fails(&run(
        &src,
        &["profile", "create", "--name", "bad", "--server", "srv-z"],
    ));
    let said = ok(&run(&src, &["backup", backup.to_str().unwrap()]));
    assert!(said.contains("backup of site `t1` written"), "{said}");
}

/// A changed byte, a cut file: refused, nothing restored, each audited.
fn bad_files_are_refused(dst: &Path, backup: &Path, dir: &Path) {
    let dst = dst.to_path_buf();
    let bytes = std::fs::read(backup).unwrap();
    let mut changed = bytes.clone();
    let at = changed.len() - 40;
    changed[at] = if changed[at] == b'1' { b'2' } else { b'1' };
    let changed_file = dir.join("changed.backup");
    std::fs::write(&changed_file, &changed).unwrap();
    let cut_file = dir.join("cut.backup");
    std::fs::write(&cut_file, &bytes[..bytes.len() / 2]).unwrap();
    for f in [&changed_file, &cut_file] {
        let err = fails(&run(&dst, &["restore", f.to_str().unwrap()]));
        assert!(err.contains("checksum mismatch"), "{err}");
        assert!(err.contains("nothing was restored"), "{err}");
    }
    assert_eq!(
        json(&dst, &["profile", "list"])["profiles"],
        serde_json::json!([])
    );
    let refused = audit(&dst);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused
        .iter()
        .all(|r| r.action == "restore" && r.status == 400 && r.error.is_some()));
}

/// The real restore: the same profiles, status and trail, then a second
/// run that adds only its own record.
fn restore_shows_the_same(src: &Path, dst: &Path, b: &str) {
    let (src, dst) = (src.to_path_buf(), dst.to_path_buf());
    let said = ok(&run(&dst, &["restore", b]));
    assert!(
        said.contains("2 profile(s) written, 5 audit record(s) added"),
        "{said}"
    );
    assert_eq!(
        json(&dst, &["profile", "list"]),
        json(&src, &["profile", "list"]),
        "the same profiles: ids, states, revisions"
    );
    assert_eq!(states(&dst), states(&src), "status shows the same");
    let before: Vec<AuditRecord> = audit(&src).iter().map(unplaced).collect();
    let after: Vec<AuditRecord> = audit(&dst).iter().map(unplaced).collect();
    assert_eq!(before.len(), 5, "{before:?}");
    // The two refusals, the backup's trail as it was, one import record per
    // profile (R-PR-4), and the restore's own record.
    assert_eq!(&after[2..7], &before[..], "the trail, as it was");
    assert_eq!(after.len(), 10, "{after:?}");
    assert!(after[7..9].iter().all(|r| r.action == "import"));
    let last = &after[9];
    assert_eq!((last.action.as_str(), last.status), ("restore", 200));
    assert!(last.who.starts_with("local:"), "{last:?}");
    assert_eq!(last.target.as_deref(), Some(b));

    // Again: nothing is added twice; the restore is recorded.
    let said = ok(&run(&dst, &["restore", b]));
    assert!(
        said.contains("2 profile(s) already there, 0 audit record(s) added"),
        "{said}"
    );
    assert_eq!(audit(&dst).len(), 11);
}

/// Another site's backup: refused unless --force.
fn another_sites_backup_needs_force(src: &Path, dst: &Path) {
    let (src, dst) = (src.to_path_buf(), dst.to_path_buf());
    let other = TestSite::with_text(&site().replace("name = \"t1\"", "name = \"t2\""));
    let other_site = other.config.path.clone();
    ok(&run(
        &other_site,
        &["profile", "create", "--name", "other", "--server", "srv-c"],
    ));
    let other_backup = other.dir.path().join("t2.backup");
    ok(&run(
        &other_site,
        &["backup", other_backup.to_str().unwrap()],
    ));
    let ob = other_backup.to_str().unwrap();
    let err = fails(&run(&dst, &["restore", ob]));
    assert!(err.contains("backup of site `t2`, not `t1`"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        json(&dst, &["profile", "list"]),
        json(&src, &["profile", "list"]),
        "nothing restored"
    );
    assert_eq!(audit(&dst).last().map(|r| r.status), Some(409));
    ok(&run(&dst, &["restore", ob, "--force"]));
    let names: Vec<String> = (json(&dst, &["profile", "list"])["profiles"].as_array())
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["other"]);
}

/// A backup of the etcd store restored into a fresh file store.
fn back_into_a_fresh_file_store(dst: &Path, dir: &Path) {
    let dst = dst.to_path_buf();
    let from_etcd = dir.join("etcd.backup");
    ok(&run(&dst, &["backup", from_etcd.to_str().unwrap()]));
    let fresh = TestSite::new();
    ok(&run(
        &fresh.config.path,
        &["restore", from_etcd.to_str().unwrap()],
    ));
    assert_eq!(
        json(&fresh.config.path, &["profile", "list"]),
        json(&dst, &["profile", "list"])
    );
    let trail: Vec<AuditRecord> = audit(&dst).iter().map(unplaced).collect();
    let copied: Vec<AuditRecord> = audit(&fresh.config.path).iter().map(unplaced).collect();
    assert_eq!(
        &copied[..trail.len()],
        &trail[..],
        "the etcd trail, as it was"
    );
}
