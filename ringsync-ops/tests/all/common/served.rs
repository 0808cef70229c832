//! The real `ringsync` binary for operator-plane tests: a `serve` process
//! (stopped when dropped), CLI runs in either mode, tokens made by
//! `token add`, and calls the CLI does not make (through `testbed::http`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testbed::bins::{BinDir, Node};

use super::TestSite;

pub const BIN: &str = env!("CARGO_BIN_EXE_ringsync");

/// A site whose `[admin]` section starts with `admin` (e.g. a tokens file).
pub fn site_with_admin(admin: &str) -> TestSite {
    TestSite::with_text(&super::site().replace("[admin]\n", &format!("[admin]\n{admin}\n")))
}

/// A running `ringsync serve` (testbed's launcher: its output under the
/// site's directory), killed (SIGKILL) when dropped.
pub struct Served {
    pub node: Node,
    /// Where it listens (a wildcard bind is reached on 127.0.0.1).
    pub addr: SocketAddr,
    /// `http://ADDR` or `https://ADDR`.
    pub url: String,
}

impl Served {
    /// `ringsync --config SITE serve --bind 127.0.0.1:0 EXTRA...`.
    pub fn start(site: &TestSite, extra: &[&str]) -> Served {
        Self::start_at(site, "127.0.0.1:0", extra)
    }

    pub fn start_at(site: &TestSite, bind: &str, extra: &[&str]) -> Served {
        let bins = BinDir::at(Path::new(BIN).parent().expect("the binary's directory"));
        let mut node = Node::serve(site.site_path())
            .bins(bins)
            .admin(bind.parse().expect("a socket address to bind"))
            .args(extra)
            .start()
            .unwrap_or_else(|e| panic!("ringsync serve: {e}"));
        node.wait_ready()
            .unwrap_or_else(|e| panic!("ringsync serve: {e}"));
        let (addr, url) = (node.admin(), node.url());
        Served { node, addr, url }
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(mut self) {
        assert!(self.node.kill().is_some(), "ringsync serve was not running");
    }
}

/// Polls `ok` every 50 ms until it holds; panics after `limit`.
pub fn wait_until(limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < limit, "not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t0.elapsed()
}

/// `ringsync --config SITE ARGS...` on the site file at `site` (the store
/// itself): the one CLI runner ([`testbed::bins::run`]) with this
/// package's binary.
pub fn at(site: &Path, args: &[&str]) -> Output {
    let bins = BinDir::at(Path::new(BIN).parent().expect("a binary's directory"));
    testbed::bins::run(&bins, "ringsync", site, args).unwrap()
}

/// [`at`] the test site's file.
pub fn local(site: &TestSite, args: &[&str]) -> Output {
    at(&site.site_path(), args)
}

/// `ringsync --api URL [--token-file F] ARGS...` (through `serve`).
pub fn remote(url: &str, token_file: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(["--api", url]);
    if let Some(f) = token_file {
        c.arg("--token-file").arg(f);
    }
    c.args(args).output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Instance `id` in a `ringsync status --json` answer.
pub fn instance<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("{id} missing in {v}"))
}

/// The row of instance `id` in `ringsync status`'s table, split on runs of
/// two or more spaces.
pub fn row<'a>(table: &'a str, id: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("{id} ")))
        .unwrap_or_else(|| panic!("{id} missing in\n{table}"));
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The arguments of `ringsync migrate` from the embedded store to the
/// etcd at `endpoint`.
pub fn migrate_to_etcd(endpoint: &str) -> [&str; 7] {
    [
        "migrate",
        "--from",
        "embedded",
        "--to",
        "etcd",
        "--endpoint",
        endpoint,
    ]
}

/// The output, asserting success.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

/// The name of this process's group: one that exists on the test machine,
/// for `token add --group` (`sip-gate`, the default, may not).
pub fn own_group() -> String {
    let gid = nix::unistd::getgid();
    let group = nix::unistd::Group::from_gid(gid).expect("the group database");
    group.expect("this process's group has a name").name
}

/// A token made by `ringsync token add NAME --role ROLE --group OWN`, saved
/// (the whole output, as an operator would) to `<dir>/NAME.token`; returns
/// the token and the file.
pub fn add_token(site: &TestSite, name: &str, role: &str) -> (String, PathBuf) {
    let group = own_group();
    let args = ["token", "add", name, "--role", role, "--group", &group];
    let out = ok(&local(site, &args));
    let token = out.lines().next().unwrap().trim().to_owned();
    assert!(token.starts_with("rs1_"), "{out}");
    let file = site.dir.path().join(format!("{name}.token"));
    std::fs::write(&file, &out).unwrap();
    (token, file)
}

/// One exchange through the tests' HTTP client (`testbed::http`): the
/// status and the body, or status 0 when nothing answered.
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut req = testbed::http::Request::new(method, addr, path).body(body);
    if let Some(t) = token {
        req = req.bearer(t);
    }
    req.send()
        .map_or((0, String::new()), |r| (r.status, r.body))
}
