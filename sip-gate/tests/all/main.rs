//! sip-gate's integration tests, one binary so the suite links once (issue
//! 42). Each module was a test file (or, for `core_rules` and `torture`, a
//! test binary) of its own and keeps its tests' names under the module's:
//! `cargo test -p sip-gate --test all edge_policy::` runs one. A filter
//! matches anywhere in a name: `tls::` also runs `core_rules::tls::` (as
//! `dns::`, `gate_stop::` and `rfc_edges::` do their `core_rules` topics).
//!
//! The modules now share a process and run side by side: each keeps its own
//! loopback net (the one its docs name; no two modules share one), and none
//! sets environment variables, the current directory, resource limits or
//! any other process-wide state (`fd_limit` sets its limit on the gate's
//! process through `prlimit`, signals go to the gates' processes).
//!
//! Shared helpers: `common` and `policy`; `tls::peer` (a TLS client and
//! server) is used by the `ws*` modules too, `ws::ua` (a SIP-over-WebSocket
//! user agent) by `ws_pool` and `flow_cancel`. The Kamailio registrar's
//! config the tests start stays in `tests/kamailio/`.

mod common;
mod policy;

mod anycast;
mod backup;
mod capture;
mod cli;
mod config_errors;
mod core_props;
mod core_rules;
mod dns;
mod e2e;
mod edge_bans;
mod edge_policy;
mod edge_refused;
mod faults;
mod fd_limit;
mod flow_cancel;
mod fuzz_props;
mod gate_stop;
mod hostile;
mod multi_node;
mod node;
mod reload;
mod restart;
mod rfc_edges;
mod sipp_drain;
mod sipp_nat;
mod sipp_overload;
mod sipp_proxy;
mod sipp_work;
mod tcp_overload;
mod tls;
mod torture;
mod transport;
mod udp_workers;
mod unreachable;
mod upgrade;
mod upgrade_kill;
mod upgrade_measure;
mod upgrade_rolling;
mod upgrade_status;
mod upgrade_tls;
mod upgrade_ws;
mod wait_drained;
mod ws;
mod ws_browser;
mod ws_pool;
