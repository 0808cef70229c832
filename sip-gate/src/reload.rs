//! Live reload of the site file (SIGHUP, `systemctl reload`): read it
//! again, check what changed, and put it in force whole or not at all.
//!
//! What changes live: instances (added after the last one; an existing
//! one's addresses), pools, accounts, exceptions, listeners' modes and
//! pools, `[listener.access]`, `[listener.auth_ban]`, `[overload]` limits,
//! `[tcp]` (for new connections), `[timers]`, `[drain]`, `[media]`,
//! `[[engine]]`, `[site] server_header`, `[capture]` (changed, a new sender replaces
//! the running one, which sends what it holds). Calls, registrations, flows and
//! connections are untouched: transactions, the work book, flows and ban
//! entries live in the core, not in what is swapped. What only a restart
//! changes is refused with the reason ([`gate_restart_only`] and
//! [`ringsync::config::restart_only`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringsync::config::{ConfigError, ReloadRefused, SiteConfig};

use crate::proxy::{Core, CoreError};

/// Why a reload left the config in force.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not load (its error names the line and column).
    #[error(transparent)]
    Load(#[from] ConfigError),
    /// It changes what only a restart may change.
    #[error("only a restart can make these changes: {0}")]
    Refused(#[from] ReloadRefused),
    /// The core cannot take it (e.g. more instances than it has room for).
    #[error("{}: {err}", path.display())]
    Core {
        /// The file read.
        path: std::path::PathBuf,
        /// Why.
        err: CoreError,
    },
}

impl ReloadError {
    /// The `result` label of `sipgate_config_reloads_total`.
    pub fn label(&self) -> &'static str {
        match self {
            ReloadError::Load(_) => "invalid",
            ReloadError::Refused(_) | ReloadError::Core { .. } => "refused",
        }
    }
}

/// A reload that went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The short hash of the file now in force.
    pub hash: String,
    /// Whether anything differs from the config before (a file rewritten
    /// with the same meaning changes nothing but, maybe, the hash).
    pub changed: bool,
    /// How long reading, checking and swapping took.
    pub took: Duration,
}

/// Reloads one gate's site file; the binary calls [`Reloader::reload`] on
/// SIGHUP. Reloads are serialised (one at a time).
#[derive(Debug)]
pub struct Reloader {
    core: Arc<Core>,
    /// The file's config as last put in force, before the listeners'
    /// port 0 were replaced by the ports bound: what a new file is
    /// compared with.
    file: Mutex<Arc<SiteConfig>>,
}

impl Reloader {
    /// A reloader for `core`, whose config was loaded from `file`.
    pub(crate) fn new(core: Arc<Core>, file: SiteConfig) -> Reloader {
        Reloader {
            core,
            file: Mutex::new(Arc::new(file)),
        }
    }

    /// Reads the site file again and puts it in force, or says why not
    /// (and changes nothing).
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let start = Instant::now();
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let new = SiteConfig::load(&file.path)?;
        let mut why = ringsync::config::restart_only(&file, &new);
        why.extend(gate_restart_only(&file, &new));
        if !why.is_empty() {
            return Err(ReloadRefused {
                path: new.path.clone(),
                reasons: why,
            }
            .into());
        }
        let changed = **file != new;
        let running = self.core.config();
        let bound = with_bound_addresses(new.clone(), &running);
        self.core
            .swap_site(Arc::new(bound))
            .map_err(|err| ReloadError::Core {
                path: new.path.clone(),
                err,
            })?;
        let hash = new.hash.clone();
        *file = Arc::new(new);
        Ok(Reloaded {
            hash,
            changed,
            took: start.elapsed(),
        })
    }
}

/// The new file's listeners at the addresses the gate bound (a port 0 in
/// the file is the port the kernel chose): the listeners are the same, in
/// the same order ([`gate_restart_only`] checked).
fn with_bound_addresses(mut new: SiteConfig, running: &SiteConfig) -> SiteConfig {
    for (n, r) in new.listeners.iter_mut().zip(&running.listeners) {
        n.bind = r.bind;
        n.advertise = r.advertise;
    }
    new
}

/// What only a restart of the gate may change, beyond what every node
/// shares: its listeners' sockets (name, bind and advertised address,
/// transports, leg, WebSocket options: each is a bound socket, and the
/// advertised address is in the Record-Routes of dialogs in progress),
/// `[tls]` (its certificate is re-read on SIGHUP on its own), `[[pool]]`
/// (the backups' state, R-HT-1), `[dns]` (the
/// resolver is built at start), `[health]` (the prober's pace), `[work]`
/// (the work book's tables and windows) and the `[overload]` settings of
/// sockets and tables (UDP workers, receive buffer, transaction table).
pub fn gate_restart_only(old: &SiteConfig, new: &SiteConfig) -> Vec<String> {
    let mut why = Vec::new();
    if old.listeners.len() != new.listeners.len() {
        why.push(format!(
            "{} listeners, was {}: a listener is a bound socket",
            new.listeners.len(),
            old.listeners.len()
        ));
    }
    for (o, n) in old.listeners.iter().zip(&new.listeners) {
        let what = [
            (o.name != n.name, "name"),
            (o.bind != n.bind, "bind address"),
            (o.advertise != n.advertise, "advertised address"),
            (o.transports != n.transports, "transports"),
            (o.leg != n.leg, "leg"),
            (o.ws != n.ws, "WebSocket options"),
        ];
        for (_, field) in what.iter().filter(|(differs, _)| *differs) {
            why.push(format!(
                "listener `{}`: {field} changed ({} -> {}): a listener's socket is bound at start",
                o.name,
                describe(o, field),
                describe(n, field)
            ));
        }
    }
    if old.admin.gate_bind != new.admin.gate_bind {
        why.push(format!(
            "admin.gate_bind changed ({} -> {}): the gate's admin endpoint is bound at start",
            old.admin.gate_bind, new.admin.gate_bind
        ));
    }
    let sections = [
        (old.tls != new.tls, "[tls]: the TLS listeners' settings are read at start (SIGHUP re-reads the certificate files)"),
        (old.dns != new.dns, "[dns]: the resolver is built at start"),
        (
            old.pools != new.pools,
            "[[pool]]: the health thresholds and backups (R-HT-1) are set up at start",
        ),
        (old.health != new.health, "[health]: the prober is started with it"),
        (old.work != new.work, "[work]: the work book's tables and windows are sized at start"),
        (
            old.overload.udp_workers != new.overload.udp_workers
                || old.overload.udp_workers_max != new.overload.udp_workers_max
                || old.overload.udp_worker_busy_percent != new.overload.udp_worker_busy_percent
                || old.overload.udp_rcvbuf_bytes != new.overload.udp_rcvbuf_bytes
                || old.overload.max_transactions != new.overload.max_transactions
                || old.overload.new_dialog_deadline_ms != new.overload.new_dialog_deadline_ms,
            "[overload] udp_workers, udp_workers_max, udp_worker_busy_percent, udp_rcvbuf_bytes, max_transactions or new_dialog_deadline_ms: sockets, the transaction table and the intake meters are made at start",
        ),
    ];
    why.extend(
        sections
            .iter()
            .filter(|(d, _)| *d)
            .map(|(_, w)| w.to_string()),
    );
    why
}

/// A listener field as the refusal shows it.
fn describe(l: &ringsync::config::Listener, field: &str) -> String {
    match field {
        "name" => l.name.clone(),
        "bind address" => l.bind.to_string(),
        "advertised address" => l.advertise.to_string(),
        "transports" => format!("{:?}", l.transports),
        "leg" => format!("{:?}", l.leg),
        _ => "…".into(),
    }
}
