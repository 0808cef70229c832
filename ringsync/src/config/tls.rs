//! `[tls]`: the certificate sip-gate presents on its TLS listeners (RFC 3261
//! 26, listeners with `transports = ["tls", ...]`), the CA bundle it checks
//! servers against when it opens TLS connections itself, and the handshake
//! and reload timings.
//!
//! The files are read here once, so a site whose certificate is missing,
//! unreadable, not PEM, or does not fit its key fails `--check` and start
//! with the field named, not at the first handshake.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ConfigError;
use super::types::{Listener, Transport};
use super::validator::Validator;

/// sip-gate's TLS settings (`[tls]`), required when a listener serves TLS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsConfig {
    /// Certificate chain (PEM), leaf first, presented on every TLS listener.
    pub cert: PathBuf,
    /// Private key (PEM, PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key: PathBuf,
    /// CA certificates (PEM) that servers the gate connects to over TLS must
    /// chain to. Without it the gate opens no TLS connection itself (a
    /// `sips:` or `transport=tls` next hop cannot be reached).
    pub ca: Option<PathBuf>,
    /// A client that has not completed its handshake after this many
    /// milliseconds is disconnected (slowloris). Default 5000.
    pub handshake_timeout_ms: u32,
    /// How often the certificate and key files are checked for changes, in
    /// milliseconds; SIGHUP reloads at once. Default 1000.
    pub reload_poll_ms: u32,
}

impl TlsConfig {
    /// The handshake deadline as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.handshake_timeout_ms.into())
    }

    /// The reload poll interval as a duration.
    pub fn reload_poll(&self) -> Duration {
        Duration::from_millis(self.reload_poll_ms.into())
    }
}

/// `[tls]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    #[serde(default)]
    cert: Option<Spanned<PathBuf>>,
    #[serde(default)]
    key: Option<Spanned<PathBuf>>,
    #[serde(default)]
    ca: Option<Spanned<PathBuf>>,
    #[serde(default)]
    handshake_timeout_ms: Option<Spanned<u32>>,
    #[serde(default)]
    reload_poll_ms: Option<Spanned<u32>>,
}

impl Validator<'_> {
    /// `[tls]`: present with a usable certificate and key when a listener
    /// serves TLS; a listener serves TLS or TCP, not both (one port, one
    /// stream transport); relative paths from the site file's directory.
    pub(super) fn tls(
        &self,
        raw: Option<&Spanned<RawTls>>,
        listeners: &[Listener],
    ) -> Result<Option<TlsConfig>, ConfigError> {
        for (i, l) in listeners.iter().enumerate() {
            let has = |t| l.transports.contains(&t);
            if has(Transport::Tls) && has(Transport::Tcp) {
                return Err(self.err(
                    0..0,
                    format!("listener[{i}].transports"),
                    "\"tls\" and \"tcp\" on one listener: give TLS a listener (and port) of its own",
                ));
            }
        }
        // `wss` is TLS under the WebSocket: the same certificate.
        let wanted = listeners.iter().position(|l| {
            l.transports.contains(&Transport::Tls) || l.transports.contains(&Transport::Wss)
        });
        let Some(raw) = raw else {
            return match wanted {
                Some(i) => Err(self.err(
                    0..0,
                    "tls",
                    format!(
                        "listener[{i}] serves \"tls\" or \"wss\": a [tls] section with cert and key is needed"
                    ),
                )),
                None => Ok(None),
            };
        };
        let span = raw.span();
        let r = raw.get_ref();
        let base = self.loc.path.parent().unwrap_or(Path::new("."));
        let need = |v: &Option<Spanned<PathBuf>>, field: &str| match v {
            Some(p) => Ok((base.join(p.get_ref()), p.span())),
            None => Err(self.err(span.clone(), format!("tls.{field}"), "missing")),
        };
        let (cert, cert_span) = need(&r.cert, "cert")?;
        let (key, key_span) = need(&r.key, "key")?;
        let chain = read_certs(&cert).map_err(|m| self.err(cert_span, "tls.cert", m))?;
        let pk = read_key(&key).map_err(|m| self.err(key_span.clone(), "tls.key", m))?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, pk, &provider).map_err(|e| {
            self.err(
                key_span,
                "tls.key",
                format!("does not fit the certificate {}: {e}", cert.display()),
            )
        })?;
        let ca = match &r.ca {
            Some(p) => {
                let path = base.join(p.get_ref());
                read_certs(&path).map_err(|m| self.err(p.span(), "tls.ca", m))?;
                Some(path)
            }
            None => None,
        };
        let positive = |v: &Option<Spanned<u32>>, field: &str, default: u32| match v {
            Some(n) if *n.get_ref() == 0 => {
                Err(self.err(n.span(), format!("tls.{field}"), "must be positive"))
            }
            Some(n) => Ok(*n.get_ref()),
            None => Ok(default),
        };
        Ok(Some(TlsConfig {
            cert,
            key,
            ca,
            handshake_timeout_ms: positive(&r.handshake_timeout_ms, "handshake_timeout_ms", 5000)?,
            reload_poll_ms: positive(&r.reload_poll_ms, "reload_poll_ms", 1000)?,
        }))
    }
}

/// The PEM certificates of a file, at least one.
pub(super) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// The PEM private key of a file.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| format!("{}: no PEM private key in it: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::SiteConfig;
    use super::*;

    const SITE: &str = r#"
[site]
name = "t1"
[[server]]
name = "srv-a"
[[instance]]
id = "sg-a"
service = "sg"
server = "srv-a"
sip = "127.0.0.1:5080"
[[listener]]
name = "subs-tls"
bind = "127.0.0.1:5061"
transports = ["udp", "tls"]
mode = "balance"
pool = "sg"
leg = "subscriber"
"#;

    /// A key pair and self-signed certificate for 127.0.0.1, as PEM.
    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn load(dir: &Path, extra: &str) -> Result<SiteConfig, ConfigError> {
        SiteConfig::from_str_at(&format!("{SITE}{extra}"), &dir.join("site.toml"))
    }

    #[test]
    fn tls_listener_loads_with_relative_paths_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), &cert).unwrap();
        let c = load(
            dir.path(),
            "[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"ca.pem\"\n",
        )
        .unwrap();
        let tls = c.tls.unwrap();
        assert_eq!(tls.cert, dir.path().join("c.pem"));
        assert_eq!(tls.ca, Some(dir.path().join("ca.pem")));
        assert_eq!(tls.handshake_timeout(), Duration::from_secs(5));
        assert_eq!(tls.reload_poll(), Duration::from_secs(1));
        assert_eq!(
            c.listeners[0].transports,
            vec![Transport::Udp, Transport::Tls]
        );
    }

    #[test]
    fn tls_errors_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        let (_, other_key) = pair();
        let at = |n: &str| dir.path().join(n);
        std::fs::write(at("c.pem"), &cert).unwrap();
        std::fs::write(at("k.pem"), &key).unwrap();
        std::fs::write(at("other.pem"), other_key).unwrap();
        std::fs::write(at("junk.pem"), "not a certificate").unwrap();
        let ok = "cert = \"c.pem\"\nkey = \"k.pem\"\n";
        for (tls, field, says) in [
            ("", "tls", "[tls] section"),
            ("[tls]\nkey = \"k.pem\"\n", "tls.cert", "missing"),
            ("[tls]\ncert = \"c.pem\"\n", "tls.key", "missing"),
            (
                "[tls]\ncert = \"nope.pem\"\nkey = \"k.pem\"\n",
                "tls.cert",
                "cannot read",
            ),
            (
                "[tls]\ncert = \"junk.pem\"\nkey = \"k.pem\"\n",
                "tls.cert",
                "no PEM certificate",
            ),
            (
                "[tls]\ncert = \"c.pem\"\nkey = \"junk.pem\"\n",
                "tls.key",
                "no PEM private key",
            ),
            (
                "[tls]\ncert = \"c.pem\"\nkey = \"other.pem\"\n",
                "tls.key",
                "does not fit",
            ),
            (
                &format!("[tls]\n{ok}ca = \"gone.pem\"\n"),
                "tls.ca",
                "cannot read",
            ),
            (
                &format!("[tls]\n{ok}handshake_timeout_ms = 0\n"),
                "tls.handshake_timeout_ms",
                "positive",
            ),
            (
                &format!("[tls]\n{ok}reload_poll_ms = 0\n"),
                "tls.reload_poll_ms",
                "positive",
            ),
        ] {
            let e = load(dir.path(), tls).unwrap_err();
            assert_eq!(e.field, field, "{tls}: {e}");
            assert!(e.to_string().contains(says), "{tls}: {e}");
        }
        let e = load(dir.path(), &format!("[tls]\n{ok}insecure = true\n")).unwrap_err();
        assert!(e.to_string().contains("insecure"), "{e}");
        let both = SITE.replace("[\"udp\", \"tls\"]", "[\"tcp\", \"tls\"]");
        let e =
            SiteConfig::from_str_at(&format!("{both}[tls]\n{ok}"), &dir.path().join("site.toml"))
                .unwrap_err();
        assert_eq!(e.field, "listener[0].transports", "{e}");
    }

    #[test]
    fn tls_section_without_tls_listener_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair();
        std::fs::write(dir.path().join("c.pem"), &cert).unwrap();
        std::fs::write(dir.path().join("k.pem"), key).unwrap();
        let plain = SITE.replace("[\"udp\", \"tls\"]", "[\"udp\"]");
        let c = SiteConfig::from_str_at(
            &format!("{plain}[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n"),
            &dir.path().join("site.toml"),
        )
        .unwrap();
        assert!(c.tls.is_some());
        let c = SiteConfig::from_str_at(&plain, &dir.path().join("site.toml")).unwrap();
        assert!(c.tls.is_none());
    }
}
