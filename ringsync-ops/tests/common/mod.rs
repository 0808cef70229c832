//! Test helpers: the model's (a small site, stand-in nodes serving work
//! reports, etcd) plus the operator plane's own: the `ringsync` binary
//! serving ([`served`]) and the handover's members ([`handover`]).
#![allow(dead_code)]

#[path = "../../../ringsync/tests/common/mod.rs"]
mod model;

pub use model::*;

pub mod engines;
pub mod handover;
pub mod served;
