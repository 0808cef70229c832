//! sip-gate: a drain-aware inline SIP proxy over UDP, TCP and TLS.
//!
//! Layers, bottom up, each depending only on the ones before it:
//! [`frame`] (stream framing) and the message view ([`SipMessage`]) on a
//! shared lexer → splicing ([`Splice`]) → the gate's keys, Record-Route
//! tokens ([`TokenKey`]) and Via branches → the listener table, sender
//! recognition, drain policy, transaction table and work book → the routing
//! core ([`Core`]: one message in, one [`Action`] out) → sockets → [`Gate`]
//! (wiring, with a shutdown token) and [`admin`] (HTTP); beside them
//! [`announce`], the program ExaBGP runs to announce the gate while ready.
#![warn(unreachable_pub)]

// === SIP message layer (pure code, no I/O): framing, message view, splicing ===
mod datagram;
mod digits;
mod edit;
pub mod frame;
mod lex;
mod message;
mod uri;

pub use edit::{EditError, Splice};
pub use frame::{Frame, FrameError};
pub use message::{
    ContactView, HeaderField, HeaderName, Method, NameAddr, ParseError, SipMessage, StartLine, Via,
};

// === the routing core: keys, site tables, policy, state, decisions ===
mod backup;
mod ban;
mod branch;
pub mod cli;
mod dns;
mod flow;
mod health;
mod keys;
mod lifecycle;
mod listener;
mod metrics;
mod newwork;
mod origin;
mod overload;
mod policy;
mod proxy;
mod reach;
mod reply;
mod site;
mod token;
mod txn;
mod work;

pub use dns::{DnsAnswer, DnsFailure, DnsQuery, DnsResult, SrvTarget};
pub use lifecycle::{Lifecycle, Phase};
pub use proxy::{Action, Core, CoreError, Out};
pub use token::{TokenError, TokenKey};
pub use txn::{ConnId, Inbound};
pub use work::{SnapshotError, WorkBook, WorkSnapshot};

// === I/O: sockets, wiring, admin HTTP, the anycast announcer ===
pub use ban::BanInfo;
pub mod admin;
pub mod announce;
mod gate;
pub mod node;
pub mod reload;
pub mod run;
mod transport;
pub mod upgrade;
mod view_log;

pub use gate::{Drained, Gate, GateError};
pub use transport::{BindError, SocketKind, TlsReload};
