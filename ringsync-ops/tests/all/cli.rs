//! The `ringsync` binary: profile commands, status, exit codes, R-PR-2 via
//! the CLI, and R-PR-4 under kill -9.

use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::served::{instance, local as ringsync, ok, row};
use crate::common::TestSite;
use ringsync::profile::{ProfileSet, ProfileState};
use ringsync::state::DrainState;
use ringsync::store;
use ringsync::view::{Health, InstanceState};
use ringsync::work::{Eta, InstanceWork, NodeKind, Unknown, WorkCounts, WorkReport};
use ringsync_ops::status::SiteStatus;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_ringsync");

#[test]
fn profile_lifecycle_text_and_json() {
    let site = TestSite::new();
    let out = ok(&ringsync(
        &site,
        &[
            "profile",
            "create",
            "--name",
            "maint-a",
            "--server",
            "srv-a",
            "--server",
            "srv-b",
            "--description",
            "kernel",
        ],
    ));
    assert!(out.starts_with("created profile p-"), "{out}");
    let v: Value = serde_json::from_str(&ok(&ringsync(
        &site,
        &["--json", "profile", "show", "maint-a"],
    )))
    .unwrap();
    assert_eq!(v["servers"], serde_json::json!(["srv-a", "srv-b"]));
    let id = v["id"].as_str().unwrap().to_owned();
    ok(&ringsync(&site, &["profile", "activate", &id]));
    let list = ok(&ringsync(&site, &["profile", "list"]));
    assert!(
        list.contains("maint-a") && list.contains("active"),
        "{list}"
    );
    ok(&ringsync(
        &site,
        &[
            "profile", "update", "maint-a", "--name", "maint-x", "--server", "srv-c",
        ],
    ));
    let set: ProfileSet =
        serde_json::from_str(&ok(&ringsync(&site, &["profile", "list", "--json"]))).unwrap();
    assert_eq!(set.profiles[0].name, "maint-x");
    assert_eq!(set.profiles[0].servers, ["srv-c"]);
    assert_eq!(set.profiles[0].state, ProfileState::Active);
    ok(&ringsync(&site, &["profile", "deactivate", "maint-x"]));
    ok(&ringsync(&site, &["profile", "delete", "maint-x"]));
    let set: ProfileSet =
        serde_json::from_str(&ok(&ringsync(&site, &["--json", "profile", "list"]))).unwrap();
    assert!(set.profiles.is_empty());
    assert_eq!(set.revision, 5);
}

#[test]
fn r_pr_1_cli_unknown_server_fails_with_message_and_stores_nothing() {
    let site = TestSite::new();
    let o = ringsync(
        &site,
        &["profile", "create", "--name", "x", "--server", "srv-zz"],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown server `srv-zz`"), "{err}");
    assert!(!site.store_path().exists());
}

#[test]
fn errors_exit_non_zero_with_a_clear_message() {
    let site = TestSite::new();
    for (args, needle) in [
        (
            vec!["profile", "activate", "nope"],
            "no profile with id or name `nope`",
        ),
        (vec!["profile", "update", "nope"], "nothing to update"),
    ] {
        let o = ringsync(&site, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(needle),
            "{args:?}"
        );
    }
    // A bad site file names the file and line.
    let bad_dir = tempfile::tempdir().unwrap();
    let bad = bad_dir.path().join("site.toml");
    std::fs::write(
        &bad,
        crate::common::site().replace("server = \"srv-c\"\nsip", "server = \"srv-q\"\nsip"),
    )
    .unwrap();
    let o = Command::new(BIN)
        .arg("--config")
        .arg(&bad)
        .args(["profile", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("site.toml:") && err.contains("instance[2].server"),
        "{err}"
    );
    // A corrupt store file is named and left alone.
    std::fs::write(site.store_path(), "{").unwrap();
    let o = ringsync(
        &site,
        &["profile", "create", "--name", "x", "--server", "srv-a"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("t1.profiles.json"));
    assert_eq!(std::fs::read(site.store_path()).unwrap(), b"{");
}

/// `ringsync ARGS` run off the async runtime (the stand-in nodes live on it).
async fn ringsync_async(site: &TestSite, args: &[&str]) -> Output {
    let path = site.site_path();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .arg("--config")
            .arg(path)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn drain(site: &TestSite, servers: &[&str]) {
    let mut args = vec!["profile", "create", "--name", "d"];
    for s in servers {
        args.extend(["--server", s]);
    }
    ok(&ringsync(site, &args));
    ok(&ringsync(site, &["profile", "activate", "d"]));
}

fn counts(transactions: u64, dialogs: u64) -> WorkCounts {
    WorkCounts {
        transactions,
        dialogs,
        ..WorkCounts::default()
    }
}

/// `ringsync status` against these nodes: the JSON, and the table.
async fn status_of(site: &TestSite, gate: SocketAddr, media: SocketAddr) -> (Value, String) {
    let (g, m) = (gate.to_string(), media.to_string());
    let args = ["status", "--gate", g.as_str(), "--media", m.as_str()];
    let json = ok(&ringsync_async(site, &[&["--json"], &args[..]].concat()).await);
    let table = ok(&ringsync_async(site, &args).await);
    (serde_json::from_str(&json).unwrap(), table)
}

/// A gate with work on sg-a only (sg-c probed down), routing by profile
/// revision 2 (the test site's after its drain), and a media-ctl with calls
/// on the bgmg only; the gate's report, to change it.
async fn nodes_with_work() -> (SocketAddr, SocketAddr, Arc<Mutex<WorkReport>>) {
    let mut report = crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[
            ("sg-a", crate::common::holds(Health::Up, counts(1, 2))),
            ("sg-b", crate::common::holds(Health::Up, counts(0, 0))),
            ("sg-c", crate::common::holds(Health::Down, counts(0, 0))),
        ],
    );
    report.revision = 2;
    let (gate, gate_report) = crate::common::stand_in(report).await;
    let calls = |n| WorkCounts {
        calls: n,
        ..WorkCounts::default()
    };
    let (media, _) = crate::common::stand_in(crate::common::report(
        NodeKind::MediaCtl,
        "media-1",
        &[
            ("mg-a", crate::common::holds(Health::Up, calls(0))),
            ("bgmg-a", crate::common::holds(Health::Up, calls(4))),
        ],
    ))
    .await;
    (gate, media, gate_report)
}

/// R-ST-1, R-ST-3: the gate's and media-ctl's reports, summed. An instance
/// is `drained` only when the node that counts it reports zero.
#[tokio::test]
async fn r_st_3_status_sums_the_reports_of_the_gate_and_media_ctl() {
    let site = TestSite::new();
    drain(&site, &["srv-a", "srv-b"]);
    let (gate, media, gate_report) = nodes_with_work().await;
    let (v, table) = status_of(&site, gate, media).await;
    let st: SiteStatus = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(st.revision, 2);
    assert_eq!(st.nodes.len(), 2);
    assert_eq!(st.nodes[0].node.as_deref(), Some("gate-1"));
    assert_eq!(st.nodes[1].node.as_deref(), Some("media-1"));
    assert!(st.nodes.iter().all(|n| n.error.is_none()), "{v}");

    let sg_a = instance(&v, "sg-a");
    assert_eq!(
        (sg_a["state"].as_str(), sg_a["work"].as_u64()),
        (Some("draining"), Some(3))
    );
    assert_eq!(sg_a["counts"]["dialogs"], 2);
    assert_eq!(sg_a["nodes"], serde_json::json!(["gate-1"]));
    assert_eq!(instance(&v, "sg-b")["state"], "drained");
    assert_eq!(instance(&v, "sg-c")["state"], "down");
    assert_eq!(instance(&v, "mg-a")["state"], "drained");
    // bgmg is never drained (R-BG-1); its calls are counted all the same.
    let bgmg = instance(&v, "bgmg-a");
    assert_eq!(
        (bgmg["state"].as_str(), bgmg["work"].as_u64()),
        (Some("up"), Some(4))
    );

    let header = table.lines().nth(1).unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["INSTANCE", "SERVICE", "SERVER", "ZONE", "STATE", "WORK", "ETA", "UNKNOWN", "BECAUSE"],
        "{table}"
    );
    assert_eq!(
        row(&table, "sg-a"),
        [
            "sg-a",
            "sg",
            "srv-a",
            "drain",
            "draining",
            "3 (1 txn, 2 dlg)",
            "-"
        ],
        "{table}"
    );
    assert_eq!(
        row(&table, "sg-b"),
        ["sg-b", "sg", "srv-b", "drain", "drained", "0", "-"]
    );

    // A gate still routing by revision 0, before the drain: its zero for
    // sg-b may be followed by a new call, so sg-b is not drained (R-ST-3),
    // and the node line says it is behind.
    gate_report.lock().unwrap().revision = 0;
    let (v, table) = status_of(&site, gate, media).await;
    let sg_b = instance(&v, "sg-b");
    assert_eq!(sg_b["state"], "draining", "{v}");
    assert!(
        sg_b["unknown"][0]
            .as_str()
            .is_some_and(|u| u.contains("routes by profile revision 0, not yet 2")),
        "{v}"
    );
    assert!(
        table.contains(&format!(
            "node gate at {gate}: gate-1, profile revision 0 (behind"
        )),
        "{table}"
    );
}

/// R-ST-3, R-ST-4: nothing listens where media-ctl should: every mg is
/// `unknown` (never `drained`, never `up`) and says why; the gate's
/// instances are summed as usual.
#[tokio::test]
async fn r_st_3_r_st_4_unreachable_media_ctl_makes_the_mg_unknown_with_the_reason() {
    let site = TestSite::new();
    drain(&site, &["srv-a"]);
    let (gate, _) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[("sg-a", crate::common::holds(Health::Up, counts(0, 0)))],
    ))
    .await;
    let media = crate::common::closed_port();
    let (v, table) = status_of(&site, gate, media).await;
    assert_eq!(instance(&v, "sg-a")["state"], "drained", "{v}");
    let mg = instance(&v, "mg-a");
    assert_eq!(mg["state"], "unknown", "{v}");
    assert!(mg["work"].is_null(), "{v}");
    // R-ST-4: the bgmg is in the normal zone, and nobody saw it up.
    assert_eq!(instance(&v, "bgmg-a")["state"], "unknown", "{v}");
    let why = mg["unknown"][0].as_str().unwrap();
    assert!(
        why.starts_with(&format!("media_ctl {media}: cannot connect:")) && why.contains("refused"),
        "{why}"
    );
    let node = &v["nodes"][1];
    assert_eq!(
        (node["kind"].as_str(), node["addr"].as_str()),
        (Some("media_ctl"), Some(media.to_string().as_str()))
    );
    assert!(
        node["error"].as_str().unwrap().contains("refused"),
        "{node}"
    );
    // A gate's report never vouches for an mg.
    assert!(mg["nodes"].is_null(), "{v}");

    let r = row(&table, "mg-a");
    assert_eq!(
        r[..7],
        ["mg-a", "mg", "srv-a", "drain", "unknown", "?", "-"],
        "{table}"
    );
    assert!(r[7].contains("cannot connect"), "{table}");
    assert!(
        table.contains(&format!(
            "node media_ctl at {media}: no work report: cannot connect"
        )),
        "{table}"
    );
}

/// R-ST-3: a node that reports an instance but cannot vouch for its count
/// (a gate that restarted) keeps it `draining`, with its reason, the time
/// it will know, and the drain ETA it gives.
#[tokio::test]
async fn r_st_3_an_instance_its_node_cannot_vouch_for_shows_why_and_when() {
    let site = TestSite::new();
    drain(&site, &["srv-a"]);
    let now = ringsync::work::now_ms();
    let unsure = InstanceWork {
        unknown: Some(Unknown {
            reason: "restarted 5 s ago; registrations from before are not known".into(),
            until_ms: Some(now + 3_600_000),
        }),
        eta: Eta {
            registrations_until_ms: Some(now + 1_800_000),
            calls_until_ms: None,
        },
        ..crate::common::holds(Health::Up, counts(0, 1))
    };
    let (gate, _) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[("sg-a", unsure)],
    ))
    .await;
    let (media, _) = crate::common::stand_in(crate::common::report(
        NodeKind::MediaCtl,
        "media-1",
        &[("mg-a", InstanceWork::default())],
    ))
    .await;
    let (v, table) = status_of(&site, gate, media).await;
    let sg_a = instance(&v, "sg-a");
    assert_eq!(sg_a["state"], "draining", "{v}");
    assert!(sg_a["work"].is_null());
    assert_eq!(sg_a["counts"]["dialogs"], 1);
    assert_eq!(
        sg_a["unknown"],
        serde_json::json!([
            "gate gate-1: restarted 5 s ago; registrations from before are not known"
        ])
    );
    assert_eq!(sg_a["known_at_ms"], now + 3_600_000);
    assert_eq!(sg_a["eta"]["registrations_until_ms"], now + 1_800_000);
    assert_eq!(instance(&v, "mg-a")["state"], "drained");

    let r = row(&table, "sg-a");
    assert_eq!(r[5], ">=1 (1 dlg)", "{table}");
    assert!(
        r[6].starts_with("in 29m") || r[6].starts_with("in 30m"),
        "{table}"
    );
    assert!(
        r[7].starts_with("gate gate-1: restarted 5 s ago"),
        "{table}"
    );
    assert!(
        r[7].contains("(known in 59m") || r[7].contains("(known in 1h"),
        "{table}"
    );
}

/// A node at the wrong address (another site's gate, a media-ctl where the
/// gate should be) vouches for nothing.
#[tokio::test]
async fn a_report_from_another_site_or_kind_vouches_for_nothing() {
    let site = TestSite::new();
    drain(&site, &["srv-a"]);
    let zero = || crate::common::holds(Health::Up, counts(0, 0));
    let mut other = crate::common::report(NodeKind::Gate, "gate-x", &[("sg-a", zero())]);
    other.site = "t2".into();
    let (gate, _) = crate::common::stand_in(other).await;
    let (media, _) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-y",
        &[("mg-a", zero())],
    ))
    .await;
    let (g, m) = (gate.to_string(), media.to_string());
    let out = ok(&ringsync_async(&site, &["--json", "status", "--gate", &g, "--media", &m]).await);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        instance(&v, "sg-a")["unknown"],
        serde_json::json!([format!("gate {gate}: reports for site `t2`, not `t1`")])
    );
    assert_eq!(
        instance(&v, "mg-a")["unknown"],
        serde_json::json!([format!(
            "media_ctl {media}: answered as a `gate` node where a `media_ctl` was expected"
        )])
    );
    // Neither report counts: nobody answered for mg-a (R-ST-4).
    assert_eq!(instance(&v, "mg-a")["state"], "unknown");
    assert_eq!(instance(&v, "sg-a")["state"], "unknown");
}

/// `ringsync serve` asks the nodes once a second and serves the same
/// summed statuses at `/v1/status` (the `status --json` shape).
#[tokio::test]
async fn r_st_1_serve_polls_the_nodes_and_serves_the_summed_status() {
    let site = TestSite::new();
    drain(&site, &["srv-a"]);
    let (gate, handle) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[("sg-a", crate::common::holds(Health::Up, counts(0, 2)))],
    ))
    .await;
    let media = crate::common::closed_port();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(site.site_path())
        .args(["serve", "--bind", "127.0.0.1:0", "--gate"])
        .arg(gate.to_string())
        .arg("--media")
        .arg(media.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    let api: SocketAddr = first
        .trim()
        .rsplit("http://")
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("{first}: {e}"));

    let sg_a = |st: &SiteStatus| {
        st.instances
            .iter()
            .find(|i| i.id == "sg-a")
            .unwrap()
            .clone()
    };
    let st = wait_status(api, |st| sg_a(st).work == Some(2)).await;
    assert_eq!(sg_a(&st).state, InstanceState::Draining);
    let mg = st.instances.iter().find(|i| i.id == "mg-a").unwrap();
    // R-ST-4: media-ctl does not answer: nobody can say how mg-a is.
    assert_eq!(mg.state, InstanceState::Unknown);
    assert!(mg.unknown[0].contains("cannot connect"), "{:?}", mg.unknown);
    assert!(st.nodes[1].error.is_some());

    // The calls end: drained on the next poll, a second later at most.
    handle
        .lock()
        .unwrap()
        .instances
        .get_mut("sg-a")
        .unwrap()
        .counts = counts(0, 0);
    let t0 = Instant::now();
    let st = wait_status(api, |st| sg_a(st).state == InstanceState::Drained).await;
    assert_eq!(sg_a(&st).work, Some(0));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// GETs `/v1/status` until `done` holds (10 s at most).
async fn wait_status(api: SocketAddr, done: impl Fn(&SiteStatus) -> bool) -> SiteStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = get_status(api).await {
            if done(&st) {
                return st;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "status never got there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get_status(api: SocketAddr) -> Option<SiteStatus> {
    let mut s = tokio::net::TcpStream::connect(api).await.ok()?;
    s.write_all(b"GET /v1/status HTTP/1.0\r\n\r\n").await.ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    serde_json::from_str(buf.split("\r\n\r\n").nth(1)?).ok()
}

#[tokio::test]
async fn r_pr_2_cli_change_reaches_a_running_follower_within_1s() {
    let site = TestSite::new();
    let store = store::open(&site.config).await.unwrap();
    let state = DrainState::new(site.config.clone());
    let shutdown = CancellationToken::new();
    state.follow(store, shutdown.clone());
    let path = site.site_path();
    let run = move |args: Vec<&'static str>| {
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(BIN)
                .arg("--config")
                .arg(path)
                .args(args)
                .output()
                .unwrap()
        })
    };
    ok(&run(vec![
        "profile", "create", "--name", "c", "--server", "srv-c",
    ])
    .await
    .unwrap());
    let o = run(vec!["profile", "activate", "c"]).await.unwrap();
    let t0 = Instant::now();
    ok(&o);
    let mut views = state.subscribe();
    tokio::time::timeout(Duration::from_secs(1), async {
        while !views.borrow_and_update().is_draining(2) {
            views.changed().await.unwrap();
        }
    })
    .await
    .expect("R-PR-2: the CLI's activation reached the follower within 1 s");
    println!("seen after {:?}", t0.elapsed());
    shutdown.cancel();
}
