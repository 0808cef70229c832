//! The status page's endpoints in process (tower `oneshot`): its data is
//! the API's own (no new source of truth), its assets are all inside the
//! binary, and its sessions keep R-PR-1: a token logs in once into an
//! HttpOnly, SameSite=Strict cookie; a change made with the cookie needs
//! the session's CSRF token and a same-site Origin, else 403, audited; a
//! `read` session changes nothing; every change is audited under the
//! token's name. The browser test is `page_browser.rs`.

use std::sync::Arc;

use crate::common::served::own_group;
use crate::common::TestSite;
use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use ringsync::state::DrainState;
use ringsync::store::{self, Store};
use ringsync_ops::api::{self, Access, AdminApi};
use ringsync_ops::auth::{self, Role, Tokens};
use ringsync_ops::fetch::Fetcher;
use ringsync_ops::page::{self, History, PageData};
use ringsync_ops::status::{self, NodeBoard, SiteStatus};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

struct Page {
    site: TestSite,
    router: Router,
    store: Arc<dyn Store>,
    shutdown: CancellationToken,
    tokens: Vec<(Role, String)>,
}

impl Drop for Page {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The API and the page over the test site; with `tokens`, one token of
/// each role (`read-1`, `operate-1`, `admin-1`).
async fn page(tokens: bool) -> Page {
    let site = TestSite::new();
    let store = store::open(&site.config).await.unwrap();
    let state = DrainState::new(site.config.clone());
    let shutdown = CancellationToken::new();
    state.follow(store.clone(), shutdown.clone());
    let nodes = status::local_nodes(&site.config, None, None);
    let board = NodeBoard::new("t1", nodes, Fetcher::default());
    let mut made = Vec::new();
    let access = if tokens {
        let file = site.dir.path().join("tokens.toml");
        for role in Role::ALL {
            made.push((
                role,
                auth::add_token(&file, &format!("{role}-1"), role, Some(&own_group())).unwrap(),
            ));
        }
        Access::Tokens(Tokens::open(&file).unwrap())
    } else {
        Access::Open
    };
    let api = AdminApi::with_access(store.clone(), state, board, access);
    let router = api::router_with(api, page::routes(History::new(10)));
    Page {
        site,
        router,
        store,
        shutdown,
        tokens: made,
    }
}

/// A request's answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

impl Page {
    async fn call(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1:8080");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let resp = self
            .router
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = to_bytes(resp.into_body(), 1 << 22).await.unwrap().to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }

    fn token(&self, role: Role) -> &str {
        &self.tokens.iter().find(|(r, _)| *r == role).unwrap().1
    }

    /// Logs `role` in: the cookie header to send and the CSRF token.
    async fn login(&self, role: Role) -> (String, String) {
        let a = self
            .call(
                Method::POST,
                "/page/login",
                &[],
                Some(json!({"token": self.token(role)})),
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.json());
        let set = a.headers["set-cookie"].to_str().unwrap().to_owned();
        for part in ["HttpOnly", "SameSite=Strict", "Max-Age=", "Path=/"] {
            assert!(set.contains(part), "{set}");
        }
        let cookie = set.split(';').next().unwrap().to_owned();
        (cookie, a.json()["csrf"].as_str().unwrap().to_owned())
    }

    async fn audit(&self) -> Vec<ringsync::store::AuditRecord> {
        self.store
            .audit_log(Default::default())
            .await
            .unwrap()
            .records
    }
}

/// The data endpoint is the API's own status, profiles and audit, and
/// names the servers in the drain zone with their active profiles.
#[tokio::test]
async fn the_page_data_is_what_the_api_serves() {
    let p = page(false).await;
    let made = p
        .call(
            Method::POST,
            "/v1/profiles",
            &[],
            Some(json!({"name": "maint-a", "servers": ["srv-a"]})),
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let on = p
        .call(
            Method::POST,
            &format!("/v1/profiles/{id}/activate"),
            &[],
            None,
        )
        .await;
    assert_eq!(on.status, StatusCode::OK);

    let a = p.call(Method::GET, "/v1/page", &[], None).await;
    assert_eq!(a.status, StatusCode::OK);
    let data: PageData = serde_json::from_slice(&a.body).unwrap();
    let st: SiteStatus = p
        .call(Method::GET, "/v1/status", &[], None)
        .await
        .json()
        .pipe();
    let same = |s: &SiteStatus| {
        (
            s.revision,
            s.drain_zone.clone(),
            s.instances
                .iter()
                .map(|i| (i.id.clone(), i.state, i.work))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(same(&data.status), same(&st), "the status is /v1/status's");
    let profiles = p.call(Method::GET, "/v1/profiles", &[], None).await.json();
    assert_eq!(
        serde_json::to_value(&data.profiles).unwrap(),
        profiles["profiles"]
    );
    let rows: Vec<(&str, bool, Vec<String>)> = data
        .servers
        .iter()
        .map(|s| (s.name.as_str(), s.draining, s.profiles.clone()))
        .collect();
    assert_eq!(
        rows,
        [
            ("srv-a", true, vec!["maint-a".to_owned()]),
            ("srv-b", false, vec![]),
            ("srv-c", false, vec![])
        ]
    );
    assert_eq!(data.servers[0].instances, ["sg-a", "bgmg-a", "mg-a"]);
    let actions: Vec<&str> = data.audit.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["create", "activate"]);
    assert_eq!(data.audit, p.audit().await, "the audit tail is the log's");
    // No tokens file: anonymous, with every right, as on the API.
    assert!(data.viewer.can_delete && data.viewer.name == "anonymous");
    assert!(data.errors.is_empty(), "{:?}", data.errors);
    assert_eq!(a.headers["cache-control"], "no-store");
}

/// Every asset is in the binary and names nothing outside this server.
#[tokio::test]
async fn the_assets_are_served_from_the_binary_and_fetch_nothing_elsewhere() {
    let p = page(true).await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/page/app.js", "text/javascript"),
        ("/page/style.css", "text/css"),
    ] {
        // Public: they hold no data (the data needs a token or a session).
        let a = p.call(Method::GET, path, &[], None).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert!(a.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with(kind));
        let csp = a.headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
        let text = String::from_utf8(a.body).unwrap();
        // The SVG namespace is a name, not a fetch.
        let outside = text.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !outside.contains("http://")
                && !outside.contains("https://")
                && !outside.contains("//cdn"),
            "{path} names another server"
        );
        assert!(
            !outside.contains("@import") && !outside.contains("@font-face"),
            "{path}"
        );
    }
    let a = p.call(Method::GET, "/v1/page", &[], None).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED, "the data needs a login");
}

/// R-PR-1 through the page's session: log in once, a cookie; changes need
/// the CSRF token and a same-site Origin; `read` changes nothing; logout
/// ends it; everything audited under the token's name.
#[tokio::test]
async fn r_pr_1_page_sessions_csrf_and_roles() {
    let p = page(true).await;
    let before = std::fs::read(p.site.store_path()).ok();

    a_wrong_token_gets_no_cookie(&p).await;

    let (cookie, csrf) = p.login(Role::Operate).await;
    let who = p
        .call(Method::GET, "/page/session", &[("cookie", &cookie)], None)
        .await
        .json();
    assert_eq!(
        (who["viewer"]["name"].as_str(), who["csrf"].as_str()),
        (Some("operate-1"), Some(csrf.as_str()))
    );
    let data = p
        .call(Method::GET, "/v1/page", &[("cookie", &cookie)], None)
        .await
        .json();
    assert_eq!(
        (
            data["viewer"]["can_operate"].as_bool(),
            data["viewer"]["can_delete"].as_bool()
        ),
        (Some(true), Some(false))
    );
    forged_and_cross_site_posts_are_refused(&p, &cookie, &csrf).await;
    assert_eq!(
        std::fs::read(p.site.store_path()).ok(),
        before,
        "nothing stored"
    );
    let ok = p
        .call(
            Method::POST,
            "/v1/profiles",
            &[
                ("cookie", &cookie),
                ("x-ringsync-csrf", &csrf),
                ("origin", "http://127.0.0.1:8080"),
            ],
            Some(json!({"name": "maint-a", "servers": ["srv-a"]})),
        )
        .await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.json());
    let id = ok.json()["id"].as_str().unwrap().to_owned();

    // A read session sees no right to act, and its POST is refused.
    let (rcookie, rcsrf) = p.login(Role::Read).await;
    let data = p
        .call(Method::GET, "/v1/page", &[("cookie", &rcookie)], None)
        .await
        .json();
    assert_eq!(data["viewer"]["can_operate"], false);
    let refused = p
        .call(
            Method::POST,
            &format!("/v1/profiles/{id}/activate"),
            &[("cookie", &rcookie), ("x-ringsync-csrf", &rcsrf)],
            None,
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);

    let out = p
        .call(Method::POST, "/page/logout", &[("cookie", &cookie)], None)
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    assert!(out.headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    let gone = p
        .call(Method::GET, "/v1/page", &[("cookie", &cookie)], None)
        .await;
    assert_eq!(gone.status, StatusCode::UNAUTHORIZED, "logged out");
    audited_under_the_tokens_names(&p).await;
}

trait Pipe {
    fn pipe<T: serde::de::DeserializeOwned>(self) -> T;
}

impl Pipe for Value {
    fn pipe<T: serde::de::DeserializeOwned>(self) -> T {
        serde_json::from_value(self).unwrap()
    }
}

/// A change with the cookie alone (a forged form post), with the right CSRF
/// token from another site's page, and a bearer token a browser on another
/// site sends: each refused with 403.
async fn forged_and_cross_site_posts_are_refused(p: &Page, cookie: &str, csrf: &str) {
    let body = || Some(json!({"name": "maint-a", "servers": ["srv-a"]}));
    // The cookie alone (a forged form post): refused.
    let forged = p
        .call(Method::POST, "/v1/profiles", &[("cookie", cookie)], body())
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.json());
    // The right CSRF token from another site's page: refused.
    let cross = p
        .call(
            Method::POST,
            "/v1/profiles",
            &[
                ("cookie", cookie),
                ("x-ringsync-csrf", csrf),
                ("origin", "http://evil.example"),
            ],
            body(),
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    // Even a bearer token, when a browser on another site sends it.
    let bearer = format!("Bearer {}", p.token(Role::Admin));
    let cross = p
        .call(
            Method::POST,
            "/v1/profiles",
            &[("authorization", &bearer), ("sec-fetch-site", "cross-site")],
            body(),
        )
        .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
}

/// Every change and refusal of the test above, under the token's name.
async fn audited_under_the_tokens_names(p: &Page) {
    let log: Vec<(String, String, u16)> = p
        .audit()
        .await
        .into_iter()
        .map(|r| (r.who, r.action, r.status))
        .collect();
    let want = [
        ("(invalid token)", "page login", 401),
        ("operate-1", "POST /v1/profiles", 403),
        ("operate-1", "POST /v1/profiles", 403),
        ("admin-1", "POST /v1/profiles", 403),
        ("operate-1", "create", 201),
        ("read-1", "POST /v1/profiles/{id}/activate", 403),
    ];
    let want: Vec<(String, String, u16)> = want
        .iter()
        .map(|(w, a, s)| (w.to_string(), a.to_string(), *s))
        .collect();
    assert_eq!(
        log, want,
        "every change and refusal audited under the token's name"
    );
}

/// A wrong token: 401 and no cookie (audited as a refused `page login`).
async fn a_wrong_token_gets_no_cookie(p: &Page) {
    let bad = p
        .call(
            Method::POST,
            "/page/login",
            &[],
            Some(json!({"token": "rs1_wrong"})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.headers.get("set-cookie").is_none());
}
