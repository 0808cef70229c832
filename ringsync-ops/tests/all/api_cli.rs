//! The CLI over the API (`--api`) against the CLI on the store, through the
//! real binary: the same output and exit codes for every command, and
//! `profile activate --dry-run` (what would drain, how shares move, the
//! last of a service), over plain HTTP and over TLS with a test CA whose
//! certificate is renewed while serving.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::served::{
    self, add_token, local, ok, remote, stderr, stdout, wait_until, Served,
};
use crate::common::TestSite;
use ringsync::profile::ProfileSet;

fn revision(site: &TestSite) -> u64 {
    let set: ProfileSet =
        serde_json::from_slice(&std::fs::read(site.store_path()).unwrap()).unwrap();
    set.revision
}

/// Runs `args` both ways; asserts the same stdout, stderr message and exit code.
fn same(site: &TestSite, url: &str, token: &Path, args: &[&str]) -> Output {
    let l = local(site, args);
    let r = remote(url, Some(token), args);
    assert_eq!(
        (l.status.code(), stdout(&l), stderr(&l)),
        (r.status.code(), stdout(&r), stderr(&r)),
        "local and --api differ for {args:?}"
    );
    r
}

/// Every profile command, status, audit and `--dry-run`, each asked both
/// ways of one served site: identical output and exit codes, successes and
/// refusals alike. Changes are made alternately each way and print alike.
#[test]
fn api_mode_prints_and_exits_as_local_mode() {
    let site = served::site_with_admin("tokens = \"tokens.toml\"");
    let (_, token) = add_token(&site, "ops", "admin");
    let s = Served::start(&site, &[]);

    let made_l = ok(&local(
        &site,
        &["profile", "create", "--name", "a", "--server", "srv-a"],
    ));
    let made_r = ok(&remote(
        &s.url,
        Some(&token),
        &["profile", "create", "--name", "b", "--server", "srv-b"],
    ));
    let shape = |t: &str| t.split_whitespace().skip(3).collect::<Vec<_>>().join(" ");
    assert_eq!(shape(&made_l), "(a): inactive, revision 1", "{made_l}");
    assert_eq!(shape(&made_r), "(b): inactive, revision 2", "{made_r}");

    for args in [
        &["profile", "list"][..],
        &["--json", "profile", "list"],
        &["profile", "show", "a"],
        &["--json", "profile", "show", "b"],
        &["profile", "activate", "a", "--dry-run"],
        &["--json", "profile", "activate", "a", "--dry-run"],
        &["profile", "show", "nope"],
        &["profile", "activate", "nope", "--dry-run"],
        &["profile", "activate", "a", "--revision", "9"],
        &["profile", "create", "--name", "a", "--server", "srv-c"],
        &["profile", "create", "--name", "z", "--server", "srv-zz"],
        &["profile", "update", "a"],
    ] {
        same(&site, &s.url, &token, args);
    }
    let refused = same(&site, &s.url, &token, &["profile", "show", "nope"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("nope"), "{}", stderr(&refused));

    // Activate one way, deactivate the other: the same words.
    let on = ok(&remote(&s.url, Some(&token), &["profile", "activate", "a"]));
    let off = ok(&local(&site, &["profile", "deactivate", "a"]));
    assert_eq!(
        on.replace("activated", "X")
            .replace("active", "Y")
            .replace("revision 3", "R"),
        off.replace("deactivated", "X")
            .replace("inactive", "Y")
            .replace("revision 4", "R")
    );
    ok(&local(&site, &["profile", "activate", "a"]));
    wait_until(Duration::from_secs(5), || {
        stdout(&remote(&s.url, Some(&token), &["status"]))
            .contains("profile revision 5, drain zone: srv-a")
    });
    // The JSON status carries the moment it was made; all else is the same.
    let at_no_time = |o: &Output| {
        let mut v: serde_json::Value = serde_json::from_str(&ok(o)).unwrap();
        v.as_object_mut().unwrap().remove("generated_ms").unwrap();
        v
    };
    let json_status = &["--json", "status"];
    assert_eq!(
        at_no_time(&local(&site, json_status)),
        at_no_time(&remote(&s.url, Some(&token), json_status))
    );
    for args in [
        &["status"][..],
        &["audit"],
        &["--json", "audit"],
        &["audit", "--limit", "2"],
    ] {
        same(&site, &s.url, &token, args);
    }
}

/// `--dry-run` names the instances that would drain, the shares that move
/// and the instance left the last of its service, and changes nothing.
#[test]
fn activate_dry_run_shows_drains_shares_and_the_last_of_a_service() {
    let site = served::site_with_admin("tokens = \"tokens.toml\"");
    let (_, token) = add_token(&site, "ops", "operate");
    let s = Served::start(&site, &[]);
    let api = |args: &[&str]| ok(&remote(&s.url, Some(&token), args));
    api(&["profile", "create", "--name", "a", "--server", "srv-a"]);
    api(&["profile", "create", "--name", "b", "--server", "srv-b"]);
    let rev = revision(&site);

    let plan = api(&["profile", "activate", "a", "--dry-run"]);
    let lines: Vec<&str> = plan.lines().collect();
    assert!(
        lines[0].starts_with("dry run: activate profile p-")
            && lines[0].ends_with("nothing was changed"),
        "{plan}"
    );
    assert_eq!(lines[1], "drain zone: (empty) -> srv-a", "{plan}");
    assert_eq!(
        lines[2], "would drain: sg-a (sg on srv-a), mg-a (mg on srv-a)",
        "{plan}"
    );
    // sg-a's third of new SIP work goes to sg-b and sg-c.
    let row = |id: &str| {
        let l = lines
            .iter()
            .find(|l| l.split_whitespace().nth(1) == Some(id))
            .unwrap();
        let f: Vec<f64> = l
            .split_whitespace()
            .rev()
            .take(2)
            .map(|p| p.trim_end_matches('%').parse().unwrap())
            .collect();
        (f[1], f[0])
    };
    let (a0, a1) = row("sg-a");
    let ((b0, b1), (c0, c1)) = (row("sg-b"), row("sg-c"));
    assert!(a0 > 20.0 && a1 == 0.0, "{plan}");
    assert!(
        b1 > b0 && c1 > c0 && ((b1 - b0) + (c1 - c0) - a0).abs() < 0.2,
        "{plan}"
    );
    assert!(
        plan.contains("WARNING: every mg instance would be draining"),
        "mg-a is the only mg: {plan}"
    );
    assert_eq!(revision(&site), rev, "a dry run changes nothing");

    api(&["profile", "activate", "a"]);
    let plan = api(&["profile", "activate", "b", "--dry-run"]);
    assert!(plan.contains("would drain: sg-b (sg on srv-b)\n"), "{plan}");
    assert!(
        plan.contains("WARNING: sg-c would be the last sg in the normal zone"),
        "{plan}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&api(&["--json", "profile", "activate", "b", "--dry-run"])).unwrap();
    assert_eq!(json["would_drain"][0]["id"], "sg-b");
    assert_eq!(
        json["drain_zone_after"],
        serde_json::json!(["srv-a", "srv-b"])
    );
    assert_eq!(revision(&site), rev + 1);
}

/// A CA, and a server certificate for 127.0.0.1 it signed, as PEM files.
struct TestCa {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_ca(dir: &Path, tag: &str) -> TestCa {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let at = |n: &str| dir.join(format!("{tag}-{n}.pem"));
    std::fs::write(at("ca"), ca.pem()).unwrap();
    std::fs::write(at("cert"), cert.pem()).unwrap();
    std::fs::write(at("key"), key.serialize_pem()).unwrap();
    TestCa {
        ca: at("ca"),
        cert: at("cert"),
        key: at("key"),
    }
}

fn over_tls(url: &str, token: &Path, ca: Option<&Path>, args: &[&str]) -> Output {
    let mut c = std::process::Command::new(served::BIN);
    c.args(["--api", url]).arg("--token-file").arg(token);
    if let Some(ca) = ca {
        c.arg("--ca-file").arg(ca);
    }
    c.args(args).output().unwrap()
}

/// HTTPS with a test CA on a wildcard address (allowed: TLS and tokens),
/// a client without that CA refused, and a renewed certificate (from
/// another CA) served from the next handshake on, without a restart.
#[test]
fn tls_with_a_test_ca_and_a_certificate_renewed_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let one = make_ca(dir.path(), "one");
    let two = make_ca(dir.path(), "two");
    let site = served::site_with_admin(&format!(
        "tokens = \"tokens.toml\"\ntls_cert = \"{}\"\ntls_key = \"{}\"",
        dir.path().join("cert.pem").display(),
        dir.path().join("key.pem").display()
    ));
    std::fs::copy(&one.cert, dir.path().join("cert.pem")).unwrap();
    std::fs::copy(&one.key, dir.path().join("key.pem")).unwrap();
    let (_, token) = add_token(&site, "ops", "operate");
    let s = Served::start_at(&site, "0.0.0.0:0", &[]);
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);

    let list = &["profile", "list"][..];
    let good = over_tls(&s.url, &token, Some(&one.ca), list);
    assert_eq!(ok(&good), stdout(&local(&site, list)));
    ok(&over_tls(
        &s.url,
        &token,
        Some(&one.ca),
        &["profile", "create", "--name", "t", "--server", "srv-a"],
    ));
    let untrusted = over_tls(&s.url, &token, Some(&two.ca), list);
    assert!(
        !untrusted.status.success() && stderr(&untrusted).contains("TLS handshake failed"),
        "{}",
        stderr(&untrusted)
    );
    let plain = remote(&s.url.replace("https", "http"), Some(&token), list);
    assert!(!plain.status.success(), "plain HTTP to the TLS port");

    // Renewed by another CA: the key first, then the certificate.
    std::fs::copy(&two.key, dir.path().join("key.pem")).unwrap();
    std::fs::copy(&two.cert, dir.path().join("cert.pem")).unwrap();
    let took = wait_until(Duration::from_secs(5), || {
        over_tls(&s.url, &token, Some(&two.ca), list)
            .status
            .success()
    });
    println!("renewed certificate served after {took:?}");
    assert!(!over_tls(&s.url, &token, Some(&one.ca), list)
        .status
        .success());
}
