//! The [`Validator`] every section check takes to place its errors, and the
//! small helpers they share. A leaf below `validate` and the section modules
//! (`ap`, `limits`, `media`, `services`, `tls`, `admin`), so none of them
//! imports another to reach it (issue 24).

use toml::Spanned;

use super::error::{ConfigError, Locator};
use super::types::{Instance, Service};

type Result<T> = std::result::Result<T, ConfigError>;

/// Checks sections of one file; section checks in sibling modules take it
/// to place their errors.
pub(super) struct Validator<'a> {
    pub(super) loc: Locator<'a>,
}

/// The service of the instance with this id.
pub(super) fn service_of<'a>(instances: &'a [Instance], id: &str) -> Option<&'a Service> {
    instances.iter().find(|i| i.id == id).map(|i| &i.service)
}

impl Validator<'_> {
    /// An error at `span` (`0..0`: no line) in `field`.
    pub(super) fn err(
        &self,
        span: std::ops::Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        self.loc.err(span, field, message)
    }

    /// A name at `field`, checked with [`check_name`].
    pub(super) fn name(&self, name: &Spanned<String>, field: impl Into<String>) -> Result<()> {
        check_name(name.get_ref()).map_err(|m| self.err(name.span(), field, m))
    }
}

/// Names go into Record-Route tokens, metric labels and file names: keep them tame.
pub(super) fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 64 {
        return Err("must be at most 64 characters".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "`{name}` has `{c}`; use letters, digits, `-`, `_`, `.`"
        ));
    }
    Ok(())
}
