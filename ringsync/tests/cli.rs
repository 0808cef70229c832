//! The `ringsync` binary: profile commands, status, exit codes, R-PR-2 via
//! the CLI, and R-PR-4 under kill -9.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::TestSite;
use ringsync::profile::{ProfileSet, ProfileState};
use ringsync::state::DrainState;
use ringsync::store;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_ringsync");

fn ringsync(site: &TestSite, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--config")
        .arg(site.site_path())
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

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
        common::SITE.replace("server = \"srv-c\"\nsip", "server = \"srv-q\"\nsip"),
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

#[test]
fn status_without_gate_says_so() {
    let site = TestSite::new();
    ok(&ringsync(
        &site,
        &["profile", "create", "--name", "a", "--server", "srv-a"],
    ));
    ok(&ringsync(&site, &["profile", "activate", "a"]));
    let out = ok(&ringsync(&site, &["status", "--gate", "127.0.0.1:9"]));
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[1].starts_with("INSTANCE  SERVICE  SERVER  ZONE    STATE     WORK"),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["sg-a", "sg", "srv-a", "drain", "draining", "-"]),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["bgmg-a", "bgmg", "srv-a", "normal", "up", "-"]),
        "{out}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("note: ")).count(),
        1,
        "{out}"
    );
}

#[tokio::test]
async fn r_st_1_status_with_gate_shows_work_and_states() {
    let site = TestSite::new();
    ok(&ringsync(
        &site,
        &[
            "profile", "create", "--name", "a", "--server", "srv-a", "--server", "srv-b",
        ],
    ));
    ok(&ringsync(&site, &["profile", "activate", "a"]));
    // A fake gate answering /v1/work.
    let gate = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = gate.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = gate.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let body = r#"{"instances":{"sg-a":{"health":"up","work":12},"sg-b":{"health":"up","work":0},"sg-c":{"health":"down","work":0}}}"#;
            let resp = format!("HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    let addr_s = addr.to_string();
    let site_path = site.site_path();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["--config"])
            .arg(site_path)
            .args(["--json", "status", "--gate", &addr_s])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["gate"]["reachable"], true, "{v}");
    let inst = |id: &str| {
        v["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            inst("sg-a")["state"].as_str(),
            inst("sg-a")["work"].as_u64()
        ),
        (Some("draining"), Some(12))
    );
    assert_eq!(inst("sg-b")["state"], "drained");
    assert_eq!(inst("sg-c")["state"], "down");
    assert_eq!(inst("bgmg-a")["state"], "up");
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

#[test]
fn r_pr_4_kill_9_during_writes_never_leaves_a_torn_file() {
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
}

/// A cheap deterministic spread of kill moments (splitmix64).
fn rand_u64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
