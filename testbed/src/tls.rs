//! The certificate a test or benchmark's gate serves TLS (and WSS) with:
//! a self-signed leaf, written where a site file's `[tls]` section finds
//! it by default (`cert.pem`, `key.pem` next to the site file).

use std::path::Path;

use rustls_pki_types::CertificateDer;

use crate::{Error, Result};

/// A self-signed certificate for `name` (a host name or an IP address as
/// text) and its key, written as `dir/cert.pem` and `dir/key.pem`; the
/// certificate, for the clients to trust.
pub fn self_signed(dir: &Path, name: &str) -> Result<CertificateDer<'static>> {
    let cert_error = |e: rcgen::Error| Error::Certificate {
        name: name.to_owned(),
        reason: e.to_string(),
    };
    let key = rcgen::KeyPair::generate().map_err(cert_error)?;
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .and_then(|p| p.self_signed(&key))
        .map_err(cert_error)?;
    let write = |file: &str, text: String| {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|source| Error::File { path, source })
    };
    write("cert.pem", cert.pem())?;
    write("key.pem", key.serialize_pem())?;
    Ok(cert.der().clone())
}

#[cfg(test)]
mod tests {
    use rustls_pki_types::pem::PemObject;

    use super::*;

    #[test]
    fn the_written_certificate_is_the_one_returned() {
        let dir = tempfile::tempdir().unwrap();
        let cert = self_signed(dir.path(), "127.0.0.1").unwrap();
        let read = CertificateDer::from_pem_file(dir.path().join("cert.pem")).unwrap();
        assert_eq!(read, cert);
        let key = std::fs::read_to_string(dir.path().join("key.pem")).unwrap();
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    }
}
