//! The embedded store's audit log rolls by size (`[audit] max_bytes`,
//! `keep`; issue 27) through the real `ringsync` binary: with a 1 KiB bound
//! the changes the CLI makes roll the log to numbered parts, at most `keep`
//! parts stay, and `ringsync audit` still reads every kept record oldest
//! first across the parts, with seqs that keep growing, page by page.

use std::process::Output;

use crate::common::served::{local, ok};
use crate::common::{site, TestSite};
use ringsync::store::AuditPage;

#[test]
fn the_audit_log_rolls_by_size_keeps_its_parts_and_audit_reads_across_them() {
    let site = TestSite::with_text(&format!(
        "{}\n[audit]\nmax_bytes = 1024\nkeep = 2\n",
        site()
    ));
    let run = |args: &[&str]| local(&site, args);
    ok(&run(&[
        "profile", "create", "--name", "m", "--server", "srv-a",
    ]));
    // Each activate/deactivate record holds the profile twice: ~500 bytes.
    for _ in 0..8 {
        ok(&run(&["profile", "activate", "m"]));
        ok(&run(&["profile", "deactivate", "m"]));
    }
    let log = site.store_path().with_extension("json.audit.jsonl");
    let dir = site.dir.path();
    let mut parts: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("t1.profiles.json.audit.jsonl."))
        .collect();
    parts.sort();
    assert_eq!(parts.len(), 2, "keep = 2 parts: {parts:?}");
    for p in &parts {
        let len = std::fs::metadata(dir.join(p)).unwrap().len();
        assert!(len <= 1024, "{p}: {len} bytes, over the bound");
    }
    assert!(std::fs::metadata(&log).unwrap().len() <= 1024);

    let page: AuditPage =
        serde_json::from_str(&ok(&run(&["--json", "audit", "--limit", "1000"]))).unwrap();
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(page.records.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    // The oldest records were removed with the oldest parts; what is left
    // is the newest, alternating, ending with the last change.
    assert!(
        page.records.len() >= 3 && page.records.len() < 17,
        "{}",
        page.records.len()
    );
    assert_eq!(page.records.last().unwrap().action, "deactivate");
    assert!(page.records.windows(2).all(|w| w[0].action != w[1].action));
    assert_eq!(
        page.skipped.len(),
        1,
        "says records were rotated out: {:?}",
        page.skipped
    );

    // Paged by two with `--after`, the same records across the parts.
    assert_eq!(walk(&run), seqs);

    // The text form reads them too.
    let text = ok(&run(&["audit", "--limit", "1000"]));
    let rows: Vec<u64> = (text.lines())
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(rows, seqs, "{text}");
}

/// Every record's seq, read two a page with `--after`.
fn walk(run: &dyn Fn(&[&str]) -> Output) -> Vec<u64> {
    let mut after: Option<u64> = None;
    let mut walked = Vec::new();
    loop {
        let mut args = vec![
            "--json".to_owned(),
            "audit".into(),
            "--limit".into(),
            "2".into(),
        ];
        if let Some(a) = after {
            args.extend(["--after".into(), a.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let p: AuditPage = serde_json::from_str(&ok(&run(&args))).unwrap();
        walked.extend(p.records.iter().map(|r| r.seq));
        match p.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    walked
}
