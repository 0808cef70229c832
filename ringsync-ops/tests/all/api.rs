//! Admin API: tower `oneshot` for most, one real socket.

use std::sync::Arc;
use std::time::Duration;

use crate::common::TestSite;
use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use ringsync::profile::{Profile, ProfileSet, ProfileState};
use ringsync::state::DrainState;
use ringsync::store;
use ringsync::view::{Health, InstanceState};
use ringsync::work::{NodeKind, WorkCounts};
use ringsync_ops::api::{self, AdminApi};
use ringsync_ops::fetch::Fetcher;
use ringsync_ops::status::{self, NodeBoard, SiteStatus};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

struct Harness {
    site: TestSite,
    router: Router,
    state: Arc<DrainState>,
    board: Arc<NodeBoard>,
    shutdown: CancellationToken,
}

/// The API over the test site, with the nodes at the site's admin
/// addresses (nothing listens there).
async fn harness() -> Harness {
    harness_with(None).await
}

/// The API with a stand-in gate at `gate`.
async fn harness_with(gate: Option<std::net::SocketAddr>) -> Harness {
    // As `ringsync serve` does: the process's recorder takes what the
    // library counts where it happens (store errors...). Once a process.
    let _ = ringsync::daemon::install_metrics();
    let site = TestSite::new();
    let store = store::open(&site.config).await.unwrap();
    let state = DrainState::new(site.config.clone());
    let shutdown = CancellationToken::new();
    state.follow(store.clone(), shutdown.clone());
    let nodes = status::local_nodes(&site.config, gate, None);
    let board = NodeBoard::new("t1", nodes, Fetcher::default());
    let router = api::router(AdminApi::new(store, state.clone(), board.clone()));
    Harness {
        site,
        router,
        state,
        board,
        shutdown,
    }
}

impl Harness {
    async fn call(&self, method: Method, uri: &str, body: Option<&str>) -> (StatusCode, Vec<u8>) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, bytes.to_vec())
    }

    async fn json(&self, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
        let b = body.map(|b| b.to_string());
        let (s, bytes) = self.call(method, uri, b.as_deref()).await;
        (s, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[tokio::test]
async fn profile_crud_and_status() {
    let (gate, _) = crate::common::stand_in(crate::common::report(
        NodeKind::Gate,
        "gate-1",
        &[(
            "sg-b",
            crate::common::holds(Health::Up, WorkCounts::default()),
        )],
    ))
    .await;
    let h = harness_with(Some(gate)).await;
    h.board.refresh().await;
    let (s, v) = h
        .json(
            Method::POST,
            "/v1/profiles",
            Some(json!({"name": "maint-b", "description": "patching", "servers": ["srv-b"]})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let p: Profile = serde_json::from_value(v).unwrap();
    assert_eq!(p.state, ProfileState::Inactive);

    let (s, v) = h.json(Method::GET, "/v1/profiles", None).await;
    assert_eq!(s, StatusCode::OK);
    let set: ProfileSet = serde_json::from_value(v).unwrap();
    assert_eq!(set.profiles, vec![p.clone()]);

    let (s, v) = h.json(Method::GET, "/v1/profiles/maint-b", None).await;
    assert_eq!((s, v["id"].as_str()), (StatusCode::OK, Some(p.id.as_str())));

    let (s, v) = h
        .json(
            Method::POST,
            &format!("/v1/profiles/{}/activate", p.id),
            None,
        )
        .await;
    assert_eq!((s, v["state"].as_str()), (StatusCode::OK, Some("active")));

    let (s, v) = h.json(Method::GET, "/v1/status", None).await;
    assert_eq!(s, StatusCode::OK);
    let st: SiteStatus = serde_json::from_value(v).unwrap();
    assert_eq!(st.drain_zone.iter().collect::<Vec<_>>(), ["srv-b"]);
    let sg_b = st.instances.iter().find(|i| i.id == "sg-b").unwrap();
    // R-ST-1, R-ST-3 via the API: the gate reports no work left.
    assert_eq!(
        (sg_b.state, sg_b.work),
        (InstanceState::Drained, Some(0)),
        "{sg_b:?}"
    );
    assert_eq!(st.nodes[0].node.as_deref(), Some("gate-1"));
    assert!(st.nodes[1].error.is_some(), "no media-ctl listens");
    assert!(h.state.view().is_draining(1));

    let (s, v) = h
        .json(
            Method::PATCH,
            &format!("/v1/profiles/{}", p.id),
            Some(json!({"servers": ["srv-b", "srv-c"]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["servers"], json!(["srv-b", "srv-c"]));

    let (s, _) = h
        .json(Method::POST, "/v1/profiles/maint-b/deactivate", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = h.json(Method::DELETE, "/v1/profiles/maint-b", None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = h.json(Method::GET, "/v1/profiles/maint-b", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("maint-b"));
}

#[tokio::test]
async fn r_pr_1_bad_input_is_4xx_and_nothing_is_stored() {
    let h = harness().await;
    let cases: [(Method, &str, &str, StatusCode); 6] = [
        (
            Method::POST,
            "/v1/profiles",
            r#"{"name":"x","servers":["srv-nope"]}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/profiles",
            r#"{"name":"x","servers":[]}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/profiles",
            "{not json",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/profiles",
            r#"{"name":"x","servers":["srv-a"],"colour":"red"}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            "/v1/profiles/nope",
            r#"{"name":"y"}"#,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/v1/profiles/nope/activate",
            "",
            StatusCode::NOT_FOUND,
        ),
    ];
    for (m, uri, body, want) in cases {
        let (s, bytes) = h.call(m, uri, Some(body)).await;
        assert_eq!(s, want, "{uri} {body}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(v["error"].is_string(), "{v}");
    }
    assert!(!h.site.store_path().exists(), "nothing stored");

    let ok = r#"{"name":"x","servers":["srv-a"]}"#;
    assert_eq!(
        h.call(Method::POST, "/v1/profiles", Some(ok)).await.0,
        StatusCode::CREATED
    );
    let (s, bytes) = h.call(Method::POST, "/v1/profiles", Some(ok)).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    let (s, _) = h
        .call(
            Method::PATCH,
            "/v1/profiles/x",
            Some(r#"{"servers":["srv-q"]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let set: ProfileSet =
        serde_json::from_slice(&std::fs::read(h.site.store_path()).unwrap()).unwrap();
    assert_eq!(set.profiles.len(), 1);
    assert_eq!(set.profiles[0].servers, ["srv-a"]);
}

#[tokio::test]
async fn store_failure_is_503() {
    let h = harness().await;
    std::fs::write(h.site.store_path(), "garbage").unwrap();
    let (s, v) = h
        .json(
            Method::POST,
            "/v1/profiles",
            Some(json!({"name": "x", "servers": ["srv-a"]})),
        )
        .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert!(v["error"].as_str().unwrap().contains("corrupt"), "{v}");
    assert_eq!(std::fs::read(h.site.store_path()).unwrap(), b"garbage");
    let (s, _) = h.call(Method::GET, "/v1/profiles", None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn metrics_health_and_unknown_paths() {
    let h = harness().await;
    h.json(
        Method::POST,
        "/v1/profiles",
        Some(json!({"name": "a", "servers": ["srv-a"], "state": "active"})),
    )
    .await;
    let (s, body) = h.call(Method::GET, "/metrics", None).await;
    assert_eq!(s, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    // No node has answered for sg-a: unknown, not draining or up (R-ST-4).
    assert!(
        text.lines()
            .any(|l| l.starts_with("ringsync_instance_state{")
                && l.contains("instance=\"sg-a\"")
                && l.contains("state=\"unknown\"")
                && l.ends_with(" 1")),
        "{text}"
    );
    assert!(
        text.contains("ringsync_profiles{state=\"active\"} 1"),
        "{text}"
    );
    assert!(text.contains("ringsync_store_errors_total"), "{text}");
    // No node has answered: nothing is known of any work, and metrics say so.
    assert!(
        text.contains("ringsync_instance_work{instance=\"sg-a\"} NaN"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("ringsync_node_reporting{kind=\"gate\",addr=\"127.0.0.1:9\"} 0")),
        "{text}"
    );
    assert_eq!(
        h.call(Method::GET, "/healthz", None).await.0,
        StatusCode::OK
    );
    assert_eq!(
        h.call(Method::GET, "/nope", None).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn real_socket_serve_ready_and_graceful_shutdown() {
    let site = TestSite::new();
    let store = store::open(&site.config).await.unwrap();
    let state = DrainState::new(site.config.clone());
    let shutdown = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let board = NodeBoard::new("t1", vec![], Fetcher::default());
    let server = tokio::spawn(api::serve(
        listener,
        AdminApi::new(store, state, board),
        shutdown.clone(),
    ));

    let http = |req: String| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        buf
    };
    let mut ready = String::new();
    for _ in 0..50 {
        ready = http("GET /readyz HTTP/1.0\r\n\r\n".into()).await;
        if ready.starts_with("HTTP/1.0 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready.starts_with("HTTP/1.0 200"), "{ready}");
    let body = r#"{"name":"sock","servers":["srv-c"]}"#;
    let resp = http(format!(
        "POST /v1/profiles HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ))
    .await;
    assert!(resp.starts_with("HTTP/1.0 201"), "{resp}");
    assert!(resp.contains("\"servers\":[\"srv-c\"]"), "{resp}");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve stops on shutdown")
        .unwrap()
        .unwrap();
}
