//! The live drain state every process holds.
//!
//! Readers call [`DrainState::view`]: one arc-swap load, no lock, no I/O.
//! Writers (the store follower, health probes, work reporters) update the
//! inputs under a `std::sync::Mutex` that is never held across an `.await`,
//! build a new [`DrainView`] and publish it through arc-swap and a watch
//! channel.
//!
//! The state also carries the store's [`Freshness`] (R-MN-2), so every node
//! (gate, media controller, ringsync serve) can show in its status, metrics
//! and `/readyz` detail whether its view is current, and since when not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::SiteConfig;
use crate::profile::ProfileSet;
use crate::store::{Freshness, Store};
use crate::view::{DrainView, Health, InstanceView};

/// Marks "no count reported" in the work atomics.
const NO_WORK: u64 = u64::MAX;

/// The live handle: the current view plus what it is built from.
pub struct DrainState {
    /// Swapped whole by [`DrainState::set_config`] (a site file reloaded).
    config: ArcSwap<SiteConfig>,
    current: ArcSwap<DrainView>,
    tx: watch::Sender<Arc<DrainView>>,
    inputs: Mutex<Inputs>,
    /// Exact work counts, updated on every report without a rebuild; a
    /// longer copy replaces it when a reload adds instances (a report
    /// that lands on the old one meanwhile is repeated by the next).
    work: ArcSwap<Vec<AtomicU64>>,
    freshness: ArcSwap<Freshness>,
    /// Profile sets applied that differed from the one before.
    updates: AtomicU64,
}

struct Inputs {
    generation: u64,
    profiles: Arc<ProfileSet>,
    health: Vec<Health>,
    /// Work as of the last rebuild; only its zero/non-zero-ness is kept fresh.
    work: Vec<Option<u64>>,
}

impl DrainState {
    /// A state with no profiles (everything in the normal zone) and unknown health.
    pub fn new(config: Arc<SiteConfig>) -> Arc<DrainState> {
        let n = config.instances.len();
        let inputs = Inputs {
            generation: 1,
            profiles: Arc::new(ProfileSet::default()),
            health: vec![Health::Unknown; n],
            work: vec![None; n],
        };
        let view = Arc::new(
            DrainView::build(
                config.clone(),
                &inputs.profiles,
                &inputs.health,
                &inputs.work,
            )
            .with_generation(inputs.generation),
        );
        let (tx, _) = watch::channel(view.clone());
        site_file_info(&config, 1.0);
        Arc::new(DrainState {
            current: ArcSwap::new(view),
            tx,
            inputs: Mutex::new(inputs),
            work: ArcSwap::from_pointee((0..n).map(|_| AtomicU64::new(NO_WORK)).collect()),
            freshness: ArcSwap::from_pointee(Freshness::default()),
            updates: AtomicU64::new(0),
            config: ArcSwap::new(config),
        })
    }

    /// The current view. Lock-free; never waits on I/O (hot path).
    #[inline]
    pub fn view(&self) -> Arc<DrainView> {
        self.current.load_full()
    }

    /// Every new view, as it is published.
    pub fn subscribe(&self) -> watch::Receiver<Arc<DrainView>> {
        self.tx.subscribe()
    }

    /// The site configuration in force.
    pub fn config(&self) -> Arc<SiteConfig> {
        self.config.load_full()
    }

    /// Takes a site file read again, which the caller checked with
    /// [`crate::config::restart_only`]: the instances of the old config
    /// keep their index, new ones come after. The view is rebuilt at once:
    /// whoever loads it next sees the new instances, rings and servers; the
    /// new instances' health and work start unknown.
    pub fn set_config(&self, config: Arc<SiteConfig>) {
        let n = config.instances.len();
        let mut inputs = self.lock();
        inputs.health.resize(n, Health::Unknown);
        inputs.work.resize(n, None);
        let old = self.work.load();
        if old.len() < n {
            let grown = (0..n)
                .map(|i| {
                    let w = old.get(i).map_or(NO_WORK, |a| a.load(Ordering::Relaxed));
                    AtomicU64::new(w)
                })
                .collect();
            self.work.store(Arc::new(grown));
        }
        site_file_info(&self.config.load(), 0.0);
        site_file_info(&config, 1.0);
        self.config.store(config);
        self.rebuild(&mut inputs);
    }

    /// Applies a new profile set (R-PR-2). Ignored if it is the one applied.
    pub fn set_profiles(&self, p: Arc<ProfileSet>) {
        let mut inputs = self.lock();
        if *inputs.profiles == *p {
            return;
        }
        let revision = p.revision;
        inputs.profiles = p;
        // Counted before the view is published, so whoever sees the new
        // view also sees it counted.
        self.updates.fetch_add(1, Ordering::Relaxed);
        self.rebuild(&mut inputs);
        metrics::counter!("ringsync_profile_updates_applied_total").increment(1);
        metrics::gauge!("ringsync_view_revision").set(revision as f64);
    }

    /// How many different profile sets this state has applied: a change
    /// delivered twice (a watch resumed after an outage) counts once.
    pub fn profile_updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }

    /// Whether the view's profiles are current (R-MN-2). Lock-free.
    pub fn freshness(&self) -> Arc<Freshness> {
        self.freshness.load_full()
    }

    /// Records the store's freshness and exports it as metrics:
    /// `ringsync_store_stale` (0/1), `ringsync_store_stale_since_seconds`
    /// (Unix time, 0 when fresh) and `ringsync_store_revision`.
    pub fn set_freshness(&self, f: Freshness) {
        metrics::gauge!("ringsync_store_stale").set(if f.is_stale() { 1.0 } else { 0.0 });
        metrics::gauge!("ringsync_store_stale_since_seconds")
            .set(f.stale_since_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
        metrics::gauge!("ringsync_store_revision").set(f.store_revision as f64);
        self.freshness.store(Arc::new(f));
    }

    /// Records an instance's health; rebuilds only if it changed.
    pub fn set_health(&self, idx: usize, h: Health) {
        let mut inputs = self.lock();
        match inputs.health.get_mut(idx) {
            Some(cur) if *cur != h => *cur = h,
            _ => return,
        }
        self.rebuild(&mut inputs);
    }

    /// Records the work an instance holds. The exact count is kept in an
    /// atomic ([`DrainState::work`]); the view is rebuilt only when the count
    /// crosses zero, which is what turns `draining` into `drained` (R-ST-1).
    pub fn set_work(&self, idx: usize, work: u64) {
        match self.work.load().get(idx) {
            Some(slot) => slot.store(work.min(NO_WORK - 1), Ordering::Relaxed),
            None => return,
        }
        let mut inputs = self.lock();
        let Some(cur) = inputs.work.get_mut(idx) else {
            return;
        };
        let crosses = match *cur {
            None => true,
            Some(old) => (old == 0) != (work == 0),
        };
        *cur = Some(work);
        if crosses {
            self.rebuild(&mut inputs);
        }
    }

    /// Records that the work an instance holds is not known (the reporter
    /// restarted, or its table overflowed): the instance is then never
    /// `drained` on this state's word (R-ST-3). Rebuilds only if a count was
    /// known before.
    pub fn clear_work(&self, idx: usize) {
        match self.work.load().get(idx) {
            Some(slot) => slot.store(NO_WORK, Ordering::Relaxed),
            None => return,
        }
        let mut inputs = self.lock();
        match inputs.work.get_mut(idx) {
            Some(cur) if cur.is_some() => *cur = None,
            _ => return,
        }
        self.rebuild(&mut inputs);
    }

    /// The last work count reported for an instance.
    pub fn work(&self, idx: usize) -> Option<u64> {
        let w = self.work.load().get(idx)?.load(Ordering::Relaxed);
        (w != NO_WORK).then_some(w)
    }

    /// The instances of the current view with live work counts (R-ST-1 reports).
    pub fn report(&self) -> Vec<InstanceView> {
        let view = self.view();
        view.instances()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut v = v.clone();
                if let Some(w) = self.work(i) {
                    v.work = Some(w);
                }
                v
            })
            .collect()
    }

    /// Follows a store: applies its current snapshot and freshness, then
    /// every new one, until `shutdown` (R-PR-2, R-MN-2).
    pub fn follow(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        let state = self.clone();
        tokio::spawn(async move {
            let mut rx = store.watch();
            let mut fresh = store.freshness();
            loop {
                let set = rx.borrow_and_update().clone();
                state.set_profiles(set);
                state.set_freshness(fresh.borrow_and_update().clone());
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    changed = fresh.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inputs> {
        // A panic elsewhere while holding the lock leaves consistent inputs
        // (every update is a single assignment), so poisoning is not fatal.
        self.inputs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rebuild(&self, inputs: &mut Inputs) {
        inputs.generation += 1;
        let view = Arc::new(
            DrainView::build(
                self.config.load_full(),
                &inputs.profiles,
                &inputs.health,
                &inputs.work,
            )
            .with_generation(inputs.generation),
        );
        self.current.store(view.clone());
        self.tx.send_replace(view);
    }
}

/// `ringsync_site_file_info{hash} 1`: the site file this node runs (its
/// short hash, [`crate::config::file_hash`]); a reload sets the old hash's
/// series to 0, so a query keeps `== 1`.
fn site_file_info(config: &SiteConfig, value: f64) {
    metrics::gauge!("ringsync_site_file_info", "hash" => config.hash.clone()).set(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Profile, ProfileState};
    use crate::view::InstanceState;
    use std::path::Path;

    fn state() -> Arc<DrainState> {
        let c = SiteConfig::from_str_at(
            "[site]\nname = \"t\"\n[[server]]\nname = \"srv-a\"\n[[server]]\nname = \"srv-b\"\n\
             [[instance]]\nid = \"sg-a\"\nservice = \"sg\"\nserver = \"srv-a\"\nsip = \"127.0.0.1:1\"\n\
             [[instance]]\nid = \"sg-b\"\nservice = \"sg\"\nserver = \"srv-b\"\nsip = \"127.0.0.1:2\"\n",
            Path::new("/t.toml"),
        )
        .unwrap();
        DrainState::new(Arc::new(c))
    }

    fn drain_a() -> Arc<ProfileSet> {
        Arc::new(ProfileSet {
            revision: 1,
            profiles: vec![Profile {
                id: "p-1".into(),
                name: "a".into(),
                description: String::new(),
                revision: 0,
                servers: vec!["srv-a".into()],
                state: ProfileState::Active,
            }],
        })
    }

    #[test]
    fn r_st_1_work_counts_drive_drained_without_rebuilding_per_count() {
        let s = state();
        s.set_profiles(drain_a());
        let g = s.view().generation();
        assert_eq!(s.view().instances()[0].state, InstanceState::Draining);
        s.set_work(0, 7);
        let g1 = s.view().generation();
        assert!(g1 > g, "first report rebuilds");
        s.set_work(0, 3);
        s.set_work(0, 12);
        assert_eq!(s.view().generation(), g1, "count changes do not rebuild");
        assert_eq!(s.work(0), Some(12));
        assert_eq!(s.report()[0].work, Some(12));
        s.set_work(0, 0);
        assert_eq!(s.view().instances()[0].state, InstanceState::Drained);
        s.set_health(0, Health::Down);
        assert_eq!(s.view().instances()[0].state, InstanceState::DrainingDown);
        let g2 = s.view().generation();
        s.set_health(0, Health::Down);
        assert_eq!(s.view().generation(), g2, "same health: no rebuild");
        s.set_health(99, Health::Down);
        s.set_work(99, 1);
        assert_eq!(s.work(99), None);
        s.clear_work(99);
    }

    /// R-ST-3: a count that becomes unknown takes `drained` away again.
    #[test]
    fn r_st_3_unknown_work_is_never_drained() {
        let s = state();
        s.set_profiles(drain_a());
        s.set_work(0, 0);
        assert_eq!(s.view().instances()[0].state, InstanceState::Drained);
        let g = s.view().generation();
        s.clear_work(0);
        assert_eq!(s.work(0), None);
        assert_eq!(s.view().instances()[0].state, InstanceState::Draining);
        assert_eq!(s.view().instances()[0].work, None);
        s.clear_work(0);
        assert_eq!(s.view().generation(), g + 1, "rebuilt once, not again");
    }

    #[test]
    fn subscribers_see_each_new_view() {
        let s = state();
        let mut rx = s.subscribe();
        s.set_profiles(drain_a());
        assert!(rx.has_changed().unwrap());
        assert!(rx.borrow_and_update().is_draining(0));
        s.set_profiles(drain_a());
        assert!(!rx.has_changed().unwrap(), "same profiles: no new view");
    }
}
