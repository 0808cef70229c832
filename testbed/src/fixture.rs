//! One builder for the site files tests write: the `[site]` header with a
//! test secret, the embedded store, probes off, servers, instances and
//! listeners, each a line of the test instead of a page of TOML. What a
//! test needs beyond these (an `[admin]`, `[work]` or `[tcp]` section, an
//! account) goes in with [`SiteFile::section`] or [`SiteFile::raw`].
//!
//! The text is checked by ringsync's own loader when written
//! ([`SiteFile::write`]), so a fixture that does not load fails where it
//! is built, naming the line, not later in the binary under test.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// A site file being built; [`SiteFile::write`] puts it in a directory.
#[derive(Debug, Clone)]
pub struct SiteFile {
    text: String,
}

/// How a listener picks the instance of a new dialog.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// `mode = "balance"` over the instances of `pool` (a service).
    Balance(&'a str),
    /// `mode = "guard"` in front of one instance.
    Guard(&'a str),
}

impl SiteFile {
    /// `[site] name = NAME` with a secret made from the name (long enough
    /// for the loader), the embedded store in `profiles.json` beside the
    /// file, and health probes off (`interval_ms = 0`): the site most tests
    /// start from.
    pub fn new(name: &str) -> SiteFile {
        SiteFile {
            text: format!(
                "[site]\nname = \"{name}\"\nsecret = \"{name}-test-secret-0123456789\"\n\n\
                 [store]\nkind = \"embedded\"\npath = \"profiles.json\"\n"
            ),
        }
        .section("health", "interval_ms = 0")
    }

    /// `[NAME]` with `body` (TOML lines) under it.
    pub fn section(mut self, name: &str, body: &str) -> SiteFile {
        let _ = write!(self.text, "\n[{name}]\n{}\n", body.trim_end());
        self
    }

    /// Replaces the `[health]` section `new` wrote with `body`.
    pub fn health(mut self, body: &str) -> SiteFile {
        self.text = self.text.replace(
            "\n[health]\ninterval_ms = 0\n",
            &format!("\n[health]\n{}\n", body.trim_end()),
        );
        self
    }

    /// `[admin]` with the gate's and media-ctl's admin addresses.
    pub fn admin(self, gate: SocketAddr, media: SocketAddr) -> SiteFile {
        self.section(
            "admin",
            &format!("gate_bind = \"{gate}\"\nmedia_bind = \"{media}\""),
        )
    }

    /// A `[[server]]` for each of `names`.
    pub fn servers(mut self, names: &[&str]) -> SiteFile {
        for n in names {
            let _ = write!(self.text, "\n[[server]]\nname = \"{n}\"\n");
        }
        self
    }

    /// An `[[instance]]` of `service` on `server`, reached at `sip`.
    pub fn instance(mut self, id: &str, service: &str, server: &str, sip: SocketAddr) -> SiteFile {
        let _ = write!(
            self.text,
            "\n[[instance]]\nid = \"{id}\"\nservice = \"{service}\"\nserver = \"{server}\"\nsip = \"{sip}\"\n"
        );
        self
    }

    /// A `[[listener]]` bound at `bind` for the `leg` (`subscriber` or
    /// `provider`), choosing by `mode`; `extra` adds lines (transports, ...).
    pub fn listener(
        mut self,
        name: &str,
        bind: SocketAddr,
        mode: Mode<'_>,
        leg: &str,
        extra: &str,
    ) -> SiteFile {
        let target = match mode {
            Mode::Balance(pool) => format!("mode = \"balance\"\npool = \"{pool}\""),
            Mode::Guard(instance) => format!("mode = \"guard\"\ninstance = \"{instance}\""),
        };
        let _ = write!(
            self.text,
            "\n[[listener]]\nname = \"{name}\"\nbind = \"{bind}\"\n{target}\nleg = \"{leg}\"\n"
        );
        if !extra.is_empty() {
            let _ = writeln!(self.text, "{}", extra.trim_end());
        }
        self
    }

    /// `text` as it is, at the end.
    pub fn raw(mut self, text: &str) -> SiteFile {
        self.text.push('\n');
        self.text.push_str(text);
        self
    }

    /// The TOML so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Writes `site.toml` in `dir` and returns its path, once ringsync's
    /// loader has accepted it.
    ///
    /// # Panics
    /// When the file cannot be written or does not load: a fixture is the
    /// test's own code, and its error is the test's.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("site.toml");
        if let Err(e) = ringsync::SiteConfig::from_str_at(&self.text, &path) {
            panic!("the test's site file does not load: {e}\n{}", self.text);
        }
        std::fs::write(&path, &self.text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_of_two_sg_and_a_guard_listener_loads_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let sg = |h: u8| SocketAddr::from(([127, 200, 0, h], 5060));
        let path = SiteFile::new("fixture")
            .servers(&["srv-0", "srv-1"])
            .instance("sg-0", "sg", "srv-0", sg(11))
            .instance("sg-1", "sg", "srv-1", sg(12))
            .listener("g0", sg(1), Mode::Guard("sg-0"), "subscriber", "")
            .section("work", "max_calls = 10")
            .write(dir.path());
        let cfg = ringsync::SiteConfig::load(&path).unwrap();
        assert_eq!(cfg.site.name, "fixture");
        assert_eq!(cfg.instances.len(), 2);
        assert_eq!(cfg.listeners.len(), 1);
        assert_eq!(cfg.health.interval_ms, 0);
    }

    #[test]
    #[should_panic(expected = "does not load")]
    fn a_fixture_that_does_not_load_fails_where_it_is_built() {
        let dir = tempfile::tempdir().unwrap();
        // An instance on a server the site does not declare.
        SiteFile::new("broken")
            .instance(
                "sg-0",
                "sg",
                "srv-x",
                SocketAddr::from(([127, 200, 0, 2], 5060)),
            )
            .write(dir.path());
    }
}
