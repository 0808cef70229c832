//! One engine's driver: while this node is the elected one, read the
//! engine, compare with the drain view, set what differs, audit and report
//! it; again on every new view and every `resync_ms`; with backoff while
//! the engine fails. Each engine has its own task, so one that hangs or
//! answers garbage delays no other (R-EX-1).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::backend::{Backend, Seen, Want};
use super::error::EngineError;
use super::report::{Correction, EngineInstance, EngineStatus};
use ringsync::config::EngineConfig;
use ringsync::state::DrainState;
use ringsync::store::audit::Actor;
use ringsync::store::Store;
use ringsync::view::DrainView;
use ringsync::work::now_ms;

/// The first wait after a failure; doubled per failure up to the resync
/// interval.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// A driver and what it needs.
pub(crate) struct Driver {
    pub(crate) cfg: EngineConfig,
    pub(crate) backend: Box<dyn Backend>,
    pub(crate) drain: Arc<DrainState>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) status: Arc<Mutex<EngineStatus>>,
    pub(crate) acting: watch::Receiver<bool>,
    /// What the engine was last seen or made to hold, per instance: a
    /// difference from it that the view did not ask for is a divergence.
    pub(crate) held: HashMap<String, Want>,
    /// The instances it drives, in site-file order.
    pub(crate) ids: Vec<String>,
}

/// A change to make: the instance, what to set, what the engine said.
struct Todo {
    id: String,
    want: Want,
    found: String,
    diverged: bool,
}

/// R-EX-1 (with R-AA-4): a draining instance takes no new selections while
/// another of its service can; when every one drains they all stay
/// selectable, as the gate's ring does.
pub(crate) fn want_of(view: &DrainView, id: &str) -> Want {
    match view.index_of(id) {
        Some(i) if view.is_draining(i) && view.other_normal_up(i) => Want::Drain,
        _ => Want::Active,
    }
}

impl Driver {
    fn with_status<T>(&self, f: impl FnOnce(&mut EngineStatus) -> T) -> T {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Drives until `shutdown`.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut views = self.drain.subscribe();
        let mut failures: u32 = 0;
        loop {
            views.borrow_and_update();
            let acting = *self.acting.borrow_and_update();
            self.with_status(|s| s.acting = acting);
            let wait = if !acting {
                None
            } else if let Err(e) = self.round().await {
                failures = failures.saturating_add(1);
                self.failed(&e, failures);
                let back = FIRST_BACKOFF.saturating_mul(1 << failures.min(10));
                Some(back.min(self.cfg.resync().max(FIRST_BACKOFF)))
            } else {
                failures = 0;
                Some(self.cfg.resync())
            };
            let sleep = async {
                match wait {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = views.changed() => {}
                _ = self.acting.changed() => {}
                _ = sleep => {}
            }
        }
    }

    /// Read, set what differs, read again to verify.
    async fn round(&mut self) -> Result<(), EngineError> {
        let view = self.drain.view();
        let seen = self.backend.read().await?;
        self.reached();
        let todo = self.compare(&view, &seen);
        if todo.is_empty() {
            return self.report(&view, &seen);
        }
        let mut first_err = None;
        for t in todo {
            if let Err(e) = self.set(&view, t).await {
                first_err.get_or_insert(e);
            }
        }
        let seen = self.backend.read().await?;
        let r = self.report(&view, &seen);
        match first_err {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// What differs from the view, and whether the engine drifted.
    fn compare(&mut self, view: &DrainView, seen: &BTreeMap<String, Seen>) -> Vec<Todo> {
        let mut todo = Vec::new();
        for id in &self.ids {
            let want = want_of(view, id);
            let Some(s) = seen.get(id) else { continue };
            if s.agrees(want) {
                self.held.insert(id.clone(), want);
                continue;
            }
            todo.push(Todo {
                id: id.clone(),
                want,
                found: s.says.clone(),
                diverged: self.held.get(id) == Some(&want),
            });
        }
        todo
    }

    /// Sets one destination, audits it (who: `engine:<name>`), logs it.
    async fn set(&mut self, view: &DrainView, t: Todo) -> Result<(), EngineError> {
        let r = self.backend.apply(&t.id, t.want).await;
        let actor = Actor {
            who: format!("engine:{}", self.cfg.name),
            role: None,
            from: self.backend.address(),
        };
        let action = if t.diverged {
            format!(
                "engine {} (re-applied: the engine said {})",
                t.want.as_str(),
                t.found
            )
        } else {
            format!("engine {}", t.want.as_str())
        };
        let mut rec = actor.record(&action, Some(&t.id));
        rec.revision = Some(view.revision());
        match &r {
            Ok(()) => {
                rec.status = 200;
                self.held.insert(t.id.clone(), t.want);
                let engine = &self.cfg.name;
                if t.diverged {
                    tracing::warn!(%engine, instance = %t.id, found = %t.found, want = t.want.as_str(),
                        "engine diverged from the drain view; re-applied");
                } else {
                    tracing::info!(%engine, instance = %t.id, want = t.want.as_str(), revision = view.revision(),
                        "engine set");
                }
                self.with_status(|s| {
                    s.changes += 1;
                    if t.diverged {
                        s.corrections += 1;
                        s.last_correction = Some(Correction {
                            at_ms: now_ms(),
                            instance: t.id.clone(),
                            found: t.found.clone(),
                            want: t.want,
                        });
                    }
                });
            }
            Err(e) => {
                rec.status = 503;
                rec.error = Some(e.to_string());
            }
        }
        if let Err(e) = self.store.append_audit(rec).await {
            tracing::warn!(engine = %self.cfg.name, error = %e, "engine change not audited");
        }
        r
    }

    /// Per instance what the engine says; the revision it holds when it
    /// holds all of the view.
    fn report(&self, view: &DrainView, seen: &BTreeMap<String, Seen>) -> Result<(), EngineError> {
        let rows: Vec<EngineInstance> = self
            .ids
            .iter()
            .map(|id| {
                let want = want_of(view, id);
                let s = seen.get(id);
                EngineInstance {
                    id: id.clone(),
                    target: self.backend.target(id).unwrap_or_default(),
                    want,
                    says: s.map(|s| s.says.clone()),
                    agrees: s.is_some_and(|s| s.agrees(want)),
                }
            })
            .collect();
        let missing: Vec<String> = rows
            .iter()
            .filter(|r| r.says.is_none())
            .map(|r| format!("{} ({})", r.id, r.target))
            .collect();
        let all = rows.iter().all(|r| r.agrees);
        self.with_status(|s| {
            s.instances = rows;
            s.revision = all.then(|| view.revision());
            if missing.is_empty() {
                s.error = None;
            }
        });
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Refused {
                at: self.backend.address(),
                reason: format!("not in the engine: {}", missing.join(", ")),
            })
        }
    }

    fn reached(&self) {
        self.with_status(|s| {
            if s.reachable != Some(true) {
                s.reachable = Some(true);
                s.since_ms = Some(now_ms());
                tracing::info!(engine = %s.name, address = %s.address, "engine reachable");
            }
        });
    }

    /// A failed round. An engine that gave no answer in its API's terms
    /// (nothing listening, silence, garbage) is not reachable from now on,
    /// whether or not it ever answered well, and holds nothing known; one
    /// that answered and refused was reached (R-EX-1). Either way status
    /// has `reachable` and `since_ms`.
    fn failed(&self, e: &EngineError, failures: u32) {
        let reachable = !e.unanswered();
        self.with_status(|s| {
            if s.reachable != Some(reachable) {
                s.reachable = Some(reachable);
                s.since_ms = Some(now_ms());
            }
            if !reachable {
                s.revision = None;
                for r in &mut s.instances {
                    r.says = None;
                    r.agrees = false;
                }
            }
            if s.error.as_deref() != Some(&e.to_string()) || failures == 1 {
                tracing::warn!(engine = %s.name, error = %e, "engine not driven; retrying");
            }
            s.error = Some(e.to_string());
        });
    }
}
