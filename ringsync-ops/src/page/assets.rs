//! The page's files, compiled into the binary: nothing is fetched from
//! anywhere else, and the Content-Security-Policy says so to the browser.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// Only this server's own files; no inline script, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

fn file(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn index() -> Response {
    file(INDEX, "text/html; charset=utf-8")
}

pub(super) async fn script() -> Response {
    file(SCRIPT, "text/javascript; charset=utf-8")
}

pub(super) async fn style() -> Response {
    file(STYLE, "text/css; charset=utf-8")
}
