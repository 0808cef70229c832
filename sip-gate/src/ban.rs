//! R-SEC-3: bans of sources that keep failing authentication.
//!
//! Per listener with `[listener.auth_ban] limit` set, the gate counts the
//! 401, 407 and 403 answers the instances give to each source's requests as
//! it relays them (the first final response of a transaction only). A
//! source that reaches `limit` within `window_s` is banned for `ban_s`:
//! its new dialogs on that listener are refused (403 or silence) before
//! they cost an instance anything. In-dialog requests and responses never
//! look at this table. The table holds at most `max_sources` entries; when
//! it is full and no entry has expired, a new source's failures are not
//! counted (counted in `sipgate_auth_ban_table_full_total` instead), so a
//! flood of sources keeps memory bounded.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringsync::config::{AccessAction, AuthBan, SiteConfig};

use crate::metrics as m;

/// One source's record on one listener.
#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    window_start: Instant,
    banned_until: Option<Instant>,
}

impl Entry {
    fn banned(&self, now: Instant) -> bool {
        self.banned_until.is_some_and(|t| t > now)
    }
    /// Neither banned nor inside a counting window: may be forgotten.
    fn stale(&self, now: Instant, window: Duration) -> bool {
        !self.banned(now) && now.saturating_duration_since(self.window_start) >= window
    }
}

/// The table of one listener.
#[derive(Debug)]
struct Table {
    name: String,
    cfg: AuthBan,
    entries: Mutex<Sources>,
    /// When the latest ban given ends, in ms after `epoch`: past it no ban
    /// is in force and a lookup takes no lock (every request from outside
    /// asks, R-SEC-4). A lifted ban leaves it as it was: a lookup then
    /// takes the lock and finds none.
    until_ms: AtomicU64,
    epoch: Instant,
}

impl Table {
    /// `until` rounded up to the next ms, so the lock-free check never
    /// ends a ban early.
    fn until_ms(&self, until: Instant) -> u64 {
        self.ms(until).saturating_add(1)
    }

    fn ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }
}

/// The sources of one table, and when it was last swept for stale entries.
#[derive(Debug, Default)]
struct Sources {
    map: HashMap<IpAddr, Entry>,
    /// Sweeping a full table walks all of it: at most once a second, so a
    /// flood of new sources costs a lookup each, not a walk each.
    last_sweep: Option<Instant>,
}

/// A ban as the admin endpoint lists it: one type with `ringsync bans`.
pub use ringsync::bans::BanInfo;

/// Every listener's ban table, indexed like the listeners.
#[derive(Debug)]
pub(crate) struct Bans {
    /// Shared with the `Bans` a reload builds, for a listener whose
    /// `[listener.auth_ban]` did not change: its bans and counts go on.
    tables: Vec<Option<Arc<Table>>>,
}

impl Bans {
    /// One table per listener with bans on. When the site is a reloaded
    /// file, `prev` holds the tables in force, whose listeners are those of
    /// `prev`'s, in the same order (a reload never changes the set): a
    /// listener whose `[listener.auth_ban]` is unchanged keeps its table;
    /// one whose settings changed gets a new table holding the bans and
    /// counts in force (a ban never ends early because a limit changed).
    pub(crate) fn reloaded(config: &SiteConfig, prev: Option<&Bans>) -> Bans {
        let tables = config
            .listeners
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let old = prev.and_then(|p| p.table(i));
                if let Some(t) = old.filter(|t| t.cfg == l.auth_ban) {
                    return Some(Arc::clone(t));
                }
                let entries = old.map(|t| Sources {
                    map: t
                        .entries
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .map
                        .clone(),
                    last_sweep: None,
                });
                if l.auth_ban.enabled() {
                    // Exported from the start: a counter first seen at 1
                    // shows no increase in Prometheus.
                    for name in [m::AUTH_FAILURES, m::AUTH_BANS, m::AUTH_BAN_TABLE_FULL] {
                        metrics::counter!(name, "listener" => l.name.clone()).increment(0);
                    }
                }
                l.auth_ban.enabled().then(|| {
                    let entries = entries.unwrap_or_default();
                    let latest = entries.map.values().filter_map(|e| e.banned_until).max();
                    let t = Table {
                        name: l.name.clone(),
                        cfg: l.auth_ban.clone(),
                        entries: Mutex::new(entries),
                        until_ms: AtomicU64::new(0),
                        epoch: Instant::now(),
                    };
                    if let Some(until) = latest {
                        t.until_ms.store(t.until_ms(until), Ordering::Relaxed);
                    }
                    Arc::new(t)
                })
            })
            .collect();
        Bans { tables }
    }

    /// Whether any listener has bans on.
    pub(crate) fn any(&self) -> bool {
        self.tables.iter().any(Option::is_some)
    }

    fn table(&self, listener: usize) -> Option<&Arc<Table>> {
        self.tables.get(listener).and_then(Option::as_ref)
    }

    /// Counts an authentication failure of `source` on `listener`; bans it
    /// when it reaches the limit.
    pub(crate) fn failure(&self, listener: usize, source: IpAddr, now: Instant) {
        let Some(t) = self.table(listener) else {
            return;
        };
        if t.cfg.exempt.iter().any(|n| n.contains(&source)) {
            return;
        }
        let window = Duration::from_secs(t.cfg.window_s.into());
        let mut sources = t.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !sources.map.contains_key(&source) && sources.map.len() >= t.cfg.max_sources {
            let due = sources
                .last_sweep
                .is_none_or(|l| now.saturating_duration_since(l) >= Duration::from_secs(1));
            if due {
                sources.last_sweep = Some(now);
                sources.map.retain(|_, e| !e.stale(now, window));
            }
            if sources.map.len() >= t.cfg.max_sources {
                metrics::counter!(m::AUTH_BAN_TABLE_FULL, "listener" => t.name.clone())
                    .increment(1);
                return;
            }
        }
        metrics::counter!(m::AUTH_FAILURES, "listener" => t.name.clone()).increment(1);
        let e = sources.map.entry(source).or_insert(Entry {
            failures: 0,
            window_start: now,
            banned_until: None,
        });
        if e.stale(now, window) {
            *e = Entry {
                failures: 0,
                window_start: now,
                banned_until: None,
            };
        }
        e.failures = e.failures.saturating_add(1);
        if e.failures >= t.cfg.limit && !e.banned(now) {
            let until = now + Duration::from_secs(t.cfg.ban_s.into());
            e.banned_until = Some(until);
            t.until_ms.fetch_max(t.until_ms(until), Ordering::Relaxed);
            metrics::counter!(m::AUTH_BANS, "listener" => t.name.clone()).increment(1);
            tracing::warn!(
                %source,
                listener = %t.name,
                failures = e.failures,
                ban_s = t.cfg.ban_s,
                "source banned: too many authentication failures (R-SEC-3)"
            );
        }
    }

    /// `Some(action)` when `source` is banned on `listener` at `now`.
    pub(crate) fn banned(
        &self,
        listener: usize,
        source: IpAddr,
        now: Instant,
    ) -> Option<AccessAction> {
        let t = self.table(listener)?;
        if t.ms(now) >= t.until_ms.load(Ordering::Relaxed) {
            return None;
        }
        let sources = t.entries.lock().unwrap_or_else(|p| p.into_inner());
        sources
            .map
            .get(&source)
            .is_some_and(|e| e.banned(now))
            .then_some(t.cfg.action)
    }

    /// The bans in force at `now`, by listener and source.
    pub(crate) fn list(&self, now: Instant) -> Vec<BanInfo> {
        let mut out = Vec::new();
        for t in self.tables.iter().flatten() {
            let sources = t.entries.lock().unwrap_or_else(|p| p.into_inner());
            for (ip, e) in sources.map.iter() {
                if let Some(until) = e.banned_until.filter(|u| *u > now) {
                    let left = until.saturating_duration_since(now);
                    out.push(BanInfo {
                        listener: t.name.clone(),
                        source: *ip,
                        remaining_s: left.as_secs() + u64::from(left.subsec_nanos() > 0),
                        failures: e.failures,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.listener, a.source).cmp(&(&b.listener, b.source)));
        out
    }

    /// Puts in force bans an earlier run of this gate listed (an upgrade,
    /// R-GW-3), each for what was left of it, on the listener of the same
    /// name (one without bans on takes none); how many were taken.
    pub(crate) fn restore(&self, bans: &[BanInfo], now: Instant) -> usize {
        let mut taken = 0;
        for b in bans {
            let Some(t) = self.tables.iter().flatten().find(|t| t.name == b.listener) else {
                continue;
            };
            let until = now + Duration::from_secs(b.remaining_s);
            let mut sources = t.entries.lock().unwrap_or_else(|p| p.into_inner());
            if sources.map.len() >= t.cfg.max_sources && !sources.map.contains_key(&b.source) {
                continue;
            }
            sources.map.insert(
                b.source,
                Entry {
                    failures: b.failures,
                    window_start: now,
                    banned_until: Some(until),
                },
            );
            t.until_ms.fetch_max(t.until_ms(until), Ordering::Relaxed);
            taken += 1;
        }
        taken
    }

    /// Lifts the bans (and forgets the failures) of `source` on every
    /// listener; how many bans were in force.
    pub(crate) fn lift(&self, source: IpAddr, now: Instant) -> usize {
        let mut lifted = 0;
        for t in self.tables.iter().flatten() {
            let mut sources = t.entries.lock().unwrap_or_else(|p| p.into_inner());
            if sources.map.remove(&source).is_some_and(|e| e.banned(now)) {
                lifted += 1;
                tracing::info!(%source, listener = %t.name, "ban lifted (R-SEC-3)");
            }
        }
        lifted
    }

    /// Sources tracked on every listener (for the bound's tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.tables
            .iter()
            .flatten()
            .map(|t| t.entries.lock().map_or(0, |s| s.map.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn bans(extra: &str) -> Bans {
        Bans::reloaded(&site(extra), None)
    }

    fn site(extra: &str) -> SiteConfig {
        let text = format!(
            "[site]\nname = \"b\"\n[[server]]\nname = \"s\"\n[[instance]]\nid = \"sg-0\"\n\
             service = \"sg\"\nserver = \"s\"\nsip = \"127.0.0.1:5080\"\n[[listener]]\n\
             name = \"l\"\nbind = \"127.0.0.1:5060\"\nmode = \"guard\"\ninstance = \"sg-0\"\n\
             leg = \"subscriber\"\n[listener.auth_ban]\n{extra}"
        );
        SiteConfig::from_str_at(&text, Path::new("t.toml")).unwrap()
    }

    /// R-GW-3: the bans listed by one run are in force in the next, for
    /// what was left of them, with their failure counts.
    #[test]
    fn r_gw_3_bans_listed_by_one_run_are_in_force_in_the_next() {
        let old = bans("limit = 2\nban_s = 60\n");
        let t0 = Instant::now();
        let src: IpAddr = "192.0.2.9".parse().unwrap();
        old.failure(0, src, t0);
        old.failure(0, src, t0);
        let listed = old.list(t0 + Duration::from_secs(20));
        assert_eq!(listed.len(), 1);
        let new = bans("limit = 2\nban_s = 60\n");
        let t1 = Instant::now();
        assert!(new.banned(0, src, t1).is_none());
        assert_eq!(new.restore(&listed, t1), 1);
        assert!(new.banned(0, src, t1 + Duration::from_secs(39)).is_some());
        assert!(new.banned(0, src, t1 + Duration::from_secs(41)).is_none());
        assert_eq!(new.list(t1), listed_at(&listed, 40));
        // A listener without bans takes none.
        let off = Bans::reloaded(&site("limit = 0\n"), None);
        assert_eq!(off.restore(&listed, t1), 0);
    }

    fn listed_at(l: &[BanInfo], remaining_s: u64) -> Vec<BanInfo> {
        l.iter()
            .map(|b| BanInfo {
                remaining_s,
                ..b.clone()
            })
            .collect()
    }

    /// R-SEC-3 across a reload (issue 27): unchanged settings keep the
    /// table itself; new settings keep the bans in force and the counts;
    /// bans turned off drop the table.
    #[test]
    fn r_sec_3_a_reload_keeps_the_bans_in_force() {
        let b = bans(
            "limit = 2
ban_s = 60
",
        );
        let t0 = Instant::now();
        let (src, other): (IpAddr, IpAddr) =
            ("192.0.2.9".parse().unwrap(), "192.0.2.10".parse().unwrap());
        b.failure(0, src, t0);
        b.failure(0, src, t0);
        b.failure(0, other, t0);
        let same = Bans::reloaded(
            &site(
                "limit = 2
ban_s = 60
",
            ),
            Some(&b),
        );
        assert!(Arc::ptr_eq(same.table(0).unwrap(), b.table(0).unwrap()));
        let stricter = Bans::reloaded(
            &site(
                "limit = 3
ban_s = 60
",
            ),
            Some(&b),
        );
        assert_eq!(stricter.banned(0, src, t0), Some(AccessAction::Reject));
        assert_eq!(stricter.banned(0, other, t0), None);
        stricter.failure(0, other, t0);
        stricter.failure(0, other, t0);
        assert_eq!(
            stricter.banned(0, other, t0),
            Some(AccessAction::Reject),
            "1 + 2 = limit 3"
        );
        let off = Bans::reloaded(&site(""), Some(&stricter));
        assert!(!off.any());
        assert_eq!(off.banned(0, src, t0), None);
    }

    #[test]
    fn r_sec_3_limit_bans_until_ban_s_and_exempt_never() {
        let b = bans("limit = 3\nwindow_s = 10\nban_s = 5\nexempt = [\"10.0.0.0/8\"]\n");
        let t0 = Instant::now();
        let src: IpAddr = "192.0.2.7".parse().unwrap();
        b.failure(0, src, t0);
        b.failure(0, src, t0);
        assert_eq!(b.banned(0, src, t0), None);
        b.failure(0, src, t0);
        assert_eq!(b.banned(0, src, t0), Some(AccessAction::Reject));
        assert_eq!(b.list(t0).len(), 1);
        assert_eq!(b.banned(0, src, t0 + Duration::from_secs(5)), None);
        let inside: IpAddr = "10.1.1.1".parse().unwrap();
        for _ in 0..10 {
            b.failure(0, inside, t0);
        }
        assert_eq!(b.banned(0, inside, t0), None);
        b.failure(0, src, t0);
        assert_eq!(b.lift(src, t0), 1);
        assert_eq!(b.banned(0, src, t0), None);
    }

    #[test]
    fn r_sec_3_failures_outside_the_window_do_not_add_up() {
        let b = bans("limit = 2\nwindow_s = 1\n");
        let t0 = Instant::now();
        let src: IpAddr = "192.0.2.8".parse().unwrap();
        b.failure(0, src, t0);
        b.failure(0, src, t0 + Duration::from_secs(2));
        assert_eq!(b.banned(0, src, t0 + Duration::from_secs(2)), None);
    }

    #[test]
    fn r_sec_3_a_million_sources_keep_the_table_bounded() {
        let b = bans("limit = 2\nmax_sources = 1000\n");
        let t0 = Instant::now();
        for i in 0..1_000_000u32 {
            b.failure(0, IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(b.len() <= 1000, "{}", b.len());
    }
}
