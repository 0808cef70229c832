//! Every routing and drain rule, proved on the forwarding core itself.
//!
//! No sockets and no SIPp: each test builds a small site from TOML, drains
//! servers by setting profiles on a [`DrainState`], sets health, then feeds
//! hand-written SIP messages to [`Core::handle`] and checks the [`Action`] it
//! returns: where the message goes and the exact bytes (parsed back with
//! [`SipMessage::parse`]: Via, Route, Record-Route, Max-Forwards, body).
//!
//! Test names carry the rule id they prove (docs/rules.md maps rules to
//! code and tests); `fwd_*` tests prove the proxy behaviour of RFC 3261
//! 16.6 and RFC 3581. One module per topic; `site` and `sip` are the shared
//! helpers.
//!
//! The site (indexes as in the file):
//!
//! | # | instance | server | sip            |
//! |---|----------|--------|----------------|
//! | 0 | sg-a     | srv-a  | 127.0.1.1:5060 |
//! | 1 | sg-b     | srv-b  | 127.0.1.2:5060 |
//! | 2 | sg-c     | srv-c  | 127.0.1.3:5060 |
//! | 3 | esg-a    | srv-a  | 127.0.2.1:5060 |
//! | 4 | esg-b    | srv-b  | 127.0.2.2:5060 |
//!
//! | # | listener    | bind           | mode             | leg        |
//! |---|-------------|----------------|------------------|------------|
//! | 0 | sg-bal      | 127.0.0.1:5060 | balance sg       | subscriber |
//! | 1 | sg-a-guard  | 127.0.0.1:5061 | guard sg-a       | subscriber |
//! | 2 | esg-bal     | 127.0.0.1:5070 | balance esg      | provider   |
//! | 3 | esg-a-guard | 127.0.0.1:5071 | guard esg-a      | provider   |
//! | 4 | esg-a-in    | 127.0.0.1:5072 | guard esg-a      | inside     |
//!
//! esg accounts: `carrier-x` (multi-instance, 192.0.2.0/24, exception for the
//! user `noc`), `carrier-y` (single-instance, 198.51.100.0/24, home esg-a).

mod sip;
mod site;
mod work_flow;

mod bad_input;
mod balance;
mod dns;
mod drain_esg;
mod drain_sg;
mod forwarding;
mod gate_stop;
mod in_dialog;
mod nat;
mod overload;
mod responses;
mod rfc_edges;
mod security;
mod tls;
mod transactions;
mod work_bindings;
mod work_calls;
mod work_known;

/// What every topic module uses.
mod prelude {
    pub use std::time::Instant;

    pub use bytes::Bytes;
    pub use ringsync::view::Health;
    pub use sip_gate::{Action, HeaderName, Inbound, Out, SipMessage, TokenKey};

    pub use super::sip::*;
    pub use super::site::*;
}
