//! R-PR-4 under kill -9 through the real binary: writers killed at random
//! moments never leave a torn store file, and the audit log then names
//! exactly the changes the store holds.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::served::{local as ringsync, ok, BIN};
use crate::common::TestSite;
use ringsync::profile::ProfileSet;

#[test]
fn r_pr_4_kill_9_during_writes_never_leaves_a_torn_file_and_the_log_matches() {
    let site = TestSite::new();
    // Grow the file so a write takes a little longer and kills land mid-write.
    let t0 = Instant::now();
    for i in 0..30 {
        ok(&ringsync(
            &site,
            &[
                "profile",
                "create",
                "--name",
                &format!("seed-{i}"),
                "--server",
                "srv-a",
                "--description",
                &"x".repeat(2000),
            ],
        ));
    }
    // A whole run (start-up, lock, read, write, fsync, rename) takes about this long.
    let run_us = (t0.elapsed().as_micros() / 30).max(1000) as u64;
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut kills = 0;
    let mut i = 0u64;
    while Instant::now() < deadline {
        i += 1;
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(site.site_path())
            .args([
                "profile",
                "create",
                "--name",
                &format!("k-{i}"),
                "--server",
                "srv-b",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Random moment within the process's life (start-up to write is a few ms).
        let wait = Duration::from_micros(rand_u64(i) % (run_us + run_us / 4));
        std::thread::sleep(wait);
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        let _ = child.wait();
        let bytes = std::fs::read(site.store_path()).unwrap();
        let set: ProfileSet = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("torn file after kill #{kills}: {e}"));
        assert!(set.profiles.len() >= 30);
    }
    let written = serde_json::from_slice::<ProfileSet>(&std::fs::read(site.store_path()).unwrap())
        .unwrap()
        .profiles
        .len()
        - 30;
    println!("{i} writers ({run_us} µs a run), {kills} killed, {written} writes landed");
    assert!(kills > 0 && written > 0, "kills must straddle the write");
    // The lock of a killed writer is gone: a new write goes through.
    ok(&ringsync(
        &site,
        &["profile", "create", "--name", "after", "--server", "srv-c"],
    ));
    let set: ProfileSet =
        serde_json::from_slice(&std::fs::read(site.store_path()).unwrap()).unwrap();
    assert!(set.find("after").is_some());
    assert_eq!(
        set.revision as usize,
        set.profiles.len(),
        "every acknowledged write is there"
    );

    audit_names_exactly(&site, &set);
}

/// The audit log holds exactly the changes in the store, in their order:
/// a writer killed after its record had its change committed by the next
/// process to take the lock, and a torn record is skipped, never merged.
fn audit_names_exactly(site: &TestSite, set: &ProfileSet) {
    let (mut records, mut skipped, mut after) = (Vec::new(), 0, None::<u64>);
    loop {
        let mut args = vec![
            "--json".to_owned(),
            "audit".into(),
            "--limit".into(),
            "1000".into(),
        ];
        if let Some(a) = after {
            args.extend(["--after".into(), a.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let page: ringsync::store::AuditPage =
            serde_json::from_str(&ok(&ringsync(site, &args))).unwrap();
        records.extend(page.records);
        skipped += page.skipped.len();
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let logged: Vec<(u64, String)> = records
        .iter()
        .map(|r| {
            assert_eq!((r.action.as_str(), r.status), ("create", 201), "{r:?}");
            (r.revision.unwrap(), r.after.as_ref().unwrap().name.clone())
        })
        .collect();
    let mut stored: Vec<(u64, String)> = set
        .profiles
        .iter()
        .map(|p| (p.revision, p.name.clone()))
        .collect();
    stored.sort();
    assert_eq!(logged, stored, "the log names exactly the changes made");
    println!(
        "audit: {} records, {skipped} torn and skipped",
        records.len()
    );
}

/// A cheap deterministic spread of kill moments (splitmix64).
fn rand_u64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
