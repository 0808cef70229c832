//! RFC 3263 client procedure on hickory-resolver: the transport, then the
//! targets and ports (NAPTR -> SRV -> A/AAAA).
//!
//! - A port in the URI: A/AAAA of the host, that port (4.2); the transport
//!   is the URI's, else UDP.
//! - A `transport` parameter: SRV for it (`_sip._tcp` / `_sip._udp`), else
//!   A/AAAA at 5060 (4.1, 4.2).
//! - Neither: NAPTR, the records for SIP over UDP (`SIP+D2U`) or TCP
//!   (`SIP+D2T`) the listener serves, in order and preference, each one's
//!   SRV; without NAPTR, SRV for UDP then TCP; without SRV, A/AAAA at 5060
//!   over UDP (4.1).
//!
//! A numeric host never gets here (the core routes it directly).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::{ResolveError, TokioResolver};
use ringsync::config::DnsConfig;

use super::{DnsAnswer, DnsFailure, DnsQuery, DnsResult, SrvTarget};

/// The port of a SIP URI without one and without SRV (RFC 3263 4.2).
const SIP_PORT: u16 = 5060;
/// A negative answer without a TTL of its own (no SOA) is kept this long
/// (then capped by `[dns] negative_ttl_s`).
const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(30);

/// The resolver `[dns]` asks for: its name servers (over UDP, falling back
/// to TCP for truncated answers), else the system's.
pub(crate) fn resolver(cfg: &DnsConfig) -> Result<TokioResolver, ResolveError> {
    let mut builder = if cfg.nameservers.is_empty() {
        TokioResolver::builder_tokio()?
    } else {
        let mut rc = ResolverConfig::new();
        for &ns in &cfg.nameservers {
            rc.add_name_server(NameServerConfig::new(ns, Protocol::Udp));
            rc.add_name_server(NameServerConfig::new(ns, Protocol::Tcp));
        }
        TokioResolver::builder_with_config(rc, TokioConnectionProvider::default())
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.timeout = Duration::from_millis(cfg.timeout_ms);
    opts.attempts = usize::try_from(cfg.attempts).unwrap_or(1);
    // Names are asked as written (providers are given by FQDN): no search
    // list, no /etc/hosts surprises.
    opts.ndots = 0;
    opts.cache_size = 64;
    Ok(builder.build())
}

/// Lookups and the least TTL among their answers.
struct Lookups<'r> {
    r: &'r TokioResolver,
    valid_until: Option<Instant>,
}

impl Lookups<'_> {
    fn saw(&mut self, until: Instant) {
        self.valid_until = Some(self.valid_until.map_or(until, |v| v.min(until)));
    }

    /// Records of `rtype` at `name`; `Ok(empty)` for a negative answer
    /// (with its TTL noted), `Err` when no answer came.
    async fn records(&mut self, name: &str, rtype: RecordType) -> Result<Vec<RData>, DnsFailure> {
        match self.r.lookup(fqdn(name), rtype).await {
            Ok(l) => {
                self.saw(l.valid_until());
                Ok(l.record_iter().map(|r| r.data().clone()).collect())
            }
            Err(e) => match negative_ttl(&e) {
                Some(ttl) => {
                    self.saw(Instant::now() + ttl);
                    Ok(Vec::new())
                }
                None => {
                    tracing::debug!(%name, ?rtype, error = %e, "dns lookup failed");
                    Err(DnsFailure::Unavailable)
                }
            },
        }
    }

    /// The addresses of `host` (A, or AAAA for an IPv6 listener).
    async fn addrs(
        &mut self,
        host: &str,
        port: u16,
        v6: bool,
    ) -> Result<Vec<SocketAddr>, DnsFailure> {
        let rtype = if v6 { RecordType::AAAA } else { RecordType::A };
        let records = self.records(host, rtype).await?;
        Ok(records
            .iter()
            .filter_map(|d| match d {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                _ => None,
            })
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    /// The targets of an SRV name, each with its addresses; targets that do
    /// not resolve are left out, `.` (service not offered) too.
    async fn srv(&mut self, name: &str, v6: bool) -> Result<Vec<SrvTarget>, DnsFailure> {
        let mut targets = Vec::new();
        for d in self.records(name, RecordType::SRV).await? {
            let RData::SRV(srv) = d else { continue };
            if srv.target().is_root() {
                continue;
            }
            let host = srv.target().to_ascii();
            let addrs = self.addrs(&host, srv.port(), v6).await.unwrap_or_default();
            if !addrs.is_empty() {
                targets.push(SrvTarget {
                    priority: srv.priority(),
                    weight: srv.weight(),
                    addrs,
                });
            }
        }
        Ok(targets)
    }
}

/// Resolves one URI per RFC 3263.
pub(crate) async fn resolve(r: &TokioResolver, q: &DnsQuery) -> DnsResult {
    let mut l = Lookups {
        r,
        valid_until: None,
    };
    let (tcp, targets) = choose(&mut l, q).await?;
    let ttl = l.valid_until.map_or(Duration::ZERO, |v| {
        v.saturating_duration_since(Instant::now())
    });
    if targets.is_empty() {
        return Err(DnsFailure::NotFound {
            ttl: if ttl.is_zero() {
                DEFAULT_NEGATIVE_TTL
            } else {
                ttl
            },
        });
    }
    Ok(DnsAnswer { tcp, targets, ttl })
}

/// The transport and the targets (empty: nothing usable).
async fn choose(l: &mut Lookups<'_>, q: &DnsQuery) -> Result<(bool, Vec<SrvTarget>), DnsFailure> {
    let default_tcp = !q.udp_ok;
    if let Some(port) = q.port {
        let tcp = q.tcp.unwrap_or(default_tcp);
        return Ok((tcp, host_target(l.addrs(&q.host, port, q.v6).await?)));
    }
    if let Some(tcp) = q.tcp {
        let srv = l.srv(&srv_name(&q.host, tcp), q.v6).await?;
        if !srv.is_empty() {
            return Ok((tcp, srv));
        }
        return Ok((tcp, host_target(l.addrs(&q.host, SIP_PORT, q.v6).await?)));
    }
    for (tcp, replacement) in naptr(l, q).await? {
        let srv = l.srv(&replacement, q.v6).await?;
        if !srv.is_empty() {
            return Ok((tcp, srv));
        }
    }
    for tcp in [false, true] {
        if (tcp && q.tcp_ok) || (!tcp && q.udp_ok) {
            let srv = l.srv(&srv_name(&q.host, tcp), q.v6).await?;
            if !srv.is_empty() {
                return Ok((tcp, srv));
            }
        }
    }
    Ok((
        default_tcp,
        host_target(l.addrs(&q.host, SIP_PORT, q.v6).await?),
    ))
}

/// The NAPTR records of `q.host` for SIP over a transport the listener
/// serves (`S` flag: the replacement is an SRV name), in order then
/// preference: `(tcp, replacement)`.
async fn naptr(l: &mut Lookups<'_>, q: &DnsQuery) -> Result<Vec<(bool, String)>, DnsFailure> {
    let mut found: Vec<(u16, u16, bool, String)> = Vec::new();
    for d in l.records(&q.host, RecordType::NAPTR).await? {
        let RData::NAPTR(n) = d else { continue };
        if !n.flags().eq_ignore_ascii_case(b"s") {
            continue;
        }
        let tcp = match n.services().to_ascii_uppercase().as_slice() {
            b"SIP+D2U" if q.udp_ok => false,
            b"SIP+D2T" if q.tcp_ok => true,
            _ => continue,
        };
        found.push((n.order(), n.preference(), tcp, n.replacement().to_ascii()));
    }
    found.sort_by_key(|f| (f.0, f.1));
    Ok(found.into_iter().map(|(_, _, tcp, r)| (tcp, r)).collect())
}

fn host_target(addrs: Vec<SocketAddr>) -> Vec<SrvTarget> {
    if addrs.is_empty() {
        return Vec::new();
    }
    vec![SrvTarget {
        priority: 0,
        weight: 0,
        addrs,
    }]
}

fn srv_name(host: &str, tcp: bool) -> String {
    format!("_sip.{}.{host}", if tcp { "_tcp" } else { "_udp" })
}

/// Names are absolute: the host as the URI gives it.
fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_owned()
    } else {
        format!("{name}.")
    }
}

/// The TTL of a negative answer (the name or the records do not exist);
/// `None` when the error is no answer at all.
fn negative_ttl(e: &ResolveError) -> Option<Duration> {
    match e.proto()?.kind() {
        ProtoErrorKind::NoRecordsFound { negative_ttl, .. } => {
            Some(negative_ttl.map_or(DEFAULT_NEGATIVE_TTL, |s| Duration::from_secs(s.into())))
        }
        _ => None,
    }
}
