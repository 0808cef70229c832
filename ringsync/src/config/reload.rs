//! What a running node may take from a site file read again (SIGHUP,
//! `systemctl reload`), and what only a restart may change.
//!
//! The checks here are the ones every node shares; a daemon adds its own
//! (sip-gate: its listeners' sockets). A reload is all or nothing: one
//! refusal and the node keeps the config in force, whole.

use super::SiteConfig;

/// Why a reloaded site file cannot be taken live: each reason names what
/// changed and why a restart is needed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}", path.display(), reasons.join("; "))]
pub struct ReloadRefused {
    /// The file read.
    pub path: std::path::PathBuf,
    /// One line per change a restart must make.
    pub reasons: Vec<String>,
}

/// The changes of `new` over `old` that only a restart may make, shared by
/// every node: the site's name and secret (the secret seals the
/// Record-Route tokens of dialogs in progress), the store, and an
/// instance removed, renamed, moved or given another
/// service (a node numbers the work it holds by instance, in file order:
/// instances are added at the end).
pub fn restart_only(old: &SiteConfig, new: &SiteConfig) -> Vec<String> {
    let mut why = Vec::new();
    if old.site.name != new.site.name {
        why.push(format!(
            "[site] name `{}` -> `{}`: the site's identity in the store",
            old.site.name, new.site.name
        ));
    }
    if old.site.secret != new.site.secret {
        why.push(
            "[site] secret: it seals the Record-Route tokens of the dialogs in progress".into(),
        );
    }
    if old.store != new.store {
        why.push("[store]: the node follows the store it opened at start".into());
    }
    // `[admin]` is not checked here: each field belongs to one daemon
    // (`bind`, `tokens` and `tls_*` to `ringsync serve`, which re-reads the
    // tokens and TLS files on its own; `gate_bind` to sip-gate;
    // `media_bind` to media-ctl), so the daemon that reloads checks the
    // field it binds (sip-gate: `admin.gate_bind`).
    for (i, o) in old.instances.iter().enumerate() {
        match new.instances.get(i) {
            Some(n) if n.id == o.id && n.service == o.service => {}
            Some(n) if n.id == o.id => why.push(format!(
                "instance `{}`: service {} -> {}",
                o.id, o.service, n.service
            )),
            Some(n) => why.push(format!(
                "instance #{} is `{}`, was `{}`: a running node numbers its work by instance, \
                 so instances are only added after the last one",
                i + 1,
                n.id,
                o.id
            )),
            None => why.push(format!(
                "instance `{}` removed: a running node numbers its work by instance",
                o.id
            )),
        }
    }
    why
}
