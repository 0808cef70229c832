//! The operator plane through the real `ringsync` binary (R-PR-1, R-PR-4):
//! tokens and roles on every endpoint, a tokens file changed while
//! serving, the refusal to serve a public address unprotected, and the
//! audit log across refusals and restarts.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::served::{self, add_token, call, local, ok, remote, wait_until, Served};
use ringsync::profile::ProfileSet;
use ringsync::store::{AuditPage, ProfileRef};
use ringsync_ops::api::{Endpoint, Need};
use ringsync_ops::auth::Role;

const TOKENS: &str = "tokens = \"tokens.toml\"";

/// The id of a profile made on the store itself.
fn create(site: &crate::common::TestSite, name: &str, server: &str) -> String {
    let out = ok(&local(
        site,
        &["profile", "create", "--name", name, "--server", server],
    ));
    out.split_whitespace().nth(2).unwrap().to_owned()
}

/// A body each endpoint accepts (`n` makes created names unique).
fn body_of(e: &Endpoint, n: usize) -> String {
    match (e.method.as_str(), e.path) {
        ("POST", "/v1/profiles") => format!(r#"{{"name":"n{n}","servers":["srv-c"]}}"#),
        ("PATCH", _) => r#"{"description":"patched"}"#.to_owned(),
        _ => String::new(),
    }
}

fn audit_of(served: &Served, token: &str) -> AuditPage {
    let (st, body) = call(served.addr, "GET", "/v1/audit?limit=1000", Some(token), "");
    assert_eq!(st, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// R-PR-1: every endpoint of the API, called with no token, a wrong one,
/// and each role: 401 and 403 exactly where the table says, nothing
/// changed by a refused call, and every refused change audited.
#[test]
fn r_pr_1_each_role_against_each_endpoint() {
    let site = served::site_with_admin(TOKENS);
    let tokens: Vec<(Role, String)> = Role::ALL
        .iter()
        .map(|r| (*r, add_token(&site, &format!("{r}-1"), r.as_str()).0))
        .collect();
    let victim = create(&site, "victim", "srv-c");
    let s = Served::start(&site, &[]);
    let path_of = |e: &Endpoint, doomed: &str| match e.method.as_str() {
        "DELETE" => e.path.replace("{id}", doomed),
        _ => e.path.replace("{id}", &victim),
    };

    // Refused first: the store must not move.
    let before = std::fs::read(site.store_path()).unwrap();
    let mut refused_changes = Vec::new();
    let callers: Vec<(Option<Role>, Option<&str>)> = [(None, None), (None, Some("rs1_forged"))]
        .into_iter()
        .chain(tokens.iter().map(|(r, t)| (Some(*r), Some(t.as_str()))))
        .collect();
    for (i, e) in ringsync_ops::api::endpoints().iter().enumerate() {
        for (role, token) in &callers {
            let want = match (e.need, role) {
                (Need::Public, _) => None,
                (Need::Role(_), None) => Some(401),
                (Need::Role(need), Some(r)) if r < &need => Some(403),
                _ => None,
            };
            let Some(want) = want else { continue };
            let path = path_of(e, &victim);
            let (st, body) = call(s.addr, e.method.as_str(), &path, *token, &body_of(e, i));
            assert_eq!(st, want, "{} {path} as {role:?}: {body}", e.method);
            if e.method != "GET" {
                refused_changes.push((format!("{} {}", e.method, e.path), want));
            }
        }
    }
    assert_eq!(
        std::fs::read(site.store_path()).unwrap(),
        before,
        "a refused call changed the store"
    );
    let admin = &tokens[2].1;
    let log = audit_of(&s, admin);
    // After the victim's creation on the store itself.
    assert_eq!(log.records[0].action, "create");
    let refusals = &log.records[1..];
    let got: Vec<(String, u16)> = refusals
        .iter()
        .map(|r| (r.action.clone(), r.status))
        .collect();
    assert_eq!(
        got, refused_changes,
        "every refused change audited, in order"
    );
    assert!(refusals
        .iter()
        .all(|r| r.before.is_none() && r.after.is_none()));
    assert!(refusals.iter().any(|r| r.who == "(invalid token)"));
    assert!(refusals
        .iter()
        .any(|r| r.who == "read-1" && r.status == 403));

    allowed_calls_succeed(&site, &s, &tokens, &victim);
}

/// Each role on every endpoint it may call: a 2xx, and the changes made.
fn allowed_calls_succeed(
    site: &crate::common::TestSite,
    s: &Served,
    tokens: &[(Role, String)],
    victim: &str,
) {
    let path_of = |e: &Endpoint, doomed: &str| match e.method.as_str() {
        "DELETE" => e.path.replace("{id}", doomed),
        _ => e.path.replace("{id}", victim),
    };
    for (role, token) in tokens {
        for (i, e) in ringsync_ops::api::endpoints().iter().enumerate() {
            if let Need::Role(need) = e.need {
                if *role < need {
                    continue;
                }
            }
            let doomed = match e.method.as_str() {
                "DELETE" => create(site, &format!("doomed-{role}"), "srv-b"),
                _ => String::new(),
            };
            let body = body_of(e, 100 * (*role as usize) + i);
            let path = path_of(e, &doomed);
            // The long poll answers at once for a server nothing drains
            // (srv-c: the victim is inactive), with 409 and its answer.
            let (path, want) = match e.path {
                "/v1/wait" => ("/v1/wait?server=srv-c&timeout=1s".to_owned(), 409..410),
                _ => (path, 200..300),
            };
            let (st, answer) = call(s.addr, e.method.as_str(), &path, Some(token), &body);
            assert!(
                want.contains(&st),
                "{} {path} as {role}: {st} {answer}",
                e.method
            );
        }
    }
    let set: ProfileSet =
        serde_json::from_slice(&std::fs::read(site.store_path()).unwrap()).unwrap();
    let create_at = ringsync_ops::api::endpoints()
        .iter()
        .position(|e| e.method == "POST" && e.path == "/v1/profiles")
        .unwrap();
    let made: Vec<bool> = Role::ALL
        .iter()
        .map(|r| {
            set.find(&format!("n{}", 100 * (*r as usize) + create_at))
                .is_some()
        })
        .collect();
    assert_eq!(
        made,
        [false, true, true],
        "operate and admin created theirs"
    );
    assert!(set.find("doomed-admin").is_none(), "admin deleted");
    assert_eq!(set.find(victim).unwrap().description, "patched");
}

/// R-PR-1: a token added, the file broken, a token revoked, all while
/// `serve` runs: each takes effect within a reload (1 s) without a restart,
/// and a broken file keeps the tokens in force.
#[test]
fn r_pr_1_tokens_file_changed_while_serving() {
    let site = served::site_with_admin(TOKENS);
    let (alice, _) = add_token(&site, "alice", "operate");
    let s = Served::start(&site, &[]);
    let list = |t: &str| call(s.addr, "GET", "/v1/profiles", Some(t), "").0;
    assert_eq!(list(&alice), 200);

    // `token add` on the live file: carol is let in without a restart.
    let (carol, _) = add_token(&site, "carol", "read");
    let took = wait_until(Duration::from_secs(5), || list(&carol) == 200);
    println!("new token accepted after {took:?}");

    // A file that does not load keeps the tokens in force.
    let path = site.dir.path().join("tokens.toml");
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "[[token]]\nname = \"broken\"\n").unwrap();
    wait_until(Duration::from_secs(5), || {
        call(s.addr, "GET", "/metrics", Some(&alice), "")
            .1
            .lines()
            .any(|l| l.starts_with("ringsync_tokens_reload_errors_total") && !l.ends_with(" 0"))
    });
    assert_eq!((list(&alice), list(&carol)), (200, 200));

    // Alice revoked (her entry removed): 401 from the next reload on.
    let mut t: toml::Table = toml::from_str(&good).unwrap();
    t["token"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["name"].as_str() != Some("alice"));
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
    wait_until(Duration::from_secs(5), || list(&alice) == 401);
    assert_eq!(list(&carol), 200);
    let (st, _) = call(
        s.addr,
        "POST",
        "/v1/profiles",
        Some(&carol),
        r#"{"name":"x","servers":["srv-a"]}"#,
    );
    assert_eq!(st, 403, "carol reads only");
}

fn serve_exit(site: &crate::common::TestSite, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(served::BIN)
        .arg("--config")
        .arg(site.site_path())
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (st.code(), err);
        }
        if t0.elapsed() > Duration::from_secs(5) {
            child.kill().unwrap();
            child.wait().unwrap();
            return (None, "still serving after 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `serve` on a non-loopback address without TLS and tokens exits with the
/// reason; `--insecure` serves anyway.
#[test]
fn serve_refuses_a_public_address_without_tls_and_tokens() {
    let open = crate::common::TestSite::new();
    let (code, err) = serve_exit(&open, &["--bind", "0.0.0.0:0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("refusing to serve the admin API on 0.0.0.0:0 without TLS and without tokens")
            && err.contains("--insecure"),
        "{err}"
    );
    let tokens = served::site_with_admin(TOKENS);
    add_token(&tokens, "alice", "admin");
    let (code, err) = serve_exit(&tokens, &["--bind", "0.0.0.0:0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("without TLS (tokens would cross the network in clear)"),
        "{err}"
    );

    let s = Served::start_at(&open, "0.0.0.0:0", &["--insecure"]);
    assert_eq!(call(s.addr, "GET", "/v1/profiles", None, "").0, 200);
}

/// R-PR-4: the audit log after changes made and refused through the API
/// and the store, with `serve` killed (SIGKILL) between: exactly those
/// changes, in order, parseable, and the file before the kill a prefix of
/// the file after (appended, never rewritten).
#[test]
fn r_pr_4_audit_log_survives_a_kill_and_is_only_appended() {
    let site = served::site_with_admin(TOKENS);
    let (_, alice) = add_token(&site, "alice", "operate");
    let (_, reader) = add_token(&site, "reader", "read");
    let (_, root) = add_token(&site, "root", "admin");
    let s = Served::start(&site, &[]);
    let api = |file: Option<&std::path::Path>, args: &[&str]| remote(&s.url, file, args);

    ok(&api(
        Some(&alice),
        &["profile", "create", "--name", "a", "--server", "srv-a"],
    ));
    ok(&api(
        Some(&alice),
        &["profile", "activate", "a", "--revision", "1"],
    ));
    let stale = api(
        Some(&alice),
        &["profile", "deactivate", "a", "--revision", "1"],
    );
    assert!(
        served::stderr(&stale).contains("revision"),
        "{}",
        served::stderr(&stale)
    );
    let denied = api(Some(&reader), &["profile", "deactivate", "a"]);
    assert!(
        served::stderr(&denied).contains("reader has role read"),
        "{}",
        served::stderr(&denied)
    );
    let anon = api(
        None,
        &["profile", "create", "--name", "b", "--server", "srv-b"],
    );
    assert!(
        served::stderr(&anon).contains("bearer token"),
        "{}",
        served::stderr(&anon)
    );
    let bad = api(
        Some(&alice),
        &["profile", "create", "--name", "c", "--server", "srv-zz"],
    );
    assert!(
        served::stderr(&bad).contains("unknown server"),
        "{}",
        served::stderr(&bad)
    );
    ok(&local(
        &site,
        &["profile", "update", "a", "--description", "by hand"],
    ));
    let audit_path = site.dir.path().join("t1.profiles.json.audit.jsonl");
    let before_kill = std::fs::read(&audit_path).unwrap();
    s.kill();

    let s = Served::start(&site, &[]);
    ok(&remote(
        &s.url,
        Some(&alice),
        &["profile", "deactivate", "a"],
    ));
    ok(&remote(&s.url, Some(&root), &["profile", "delete", "a"]));
    let after = std::fs::read(&audit_path).unwrap();
    assert!(after.starts_with(&before_kill), "the log was rewritten");

    let page: AuditPage =
        serde_json::from_str(&ok(&remote(&s.url, Some(&reader), &["--json", "audit"]))).unwrap();
    check_the_sequence(&site, &page);
}

/// The records of `r_pr_4_audit_log_survives_a_kill_and_is_only_appended`:
/// exactly its changes, in order, and the text form naming the same.
fn check_the_sequence(site: &crate::common::TestSite, page: &AuditPage) {
    let got: Vec<(&str, &str, u16)> = page
        .records
        .iter()
        .map(|r| (r.who.as_str(), r.action.as_str(), r.status))
        .collect();
    let me = page.records[6].who.as_str();
    assert!(me.starts_with("local:"), "{me}");
    assert_eq!(
        got,
        [
            ("alice", "create", 201),
            ("alice", "activate", 200),
            ("alice", "deactivate", 409),
            ("reader", "POST /v1/profiles/{id}/deactivate", 403),
            ("(no token)", "POST /v1/profiles", 401),
            ("alice", "create", 400),
            (me, "update", 200),
            ("alice", "deactivate", 200),
            ("root", "delete", 200),
        ]
    );
    assert!(page.skipped.is_empty() && page.next.is_none());
    let seqs: Vec<u64> = page.records.iter().map(|r| r.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let r = &page.records;
    assert!(r.iter().all(|r| r.at_ms > 0 && !r.from.is_empty()));
    assert!(r[0].from.starts_with("127.0.0.1:") && r[6].from == "local");
    assert_eq!(r[2].if_revision, Some(1));
    assert_eq!(
        (
            r[1].before.as_ref().unwrap().state,
            r[1].after.as_ref().unwrap().state
        ),
        (
            ringsync::profile::ProfileState::Inactive,
            ringsync::profile::ProfileState::Active
        )
    );
    assert!(r[8].before.is_some() && r[8].after.is_none());
    // The text form, from the store itself, names the same.
    let text = ok(&local(site, &["audit"]));
    assert_eq!(text.lines().count(), 10, "{text}");
    assert!(
        text.lines().nth(2).unwrap().contains("inactive -> active"),
        "{text}"
    );
    assert!(
        text.lines()
            .nth(4)
            .unwrap()
            .contains("reader has role read"),
        "{text}"
    );
}

/// Issue 38: a profile changed from the CLI (which names it by name) and
/// from the page's endpoint (`POST /v1/profiles/{id}/activate`, by id) is
/// named the same in the audit: its name and its id, in `ringsync audit`'s
/// text and JSON, while `target` keeps what each caller said.
#[test]
fn audit_names_a_profile_by_name_and_id_from_the_cli_and_the_page() {
    let site = served::site_with_admin(TOKENS);
    let (op, _) = add_token(&site, "op-1", "operate");
    let id = create(&site, "maint-a", "srv-c");
    ok(&local(
        &site,
        &["profile", "update", "maint-a", "--description", "by hand"],
    ));
    let s = Served::start(&site, &[]);
    let (st, body) = call(
        s.addr,
        "POST",
        &format!("/v1/profiles/{id}/activate"),
        Some(&op),
        "",
    );
    assert_eq!(st, 200, "{body}");

    let page: AuditPage = serde_json::from_str(&ok(&local(&site, &["--json", "audit"]))).unwrap();
    let got: Vec<(&str, Option<&str>, Option<ProfileRef>)> = page
        .records
        .iter()
        .map(|r| (r.action.as_str(), r.target.as_deref(), r.profile.clone()))
        .collect();
    let named = Some(ProfileRef {
        name: "maint-a".into(),
        id: id.clone(),
    });
    assert_eq!(
        got,
        [
            ("create", Some("maint-a"), named.clone()),
            ("update", Some("maint-a"), named.clone()),
            ("activate", Some(id.as_str()), named),
        ]
    );
    let text = ok(&local(&site, &["audit"]));
    let both = format!("maint-a ({id})");
    assert_eq!(
        text.lines().filter(|l| l.contains(&both)).count(),
        3,
        "every record names the profile by name and id: {text}"
    );
}
