//! Profile names and revisions tell the truth, through the real `ringsync`
//! binary (the CLI on the store, and `ringsync serve`'s HTTP API): a name
//! is what docs/api.md says and can never be taken for an id (R-PR-1); a
//! change that changes nothing keeps the revision, writes nothing and says
//! "unchanged", while a stale `--revision` is still refused (R-PR-4).

use std::path::Path;
use std::process::Output;

use crate::common::served::{local as ringsync, ok};
use crate::common::TestSite;
use serde_json::Value;
use testbed::bins::Node;
use testbed::http::{Reply, Request};

/// Fails the run with what the CLI said if it did not fail; its stderr.
fn refused(o: &Output) -> String {
    assert!(!o.status.success(), "expected a refusal: {o:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    serde_json::from_str(&ok(o)).unwrap()
}

fn send(node: &Node, method: &str, path: &str, body: &str) -> Reply {
    Request::new(method, node.admin(), path)
        .body(body)
        .send()
        .unwrap()
}

fn body(r: &Reply) -> Value {
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {r:?}"))
}

/// The store file's bytes and the audit log's, to prove nothing was written.
fn written(site: &TestSite) -> (Vec<u8>, Vec<u8>) {
    let audit = format!("{}.audit.jsonl", site.store_path().display());
    (
        std::fs::read(site.store_path()).unwrap(),
        std::fs::read(Path::new(&audit)).unwrap_or_default(),
    )
}

/// `ringsync profile create --name "bad name!"`, which must be refused:
/// what the CLI said.
fn create_bad_name(site: &TestSite) -> String {
    refused(&ringsync(
        site,
        &[
            "profile",
            "create",
            "--name",
            "bad name!",
            "--server",
            "srv-a",
        ],
    ))
}

/// R-PR-1: `bad name!` and friends are refused with a clear message by the
/// CLI (non-zero exit) and the API (400, `{"error": ...}`), on create and on
/// rename, and nothing is stored; a profile stored before the rules, with a
/// name they refuse, still loads and can be shown, activated and renamed.
#[test]
fn r_pr_1_bad_names_are_refused_by_the_cli_and_the_api_old_ones_still_load() {
    let site = TestSite::new();
    let err = create_bad_name(&site);
    assert!(
        err.contains("invalid profile name `bad name!`")
            && err.contains("may hold only ASCII letters, digits, `-`, `_` and `.`"),
        "{err}"
    );
    let err = refused(&ringsync(
        &site,
        &["profile", "create", "--name=-x", "--server", "srv-a"],
    ));
    assert!(err.contains("must start with a letter or a digit"), "{err}");
    assert!(!site.store_path().exists(), "nothing stored");

    let node = Node::serve(site.site_path()).start().unwrap();
    let r = send(
        &node,
        "POST",
        "/v1/profiles",
        r#"{"name":"bad name!","servers":["srv-a"]}"#,
    );
    assert_eq!(r.status, 400, "{r:?}");
    let e = body(&r)["error"].as_str().unwrap().to_owned();
    assert!(e.contains("invalid profile name `bad name!`"), "{e}");
    let long = "a".repeat(65);
    let r = send(
        &node,
        "POST",
        "/v1/profiles",
        &format!(r#"{{"name":"{long}","servers":["srv-a"]}}"#),
    );
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("at most 64 characters"), "{r:?}");

    // Rename: refused the same way, the profile untouched.
    let p = json(&ringsync(
        &site,
        &[
            "--json", "profile", "create", "--name", "m.1_x", "--server", "srv-a",
        ],
    ));
    let r = send(&node, "PATCH", "/v1/profiles/m.1_x", r#"{"name":"a/b"}"#);
    assert_eq!(r.status, 400, "{r:?}");
    let err = refused(&ringsync(
        &site,
        &["profile", "update", "m.1_x", "--name", "bad name!"],
    ));
    assert!(err.contains("invalid profile name"), "{err}");
    let shown = json(&ringsync(&site, &["--json", "profile", "show", "m.1_x"]));
    assert_eq!(shown["revision"], p["revision"], "{shown}");
    drop(node);

    // A store written before the rules: its name loads and stays usable.
    let old = r#"{"revision":4,"profiles":[{"id":"p-0000abcd","name":"old name!","servers":["srv-b"],"state":"inactive","revision":4}]}"#;
    std::fs::write(site.store_path(), old).unwrap();
    let shown = json(&ringsync(
        &site,
        &["--json", "profile", "show", "old name!"],
    ));
    assert_eq!(shown["id"], "p-0000abcd", "{shown}");
    let o = ringsync(&site, &["profile", "activate", "old name!"]);
    assert!(ok(&o).starts_with("activated profile p-0000abcd (old name!)"));
    let o = ringsync(
        &site,
        &["profile", "update", "p-0000abcd", "--name", "old-name"],
    );
    assert!(ok(&o).starts_with("updated profile p-0000abcd (old-name)"));
}

/// R-PR-1: a name may not look like an id, nor be one: `show NAME` can
/// never return another profile. Ids are looked up first (docs/api.md), so
/// the collision is made impossible at the write.
#[test]
fn r_pr_1_a_name_never_shadows_an_id() {
    let site = TestSite::new();
    let a = json(&ringsync(
        &site,
        &[
            "--json", "profile", "create", "--name", "a", "--server", "srv-a",
        ],
    ));
    let a_id = a["id"].as_str().unwrap().to_owned();
    let err = refused(&ringsync(
        &site,
        &["profile", "create", "--name", &a_id, "--server", "srv-b"],
    ));
    assert!(err.contains("looks like a profile id"), "{err}");
    let err = refused(&ringsync(
        &site,
        &[
            "profile",
            "create",
            "--name",
            "P-CAFE0001",
            "--server",
            "srv-b",
        ],
    ));
    assert!(err.contains("looks like a profile id"), "{err}");

    let node = Node::serve(site.site_path()).start().unwrap();
    let r = send(
        &node,
        "POST",
        "/v1/profiles",
        r#"{"name":"b","servers":["srv-b"]}"#,
    );
    assert_eq!(r.status, 201, "{r:?}");
    let r = send(
        &node,
        "PATCH",
        "/v1/profiles/b",
        &format!(r#"{{"name":"{a_id}"}}"#),
    );
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("looks like a profile id"), "{r:?}");
    let shown = body(&send(&node, "GET", &format!("/v1/profiles/{a_id}"), ""));
    assert_eq!(shown["name"], "a", "{shown}");
    drop(node);

    // A profile imported with an id of another shape (`maint`): no other
    // profile may take that as its name.
    let text = std::fs::read_to_string(site.store_path()).unwrap();
    let mut set: Value = serde_json::from_str(&text).unwrap();
    set["profiles"][0]["id"] = "maint".into();
    std::fs::write(site.store_path(), set.to_string()).unwrap();
    let err = refused(&ringsync(
        &site,
        &["profile", "create", "--name", "maint", "--server", "srv-c"],
    ));
    assert!(err.contains("is the id of profile `maint`"), "{err}");
    let shown = json(&ringsync(&site, &["--json", "profile", "show", "maint"]));
    assert_eq!(shown["name"], "a", "{shown}");
}

/// R-PR-4: a change that changes nothing (activate an active profile,
/// deactivate an inactive one, an update to the values it has) keeps the
/// revision, writes neither the store nor the audit log, and says so: the
/// CLI prints "unchanged" (`--json`: `"changed": false`), the API answers
/// 200 with the profile and `Ringsync-Changed: false`. A stale revision
/// named with it is still refused (409), so the caller learns the profile
/// moved on.
#[test]
fn r_pr_4_a_no_op_keeps_the_revision_writes_nothing_and_says_unchanged() {
    let site = TestSite::new();
    ok(&ringsync(
        &site,
        &[
            "profile",
            "create",
            "--name",
            "m",
            "--server",
            "srv-a",
            "--description",
            "d",
        ],
    ));
    let o = ringsync(&site, &["profile", "activate", "m"]);
    assert!(ok(&o).starts_with("activated profile"), "{o:?}");
    let before = written(&site);
    assert!(!before.1.is_empty(), "the audit log is kept");

    let o = ringsync(&site, &["profile", "activate", "m", "--revision", "2"]);
    let out = ok(&o);
    assert!(
        out.starts_with("unchanged profile") && out.contains("active, revision 2"),
        "{out}"
    );
    let v = json(&ringsync(&site, &["--json", "profile", "activate", "m"]));
    assert_eq!(
        (v["changed"].as_bool(), v["revision"].as_u64()),
        (Some(false), Some(2)),
        "{v}"
    );
    let v = json(&ringsync(
        &site,
        &[
            "--json",
            "profile",
            "update",
            "m",
            "--server",
            "srv-a",
            "--description",
            "d",
        ],
    ));
    assert_eq!(
        (v["changed"].as_bool(), v["revision"].as_u64()),
        (Some(false), Some(2)),
        "{v}"
    );
    assert!(written(&site) == before, "nothing written by a no-op");

    let err = refused(&ringsync(
        &site,
        &["profile", "activate", "m", "--revision", "1"],
    ));
    assert!(err.contains("at revision 2, not 1 as asked"), "{err}");

    let node = Node::serve(site.site_path()).start().unwrap();
    let r = send(&node, "POST", "/v1/profiles/m/activate", "");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("ringsync-changed"), Some("false"), "{r:?}");
    assert_eq!(r.header("etag"), Some("\"2\""), "{r:?}");
    assert_eq!(body(&r)["state"], "active");
    let r = send(
        &node,
        "POST",
        "/v1/profiles/m/activate",
        r#"{"revision":1}"#,
    );
    assert_eq!(
        r.status, 409,
        "a stale revision is refused with a no-op too: {r:?}"
    );
    assert!(written(&site).0 == before.0, "the store file as it was");
    // The refusals (CLI and API) are audited, as every refusal is.
    let before = written(&site);
    let r = send(&node, "PATCH", "/v1/profiles/m", r#"{"description":"d"}"#);
    assert_eq!(
        (r.status, r.header("ringsync-changed")),
        (200, Some("false")),
        "{r:?}"
    );
    assert!(
        written(&site) == before,
        "nothing written by the API's no-ops"
    );

    // A real change still moves the revision on, and says it changed.
    let r = send(&node, "POST", "/v1/profiles/m/deactivate", "");
    assert_eq!(r.header("ringsync-changed"), Some("true"), "{r:?}");
    assert_eq!(body(&r)["revision"], 3);
    let r = send(&node, "POST", "/v1/profiles/m/deactivate", "");
    assert_eq!(
        (r.header("ringsync-changed"), body(&r)["revision"].as_u64()),
        (Some("false"), Some(3)),
        "{r:?}"
    );
    let o = ringsync(&site, &["profile", "deactivate", "m"]);
    assert!(ok(&o).starts_with("unchanged profile"), "{o:?}");
}

/// The same on a site stored in a real etcd (127.0.73.11): `migrate` refuses
/// a source holding a name the rules refuse (naming it; nothing copied), a
/// bad name is refused, and a no-op activation keeps the document's
/// revision, writes no audit record and says "unchanged" (R-PR-1, R-PR-4).
#[test]
fn r_pr_1_r_pr_4_names_and_no_ops_on_etcd() {
    let etcd = testbed::Etcd::single(crate::common::etcd::ip(73, 11)).expect("etcd");
    let ep = etcd.endpoints()[0].clone();
    let embedded = TestSite::new();
    let old = r#"{"revision":1,"profiles":[{"id":"p-0000abcd","name":"old name!","servers":["srv-b"],"state":"inactive","revision":1}]}"#;
    std::fs::write(embedded.store_path(), old).unwrap();
    let args = crate::common::served::migrate_to_etcd(&ep);
    let err = refused(&ringsync(&embedded, &args));
    assert!(err.contains("invalid profile name `old name!`"), "{err}");

    let site = TestSite::with_text(&crate::common::etcd::etcd_site_text(
        std::slice::from_ref(&ep),
        "/drain/names",
    ));
    let list = json(&ringsync(&site, &["--json", "profile", "list"]));
    assert_eq!(list["profiles"].as_array().map(Vec::len), Some(0), "{list}");
    let err = create_bad_name(&site);
    assert!(err.contains("invalid profile name `bad name!`"), "{err}");
    ok(&ringsync(
        &site,
        &["profile", "create", "--name", "m", "--server", "srv-a"],
    ));
    ok(&ringsync(&site, &["profile", "activate", "m"]));
    let audited = || {
        let v = json(&ringsync(&site, &["--json", "audit"]));
        v["records"].as_array().unwrap().len()
    };
    let records = audited();
    let o = ringsync(&site, &["profile", "activate", "m", "--revision", "2"]);
    let out = ok(&o);
    assert!(
        out.starts_with("unchanged profile") && out.ends_with("revision 2\n"),
        "{out}"
    );
    let list = json(&ringsync(&site, &["--json", "profile", "list"]));
    assert_eq!(list["revision"], 2, "{list}");
    assert_eq!(audited(), records, "no audit record for a no-op");
    let err = refused(&ringsync(
        &site,
        &["profile", "activate", "m", "--revision", "1"],
    ));
    assert!(err.contains("at revision 2, not 1 as asked"), "{err}");
}
