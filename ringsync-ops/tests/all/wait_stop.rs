//! A held `GET /v1/wait` does not hold up `ringsync serve`'s graceful stop
//! (issue 27): the real `ringsync serve` with a long poll held (sg-a in the
//! drain zone, its work unknown: no gate answers) is sent SIGTERM; the poll
//! is answered 503 at once and the process exits, instead of waiting out
//! the poll's 300 s.

use std::time::{Duration, Instant};

use crate::common::served::{local, ok};
use crate::common::TestSite;
use testbed::bins::Node;

#[test]
fn a_held_long_poll_is_answered_503_when_serve_stops_and_does_not_delay_it() {
    let site = TestSite::new();
    for args in [
        &["profile", "create", "--name", "m", "--server", "srv-a"][..],
        &["profile", "activate", "m"],
    ] {
        ok(&local(&site, args));
    }
    let mut serve = Node::serve(&site.config.path).start().unwrap();
    serve.wait_ready().unwrap();
    let api = serve.admin();
    let poll = std::thread::spawn(move || {
        testbed::http::Request::new("GET", api, "/v1/wait?server=srv-a&timeout=300s")
            .timeouts(Duration::from_secs(1), Duration::from_secs(60))
            .send()
            .map(|r| (r, Instant::now()))
    });
    std::thread::sleep(Duration::from_millis(800));
    assert!(!poll.is_finished(), "held: sg-a's work is unknown");
    let stopped = Instant::now();
    serve.signal("TERM");
    let exit = serve.wait_exit(Duration::from_secs(10));
    assert!(
        exit.is_some_and(|s| s.success()),
        "exits at once, cleanly: {exit:?}"
    );
    let (reply, answered) = poll
        .join()
        .unwrap()
        .expect("an answer, not a cut connection");
    assert_eq!(reply.status, 503, "{reply:?}");
    assert!(reply.body.contains("stopping"), "{}", reply.body);
    assert!(
        answered.duration_since(stopped) < Duration::from_secs(3),
        "answered {:?} after SIGTERM",
        answered.duration_since(stopped)
    );
}
