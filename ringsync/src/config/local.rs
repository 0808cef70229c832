//! The addresses a daemon of the site binds, and which of them this host
//! does not have, for `--check`.
//!
//! `--check` binds nothing: it may run beside the daemon it checks, on a
//! host being prepared, or in CI. So it cannot know whether a port is in
//! use (only a bind tells, and a bind, even released at once, is what
//! `--check` promises not to do); it can know whether the host has the
//! address at all, from its interfaces, which is the mistake a copied site
//! file makes. A daemon that does bind and fails names the listener or
//! field and the address itself.

use std::io;
use std::net::{IpAddr, SocketAddr};

use super::SiteConfig;

/// A daemon that binds addresses of the site file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    /// `sip-gate`: its listeners and `admin.gate_bind`.
    SipGate,
    /// `media-ctl`: `media.ng_bind` and `admin.media_bind`.
    MediaCtl,
}

/// One address a daemon binds, and where the site file sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The dotted field, e.g. `listener[1].bind` or `admin.gate_bind`.
    pub field: String,
    /// What binds it, e.g. `listener "providers"` or `admin endpoint`.
    pub what: String,
    /// The address.
    pub addr: SocketAddr,
}

impl SiteConfig {
    /// The addresses `daemon` binds, as the file sets them (command-line
    /// overrides are the caller's).
    pub fn bindings(&self, daemon: Daemon) -> Vec<Binding> {
        let one = |field: &str, what: &str, addr| Binding {
            field: field.to_owned(),
            what: what.to_owned(),
            addr,
        };
        match daemon {
            Daemon::SipGate => {
                let mut b: Vec<Binding> = self
                    .listeners
                    .iter()
                    .enumerate()
                    .map(|(i, l)| Binding {
                        field: format!("listener[{i}].bind"),
                        what: format!("listener \"{}\"", l.name),
                        addr: l.bind,
                    })
                    .collect();
                b.push(one(
                    "admin.gate_bind",
                    "admin endpoint",
                    self.admin.gate_bind,
                ));
                b
            }
            Daemon::MediaCtl => vec![
                one("media.ng_bind", "ng socket", self.media.ng_bind),
                one("admin.media_bind", "admin endpoint", self.admin.media_bind),
            ],
        }
    }
}

/// What `--check` warns about for `daemon`: each address of the site file
/// it would bind that this host does not have, named by field and by what
/// binds it; one warning instead if the host's addresses cannot be read.
pub fn check_warnings(config: &SiteConfig, daemon: Daemon) -> Vec<String> {
    let file = config.path.display();
    let host = match host_addresses() {
        Ok(h) => h,
        Err(e) => return vec![format!("{file}: cannot read this host's addresses: {e}")],
    };
    not_local(config.bindings(daemon), &host)
        .into_iter()
        .map(|b| {
            format!(
                "{file}: field `{}`: {} would bind {}, but no interface of this \
                 host has {}: binding it will fail",
                b.field,
                b.what,
                b.addr,
                b.addr.ip()
            )
        })
        .collect()
}

/// The IP addresses of this host's interfaces.
pub fn host_addresses() -> io::Result<Vec<IpAddr>> {
    let all = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(all
        .filter_map(|i| i.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect())
}

/// Can a socket be bound to `ip` on a host with these addresses? The
/// wildcard (0.0.0.0, ::) and all of loopback (Linux answers for the whole
/// of 127.0.0.0/8 on `lo`) are, besides the host's own.
pub fn is_local(ip: IpAddr, host: &[IpAddr]) -> bool {
    ip.is_unspecified() || ip.is_loopback() || host.contains(&ip)
}

/// The bindings whose address this host does not have.
pub fn not_local(bindings: Vec<Binding>, host: &[IpAddr]) -> Vec<Binding> {
    bindings
        .into_iter()
        .filter(|b| !is_local(b.addr.ip(), host))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_loopback_and_own_addresses_are_local() {
        let host: Vec<IpAddr> = vec!["10.1.2.3".parse().unwrap(), "fd00::7".parse().unwrap()];
        for ip in [
            "0.0.0.0",
            "::",
            "127.0.0.1",
            "127.9.8.7",
            "::1",
            "10.1.2.3",
            "fd00::7",
        ] {
            assert!(is_local(ip.parse().unwrap(), &host), "{ip}");
        }
        for ip in ["10.1.2.4", "192.0.2.1", "fd00::8"] {
            assert!(!is_local(ip.parse().unwrap(), &host), "{ip}");
        }
    }

    #[test]
    fn this_host_has_its_loopback() {
        let host = host_addresses().unwrap();
        assert!(host.contains(&IpAddr::from([127, 0, 0, 1])), "{host:?}");
    }
}
