//! The drain view: an immutable snapshot of the site's drain state.
//!
//! Built from the site config, the profiles, and what is known of each
//! instance's health and work. Consumers hold an `Arc<DrainView>` and never
//! wait on anything to read it; a change builds a new view ([`crate::state`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::{Service, SiteConfig};
use crate::profile::ProfileSet;
use crate::ring::Ring;

/// Which zone an instance is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Zone {
    /// Takes new work.
    Normal,
    /// Its server is named by an active profile: no new work (R-AA-1).
    Drain,
}

/// What the health probe says of an instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Not probed (yet); treated as up.
    #[default]
    Unknown,
    /// Probe answers.
    Up,
    /// Probe fails.
    Down,
}

/// An instance's state as operators see it (R-ST-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Normal zone, not known to be down.
    Up,
    /// Normal zone, probe failing.
    Down,
    /// Drain zone, still has (or may have) work.
    Draining,
    /// Drain zone, no work left: safe to stop.
    Drained,
    /// Drain zone, probe failing.
    DrainingDown,
    /// No node that should report on it answered for it, and nobody knows
    /// its health: neither `up` nor `drained` can be said (R-ST-4). Only a
    /// site status (`ringsync_ops::sum`) says it; a node's own view, which
    /// routes on what it has, never does.
    Unknown,
}

impl InstanceState {
    /// Every state, in report order.
    pub const ALL: [InstanceState; 6] = [
        InstanceState::Up,
        InstanceState::Down,
        InstanceState::Draining,
        InstanceState::Drained,
        InstanceState::DrainingDown,
        InstanceState::Unknown,
    ];

    /// The name used in reports, the API and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Up => "up",
            InstanceState::Down => "down",
            InstanceState::Draining => "draining",
            InstanceState::Drained => "drained",
            InstanceState::DrainingDown => "draining_down",
            InstanceState::Unknown => "unknown",
        }
    }

    /// R-ST-1: the state from zone, health and work.
    pub fn of(zone: Zone, health: Health, work: Option<u64>) -> InstanceState {
        match (zone, health) {
            (Zone::Normal, Health::Down) => InstanceState::Down,
            (Zone::Normal, _) => InstanceState::Up,
            (Zone::Drain, Health::Down) => InstanceState::DrainingDown,
            (Zone::Drain, _) if work == Some(0) => InstanceState::Drained,
            (Zone::Drain, _) => InstanceState::Draining,
        }
    }
}

impl std::fmt::Display for InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Zone {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Zone::Normal => "normal",
            Zone::Drain => "drain",
        }
    }
}

impl Health {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }
}

/// One instance in a view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceView {
    /// Instance id.
    pub id: String,
    /// Its service.
    pub service: Service,
    /// Its server.
    pub server: String,
    /// Its effective zone. `bgmg` is always `normal` (R-BG-1), and `ws`
    /// too unless a ws pool fronts it (R-WS-1, R-WS-3).
    pub zone: Zone,
    /// Last known health.
    pub health: Health,
    /// State (R-ST-1).
    pub state: InstanceState,
    /// Work (dialogs, calls) it holds, where known, as of the view's build.
    /// Live counts: [`crate::state::DrainState::work`].
    pub work: Option<u64>,
}

/// An immutable snapshot of the site's drain state.
#[derive(Debug, Clone)]
pub struct DrainView {
    generation: u64,
    revision: u64,
    config: Arc<SiteConfig>,
    drain_zone: BTreeSet<String>,
    instances: Vec<InstanceView>,
    by_id: HashMap<String, usize>,
    /// Per instance: R-SG-2 holds (precomputed so the hot path is O(1)).
    other_normal_up: Vec<bool>,
    /// The ring of each pool of an Active-Active service, by pool name (a
    /// service's own pool has the service's name).
    rings: Vec<(String, Ring)>,
    /// Per pool: its instances up in the normal zone (R-HT-1).
    pools_up: PoolsUp,
}

impl DrainView {
    /// Builds a view. `health` and `work` are indexed like
    /// `config.instances`; missing entries count as unknown.
    pub fn build(
        config: Arc<SiteConfig>,
        profiles: &ProfileSet,
        health: &[Health],
        work: &[Option<u64>],
    ) -> DrainView {
        let drain_zone = profiles.drain_zone();
        let instances = instance_views(&config, &drain_zone, health, work);
        let by_id = instances
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id.clone(), i))
            .collect();

        let mut normal_up: HashMap<&Service, usize> = HashMap::new();
        for v in &instances {
            if counts_as_normal_up(v) {
                *normal_up.entry(&v.service).or_default() += 1;
            }
        }
        let other_normal_up = instances
            .iter()
            .map(|v| {
                normal_up.get(&v.service).copied().unwrap_or(0)
                    > usize::from(counts_as_normal_up(v))
            })
            .collect();
        let (rings, pools_up) = pool_rings(&config, &instances);

        DrainView {
            generation: 0,
            revision: profiles.revision,
            config,
            drain_zone,
            instances,
            by_id,
            other_normal_up,
            rings,
            pools_up,
        }
    }

    pub(crate) fn with_generation(mut self, generation: u64) -> DrainView {
        self.generation = generation;
        self
    }

    /// Increases with every view a [`crate::state::DrainState`] publishes (0 for a bare build).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The profile revision the view was built from.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The site configuration.
    pub fn config(&self) -> &Arc<SiteConfig> {
        &self.config
    }

    /// Servers in the drain zone (R-PR-3).
    pub fn drain_zone(&self) -> &BTreeSet<String> {
        &self.drain_zone
    }

    /// Every instance, in the order (and with the indexes) of `config.instances`.
    pub fn instances(&self) -> &[InstanceView] {
        &self.instances
    }

    /// The index of the instance with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// True if the instance must take no new work. Always false for bgmg,
    /// for ws unless a ws pool fronts it (R-BG-1, R-WS-1, R-WS-3), and for
    /// unknown indexes.
    #[inline]
    pub fn is_draining(&self, idx: usize) -> bool {
        self.instances
            .get(idx)
            .is_some_and(|v| v.zone == Zone::Drain)
    }

    /// R-SG-2: another instance of the same service is in the normal zone and
    /// not down (unknown health counts as up).
    #[inline]
    pub fn other_normal_up(&self, idx: usize) -> bool {
        self.other_normal_up.get(idx).copied().unwrap_or(false)
    }

    /// The instance that takes new work with this key (Call-ID, AoR).
    /// R-AA-1: the ring of normal-zone members that are not down; R-AA-4: if
    /// there are none, the ring of all members that are not down (the
    /// draining ones); if all are down, all members. `None` if the service
    /// has no instance or is not Active-Active (nor `ws` behind a ws pool,
    /// R-WS-3).
    #[inline]
    pub fn pick(&self, service: &Service, key: &[u8]) -> Option<usize> {
        self.ring(service)?.get(key)
    }

    /// The ring [`DrainView::pick`] uses for this service: its own pool's
    /// (the instances in another pool are not in it, R-HT-1).
    pub fn ring(&self, service: &Service) -> Option<&Ring> {
        self.pool_ring(service.as_str())
    }

    /// The instance of pool `pool` that takes new work with this key, as
    /// [`DrainView::pick`] does for a service's own pool (R-HT-1).
    #[inline]
    pub fn pick_in_pool(&self, pool: &str, key: &[u8]) -> Option<usize> {
        self.pool_ring(pool)?.get(key)
    }

    /// The ring of pool `pool`.
    pub fn pool_ring(&self, pool: &str) -> Option<&Ring> {
        self.rings.iter().find(|(p, _)| p == pool).map(|(_, r)| r)
    }

    /// How many instances of pool `pool` are up in the normal zone (not
    /// down; unknown health counts as up, as for R-SG-2): what its
    /// `threshold` is compared with (R-HT-1). 0 for an unknown pool.
    pub fn pool_up(&self, pool: &str) -> usize {
        self.pools_up
            .iter()
            .find(|(p, _)| p == pool)
            .map_or(0, |(_, n)| *n)
    }
}

/// Each instance's zone, health, work and state (R-ST-1).
fn instance_views(
    config: &SiteConfig,
    drain_zone: &BTreeSet<String>,
    health: &[Health],
    work: &[Option<u64>],
) -> Vec<InstanceView> {
    let ws_pooled = config.ws_pooled();
    config
        .instances
        .iter()
        .enumerate()
        .map(|(i, inst)| {
            // R-BG-1, R-WS-1: bgmg and ws are never drained; but a ws a ws
            // pool fronts goes with its server, so the pool sends it no new
            // connection and status tells when its open ones are gone
            // (R-WS-3): nothing of it is refused or cut.
            let exempt =
                inst.service.never_drained() && !(ws_pooled && inst.service == Service::Ws);
            let zone = if drain_zone.contains(&inst.server) && !exempt {
                Zone::Drain
            } else {
                Zone::Normal
            };
            let health = health.get(i).copied().unwrap_or_default();
            let work = work.get(i).copied().flatten();
            InstanceView {
                id: inst.id.clone(),
                service: inst.service.clone(),
                server: inst.server.clone(),
                zone,
                health,
                state: InstanceState::of(zone, health, work),
                work,
            }
        })
        .collect()
}

/// Instances up in the normal zone, per pool name.
type PoolsUp = Vec<(String, usize)>;

/// Every pool of an Active-Active service, by name (R-HT-1: the instances
/// whose `pool` is the name; by default the service's), and the `ws`
/// instances' one behind a ws pool (R-WS-3): its ring, and how many of its
/// instances are up in the normal zone.
fn pool_rings(config: &SiteConfig, instances: &[InstanceView]) -> (Vec<(String, Ring)>, PoolsUp) {
    let ws_pooled = config.ws_pooled();
    let mut pools: Vec<&str> = config
        .instances
        .iter()
        .filter(|i| i.service.is_active_active() || (ws_pooled && i.service == Service::Ws))
        .map(|i| i.pool.as_str())
        .collect();
    pools.sort_unstable();
    pools.dedup();
    let pool_of: Vec<&str> = config.instances.iter().map(|i| i.pool.as_str()).collect();
    let rings = pools
        .iter()
        .map(|&p| {
            let member = |i: usize| pool_of.get(i) == Some(&p);
            (p.to_owned(), ring_for(instances, &member))
        })
        .collect();
    let pools_up = pools
        .iter()
        .map(|&p| {
            let up = (0..instances.len())
                .filter(|&i| pool_of.get(i) == Some(&p) && counts_as_normal_up(&instances[i]))
                .count();
            (p.to_owned(), up)
        })
        .collect();
    (rings, pools_up)
}

fn counts_as_normal_up(v: &InstanceView) -> bool {
    v.zone == Zone::Normal && v.health != Health::Down
}

fn ring_for(instances: &[InstanceView], in_pool: &dyn Fn(usize) -> bool) -> Ring {
    let members = |keep: &dyn Fn(&InstanceView) -> bool| {
        instances
            .iter()
            .enumerate()
            .filter(|&(i, v)| in_pool(i) && keep(v))
            .map(|(i, v)| (i, v.id.as_str()))
            .collect::<Vec<_>>()
    };
    // R-AA-1: normal zone and not down.
    let mut m = members(&counts_as_normal_up);
    if m.is_empty() {
        // R-AA-4: everyone is draining (or down): the draining ones still serve.
        m = members(&|v| v.health != Health::Down);
    }
    if m.is_empty() {
        // All down: keep routing somewhere rather than refusing outright.
        m = members(&|_| true);
    }
    let configured = (0..instances.len()).filter(|&i| in_pool(i)).count();
    Ring::with_vnodes(m, crate::ring::vnodes_for_pool(configured))
}

#[cfg(test)]
mod tests;
