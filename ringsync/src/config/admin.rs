//! `[admin]`: the admin API's files are resolved against the site file's
//! directory, and TLS needs both its certificate and its key.

use std::path::Path;

use super::error::ConfigError;
use super::types::AdminConfig;
use super::validator::Validator;

impl Validator<'_> {
    /// `[admin]`: relative paths of `tokens`, `tls_cert`, `tls_key` are
    /// taken from the site file's directory; TLS is both files or neither.
    pub(super) fn admin(&self, raw: AdminConfig) -> Result<AdminConfig, ConfigError> {
        let base = self.base();
        let at = |p: Option<std::path::PathBuf>| p.map(|p| base.join(p));
        let admin = AdminConfig {
            tokens: at(raw.tokens),
            tls_cert: at(raw.tls_cert),
            tls_key: at(raw.tls_key),
            ..raw
        };
        if admin.tls_cert.is_some() != admin.tls_key.is_some() {
            return Err(self.err(
                0..0,
                "admin",
                "tls_cert and tls_key go together: give both (HTTPS) or neither",
            ));
        }
        Ok(admin)
    }

    fn base(&self) -> &Path {
        self.loc.path.parent().unwrap_or(Path::new("."))
    }
}
