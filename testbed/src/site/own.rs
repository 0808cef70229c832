//! A site file, validated by ringsync's loader, mapped onto the run's
//! loopback `/24`: names, services, profiles, accounts, exceptions,
//! listeners and Active-Passive groups stay as written; every address
//! moves, deterministically (site-file order), and the mapping is kept for
//! the report. What cannot run on one machine is refused, naming the field.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use ringsync::config::{ListenerMode, Service, SiteConfig, StoreConfig, Transport};
use toml::{Table, Value};

use super::counts::Counts;
use super::layout::{
    Acct, ApGroup, Inst, Layout, Lsn, Mapped, RunSpec, StoreKind, Svc, MAX_ACCOUNTS,
    MAX_PER_SERVICE,
};

/// The two ways a layout comes to be, and the site file each gate node
/// runs: here, beside the mapping they share, so the layout's types do not
/// depend on it.
impl Layout {
    /// A site of invented names (`srv-a`, `sg-a`, ...) from counts.
    pub fn from_counts(counts: &Counts, run: &RunSpec) -> Result<Layout, String> {
        counts.check()?;
        let run = RunSpec {
            mg_drain_window_s: Some(run.mg_drain_window_s.unwrap_or(10)),
            ap_pace_s: Some(run.ap_pace_s.unwrap_or(60)),
            ..run.clone()
        };
        let text = counts.site_text(&run);
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml"))
            .map_err(|e| format!("the site testbed wrote from counts does not load: {e}"))?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| e.to_string())?;
        map(&cfg, table, &run, None)
    }

    /// The operator's own site file, loaded and checked by ringsync's
    /// config loader, mapped onto the run's loopback addresses.
    pub fn from_file(path: &Path, run: &RunSpec) -> Result<Layout, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("site file {}: {e}", path.display()))?;
        let cfg = ringsync::SiteConfig::from_str_at(&text, path).map_err(|e| e.to_string())?;
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        map(&cfg, table, run, Some(path))
    }

    /// The site file of gate node `k` (node 0's is the one every other tool
    /// reads): the same site, with that node's listeners, admin address and
    /// the run's store.
    pub fn site_toml(&self, k: usize, etcd: &[String]) -> String {
        let mut t = self.body.clone();
        per_gate(self, &mut t, k, etcd);
        let [a, b, c] = self.run.net;
        let from = match &self.source {
            Some(p) => format!("from {}", p.display()),
            None => "from counts".into(),
        };
        format!(
            "# Written by testbed for one rehearsal run on {a}.{b}.{c}.0/24 ({from}), gate-{k}.\n{}",
            toml::to_string(&t).unwrap_or_default()
        )
    }
}

/// The first port a listener is moved to when its own cannot be used.
const SPARE_PORT: u16 = 5100;

fn svc_of(s: &Service) -> Option<Svc> {
    match s {
        Service::Sg => Some(Svc::Sg),
        Service::Esg => Some(Svc::Esg),
        Service::Mg => Some(Svc::Mg),
        Service::Bgmg => Some(Svc::Bgmg),
        _ => None,
    }
}

fn host(run: &RunSpec, h: u8) -> IpAddr {
    let [a, b, c] = run.net;
    IpAddr::from([a, b, c, h])
}

/// The layout of a validated site file and its TOML.
pub(super) fn map(
    cfg: &SiteConfig,
    mut table: Table,
    run: &RunSpec,
    source: Option<&Path>,
) -> Result<Layout, String> {
    let mut mapping = Vec::new();
    let mut notes = Vec::new();
    let instances = instances(cfg, run, &mut table, &mut mapping, &mut notes)?;
    if !instances
        .iter()
        .any(|i| matches!(i.svc, Svc::Sg | Svc::Esg))
    {
        return Err(
            "instance: the site has no sg or esg instance, so there is nothing to send calls to"
                .into(),
        );
    }
    let listeners = listeners(cfg, &mut table, &mut mapping, &mut notes)?;
    let accounts = accounts(cfg, run, &mut table, &mut mapping)?;
    fixed(cfg, run, &mut table, &mut mapping, &mut notes);
    let timers = (
        run.mg_drain_window_s
            .unwrap_or(cfg.timers.mg_drain_window_s),
        run.ap_pace_s.unwrap_or(cfg.timers.ap_pace_s),
    );
    set_timers(&mut table, run);
    let profiles = match source {
        Some(p) => profiles(cfg, p, &mut notes)?,
        None => Vec::new(),
    };
    let layout = Layout {
        run: run.clone(),
        source: source.map(Path::to_path_buf),
        servers: cfg.servers.iter().map(|s| s.name.clone()).collect(),
        instances,
        ap: cfg
            .ap_groups
            .iter()
            .map(|g| ApGroup {
                name: g.name.clone(),
                members: g
                    .members
                    .iter()
                    .map(|m| {
                        let srv = cfg.instance(m).map(|i| i.server.clone());
                        (m.clone(), srv.unwrap_or_default())
                    })
                    .collect(),
                home: g.home.clone(),
            })
            .collect(),
        listeners,
        accounts,
        profiles,
        mapping,
        notes,
        timers,
        body: table,
    };
    // What testbed writes must load as the operator's did.
    let etcd: Vec<String> = layout
        .etcd_ips()
        .iter()
        .map(|ip| format!("http://{ip}:2379"))
        .collect();
    let text = layout.site_toml(0, &etcd);
    SiteConfig::from_str_at(&text, Path::new("site.toml"))
        .map_err(|e| format!("the run's site file does not load (a testbed bug): {e}"))?;
    Ok(layout)
}

fn array<'a>(table: &'a mut Table, key: &str) -> impl Iterator<Item = &'a mut Table> {
    table
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_table_mut)
}

/// sg/esg/mg/bgmg get `.20`/`.40`/`.60`/`.80` onward in file order.
fn instances(
    cfg: &SiteConfig,
    run: &RunSpec,
    table: &mut Table,
    mapping: &mut Vec<Mapped>,
    notes: &mut Vec<String>,
) -> Result<Vec<Inst>, String> {
    let mut out: Vec<Inst> = Vec::new();
    for i in &cfg.instances {
        let Some(svc) = svc_of(&i.service) else {
            continue;
        };
        let n = out.iter().filter(|x| x.svc == svc).count();
        if n == MAX_PER_SERVICE {
            return Err(format!(
                "instance `{}` (service {}): a rehearsal runs at most {MAX_PER_SERVICE} {} instances",
                i.id, i.service, i.service
            ));
        }
        let ip = host(run, svc.base_host() + u8::try_from(n).unwrap_or(0));
        let inst = Inst {
            id: i.id.clone(),
            svc,
            server: i.server.clone(),
            ip,
        };
        let (key, was) = match svc {
            Svc::Sg | Svc::Esg => ("sip", i.sip),
            Svc::Mg | Svc::Bgmg => ("ng", i.ng),
        };
        mapping.push(Mapped {
            what: format!("instance {} {key}", i.id),
            site: was.map_or("—".into(), |a| a.to_string()),
            rehearsal: inst.addr().to_string(),
        });
        out.push(inst);
    }
    for t in array(table, "instance") {
        let id = t
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(inst) = out.iter().find(|x| x.id == id.as_str()) else {
            continue;
        };
        let key = if matches!(inst.svc, Svc::Sg | Svc::Esg) {
            "sip"
        } else {
            "ng"
        };
        t.insert(key.into(), inst.addr().to_string().into());
        if t.contains_key("ng_source") {
            t.insert("ng_source".into(), inst.ip.to_string().into());
        }
        if t.remove("sources").is_some() {
            notes.push(format!(
                "instance {id}: `sources` dropped: its stand-in sends from {} only",
                inst.ip
            ));
        }
    }
    Ok(out)
}

/// Every listener keeps its name, mode, pool and leg, on its own port of
/// each gate node's address (the port it had, unless another listener has
/// it already or it is privileged).
fn listeners(
    cfg: &SiteConfig,
    table: &mut Table,
    mapping: &mut Vec<Mapped>,
    notes: &mut Vec<String>,
) -> Result<Vec<Lsn>, String> {
    let mut out: Vec<Lsn> = Vec::new();
    let mut spare = SPARE_PORT;
    for l in &cfg.listeners {
        if matches!(l.mode, ListenerMode::WsPool { .. }) {
            notes.push(format!(
                "listener {}: a ws pool is not rehearsed (it passes WebSocket connections, no SIP)",
                l.name
            ));
            continue;
        }
        let kept: Vec<Transport> = l
            .transports
            .iter()
            .copied()
            // TLS and WebSocket need certificates and browsers the
            // rehearsal does not have; their listeners' UDP stays.
            .filter(|t| *t != Transport::Tls && !t.is_ws())
            .collect();
        if kept.is_empty() {
            return Err(format!(
                "listener `{}`.transports: tls/ws/wss only; a rehearsal runs without certificates, so give the listener udp (its callers speak UDP)",
                l.name
            ));
        }
        if kept.len() < l.transports.len() {
            notes.push(format!(
                "listener {}: tls/ws/wss not rehearsed (udp/tcp only)",
                l.name
            ));
        }
        let taken = |p: u16| p < 1024 || p == 9091 || out.iter().any(|x| x.port == p);
        let mut port = l.bind.port();
        if taken(port) {
            while taken(spare) {
                spare += 1;
            }
            port = spare;
        }
        let (pool, guard) = match &l.mode {
            ListenerMode::Balance { pool } => (svc_of(pool), None),
            ListenerMode::Guard { instance } => (None, Some(instance.clone())),
            ListenerMode::WsPool { .. } => continue,
        };
        let leg = serde_json::to_value(l.leg)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        mapping.push(Mapped {
            what: format!("listener {}", l.name),
            site: l.bind.to_string(),
            rehearsal: format!("gate address:{port}"),
        });
        out.push(Lsn {
            name: l.name.clone(),
            port,
            pool,
            guard,
            leg,
            udp: kept.contains(&Transport::Udp),
        });
    }
    if let Some(Value::Array(ls)) = table.get_mut("listener") {
        ls.retain(|l| l.get("mode").and_then(Value::as_str) != Some("ws_pool"));
    }
    for t in array(table, "listener") {
        t.remove("advertise");
        if let Some(Value::Array(ts)) = t.get_mut("transports") {
            ts.retain(|v| v.as_str() != Some("tls"));
        }
    }
    Ok(out)
}

/// Each account's callers get their own address (`.100` onward), which
/// becomes its `match.source`; its domains and exceptions stay.
fn accounts(
    cfg: &SiteConfig,
    run: &RunSpec,
    table: &mut Table,
    mapping: &mut Vec<Mapped>,
) -> Result<Vec<Acct>, String> {
    if cfg.accounts.len() > MAX_ACCOUNTS {
        return Err(format!(
            "account: {} accounts; a rehearsal gives each its callers' address, at most {MAX_ACCOUNTS}",
            cfg.accounts.len()
        ));
    }
    let out: Vec<Acct> = cfg
        .accounts
        .iter()
        .enumerate()
        .map(|(i, a)| Acct {
            name: a.name.clone(),
            multi: a.multi_instance,
            home: a.home.clone(),
            caller: host(run, 100 + u8::try_from(i).unwrap_or(0)),
        })
        .collect();
    for (a, acct) in cfg.accounts.iter().zip(&out) {
        let was: Vec<String> = a.matcher.source.iter().map(ToString::to_string).collect();
        mapping.push(Mapped {
            what: format!("account {} match.source", a.name),
            site: if was.is_empty() {
                "—".into()
            } else {
                was.join(", ")
            },
            rehearsal: format!("{}/32", acct.caller),
        });
    }
    for (t, acct) in array(table, "account").zip(&out) {
        let m = t
            .entry("match")
            .or_insert_with(|| Value::Table(Table::new()));
        if let Some(m) = m.as_table_mut() {
            m.insert(
                "source".into(),
                Value::Array(vec![format!("{}/32", acct.caller).into()]),
            );
        }
    }
    Ok(out)
}

/// The nodes' own addresses: media-ctl and `ringsync serve` on `.8`; the
/// store is the run's; the API's tokens and TLS files are not used.
fn fixed(
    cfg: &SiteConfig,
    run: &RunSpec,
    table: &mut Table,
    mapping: &mut Vec<Mapped>,
    notes: &mut Vec<String>,
) {
    let m = host(run, 8);
    let serve = SocketAddr::new(m, 8080);
    let media = SocketAddr::new(m, 9092);
    let ng = SocketAddr::new(m, 2223);
    for (what, was, now) in [
        ("admin.bind (ringsync serve)", cfg.admin.bind, serve),
        ("admin.media_bind (media-ctl)", cfg.admin.media_bind, media),
        ("media.ng_bind (media-ctl)", cfg.media.ng_bind, ng),
        (
            "admin.gate_bind (sip-gate)",
            cfg.admin.gate_bind,
            SocketAddr::new(host(run, 1), 9091),
        ),
    ] {
        mapping.push(Mapped {
            what: what.into(),
            site: was.to_string(),
            rehearsal: if what.contains("gate_bind") {
                "gate address:9091".into()
            } else {
                now.to_string()
            },
        });
    }
    let admin = table
        .entry("admin")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Some(a) = admin.as_table_mut() {
        a.insert("bind".into(), serve.to_string().into());
        a.insert("media_bind".into(), media.to_string().into());
        for k in ["tokens", "tls_cert", "tls_key"] {
            if a.remove(k).is_some() {
                notes.push(format!("admin.{k} dropped: the run's API is on loopback"));
            }
        }
    }
    let media_t = table
        .entry("media")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Some(t) = media_t.as_table_mut() {
        t.insert("ng_bind".into(), ng.to_string().into());
    }
    if table.remove("tls").is_some() {
        notes.push("[tls] dropped: a rehearsal runs without certificates".into());
    }
    if let StoreConfig::Etcd { endpoints, .. } = &cfg.store {
        notes.push(format!(
            "store: the site's etcd ({}) is not used; the run has its own store",
            endpoints.join(", ")
        ));
    }
}

/// The timers a scenario shortens; below 60 s of pace the run allows a
/// test pace (R-AP-2 asks for a minute in production).
fn set_timers(table: &mut Table, run: &RunSpec) {
    let t = table
        .entry("timers")
        .or_insert_with(|| Value::Table(Table::new()));
    let Some(t) = t.as_table_mut() else {
        return;
    };
    if let Some(w) = run.mg_drain_window_s {
        t.insert("mg_drain_window_s".into(), i64::from(w).into());
    }
    if let Some(p) = run.ap_pace_s {
        t.insert("ap_pace_s".into(), i64::from(p).into());
        t.insert("ap_test_pace_allowed".into(), (p < 60).into());
    }
}

/// The profiles of the operator's embedded store, when its file is there.
fn profiles(
    cfg: &SiteConfig,
    site: &Path,
    notes: &mut Vec<String>,
) -> Result<Vec<(String, Vec<String>)>, String> {
    let StoreConfig::Embedded { path } = &cfg.store else {
        return Ok(Vec::new());
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        notes.push(format!(
            "store.path {}: not found next to {}; profiles come from the timeline",
            path.display(),
            site.display()
        ));
        return Ok(Vec::new());
    };
    let set: ringsync::ProfileSet = serde_json::from_str(&text)
        .map_err(|e| format!("store.path {}: not a profiles file: {e}", path.display()))?;
    for p in &set.profiles {
        if p.state == ringsync::ProfileState::Active {
            notes.push(format!(
                "profile {} is active in the site's store; the run starts with it inactive",
                p.name
            ));
        }
    }
    Ok(set
        .profiles
        .into_iter()
        .map(|p| (p.name, p.servers))
        .collect())
}

/// Gate node `k`'s copy: its listeners and admin on its own address, and
/// the run's store.
pub(super) fn per_gate(l: &Layout, t: &mut Table, k: usize, etcd: &[String]) {
    let ip = l.gate_ip(k);
    for (lt, lsn) in array(t, "listener").zip(l.listeners()) {
        lt.insert(
            "bind".into(),
            SocketAddr::new(ip, lsn.port).to_string().into(),
        );
    }
    if let Some(a) = t.get_mut("admin").and_then(Value::as_table_mut) {
        a.insert("gate_bind".into(), l.gate_admin(k).to_string().into());
    }
    let mut store = Table::new();
    match l.store() {
        StoreKind::Embedded => {
            store.insert("kind".into(), "embedded".into());
            store.insert("path".into(), "profiles.json".into());
        }
        StoreKind::Etcd => {
            store.insert("kind".into(), "etcd".into());
            let e: Vec<Value> = etcd.iter().map(|e| e.as_str().into()).collect();
            store.insert("endpoints".into(), Value::Array(e));
            store.insert("prefix".into(), "/drain/rehearsal".into());
            store.insert("cache".into(), format!("gate-{k}.view-cache.json").into());
        }
    }
    t.insert("store".into(), Value::Table(store));
}
