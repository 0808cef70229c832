//! The CLI's client of a remote `ringsync serve` (`--api URL`): one HTTP/1.1
//! request a connection, over TLS for `https://` URLs (the system's roots,
//! or `--ca-file` for a private CA), with the bearer token of
//! `--token-file`. An answer the API refuses becomes the same error the
//! store would have given the CLI on the store itself, so both modes print
//! the same and exit the same.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::CliError;
use crate::api::ErrorBody;

/// Time allowed for a whole exchange (a write on etcd may take 6 s).
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);
const MAX_BODY: usize = 64 << 20;
/// Where Debian, RHEL and Alpine keep the system's trusted roots.
const SYSTEM_ROOTS: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// A remote `ringsync serve`.
pub(super) struct Remote {
    base: Uri,
    token: Option<String>,
    tls: Option<TlsConnector>,
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}

impl Remote {
    /// The API at `url`, with the token in `token_file` and, for HTTPS,
    /// the roots of `ca_file` (else the system's).
    pub(super) fn new(
        url: &str,
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
    ) -> Result<Remote, CliError> {
        let base: Uri = url
            .trim_end_matches('/')
            .parse()
            .map_err(|e| usage(format!("--api {url}: not a URL: {e}")))?;
        let tls = match base.scheme_str() {
            Some("https") => Some(connector(ca_file)?),
            Some("http") => None,
            _ => {
                return Err(usage(format!(
                    "--api {url}: use an http:// or https:// URL"
                )))
            }
        };
        if base.host().is_none() {
            return Err(usage(format!("--api {url}: no host")));
        }
        let token = token_file.map(read_token).transpose()?;
        Ok(Remote { base, token, tls })
    }

    /// `method path` with a JSON body; the answer parsed as `T`.
    pub(super) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, CliError> {
        Ok(self.call_change(method, path, body).await?.0)
    }

    /// [`Remote::call`] for a change: also whether it changed anything
    /// (the API's `Ringsync-Changed: false` says it did not; an answer
    /// without the header is taken as a change).
    pub(super) async fn call_change<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<(T, bool), CliError> {
        let (_, changed, v) = self.answer(method, path, body, &[]).await?;
        Ok((v, changed))
    }

    /// `GET path` whose answer is `T` also under the statuses `also`
    /// (`GET /v1/wait` answers its timeout with 408 and the same body).
    pub(super) async fn get_also<T: DeserializeOwned>(
        &self,
        path: &str,
        also: &[u16],
    ) -> Result<(u16, T), CliError> {
        const NONE: Option<&()> = None;
        let (status, _, v) = self.answer(Method::GET, path, NONE, also).await?;
        Ok((status, v))
    }

    /// `method path` without a body; the status and the answer as text
    /// (a gate's admin port answers its one write in text).
    pub(super) async fn text(&self, method: Method, path: &str) -> Result<(u16, String), CliError> {
        let what = format!("{method} {}{path}", self.base);
        let (status, _, body) =
            tokio::time::timeout(TIMEOUT, self.exchange(method, path, Bytes::new()))
                .await
                .map_err(|_| CliError::Remote(format!("{what}: no answer within {TIMEOUT:?}")))?
                .map_err(|e| CliError::Remote(format!("{what}: {e}")))?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// One exchange: its status, whether it changed anything, its body as
    /// `T` (2xx or `also`), else the API's error.
    async fn answer<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        also: &[u16],
    ) -> Result<(u16, bool, T), CliError> {
        let bytes = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).map_err(std::io::Error::from)?),
            None => Bytes::new(),
        };
        let what = format!("{method} {}{path}", self.base);
        let exchange = self.exchange(method, path, bytes);
        let (status, changed, body) = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| CliError::Remote(format!("{what}: no answer within {TIMEOUT:?}")))?
            .map_err(|e| CliError::Remote(format!("{what}: {e}")))?;
        if !(200..300).contains(&status) && !also.contains(&status) {
            let message = serde_json::from_slice::<ErrorBody>(&body).map_or_else(
                |_| String::from_utf8_lossy(&body).trim().to_owned(),
                |b| b.error,
            );
            return Err(CliError::Api { status, message });
        }
        let v = serde_json::from_slice(&body).map_err(|e| {
            CliError::Remote(format!("{what}: the answer is not what was expected: {e}"))
        })?;
        Ok((status, changed, v))
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, bool, Bytes), String> {
        let host = self
            .base
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']']);
        let port = self
            .base
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let prefix = self.base.path().trim_end_matches('/');
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{prefix}{path}"))
            .header(HOST, self.base.authority().map_or("", |a| a.as_str()))
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/json");
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
        match &self.tls {
            Some(tls) => {
                let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS handshake failed: {e}"))?;
                send(TokioIo::new(stream), req).await
            }
            None => send(TokioIo::new(tcp), req).await,
        }
    }
}

async fn send<I>(io: I, req: Request<Full<Bytes>>) -> Result<(u16, bool, Bytes), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP exchange failed: {e}"))?;
    let conn = tokio::spawn(conn);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("HTTP exchange failed: {e}"))?;
    let status = resp.status().as_u16();
    let changed = resp
        .headers()
        .get(crate::api::CHANGED_HEADER)
        .is_none_or(|v| v.as_bytes() != b"false");
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    conn.abort();
    Ok((status, changed, body))
}

/// The token: the first line of the file that is neither empty nor a
/// `#` comment (so the whole output of `token add` can be saved as is).
fn read_token(path: &Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--token-file {}: {e}", path.display())))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .ok_or_else(|| usage(format!("--token-file {}: holds no token", path.display())))
}

fn connector(ca_file: Option<&Path>) -> Result<TlsConnector, CliError> {
    let mut roots = RootCertStore::empty();
    let files: Vec<&Path> = match ca_file {
        Some(f) => vec![f],
        None => SYSTEM_ROOTS
            .iter()
            .map(Path::new)
            .filter(|p| p.exists())
            .collect(),
    };
    for f in &files {
        let certs = CertificateDer::pem_file_iter(f)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| usage(format!("CA file {}: {e}", f.display())))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 && ca_file.is_some() {
            return Err(usage(format!(
                "CA file {}: no usable certificate",
                f.display()
            )));
        }
    }
    if roots.is_empty() {
        return Err(usage(
            "no trusted roots for https: give --ca-file (no system roots found)",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| usage(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A path segment, percent-encoded (profile names may hold any character).
pub(super) fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
