//! The drain policy: whether a new dialog or registration may go to the
//! instance routing chose, or gets `503 Service Unavailable` on its behalf.
//!
//! Only `guard` listeners refuse for a draining instance: a `balance`
//! listener never picks a draining member while a normal one is up (R-AA-1,
//! in the ring), and serves draining members when all drain (R-AA-4). The
//! rules, in the order they are checked: R-SG-1 (what counts as new work),
//! R-ESG-1/2 (provider leg, multi-instance account), R-SG-3/R-ESG-3
//! (exceptions), R-SG-2 (another instance is up in the normal zone), R-SG-5
//! (Retry-After). A gate that is itself starting or stopping refuses new
//! work on every listener (R-GW-1, [`Policy::not_serving`]).

use std::net::IpAddr;

use rand::Rng;
use ringsync::config::{Account, Exception, Leg, Service, SiteConfig};
use ringsync::view::DrainView;

use crate::lifecycle::Phase;
use crate::listener::{ListenerCtx, Mode};
use crate::message::{Method, SipMessage};
use crate::newwork::Class;
use crate::reply::Reply;
use crate::txn::Inbound;
use crate::uri::SipUri;

/// Why new work goes to an instance that is draining in the gate's view,
/// on purpose: the reasons of `sipgate_new_work_draining_total`, so a count
/// of new work to a draining instance can be told from a broken drain
/// (R-AA-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnPurpose {
    /// R-ESG-5, R-ESG-2: a single-instance account's work, which stays on
    /// its home esg drain or not.
    SingleInstanceAccount,
    /// R-SG-3, R-ESG-3: an exception of the instance or of the account
    /// matched.
    Exception,
    /// R-AA-4, R-SG-2: no other instance of the service is in the normal
    /// zone and up, so the draining ones serve.
    AllDraining,
    /// R-ESG-1: an esg away from its provider leg, where a drain refuses
    /// nothing.
    InsideLeg,
    /// A request no drain refuses: OPTIONS without `[drain] options_503`,
    /// an esg request of no account (R-ESG-2), a service that is not
    /// refused at all.
    NotRefused,
}

impl OnPurpose {
    /// The metric's `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OnPurpose::SingleInstanceAccount => "single_instance_account",
            OnPurpose::Exception => "exception",
            OnPurpose::AllDraining => "all_draining",
            OnPurpose::InsideLeg => "inside_leg",
            OnPurpose::NotRefused => "not_refused",
        }
    }
}

/// The policy's verdict.
#[derive(Debug, Clone)]
pub(crate) enum Admission {
    /// Forward it; to a draining instance, with why it goes there anyway.
    Pass(Option<OnPurpose>),
    /// Answer on the instance's behalf.
    Refuse {
        /// The response.
        reply: Reply<'static>,
        /// The rule that decided, for logs and metrics (`R-SG-1`, ...).
        rule: &'static str,
    },
}

/// Drain policy of a site.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    retry_after: u32,
    jitter: u32,
    options_503: bool,
    exceptions: Vec<Vec<Exception>>,
    accounts: Vec<Account>,
    homes: Vec<Option<usize>>,
}

/// What the exception matchers look at in a request.
struct Subject<'a> {
    source: IpAddr,
    method: &'a [u8],
    /// Addresses of record the request is about: To for REGISTER, SUBSCRIBE
    /// and PUBLISH (what is registered or watched); From and To for the rest
    /// (who calls and who is called, so an exception for an emergency
    /// number lets calls *to* it through a draining instance).
    aors: [Option<(&'a [u8], Option<SipUri<'a>>)>; 2],
}

impl<'a> Subject<'a> {
    fn of(msg: &'a SipMessage, method: Method, source: IpAddr) -> Subject<'a> {
        let with_uri = |raw: Option<&'a [u8]>| raw.map(|r| (r, SipUri::parse(r)));
        let aors = match method {
            Method::Register | Method::Subscribe | Method::Publish => {
                [with_uri(msg.to_uri()), None]
            }
            _ => [with_uri(msg.from_uri()), with_uri(msg.to_uri())],
        };
        Subject {
            source,
            method: msg.method_bytes(),
            aors,
        }
    }

    fn matches(&self, e: &Exception) -> bool {
        if e.all {
            return true;
        }
        let about_aor = e.aor.is_some() || e.user.is_some() || e.domain.is_some();
        let aor_ok = !about_aor
            || self.aors.iter().flatten().any(|(raw, uri)| {
                let host = uri.as_ref().map(|u| u.host);
                let user = uri.as_ref().and_then(|u| u.user);
                e.domain
                    .as_ref()
                    .is_none_or(|d| host.is_some_and(|h| h.eq_ignore_ascii_case(d.as_bytes())))
                    && e.user.as_ref().is_none_or(|u| user == Some(u.as_bytes()))
                    && e.aor.as_ref().is_none_or(|a| same_aor(a.as_bytes(), raw))
            });
        aor_ok
            && e.source.is_none_or(|n| n.contains(&self.source))
            && e.method
                .as_ref()
                .is_none_or(|m| m.as_bytes().eq_ignore_ascii_case(self.method))
    }
}

/// AOR comparison: scheme and host case-insensitive, user exact, no params.
fn same_aor(configured: &[u8], got: &[u8]) -> bool {
    match (SipUri::parse(configured), SipUri::parse(got)) {
        (Some(a), Some(b)) => {
            a.secure == b.secure
                && a.user == b.user
                && a.host.eq_ignore_ascii_case(b.host)
                && a.port == b.port
        }
        _ => configured.eq_ignore_ascii_case(got),
    }
}

impl Policy {
    /// The policy of a site.
    pub(crate) fn new(config: &SiteConfig) -> Policy {
        let index = |id: &str| config.instances.iter().position(|i| i.id == id);
        Policy {
            retry_after: config.timers.retry_after_s,
            jitter: config.timers.retry_after_jitter_s,
            options_503: config.drain.options_503,
            exceptions: config
                .instances
                .iter()
                .map(|i| i.exceptions.clone())
                .collect(),
            homes: config
                .accounts
                .iter()
                .map(|a| a.home.as_deref().and_then(index))
                .collect(),
            accounts: config.accounts.clone(),
        }
    }

    /// The esg account a request belongs to, on a listener's leg: on the
    /// provider leg by source network or the From host; inside, by the
    /// Request-URI host (where the call goes).
    pub(crate) fn account(&self, leg: Leg, msg: &SipMessage, source: IpAddr) -> Option<usize> {
        let host_of = |b: Option<&[u8]>| b.and_then(SipUri::parse).map(|u| u.host.to_vec());
        let host = match leg {
            Leg::Provider => host_of(msg.from_uri()),
            Leg::Inside => host_of(msg.request_uri()),
            Leg::Subscriber => return None,
        };
        self.accounts.iter().position(|a| {
            (leg == Leg::Provider && ringsync::config::in_networks(source, &a.matcher.source))
                || host.as_ref().is_some_and(|h| {
                    a.matcher
                        .domain
                        .iter()
                        .any(|d| d.as_bytes().eq_ignore_ascii_case(h))
                })
        })
    }

    /// Whether `source`, on the provider leg, is a peer of an esg account
    /// by its source network: a trunk, one address carrying the account's
    /// calls (limited per account, not per source address; R-OV-2).
    pub(crate) fn trunk(&self, leg: Leg, source: IpAddr) -> bool {
        leg == Leg::Provider
            && self
                .accounts
                .iter()
                .any(|a| ringsync::config::in_networks(source, &a.matcher.source))
    }

    /// R-ESG-5: the home esg of a single-instance account, which a balancer
    /// keeps the account's traffic on, drain or not.
    pub(crate) fn home_instance(
        &self,
        listener: &ListenerCtx,
        msg: &SipMessage,
        source: IpAddr,
    ) -> Option<usize> {
        if listener.mode != Mode::Balance(Service::Esg) {
            return None;
        }
        let a = self.account(listener.leg, msg, source)?;
        if self.accounts[a].multi_instance {
            return None;
        }
        self.homes[a]
    }

    /// Decides whether a new dialog, registration or out-of-dialog request
    /// routed to instance `idx` goes through; a refusal is logged and
    /// counted.
    pub(crate) fn admit(
        &self,
        view: &DrainView,
        inbound: Inbound,
        listener: &ListenerCtx,
        idx: usize,
        (msg, method, class): (&SipMessage, Method, Class),
    ) -> Admission {
        let rule = match self.verdict(view, inbound, listener, idx, (msg, method, class)) {
            Ok(why) => return Admission::Pass(why),
            Err(rule) => rule,
        };
        tracing::info!(
            rule,
            instance = %view.instances()[idx].id,
            method = %String::from_utf8_lossy(msg.method_bytes()),
            call_id = %String::from_utf8_lossy(msg.call_id().unwrap_or_default()),
            source = %inbound.peer(),
            "refused new work for a draining instance with 503"
        );
        crate::metrics::refused(rule);
        self.refusal(rule, "Service Unavailable (draining)")
    }

    /// What [`Policy::admit`] decides, with no log and no count: `Ok` with
    /// why a draining instance gets it anyway, or `Err` with the rule that
    /// refuses it (R-SG-1, R-ESG-1).
    pub(crate) fn verdict(
        &self,
        view: &DrainView,
        inbound: Inbound,
        listener: &ListenerCtx,
        idx: usize,
        (msg, method, class): (&SipMessage, Method, Class),
    ) -> Result<Option<OnPurpose>, &'static str> {
        // Balance listeners steer instead of refusing (R-AA-1, R-AA-4):
        // the routing says why it picked a draining instance.
        if !matches!(listener.mode, Mode::Guard(_)) || !view.is_draining(idx) {
            return Ok(None);
        }
        if !drain_refuses(msg, method, class, self.options_503) {
            return Ok(Some(OnPurpose::NotRefused));
        }
        let source = inbound.peer().ip();
        let subject = Subject::of(msg, method, source);
        let service = &view.instances()[idx].service;
        if let Some(why) = self.exempt(listener, idx, service, msg, &subject) {
            return Ok(Some(why));
        }
        // R-SG-2: only if another instance can take the work.
        if !view.other_normal_up(idx) {
            return Ok(Some(OnPurpose::AllDraining));
        }
        Err(if *service == Service::Esg {
            "R-ESG-1"
        } else {
            "R-SG-1"
        })
    }

    /// R-GW-1: while the gate itself is not serving (starting, stopping),
    /// new work as R-SG-1 refuses it gets 503 with Retry-After whatever
    /// instance it is for, the refusal's rule naming the phase (`stopping`,
    /// `starting`); everything else passes.
    pub(crate) fn not_serving(
        &self,
        phase: Phase,
        msg: &SipMessage,
        method: Method,
        class: Class,
    ) -> Admission {
        if !drain_refuses(msg, method, class, self.options_503) {
            return Admission::Pass(None);
        }
        // `why` is the requests' outcome label; the refusal counter's label
        // is the rule, and a gate still loading its view breaks none.
        let (why, counted, reason) = match phase {
            Phase::Starting => ("starting", "starting", "Service Unavailable (starting)"),
            _ => ("stopping", "R-GW-1", "Service Unavailable (stopping)"),
        };
        tracing::debug!(why, "refused new work: the gate is not serving");
        crate::metrics::refused(counted);
        self.refusal(why, reason)
    }

    /// Why new work for draining instance `idx` passes anyway, if it does:
    /// an esg away from the provider leg or for a single-instance account
    /// (R-ESG-1, R-ESG-2), an exception (R-SG-3, R-ESG-3), or a service that
    /// is not refused at all.
    fn exempt(
        &self,
        listener: &ListenerCtx,
        idx: usize,
        service: &Service,
        msg: &SipMessage,
        subject: &Subject<'_>,
    ) -> Option<OnPurpose> {
        match service {
            Service::Esg => {
                // R-ESG-1: only on the leg that faces providers.
                if listener.leg != Leg::Provider {
                    return Some(OnPurpose::InsideLeg);
                }
                // R-ESG-2: only for multi-instance accounts.
                let Some(a) = self.account(listener.leg, msg, subject.source) else {
                    return Some(OnPurpose::NotRefused);
                };
                let account = &self.accounts[a];
                if !account.multi_instance {
                    return Some(OnPurpose::SingleInstanceAccount);
                }
                // R-ESG-3: account exceptions.
                if account.exceptions.iter().any(|e| subject.matches(e)) {
                    return Some(OnPurpose::Exception);
                }
            }
            Service::Sg => {}
            _ => return Some(OnPurpose::NotRefused),
        }
        // R-SG-3 / R-ESG-3: exceptions of the instance.
        self.exceptions
            .get(idx)
            .is_some_and(|ex| ex.iter().any(|e| subject.matches(e)))
            .then_some(OnPurpose::Exception)
    }

    /// The 503 of a refusal, with Retry-After (R-SG-5) and jitter so a
    /// drained population does not come back at one instant.
    fn refusal(&self, rule: &'static str, reason: &'static str) -> Admission {
        Admission::Refuse {
            reply: self.unavailable(reason),
            rule,
        }
    }

    /// A 503 with `reason` and the configured Retry-After (`[timers]
    /// retry_after_s`, plus up to `retry_after_jitter_s`).
    pub(crate) fn unavailable(&self, reason: &'static str) -> Reply<'static> {
        let jitter = if self.jitter == 0 {
            0
        } else {
            rand::rng().random_range(0..=self.jitter)
        };
        Reply {
            code: 503,
            reason: Some(reason),
            retry_after: Some(self.retry_after + jitter),
            extra: &[],
        }
    }
}

/// R-SG-1: of the new work `class` says a request is (R-SEC-4), what a
/// drain refuses: REGISTER, SUBSCRIBE and INVITE that start something new.
/// Removing a binding or ending a subscription is cleanup; OPTIONS is
/// refused only when the operator says so (providers pick trunks by it);
/// any other method passes (a BYE the gate cannot place in a dialog still
/// ends one at the instance).
pub(crate) fn drain_refuses(
    msg: &SipMessage,
    method: Method,
    class: Class,
    options_503: bool,
) -> bool {
    if !class.is_new() {
        return false;
    }
    match method {
        Method::Register => !is_deregister(msg),
        Method::Subscribe => msg.expires() != Some(0),
        Method::Invite => true,
        Method::Options => options_503,
        _ => false,
    }
}

/// `Expires: 0`, `Contact: *`, or every contact with `expires=0`.
fn is_deregister(msg: &SipMessage) -> bool {
    let contacts = msg.contacts();
    if contacts.iter().any(|c| c.star) {
        return true;
    }
    if contacts.is_empty() {
        // A fetch of bindings: harmless, but it is not new work either.
        return true;
    }
    contacts.iter().all(|c| match c.expires {
        Some(e) => e == 0,
        None => msg.expires() == Some(0),
    })
}
