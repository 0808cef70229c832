//! sip-gate: a drain-aware inline SIP proxy over UDP and TCP.
//!
//! Layers, one per module: [`frame`] (stream framing) → [`message`] (a
//! zero-copy view of a message) → [`edit`] (splicing the headers a proxy must
//! edit) → [`proxy`] (the routing core: one message in, one action out) with
//! [`policy`] (the drain rules) and [`txn`] (the short transaction table) →
//! [`transport`] (sockets) → [`Gate`] (wiring, with a shutdown token).
#![forbid(unsafe_code)]

// === SIP message layer (pure code, no I/O): framing, message view, splicing ===
pub mod edit;
pub mod frame;
pub mod message;

pub use edit::{EditError, Splice};
pub use frame::{Frame, FrameError};
pub use message::{
    ContactView, HeaderField, HeaderName, Method, NameAddr, ParseError, SipMessage, StartLine, Via,
};
// === end SIP message layer ===

// === proxy: routing core, drain policy, transport, admin ===
pub mod admin;
pub mod health;
pub mod metrics;
pub mod policy;
pub mod proxy;
pub mod reply;
pub mod token;
pub mod transport;
pub mod txn;
pub mod uri;
pub mod work;

mod gate;
pub use gate::{Gate, GateError};
