//! The test site (see the tables in main.rs) and a gate on it: the core and
//! the drain state it reads.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ringsync::config::SiteConfig;
use ringsync::state::DrainState;
use ringsync::view::Health;
use ringsync::{Profile, ProfileSet, ProfileState};
use sip_gate::{Action, Core, Inbound};
use testbed::fixture::{Mode, SiteFile};

pub const SECRET: &str = "core-rules-test-secret-0123456789";

pub const SG_A: usize = 0;
pub const SG_B: usize = 1;
pub const SG_C: usize = 2;
pub const ESG_A: usize = 3;
pub const ESG_B: usize = 4;

pub const L_SG_BAL: usize = 0;
pub const L_SG_GUARD: usize = 1;
pub const L_ESG_BAL: usize = 2;
pub const L_ESG_GUARD: usize = 3;
pub const L_ESG_IN: usize = 4;

/// Advertised address of each listener (what goes into Via and Record-Route).
pub const LISTENER_HOST: [&str; 5] = [
    "127.0.0.1:5060",
    "127.0.0.1:5061",
    "127.0.0.1:5070",
    "127.0.0.1:5071",
    "127.0.0.1:5072",
];

pub const INSTANCE_ADDR: [&str; 5] = [
    "127.0.1.1:5060",
    "127.0.1.2:5060",
    "127.0.1.3:5060",
    "127.0.2.1:5060",
    "127.0.2.2:5060",
];

/// A subscriber UA (behind a NAT: it writes 5062 in Via, sends from 40000).
pub const UA: &str = "203.0.113.10:40000";
/// A provider of the multi-instance account carrier-x.
pub const CARRIER_X: &str = "192.0.2.10:5060";
/// A provider of the single-instance account carrier-y.
pub const CARRIER_Y: &str = "198.51.100.5:5060";

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn inst(i: usize) -> SocketAddr {
    addr(INSTANCE_ADDR[i])
}

/// Knobs of the per-test site.
#[derive(Clone)]
pub struct SiteOpts {
    /// TOML array of sg-a's exceptions.
    pub sg_a_exceptions: &'static str,
    /// TOML array of esg-a's exceptions.
    pub esg_a_exceptions: &'static str,
    /// TOML array of sg-b's source networks (R-SEC-1).
    pub sg_b_sources: &'static str,
    pub options_503: bool,
    pub retry_after: u32,
    pub jitter: u32,
    /// Lines of the `[work]` section (R-ST-2, R-ST-3).
    pub work: &'static str,
    /// Lines of the `[overload]` section (R-OV-1, R-OV-2).
    pub overload: &'static str,
}

impl Default for SiteOpts {
    fn default() -> Self {
        SiteOpts {
            sg_a_exceptions: "[]",
            esg_a_exceptions: r#"[{ source = "192.0.2.77/32" }]"#,
            sg_b_sources: "[]",
            options_503: false,
            retry_after: 30,
            jitter: 10,
            work: "",
            // Tests send hundreds of new dialogs from one address at one
            // instant: no per-source or per-account limit unless a test
            // sets one (the `overload` module).
            overload: "per_source_rate = 0\nper_account_rate = 0\nper_source_register_rate = 0\n",
        }
    }
}

/// The two provider accounts: carrier-x, multi-instance, and carrier-y,
/// homed on esg-a.
const ACCOUNTS: &str = r#"[[account]]
name = "carrier-x"
multi_instance = true
match = { source = ["192.0.2.0/24"], domain = ["carrier-x.example"] }
exceptions = [{ user = "noc" }]

[[account]]
name = "carrier-y"
multi_instance = false
home = "esg-a"
match = { source = ["198.51.100.0/24"] }
"#;

pub fn site_toml(o: &SiteOpts) -> String {
    let both = r#"transports = ["udp", "tcp"]"#;
    let sip_and = |i: usize, extra: &str| format!("sip = \"{}\"\n{extra}", INSTANCE_ADDR[i]);
    let listen = |i: usize| addr(LISTENER_HOST[i]);
    let timers = format!(
        "retry_after_s = {}\nretry_after_jitter_s = {}",
        o.retry_after, o.jitter
    );
    SiteFile::new("core-rules")
        .secret(SECRET)
        .section("timers", &timers)
        .section("drain", &format!("options_503 = {}", o.options_503))
        .section("work", o.work)
        .section("overload", o.overload)
        .servers(&["srv-a", "srv-b", "srv-c"])
        .instance_with(
            "sg-a",
            "sg",
            "srv-a",
            &sip_and(SG_A, &format!("exceptions = {}", o.sg_a_exceptions)),
        )
        .instance_with(
            "sg-b",
            "sg",
            "srv-b",
            &sip_and(SG_B, &format!("sources = {}", o.sg_b_sources)),
        )
        .instance("sg-c", "sg", "srv-c", inst(SG_C))
        .instance_with(
            "esg-a",
            "esg",
            "srv-a",
            &sip_and(ESG_A, &format!("exceptions = {}", o.esg_a_exceptions)),
        )
        .instance("esg-b", "esg", "srv-b", inst(ESG_B))
        .raw(ACCOUNTS)
        .listener(
            "sg-bal",
            listen(L_SG_BAL),
            Mode::Balance("sg"),
            "subscriber",
            both,
        )
        .listener(
            "sg-a-guard",
            listen(L_SG_GUARD),
            Mode::Guard("sg-a"),
            "subscriber",
            both,
        )
        .listener(
            "esg-bal",
            listen(L_ESG_BAL),
            Mode::Balance("esg"),
            "provider",
            both,
        )
        .listener(
            "esg-a-guard",
            listen(L_ESG_GUARD),
            Mode::Guard("esg-a"),
            "provider",
            both,
        )
        .listener(
            "esg-a-in",
            listen(L_ESG_IN),
            Mode::Guard("esg-a"),
            "inside",
            both,
        )
        .text()
        .to_owned()
}

/// A gate on a site: the core and the drain state it reads.
pub struct Gate {
    pub core: Core,
    pub drain: Arc<DrainState>,
    pub config: Arc<SiteConfig>,
}

impl Gate {
    pub fn new(o: &SiteOpts) -> Gate {
        let config = Arc::new(
            SiteConfig::from_str_at(&site_toml(o), Path::new("/nonexistent/core-rules.toml"))
                .expect("site config"),
        );
        let drain = DrainState::new(config.clone());
        let core = Core::new(config.clone(), drain.clone()).expect("core");
        Gate {
            core,
            drain,
            config,
        }
    }

    pub fn std() -> Gate {
        Gate::new(&SiteOpts::default())
    }

    /// The same site and drain state, a fresh core: a gate that restarted
    /// (no transaction table).
    pub fn restarted(&self) -> Core {
        Core::new(self.config.clone(), self.drain.clone()).expect("core")
    }

    /// Drains exactly these servers (one active profile; empty lifts all).
    pub fn drain_servers(&self, servers: &[&str]) {
        let rev = self.drain.view().revision() + 1;
        self.drain.set_profiles(Arc::new(ProfileSet {
            revision: rev,
            profiles: vec![
                Profile {
                    id: "p-1".into(),
                    name: "maintenance".into(),
                    description: String::new(),
                    revision: 0,
                    servers: servers.iter().map(|s| s.to_string()).collect(),
                    state: if servers.is_empty() {
                        ProfileState::Inactive
                    } else {
                        ProfileState::Active
                    },
                },
                // Stored but not applied: must change nothing.
                Profile {
                    id: "p-2".into(),
                    name: "next-week".into(),
                    description: String::new(),
                    revision: 0,
                    servers: vec!["srv-a".into(), "srv-b".into(), "srv-c".into()],
                    state: ProfileState::Inactive,
                },
            ],
        }));
    }

    pub fn health(&self, idx: usize, h: Health) {
        self.drain.set_health(idx, h);
    }

    pub fn udp(&self, listener: usize, peer: &str, msg: &Bytes) -> Action {
        handle(&self.core, listener, peer, msg)
    }
}

pub fn handle(core: &Core, listener: usize, peer: &str, msg: &Bytes) -> Action {
    core.handle(
        Inbound::Udp {
            listener,
            peer: addr(peer),
        },
        msg.clone(),
        Instant::now(),
    )
}
