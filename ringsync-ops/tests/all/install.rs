//! What an operator meets on install day (issue 38), through the real
//! `ringsync` binary: the site file found without `--config`, and the CLI
//! as the head of a shell pipe.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use crate::common::served::{local, ok, stderr, BIN};
use crate::common::TestSite;

/// `SIP_GATE_CONFIG` names the site when `--config` is not given, and the
/// flag wins over it (the default is /etc/sip-gate/site.toml).
#[test]
fn sip_gate_config_names_the_site_and_the_flag_wins() {
    let site = TestSite::new();
    ok(&local(
        &site,
        &["profile", "create", "--name", "maint", "--server", "srv-a"],
    ));
    let run = |env: &std::path::Path, flag: Option<&std::path::Path>| {
        let mut c = Command::new(BIN);
        c.env("SIP_GATE_CONFIG", env);
        if let Some(f) = flag {
            c.arg("--config").arg(f);
        }
        c.args(["profile", "list"]).output().unwrap()
    };
    let listed = ok(&run(&site.site_path(), None));
    assert!(listed.contains("maint"), "{listed}");
    let nowhere = site.dir.path().join("nowhere.toml");
    let listed = ok(&run(&nowhere, Some(&site.site_path())));
    assert!(listed.contains("maint"), "the flag wins: {listed}");
    let refused = run(&nowhere, None);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("nowhere.toml"),
        "{}",
        stderr(&refused)
    );
}

/// `ringsync status | head -1`: the reader closes the pipe; the CLI ends
/// with exit 0 and says nothing on stderr (it said "Broken pipe").
#[test]
fn status_into_a_closed_pipe_ends_quietly_with_exit_0() {
    let site = TestSite::new();
    // The reference: the table is more than one line.
    assert!(ok(&local(&site, &["status"])).lines().count() > 1);
    // `| head -1` as the shell does it, and `| true` (closed before the
    // first write, so the write that fails is certain).
    for lines in [1, 0] {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(site.site_path())
            .arg("status")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        if lines == 1 {
            let mut first = String::new();
            BufReader::new(stdout).read_line(&mut first).unwrap();
            assert!(first.starts_with("site"), "{first}");
        } else {
            drop(stdout);
        }
        let status = child.wait().unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(
            (status.code(), err.as_str()),
            (Some(0), ""),
            "after {lines} line(s)"
        );
    }
}
