//! Pools and their backups (R-HT-1): an instance's `pool`, and the
//! `[[pool]]` tables that give a pool a health threshold and a backup.
//!
//! A pool is a set of sg (or esg) instances a listener balances over: by
//! default every instance of a service is in the pool named after it, and
//! `pool = "<name>"` on an `[[instance]]` puts it in another one (a standby
//! pool, which takes new dialogs only as a backup). A backup written as SIP
//! destinations (`backup_sip`, another site's gates) becomes instances of
//! its own: `<pool>-backup-<n>` in pool `<pool>-backup`, on no server of
//! this site (no profile can drain them), so the gate probes them, records
//! their dialogs' routes and counts their work like any instance's.

use std::collections::HashSet;
use std::net::SocketAddr;

use serde::Serialize;
use toml::Spanned;

use super::raw::{RawInstance, RawPool};
use super::types::{Instance, Service};
use super::validator::Validator;
use super::ConfigError;

type Result<T> = std::result::Result<T, ConfigError>;

/// How long a pool in backup must stay at or above its threshold before its
/// new dialogs come back (`hold_s`), in seconds.
pub const DEFAULT_HOLD_S: u32 = 10;

/// `[[pool]]`: a pool's health threshold and its backup (R-HT-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pool {
    /// The pool: the instances whose `pool` is this name.
    pub name: String,
    /// The service its instances run (sg or esg).
    pub service: Service,
    /// How many of its instances must be up in the normal zone; under it,
    /// new dialogs go to `backup`.
    pub threshold: usize,
    /// The pool new dialogs go to while this one is under its threshold:
    /// another pool of the site, or the pool made of `destinations`.
    pub backup: String,
    /// The SIP destinations of `backup_sip` (empty for a backup pool); the
    /// instances made of them are `<name>-backup-<n>`.
    pub destinations: Vec<SocketAddr>,
    /// Hysteresis: once in backup, the pool comes back only after it has
    /// been at or above its threshold for this long, in seconds.
    pub hold_s: u32,
    /// Guard listeners of this pool's instances: while the pool is in
    /// backup, a new dialog the guard would refuse with 503 (its instance
    /// draining) goes to the backup instead.
    pub guard_to_backup: bool,
}

/// Sets the instances' `pool` and checks the `[[pool]]` tables; returns
/// them, and the instances made of `backup_sip` destinations (for the
/// caller to add to the site's instances).
pub(super) fn validate(
    v: &Validator<'_>,
    raw: &[Spanned<RawPool>],
    raw_instances: &[Spanned<RawInstance>],
    instances: &mut [Instance],
) -> Result<(Vec<Pool>, Vec<Instance>)> {
    member_pools(v, raw_instances, instances)?;
    let mut pools: Vec<Pool> = Vec::new();
    for (i, spanned) in raw.iter().enumerate() {
        let pool = one(v, i, spanned.get_ref(), &pools, instances)?;
        pools.push(pool);
    }
    let mut all = instances.to_vec();
    for (i, pool) in pools.iter().enumerate() {
        add_destinations(v, i, &raw[i], pool, &mut all)?;
    }
    no_cycle(v, raw, &pools)?;
    let destinations = all.split_off(instances.len());
    Ok((pools, destinations))
}

/// `[[instance]] pool`: sg and esg only, a tame name that is no other
/// service's.
fn member_pools(
    v: &Validator<'_>,
    raw: &[Spanned<RawInstance>],
    instances: &mut [Instance],
) -> Result<()> {
    let services: HashSet<String> = instances
        .iter()
        .map(|i| i.service.as_str().to_owned())
        .chain(["sg", "esg", "mg", "bgmg", "ws"].map(str::to_owned))
        .collect();
    for (i, (inst, r)) in instances.iter_mut().zip(raw).enumerate() {
        let Some(pool) = &r.get_ref().pool else {
            continue;
        };
        let field = format!("instance[{i}].pool");
        if !inst.service.is_sip() {
            return Err(v.err(
                pool.span(),
                field,
                format!(
                    "only sg and esg instances are in pools; this one runs `{}`",
                    inst.service
                ),
            ));
        }
        v.name(pool, &field)?;
        let name = pool.get_ref();
        if name != inst.service.as_str() && services.contains(name) {
            return Err(v.err(
                pool.span(),
                field,
                format!("`{name}` is a service; name the pool something else"),
            ));
        }
        inst.pool = name.clone();
    }
    Ok(())
}

/// One `[[pool]]` table, its backup checked against the pools before it
/// and the instances.
fn one(
    v: &Validator<'_>,
    i: usize,
    r: &RawPool,
    before: &[Pool],
    instances: &[Instance],
) -> Result<Pool> {
    let at = |f: &str| format!("pool[{i}].{f}");
    let name = r.name.get_ref();
    let members: Vec<&Instance> = instances.iter().filter(|x| &x.pool == name).collect();
    let Some(first) = members.first() else {
        return Err(v.err(
            r.name.span(),
            at("name"),
            format!(
                "no instance is in pool `{name}` (an sg or esg instance is in the pool its \
                 `pool` names, else the one named after its service)"
            ),
        ));
    };
    if before.iter().any(|p| &p.name == name) {
        return Err(v.err(
            r.name.span(),
            at("name"),
            format!("pool `{name}` has two [[pool]] tables"),
        ));
    }
    let threshold = *r.threshold.get_ref();
    if threshold < 1 || threshold > members.len() as i64 {
        return Err(v.err(
            r.threshold.span(),
            at("threshold"),
            format!(
                "must be from 1 to the pool's size ({} instances in `{name}`)",
                members.len()
            ),
        ));
    }
    let backup =
        match (&r.backup, &r.backup_sip) {
            (Some(b), None) => backup_pool(v, i, b, name, &first.service, instances)?,
            (None, Some(d)) if d.get_ref().is_empty() => {
                return Err(v.err(d.span(), at("backup_sip"), "needs at least one address"))
            }
            (None, Some(_)) => format!("{name}-backup"),
            _ => return Err(v.err(
                r.name.span(),
                at("backup"),
                "give exactly one of `backup = \"<pool>\"` and `backup_sip = [\"<ip:port>\", ...]`",
            )),
        };
    Ok(Pool {
        name: name.clone(),
        service: first.service.clone(),
        threshold: usize::try_from(threshold).unwrap_or(usize::MAX),
        backup,
        destinations: r
            .backup_sip
            .as_ref()
            .map(|d| d.get_ref().clone())
            .unwrap_or_default(),
        hold_s: r.hold_s.as_ref().map_or(DEFAULT_HOLD_S, |h| *h.get_ref()),
        guard_to_backup: r.guard_to_backup,
    })
}

/// `backup = "<pool>"`: another pool of the same service.
fn backup_pool(
    v: &Validator<'_>,
    i: usize,
    b: &Spanned<String>,
    name: &str,
    service: &Service,
    instances: &[Instance],
) -> Result<String> {
    let field = format!("pool[{i}].backup");
    let backup = b.get_ref();
    if backup == name {
        return Err(v.err(b.span(), field, "a pool cannot be its own backup"));
    }
    match instances.iter().find(|x| &x.pool == backup) {
        None => Err(v.err(
            b.span(),
            field,
            format!("unknown pool `{backup}`: no instance has `pool = \"{backup}\"`"),
        )),
        Some(x) if &x.service != service => Err(v.err(
            b.span(),
            field,
            format!(
                "pool `{backup}` runs `{}`, pool `{name}` runs `{service}`: a backup takes \
                 the same requests, so it runs the same service",
                x.service
            ),
        )),
        Some(_) => Ok(backup.clone()),
    }
}

/// `backup_sip`: one instance per destination, `<pool>-backup-<n>`.
fn add_destinations(
    v: &Validator<'_>,
    i: usize,
    raw: &Spanned<RawPool>,
    pool: &Pool,
    instances: &mut Vec<Instance>,
) -> Result<()> {
    let Some(spanned) = &raw.get_ref().backup_sip else {
        return Ok(());
    };
    if let Some(x) = instances.iter().find(|x| x.pool == pool.backup) {
        return Err(v.err(
            spanned.span(),
            format!("pool[{i}].backup_sip"),
            format!(
                "instance `{}` is in pool `{}`, the name this backup's destinations take",
                x.id, pool.backup
            ),
        ));
    }
    for (n, addr) in pool.destinations.iter().enumerate() {
        let id = format!("{}-{}", pool.backup, n + 1);
        if let Some(x) = instances
            .iter()
            .find(|x| x.id == id || x.sip == Some(*addr))
        {
            return Err(v.err(
                spanned.span(),
                format!("pool[{i}].backup_sip[{n}]"),
                format!(
                    "instance `{}` already has the id (`{id}`) or the address ({addr}) of \
                     this destination",
                    x.id
                ),
            ));
        }
        instances.push(Instance {
            id,
            service: pool.service.clone(),
            server: pool.backup.clone(),
            sip: Some(*addr),
            ng: None,
            ng_source: None,
            ws: None,
            exceptions: Vec::new(),
            sources: Vec::new(),
            pool: pool.backup.clone(),
        });
    }
    Ok(())
}

/// No pool is, through its backups, its own backup.
fn no_cycle(v: &Validator<'_>, raw: &[Spanned<RawPool>], pools: &[Pool]) -> Result<()> {
    for (i, start) in pools.iter().enumerate() {
        let mut path = vec![start.name.as_str()];
        let mut at = start;
        while let Some(next) = pools.iter().find(|p| p.name == at.backup) {
            path.push(next.name.as_str());
            if next.name == start.name {
                let span = raw[i]
                    .get_ref()
                    .backup
                    .as_ref()
                    .map_or(raw[i].span(), Spanned::span);
                return Err(v.err(
                    span,
                    format!("pool[{i}].backup"),
                    format!("backup cycle: {}", path.join(" -> ")),
                ));
            }
            if path.len() > pools.len() {
                break; // a cycle that does not pass through `start`: found from its own pool
            }
            at = next;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{ConfigError, SiteConfig};

    /// Three sg in pool `sg`, one in pool `dr`, then `extra`.
    fn load(extra: &str) -> Result<SiteConfig, ConfigError> {
        let mut t = String::from("[site]\nname = \"t\"\n");
        for (n, pool) in [(1, ""), (2, ""), (3, ""), (4, "pool = \"dr\"\n")] {
            t.push_str(&format!(
                "[[server]]\nname = \"s{n}\"\n[[instance]]\nid = \"sg-{n}\"\nservice = \"sg\"\n\
                 server = \"s{n}\"\nsip = \"127.0.0.1:50{n}0\"\n{pool}"
            ));
        }
        t.push_str(extra);
        SiteConfig::from_str_at(&t, Path::new("site.toml"))
    }

    fn refused(extra: &str, field: &str, says: &str) {
        let e = load(extra).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.line.is_some(), "{e}");
        assert!(e.message.contains(says), "{e}");
    }

    /// R-HT-1: defaults, an instance's pool, and the destinations of
    /// `backup_sip` as instances of their own.
    #[test]
    fn r_ht_1_pools_defaults_and_destinations() {
        let c = load("[[pool]]\nname = \"sg\"\nthreshold = 2\nbackup = \"dr\"\n").unwrap();
        let p = &c.pools[0];
        assert_eq!((p.threshold, p.backup.as_str(), p.hold_s), (2, "dr", 10));
        assert!(!p.guard_to_backup);
        assert_eq!(c.instance("sg-4").unwrap().pool, "dr");
        assert_eq!(c.instance("sg-1").unwrap().pool, "sg");
        let c = load(
            "[[pool]]\nname = \"sg\"\nthreshold = 3\nhold_s = 0\nguard_to_backup = true\n\
             backup_sip = [\"127.0.9.1:5060\", \"127.0.9.2:5060\"]\n",
        )
        .unwrap();
        let p = &c.pools[0];
        assert_eq!((p.backup.as_str(), p.hold_s), ("sg-backup", 0));
        assert!(p.guard_to_backup);
        let d = c.instance("sg-backup-2").unwrap();
        assert_eq!(d.sip, Some("127.0.9.2:5060".parse().unwrap()));
        assert_eq!(
            (d.pool.as_str(), d.server.as_str()),
            ("sg-backup", "sg-backup")
        );
        assert!(
            c.servers.iter().all(|s| s.name != "sg-backup"),
            "no server of the site"
        );
    }

    /// R-HT-1: each refusal names its field and line.
    #[test]
    fn r_ht_1_bad_pools_are_refused_naming_the_place() {
        let pool = |rest: &str| format!("[[pool]]\nname = \"sg\"\n{rest}");
        refused(
            &pool("threshold = 4\nbackup = \"dr\"\n"),
            "pool[0].threshold",
            "pool's size (3",
        );
        refused(
            &pool("threshold = 0\nbackup = \"dr\"\n"),
            "pool[0].threshold",
            "from 1",
        );
        refused(
            &pool("threshold = 2\nbackup = \"nope\"\n"),
            "pool[0].backup",
            "unknown pool `nope`",
        );
        refused(
            &pool("threshold = 2\nbackup = \"sg\"\n"),
            "pool[0].backup",
            "its own backup",
        );
        refused(&pool("threshold = 2\n"), "pool[0].backup", "exactly one of");
        refused(
            &pool("threshold = 2\nbackup_sip = []\n"),
            "pool[0].backup_sip",
            "at least one",
        );
        refused(
            &pool("threshold = 2\nbackup_sip = [\"127.0.0.1:5010\"]\n"),
            "pool[0].backup_sip[0]",
            "instance `sg-1` already has",
        );
        refused(
            "[[pool]]\nname = \"esg\"\nthreshold = 1\nbackup = \"dr\"\n",
            "pool[0].name",
            "no instance is in pool `esg`",
        );
        refused(
            "[[pool]]\nname = \"sg\"\nthreshold = 1\nbackup = \"dr\"\n\
             [[pool]]\nname = \"dr\"\nthreshold = 1\nbackup = \"sg\"\n",
            "pool[0].backup",
            "backup cycle: sg -> dr -> sg",
        );
    }

    /// An instance's `pool`: sg and esg only, never another service's name.
    #[test]
    fn r_ht_1_an_instance_pool_is_checked() {
        let e = SiteConfig::from_str_at(
            "[site]\nname = \"t\"\n[[server]]\nname = \"s\"\n[[instance]]\nid = \"sg-1\"\n\
             service = \"sg\"\nserver = \"s\"\nsip = \"127.0.0.1:5060\"\npool = \"esg\"\n",
            Path::new("site.toml"),
        )
        .unwrap_err();
        assert_eq!(e.field, "instance[0].pool", "{e}");
        assert!(e.message.contains("is a service"), "{e}");
    }
}
