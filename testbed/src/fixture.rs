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
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// The `extra` of a [`SiteFile::listener`] on UDP alone.
pub const UDP: &str = r#"transports = ["udp"]"#;

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
    /// `mode = "ws_pool"`: WebSocket connections spread over the `ws`
    /// instances of `pool` (a service).
    WsPool(&'a str),
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

    /// The site of most tests that start the gate binary: [`SiteFile::new`],
    /// the gate's admin on `gate:9091` (media-ctl's on `gate:9092`), and a
    /// pool of sg, one a server: each `(x, ip)` of `sgs` makes server
    /// `srv-x` and on it `sg-x` at `ip:5060`. Listeners are the test's.
    pub fn gate(name: &str, gate: IpAddr, sgs: &[(&str, IpAddr)]) -> SiteFile {
        let pool: Vec<(&str, SocketAddr)> = sgs
            .iter()
            .map(|(x, ip)| (*x, SocketAddr::new(*ip, 5060)))
            .collect();
        SiteFile::new(name)
            .admin(SocketAddr::new(gate, 9091), SocketAddr::new(gate, 9092))
            .sgs(&pool)
    }

    /// For each `(x, sip)` of `sgs`, a server `srv-x` and on it `sg-x`
    /// reached at `sip`: a pool of sg, one a server.
    pub fn sgs(mut self, sgs: &[(&str, SocketAddr)]) -> SiteFile {
        let servers: Vec<String> = sgs.iter().map(|(x, _)| format!("srv-{x}")).collect();
        let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
        self = self.servers(&servers);
        self.pool("sg", "sip", sgs)
    }

    /// The site of the tests that start each of the daemons on one network
    /// `net` (`127.a.b.0/24` as `[127, a, b]`): [`SiteFile::new`] with the
    /// admin of `ringsync serve` on `.1:serve` (0: any port), the gate's on
    /// `.1:9091` and media-ctl's on `.1:9092`, media-ctl's ng socket on
    /// `.1:2223`, and on server srv-a sg-a (`.11:5060`) and mg-a
    /// (`.31:22222`), behind a balance listener `subs` on `.1:5060`.
    pub fn daemons(name: &str, net: [u8; 3], serve: u16) -> SiteFile {
        let [a, b, c] = net;
        let at = |h: u8, port: u16| SocketAddr::from(([a, b, c, h], port));
        SiteFile::new(name)
            .admin(at(1, 9091), at(1, 9092))
            .admin_lines(&format!("bind = \"{}\"", at(1, serve)))
            .media(at(1, 2223), "")
            .servers(&["srv-a"])
            .instance("sg-a", "sg", "srv-a", at(11, 5060))
            .instance_with(
                "mg-a",
                "mg",
                "srv-a",
                &format!("ng = \"{}\"", at(31, 22222)),
            )
            .listener("subs", at(1, 5060), Mode::Balance("sg"), "subscriber", "")
    }

    /// The site of the drain tests that run calls through the gate binary
    /// (R-SG-1, R-ST-1): [`SiteFile::gate`] with sg-a and sg-b, a guard of
    /// sg-a on `gate:5060` (UDP), OPTIONS probes every 200 ms (down after
    /// two misses of 150 ms), and a restart window of 8 s (`[work]`), short
    /// so that `drained` can show once the test's calls end.
    pub fn drain_pair(name: &str, gate: IpAddr, sg_a: IpAddr, sg_b: IpAddr) -> SiteFile {
        let guard = SocketAddr::new(gate, 5060);
        SiteFile::gate(name, gate, &[("a", sg_a), ("b", sg_b)])
            .health("interval_ms = 200\ntimeout_ms = 150\nfailures = 2")
            .section("work", "max_expires_s = 5\nmax_call_age_s = 8")
            .listener("sg-a-guard", guard, Mode::Guard("sg-a"), "subscriber", UDP)
    }

    /// Adds `lines` to the `[admin]` section [`SiteFile::admin`] wrote
    /// (`bind`, `tokens`, ...).
    pub fn admin_lines(mut self, lines: &str) -> SiteFile {
        self.text = self.text.replacen(
            "\n[admin]\n",
            &format!("\n[admin]\n{}\n", lines.trim_end()),
            1,
        );
        self
    }

    /// Adds `lines` to the `[site]` section [`SiteFile::new`] wrote
    /// (`server_header`, ...); nothing when they are blank.
    pub fn site_lines(mut self, lines: &str) -> SiteFile {
        if !lines.trim().is_empty() {
            self.text =
                self.text
                    .replacen("[site]\n", &format!("[site]\n{}\n", lines.trim_end()), 1);
        }
        self
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
    pub fn instance(self, id: &str, service: &str, server: &str, sip: SocketAddr) -> SiteFile {
        self.instance_with(id, service, server, &format!("sip = \"{sip}\""))
    }

    /// An `[[instance]]` of `service` on `server` with `extra` as its other
    /// lines: an mg's `ng = "..."`, an sg's `sources = [...]`, or nothing
    /// (a `ws` instance the gate does not dial).
    pub fn instance_with(mut self, id: &str, service: &str, server: &str, extra: &str) -> SiteFile {
        let _ = write!(
            self.text,
            "\n[[instance]]\nid = \"{id}\"\nservice = \"{service}\"\nserver = \"{server}\"\n"
        );
        if !extra.is_empty() {
            let _ = writeln!(self.text, "{}", extra.trim_end());
        }
        self
    }

    /// For each `(x, addr)` of `each`, an `[[instance]]` `SERVICE-x` of
    /// `service` on server `srv-x`, reached at `addr` by `key` (`sip` for
    /// an sg, `ng` for an mg): the one-instance-a-server pools most sites
    /// are made of. The servers are declared apart ([`SiteFile::servers`]),
    /// since one server holds instances of several services.
    pub fn pool(mut self, service: &str, key: &str, each: &[(&str, SocketAddr)]) -> SiteFile {
        for (x, addr) in each {
            self = self.instance_with(
                &format!("{service}-{x}"),
                service,
                &format!("srv-{x}"),
                &format!("{key} = \"{addr}\""),
            );
        }
        self
    }

    /// `[tls]` with the certificate and key files the listeners present,
    /// as the site names them (relative to the site file, or absolute).
    pub fn tls(self, cert: &str, key: &str) -> SiteFile {
        self.section("tls", &format!("cert = \"{cert}\"\nkey = \"{key}\""))
    }

    /// `[media]` with media-ctl's ng socket at `ng_bind` and `extra` lines
    /// (timeouts, ...) after it.
    pub fn media(self, ng_bind: SocketAddr, extra: &str) -> SiteFile {
        self.section("media", &format!("ng_bind = \"{ng_bind}\"\n{extra}"))
    }

    /// Replaces the secret [`SiteFile::new`] made from the name: for a test
    /// that signs or checks tokens with a secret of its own.
    pub fn secret(mut self, secret: &str) -> SiteFile {
        if let Some(at) = self.text.find("\nsecret = \"") {
            let end = self.text[at + 1..]
                .find('\n')
                .map_or(self.text.len(), |e| at + 1 + e);
            self.text
                .replace_range(at + 1..end, &format!("secret = \"{secret}\""));
        }
        self
    }

    /// Replaces the embedded store's file `profiles.json` with `path`.
    pub fn store_path(mut self, path: &str) -> SiteFile {
        self.text =
            self.text
                .replacen("path = \"profiles.json\"", &format!("path = \"{path}\""), 1);
        self
    }

    /// Replaces the embedded store [`SiteFile::new`] wrote with etcd at
    /// `endpoints` (`http://ip:port`), the site's keys under `prefix`.
    pub fn etcd(mut self, endpoints: &[String], prefix: &str) -> SiteFile {
        let quoted: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
        let etcd = format!(
            "[store]\nkind = \"etcd\"\nendpoints = [{}]\nprefix = \"{prefix}\"\n",
            quoted.join(", ")
        );
        self.text = self.text.replacen(
            "[store]\nkind = \"embedded\"\npath = \"profiles.json\"\n",
            &etcd,
            1,
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
            Mode::WsPool(pool) => format!("mode = \"ws_pool\"\npool = \"{pool}\""),
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

    /// A subscriber listener `name` at `bind` balancing over the sg pool
    /// (the listener most tests have), on `transports` (none: the
    /// default, UDP).
    pub fn subscribers(self, name: &str, bind: SocketAddr, transports: &[&str]) -> SiteFile {
        let extra = if transports.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = transports.iter().map(|t| format!("\"{t}\"")).collect();
            format!("transports = [{}]", quoted.join(", "))
        };
        self.listener(name, bind, Mode::Balance("sg"), "subscriber", &extra)
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

    fn sg(h: u8) -> SocketAddr {
        SocketAddr::from(([127, 200, 0, h], 5060))
    }

    #[test]
    fn instance_with_writes_its_extra_lines_in_the_instance() {
        let text = SiteFile::new("with")
            .servers(&["srv-a"])
            .instance_with(
                "sg-a",
                "sg",
                "srv-a",
                "sip = \"127.0.0.1:5060\"\nsources = [\"10.9.0.0/24\"]",
            )
            .instance_with("ws-a", "ws", "srv-a", "")
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.instances.len(), 2);
        assert!(
            text.contains("sip = \"127.0.0.1:5060\"\nsources = [\"10.9.0.0/24\"]\n"),
            "{text}"
        );
        assert!(text.ends_with("server = \"srv-a\"\n"), "{text}");
    }

    #[test]
    fn pool_names_each_instance_after_its_server() {
        let text = SiteFile::new("pool")
            .servers(&["srv-a", "srv-b"])
            .pool("sg", "sip", &[("a", sg(1)), ("b", sg(2))])
            .pool("mg", "ng", &[("b", sg(3))])
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.instances.len(), 3);
        assert!(
            text.contains(
                "id = \"sg-b\"\nservice = \"sg\"\nserver = \"srv-b\"\nsip = \"127.200.0.2:5060\""
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "id = \"mg-b\"\nservice = \"mg\"\nserver = \"srv-b\"\nng = \"127.200.0.3:5060\""
            ),
            "{text}"
        );
    }

    #[test]
    fn gate_declares_the_admin_and_an_sg_on_each_server() {
        let ip = |h: u8| IpAddr::from([127, 200, 0, h]);
        let dir = tempfile::tempdir().unwrap();
        let path = SiteFile::gate("gate", ip(1), &[("a", ip(11)), ("b", ip(12))])
            .listener("g", sg(1), Mode::Guard("sg-a"), "subscriber", "")
            .write(dir.path());
        let cfg = ringsync::SiteConfig::load(&path).unwrap();
        assert_eq!(cfg.admin.gate_bind, SocketAddr::new(ip(1), 9091));
        assert_eq!(cfg.admin.media_bind, SocketAddr::new(ip(1), 9092));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(
                "id = \"sg-b\"\nservice = \"sg\"\nserver = \"srv-b\"\nsip = \"127.200.0.12:5060\""
            ),
            "{text}"
        );
        assert_eq!(cfg.instances.len(), 2);
    }

    #[test]
    fn drain_pair_guards_sg_a_and_probes_fast_and_admin_lines_join_the_admin() {
        let ip = |h: u8| IpAddr::from([127, 200, 0, h]);
        let dir = tempfile::tempdir().unwrap();
        let path = SiteFile::drain_pair("pair", ip(1), ip(11), ip(12))
            .admin_lines("bind = \"127.200.0.1:8080\"")
            .write(dir.path());
        let cfg = ringsync::SiteConfig::load(&path).unwrap();
        assert_eq!(cfg.health.interval_ms, 200);
        assert_eq!(cfg.health.failures, 2);
        assert_eq!(cfg.listeners.len(), 1);
        assert_eq!(cfg.listeners[0].name, "sg-a-guard");
        assert_eq!(cfg.admin.bind, SocketAddr::new(ip(1), 8080));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("[work]\nmax_expires_s = 5\nmax_call_age_s = 8\n"),
            "{text}"
        );
    }

    #[test]
    fn a_ws_pool_listener_spreads_over_the_ws_instances() {
        let dir = tempfile::tempdir().unwrap();
        let path = SiteFile::new("wspool")
            .servers(&["srv-0"])
            .pool("ws", "ws", &[("0", sg(21))])
            .listener(
                "web",
                sg(1),
                Mode::WsPool("ws"),
                "subscriber",
                "transports = [\"ws\"]",
            )
            .write(dir.path());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("mode = \"ws_pool\"\npool = \"ws\"\n"),
            "{text}"
        );
        assert_eq!(
            ringsync::SiteConfig::load(&path).unwrap().listeners.len(),
            1
        );
    }

    #[test]
    fn daemons_puts_every_admin_and_the_ng_socket_on_the_network() {
        let dir = tempfile::tempdir().unwrap();
        let path = SiteFile::daemons("all", [127, 200, 7], 8080).write(dir.path());
        let cfg = ringsync::SiteConfig::load(&path).unwrap();
        let at = |h: u8, port: u16| SocketAddr::from(([127, 200, 7, h], port));
        assert_eq!(cfg.admin.bind, at(1, 8080));
        assert_eq!(cfg.admin.gate_bind, at(1, 9091));
        assert_eq!(cfg.admin.media_bind, at(1, 9092));
        assert_eq!(cfg.media.ng_bind, at(1, 2223));
        assert_eq!(cfg.instances.len(), 2);
        assert_eq!(cfg.listeners[0].bind, at(1, 5060));
    }

    #[test]
    fn sgs_puts_each_sg_on_a_server_of_its_own() {
        let text = SiteFile::new("sgs")
            .sgs(&[("0", sg(11)), ("1", sg(12))])
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.instances.len(), 2);
        assert!(text.contains("[[server]]\nname = \"srv-1\"\n"), "{text}");
        assert!(
            text.contains(
                "id = \"sg-1\"\nservice = \"sg\"\nserver = \"srv-1\"\nsip = \"127.200.0.12:5060\""
            ),
            "{text}"
        );
    }

    #[test]
    fn subscribers_balance_over_the_sg_on_the_transports_given() {
        let text = SiteFile::new("subs")
            .sgs(&[("0", sg(11))])
            .subscribers("both", sg(1), &["udp", "tcp"])
            .subscribers("plain", sg(2), &[])
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.listeners.len(), 2);
        assert!(text.contains("name = \"both\"\nbind = \"127.200.0.1:5060\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\ntransports = [\"udp\", \"tcp\"]\n"), "{text}");
        assert!(text.ends_with("name = \"plain\"\nbind = \"127.200.0.2:5060\"\nmode = \"balance\"\npool = \"sg\"\nleg = \"subscriber\"\n"), "{text}");
    }

    #[test]
    fn tls_names_the_certificate_and_key() {
        let text = SiteFile::new("tls").tls("c.pem", "k.pem").text().to_owned();
        assert!(
            text.ends_with("\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n"),
            "{text}"
        );
    }

    #[test]
    fn media_binds_the_ng_socket_and_keeps_the_extra_lines() {
        let text = SiteFile::new("media")
            .media(sg(9), "mg_timeout_ms = 1000")
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.media.mg_timeout_ms, 1000);
        assert!(
            text.contains("[media]\nng_bind = \"127.200.0.9:5060\"\n"),
            "{text}"
        );
    }

    #[test]
    fn secret_and_store_path_replace_what_new_wrote() {
        let text = SiteFile::new("own")
            .secret("a-secret-of-the-tests-own-0123456789")
            .store_path("t1.profiles.json")
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        assert_eq!(cfg.site.name, "own");
        assert!(
            text.contains("\nsecret = \"a-secret-of-the-tests-own-0123456789\"\n"),
            "{text}"
        );
        assert!(!text.contains("own-test-secret"), "{text}");
        assert!(text.contains("path = \"t1.profiles.json\""), "{text}");
    }

    #[test]
    fn etcd_replaces_the_embedded_store() {
        let eps = [
            "http://127.200.0.7:2379".to_owned(),
            "http://127.200.0.8:2379".to_owned(),
        ];
        let text = SiteFile::new("on-etcd")
            .etcd(&eps, "/t/on-etcd")
            .text()
            .to_owned();
        let cfg = ringsync::SiteConfig::from_str_at(&text, Path::new("site.toml")).unwrap();
        match &cfg.store {
            ringsync::config::StoreConfig::Etcd {
                endpoints, prefix, ..
            } => assert_eq!(
                (endpoints.as_slice(), prefix.as_str()),
                (&eps[..], "/t/on-etcd")
            ),
            other => panic!("not etcd: {other:?}"),
        }
        assert!(!text.contains("embedded"), "{text}");
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
