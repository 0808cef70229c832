//! Test helpers: the model's (a small site, stand-in nodes serving work
//! reports, etcd) plus the operator plane's own: the `ringsync` binary
//! serving ([`served`]) and the handover's members ([`handover`]).

#[path = "../../../../ringsync/tests/all/common/mod.rs"]
mod model;

pub use model::*;

// The model's etcd helpers (not a module of the model's `common`, whose
// embedded-store tests build without ringsync's `etcd` feature);
// ringsync-ops always links the etcd store.
#[path = "../../../../ringsync/tests/all/common/etcd.rs"]
pub mod etcd;

pub mod engines;
pub mod handover;
pub mod served;
