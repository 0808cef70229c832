//! `[[listener]]` checks: names, bind and advertised addresses, transports,
//! and each mode's pool or instance (balance, guard; ws pools in `ws.rs`).

use toml::Spanned;

use super::error::ConfigError;
use super::raw::RawListener;
use super::types::{Instance, Listener, ListenerMode, Service};
use super::validator::{service_of, Validator};

type Result<T> = std::result::Result<T, ConfigError>;

impl Validator<'_> {
    /// `[[listener]]`: unique names and bind addresses, a concrete advertised
    /// address, at least one transport, a valid mode.
    pub(super) fn listeners(
        &self,
        raw: &[Spanned<RawListener>],
        instances: &[Instance],
    ) -> Result<Vec<Listener>> {
        let mut listeners: Vec<Listener> = Vec::new();
        for (i, spanned) in raw.iter().enumerate() {
            let l = self.listener(i, spanned, &listeners, instances)?;
            listeners.push(l);
        }
        Ok(listeners)
    }

    fn listener(
        &self,
        i: usize,
        spanned: &Spanned<RawListener>,
        before: &[Listener],
        instances: &[Instance],
    ) -> Result<Listener> {
        let r = spanned.get_ref();
        let name = r.name.get_ref();
        self.name(&r.name, format!("listener[{i}].name"))?;
        if before.iter().any(|l| &l.name == name) {
            return Err(self.err(
                r.name.span(),
                format!("listener[{i}].name"),
                format!("duplicate listener `{name}`"),
            ));
        }
        let bind = *r.bind.get_ref();
        if let Some(other) = before.iter().find(|l| l.bind == bind && bind.port() != 0) {
            return Err(self.err(
                r.bind.span(),
                format!("listener[{i}].bind"),
                format!("`{bind}` is already bound by listener `{}`", other.name),
            ));
        }
        let advertise = match &r.advertise {
            Some(a) if a.get_ref().ip().is_unspecified() => {
                return Err(self.err(
                    a.span(),
                    format!("listener[{i}].advertise"),
                    "must be a concrete address",
                ))
            }
            Some(a) => *a.get_ref(),
            None => bind,
        };
        if r.transports.get_ref().is_empty() {
            return Err(self.err(
                r.transports.span(),
                format!("listener[{i}].transports"),
                "needs at least one of \"udp\", \"tcp\", \"tls\", \"ws\", \"wss\"",
            ));
        }
        let mode = match r.mode.get_ref().as_str() {
            "balance" => self.balance(i, spanned, instances)?,
            "guard" => self.guard(i, spanned, instances)?,
            "ws_pool" => self.ws_pool(i, spanned, instances)?,
            other => {
                return Err(self.err(
                    r.mode.span(),
                    format!("listener[{i}].mode"),
                    format!(
                        "unknown mode `{other}`, expected \"balance\", \"guard\" or \"ws_pool\""
                    ),
                ))
            }
        };
        if let Some((field, why)) = r.auth_ban.get_ref().problem() {
            return Err(self.err(
                r.auth_ban.span(),
                format!("listener[{i}].auth_ban.{field}"),
                why,
            ));
        }
        let mut transports = r.transports.get_ref().clone();
        transports.dedup();
        let ws = self.ws_options(i, r, &transports, &mode)?;
        Ok(Listener {
            name: name.clone(),
            bind,
            advertise,
            transports,
            mode,
            leg: r.leg,
            access: r.access.clone(),
            auth_ban: r.auth_ban.get_ref().clone(),
            ws,
        })
    }

    /// `mode = "balance"`: a pool of a SIP service that has instances.
    fn balance(
        &self,
        i: usize,
        spanned: &Spanned<RawListener>,
        instances: &[Instance],
    ) -> Result<ListenerMode> {
        let pool = self.target(i, spanned, "balance", Target::Pool("<service>"))?;
        let service = Service::from(pool.get_ref().clone());
        if !service.is_sip() {
            return Err(self.err(
                pool.span(),
                format!("listener[{i}].pool"),
                format!("`{service}` is not a SIP service (sg or esg)"),
            ));
        }
        if !instances.iter().any(|inst| inst.service == service) {
            return Err(self.err(
                pool.span(),
                format!("listener[{i}].pool"),
                format!("no instance of `{service}` is configured"),
            ));
        }
        if !instances.iter().any(|inst| inst.pool == service.as_str()) {
            return Err(self.err(
                pool.span(),
                format!("listener[{i}].pool"),
                format!(
                    "every `{service}` instance is in another pool (their `pool`):                      none is left for this listener to balance over"
                ),
            ));
        }
        Ok(ListenerMode::Balance { pool: service })
    }

    /// `mode = "guard"`: one configured sg or esg instance.
    fn guard(
        &self,
        i: usize,
        spanned: &Spanned<RawListener>,
        instances: &[Instance],
    ) -> Result<ListenerMode> {
        let inst = self.target(i, spanned, "guard", Target::Instance)?;
        match service_of(instances, inst.get_ref()) {
            Some(s) if s.is_sip() => Ok(ListenerMode::Guard {
                instance: inst.get_ref().clone(),
            }),
            Some(s) => Err(self.err(
                inst.span(),
                format!("listener[{i}].instance"),
                format!("`{}` runs `{s}`, not sg or esg", inst.get_ref()),
            )),
            None => Err(self.err(
                inst.span(),
                format!("listener[{i}].instance"),
                format!("unknown instance `{}`", inst.get_ref()),
            )),
        }
    }

    /// What a `mode` listener balances over or guards: its `pool` or its
    /// `instance`, whichever `want` says, refusing the other one. The
    /// errors name the mode and the field, as "a balance listener needs
    /// `pool = \"<service>\"`" or "a guard listener takes `instance`, not
    /// `pool`".
    pub(super) fn target<'r>(
        &self,
        i: usize,
        spanned: &'r Spanned<RawListener>,
        mode: &str,
        want: Target,
    ) -> Result<&'r Spanned<String>> {
        let r = spanned.get_ref();
        let (field, example, (this, other)) = match want {
            Target::Pool(example) => ("pool", example, (&r.pool, &r.instance)),
            Target::Instance => ("instance", "<id>", (&r.instance, &r.pool)),
        };
        let not = if field == "pool" { "instance" } else { "pool" };
        let Some(this) = this else {
            return Err(self.err(
                spanned.span(),
                format!("listener[{i}].{field}"),
                format!("a {mode} listener needs `{field} = \"{example}\"`"),
            ));
        };
        if other.is_some() {
            return Err(self.err(
                spanned.span(),
                format!("listener[{i}].{not}"),
                format!("a {mode} listener takes `{field}`, not `{not}`"),
            ));
        }
        Ok(this)
    }
}

/// Which field of a listener names what it fronts ([`Validator::target`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// `pool = "..."`, with the example the error shows (`<service>`, `ws`).
    Pool(&'static str),
    /// `instance = "<id>"`.
    Instance,
}
