//! R-HT-1: a pool under its health threshold sends its new dialogs to its
//! backup.
//!
//! Each `[[pool]]` is watched here. A pool goes into backup as soon as
//! fewer than `threshold` of its instances are up in the normal zone (the
//! view's [`DrainView::pool_up`]), and comes back only once it has been at
//! or above the threshold for `hold_s` without a break: an instance that
//! flaps keeps the pool in backup instead of flapping the pool with it.
//! The state is moved by the routing core when a new dialog asks
//! ([`Backups::target`]) and by the core's once-a-second sweep, so a pool
//! comes back, and its metrics and report say so, without traffic.
//!
//! Nothing in-dialog looks here: a dialog's Record-Route token names the
//! instance that took it, in the pool or in the backup, and in-dialog
//! requests follow the token as always.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ringsync::config::{Pool, SiteConfig};
use ringsync::view::DrainView;
use ringsync::work::{self, PoolBackup};

use crate::metrics as m;

/// Every watched pool.
#[derive(Debug)]
pub(crate) struct Backups {
    pools: Vec<Watch>,
}

/// One `[[pool]]` and where it stands.
#[derive(Debug)]
struct Watch {
    pool: Pool,
    /// Its configured instances (for the reason's "1 of 3").
    size: usize,
    hold: Duration,
    state: Mutex<State>,
    active: metrics::Gauge,
    to_backup: metrics::Counter,
}

/// Where a pool stands.
#[derive(Debug, Default)]
struct State {
    /// Set while in backup.
    on: Option<On>,
    /// In backup: since when the pool has been at or above its threshold.
    ok_since: Option<Instant>,
}

#[derive(Debug, Clone)]
struct On {
    since_ms: u64,
    /// Its instances up in the normal zone when last looked at.
    up: usize,
}

impl Backups {
    /// Watches every `[[pool]]` of `config`.
    pub(crate) fn new(config: &SiteConfig) -> Backups {
        let pools = config
            .pools
            .iter()
            .map(|p| {
                let active = metrics::gauge!(m::POOL_BACKUP, "pool" => p.name.clone());
                active.set(0.0);
                Watch {
                    size: config.instances.iter().filter(|i| i.pool == p.name).count(),
                    hold: Duration::from_secs(p.hold_s.into()),
                    state: Mutex::new(State::default()),
                    active,
                    to_backup: metrics::counter!(m::POOL_BACKUP_DIALOGS, "pool" => p.name.clone()),
                    pool: p.clone(),
                }
            })
            .collect();
        Backups { pools }
    }

    /// The pool new dialogs for `pool` go to now: `pool` itself, or, while
    /// it is in backup, its backup (and the backup's, if that one is in
    /// backup too; the config has no cycles). A backup none of whose
    /// instances is up in the normal zone takes nothing: the pool keeps
    /// its new dialogs, as R-AA-4 has it, rather than send them nowhere.
    pub(crate) fn target<'a>(&'a self, pool: &'a str, view: &DrainView, now: Instant) -> &'a str {
        let mut at = pool;
        // At most one step per pool: the config refused cycles.
        for _ in 0..self.pools.len() {
            let Some(w) = self.pools.iter().find(|w| w.pool.name == at) else {
                break;
            };
            if !w.check(view, now) {
                break;
            }
            at = &w.pool.backup;
        }
        if at != pool && view.pool_up(at) == 0 {
            return pool;
        }
        if at != pool {
            if let Some(w) = self.pools.iter().find(|w| w.pool.name == pool) {
                w.to_backup.increment(1);
            }
        }
        at
    }

    /// Whether a guard of an instance in `pool` sends new dialogs it would
    /// refuse to the backup (`guard_to_backup`).
    pub(crate) fn guards_to_backup(&self, pool: &str) -> bool {
        self.pools
            .iter()
            .any(|w| w.pool.name == pool && w.pool.guard_to_backup)
    }

    /// Looks at every pool (the core's sweep): a pool whose hold is over
    /// comes back without waiting for a new dialog.
    pub(crate) fn check_all(&self, view: &DrainView, now: Instant) {
        for w in &self.pools {
            w.check(view, now);
        }
    }

    /// The pools in backup, for the gate's work report (`ringsync status`).
    pub(crate) fn report(&self) -> Vec<PoolBackup> {
        self.pools
            .iter()
            .filter_map(|w| {
                let on = w.state.lock().ok()?.on.clone()?;
                Some(PoolBackup {
                    pool: w.pool.name.clone(),
                    backup: w.pool.backup.clone(),
                    reason: w.reason(on.up),
                    since_ms: on.since_ms,
                })
            })
            .collect()
    }
}

impl Watch {
    /// Moves the pool's state with the view at `now`; true while in backup.
    fn check(&self, view: &DrainView, now: Instant) -> bool {
        let up = view.pool_up(&self.pool.name);
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        if up < self.pool.threshold {
            st.ok_since = None;
            match &mut st.on {
                Some(on) => on.up = up,
                None => {
                    st.on = Some(On {
                        since_ms: work::now_ms(),
                        up,
                    });
                    drop(st);
                    self.changed(true, up);
                }
            }
            return true;
        }
        let Some(on) = &mut st.on else {
            return false;
        };
        on.up = up;
        let since = *st.ok_since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.hold {
            return true;
        }
        *st = State::default();
        drop(st);
        self.changed(false, up);
        false
    }

    fn reason(&self, up: usize) -> String {
        format!(
            "{up} of {} instances up in the normal zone, threshold {}",
            self.size, self.pool.threshold
        )
    }

    /// Logs and counts a change (R-HT-1).
    fn changed(&self, to_backup: bool, up: usize) {
        let pool = self.pool.name.as_str();
        self.active.set(if to_backup { 1.0 } else { 0.0 });
        m::pool_backup_change(pool, if to_backup { "backup" } else { "pool" });
        if to_backup {
            tracing::warn!(
                pool,
                backup = %self.pool.backup,
                reason = %self.reason(up),
                "pool under its threshold: its new dialogs go to the backup (R-HT-1)"
            );
        } else {
            tracing::info!(
                pool,
                backup = %self.pool.backup,
                reason = %self.reason(up),
                hold_s = self.pool.hold_s,
                "pool at its threshold for hold_s: its new dialogs come back from the backup (R-HT-1)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringsync::profile::{Profile, ProfileSet, ProfileState};
    use ringsync::view::Health;
    use std::path::Path;
    use std::sync::Arc;

    const SITE: &str = r#"
[site]
name = "t"
[[server]]
name = "a"
[[server]]
name = "b"
[[server]]
name = "c"
[[server]]
name = "d"
[[instance]]
id = "sg-a"
service = "sg"
server = "a"
sip = "127.0.0.1:5061"
[[instance]]
id = "sg-b"
service = "sg"
server = "b"
sip = "127.0.0.1:5062"
[[instance]]
id = "sg-c"
service = "sg"
server = "c"
sip = "127.0.0.1:5063"
[[instance]]
id = "sg-d"
service = "sg"
server = "d"
sip = "127.0.0.1:5064"
pool = "dr"
[[pool]]
name = "sg"
threshold = 2
backup = "dr"
hold_s = 5
[[listener]]
name = "l"
bind = "127.0.0.1:5060"
mode = "balance"
pool = "sg"
leg = "subscriber"
"#;

    fn view(config: &Arc<SiteConfig>, drained: &[&str], health: &[Health]) -> DrainView {
        let profiles = ProfileSet {
            revision: 1,
            profiles: vec![Profile {
                id: "p".into(),
                name: "p".into(),
                description: String::new(),
                servers: drained.iter().map(|s| (*s).to_owned()).collect(),
                state: ProfileState::Active,
                revision: 1,
            }],
        };
        DrainView::build(config.clone(), &profiles, health, &[])
    }

    /// R-HT-1: under the threshold at once; back only after `hold_s` at
    /// it, and a flap inside the hold starts the hold again.
    #[test]
    fn r_ht_1_enters_at_once_and_leaves_after_the_hold() {
        let config = Arc::new(SiteConfig::from_str_at(SITE, Path::new("t.toml")).unwrap());
        let b = Backups::new(&config);
        let t0 = Instant::now();
        let all = view(&config, &[], &[]);
        let two_drained = view(&config, &["a", "b"], &[]);
        assert_eq!(b.target("sg", &all, t0), "sg");
        assert_eq!(b.target("sg", &two_drained, t0), "dr");
        let report = b.report();
        assert_eq!(report.len(), 1);
        assert_eq!(
            report[0].reason,
            "1 of 3 instances up in the normal zone, threshold 2"
        );
        // Lifted: still in backup for the hold.
        assert_eq!(b.target("sg", &all, t0 + Duration::from_secs(1)), "dr");
        // A flap (one of the three down again) restarts the hold.
        let down = [Health::Down, Health::Up, Health::Up, Health::Up];
        let one_drained_one_down = view(&config, &["b"], &down);
        let t = t0 + Duration::from_secs(4);
        assert_eq!(b.target("sg", &one_drained_one_down, t), "dr");
        assert_eq!(b.target("sg", &all, t + Duration::from_secs(1)), "dr");
        assert_eq!(b.target("sg", &all, t + Duration::from_secs(5)), "dr");
        b.check_all(&all, t + Duration::from_secs(6));
        assert!(b.report().is_empty(), "back after hold_s at the threshold");
        assert_eq!(b.target("sg", &all, t + Duration::from_secs(6)), "sg");
    }

    /// R-HT-1: a backup with nothing up takes nothing.
    #[test]
    fn r_ht_1_a_backup_with_nothing_up_leaves_the_dialogs_to_the_pool() {
        let config = Arc::new(SiteConfig::from_str_at(SITE, Path::new("t.toml")).unwrap());
        let b = Backups::new(&config);
        let v = view(&config, &["a", "b", "d"], &[]);
        assert_eq!(b.target("sg", &v, Instant::now()), "sg");
        assert_eq!(b.report().len(), 1, "the pool is still under its threshold");
    }
}
