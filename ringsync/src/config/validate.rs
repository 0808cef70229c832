//! From what the file says to what it means: one function per section,
//! checking references between servers, instances, accounts, groups and
//! listeners. The first error found wins; sections are checked in file
//! order of dependency (site, servers, instances, accounts, Active-Passive
//! groups, listeners, then store, health, media and engines; `media.rs` checks
//! `[media]` and the instances' `ng` and `ng_source`, `limits.rs`
//! `[overload]`, `engine.rs` `[[engine]]`).
//!
//! `ap.rs` checks the Active-Passive groups and their pace in `[timers]`,
//! `services.rs` that every service name is built in or declared by a group.
//! `[drain]` and `[admin]` have no cross-field rules: serde's types and
//! `deny_unknown_fields` are their whole check.

use std::collections::HashSet;
use std::path::Path;

use ipnet::IpNet;
use toml::Spanned;

use super::error::{ConfigError, Locator};
use super::raw::{RawAccount, RawInstance, RawServer, RawSite, RawSiteId, RawStore};
use super::types::{
    Account, DnsConfig, Exception, HealthConfig, Instance, Server, Service, Site, SiteConfig,
    StoreConfig, TcpConfig, WorkConfig,
};
use super::validator::{check_name, service_of, Validator};

type Result<T> = std::result::Result<T, ConfigError>;

const EMPTY_EXCEPTION: &str =
    "an exception needs at least one of all, source, aor, user, domain, method";

/// Checks a parsed site file and builds the site model.
pub(super) fn validate(loc: Locator<'_>, raw: RawSite) -> Result<SiteConfig> {
    let v = Validator { loc };
    let site = v.site(&raw.site)?;
    let servers = v.servers(&raw.server)?;
    let mut instances = v.instances(&raw.instance, &servers)?;
    super::services::declared(&v, &raw.instance, &instances, &raw.ap_group)?;
    let (pools, destinations) =
        super::pool::validate(&v, &raw.pool, &raw.instance, &mut instances)?;
    let accounts = v.accounts(&raw.account, &instances)?;
    let ap_groups = super::ap::groups(&v, &raw.ap_group, &instances)?;
    let listeners = v.listeners(&raw.listener, &instances)?;
    let store = v.store(raw.store.as_ref(), &site.name)?;
    let health = v.health(raw.health)?;
    let timers = super::ap::timers(&v, raw.timers)?;
    let media = super::media::validate(&v, raw.media.as_ref(), &instances)?;
    let work = v.work(raw.work)?;
    let dns = v.dns(raw.dns)?;
    let tcp = v.tcp(raw.tcp)?;
    let tls = v.tls(raw.tls.as_ref(), &listeners)?;
    v.ws_upstreams(&raw.listener, &listeners, tls.as_ref())?;
    let overload = super::limits::validate(&v, raw.overload)?;
    let admin = v.admin(raw.admin)?;
    let audit = raw.audit.checked(&v)?;
    let capture = v.capture(raw.capture.as_ref(), &listeners, tls.as_ref())?;
    let engines = super::engine::validate(&v, &raw.engine, &instances)?;
    // `backup_sip` destinations are the gate's alone: no engine drives
    // another site's gates (R-HT-1).
    instances.extend(destinations);
    Ok(SiteConfig {
        path: loc.path.to_owned(),
        hash: super::file_hash(loc.text.as_bytes()),
        site,
        store,
        timers,
        drain: raw.drain,
        health,
        work,
        dns,
        tcp,
        tls,
        overload,
        admin,
        audit,
        media,
        capture,
        servers,
        instances,
        accounts,
        ap_groups,
        listeners,
        engines,
        pools,
    })
}

/// The longest `[site] server_header`: a product token, not a banner.
const MAX_SERVER_HEADER: usize = 200;

impl Validator<'_> {
    /// `[site]`: a name, and a secret long enough to mean something.
    fn site(&self, raw: &RawSiteId) -> Result<Site> {
        let name = raw.name.get_ref().trim().to_owned();
        if name.is_empty() {
            return Err(self.err(raw.name.span(), "site.name", "must not be empty"));
        }
        let secret = match &raw.secret {
            Some(s) if s.get_ref().len() < 16 => {
                return Err(self.err(s.span(), "site.secret", "must be at least 16 characters"))
            }
            Some(s) => s.get_ref().clone(),
            None => format!("ringsync-default-secret:{name}"),
        };
        let server_header = match &raw.server_header {
            Some(h) => Some(self.server_header(h)?),
            None => None,
        };
        Ok(Site {
            name,
            secret,
            server_header,
        })
    }

    /// `[site] server_header`: printable text only, since it goes into a
    /// header line as written (a CR or LF would inject headers).
    fn server_header(&self, h: &Spanned<String>) -> Result<String> {
        let v = h.get_ref().trim();
        if v.len() > MAX_SERVER_HEADER {
            return Err(self.err(
                h.span(),
                "site.server_header",
                format!("at most {MAX_SERVER_HEADER} characters"),
            ));
        }
        if v.chars().any(|c| c.is_control()) {
            return Err(self.err(
                h.span(),
                "site.server_header",
                "must not contain control characters (CR, LF, tab...)",
            ));
        }
        Ok(v.to_owned())
    }

    /// `[[server]]`: tame, unique names.
    fn servers(&self, raw: &[Spanned<RawServer>]) -> Result<Vec<Server>> {
        let mut servers = Vec::new();
        let mut names = HashSet::new();
        for (i, s) in raw.iter().enumerate() {
            let name = &s.get_ref().name;
            let field = format!("server[{i}].name");
            self.name(name, &field)?;
            if !names.insert(name.get_ref()) {
                return Err(self.err(
                    name.span(),
                    field,
                    format!("duplicate server `{}`", name.get_ref()),
                ));
            }
            servers.push(Server {
                name: name.get_ref().clone(),
            });
        }
        Ok(servers)
    }

    /// `[[instance]]`: unique ids, a known server, the address its service needs.
    fn instances(&self, raw: &[Spanned<RawInstance>], servers: &[Server]) -> Result<Vec<Instance>> {
        let mut instances: Vec<Instance> = Vec::new();
        for (i, spanned) in raw.iter().enumerate() {
            let r = spanned.get_ref();
            let id = r.id.get_ref();
            self.name(&r.id, format!("instance[{i}].id"))?;
            if instances.iter().any(|inst| &inst.id == id) {
                return Err(self.err(
                    r.id.span(),
                    format!("instance[{i}].id"),
                    format!("duplicate instance id `{id}`"),
                ));
            }
            let service = Service::from(r.service.get_ref().clone());
            if let Service::Other(name) = &service {
                check_name(name)
                    .map_err(|m| self.err(r.service.span(), format!("instance[{i}].service"), m))?;
            }
            if !servers.iter().any(|s| &s.name == r.server.get_ref()) {
                return Err(self.err(
                    r.server.span(),
                    format!("instance[{i}].server"),
                    format!(
                        "unknown server `{}` (define it in a [[server]] table)",
                        r.server.get_ref()
                    ),
                ));
            }
            self.addresses(i, spanned, &service)?;
            let ws = self.ws_address(i, r, &service)?;
            // `pool.rs` sets a `pool` the file gives (R-HT-1).
            let pool = service.as_str().to_owned();
            instances.push(Instance {
                ws,
                id: id.clone(),
                service,
                server: r.server.get_ref().clone(),
                sip: r.sip,
                ng: r.ng.as_ref().map(|a| *a.get_ref()),
                ng_source: r.ng_source.as_ref().map(|a| *a.get_ref()),
                exceptions: self.exceptions(&format!("instance[{i}]"), &r.exceptions)?,
                sources: r.sources.iter().map(|n| *n.get_ref()).collect(),
                pool,
            });
        }
        self.sources(raw)?;
        super::media::check_instances(self, raw, &mut instances)?;
        Ok(instances)
    }

    /// Instance `sources`: only on SIP instances, and no network in two
    /// instances (a sender must map to one instance; R-SEC-1).
    fn sources(&self, raw: &[Spanned<RawInstance>]) -> Result<()> {
        let mut seen: Vec<(IpNet, usize)> = Vec::new();
        for (i, spanned) in raw.iter().enumerate() {
            let r = spanned.get_ref();
            for (j, net) in r.sources.iter().enumerate() {
                let field = format!("instance[{i}].sources[{j}]");
                if r.sip.is_none() {
                    let why = "only an instance with a `sip` address has sources";
                    return Err(self.err(net.span(), field, why));
                }
                let n = *net.get_ref();
                let overlaps = |m: &IpNet| m.contains(&n.network()) || n.contains(&m.network());
                if let Some((_, k)) = seen.iter().find(|(m, k)| *k != i && overlaps(m)) {
                    let other = raw[*k].get_ref().id.get_ref();
                    let why = format!("{n} overlaps a source network of instance `{other}`");
                    return Err(self.err(net.span(), field, why));
                }
                seen.push((n, i));
            }
        }
        Ok(())
    }

    /// The addresses an instance's service is reached at: SIP for sg/esg,
    /// ng for mg/bgmg.
    fn addresses(&self, i: usize, spanned: &Spanned<RawInstance>, service: &Service) -> Result<()> {
        let r = spanned.get_ref();
        if service.is_sip() && r.sip.is_none() {
            return Err(self.err(
                spanned.span(),
                format!("instance[{i}].sip"),
                format!("a `{service}` instance needs a SIP address"),
            ));
        }
        if matches!(service, Service::Mg | Service::Bgmg) && r.ng.is_none() {
            return Err(self.err(
                spanned.span(),
                format!("instance[{i}].ng"),
                format!("a `{service}` instance needs an ng address"),
            ));
        }
        Ok(())
    }

    /// Drain exceptions of an instance or account (R-SG-3, R-ESG-3): each
    /// must match on something.
    fn exceptions(&self, owner: &str, raw: &[Spanned<Exception>]) -> Result<Vec<Exception>> {
        for (j, e) in raw.iter().enumerate() {
            if e.get_ref().is_empty() {
                return Err(self.err(
                    e.span(),
                    format!("{owner}.exceptions[{j}]"),
                    EMPTY_EXCEPTION,
                ));
            }
        }
        Ok(raw.iter().map(|e| e.get_ref().clone()).collect())
    }

    /// `[[account]]`: unique names, something to match on, a home esg for
    /// single-instance accounts (R-ESG-5).
    fn accounts(
        &self,
        raw: &[Spanned<RawAccount>],
        instances: &[Instance],
    ) -> Result<Vec<Account>> {
        let mut accounts: Vec<Account> = Vec::new();
        for (i, spanned) in raw.iter().enumerate() {
            let r = spanned.get_ref();
            let name = r.name.get_ref();
            self.name(&r.name, format!("account[{i}].name"))?;
            if accounts.iter().any(|a| &a.name == name) {
                return Err(self.err(
                    r.name.span(),
                    format!("account[{i}].name"),
                    format!("duplicate account `{name}`"),
                ));
            }
            if r.matcher.source.is_empty() && r.matcher.domain.is_empty() {
                return Err(self.err(
                    spanned.span(),
                    format!("account[{i}].match"),
                    "an account needs at least one source network or domain to match",
                ));
            }
            if let Some(home) = &r.home {
                if service_of(instances, home.get_ref()) != Some(&Service::Esg) {
                    return Err(self.err(
                        home.span(),
                        format!("account[{i}].home"),
                        format!("`{}` is not an esg instance", home.get_ref()),
                    ));
                }
            } else if !r.multi_instance {
                return Err(self.err(
                    spanned.span(),
                    format!("account[{i}].home"),
                    "a single-instance account needs its home esg instance (R-ESG-5)",
                ));
            }
            accounts.push(Account {
                name: name.clone(),
                multi_instance: r.multi_instance,
                home: r.home.as_ref().map(|h| h.get_ref().clone()),
                matcher: r.matcher.clone(),
                exceptions: self.exceptions(&format!("account[{i}]"), &r.exceptions)?,
            });
        }
        Ok(accounts)
    }

    /// `[store]`: the embedded file (default, next to the site file) or etcd.
    fn store(&self, raw: Option<&Spanned<RawStore>>, site: &str) -> Result<StoreConfig> {
        let base = self.loc.path.parent().unwrap_or(Path::new("."));
        let Some(s) = raw else {
            return Ok(StoreConfig::Embedded {
                path: base.join(format!("{site}.profiles.json")),
            });
        };
        let r = s.get_ref();
        match r.kind.get_ref().as_str() {
            "embedded" => {
                if r.cache.is_some() {
                    return Err(self.err(
                        s.span(),
                        "store.cache",
                        "`cache` is for the etcd store (the embedded file is its own cache)",
                    ));
                }
                let p = r
                    .path
                    .clone()
                    .unwrap_or_else(|| format!("{site}.profiles.json"));
                Ok(StoreConfig::Embedded { path: base.join(p) })
            }
            "etcd" => {
                if r.endpoints.is_empty() {
                    return Err(self.err(
                        s.span(),
                        "store.endpoints",
                        "an etcd store needs at least one endpoint",
                    ));
                }
                if cfg!(not(feature = "etcd")) {
                    return Err(self.err(r.kind.span(), "store.kind", super::types::NO_ETCD));
                }
                let cache = r
                    .cache
                    .clone()
                    .unwrap_or_else(|| format!("{site}.view-cache.json"));
                Ok(StoreConfig::Etcd {
                    endpoints: r.endpoints.clone(),
                    prefix: r.prefix.clone().unwrap_or_else(|| format!("/drain/{site}")),
                    cache: base.join(cache),
                })
            }
            other => Err(self.err(
                r.kind.span(),
                "store.kind",
                format!("unknown store kind `{other}`, expected \"embedded\" or \"etcd\""),
            )),
        }
    }

    /// `[health]`: a probe that is on needs a timeout and a failure count.
    fn health(&self, raw: HealthConfig) -> Result<HealthConfig> {
        if raw.interval_ms != 0 && (raw.timeout_ms == 0 || raw.failures == 0) {
            return Err(self.err(
                0..0,
                "health",
                "timeout_ms and failures must be positive when probing is on",
            ));
        }
        Ok(raw)
    }

    /// `[work]`: every bound and age positive (a zero would make every
    /// table full or every piece of work gone at once).
    fn work(&self, raw: WorkConfig) -> Result<WorkConfig> {
        let fields = [
            ("max_expires_s", raw.max_expires_s),
            ("max_call_age_s", raw.max_call_age_s),
            ("typical_call_s", raw.typical_call_s),
            ("max_calls", raw.max_calls),
            ("max_registrations", raw.max_registrations),
            ("max_subscriptions", raw.max_subscriptions),
        ];
        if let Some((name, _)) = fields.iter().find(|(_, v)| *v == 0) {
            return Err(self.err(0..0, format!("work.{name}"), "must be positive"));
        }
        Ok(raw)
    }
}

impl Validator<'_> {
    /// `[dns]`: queries need time and a try; answers need room.
    fn dns(&self, raw: DnsConfig) -> Result<DnsConfig> {
        let bad =
            |field: &str, what: &str| Err(self.err(0..0, format!("dns.{field}"), what.to_string()));
        if raw.timeout_ms == 0 {
            return bad("timeout_ms", "must be positive");
        }
        if raw.attempts == 0 {
            return bad("attempts", "must be at least 1");
        }
        if raw.cache_size == 0 {
            return bad("cache_size", "must be positive");
        }
        Ok(raw)
    }
}

impl Validator<'_> {
    /// `[tcp]`: room for at least one connection, and time to use it.
    fn tcp(&self, raw: TcpConfig) -> Result<TcpConfig> {
        let bad =
            |field: &str, what: &str| Err(self.err(0..0, format!("tcp.{field}"), what.to_string()));
        if raw.max_connections == 0 {
            return bad("max_connections", "must be positive");
        }
        if raw.idle_s == 0 {
            return bad("idle_s", "must be positive");
        }
        if raw.frame_s == 0 {
            return bad("frame_s", "must be positive");
        }
        Ok(raw)
    }
}
