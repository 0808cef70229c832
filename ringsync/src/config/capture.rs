//! `[capture]`: copies of the SIP messages sip-gate receives and sends, and
//! of media-ctl's ng commands and answers, to HEP v3 collectors (HOMER,
//! `sngrep -L`). Changes apply on reload; without the section nothing is
//! captured. The sending itself is [`crate::capture`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rustls_pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ConfigError;
use super::tls::{read_certs, TlsConfig};
use super::types::Listener;
use super::validator::Validator;

/// The most copies waiting for the sender (`queue`).
pub const MAX_CAPTURE_QUEUE: usize = 1 << 20;
/// The longest `auth_key`.
const MAX_AUTH_KEY: usize = 256;

/// How a collector is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CollectorTransport {
    /// One HEP packet a datagram.
    Udp,
    /// HEP packets back to back on one connection, reconnected when lost.
    Tcp,
    /// As [`CollectorTransport::Tcp`], in TLS: the collector's certificate
    /// checked against [`CaptureTls`].
    Tls,
}

/// One HEP collector, `udp:IP:PORT`, `tcp:IP:PORT` or `tls:IP:PORT` in
/// the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Collector {
    /// UDP or TCP.
    pub transport: CollectorTransport,
    /// Its address.
    pub addr: SocketAddr,
}

impl fmt::Display for Collector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self.transport {
            CollectorTransport::Udp => "udp",
            CollectorTransport::Tcp => "tcp",
            CollectorTransport::Tls => "tls",
        };
        write!(f, "{t}:{}", self.addr)
    }
}

impl std::str::FromStr for Collector {
    type Err = String;

    fn from_str(s: &str) -> Result<Collector, String> {
        let (t, addr) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: write udp:IP:PORT, tcp:IP:PORT or tls:IP:PORT"))?;
        let transport = match t {
            "udp" => CollectorTransport::Udp,
            "tcp" => CollectorTransport::Tcp,
            "tls" => CollectorTransport::Tls,
            _ => {
                return Err(format!(
                    "`{s}`: the transport is udp, tcp or tls, not `{t}`"
                ))
            }
        };
        let addr = addr
            .parse::<SocketAddr>()
            .map_err(|e| format!("`{s}`: {e} (an IP address and port, [v6]:port for IPv6)"))?;
        if addr.port() == 0 || addr.ip().is_unspecified() {
            return Err(format!("`{s}`: a collector needs an address and a port"));
        }
        Ok(Collector { transport, addr })
    }
}

/// `[capture]`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaptureConfig {
    /// Where every copy goes (each collector gets every copy).
    pub collectors: Vec<Collector>,
    /// The HEP capture agent id (chunk 0x000c) of a node not in `agents`.
    pub agent_id: u32,
    /// The agent id of each node by its name (sip-gate's `--node`,
    /// media-ctl's `--node`), so HOMER tells the nodes of a site apart.
    pub agents: BTreeMap<String, u32>,
    /// The HEP auth key (chunk 0x000e) the collector expects, if any.
    pub auth_key: Option<String>,
    /// Only messages on these sip-gate listeners, by name (empty: all).
    pub listeners: Vec<String>,
    /// Only these SIP methods (a response counts as its CSeq's method;
    /// empty: all), upper case.
    pub methods: Vec<String>,
    /// The share of REGISTER transactions captured, in millionths
    /// (`register_sample = 0.1` is 100000), chosen by Call-ID.
    pub register_per_million: u32,
    /// How many copies may wait for the sender; past it copies are dropped.
    pub queue: usize,
    /// Whether media-ctl sends its ng commands and answers.
    pub media: bool,
    /// How `tls:` collectors are checked; set when there is one.
    pub tls: Option<CaptureTls>,
}

/// What a `tls:` collector's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaptureTls {
    /// The CA file (PEM): `[capture] ca`, else `[tls] ca`.
    pub ca: PathBuf,
    /// Its certificates as read with the site file (a reload that reads
    /// others starts a new sender).
    #[serde(skip)]
    pub roots: Vec<CertificateDer<'static>>,
    /// The name the certificate must be for; `None`: each collector's IP
    /// address, as the gate checks the servers it connects to.
    pub server_name: Option<String>,
}

impl CaptureConfig {
    /// The agent id of the node named `node` (`None`: unnamed).
    pub fn agent_for(&self, node: Option<&str>) -> u32 {
        node.and_then(|n| self.agents.get(n).copied())
            .unwrap_or(self.agent_id)
    }
}

/// `[capture]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapture {
    collectors: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    agent_id: u32,
    #[serde(default)]
    agents: BTreeMap<String, u32>,
    #[serde(default)]
    auth_key: Option<Spanned<String>>,
    #[serde(default)]
    listeners: Vec<Spanned<String>>,
    #[serde(default)]
    methods: Vec<Spanned<String>>,
    #[serde(default)]
    register_sample: Option<Spanned<f64>>,
    #[serde(default)]
    queue: Option<Spanned<usize>>,
    #[serde(default = "yes")]
    media: bool,
    #[serde(default)]
    ca: Option<Spanned<PathBuf>>,
    #[serde(default)]
    server_name: Option<Spanned<String>>,
}

fn yes() -> bool {
    true
}

impl Validator<'_> {
    /// `[capture]`: collectors parse, listeners exist, methods are tokens,
    /// the sample is a share, the queue is bounded, a `tls:` collector has
    /// a CA (its own or `[tls] ca`).
    pub(super) fn capture(
        &self,
        raw: Option<&Spanned<RawCapture>>,
        listeners: &[Listener],
        site_tls: Option<&TlsConfig>,
    ) -> Result<Option<CaptureConfig>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        let raw = raw.get_ref();
        if raw.collectors.get_ref().is_empty() {
            return Err(self.err(
                raw.collectors.span(),
                "capture.collectors",
                "name at least one collector (udp:IP:PORT, tcp:IP:PORT or tls:IP:PORT)",
            ));
        }
        let mut collectors = Vec::new();
        for c in raw.collectors.get_ref() {
            let parsed = c
                .get_ref()
                .parse::<Collector>()
                .map_err(|m| self.err(c.span(), "capture.collectors", m))?;
            collectors.push(parsed);
        }
        for name in &raw.listeners {
            if !listeners.iter().any(|l| &l.name == name.get_ref()) {
                return Err(self.err(
                    name.span(),
                    "capture.listeners",
                    format!("no listener is named `{}`", name.get_ref()),
                ));
            }
        }
        let mut methods = Vec::new();
        for m in &raw.methods {
            let t = m.get_ref();
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
                return Err(self.err(
                    m.span(),
                    "capture.methods",
                    format!("`{t}` is not a SIP method"),
                ));
            }
            methods.push(t.to_ascii_uppercase());
        }
        let register_per_million = match &raw.register_sample {
            None => 1_000_000,
            Some(s) if (0.0..=1.0).contains(s.get_ref()) => (s.get_ref() * 1e6).round() as u32,
            Some(s) => {
                return Err(self.err(
                    s.span(),
                    "capture.register_sample",
                    "a share from 0.0 (no REGISTER) to 1.0 (every one)",
                ))
            }
        };
        let queue = match &raw.queue {
            None => 8192,
            Some(q) if (1..=MAX_CAPTURE_QUEUE).contains(q.get_ref()) => *q.get_ref(),
            Some(q) => {
                return Err(self.err(
                    q.span(),
                    "capture.queue",
                    format!("from 1 to {MAX_CAPTURE_QUEUE} copies"),
                ))
            }
        };
        let auth_key = match &raw.auth_key {
            Some(k) if k.get_ref().is_empty() || k.get_ref().len() > MAX_AUTH_KEY => {
                return Err(self.err(
                    k.span(),
                    "capture.auth_key",
                    format!("from 1 to {MAX_AUTH_KEY} bytes (leave it out for none)"),
                ))
            }
            k => k.as_ref().map(|k| k.get_ref().clone()),
        };
        let tls = if collectors
            .iter()
            .any(|c| c.transport == CollectorTransport::Tls)
        {
            Some(self.capture_tls(raw, site_tls)?)
        } else {
            None
        };
        Ok(Some(CaptureConfig {
            collectors,
            agent_id: raw.agent_id,
            agents: raw.agents.clone(),
            auth_key,
            listeners: raw.listeners.iter().map(|l| l.get_ref().clone()).collect(),
            methods,
            register_per_million,
            queue,
            media: raw.media,
            tls,
        }))
    }

    /// The CA and server name of `tls:` collectors.
    fn capture_tls(
        &self,
        raw: &RawCapture,
        site_tls: Option<&TlsConfig>,
    ) -> Result<CaptureTls, ConfigError> {
        let (ca, roots) = match (&raw.ca, site_tls.and_then(|t| t.ca.as_ref())) {
            (Some(p), _) => {
                let base = self.loc.path.parent().unwrap_or(Path::new("."));
                let path = base.join(p.get_ref());
                let roots = read_certs(&path).map_err(|m| self.err(p.span(), "capture.ca", m))?;
                (path, roots)
            }
            (None, Some(site_ca)) => {
                // Read when `[tls]` was: readable and PEM.
                let roots = read_certs(site_ca)
                    .map_err(|m| self.err(raw.collectors.span(), "tls.ca", m))?;
                (site_ca.clone(), roots)
            }
            (None, None) => return Err(self.err(
                raw.collectors.span(),
                "capture.ca",
                "a tls: collector needs the CA its certificate chains to: `ca` here or `[tls] ca`",
            )),
        };
        let server_name = match &raw.server_name {
            Some(n) => {
                ServerName::try_from(n.get_ref().as_str()).map_err(|e| {
                    self.err(
                        n.span(),
                        "capture.server_name",
                        format!("`{}`: {e}", n.get_ref()),
                    )
                })?;
                Some(n.get_ref().clone())
            }
            None => None,
        };
        Ok(CaptureTls {
            ca,
            roots,
            server_name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{load, GOOD};
    use super::*;
    use crate::config::SiteConfig;

    #[test]
    fn capture_as_written_and_its_defaults() {
        assert_eq!(load(GOOD).unwrap().capture, None);
        let text = format!(
            "{GOOD}\n[capture]\ncollectors = [\"udp:10.0.0.9:9060\", \"tcp:[::1]:9061\"]\n\
             agent_id = 7\nagents = {{ gate-a = 2001 }}\nmethods = [\"invite\", \"BYE\"]\n\
             listeners = [\"subscribers\"]\nregister_sample = 0.25\n"
        );
        let c = load(&text).unwrap_or_else(|e| panic!("{e}"));
        let cap = c.capture.unwrap();
        assert_eq!(cap.collectors[0].to_string(), "udp:10.0.0.9:9060");
        assert_eq!(cap.collectors[1].transport, CollectorTransport::Tcp);
        assert_eq!(
            (cap.agent_for(Some("gate-a")), cap.agent_for(None)),
            (2001, 7)
        );
        assert_eq!(cap.methods, ["INVITE", "BYE"]);
        assert_eq!(cap.register_per_million, 250_000);
        assert_eq!((cap.queue, cap.media, cap.auth_key), (8192, true, None));
    }

    #[test]
    fn bad_capture_settings_are_refused_naming_the_field() {
        for (section, field, says) in [
            ("collectors = []", "capture.collectors", "at least one"),
            (
                "collectors = [\"10.0.0.9:9060\"]",
                "capture.collectors",
                "udp, tcp or tls",
            ),
            (
                "collectors = [\"udp:10.0.0.9\"]",
                "capture.collectors",
                "IP address and port",
            ),
            (
                "collectors = [\"udp:0.0.0.0:9060\"]",
                "capture.collectors",
                "an address",
            ),
            (
                "collectors = [\"udp:10.0.0.9:9060\"]\nlisteners = [\"nope\"]",
                "capture.listeners",
                "`nope`",
            ),
            (
                "collectors = [\"udp:10.0.0.9:9060\"]\nmethods = [\"IN VITE\"]",
                "capture.methods",
                "not a SIP method",
            ),
            (
                "collectors = [\"udp:10.0.0.9:9060\"]\nregister_sample = 1.5",
                "capture.register_sample",
                "0.0",
            ),
            (
                "collectors = [\"udp:10.0.0.9:9060\"]\nqueue = 0",
                "capture.queue",
                "from 1",
            ),
            (
                "collectors = [\"udp:10.0.0.9:9060\"]\nauth_key = \"\"",
                "capture.auth_key",
                "1 to 256",
            ),
        ] {
            let e = load(&format!("{GOOD}\n[capture]\n{section}\n")).unwrap_err();
            assert_eq!(e.field, field, "{section}: {e}");
            assert!(e.to_string().contains(says), "{section}: {e}");
        }
    }

    /// A `tls:` collector: its CA from `[capture] ca` (relative to the
    /// site file) or `[tls] ca`, its certificates read with the file; the
    /// name checked is `server_name` or the collector's IP address.
    #[test]
    fn a_tls_collector_has_a_ca_and_a_server_name() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["homer.example".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("homer-ca.pem"), cert.pem()).unwrap();
        let at = |text: &str| SiteConfig::from_str_at(text, &dir.path().join("site.toml"));
        let section = "[capture]\ncollectors = [\"tls:10.0.0.9:9061\", \"udp:10.0.0.9:9060\"]";
        let c = at(&format!(
            "{GOOD}\n{section}\nca = \"homer-ca.pem\"\nserver_name = \"homer.example\"\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let cap = c.capture.unwrap();
        assert_eq!(cap.collectors[0].to_string(), "tls:10.0.0.9:9061");
        let tls = cap.tls.unwrap();
        assert_eq!(tls.ca, dir.path().join("homer-ca.pem"));
        assert_eq!(tls.roots, [cert.der().clone()]);
        assert_eq!(tls.server_name.as_deref(), Some("homer.example"));
        // Without a tls: collector, nothing of it is kept.
        let udp = "[capture]\ncollectors = [\"udp:10.0.0.9:9060\"]\nca = \"homer-ca.pem\"\n";
        assert_eq!(
            at(&format!("{GOOD}\n{udp}")).unwrap().capture.unwrap().tls,
            None
        );

        for (extra, field, says) in [
            ("", "capture.ca", "`ca` here or `[tls] ca`"),
            ("ca = \"nope.pem\"", "capture.ca", "cannot read"),
            (
                "ca = \"homer-ca.pem\"\nserver_name = \"not a name\"",
                "capture.server_name",
                "`not a name`",
            ),
        ] {
            let e = at(&format!("{GOOD}\n{section}\n{extra}\n")).unwrap_err();
            assert_eq!(e.field, field, "{extra}: {e}");
            assert!(e.to_string().contains(says), "{extra}: {e}");
        }
    }
}
