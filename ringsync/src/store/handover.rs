//! Where the Active-Passive handover keeps its records: the desired and
//! confirmed leader of every group and the planner's last move
//! ([`HandoverState`]), and the election of the one planner that may write
//! desired leaders (R-MN-3).
//!
//! Both backends implement [`HandoverStore`]: the embedded store in files
//! next to its profiles file, with a file lock as the election
//! ([`super::handover_file`]); etcd under `P/handover/`, with a lease
//! election whose lease fences every move ([`super::etcd`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::StoreError;
use crate::handover::record::{Confirmed, Desired, HandoverState, PlannerRecord};

/// The handover's records in a store.
pub trait HandoverStore: Send + Sync + 'static {
    /// Every record, read from the backend (not a cache), with the elected
    /// planner where the backend can tell.
    fn read(&self) -> BoxFuture<'_, Result<Arc<HandoverState>, StoreError>>;
    /// A new snapshot on every change, whoever made it.
    fn watch(&self) -> watch::Receiver<Arc<HandoverState>>;
    /// Publishes a move: the group's desired leader and the planner's
    /// record, together, and only while `lead` is held (R-MN-3).
    fn publish<'a>(
        &'a self,
        lead: &'a Leadership,
        group: &'a str,
        desired: Desired,
        planner: PlannerRecord,
    ) -> BoxFuture<'a, Result<Published, StoreError>>;
    /// A service's confirmation of the leader it has.
    fn confirm<'a>(
        &'a self,
        group: &'a str,
        confirmed: Confirmed,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// One attempt to become the site's planner (R-MN-3).
    fn campaign<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<Campaign, StoreError>>;
    /// Where the records are, for messages.
    fn location(&self) -> String;
}

/// What [`HandoverStore::publish`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Written.
    Done,
    /// Nothing written: this process is no longer the planner.
    NotPlanner,
}

/// What [`HandoverStore::campaign`] gave.
pub enum Campaign {
    /// This node plans until the leadership is lost or resigned.
    Elected(Leadership),
    /// Another node plans.
    Held {
        /// Which one, when the store says.
        by: Option<String>,
    },
}

/// Type of the step that gives a leadership up.
pub(crate) type Release = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send + Sync>;

/// The right to plan (R-MN-3), held until it is lost or resigned. Every
/// publication names it; the backend refuses publications of a leadership
/// it no longer holds.
pub struct Leadership {
    node: String,
    fence: i64,
    held: watch::Receiver<bool>,
    release: Option<Release>,
}

impl Leadership {
    /// A leadership of `node`: `fence` is the backend's token for it (the
    /// etcd lease; 0 for a file lock), `held` turns false when it is lost,
    /// `release` gives it up.
    pub(crate) fn new(
        node: &str,
        fence: i64,
        held: watch::Receiver<bool>,
        release: Release,
    ) -> Leadership {
        Leadership {
            node: node.to_owned(),
            fence,
            held,
            release: Some(release),
        }
    }

    /// The backend's token for it: the etcd lease every move is written
    /// under (0 for the embedded store's file lock).
    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// The node that holds it.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// False once it is lost (a lease that could not be renewed).
    pub fn is_held(&self) -> bool {
        *self.held.borrow()
    }

    /// Resolves when it is lost.
    pub async fn lost(&self) {
        let mut rx = self.held.clone();
        let _ = rx.wait_for(|h| !h).await;
    }

    /// Gives it up at once, so another node can be elected without waiting
    /// for a lease to expire.
    pub async fn resign(mut self) {
        if let Some(release) = self.release.take() {
            release().await;
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            // Best effort when dropped without `resign` (a task aborted).
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(release());
            }
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("node", &self.node)
            .field("fence", &self.fence)
            .field("held", &self.is_held())
            .finish()
    }
}
