//! Following the profile document (R-PR-2, R-MN-1, R-MN-2).
//!
//! List once, then watch from the revision after the list. When the watch
//! breaks (a member died, the cluster is down, a partition), the node keeps
//! its view and reports itself stale; it then resumes the watch right after
//! the last revision of the document it received, applied or not: a
//! version that does not parse is skipped (the view stays, the node says
//! it is stale and why), every other change made meanwhile arrives, in
//! order, once. The node is current again when its watch has reached the
//! document version the store held as the watch was set up (one read right
//! after the watch is established tells which, parsable or not) and the
//! newest version it received parsed: a good version written after a
//! corrupt one makes it current, whenever the corrupt one came. If the
//! revision to resume from was compacted away, it lists again instead.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Event, EventType, WatchOptions};
use tokio_util::sync::CancellationToken;

use super::{cache, Inner};
use crate::profile::ProfileSet;
use crate::store::StoreError;
use crate::work::now_ms;

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Why a watch ended.
enum End {
    Shutdown,
    /// The revision to resume from is gone: list again.
    Compacted(i64),
    /// The store went away; the reason, for the operator.
    Lost(String),
}

/// The follower task. `start`: the store revision of the read `open` made,
/// or `None` when it started from the cache (list first).
pub(super) async fn run(inner: Arc<Inner>, start: Option<i64>, token: CancellationToken) {
    let mut seen = start;
    let mut backoff = BACKOFF_MIN;
    loop {
        let from = match seen {
            Some(r) => r,
            None => match inner.read().await {
                Ok(doc) => {
                    inner.apply(doc.set, doc.mod_revision);
                    inner.mark_fresh();
                    backoff = BACKOFF_MIN;
                    doc.header_revision
                }
                Err(e) => {
                    stale(&inner, &e);
                    if pause(&token, &mut backoff).await {
                        return;
                    }
                    continue;
                }
            },
        };
        seen = Some(from);
        match watch(&inner, &mut seen, &token, &mut backoff).await {
            End::Shutdown => return,
            End::Compacted(at) => {
                inner.relists.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    resume_from = seen.unwrap_or_default() + 1,
                    compacted_to = at,
                    "profile history compacted past where this node left off; listing again"
                );
                seen = None;
            }
            End::Lost(reason) => {
                inner.mark_stale(&reason);
                if pause(&token, &mut backoff).await {
                    return;
                }
            }
        }
    }
}

/// One watch, from `seen + 1` until it breaks. `seen` advances with every
/// event applied, so a reconnect resumes right after it.
async fn watch(
    inner: &Arc<Inner>,
    seen: &mut Option<i64>,
    token: &CancellationToken,
    backoff: &mut Duration,
) -> End {
    let from = seen.unwrap_or(0);
    let options = WatchOptions::new().with_start_revision(from + 1);
    let mut client = inner.client.watch_client();
    let mut stream = match inner
        .rpc(
            "watching profiles",
            client.watch(inner.keys.profiles.as_str(), Some(options)),
        )
        .await
    {
        Ok(s) => s,
        Err(e) => return End::Lost(e.to_string()),
    };
    // The document version the store held as this watch was set up (its
    // mod revision, parsable or not): the view is not current before the
    // watch has reached it.
    let mut catch_up: Option<u64> = None;
    // Whether the newest version received parsed: a corrupt one keeps the
    // node stale until a good one comes (R-MN-2).
    let mut newest_good = true;
    loop {
        let msg = tokio::select! {
            _ = token.cancelled() => return End::Shutdown,
            m = stream.message() => m,
        };
        let resp = match msg {
            Ok(Some(r)) => r,
            Ok(None) => return End::Lost("etcd closed the watch".into()),
            Err(e) => return End::Lost(format!("watch broken: {e}")),
        };
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                return End::Compacted(resp.compact_revision());
            }
            return End::Lost(format!(
                "etcd cancelled the watch: {}",
                resp.cancel_reason()
            ));
        }
        if resp.created() {
            match inner.read_version().await {
                Ok((revision, corrupt)) => {
                    catch_up = Some(revision);
                    if let Some(e) = corrupt {
                        stale(inner, &e);
                        newest_good = false;
                    }
                }
                Err(e) => return End::Lost(e.to_string()),
            }
        }
        if let Some(good) = apply_events(inner, resp.events(), seen) {
            newest_good = good;
        }
        let reached = catch_up.is_some_and(|target| seen.unwrap_or(0).max(0) as u64 >= target);
        if reached && newest_good {
            inner.mark_fresh();
            *backoff = BACKOFF_MIN;
        }
    }
}

/// Applies the events of one watch response in order, advancing `seen`; a
/// version that does not parse is skipped and makes the node stale.
/// Whether the newest version parsed; `None` without events.
fn apply_events(inner: &Inner, events: &[Event], seen: &mut Option<i64>) -> Option<bool> {
    let mut newest_good = None;
    for ev in events {
        let Some(kv) = ev.kv() else { continue };
        let rev = kv.mod_revision();
        match ev.event_type() {
            EventType::Put => match inner.parse(kv) {
                Ok(set) => {
                    inner.apply(set, rev.max(0) as u64);
                    newest_good = Some(true);
                }
                Err(e) => {
                    stale(inner, &e);
                    newest_good = Some(false);
                }
            },
            EventType::Delete => {
                tracing::warn!(key = %inner.keys.profiles, "profile document deleted in etcd: no profiles");
                inner.apply(ProfileSet::default(), rev.max(0) as u64);
                newest_good = Some(true);
            }
        }
        *seen = Some(seen.unwrap_or(0).max(rev));
    }
    newest_good
}

fn stale(inner: &Inner, e: &StoreError) {
    crate::store::count_error(e);
    inner.mark_stale(&e.to_string());
}

/// Sleeps the backoff (doubling it); true on shutdown.
async fn pause(token: &CancellationToken, backoff: &mut Duration) -> bool {
    let d = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    tokio::select! {
        _ = token.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

/// Keeps the view cache equal to the last view confirmed by the store, so a
/// node that starts during an outage has the latest it knew (R-MN-2). A view
/// that came from the cache itself, or is stale, is not written back.
pub(super) async fn save_cache(inner: Arc<Inner>, token: CancellationToken) {
    let mut sets = inner.tx.subscribe();
    let mut fresh = inner.fresh.subscribe();
    let mut warned = false;
    loop {
        let (set, f) = (
            sets.borrow_and_update().clone(),
            fresh.borrow_and_update().clone(),
        );
        if !f.is_stale() && f.from_cache.is_none() {
            let view = cache::CachedView {
                site: inner.config.site.name.clone(),
                source: inner.cache_source(),
                store_revision: f.store_revision,
                saved_ms: now_ms(),
                profiles: (*set).clone(),
            };
            let path = inner.cache.clone();
            match tokio::task::spawn_blocking(move || cache::save(&path, &view)).await {
                Ok(Ok(())) => warned = false,
                Ok(Err(e)) if !warned => {
                    tracing::warn!(error = %e, "cannot write the view cache; a restart during a store outage would fail");
                    warned = true;
                }
                _ => {}
            }
        }
        tokio::select! {
            _ = token.cancelled() => return,
            r = sets.changed() => if r.is_err() { return },
            r = fresh.changed() => if r.is_err() { return },
        }
    }
}
