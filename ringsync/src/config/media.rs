//! The `[media]` section (media-ctl, the mg controller) and the instance
//! fields only media-ctl reads (`ng`, `ng_source`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::error::ConfigError;
use super::raw::{RawInstance, RawMedia};
use super::types::{Instance, Service};
use super::validator::Validator;

/// Settings of media-ctl, the mg controller in front of the rtpengine pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// Where media-ctl receives ng commands (UDP) from the sg/esg (or
    /// Kamailio's and OpenSIPS's `rtpengine` modules). Default 127.0.0.1:2223.
    pub ng_bind: SocketAddr,
    /// A call with no ng command for this long is checked with a `query` to
    /// its mg and forgotten if the mg no longer knows it (a lost `delete`).
    /// Default 3600.
    pub call_idle_timeout_s: u32,
    /// Ping every mg and bgmg with the ng `ping` this often; 0 disables
    /// pinging (every mg is then assumed up). Default 1000.
    pub ping_interval_ms: u64,
    /// A ping without `pong` after this long fails. Default 500.
    pub ping_timeout_ms: u64,
    /// Consecutive failed pings before an mg is `down`. Default 3.
    pub ping_failures: u32,
    /// How long media-ctl waits for an mg to answer a command before it
    /// answers the client with an ng error itself. Default 2000.
    pub mg_timeout_ms: u64,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            ng_bind: SocketAddr::from(([127, 0, 0, 1], 2223)),
            call_idle_timeout_s: 3600,
            ping_interval_ms: 1000,
            ping_timeout_ms: 500,
            ping_failures: 3,
            mg_timeout_ms: 2000,
        }
    }
}

impl MediaConfig {
    /// The idle timeout as a duration.
    pub fn call_idle_timeout(&self) -> Duration {
        Duration::from_secs(self.call_idle_timeout_s.into())
    }
    /// The ping interval; `None` when pinging is off.
    pub fn ping_interval(&self) -> Option<Duration> {
        (self.ping_interval_ms != 0).then(|| Duration::from_millis(self.ping_interval_ms))
    }
    /// The ping timeout as a duration.
    pub fn ping_timeout(&self) -> Duration {
        Duration::from_millis(self.ping_timeout_ms)
    }
    /// The mg answer timeout as a duration.
    pub fn mg_timeout(&self) -> Duration {
        Duration::from_millis(self.mg_timeout_ms)
    }
}

/// Checks `[media]` against itself and the instances.
pub(super) fn validate(
    v: &Validator<'_>,
    raw: Option<&Spanned<RawMedia>>,
    instances: &[Instance],
) -> Result<MediaConfig, ConfigError> {
    let Some(table) = raw else {
        return Ok(MediaConfig::default());
    };
    let r = table.get_ref();
    let d = MediaConfig::default();
    let get = |f: &Option<Spanned<u64>>, dflt: u64| f.as_ref().map_or(dflt, |s| *s.get_ref());
    let get32 = |f: &Option<Spanned<u32>>, dflt: u32| f.as_ref().map_or(dflt, |s| *s.get_ref());
    let m = MediaConfig {
        ng_bind: r.ng_bind.as_ref().map_or(d.ng_bind, |s| *s.get_ref()),
        call_idle_timeout_s: get32(&r.call_idle_timeout_s, d.call_idle_timeout_s),
        ping_interval_ms: get(&r.ping_interval_ms, d.ping_interval_ms),
        ping_timeout_ms: get(&r.ping_timeout_ms, d.ping_timeout_ms),
        ping_failures: get32(&r.ping_failures, d.ping_failures),
        mg_timeout_ms: get(&r.mg_timeout_ms, d.mg_timeout_ms),
    };
    // The field's own place, or the table's when the default is at fault.
    let err = |span: Option<std::ops::Range<usize>>, field: &str, msg: String| {
        v.err(
            span.unwrap_or_else(|| table.span()),
            format!("media.{field}"),
            msg,
        )
    };
    let span32 = |f: &Option<Spanned<u32>>| f.as_ref().map(Spanned::span);
    let span64 = |f: &Option<Spanned<u64>>| f.as_ref().map(Spanned::span);
    if m.call_idle_timeout_s == 0 {
        let s = span32(&r.call_idle_timeout_s);
        return Err(err(s, "call_idle_timeout_s", "must be positive".into()));
    }
    if m.mg_timeout_ms == 0 {
        let s = span64(&r.mg_timeout_ms);
        return Err(err(s, "mg_timeout_ms", "must be positive".into()));
    }
    if m.ping_interval_ms != 0 && m.ping_timeout_ms == 0 {
        let s = span64(&r.ping_timeout_ms);
        let msg = "must be positive when pinging is on".into();
        return Err(err(s, "ping_timeout_ms", msg));
    }
    if m.ping_interval_ms != 0 && m.ping_failures == 0 {
        let s = span32(&r.ping_failures);
        let msg = "must be positive when pinging is on".into();
        return Err(err(s, "ping_failures", msg));
    }
    if let Some(i) = instances.iter().find(|i| i.ng == Some(m.ng_bind)) {
        let s = r.ng_bind.as_ref().map(Spanned::span);
        let msg = format!(
            "`{}` is the ng address of `{}`: media-ctl would send commands to itself",
            m.ng_bind, i.id
        );
        return Err(err(s, "ng_bind", msg));
    }
    Ok(m)
}

/// Checks `ng` and `ng_source` across instances and fills the default
/// `ng_source` (the IP of `sip`) of sg and esg instances.
pub(super) fn check_instances(
    v: &Validator<'_>,
    raw: &[Spanned<RawInstance>],
    instances: &mut [Instance],
) -> Result<(), ConfigError> {
    let mut ng_of: HashMap<SocketAddr, &str> = HashMap::new();
    for (i, (r, inst)) in raw.iter().zip(instances.iter()).enumerate() {
        let Some(spanned) = &r.get_ref().ng else {
            continue;
        };
        let ng = *spanned.get_ref();
        if let Some(other) = ng_of.insert(ng, &inst.id) {
            return Err(v.err(
                spanned.span(),
                format!("instance[{i}].ng"),
                format!("`{ng}` is already the ng address of `{other}`"),
            ));
        }
    }
    for inst in instances.iter_mut() {
        if inst.ng_source.is_none() && matches!(inst.service, Service::Sg | Service::Esg) {
            inst.ng_source = inst.sip.map(|a| a.ip());
        }
    }
    // An explicit source must name one server: media-ctl maps a command's
    // source IP to the server of the sg/esg that sent it. (Defaults that
    // collide, such as several sg on 127.0.0.1, name none; media-ctl then
    // pins no bgmg for that address.)
    for (i, (r, inst)) in raw.iter().zip(instances.iter()).enumerate() {
        let Some(src) = &r.get_ref().ng_source else {
            continue;
        };
        let field = format!("instance[{i}].ng_source");
        if !inst.service.is_sip() {
            return Err(v.err(
                src.span(),
                field,
                format!(
                    "only sg and esg instances send ng commands; `{}` runs `{}`",
                    inst.id, inst.service
                ),
            ));
        }
        let ip = *src.get_ref();
        if ip.is_unspecified() {
            return Err(v.err(src.span(), field, "must be a concrete address"));
        }
        if let Some(other) = instances
            .iter()
            .find(|o| o.ng_source == Some(ip) && o.server != inst.server)
        {
            return Err(v.err(
                src.span(),
                field,
                format!(
                    "`{ip}` is already the ng source of `{}` on server `{}`; \
                     one address must belong to one server",
                    other.id, other.server
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::SiteConfig;
    use std::path::Path;

    /// sg-a and an esg on srv-b whose ng commands come from 127.0.9.2; an
    /// mg and a bgmg on srv-a.
    fn site() -> String {
        let at = |s: &str| s.parse().unwrap();
        testbed::fixture::SiteFile::new("m")
            .health("")
            .servers(&["srv-a", "srv-b"])
            .instance("sg-a", "sg", "srv-a", at("127.0.1.1:5060"))
            .instance_with(
                "esg-b",
                "esg",
                "srv-b",
                "sip = \"127.0.1.2:5060\"\nng_source = \"127.0.9.2\"",
            )
            .pool("mg", "ng", &[("a", at("127.0.3.1:22222"))])
            .pool("bgmg", "ng", &[("a", at("127.0.4.1:22222"))])
            .text()
            .to_owned()
    }

    fn load(text: &str) -> Result<SiteConfig, crate::config::ConfigError> {
        SiteConfig::from_str_at(text, Path::new("/m.toml"))
    }

    #[test]
    fn defaults_and_ng_sources() {
        let site = site();
        let c = load(&site).unwrap();
        assert_eq!(c.media, super::MediaConfig::default());
        assert_eq!(c.media.ng_bind.to_string(), "127.0.0.1:2223");
        // Default: the IP of `sip`; explicit wins; none for media services.
        assert_eq!(c.instances[0].ng_source, Some("127.0.1.1".parse().unwrap()));
        assert_eq!(c.instances[1].ng_source, Some("127.0.9.2".parse().unwrap()));
        assert_eq!(c.instances[2].ng_source, None);

        let c = load(&format!(
            "{site}\n[media]\nng_bind = \"127.0.0.5:0\"\ncall_idle_timeout_s = 60\nping_interval_ms = 0\n"
        ))
        .unwrap();
        assert_eq!(c.media.ng_bind.port(), 0);
        assert_eq!(c.media.ping_interval(), None);
        assert_eq!(c.media.call_idle_timeout().as_secs(), 60);
    }

    #[test]
    fn bad_media_settings_name_file_line_and_field() {
        let site = site();
        let cases = [
            (
                format!("{site}\n[media]\ncall_idle_timeout_s = 0\n"),
                "media.call_idle_timeout_s",
            ),
            (
                format!("{site}\n[media]\nmg_timeout_ms = 0\n"),
                "media.mg_timeout_ms",
            ),
            (
                format!("{site}\n[media]\nping_timeout_ms = 0\n"),
                "media.ping_timeout_ms",
            ),
            (
                format!("{site}\n[media]\nping_failures = 0\n"),
                "media.ping_failures",
            ),
            (
                format!("{site}\n[media]\nng_bind = \"127.0.3.1:22222\"\n"),
                "media.ng_bind",
            ),
            (
                site.replace("ng = \"127.0.4.1:22222\"", "ng = \"127.0.3.1:22222\""),
                "instance[3].ng",
            ),
            (
                site.replace(
                    "ng = \"127.0.4.1:22222\"",
                    "ng = \"127.0.4.1:22222\"\nng_source = \"127.0.0.1\"",
                ),
                "instance[3].ng_source",
            ),
            (
                site.replace(
                    "sip = \"127.0.1.1:5060\"",
                    "sip = \"127.0.1.1:5060\"\nng_source = \"127.0.9.2\"",
                ),
                "instance[0].ng_source",
            ),
            (
                site.replace("ng_source = \"127.0.9.2\"", "ng_source = \"0.0.0.0\""),
                "instance[1].ng_source",
            ),
            // An explicit source may not be another server's default either.
            (
                site.replace("ng_source = \"127.0.9.2\"", "ng_source = \"127.0.1.1\""),
                "instance[1].ng_source",
            ),
        ];
        for (text, field) in cases {
            let e = load(&text).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().starts_with("/m.toml:"), "{e}");
            // The line of the field itself.
            let key = field.rsplit('.').next().unwrap();
            let key = key.split('[').next().unwrap();
            let want = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.starts_with(&format!("{key} =")))
                .map(|(i, _)| i + 1)
                .collect::<Vec<_>>();
            assert!(want.contains(&e.line.unwrap()), "{e} (lines {want:?})");
        }
        let e = load(&format!("{site}\n[media]\nbogus = 1\n")).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
    }
}
