//! Configuration errors: the file, the line and column, the dotted field and
//! what is wrong, so an operator fixing a config at 3 a.m. does not have to
//! guess which `[[instance]]` of forty is meant.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A configuration error: which file, where in it, which field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file the error is in.
    pub file: PathBuf,
    /// 1-based line, when the error can be placed.
    pub line: Option<usize>,
    /// 1-based column, when the error can be placed.
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `instance[2].server`.
    pub field: String,
    /// What is wrong, in words an operator understands.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if !self.field.is_empty() {
            write!(f, ": field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Places errors in one file's text.
#[derive(Clone, Copy)]
pub(super) struct Locator<'a> {
    pub(super) text: &'a str,
    pub(super) path: &'a Path,
}

impl Locator<'_> {
    /// An error at `span` of the text. The empty span `0..0` marks a value
    /// that is not in the file (a default), so the error has no line.
    pub(super) fn err(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = if span.start == 0 && span.end == 0 {
            (None, None)
        } else {
            let (l, c) = line_col(self.text, span.start);
            (Some(l), Some(c))
        };
        ConfigError {
            file: self.path.to_owned(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    /// A TOML syntax or shape error, placed where the parser stopped, with
    /// the field there when the text has one (serde's own errors name none).
    pub(super) fn syntax(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span();
        let (line, column) = span
            .as_ref()
            .map(|s| line_col(self.text, s.start))
            .map_or((None, None), |(l, c)| (Some(l), Some(c)));
        let field = span
            .as_ref()
            .and_then(|s| super::place::field_at(self.text, s))
            .unwrap_or_default();
        let message = e.message().trim();
        ConfigError {
            file: self.path.to_owned(),
            line,
            column,
            field,
            message: format!("{message}{}", address_hint(message)),
        }
    }
}

/// A file that cannot be read at all.
pub(super) fn unreadable(path: &Path, e: &std::io::Error) -> ConfigError {
    ConfigError {
        file: path.to_owned(),
        line: None,
        column: None,
        field: String::new(),
        message: format!("cannot read: {e}"),
    }
}

/// What an address field takes, after std's parse error: its message
/// alone (`invalid socket address syntax`) does not say that a host name
/// is no address. Compared with the messages std gives, not a copy of them.
fn address_hint(message: &str) -> &'static str {
    let socket = "-"
        .parse::<std::net::SocketAddr>()
        .err()
        .map(|e| e.to_string());
    let ip = "-".parse::<std::net::IpAddr>().err().map(|e| e.to_string());
    if socket.as_deref() == Some(message) {
        " (expected IP:port, e.g. \"127.0.0.1:5060\" or \"[::1]:5060\"; host names are not resolved)"
    } else if ip.as_deref() == Some(message) {
        // ipnet's networks fail with the same words as std's addresses.
        " (an IP address or network, e.g. \"10.0.0.1\" or \"10.0.0.0/8\"; host names are not resolved)"
    } else {
        ""
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = offset
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}
