//! R-SEC-4: the one definition of new work, which every decision at the
//! edge uses (overload, access lists, bans, drains, routing).
//!
//! A request without a To tag starts something. A To tag is something a
//! client writes, so it proves nothing by itself: a request with one is
//! inside a dialog only when the gate can tell that it is. It can when
//! the request carries the gate's own Record-Route token that opens for
//! its Call-ID ([`crate::token`]), when its dialog (Call-ID and both tags)
//! is one the gate's work book holds, or when a configured instance sends
//! it (the operator vouches for the instances). REGISTER is new work
//! whatever it carries. Everything else from
//! outside is new work and is judged as such: the access list, the ban,
//! the per-source limit, the drain. ACK and CANCEL that follow a
//! transaction the gate holds go where their INVITE went before this is
//! asked (RFC 3261 16.10, 17.2.1); any other ACK or CANCEL is new work too.

use crate::message::{Method, SipMessage};

/// What a message is to every rule that refuses work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// A response: never refused.
    Response,
    /// A request the gate knows to be inside a dialog: never refused for
    /// being new (R-SG-4, R-OV-1).
    InDialog,
    /// Any other request: new work, the first to be refused.
    NewDialog,
    /// A REGISTER, with or without a To tag: new work of its own class
    /// (its own capacity and per-source allowance, R-OV-1).
    Register,
}

impl Class {
    /// New work: what overload limits, access lists, bans and drains judge.
    pub(crate) fn is_new(self) -> bool {
        matches!(self, Class::NewDialog | Class::Register)
    }
}

/// The judgement (R-SEC-4): `method` is `None` for a response; `proven`
/// says whether the request has a To tag and is known to be inside a
/// dialog (see [`Proof`]).
pub(crate) fn judge(method: Option<Method>, proven: bool) -> Class {
    match method {
        None => Class::Response,
        Some(Method::Register) => Class::Register,
        Some(_) if proven => Class::InDialog,
        Some(_) => Class::NewDialog,
    }
}

/// What a request shows of a dialog the gate can vouch for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Proof {
    /// It carries the gate's own token, valid for its Call-ID.
    pub(crate) token: bool,
    /// It has a To tag and its dialog is in the gate's work book.
    pub(crate) dialog: bool,
    /// It has a To tag and a configured instance sent it.
    pub(crate) instance: bool,
}

impl Proof {
    /// Whether anything proves the dialog.
    pub(crate) fn any(self) -> bool {
        self.token || self.dialog || self.instance
    }
}

/// What a scanned message claims to be, before the core has checked any
/// proof: a To tag, ACK and CANCEL claim a dialog. The UDP intake orders a
/// batch by it (R-OV-1: a BYE does not wait behind INVITEs) and nothing
/// else: no request is admitted or refused by a claim, the core judges
/// each one with [`judge`] before any rule applies.
pub(crate) fn claimed(msg: &SipMessage) -> Class {
    match msg.method() {
        None => Class::Response,
        Some(Method::Register) => Class::Register,
        Some(Method::Ack | Method::Cancel) => Class::InDialog,
        Some(_) if msg.to_tag().is_some() => Class::InDialog,
        Some(_) => Class::NewDialog,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METHODS: [Method; 6] = [
        Method::Invite,
        Method::Bye,
        Method::Ack,
        Method::Cancel,
        Method::Subscribe,
        Method::Other,
    ];

    #[test]
    fn r_sec_4_only_a_proven_dialog_is_not_new_work() {
        for m in METHODS {
            assert_eq!(judge(Some(m), false), Class::NewDialog, "{m:?}");
            assert_eq!(judge(Some(m), true), Class::InDialog, "{m:?}");
        }
        assert_eq!(judge(None, false), Class::Response);
    }

    #[test]
    fn r_sec_4_register_is_always_new_work() {
        assert_eq!(judge(Some(Method::Register), true), Class::Register);
        assert_eq!(judge(Some(Method::Register), false), Class::Register);
        assert!(Class::Register.is_new() && Class::NewDialog.is_new());
        assert!(!Class::InDialog.is_new() && !Class::Response.is_new());
    }

    #[test]
    fn r_sec_4_any_one_proof_proves() {
        assert!(!Proof::default().any());
        for p in [
            Proof {
                token: true,
                ..Proof::default()
            },
            Proof {
                dialog: true,
                ..Proof::default()
            },
            Proof {
                instance: true,
                ..Proof::default()
            },
        ] {
            assert!(p.any(), "{p:?}");
        }
    }
}
