//! The tokens file as an install leaves it (issue 38, R-PR-1), through the
//! real `ringsync` binary: `token add` / `token remove` write it `0640` with
//! the group `serve` reads it as, keep an existing file's mode and group,
//! refuse with the reason when the group cannot be given; `--print-secret-only`
//! prints a file a scraper can read whole; and `serve` re-reads the file on
//! a `chmod` (ctime), not only on a new mtime.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::common::served::{
    self, add_token, call, local, ok, own_group, remote, stderr, stdout, wait_until, Served,
};

const TOKENS: &str = "tokens = \"tokens.toml\"";

/// Mode bits and gid.
fn owner(path: &Path) -> (u32, u32) {
    let m = fs::metadata(path).unwrap();
    (m.mode() & 0o7777, m.gid())
}

/// A group of this machine other than this process's when there is one
/// (`nogroup`), so a file written with the process's group would show.
fn other_group() -> (String, u32) {
    let g = nix::unistd::Group::from_name("nogroup")
        .unwrap()
        .or_else(|| nix::unistd::Group::from_gid(nix::unistd::getgid()).unwrap())
        .unwrap();
    (g.name, g.gid.as_raw())
}

/// R-PR-1: a new file is 0640 with the group asked for; a second `token
/// add` and a `token remove` keep the group and whatever mode the operator
/// set; a group that does not exist (or the default `sip-gate` missing) is
/// refused with the reason and nothing is written.
#[test]
fn r_pr_1_token_add_writes_0640_with_its_group_and_keeps_them() {
    let site = served::site_with_admin(TOKENS);
    let path = site.dir.path().join("tokens.toml");
    let (group, gid) = other_group();
    ok(&local(
        &site,
        &["token", "add", "alice", "--role", "read", "--group", &group],
    ));
    assert_eq!(owner(&path), (0o640, gid));
    ok(&local(&site, &["token", "add", "bob", "--role", "operate"]));
    assert_eq!(owner(&path), (0o640, gid), "the second add keeps the group");

    fs::set_permissions(&path, fs::Permissions::from_mode(0o660)).unwrap();
    let out = ok(&local(&site, &["token", "remove", "alice"]));
    assert!(out.contains("token `alice` (read) removed"), "{out}");
    assert_eq!(owner(&path), (0o660, gid), "remove keeps mode and group");
    let text = fs::read_to_string(&path).unwrap();
    assert!(!text.contains("alice") && text.contains("bob"), "{text}");

    let fresh = site.dir.path().join("fresh.toml");
    let f = fresh.to_str().unwrap();
    let bogus = local(
        &site,
        &[
            "token",
            "add",
            "c",
            "--role",
            "read",
            "--file",
            f,
            "--group",
            "no-such-group-38",
        ],
    );
    assert_eq!(bogus.status.code(), Some(1));
    assert!(
        stderr(&bogus).contains("no group `no-such-group-38`"),
        "{}",
        stderr(&bogus)
    );
    assert!(
        !fresh.exists() && stdout(&bogus).is_empty(),
        "nothing written or shown"
    );

    // Without --group a new file gets `sip-gate`, or is refused without it.
    let default = local(&site, &["token", "add", "c", "--role", "read", "--file", f]);
    match nix::unistd::Group::from_name("sip-gate").unwrap() {
        Some(g) => {
            ok(&default);
            assert_eq!(owner(&fresh), (0o640, g.gid.as_raw()));
        }
        None => {
            assert_eq!(default.status.code(), Some(1));
            let e = stderr(&default);
            assert!(
                e.contains("no group `sip-gate`") && e.contains("--group"),
                "{e}"
            );
            assert!(!fresh.exists(), "nothing written");
        }
    }
}

/// R-PR-1: `serve` takes a token the file gained without a restart: one
/// written with the old length and mtime kept (as `cp -p` or `touch -r`
/// leave it), a `chmod` alone read again, and one `token add` made; the
/// `--print-secret-only` output is the token alone, usable as a token file.
#[test]
fn r_pr_1_serve_rereads_the_tokens_file_on_a_chmod_and_a_new_token() {
    let site = served::site_with_admin(TOKENS);
    let path = site.dir.path().join("tokens.toml");
    let (alice, _) = add_token(&site, "alice", "read");
    // bobby's file: alice's with another name of the same length.
    let other = site.dir.path().join("other.toml");
    let group = own_group();
    let o = other.to_str().unwrap();
    let bobby = ok(&local(
        &site,
        &[
            "token",
            "add",
            "bobby",
            "--role",
            "read",
            "--file",
            o,
            "--group",
            &group,
            "--print-secret-only",
        ],
    ));
    let bobby = bobby.trim_end().to_owned();
    let s = Served::start(&site, &[]);
    let list = |t: &str| call(s.addr, "GET", "/v1/profiles", Some(t), "").0;
    assert_eq!((list(&alice), list(&bobby)), (200, 401));

    // A chmod alone is a change: the file is read again (its log says so).
    let reloads = |s: &Served| s.node.log().matches("tokens file reloaded").count();
    let n = reloads(&s);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    wait_until(Duration::from_secs(5), || reloads(&s) > n);

    // Same inode, same length, same mtime: only ctime tells (before, the
    // watcher compared length, mtime and inode and never saw bobby).
    let before = fs::metadata(&path).unwrap();
    let text = fs::read(&other).unwrap();
    assert_eq!(text.len() as u64, before.len());
    {
        let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &text).unwrap();
        f.set_modified(before.modified().unwrap()).unwrap();
    }
    assert_eq!(
        fs::metadata(&path).unwrap().modified().unwrap(),
        before.modified().unwrap()
    );
    let took = wait_until(Duration::from_secs(5), || list(&bobby) == 200);
    println!("a change with its mtime kept seen after {took:?}");
    assert_eq!(list(&alice), 401, "alice's entry is gone");

    // A new token while serving, printed alone: a whole-file credential.
    let out = ok(&local(
        &site,
        &[
            "token",
            "add",
            "carol",
            "--role",
            "read",
            "--print-secret-only",
        ],
    ));
    assert!(out.starts_with("rs1_") && out.lines().count() == 1, "{out}");
    let carol = site.dir.path().join("carol.secret");
    fs::write(&carol, &out).unwrap();
    wait_until(Duration::from_secs(5), || list(out.trim_end()) == 200);
    ok(&remote(&s.url, Some(&carol), &["profile", "list"]));
    assert_eq!(owner(&path).0, 0o600, "the operator's mode kept");
}
