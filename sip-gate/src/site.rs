//! What the routing core derives from the site file, in one immutable
//! value a reload replaces whole (SIGHUP; `crate::reload`).
//!
//! The core holds it in an `ArcSwap`: a message loads it once, after the
//! drain view, and reads every table through that one load, so it never
//! sees half of a reload. State that outlives a reload (transactions,
//! flows, the work book, health, ban entries, rate buckets whose limits
//! did not change) stays in the core or is carried over here.

use std::sync::Arc;
use std::time::Instant;

use ringsync::config::SiteConfig;

use crate::ban::Bans;
use crate::listener::{Listeners, UnknownInstance};
use crate::metrics::{self as m, InstanceGauges};
use crate::origin::Origins;
use crate::overload::Overload;
use crate::policy::Policy;

/// The site file as the core uses it.
pub(crate) struct Site {
    pub(crate) config: Arc<SiteConfig>,
    pub(crate) listeners: Listeners,
    pub(crate) origins: Origins,
    pub(crate) policy: Policy,
    /// Overload protection and per-source limits (R-OV-1, R-OV-2): kept
    /// across a reload that changes neither `[overload]` nor the accounts.
    pub(crate) overload: Arc<Overload>,
    /// Sources banned for failing authentication, per listener (R-SEC-3).
    pub(crate) bans: Bans,
    /// `sipgate_new_work_total{instance}`, registered once per site: no
    /// label allocation per request.
    pub(crate) new_work: Vec<Option<metrics::Counter>>,
    /// Work and state gauges of the instances the gate counts (SIP, and
    /// `ws` behind a ws pool), registered once.
    pub(crate) gauges: Vec<Option<InstanceGauges>>,
}

impl Site {
    /// The id of instance `i` (`?` for an index this site does not have,
    /// which the view-then-site load order rules out).
    pub(crate) fn instance_id(&self, i: usize) -> &str {
        self.config.instances.get(i).map_or("?", |x| x.id.as_str())
    }

    /// The `Server` header of the gate's own responses (`[site]
    /// server_header`; empty: none).
    pub(crate) fn server_header(&self) -> &str {
        self.config
            .site
            .server_header
            .as_deref()
            .unwrap_or(crate::reply::DEFAULT_SERVER)
    }

    /// The tables of a validated site; `prev` is the site in force when
    /// this one is a reload, whose ban entries and (limits unchanged) rate
    /// buckets go on.
    pub(crate) fn build(
        config: Arc<SiteConfig>,
        prev: Option<&Site>,
        now: Instant,
    ) -> Result<Site, UnknownInstance> {
        let listeners = Listeners::new(&config)?;
        // Only SIP instances take new work through the gate.
        let new_work = config
            .instances
            .iter()
            .map(|i| {
                i.service
                    .is_sip()
                    .then(|| metrics::counter!(m::NEW_WORK, "instance" => i.id.clone()))
            })
            .collect();
        let gauges = config
            .instances
            .iter()
            // ws instances behind a ws pool too: their work is the
            // connections it passes them (R-WS-3).
            .map(|i| {
                ringsync::work::NodeKind::Gate
                    .counts_on(&config, &i.service)
                    .then(|| InstanceGauges::new(&i.id))
            })
            .collect();
        let same_limits = |p: &&Site| {
            p.config.overload == config.overload && p.config.accounts == config.accounts
        };
        let overload = match prev.filter(same_limits) {
            Some(p) => Arc::clone(&p.overload),
            None => Arc::new(Overload::new(&config.overload, config.accounts.len(), now)),
        };
        Ok(Site {
            bans: Bans::reloaded(&config, prev.map(|p| &p.bans)),
            policy: Policy::new(&config),
            origins: Origins::new(&config),
            listeners,
            overload,
            new_work,
            gauges,
            config,
        })
    }
}
